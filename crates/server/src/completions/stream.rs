//! The chunk writer of a streamed completion: the echo (and its log-probs) as each choice's
//! first chunk, then the text as it comes, then the finish reason and the usage.

use engine::{Event, FinishReason, TokenLogprob};
use tokenizer::Tokenizer;

use crate::protocol::logprobs::Legacy;
use crate::protocol::response::{Body, Head, UsageTotals};
use crate::serving::sse::ChunkWriter;
use crate::serving::validate::Job;

use super::protocol::CompletionChoice;

use super::handler::{push_prompt, OBJECT};

/// Streaming state: per choice, whether the echo was sent and the text offset so far.
pub(super) struct Chunks {
    head: Head,
    pub(super) job: Job,
    tok: Tokenizer,
    echoed: Vec<bool>,
    offsets: Vec<usize>,
    usage: UsageTotals,
}

impl Chunks {
    pub(super) fn new(head: Head, job: Job, tok: Tokenizer, n: usize) -> Chunks {
        let usage = UsageTotals::new(&job.prompts);
        Chunks {
            head,
            job,
            tok,
            echoed: vec![false; n],
            offsets: vec![0; n],
            usage,
        }
    }

    fn chunk(
        &self,
        index: usize,
        text: String,
        logprobs: Option<Legacy>,
        finish_reason: Option<FinishReason>,
    ) -> Body<CompletionChoice> {
        let choice = CompletionChoice {
            index,
            text,
            logprobs,
            finish_reason,
        };
        self.head.body(OBJECT, vec![choice], None)
    }

    /// The echo chunk of a choice, with the prompt's log-probs when they were asked for.
    fn echo(
        &mut self,
        index: usize,
        plp: Option<&[Option<TokenLogprob>]>,
        out: &mut Vec<Body<CompletionChoice>>,
    ) {
        if !self.job.echo || self.echoed[index] {
            return;
        }
        self.echoed[index] = true;
        let prompt = &self.job.prompts[index / self.job.n];
        let text = self.tok.decode(prompt, true);
        let lp = if self.job.request.logprobs.is_some() {
            let mut lp = Legacy::default();
            push_prompt(&mut lp, &self.tok, prompt, plp);
            self.offsets[index] = lp.offset();
            Some(lp)
        } else {
            self.offsets[index] = text.chars().count();
            None
        };
        out.push(self.chunk(index, text, lp, None));
    }
}

impl ChunkWriter for Chunks {
    type Chunk = Body<CompletionChoice>;

    fn on_event(&mut self, index: usize, ev: Event, out: &mut Vec<Self::Chunk>) -> bool {
        match ev {
            Event::Accepted => false,
            Event::PromptLogprobs(plp) => {
                self.echo(index, Some(&plp), out);
                false
            }
            Event::Token { id, text, logprob } => {
                self.echo(index, None, out);
                let lp = self.job.request.logprobs.map(|_| {
                    let mut lp = Legacy::starting_at(self.offsets[index]);
                    lp.push(&self.tok, id, logprob.as_ref());
                    self.offsets[index] = lp.offset();
                    lp
                });
                if !text.is_empty() || lp.is_some() {
                    out.push(self.chunk(index, text, lp, None));
                }
                false
            }
            Event::Finished {
                reason,
                text,
                usage,
            } => {
                self.echo(index, None, out);
                self.usage.add(index / self.job.n, &usage);
                out.push(self.chunk(index, text, None, Some(reason)));
                true
            }
            Event::Error(_) => true,
        }
    }

    fn usage_chunk(&self) -> Self::Chunk {
        self.head.body(OBJECT, Vec::new(), Some(self.usage.usage()))
    }
}
