//! A draft model: a smaller model of the same vocabulary (Qwen2.5-Coder-0.5B for the 1.5B)
//! proposes each decoding sequence's next tokens by running ahead of the target.
//!
//! Design:
//! - It computes through a second `Runner` (the binary chooses and builds it, as it does the
//!   served model's), which owns its own KV storage (the draft's KV geometry differs from the
//!   target's, so it cannot share the first runner's tiles). The draft model keeps a tile table
//!   per KV group for each sequence it drafts for, tiles taken from a free list as the sequence
//!   grows.
//! - It keeps each sequence's computed tokens across steps. Told the sequence's tokens at the
//!   next step, it keeps the longest common prefix of what it computed and what the sequence
//!   now holds (the accepted part of its draft), frees the tiles past it, and feeds the rest
//!   (usually the target's own last token, or the one draft position it never fed): no hook is
//!   needed to learn what was accepted. `release` drops a sequence that ended or was preempted.
//! - All sequences of a step draft together: position `j` of every draft is one ragged batch
//!   (the first also carries each sequence's catch-up tokens), so `k` small forward passes
//!   draft `k` tokens for everyone.
//! - A greedy request gets the draft's greedy tokens (a point draft: kept where the target's
//!   own argmax agrees, so the output is bit-identical). A sampling request gets tokens drawn
//!   from the draft's distribution under the request's temperature / top-k / top-p / min-p /
//!   logit bias, with that distribution (`Draft::dists`), for speculative sampling.
//! - A new sequence's prompt is computed by the draft model too: at most `CATCHUP_BUDGET`
//!   tokens of such catch-up per step (past the few a sequence always needs), so a long prompt
//!   is caught up over several steps, drafting nothing meanwhile.
//! - When the pool runs out of tiles, sequences not drafting this step give theirs back first
//!   (least recently used first); a sequence that still does not fit drafts nothing.
//!
//! Invariant: a sequence's tiles cover exactly `computed.len()` positions, rounded up to
//! whole tiles, in every group; free + held = the pool's tiles.

use std::collections::HashMap;

use model::{Batch, LogitsWanted, SampleScratch, Sampler, SamplingParams, SeqChunk, TileId};

use crate::error::StartError;
use crate::runner::Runner;
use crate::sequence::SeqId;
use crate::speculate::{Dist, Draft, DraftAsk, Drafter};

/// Catch-up tokens (beyond each sequence's first `max + 1`) fed per step across sequences.
const CATCHUP_BUDGET: usize = 256;

/// Mixed into a request's seed for the draft's own generator, so the draft's draws are not
/// the target's.
const SEED_SALT: u64 = 0xD4A7_F00D_5EED_0001;

/// What the draft model keeps for one sequence.
struct DraftSeq {
    /// One tile table per KV group.
    tables: Vec<Vec<TileId>>,
    /// The tokens whose K/V are in its tiles, from position 0.
    computed: Vec<u32>,
    /// The draft's generator and distribution for a sampling request.
    sampler: Option<Sampler>,
    /// The step it last drafted in (for eviction).
    last_used: u64,
}

/// See the module docs.
pub struct DraftModel {
    runner: Box<dyn Runner>,
    free: Vec<TileId>,
    seqs: HashMap<SeqId, DraftSeq>,
    logits: Vec<f32>,
    scratch: SampleScratch,
    /// Steps drafted so far.
    clock: u64,
    /// Moving average of a drafting forward pass's seconds (passes that carried no more than
    /// two tokens per sequence: catch-up of new prompts is a one-off).
    pass_secs: Option<f64>,
}

/// Weight of the newest pass in `pass_secs`.
const PASS_ALPHA: f64 = 0.2;

impl DraftModel {
    /// A drafter computing through `runner`, all of whose tiles are its own.
    pub fn new(runner: Box<dyn Runner>) -> Result<DraftModel, StartError> {
        if runner.facts().embedding.is_some() {
            return Err(StartError::Draft(
                "an embedding model cannot draft tokens".into(),
            ));
        }
        // Popped from the end: lower ids first.
        let free = (0..runner.facts().n_tiles as u32)
            .rev()
            .map(TileId)
            .collect();
        Ok(DraftModel {
            runner,
            free,
            seqs: HashMap::new(),
            logits: Vec::new(),
            scratch: SampleScratch::default(),
            clock: 0,
            pass_secs: None,
        })
    }

    /// Tiles in the pool, and tiles free.
    pub fn tiles(&self) -> (usize, usize) {
        (self.runner.facts().n_tiles, self.free.len())
    }

    /// Sequences it holds tiles or tokens for.
    pub fn sequences(&self) -> usize {
        self.seqs.len()
    }

    fn tile_size(&self) -> usize {
        self.runner.facts().layout.tile_size
    }

    /// Keeps `len` of `id`'s computed tokens and the tiles they need; frees the rest.
    fn truncate(&mut self, id: SeqId, len: usize) {
        let ts = self.tile_size();
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        s.computed.truncate(len);
        let keep = len.div_ceil(ts);
        for t in &mut s.tables {
            while t.len() > keep {
                self.free.extend(t.pop());
            }
        }
    }

    /// Grows `id`'s tables to cover `len` positions, giving back the tiles of sequences not in
    /// `busy` (least recently used first) when the free list runs short; false if it cannot.
    fn reserve(&mut self, id: SeqId, len: usize, busy: &[SeqId]) -> bool {
        let ts = self.tile_size();
        let groups = self.runner.facts().layout.groups.len();
        let Some(s) = self.seqs.get(&id) else {
            return false;
        };
        let have = s.tables.first().map_or(0, Vec::len);
        let need = len.div_ceil(ts).saturating_sub(have) * groups;
        while self.free.len() < need {
            let victim = self
                .seqs
                .iter()
                .filter(|(v, _)| !busy.contains(v))
                .min_by_key(|(v, s)| (s.last_used, **v))
                .map(|(v, _)| *v);
            match victim {
                Some(v) => self.release(v),
                None => return false,
            }
        }
        let s = self
            .seqs
            .get_mut(&id)
            .expect("checked above: this is a bug");
        s.tables.resize_with(groups, Vec::new);
        for t in &mut s.tables {
            while t.len() < len.div_ceil(ts) {
                t.push(self.free.pop().expect("reserved above: this is a bug"));
            }
        }
        true
    }

    /// The draft's sampling for a request: its temperature and cuts, its logit bias (the
    /// penalties and grammars depend on state only the target's sampler keeps).
    fn sampler_for(id: SeqId, p: &SamplingParams) -> Sampler {
        let params = SamplingParams {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            logit_bias: p.logit_bias.clone(),
            seed: Some(p.seed.unwrap_or(id.0) ^ SEED_SALT),
            ..SamplingParams::default()
        };
        Sampler::new(params, 0)
    }

    /// For each ask: the tokens to feed first (catch-up, ending with the sequence's last
    /// token) and how many tokens it drafts (0: it only catches up, or does not fit).
    fn plan(&mut self, asks: &[DraftAsk]) -> Vec<(Vec<u32>, usize)> {
        let context = self.runner.facts().context_length;
        let busy: Vec<SeqId> = asks.iter().map(|a| a.id).collect();
        let mut budget = CATCHUP_BUDGET;
        let mut out = Vec::with_capacity(asks.len());
        for a in asks {
            if a.tokens.len() + a.max > context || a.tokens.is_empty() {
                out.push((Vec::new(), 0));
                continue;
            }
            let s = self.seqs.entry(a.id).or_insert_with(|| DraftSeq {
                tables: Vec::new(),
                computed: Vec::new(),
                sampler: None,
                last_used: 0,
            });
            s.last_used = self.clock;
            let common = s
                .computed
                .iter()
                .zip(a.tokens)
                .take_while(|(x, y)| x == y)
                .count();
            // The last token is fed again when it is computed: its logits are the first draft.
            let keep = common.min(a.tokens.len() - 1);
            self.truncate(a.id, keep);
            let pending = &a.tokens[keep..];
            let free_run = a.max + 1;
            let extra = pending.len().saturating_sub(free_run);
            let (feed, k) = if extra <= budget {
                budget -= extra;
                (pending.to_vec(), a.max)
            } else {
                // Catch up as far as the budget goes; draft from a later step.
                let n = free_run + budget;
                budget = 0;
                (pending[..n].to_vec(), 0)
            };
            // Positions: the fed tokens, then all but the last drafted token.
            let len = keep + feed.len() + k.saturating_sub(1);
            if feed.is_empty() || !self.reserve(a.id, len, &busy) {
                out.push((Vec::new(), 0));
                continue;
            }
            out.push((feed, k));
        }
        out
    }

    /// Runs one ragged batch: `feeds[i]` for sequence `ids[i]` (skipping empty ones), with the
    /// last row's logits for those with `want[i]`. The fed tokens become computed.
    fn forward(&mut self, ids: &[SeqId], feeds: &[Vec<u32>], want: &[bool]) -> bool {
        let mut tokens = Vec::new();
        let mut chunks = Vec::new();
        for ((id, feed), &w) in ids.iter().zip(feeds).zip(want) {
            let Some(s) = self.seqs.get(id).filter(|_| !feed.is_empty()) else {
                continue;
            };
            chunks.push(SeqChunk {
                start_pos: s.computed.len(),
                first_token: tokens.len(),
                len: feed.len(),
                tile_tables: &s.tables,
                loras: &[],
                logits: if w {
                    LogitsWanted::Last
                } else {
                    LogitsWanted::None
                },
            });
            tokens.extend_from_slice(feed);
        }
        if chunks.is_empty() {
            return true;
        }
        let batch = Batch {
            tokens: &tokens,
            seqs: &chunks,
        };
        let t0 = std::time::Instant::now();
        if let Err(e) = self.runner.execute(&batch, &mut self.logits) {
            tracing::warn!("draft model: {e}");
            return false;
        }
        if tokens.len() <= 2 * chunks.len() {
            let secs = t0.elapsed().as_secs_f64();
            let old = self.pass_secs;
            self.pass_secs = Some(old.map_or(secs, |o| o + PASS_ALPHA * (secs - o)));
        }
        for (id, feed) in ids.iter().zip(feeds) {
            if let Some(s) = self.seqs.get_mut(id) {
                s.computed.extend_from_slice(feed);
            }
        }
        true
    }

    /// The next drafted token of sequence `id` from its logit row: the argmax for a greedy
    /// request, else a draw from the draft's distribution, which is returned with it.
    fn choose(&mut self, a: &DraftAsk, row_index: usize) -> (u32, Option<Dist>) {
        let vocab = self.runner.facts().vocab_size;
        let row = &self.logits[row_index * vocab..(row_index + 1) * vocab];
        if a.sampling.temperature == 0.0 {
            return (model::sampler::argmax(row), None);
        }
        let Some(s) = self.seqs.get_mut(&a.id) else {
            return (model::sampler::argmax(row), None);
        };
        let sampler = s
            .sampler
            .get_or_insert_with(|| Self::sampler_for(a.id, a.sampling));
        let q = sampler.distribution(row, &mut self.scratch);
        (sampler.draw_from(&q), Some(q))
    }
}

impl Drafter for DraftModel {
    fn propose(&mut self, id: SeqId, tokens: &[u32], max: usize) -> Vec<u32> {
        let greedy = SamplingParams::default();
        let ask = DraftAsk {
            id,
            tokens,
            max,
            sampling: &greedy,
        };
        match self.propose_all(&[ask]).pop() {
            Some(Ok(d)) => d.tokens,
            _ => Vec::new(),
        }
    }

    fn propose_all(&mut self, asks: &[DraftAsk]) -> Vec<Result<Draft, ()>> {
        self.clock += 1;
        let planned = self.plan(asks);
        let ids: Vec<SeqId> = asks.iter().map(|a| a.id).collect();
        let (mut feeds, ks): (Vec<Vec<u32>>, Vec<usize>) = planned.into_iter().unzip();
        let mut drafts: Vec<Draft> = vec![Draft::default(); asks.len()];
        let positions = ks.iter().copied().max().unwrap_or(0);
        // Position 0 also catches up (and is all a sequence that drafts nothing runs).
        for j in 0..positions.max(1) {
            let want: Vec<bool> = ks.iter().map(|&k| k > j).collect();
            if !self.forward(&ids, &feeds, &want) {
                return asks.iter().map(|_| Ok(Draft::default())).collect();
            }
            let mut row = 0;
            for (i, a) in asks.iter().enumerate() {
                let fed = !std::mem::take(&mut feeds[i]).is_empty();
                if !fed || !want[i] {
                    continue;
                }
                let (token, q) = self.choose(a, row);
                row += 1;
                let d = &mut drafts[i];
                d.tokens.push(token);
                if let Some(q) = q {
                    d.dists.get_or_insert_with(Vec::new).push(q);
                }
                if j + 1 < ks[i] {
                    feeds[i] = vec![token];
                }
            }
        }
        drafts.into_iter().map(Ok).collect()
    }

    fn release(&mut self, id: SeqId) {
        self.truncate(id, 0);
        self.seqs.remove(&id);
    }

    fn secs_per_position(&self) -> Option<f64> {
        // Zero until a drafting pass is measured: timing `propose_all` instead would count a
        // new prompt's catch-up as drafting cost, and a stream that then stops drafting never
        // measures a pass to correct it.
        Some(self.pass_secs.unwrap_or(0.0))
    }
}
