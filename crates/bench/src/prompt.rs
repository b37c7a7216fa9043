//! Deterministic synthetic prompts of roughly a requested number of tokens.
//!
//! Design: a prompt is a run of words drawn from a fixed list of common, short English words, each of
//! which is a single token (with its leading space) in the usual SentencePiece and BPE vocabularies
//! (Gemma, Llama, Qwen, GPT-2 style), so `n` words come out as roughly `n` tokens whatever the server
//! (checked against Gemma 3's tokenizer: every word is one token; 250 words + BOS = 251 tokens).
//! Words are drawn by a small seeded generator (SplitMix64), so the same `(seed, index)` always gives the
//! same prompt on every machine and build — no dependency on a `rand` crate's stream stability.
//!
//! Invariants:
//! - A prompt of `total` tokens with a shared prefix of `shared` tokens (`shared <= total`) is the shared
//!   prefix (identical for every request index) followed by `total - shared` words drawn from a stream
//!   keyed by the request index, so prompts differ right after the prefix and a prefix cache can reuse
//!   the prefix but nothing more.
//! - Distinct streams (shared prefix, request `i`, long prompt `k`) are keyed by disjoint salts.

/// Common English words, each one token with a leading space in mainstream LLM vocabularies.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "for", "that", "on", "with", "as", "was", "at", "by",
    "it", "from", "be", "this", "are", "or", "an", "have", "not", "which", "but", "his", "they",
    "has", "one", "all", "were", "their", "been", "more", "when", "there", "can", "other", "new",
    "time", "some", "what", "about", "into", "only", "out", "up", "first", "also", "after", "two",
    "would", "most", "where", "many", "people", "over", "made", "such", "then", "them", "years",
    "these", "may", "three", "world", "state", "city", "could", "school", "water", "house", "long",
    "day", "work", "life", "part", "great", "small", "place", "large", "year", "under", "home",
    "high", "old", "each", "good", "make", "well", "back", "way", "much", "before", "must",
    "through", "same", "while", "between", "found", "last", "name", "never", "help", "book",
    "line", "left", "right", "light", "story", "door", "road", "music", "power", "river", "field",
    "money", "group", "night", "morning", "family", "friend", "table", "paper", "train", "horse",
    "garden", "window", "country", "market", "game", "team", "point", "hand", "head", "face",
    "eye", "child", "woman", "man", "word", "number", "sound", "voice", "fire", "stone", "tree",
    "sea", "sun", "moon", "star", "king", "war", "peace", "law", "church", "party", "army", "ship",
    "island", "bridge", "wood", "color", "black", "white", "red", "blue", "green", "open", "close",
    "begin", "end", "show", "play", "move", "live", "run", "walk", "read", "write", "speak",
    "learn", "keep", "give", "take", "find", "think", "know", "tell", "ask", "call", "turn",
    "start", "hold", "bring", "stand", "build", "grow", "change", "follow", "happy", "quick",
    "slow", "early", "late", "young", "free", "strong", "clear", "simple", "real", "full", "short",
    "hard", "easy", "warm", "cold", "dark", "bright", "north", "south", "east", "west", "summer",
    "winter", "spring", "glass", "letter", "office", "doctor", "teacher", "student", "village",
    "forest", "mountain", "street", "car", "food", "bread", "milk", "tea", "dog", "cat", "bird",
    "fish", "animal", "plant", "flower",
];

/// A small, stable pseudo-random generator (SplitMix64); good enough to pick words and arrival times.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`); the modulo bias is irrelevant for picking words.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// An exponentially distributed interval with the given rate (events per second), in seconds.
    pub fn exponential(&mut self, rate: f64) -> f64 {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        -(1.0 - self.next_f64()).ln() / rate
    }
}

/// Salts that keep the word streams of the shared prefix, requests and long prompts apart.
const SALT_PREFIX: u64 = 0x5052_4546_4958_0000;
const SALT_REQUEST: u64 = 0x5245_5155_4553_5400;
const SALT_LONG: u64 = 0x4c4f_4e47_0000_0000;
const SALT_PICK: u64 = 0x5049_434b_0000_0000;

/// Builds the prompts of one benchmark run.
#[derive(Debug, Clone)]
pub struct PromptBuilder {
    seed: u64,
    total_tokens: usize,
    /// The shared prefixes (one, empty, without a shared prefix).
    prefixes: Vec<String>,
}

impl PromptBuilder {
    /// Prompts of about `total_tokens` tokens whose first `shared_prefix_tokens` are common to all
    /// (`shared_prefix_tokens` is clamped to `total_tokens`).
    pub fn new(seed: u64, total_tokens: usize, shared_prefix_tokens: usize) -> Self {
        Self::with_prefixes(seed, total_tokens, shared_prefix_tokens, 1)
    }

    /// Like `new`, with `count` distinct shared prefixes (at least one): each request starts
    /// with one of them, picked from the seed and the request's index.
    pub fn with_prefixes(
        seed: u64,
        total_tokens: usize,
        shared_prefix_tokens: usize,
        count: usize,
    ) -> Self {
        let shared = shared_prefix_tokens.min(total_tokens);
        let prefixes = (0..count.max(1) as u64)
            .map(|k| match k {
                // The first prefix is the one a single-prefix run has always used.
                0 => words(seed ^ SALT_PREFIX, shared),
                k => words(stream_seed(seed ^ SALT_PREFIX, k), shared),
            })
            .collect();
        Self {
            seed,
            total_tokens,
            prefixes,
        }
    }

    /// The prompt of request `index`: its shared prefix, then words unique to this index.
    pub fn prompt(&self, index: u64) -> String {
        self.prompt_with_len(index, self.total_tokens)
    }

    /// The prompt of request `index` at `total` tokens (per-request lengths): its shared prefix,
    /// cut to `total` words when longer, then words unique to this index.
    pub fn prompt_with_len(&self, index: u64, total: usize) -> String {
        let full = self.prefix_of(index);
        let prefix = match full.split(' ').nth(total) {
            // Keep the first `total` words: cut just before word `total`.
            Some(_) if total == 0 => "",
            Some(_) => {
                let end = full
                    .match_indices(' ')
                    .nth(total - 1)
                    .map_or(full.len(), |(i, _)| i);
                &full[..end]
            }
            None => full,
        };
        let shared = word_count(prefix);
        let own = words(
            stream_seed(self.seed ^ SALT_REQUEST, index),
            total.saturating_sub(shared),
        );
        join_parts(prefix, &own)
    }

    /// The shared prefix request `index` starts with.
    fn prefix_of(&self, index: u64) -> &str {
        let n = self.prefixes.len() as u64;
        let k = match n {
            1 => 0,
            n => stream_seed(self.seed ^ SALT_PICK, index) % n,
        };
        &self.prefixes[k as usize]
    }

    /// The `index`-th long prompt of the mixed-load mode: `tokens` words sharing nothing with the
    /// regular prompts, so the server must prefill all of it.
    pub fn long_prompt(&self, index: u64, tokens: usize) -> String {
        words(stream_seed(self.seed ^ SALT_LONG, index), tokens)
    }

    /// The (first) shared prefix (empty without one).
    pub fn prefix(&self) -> &str {
        &self.prefixes[0]
    }
}

/// Mixes a stream salt and an index into one seed; SplitMix64's output function decorrelates
/// neighbouring indices.
pub(crate) fn stream_seed(salted: u64, index: u64) -> u64 {
    SplitMix64::new(salted ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64()
}

/// `n` words from the list, space separated.
fn words(seed: u64, n: usize) -> String {
    let mut rng = SplitMix64::new(seed);
    let mut out = String::with_capacity(n * 6);
    for i in 0..n {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(WORDS[rng.below(WORDS.len())]);
    }
    out
}

fn word_count(s: &str) -> usize {
    s.split_whitespace().count()
}

fn join_parts(prefix: &str, own: &str) -> String {
    match (prefix.is_empty(), own.is_empty()) {
        (true, _) => own.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix} {own}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_and_index_give_the_same_prompt() {
        let a = PromptBuilder::new(7, 64, 16);
        let b = PromptBuilder::new(7, 64, 16);
        assert_eq!(a.prompt(3), b.prompt(3));
        assert_eq!(a.long_prompt(2, 100), b.long_prompt(2, 100));
    }

    #[test]
    fn different_indices_and_seeds_give_different_prompts() {
        let a = PromptBuilder::new(7, 64, 0);
        assert_ne!(a.prompt(0), a.prompt(1));
        assert_ne!(a.prompt(0), PromptBuilder::new(8, 64, 0).prompt(0));
    }

    #[test]
    fn prompt_has_the_requested_number_of_words() {
        for (total, shared) in [(1, 0), (250, 0), (250, 100), (40, 40), (10, 99)] {
            let b = PromptBuilder::new(1, total, shared);
            assert_eq!(
                word_count(&b.prompt(5)),
                total,
                "total={total} shared={shared}"
            );
        }
        assert_eq!(
            word_count(&PromptBuilder::new(1, 4, 0).long_prompt(0, 2000)),
            2000
        );
    }

    #[test]
    fn per_request_lengths_keep_the_prefix_and_cut_it_when_longer() {
        let b = PromptBuilder::new(2, 100, 30);
        for total in [1, 29, 30, 31, 200] {
            let p = b.prompt_with_len(4, total);
            assert_eq!(word_count(&p), total, "total={total}");
            let keep = total.min(30);
            let head: Vec<&str> = p.split(' ').take(keep).collect();
            let want: Vec<&str> = b.prefix().split(' ').take(keep).collect();
            assert_eq!(head, want, "total={total}");
        }
        assert_eq!(b.prompt_with_len(4, 100), b.prompt(4));
    }

    #[test]
    fn every_request_starts_with_one_of_the_prefixes_and_all_are_used() {
        let b = PromptBuilder::with_prefixes(5, 60, 40, 4);
        let mut seen = std::collections::HashSet::new();
        for i in 0..64 {
            let p = b.prompt(i);
            let k = b.prefixes.iter().position(|x| p.starts_with(x.as_str()));
            seen.insert(k.expect("starts with a prefix"));
            assert_eq!(word_count(&p), 60);
        }
        assert_eq!(seen.len(), 4);
        assert_eq!(b.prefixes[0], PromptBuilder::new(5, 60, 40).prefix());
    }

    #[test]
    fn shared_prefix_is_common_and_the_rest_differs() {
        let b = PromptBuilder::new(42, 200, 120);
        let (p0, p1) = (b.prompt(0), b.prompt(1));
        assert_eq!(word_count(b.prefix()), 120);
        assert!(p0.starts_with(b.prefix()) && p1.starts_with(b.prefix()));
        let tail0: Vec<&str> = p0.split_whitespace().skip(120).collect();
        let tail1: Vec<&str> = p1.split_whitespace().skip(120).collect();
        assert_eq!(tail0.len(), 80);
        assert_ne!(tail0, tail1);
    }

    #[test]
    fn without_shared_prefix_prompts_do_not_share_a_long_start() {
        let b = PromptBuilder::new(3, 100, 0);
        let w0: Vec<String> = b.prompt(0).split(' ').map(str::to_string).collect();
        let w1: Vec<String> = b.prompt(1).split(' ').map(str::to_string).collect();
        let common = w0.iter().zip(&w1).take_while(|(x, y)| x == y).count();
        assert!(common < 5, "prompts share {common} leading words");
    }

    #[test]
    fn long_prompts_do_not_start_with_the_shared_prefix() {
        let b = PromptBuilder::new(9, 100, 50);
        assert!(!b.long_prompt(0, 100).starts_with(b.prefix()));
    }

    #[test]
    fn exponential_intervals_average_to_the_inverse_rate() {
        let mut rng = SplitMix64::new(11);
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| rng.exponential(4.0)).sum::<f64>() / n as f64;
        assert!((mean - 0.25).abs() < 0.01, "mean interval {mean}");
    }

    #[test]
    fn word_list_has_no_duplicates() {
        let mut w = WORDS.to_vec();
        w.sort_unstable();
        w.dedup();
        assert_eq!(w.len(), WORDS.len());
    }

    #[test]
    fn word_list_entries_are_single_lowercase_words() {
        for w in WORDS {
            assert!(
                !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase()),
                "{w:?}"
            );
        }
    }
}
