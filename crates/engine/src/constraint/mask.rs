//! `GrammarMask`: one sequence's grammar state as a logits processor (see the module docs of
//! `constraint`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;
use model::LogitsProcessor;

use super::GrammarStats;

/// A sequence's parser state and the mask of the tokens allowed next (computed by `prepare`,
/// dropped by `accept`).
pub struct GrammarMask {
    matcher: Matcher,
    mask: Option<SimpleVob>,
    stats: Arc<GrammarStats>,
}

impl std::fmt::Debug for GrammarMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarMask")
            .field("has_mask", &self.mask.is_some())
            .finish_non_exhaustive()
    }
}

impl GrammarMask {
    pub(super) fn new(matcher: Matcher, stats: Arc<GrammarStats>) -> GrammarMask {
        GrammarMask {
            matcher,
            mask: None,
            stats,
        }
    }

    /// Whether the grammar is complete (only end-of-generation tokens are allowed).
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Whether `token` may come next.
    pub fn allows(&mut self, token: u32) -> bool {
        self.prepare();
        self.mask
            .as_ref()
            .is_some_and(|m| (token as usize) < m.len() && m.is_allowed(token))
    }
}

impl LogitsProcessor for GrammarMask {
    fn active(&self) -> bool {
        true
    }

    fn prepare(&mut self) {
        if self.mask.is_some() {
            return;
        }
        let started = Instant::now();
        let mask = self.matcher.compute_mask_or_eos();
        self.stats
            .mask_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
        self.stats.masks.fetch_add(1, Relaxed);
        match mask {
            Ok(m) => self.mask = Some(m),
            // The grammar was checked when compiled and only allowed tokens are accepted, so
            // this is llguidance failing (e.g. a resource limit): the draw panics, which fails
            // this request alone ("sampling panicked"), rather than letting it run unconstrained.
            Err(e) => panic!("grammar mask failed: {e}"),
        }
    }

    /// Every logit whose token the grammar does not allow next becomes −∞ (ids past the
    /// grammar's vocabulary too: the model's rows may be padded past the tokenizer's).
    fn apply(&self, row: &mut [f32]) {
        let Some(mask) = &self.mask else {
            panic!("GrammarMask::apply before prepare: this is a bug");
        };
        let words = mask.as_slice();
        for (w, chunk) in row.chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX && chunk.len() == 32 {
                continue;
            }
            for (b, l) in chunk.iter_mut().enumerate() {
                if bits & (1 << b) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }

    fn accept(&mut self, token: u32) {
        self.mask = None;
        if self.matcher.is_stopped() {
            // Only end-of-generation tokens were allowed, and one ends the request.
            return;
        }
        if let Err(e) = self.matcher.consume_token(token) {
            panic!("grammar refused token {token} it allowed: {e}");
        }
    }
}
