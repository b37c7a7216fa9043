//! The engine-side state of one request, and what it sends: each produced token becomes an
//! `Event::Token` (its text held back while it could be the start of a stop string or of a
//! UTF-8 character), and the request's end an `Event::Finished` with what was held back.
//!
//! Stop conditions, in order for each token: an end-of-generation token (unless
//! `ignore_eos`) or a stop token id ends the request with `Stop` (the token is sent, its text
//! is not); a stop string in the text ends it with `Stop` (nothing from the stop string on is
//! sent); reaching `max_tokens` or the sequence's length limit ends it with `Length`.

use std::time::Instant;

use model::Sampler;
use tokenizer::IncrementalDecoder;
use tokio::sync::mpsc::UnboundedSender;

use crate::admission::WaitSlot;
use crate::request::{Event, FinishReason, GenerateRequest, TokenLogprob};

/// Engine-side state of one request.
pub(crate) struct RequestState {
    pub req: GenerateRequest,
    pub sampler: Sampler,
    pub decoder: IncrementalDecoder,
    /// Decoded text not yet sent, because it may be the start of a stop string.
    pub held: String,
    /// A stop string was found: nothing after it is sent, not even bytes flushed at the end.
    pub stopped_by_string: bool,
    pub events: UnboundedSender<Event>,
    /// Place in line (the scheduler's `Sequence::arrival`).
    pub arrival: u64,
    pub arrived: Instant,
    pub scheduled_at: Option<Instant>,
    pub first_token_at: Option<Instant>,
    pub last_token_at: Option<Instant>,
    /// Prompt positions whose log-probabilities were computed (they are sent once, complete).
    pub prompt_logprobs: Vec<Option<TokenLogprob>>,
    pub prompt_logprobs_sent: bool,
    /// Its place in the admission count until it is first scheduled (see `admission`).
    pub admission: Option<WaitSlot>,
    /// How its drafts fared.
    pub spec: SpecState,
    /// The LoRA adapters it computes with (the runner's ids) and their key (`lora`).
    pub loras: Vec<model::LoraUse>,
    pub lora_key: Option<crate::tiles::PrefixKey>,
}

/// The drafts of one request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpecState {
    /// Moving average of the chance that a drafted token is accepted when the ones before it
    /// were (what `speculate::draft_len` plans with).
    pub acceptance: f64,
    pub drafted: u64,
    pub accepted: u64,
    /// Steps in a row it has not drafted (see `SpecState::probe_due`).
    pub idle: u32,
}

impl SpecState {
    /// Weight of the newest step in `acceptance`.
    const ALPHA: f64 = 0.3;

    /// A step fed `drafted` tokens and `accepted` of them agreed.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        // Tokens tried: each accepted one, and the first rejected one if any.
        let tried = (accepted + 1).min(drafted);
        let rate = accepted as f64 / tried as f64;
        self.acceptance += Self::ALPHA * (rate - self.acceptance);
        self.idle = 0;
        self.drafted += drafted as u64;
        self.accepted += accepted as u64;
    }
}

impl SpecState {
    /// What an unmeasured request starts from.
    const PRIOR: f64 = 0.7;
    /// Pull towards the prior per step without drafts: after some tens of steps a sequence
    /// that stopped drafting tries again (its text may have come to a part that repeats).
    const FORGET: f64 = 0.02;

    /// Steps without a draft after which a stream drafts a few tokens anyway when drafting
    /// could pay at all (`probe_due`).
    const PROBE_EVERY: u32 = 8;

    /// A step without a draft.
    pub fn forget(&mut self) {
        self.acceptance += Self::FORGET * (Self::PRIOR - self.acceptance);
        self.idle = self.idle.saturating_add(1);
    }

    /// Whether a stream that has not drafted for a while should draft a few tokens to measure
    /// its acceptance again. Without this, a stream whose estimate (the prior, or an old
    /// measurement) is below what a drafted token costs never drafts, so never learns that its
    /// text is now easy to draft (a draft model whose passes cost more than the prior's worth,
    /// a stream that came to a part it repeats). Probing is pointless when even a token sure to
    /// be accepted would not pay (`share` >= 1: a compute-bound step).
    pub fn probe_due(&self, share: f64) -> bool {
        self.idle >= Self::PROBE_EVERY && share < 1.0
    }
}

impl Default for SpecState {
    fn default() -> Self {
        // Optimistic until measured: the first drafts show what this request's text does.
        SpecState {
            acceptance: Self::PRIOR,
            drafted: 0,
            accepted: 0,
            idle: 0,
        }
    }
}

/// Result of feeding one token's text through the stop-string filter.
pub(crate) enum StopCheck {
    /// Text safe to send now.
    Emit(String),
    /// A stop string was found: send this text (before it) and finish.
    Stop(String),
}

/// Where a produced token leaves its sequence, for the length limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lengths {
    /// Output tokens including this one.
    pub output: usize,
    /// Prompt plus output tokens including this one.
    pub total: usize,
    /// The sequence's limit on `total` (context, or prompt + max_tokens).
    pub max_total: usize,
}

impl RequestState {
    pub fn new(
        req: GenerateRequest,
        sampler: Sampler,
        decoder: IncrementalDecoder,
        events: UnboundedSender<Event>,
        arrival: u64,
        arrived: Instant,
    ) -> RequestState {
        RequestState {
            req,
            sampler,
            decoder,
            held: String::new(),
            stopped_by_string: false,
            events,
            arrival,
            arrived,
            scheduled_at: None,
            first_token_at: None,
            last_token_at: None,
            prompt_logprobs: Vec::new(),
            prompt_logprobs_sent: false,
            admission: None,
            spec: SpecState::default(),
            loras: Vec::new(),
            lora_key: None,
        }
    }

    /// Sends a produced token; returns why the request ends with it, if it does. `is_eog`:
    /// the tokenizer counts it as end of generation.
    pub fn emit(
        &mut self,
        token: u32,
        logprob: Option<TokenLogprob>,
        is_eog: bool,
        len: Lengths,
    ) -> Option<FinishReason> {
        if (is_eog && !self.req.ignore_eos) || self.req.stop_token_ids.contains(&token) {
            self.send_token(token, String::new(), logprob);
            return Some(FinishReason::Stop);
        }
        let delta = self.decoder.push(token);
        match self.filter_stop(&delta) {
            StopCheck::Stop(text) => {
                self.send_token(token, text, logprob);
                Some(FinishReason::Stop)
            }
            StopCheck::Emit(text) => {
                self.send_token(token, text, logprob);
                (len.output >= self.req.max_tokens || len.total >= len.max_total)
                    .then_some(FinishReason::Length)
            }
        }
    }

    fn send_token(&self, id: u32, text: String, logprob: Option<TokenLogprob>) {
        let _ = self.events.send(Event::Token { id, text, logprob });
    }

    /// What is left to send when the request ends for `reason`: the held-back text and any
    /// bytes the decoder still holds, cut at a stop string they complete. Nothing after a stop
    /// string, nothing on abort.
    pub fn final_text(&mut self, reason: FinishReason) -> String {
        if reason == FinishReason::Abort || self.stopped_by_string {
            return String::new();
        }
        let tail = self.decoder.flush();
        match self.filter_stop(&tail) {
            StopCheck::Stop(t) => t,
            StopCheck::Emit(t) => t + &std::mem::take(&mut self.held),
        }
    }

    /// Adds decoded text; returns what can be sent without risking a stop-string leak.
    pub fn filter_stop(&mut self, delta: &str) -> StopCheck {
        self.held.push_str(delta);
        let stops = &self.req.stop_strings;
        if stops.is_empty() {
            return StopCheck::Emit(std::mem::take(&mut self.held));
        }
        if let Some(at) = stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..at].to_string();
            self.held.clear();
            self.stopped_by_string = true;
            return StopCheck::Stop(out);
        }
        // Hold back the longest tail of `held` that is a prefix of some stop string.
        let mut keep = 0;
        for s in stops {
            for (i, _) in self.held.char_indices() {
                let tail = &self.held[i..];
                if tail.len() > keep && s.starts_with(tail) {
                    keep = tail.len();
                }
            }
        }
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopCheck::Emit(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    fn tokenizer() -> tokenizer::Tokenizer {
        let bytes = model::testing::tiny_model_gguf("llama", model::testing::TINY_SEED);
        let parsed = gguf::parse(&bytes).expect("tiny model parses");
        tokenizer::Tokenizer::from_metadata(&parsed.metadata).expect("tiny vocabulary builds")
    }

    fn state(
        req: GenerateRequest,
    ) -> (RequestState, UnboundedReceiver<Event>, tokenizer::Tokenizer) {
        let t = tokenizer();
        let (tx, rx) = unbounded_channel();
        let sampler = Sampler::new(req.sampling.clone(), 1);
        (
            RequestState::new(
                req,
                sampler,
                t.incremental_decoder(true),
                tx,
                1,
                Instant::now(),
            ),
            rx,
            t,
        )
    }

    fn lens(output: usize) -> Lengths {
        Lengths {
            output,
            total: 10 + output,
            max_total: 1000,
        }
    }

    fn texts(rx: &mut UnboundedReceiver<Event>) -> String {
        let mut out = String::new();
        while let Ok(ev) = rx.try_recv() {
            if let Event::Token { text, .. } = ev {
                out.push_str(&text);
            }
        }
        out
    }

    /// Token ids spelling `s` in the tiny vocabulary.
    fn ids(t: &tokenizer::Tokenizer, s: &str) -> Vec<u32> {
        t.encode(s, false, false)
    }

    #[test]
    fn a_stop_string_split_across_tokens_is_never_sent() {
        let req = GenerateRequest {
            max_tokens: 100,
            stop_strings: vec!["cd".into()],
            ..GenerateRequest::default()
        };
        let (mut st, mut rx, t) = state(req);
        let toks = ids(&t, "abcde");
        let mut reason = None;
        for (i, &tok) in toks.iter().enumerate() {
            reason = st.emit(tok, None, false, lens(i + 1));
            if reason.is_some() {
                break;
            }
        }
        assert_eq!(reason, Some(FinishReason::Stop));
        let sent = texts(&mut rx) + &st.final_text(FinishReason::Stop);
        assert_eq!(sent.trim_start(), "ab");
    }

    #[test]
    fn held_text_is_flushed_at_a_length_finish_and_dropped_on_abort() {
        let req = GenerateRequest {
            max_tokens: 3,
            stop_strings: vec!["xyz".into()],
            ..GenerateRequest::default()
        };
        let (mut st, mut rx, t) = state(req);
        let toks = ids(&t, "abx");
        assert!(toks.len() <= 3, "{toks:?}");
        let mut reason = None;
        for (i, &tok) in toks.iter().enumerate() {
            reason = st.emit(
                tok,
                None,
                false,
                Lengths {
                    output: 3 - toks.len() + i + 1,
                    ..lens(0)
                },
            );
        }
        assert_eq!(reason, Some(FinishReason::Length), "max_tokens reached");
        let sent = texts(&mut rx);
        assert!(
            !sent.ends_with('x'),
            "a possible stop-string start is held back: {sent:?}"
        );
        assert_eq!(
            (sent + &st.final_text(FinishReason::Length)).trim_start(),
            "abx"
        );

        let req = GenerateRequest {
            max_tokens: 100,
            stop_strings: vec!["xyz".into()],
            ..GenerateRequest::default()
        };
        let (mut st, _rx, t) = state(req);
        for (i, &tok) in ids(&t, "abx").iter().enumerate() {
            assert_eq!(st.emit(tok, None, false, lens(i + 1)), None);
        }
        assert_eq!(st.final_text(FinishReason::Abort), "");
    }

    #[test]
    fn end_of_generation_and_stop_ids_end_with_stop_unless_eos_is_ignored() {
        let (mut st, mut rx, _) = state(GenerateRequest {
            max_tokens: 100,
            ..GenerateRequest::default()
        });
        assert_eq!(st.emit(2, None, true, lens(1)), Some(FinishReason::Stop));
        assert!(
            matches!(rx.try_recv(), Ok(Event::Token { id: 2, ref text, .. }) if text.is_empty())
        );

        let (mut st, _rx, _) = state(GenerateRequest {
            max_tokens: 100,
            ignore_eos: true,
            stop_token_ids: vec![7],
            ..GenerateRequest::default()
        });
        assert_eq!(st.emit(2, None, true, lens(1)), None, "eos ignored");
        assert_eq!(st.emit(7, None, false, lens(2)), Some(FinishReason::Stop));
        let (mut st, _rx, _) = state(GenerateRequest {
            max_tokens: 100,
            ..GenerateRequest::default()
        });
        let at_limit = Lengths {
            output: 1,
            total: 50,
            max_total: 50,
        };
        assert_eq!(
            st.emit(9, None, false, at_limit),
            Some(FinishReason::Length)
        );
    }
}
