//! The chunk writer of a streamed chat completion.
//!
//! Streaming follows OpenAI's chunk sequence: a `{"role": "assistant"}` delta per choice first,
//! content deltas, then a delta-less chunk carrying `finish_reason`. With tools, each choice's
//! reply goes through a `tools::ChoiceReader`: content comes out as the reader releases it
//! (text that may open a call is held back), and each call as two `tool_calls` deltas, its id,
//! type and name first, then its arguments. With a reasoning parser the same reader splits the
//! thinking off first: it comes as `reasoning_content` deltas, never in `content`.

use engine::Event;
use tokenizer::Tokenizer;

use crate::protocol::logprobs::{ChatLogprobs, ChatTokenLogprob};
use crate::protocol::response::{Body, Head, UsageTotals};
use crate::serving::sse::ChunkWriter;
use crate::serving::tools::{ChoiceReader, Family, Out};

use super::protocol::{ChatChunkChoice, ChatFinish, Delta, FunctionDelta, ToolCallDelta};

use super::handler::ROLE;

const CHUNK_OBJECT: &str = "chat.completion.chunk";

/// Streaming state: the head every chunk repeats and the usage so far.
pub(super) struct Chunks {
    pub(super) head: Head,
    pub(super) tok: Tokenizer,
    /// Whether the request asked for log-probs.
    pub(super) logprobs: bool,
    pub(super) n_per_prompt: usize,
    pub(super) usage: UsageTotals,
    /// Per choice, with tools or a reasoning parser: the reader of its reply.
    pub(super) readers: Vec<Option<ChoiceReader>>,
    /// With tools: the template's family (the shape of call ids).
    pub(super) family: Option<Family>,
}

impl Chunks {
    fn chunk(
        &self,
        index: usize,
        delta: Delta,
        logprobs: Option<ChatLogprobs>,
        finish_reason: Option<ChatFinish>,
    ) -> Body<ChatChunkChoice> {
        let choice = ChatChunkChoice {
            index,
            delta,
            logprobs,
            finish_reason,
        };
        self.head.body(CHUNK_OBJECT, vec![choice], None)
    }

    /// The first chunk of a choice: the role, and empty content.
    pub(super) fn role_chunk(&self, index: usize) -> Body<ChatChunkChoice> {
        let delta = Delta {
            role: Some(ROLE),
            content: Some(String::new()),
            tool_calls: None,
            reasoning_content: None,
        };
        self.chunk(index, delta, None, None)
    }

    fn content(text: String) -> Delta {
        Delta {
            content: Some(text),
            ..Delta::default()
        }
    }

    fn call_delta(call: ToolCallDelta) -> Delta {
        Delta {
            tool_calls: Some(vec![call]),
            ..Delta::default()
        }
    }

    /// Chunks for what choice `index`'s reader released (the token's log-probs on the first),
    /// its calls numbered from `first_call`.
    fn push_outs(
        &self,
        index: usize,
        outs: Vec<Out>,
        first_call: usize,
        mut lp: Option<ChatLogprobs>,
        out: &mut Vec<Body<ChatChunkChoice>>,
    ) {
        let mut k = first_call;
        for o in outs {
            match o {
                Out::Content(t) => out.push(self.chunk(index, Chunks::content(t), lp.take(), None)),
                Out::Reasoning(t) => {
                    let delta = Delta {
                        reasoning_content: Some(t),
                        ..Delta::default()
                    };
                    out.push(self.chunk(index, delta, lp.take(), None))
                }
                Out::Call(c) => {
                    let head = ToolCallDelta {
                        index: k,
                        id: self.family.map(Family::call_id),
                        kind: Some("function"),
                        function: FunctionDelta {
                            name: Some(c.name),
                            arguments: Some(String::new()),
                        },
                    };
                    let args = ToolCallDelta {
                        index: k,
                        id: None,
                        kind: None,
                        function: FunctionDelta {
                            name: None,
                            arguments: Some(c.arguments),
                        },
                    };
                    out.push(self.chunk(index, Chunks::call_delta(head), lp.take(), None));
                    out.push(self.chunk(index, Chunks::call_delta(args), None, None));
                    k += 1;
                }
            }
        }
        if lp.is_some() {
            out.push(self.chunk(index, Chunks::content(String::new()), lp, None));
        }
    }

    /// Feeds a token (`Some(id)`) or the end of the reply to choice `index`'s reader: what it
    /// released, and the calls it had read before.
    fn read(&mut self, index: usize, id: Option<u32>, text: &str) -> Option<(Vec<Out>, usize)> {
        let reader = self.readers.get_mut(index)?.as_mut()?;
        let before = reader.calls();
        Some((reader.next(id, text), before))
    }
}

impl ChunkWriter for Chunks {
    type Chunk = Body<ChatChunkChoice>;

    fn on_event(&mut self, index: usize, ev: Event, out: &mut Vec<Self::Chunk>) -> bool {
        match ev {
            Event::Accepted | Event::PromptLogprobs(_) => false,
            Event::Token { id, text, logprob } => {
                let lp = match (&logprob, self.logprobs) {
                    (Some(lp), true) => Some(ChatLogprobs {
                        content: vec![ChatTokenLogprob::new(&self.tok, lp)],
                    }),
                    _ => None,
                };
                if let Some((outs, first_call)) = self.read(index, Some(id), &text) {
                    self.push_outs(index, outs, first_call, lp, out);
                } else if !text.is_empty() || lp.is_some() {
                    out.push(self.chunk(index, Chunks::content(text), lp, None));
                }
                false
            }
            Event::Finished {
                reason,
                text,
                usage,
            } => {
                self.usage.add(index / self.n_per_prompt, &usage);
                let mut calls = 0;
                if let Some((outs, first_call)) = self.read(index, None, &text) {
                    calls = first_call + outs.iter().filter(|o| matches!(o, Out::Call(_))).count();
                    self.push_outs(index, outs, first_call, None, out);
                } else if !text.is_empty() {
                    out.push(self.chunk(index, Chunks::content(text), None, None));
                }
                let finish = ChatFinish::of(reason, calls);
                out.push(self.chunk(index, Delta::default(), None, Some(finish)));
                true
            }
            Event::Error(_) => true,
        }
    }

    fn usage_chunk(&self) -> Self::Chunk {
        self.head
            .body(CHUNK_OBJECT, Vec::new(), Some(self.usage.usage()))
    }
}
