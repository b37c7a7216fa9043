use model::{LogitsProcessor, SampleScratch, Sampler, SamplingParams};
use tokenizer::{Tokenizer, Vocab, VocabModel};

use super::*;

const EOS: u32 = 2;

/// A small SPM vocabulary: `<unk> <s> </s>`, then single characters and a few merged pieces,
/// so the same text has several tokenizations.
fn tiny() -> Tokenizer {
    let pieces = [
        "{", "}", "\"", ":", ",", "▁", "a", "b", "c", "1", "2", "x", "{\"", "\":", "ab", "12",
        "true", "false", "[", "]", "}}",
    ];
    vocab(&pieces, 0)
}

/// `<unk> <s> </s>` then `pieces` (ids from 3), the first `control` of them control tokens.
fn vocab(pieces: &[&str], control: usize) -> Tokenizer {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    tokens.extend(pieces.iter().map(|p| p.to_string()));
    let mut v = Vocab::new(VocabModel::Spm, tokens);
    v.token_types = (0..v.tokens.len())
        .map(|i| match i {
            0 => 2,
            1 | 2 => 3,
            _ if i < 3 + control => 3,
            _ => 1,
        })
        .collect();
    v.scores = vec![0.0; v.tokens.len()];
    v.add_space_prefix = false;
    Tokenizer::from_vocab(&v).expect("valid test vocabulary")
}

/// Pseudo-random logits (xorshift), `extra` ids past the vocabulary like a padded model row.
fn logits(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 1000) as f32 / 100.0
        })
        .collect()
}

/// Samples up to `max` tokens under `c` from random logits; returns the text and whether an
/// end-of-generation token ended it.
fn generate(t: &Tokenizer, c: &CompiledConstraint, seed: u64, max: usize) -> (String, bool) {
    let params = SamplingParams {
        temperature: 1.0,
        seed: Some(seed),
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(params, seed);
    sampler.push_processor(Box::new(c.processor()));
    let mut scratch = SampleScratch::default();
    let mut out = Vec::new();
    for step in 0..max {
        let row = logits(seed * 1000 + step as u64, t.vocab_size() + 5);
        let tok = sampler.sample(&row, &mut scratch);
        sampler.accept(tok);
        if t.is_eog(tok) {
            return (t.decode(&out, true), true);
        }
        assert!((tok as usize) < t.vocab_size(), "a padded id was drawn");
        out.push(tok);
    }
    (t.decode(&out, true), false)
}

#[test]
fn random_draws_under_a_json_schema_always_give_a_valid_instance() {
    let t = tiny();
    let g = Grammars::new(t.clone());
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
        "required": ["a", "b"],
        "additionalProperties": false
    });
    let c = g
        .compile(&Constraint::JsonSchema(schema))
        .expect("compiles");
    for seed in 1..40 {
        let (text, ended) = generate(&t, &c, seed, 200);
        assert!(ended, "seed {seed}: no end within 200 tokens: {text:?}");
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("seed {seed}: {text:?} is not JSON: {e}"));
        // An integer (any size: the schema sets no bound, so it can exceed i64).
        let a = text
            .split("\"a\": ")
            .nth(1)
            .and_then(|r| r.split([',', '}']).next());
        let digits = a.map(|a| a.trim_start_matches('-'));
        assert!(v["a"].is_number(), "seed {seed}: {text}");
        assert!(
            digits.is_some_and(|d| d.bytes().all(|c| c.is_ascii_digit())),
            "{text}"
        );
        assert!(v["b"].is_boolean(), "seed {seed}: {text}");
        assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{text}");
    }
}

#[test]
fn a_choice_gives_exactly_one_of_the_strings() {
    let t = tiny();
    let g = Grammars::new(t.clone());
    let choices = vec!["ab".to_string(), "abc".into(), "x1".into()];
    let c = g
        .compile(&Constraint::Choice(choices.clone()))
        .expect("compiles");
    for seed in 1..30 {
        let (text, ended) = generate(&t, &c, seed, 20);
        assert!(ended && choices.contains(&text), "seed {seed}: {text:?}");
    }
}

#[test]
fn a_regex_bounds_the_output() {
    let t = tiny();
    let g = Grammars::new(t.clone());
    let c = g
        .compile(&Constraint::Regex("a[bc]{2,3}1".into()))
        .expect("compiles");
    for seed in 1..30 {
        let (text, ended) = generate(&t, &c, seed, 20);
        let ok = text.len() >= 4
            && text.starts_with('a')
            && text.ends_with('1')
            && text[1..text.len() - 1]
                .chars()
                .all(|ch| ch == 'b' || ch == 'c');
        assert!(
            ended && ok && (4..=5).contains(&text.len()),
            "seed {seed}: {text:?}"
        );
    }
}

#[test]
fn a_complete_grammar_allows_only_end_of_generation() {
    let t = tiny();
    let g = Grammars::new(t.clone());
    let c = g
        .compile(&Constraint::Choice(vec!["ab".into()]))
        .expect("compiles");
    let mut m = c.processor();
    let ab = t.token_to_id("ab").expect("ab");
    assert!(
        m.allows(ab) && !m.allows(EOS),
        "an empty output is not a match"
    );
    m.accept(ab);
    assert!(m.allows(EOS));
    let mut row = vec![1.0f32; t.vocab_size() + 3];
    m.prepare();
    m.apply(&mut row);
    let allowed: Vec<usize> = (0..row.len()).filter(|&i| row[i].is_finite()).collect();
    assert_eq!(allowed, vec![EOS as usize], "only </s> after the match");
}

#[test]
fn a_drafted_token_the_grammar_forbids_is_rejected_and_ends_the_draft() {
    let t = tiny();
    let g = Grammars::new(t.clone());
    let c = g
        .compile(&Constraint::Regex("a+b".into()))
        .expect("compiles");
    let mut sampler = Sampler::new(SamplingParams::default(), 1);
    sampler.push_processor(Box::new(c.processor()));
    let [a, b, x] = ["a", "b", "x"].map(|p| t.token_to_id(p).expect("piece"));
    let vocab = t.vocab_size();
    // Three rows: the model prefers `a`, then `x` (forbidden), then `b`.
    let mut rows = vec![0.0f32; 3 * vocab];
    rows[a as usize] = 9.0;
    rows[vocab + x as usize] = 9.0;
    rows[vocab + b as usize] = 5.0;
    rows[2 * vocab + b as usize] = 9.0;
    let mut scratch = SampleScratch::default();
    let drawn = crate::draw::verify(&mut sampler, &rows, vocab, &[a, x], None, &mut scratch);
    let tokens: Vec<u32> = drawn.iter().map(|d| d.0).collect();
    // `a` agrees with the draft; at the next row `x` is masked, the draw gives `b`, which
    // disagrees with the draft: the step ends there with the grammar at `ab`.
    assert_eq!(tokens, vec![a, b]);
    let row = vec![0.0f32; vocab];
    let next = sampler.sample(&row, &mut scratch);
    assert_eq!(
        next, EOS,
        "`ab` is complete: only end of generation follows"
    );
}

#[test]
fn what_llguidance_cannot_compile_is_an_error_that_names_it() {
    let g = Grammars::new(tiny());
    for (c, needle) in [
        (Constraint::Regex("a(b".into()), "regex"),
        (
            Constraint::Lark("start: undefined_rule".into()),
            "undefined_rule",
        ),
        (
            Constraint::JsonSchema(serde_json::json!({"type": "strnig"})),
            "strnig",
        ),
        (Constraint::Choice(Vec::new()), "empty"),
    ] {
        let e = g.compile(&c).expect_err("must not compile");
        assert!(e.to_lowercase().contains(needle), "{c:?}: {e}");
    }
}

#[test]
fn compiled_constraints_are_cached_by_their_text() {
    let g = Grammars::new(tiny());
    let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let c = Constraint::JsonSchema(schema.clone());
    g.compile(&c).expect("compiles");
    g.compile(&Constraint::JsonSchema(schema))
        .expect("compiles");
    g.compile(&Constraint::JsonObject).expect("compiles");
    let s = g.stats();
    assert_eq!(s.compiled.load(Relaxed), 2);
    assert_eq!(s.cache_hits.load(Relaxed), 1);
}

#[test]
fn a_warmed_vocabulary_is_not_waited_for() {
    let g = Arc::new(Grammars::new(tiny()));
    assert!(!g.stats().vocab_ready.load(Relaxed));
    let warm = g.clone();
    std::thread::spawn(move || warm.warm())
        .join()
        .expect("warms");
    assert!(g.stats().vocab_ready.load(Relaxed));
    g.compile(&Constraint::JsonObject).expect("compiles");
    assert_eq!(g.stats().vocab_waits.load(Relaxed), 0);
    // Without the warm-up, the first compilation waits for the index (once).
    let cold = Grammars::new(tiny());
    cold.compile(&Constraint::JsonObject).expect("compiles");
    cold.compile(&Constraint::Regex("a+".into()))
        .expect("compiles");
    assert_eq!(cold.stats().vocab_waits.load(Relaxed), 1);
    assert!(cold.stats().vocab_ready.load(Relaxed));
}

/// A vocabulary whose texts spell `<think>` both whole and in pieces, with `<|end|>`
/// as a control token (id 3).
fn think_vocab() -> Tokenizer {
    let pieces = [
        "<|end|>", "<think>", "</think>", "<", "/", "think", ">", "\n", " ", "a", "b", "c", "1",
        "{", "}", "\"", ":", "{\"", "\":",
    ];
    vocab(&pieces, 1)
}

/// Whether the grammar takes these pieces in turn and then allows the end.
fn takes(t: &Tokenizer, c: &CompiledConstraint, pieces: &[&str]) -> bool {
    let mut m = c.processor();
    for p in pieces {
        let id = t.token_to_id(p).expect("a piece of the vocabulary");
        if !m.allows(id) {
            return false;
        }
        m.accept(id);
    }
    m.allows(EOS)
}

const THINK_LEAD: &str = "lead: (\"<think>\" thought WS?)?\n\
     thought[suffix=\"</think>\"]: /(?s:.*)/\n\
     WS: /[ \\n]+/";

#[test]
fn a_grammar_after_a_lead_holds_the_answer_and_not_the_lead() {
    let t = think_vocab();
    let g = Grammars::new(t.clone());
    let schema = serde_json::json!({
        "type": "object", "properties": {"a": {"type": "integer"}},
        "required": ["a"], "additionalProperties": false
    });
    let c = g
        .compile(&Constraint::After {
            lead: THINK_LEAD.into(),
            then: Box::new(Constraint::JsonSchema(schema)),
        })
        .expect("compiles");
    let answer = ["{\"", "a", "\":", " ", "1", "}"];
    let with = |lead: &[&'static str]| [lead, &answer[..]].concat();
    // No thinking at all; thinking spelled by one token or by pieces, holding what JSON forbids.
    assert!(takes(&t, &c, &answer));
    assert!(takes(
        &t,
        &c,
        &with(&["<think>", "a", "{", "}", "</think>", "\n", "\n"])
    ));
    assert!(takes(
        &t,
        &c,
        &with(&["<", "think", ">", "b", "<", "/", "think", ">"])
    ));
    // The answer is still held: free text after the thinking, or a bad object, is refused.
    assert!(!takes(&t, &c, &["<think>", "a", "</think>", "b"]));
    assert!(!takes(&t, &c, &with(&["a"])));
    assert!(!takes(&t, &c, &["<think>", "a", "</think>", "{\"", "b"]));
    // An unclosed thought is not a complete reply.
    assert!(!takes(
        &t,
        &c,
        &["<think>", "a", "{\"", "a", "\":", " ", "1", "}"]
    ));
}

#[test]
fn a_lead_may_end_at_a_control_token() {
    let t = think_vocab();
    let g = Grammars::new(t.clone());
    let c = g
        .compile(&Constraint::After {
            lead: "lead: /(?s:.*)/ <[3]>".into(),
            then: Box::new(Constraint::Regex("a[bc]+".into())),
        })
        .expect("compiles");
    assert!(takes(&t, &c, &["c", "<", "1", "<|end|>", "a", "b"]));
    assert!(takes(&t, &c, &["<|end|>", "a", "c"]));
    assert!(!takes(&t, &c, &["a", "b"]), "the lead's end is required");
    assert!(!takes(&t, &c, &["<|end|>", "b"]));
}

#[test]
fn a_lead_and_its_answer_are_cached_together() {
    let g = Grammars::new(think_vocab());
    let after = |rx: &str| Constraint::After {
        lead: THINK_LEAD.into(),
        then: Box::new(Constraint::Regex(rx.into())),
    };
    g.compile(&after("a+")).expect("compiles");
    g.compile(&after("a+")).expect("compiles");
    g.compile(&after("b+")).expect("compiles");
    g.compile(&Constraint::Regex("a+".into()))
        .expect("compiles");
    assert_eq!(g.stats().compiled.load(Relaxed), 3);
    assert_eq!(g.stats().cache_hits.load(Relaxed), 1);
}
