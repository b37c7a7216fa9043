//! The in-memory store of finished responses: what `previous_response_id`, `GET` and `DELETE
//! /v1/responses/{id}` read.
//!
//! Bounded by count, least recently used first out (a read or a chained request counts as a
//! use). A conversation is a chain of `Turn`s shared through `Arc`: a response stores only its
//! own turn (its input messages and its output) and points at the turn it continued, so a
//! chain of k responses holds each message once, and a turn outlives its own entry while a
//! stored response still continues it. Every turn chain fit in one context when it was
//! generated, so an entry holds at most one context's worth of text.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::serving::chat_template::Message;

use super::wire::ResponseObject;
use crate::serving::state::AppState;

/// One response's part of a conversation.
#[derive(Debug)]
pub struct Turn {
    /// The turn this one continues (`previous_response_id`).
    pub prev: Option<Arc<Turn>>,
    /// Its input messages (without `instructions`, which OpenAI does not carry over) and its
    /// output as an assistant message.
    pub messages: Vec<Message>,
}

impl Turn {
    /// The conversation up to and including this turn, oldest message first.
    pub fn conversation(&self) -> Vec<Message> {
        let mut turns = vec![self];
        let mut at = self;
        while let Some(p) = &at.prev {
            turns.push(p);
            at = p;
        }
        turns
            .iter()
            .rev()
            .flat_map(|t| t.messages.iter().cloned())
            .collect()
    }
}

impl Drop for Turn {
    /// Unlinks the chain iteratively: the default drop would recurse once per turn.
    fn drop(&mut self) {
        let mut next = self.prev.take();
        while let Some(t) = next {
            match Arc::try_unwrap(t) {
                Ok(mut t) => next = t.prev.take(),
                Err(_) => break,
            }
        }
    }
}

/// A stored response: its object (for `GET`) and its turn (for chaining).
#[derive(Clone, Debug)]
pub struct Stored {
    pub object: ResponseObject,
    pub turn: Arc<Turn>,
}

/// Responses by id, at most `capacity`, least recently used evicted first.
pub struct ResponseStore {
    capacity: usize,
    inner: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    /// id → (last use, entry).
    entries: HashMap<String, (u64, Stored)>,
    /// last use → id, oldest first.
    order: BTreeMap<u64, String>,
    clock: u64,
}

impl ResponseStore {
    pub fn new(capacity: usize) -> ResponseStore {
        ResponseStore {
            capacity,
            inner: Mutex::new(Lru::default()),
        }
    }

    /// A poisoned lock only means a panic elsewhere mid-update of plain maps; they stay usable.
    fn lock(&self) -> MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a response (replacing one with the same id), evicting the least recently used
    /// beyond the capacity. A capacity of 0 stores nothing.
    pub fn insert(&self, stored: Stored) {
        if self.capacity == 0 {
            return;
        }
        let mut lru = self.lock();
        let id = stored.object.id.clone();
        lru.remove(&id);
        let tick = lru.tick();
        lru.order.insert(tick, id.clone());
        lru.entries.insert(id, (tick, stored));
        while lru.entries.len() > self.capacity {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            lru.entries.remove(&oldest);
        }
    }

    /// The response `id`, marked as just used.
    pub fn get(&self, id: &str) -> Option<Stored> {
        let mut lru = self.lock();
        let tick = lru.tick();
        let (old, stored) = {
            let (used, stored) = lru.entries.get_mut(id)?;
            let old = std::mem::replace(used, tick);
            (old, stored.clone())
        };
        lru.order.remove(&old);
        lru.order.insert(tick, id.to_string());
        Some(stored)
    }

    /// Removes `id`; whether it was there.
    pub fn remove(&self, id: &str) -> bool {
        self.lock().remove(id)
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Lru {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn remove(&mut self, id: &str) -> bool {
        match self.entries.remove(id) {
            Some((used, _)) => {
                self.order.remove(&used);
                true
            }
            None => false,
        }
    }
}

/// The server's store (made on first use, holding `max_stored_responses`).
pub fn of(state: &AppState) -> Arc<ResponseStore> {
    state.endpoint_state(|cfg| ResponseStore::new(cfg.max_stored_responses))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::responses::wire::{ResponseObject, Status};

    fn msg(role: &str, content: &str) -> Message {
        Message::text(role, content)
    }

    fn stored(id: &str, prev: Option<Arc<Turn>>, text: &str) -> Stored {
        Stored {
            object: ResponseObject {
                id: id.into(),
                object: "response",
                created_at: 0,
                status: Status::Completed,
                error: None,
                incomplete_details: None,
                instructions: None,
                max_output_tokens: None,
                model: "m".into(),
                output: Vec::new(),
                parallel_tool_calls: true,
                previous_response_id: None,
                reasoning: Default::default(),
                store: true,
                temperature: 1.0,
                text: Default::default(),
                tool_choice: "auto".into(),
                tools: Vec::new(),
                top_p: 1.0,
                truncation: "disabled",
                usage: None,
                user: None,
                metadata: Default::default(),
            },
            turn: Arc::new(Turn {
                prev,
                messages: vec![msg("user", text), msg("assistant", &text.to_uppercase())],
            }),
        }
    }

    #[test]
    fn the_least_recently_used_goes_first() {
        let s = ResponseStore::new(2);
        s.insert(stored("a", None, "a"));
        s.insert(stored("b", None, "b"));
        assert!(s.get("a").is_some(), "a is now the most recent");
        s.insert(stored("c", None, "c"));
        assert!(s.get("b").is_none(), "b was the least recently used");
        assert!(s.get("a").is_some() && s.get("c").is_some());
        assert_eq!(s.len(), 2);
        assert!(s.remove("a"));
        assert!(!s.remove("a"));
        assert_eq!(s.len(), 1);
        let none = ResponseStore::new(0);
        none.insert(stored("a", None, "a"));
        assert!(none.is_empty());
    }

    #[test]
    fn a_chain_keeps_its_turns_after_their_entries_are_evicted() {
        let s = ResponseStore::new(1);
        s.insert(stored("a", None, "one"));
        let a = s.get("a").expect("stored").turn;
        s.insert(stored("b", Some(a), "two"));
        assert!(s.get("a").is_none());
        let conv = s.get("b").expect("stored").turn.conversation();
        let text: Vec<&str> = conv.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(text, ["one", "ONE", "two", "TWO"]);
    }

    #[test]
    fn a_long_chain_drops_without_deep_recursion() {
        let mut turn = Arc::new(Turn {
            prev: None,
            messages: Vec::new(),
        });
        for _ in 0..200_000 {
            turn = Arc::new(Turn {
                prev: Some(turn),
                messages: Vec::new(),
            });
        }
        drop(turn);
    }
}
