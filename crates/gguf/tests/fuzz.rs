//! Property-based fuzzing of the parser: on any input it returns `Ok` or `Err`, never
//! panics, and whatever it accepts satisfies the invariants `GgufFile` relies on.

mod common;

use common::{sample_writer, Raw};
use gguf::parse;
use proptest::prelude::*;
use proptest::sample::Index;

/// Parses `bytes`; on success checks that every tensor is aligned and inside the input.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(p) = parse(bytes) {
        prop_assert!(p.alignment.is_power_of_two());
        prop_assert_eq!(p.data_offset % p.alignment, 0);
        for t in &p.tensors {
            prop_assert_eq!(t.offset % p.alignment as u64, 0);
            let end = p.data_offset as u64 + t.offset + t.n_bytes as u64;
            prop_assert!(end <= bytes.len() as u64, "{} ends at {end}", t.name);
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(Index, u8),
    /// Overwrites 8 bytes with an interesting u64, to hit length and count fields.
    Word(Index, u64),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
    Truncate(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u32::MAX as u64),
        Just(1 << 63),
        0u64..300
    ];
    prop_oneof![
        4 => (any::<Index>(), 1u8..).prop_map(|(i, x)| Mutation::Flip(i, x)),
        2 => (any::<Index>(), word).prop_map(|(i, w)| Mutation::Word(i, w)),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match m {
        Mutation::Flip(i, x) => {
            let i = i.index(bytes.len());
            bytes[i] ^= x;
        }
        Mutation::Word(i, w) => {
            let i = i.index(bytes.len());
            let end = (i + 8).min(bytes.len());
            bytes[i..end].copy_from_slice(&w.to_le_bytes()[..end - i]);
        }
        Mutation::Insert(i, b) => {
            let i = i.index(bytes.len() + 1);
            bytes.splice(i..i, b.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let i = i.index(bytes.len());
            let end = (i + n).min(bytes.len());
            bytes.drain(i..end);
        }
        Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
    }
}

/// Cases per property: 1000 keeps the suite fast; set `GGUF_FUZZ_CASES` for a longer hunt.
fn cases() -> u32 {
    std::env::var("GGUF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes)?;
    }

    #[test]
    fn random_bodies_after_a_valid_preamble_never_panic(
        n_tensors in 0u64..4,
        n_kv in 0u64..4,
        body in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut r = Raw::header(3, n_tensors, n_kv);
        r.0.extend_from_slice(&body);
        check(&r.0)?;
    }

    #[test]
    fn mutated_valid_files_never_panic(mutations in prop::collection::vec(mutation(), 1..6)) {
        let mut bytes = sample_writer().write_to_vec();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check(&bytes)?;
    }
}
