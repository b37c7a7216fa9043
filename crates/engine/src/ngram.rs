//! Prompt-lookup drafts: the tokens that followed the last occurrence of the sequence's own
//! latest n-gram, in its prompt or its output so far.
//!
//! Text that repeats its input — code rewritten with a small change, answers quoting a
//! document, JSON echoing field names — is often continued the way the same words went on
//! before. For n from `max_n` down to `min_n`, the drafter looks for the most recent earlier
//! occurrence of the last n tokens and proposes what came after it; a longer match is more
//! likely to continue the same way, so it is tried first. No model runs: a draft costs a scan
//! of the sequence's tokens (bounded by `SEARCH_WINDOW`).

use crate::sequence::SeqId;
use crate::speculate::Drafter;

/// How far back a match is looked for, in tokens: bounds the scan per step.
const SEARCH_WINDOW: usize = 8192;

/// See the module docs.
#[derive(Clone, Debug)]
pub struct NgramDrafter {
    pub min_n: usize,
    pub max_n: usize,
}

impl NgramDrafter {
    /// The tokens after the most recent earlier occurrence of `tokens`' last `n`, at most `max`.
    fn lookup(tokens: &[u32], n: usize, max: usize) -> Option<&[u32]> {
        let len = tokens.len();
        if n == 0 || len <= n {
            return None;
        }
        let tail = &tokens[len - n..];
        let lo = len.saturating_sub(SEARCH_WINDOW);
        // Candidate starts, latest first; the tail itself (start len - n) is not a match.
        (lo..len - n)
            .rev()
            .find(|&s| &tokens[s..s + n] == tail)
            .map(|s| &tokens[s + n..(s + n + max).min(len)])
            .filter(|d| !d.is_empty())
    }
}

impl Drafter for NgramDrafter {
    fn propose(&mut self, _id: SeqId, tokens: &[u32], max: usize) -> Vec<u32> {
        if max == 0 {
            return Vec::new();
        }
        (self.min_n.max(1)..=self.max_n)
            .rev()
            .find_map(|n| Self::lookup(tokens, n, max))
            .map(<[u32]>::to_vec)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn propose(tokens: &[u32], max: usize) -> Vec<u32> {
        NgramDrafter { min_n: 1, max_n: 3 }.propose(SeqId(1), tokens, max)
    }

    #[test]
    fn the_longest_latest_match_proposes_what_followed_it() {
        // "1 2 3" occurred at 0 and is the tail: propose what followed it, 4 5 6.
        assert_eq!(propose(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 3), vec![4, 5, 6]);
        assert_eq!(propose(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 2), vec![4, 5]);
        // The latest of two occurrences wins.
        assert_eq!(propose(&[7, 8, 1, 7, 8, 2, 7, 8], 1), vec![2]);
        // A longer match beats a later shorter one: "5 7 8" matched at 1 (followed by 3),
        // while "7 8" alone last occurred at 5 (followed by 4).
        assert_eq!(propose(&[0, 5, 7, 8, 3, 7, 8, 4, 5, 7, 8], 1), vec![3]);
    }

    #[test]
    fn no_match_and_no_room_propose_nothing() {
        assert!(propose(&[1, 2, 3, 4], 4).is_empty());
        assert!(propose(&[1, 2, 1, 2], 0).is_empty());
        assert!(propose(&[5], 4).is_empty());
        // A match at the very end has nothing after it but the tail itself.
        assert_eq!(propose(&[3, 3], 4), vec![3]);
        let bigram_only = NgramDrafter { min_n: 2, max_n: 2 };
        assert!(bigram_only
            .clone()
            .propose(SeqId(1), &[1, 9, 8, 1], 3)
            .is_empty());
    }
}
