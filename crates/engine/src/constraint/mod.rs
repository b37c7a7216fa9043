//! Constrained decoding: a request's output is held to a grammar (a JSON schema, any JSON
//! object, a regular expression, one of some strings, or a Lark grammar), with `llguidance`.
//!
//! - `Constraint` is what a request asks for, in the engine's terms; any server route attaches
//!   one (`response_format`, vLLM's `guided_*`, a forced tool call).
//! - `Grammars` compiles a constraint once per distinct constraint (an LRU cache of compiled
//!   parsers keyed by the constraint's canonical text) against the model's vocabulary, given to
//!   llguidance as each token's bytes (`vocab`). Compiling checks the grammar through its first
//!   token mask, so a grammar llguidance cannot handle is refused before the request is queued.
//! - `GrammarMask` (`mask`) is the logits processor a compiled constraint becomes for one
//!   sequence: its `prepare` computes the mask of allowed tokens for the next position, `apply`
//!   sets every other logit to −∞, `accept` advances the parser by the token drawn. Drafted
//!   tokens need nothing special: a draft's rows are drawn one by one through the same chain
//!   (`draw::verify`), each after the previous token was accepted, and a drafted token the
//!   grammar forbids can never equal the token drawn, so the draft stops there.
//!
//! When the grammar is complete the mask allows only end-of-generation tokens (every id of the
//! vocabulary's end-of-generation list), so a finished object ends the request with `stop`;
//! `max_tokens` and stop strings still end it earlier (a truncated object: `length`).

mod mask;
mod vocab;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use llguidance::api::{GrammarWithLexer, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory, TokenParser};
use tokenizer::Tokenizer;

pub use mask::GrammarMask;

/// What a request's output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON value valid under this JSON schema.
    JsonSchema(serde_json::Value),
    /// Text matching this regular expression (Rust `regex` syntax), whole.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// Text of this Lark grammar (llguidance's dialect, rule `start`).
    Lark(String),
    /// Text matching rule `lead` of the Lark grammar `lead` (which defines that rule and may
    /// let it match nothing), then text matching `then`: the server puts a reasoning model's
    /// thinking here, so that a grammar holds the answer and not the thinking.
    After { lead: String, then: Box<Constraint> },
}

/// The name `Constraint::After` gives its second grammar, referenced from the first.
const THEN_GRAMMAR: &str = "then";

impl Constraint {
    /// The grammar llguidance compiles, and the cache key (the kind and its canonical text).
    fn grammar(&self) -> Result<(TopLevelGrammar, String), String> {
        Ok(match self {
            Constraint::JsonObject => {
                let schema = with_compact_json(serde_json::json!({"type": "object"}));
                (
                    TopLevelGrammar::from_json_schema(schema),
                    "json_object".into(),
                )
            }
            Constraint::JsonSchema(schema) => {
                let key = format!("json\0{schema}");
                let schema = with_compact_json(schema.clone());
                (TopLevelGrammar::from_json_schema(schema), key)
            }
            Constraint::Regex(rx) => (TopLevelGrammar::from_regex(rx), format!("regex\0{rx}")),
            Constraint::Choice(choices) => {
                if choices.is_empty() {
                    return Err("the list of choices is empty".into());
                }
                let alternatives: Vec<String> =
                    choices.iter().map(|c| regex_syntax::escape(c)).collect();
                let rx = format!("(?:{})", alternatives.join("|"));
                let key = format!("choice\0{}", serde_json::Value::from(choices.clone()));
                (TopLevelGrammar::from_regex(&rx), key)
            }
            Constraint::Lark(g) => (TopLevelGrammar::from_lark(g.clone()), format!("lark\0{g}")),
            Constraint::After { lead, then } => {
                let (inner, inner_key) = then.grammar()?;
                let main =
                    GrammarWithLexer::from_lark(format!("start: lead @{THEN_GRAMMAR}\n{lead}\n"));
                let mut grammars = vec![main];
                let mut inner = inner.grammars.into_iter();
                let (Some(mut first), None) = (inner.next(), inner.next()) else {
                    return Err("a constraint after a lead must be one grammar".into());
                };
                first.name = Some(THEN_GRAMMAR.into());
                grammars.push(first);
                let grammar = TopLevelGrammar {
                    grammars,
                    max_tokens: None,
                };
                (grammar, format!("after\0{lead}\0{inner_key}"))
            }
        })
    }
}

/// JSON is generated compact with a space after `,` and `:` (no free whitespace, which lets a
/// small model pad an object with newlines until `max_tokens`), unless the schema sets
/// llguidance's own `x-guidance` options.
fn with_compact_json(schema: serde_json::Value) -> serde_json::Value {
    let mut schema = match schema {
        serde_json::Value::Bool(true) => serde_json::json!({}),
        other => other,
    };
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}

/// A constraint compiled for the model's vocabulary; cheap to clone. Each request gets its own
/// parser state from it (`GrammarMask::new`).
#[derive(Clone)]
pub struct CompiledConstraint {
    parser: Arc<TokenParser>,
    stats: Arc<GrammarStats>,
}

impl std::fmt::Debug for CompiledConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledConstraint").finish_non_exhaustive()
    }
}

impl CompiledConstraint {
    /// A fresh parser state for one sequence.
    pub fn processor(&self) -> GrammarMask {
        GrammarMask::new(
            Matcher::new(Ok(self.parser.deep_clone())),
            self.stats.clone(),
        )
    }
}

/// Counters of constrained decoding (for `/metrics` and the benchmarks).
#[derive(Debug, Default)]
pub struct GrammarStats {
    /// Constraints compiled (cache misses) and the time spent compiling them (not counting
    /// the one-time indexing of the vocabulary).
    pub compiled: AtomicU64,
    pub compile_nanos: AtomicU64,
    /// Compilations answered from the cache.
    pub cache_hits: AtomicU64,
    /// Token masks computed and the time spent computing them.
    pub masks: AtomicU64,
    pub mask_nanos: AtomicU64,
    /// Whether the vocabulary is indexed for llguidance (the one-time cost before the first
    /// compilation; `Grammars::warm` pays it ahead of any request).
    pub vocab_ready: AtomicBool,
    /// Compilations that found the vocabulary not yet indexed and waited for it.
    pub vocab_waits: AtomicU64,
}

/// Most compiled constraints kept; the least recently used goes first.
const CACHE_CAPACITY: usize = 256;

/// Compiles constraints for one vocabulary and caches them (see the module docs).
pub struct Grammars {
    tokenizer: Tokenizer,
    /// Built once, by `warm` (the engine handle runs it on a thread of its own at start) or by
    /// the first compilation, whichever comes first; a compilation that comes while `warm` is
    /// building it waits for that build. Indexing a vocabulary of 150k tokens takes seconds.
    factory: OnceLock<Result<ParserFactory, String>>,
    cache: Mutex<Lru>,
    stats: Arc<GrammarStats>,
}

/// Compiled parsers by key, and the keys from least to most recently used.
#[derive(Default)]
struct Lru {
    map: HashMap<String, Arc<TokenParser>>,
    order: VecDeque<String>,
}

impl Lru {
    fn get(&mut self, key: &str) -> Option<Arc<TokenParser>> {
        let hit = self.map.get(key)?.clone();
        if let Some(i) = self.order.iter().position(|k| k == key) {
            if let Some(k) = self.order.remove(i) {
                self.order.push_back(k);
            }
        }
        Some(hit)
    }

    fn insert(&mut self, key: String, parser: Arc<TokenParser>) {
        if self.map.insert(key.clone(), parser).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > CACHE_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars").finish_non_exhaustive()
    }
}

impl Grammars {
    pub fn new(tokenizer: Tokenizer) -> Grammars {
        Grammars {
            tokenizer,
            factory: OnceLock::new(),
            cache: Mutex::new(Lru::default()),
            stats: Arc::new(GrammarStats::default()),
        }
    }

    pub fn stats(&self) -> &Arc<GrammarStats> {
        &self.stats
    }

    fn factory(&self) -> Result<&ParserFactory, String> {
        self.factory
            .get_or_init(|| {
                let env = vocab::tok_env(&self.tokenizer);
                let mut f = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
                f.quiet();
                self.stats.vocab_ready.store(true, Relaxed);
                Ok(f)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Indexes the vocabulary now, so that no request pays for it (a failure is kept and
    /// reported by the compilations that need it).
    pub fn warm(&self) {
        let _ = self.factory();
    }

    /// Compiles `c` (or finds it in the cache). The error says what llguidance could not
    /// handle, for a 400.
    pub fn compile(&self, c: &Constraint) -> Result<CompiledConstraint, String> {
        let (grammar, key) = c.grammar()?;
        let hit = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key);
        let parser = match hit {
            Some(p) => {
                self.stats.cache_hits.fetch_add(1, Relaxed);
                p
            }
            None => {
                // The vocabulary is indexed once; not a compilation's cost.
                if self.factory.get().is_none() {
                    self.stats.vocab_waits.fetch_add(1, Relaxed);
                }
                self.factory()?;
                let started = Instant::now();
                let parser = Arc::new(self.build(grammar)?);
                let nanos = started.elapsed().as_nanos() as u64;
                self.stats.compiled.fetch_add(1, Relaxed);
                self.stats.compile_nanos.fetch_add(nanos, Relaxed);
                let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                cache.insert(key, parser.clone());
                parser
            }
        };
        Ok(CompiledConstraint {
            parser,
            stats: self.stats.clone(),
        })
    }

    /// Compiles a grammar and checks it through its first token mask (llguidance builds parts
    /// of a grammar lazily, and some errors show only then).
    fn build(&self, grammar: TopLevelGrammar) -> Result<TokenParser, String> {
        let factory = self.factory()?;
        let parser = factory.create_parser(grammar).map_err(|e| e.to_string())?;
        let mut probe = Matcher::new(Ok(parser.deep_clone()));
        match probe.compute_mask() {
            Ok(m) if m.is_zero() => Err("the grammar allows no output".into()),
            Ok(_) => Ok(parser),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests;
