//! Batch invariance: a sequence's logits are bit-identical whether it runs alone or in a ragged
//! batch with other sequences (prefills and decodes of other lengths, in any order). This is
//! what makes outputs reproducible under continuous batching.
// Full tier only: reads real model files (`--features real-models`, scripts/test.sh fetches them).
#![cfg(feature = "real-models")]

mod common;

use model::{LogitsWanted, Session};

#[test]
fn logits_are_bit_identical_alone_and_in_a_ragged_batch() {
    let m = model::load(&common::default_model_path(), 2).expect("default model loads");
    let (tok, mut tf) = (m.tokenizer, m.transformer);
    let vocab = tf.config().vocab_size;
    let a = tok.encode(
        "The quick brown fox jumps over the lazy dog because",
        true,
        false,
    );
    let b = tok.encode(
        "In a village of La Mancha, the name of which I have no desire to call to mind, there \
         lived not long since one of those gentlemen that keep a lance in the lance-rack",
        true,
        false,
    );
    let c = tok.encode("fn main() {", true, false);

    // Alone: A's prompt, then three decode steps.
    let mut alone = Session::new(&tf, 1, 128, 16);
    let mut logits = Vec::new();
    alone
        .run(&mut tf, &[(0, &a, LogitsWanted::All)], &mut logits)
        .expect("runs");
    let mut expect = vec![logits.clone()];
    let next = [17u32, 2000, 9];
    for t in next {
        alone
            .run(&mut tf, &[(0, &[t], LogitsWanted::All)], &mut logits)
            .expect("runs");
        expect.push(logits.clone());
    }

    // Batched: A shares every step with other sequences, placed first, in the middle, or last.
    let mut batched = Session::new(&tf, 3, 128, 16);
    batched
        .run(&mut tf, &[(2, &c, LogitsWanted::Last)], &mut logits)
        .expect("runs");
    batched
        .run(
            &mut tf,
            &[
                (1, &b[..20], LogitsWanted::None),
                (0, &a, LogitsWanted::All),
                (2, &[5], LogitsWanted::Last),
            ],
            &mut logits,
        )
        .expect("runs");
    let a_rows = &logits[0..a.len() * vocab];
    assert!(
        a_rows == &expect[0][..],
        "prompt logits differ when batched"
    );
    let others: [&[u32]; 3] = [&b[20..30], &b[30..31], &b[31..]];
    for (step, t) in next.into_iter().enumerate() {
        let (tt, seven, eight) = ([t], [7u32], [8u32]);
        let work: Vec<(usize, &[u32], LogitsWanted)> = match step {
            0 => vec![
                (0, &tt[..], LogitsWanted::All),
                (1, others[0], LogitsWanted::All),
            ],
            1 => vec![
                (1, others[1], LogitsWanted::Last),
                (2, &seven[..], LogitsWanted::Last),
                (0, &tt[..], LogitsWanted::All),
            ],
            _ => vec![
                (2, &eight[..], LogitsWanted::Last),
                (0, &tt[..], LogitsWanted::All),
                (1, others[2], LogitsWanted::Last),
            ],
        };
        batched.run(&mut tf, &work, &mut logits).expect("runs");
        // Find A's row: rows come in the order of `work`.
        let mut row = 0;
        for &(s, toks, w) in &work {
            if s == 0 {
                break;
            }
            row += match w {
                LogitsWanted::None => 0,
                LogitsWanted::Last => 1,
                LogitsWanted::All => toks.len(),
            };
        }
        let got = &logits[row * vocab..(row + 1) * vocab];
        assert!(
            got == &expect[step + 1][..],
            "decode step {step}: logits differ when batched"
        );
    }
}
