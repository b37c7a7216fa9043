//! LoRA adapters chosen per request: `--lora-names` (`"model": NAME`, as vLLM and Tessera serve
//! adapters) or `--lora-ids` (llama-server's `"lora": [{"id": K, "scale": 1.0}]`).
//!
//! Design: request `i` gets adapter `i mod n`, by its index alone, so a run's assignment does
//! not depend on the interleaving of the clients, and the same seed and flags send every server
//! the same prompt to the same adapter. Warm-up requests (indices counted down from `u64::MAX`)
//! and the long prompts of the mixed mode (their own counter) follow the same rule. The report
//! names the adapters and splits the output throughput by adapter.

use std::fmt::Write as _;

use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};

use crate::{client::Outcome, config::ConfigError};

/// Most adapters a run spreads its requests over.
pub const MAX_ADAPTERS: usize = 1024;

/// The adapter flags, as clap parses them.
#[derive(Debug, Clone, Default, Args)]
pub struct AdapterArgs {
    /// Spread requests over LoRA adapters by name (vLLM's and Tessera's way): request i sends
    /// `"model": NAME` with NAME the (i mod n)-th of the list. Not with --lora-ids or --model.
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub lora_names: Vec<String>,
    /// Spread requests over N LoRA adapters by id (llama-server's way): request i sends
    /// `"lora": [{"id": i mod N, "scale": 1.0}]` beside the usual model.
    #[arg(long, value_name = "N")]
    pub lora_ids: Option<usize>,
}

impl AdapterArgs {
    /// The adapters of the run, or `None` when no flag was given; `model` is `--model`.
    pub fn validate(&self, model: Option<&str>) -> Result<Option<Adapters>, ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        match (&self.lora_names[..], self.lora_ids) {
            ([], None) => Ok(None),
            ([_, ..], Some(_)) => invalid("give --lora-names or --lora-ids, not both".into()),
            ([], Some(n)) if !(1..=MAX_ADAPTERS).contains(&n) => Err(ConfigError::OutOfRange {
                flag: "lora-ids",
                expected: "in 1..=1024",
                got: n.to_string(),
            }),
            ([], Some(n)) => Ok(Some(Adapters::Ids(n))),
            (names, None) => {
                if model.is_some() {
                    return invalid(
                        "--model and --lora-names both set the model of every request; give one"
                            .into(),
                    );
                }
                if names.len() > MAX_ADAPTERS {
                    return Err(ConfigError::OutOfRange {
                        flag: "lora-names",
                        expected: "at most 1024 names",
                        got: names.len().to_string(),
                    });
                }
                let mut clean: Vec<String> = Vec::with_capacity(names.len());
                for n in names.iter().map(|n| n.trim()) {
                    if n.is_empty() {
                        return invalid("--lora-names has an empty name".into());
                    }
                    if clean.iter().any(|c| c == n) {
                        return invalid(format!("--lora-names lists `{n}` twice"));
                    }
                    clean.push(n.to_string());
                }
                Ok(Some(Adapters::Names(clean)))
            }
        }
    }
}

/// The adapters requests are spread over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adapters {
    /// Request `i` sends `"model": names[i mod n]`.
    Names(Vec<String>),
    /// Request `i` sends `"lora": [{"id": i mod n, "scale": 1.0}]`.
    Ids(usize),
}

impl Adapters {
    /// How many adapters there are.
    pub fn len(&self) -> usize {
        match self {
            Self::Names(names) => names.len(),
            Self::Ids(n) => *n,
        }
    }

    /// Never true for a validated set (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The adapter of request `index`: its position in the list (or its id).
    pub fn slot(&self, index: u64) -> usize {
        // len() >= 1 after validation; max(1) keeps a hand-built empty set from dividing by zero.
        (index % self.len().max(1) as u64) as usize
    }

    /// How adapter `slot` is named in reports: its name, or `id K`.
    pub fn label(&self, slot: usize) -> String {
        match self {
            Self::Names(names) => names.get(slot).cloned().unwrap_or_default(),
            Self::Ids(_) => format!("id {slot}"),
        }
    }

    /// Sets request `index`'s adapter in its JSON `body`, which already names `model`.
    pub fn apply(&self, index: u64, body: &mut Value) {
        let slot = self.slot(index);
        let Some(obj) = body.as_object_mut() else {
            return;
        };
        match self {
            Self::Names(names) => {
                obj.insert("model".into(), json!(names.get(slot)));
            }
            Self::Ids(_) => {
                obj.insert("lora".into(), json!([{ "id": slot, "scale": 1.0 }]));
            }
        }
    }

    /// What the JSON report's `config.adapters` holds.
    pub fn echo(&self) -> AdaptersEcho {
        match self {
            Self::Names(names) => AdaptersEcho {
                by: "model",
                names: names.clone(),
            },
            Self::Ids(n) => AdaptersEcho {
                by: "lora",
                names: (0..*n).map(|k| self.label(k)).collect(),
            },
        }
    }
}

/// The adapters of a run as the JSON report gives them.
#[derive(Debug, Clone, Serialize)]
pub struct AdaptersEcho {
    /// The request field that chose them: `model` (by name) or `lora` (by id).
    pub by: &'static str,
    /// Their names (`--lora-names`) or `id K` (`--lora-ids`), in slot order.
    pub names: Vec<String>,
}

/// One adapter's share of a run.
#[derive(Debug, Clone, Serialize)]
pub struct AdapterResults {
    pub adapter: String,
    pub requests_ok: usize,
    pub requests_failed: usize,
    pub output_tokens_total: u64,
    /// Its successful requests' output tokens over the run's wall time (the adapters' figures
    /// add up to the run's).
    pub output_tokens_per_s: f64,
}

/// Each adapter's requests and output throughput, in slot order.
pub fn per_adapter(adapters: &Adapters, outcomes: &[Outcome], wall_s: f64) -> Vec<AdapterResults> {
    (0..adapters.len())
        .map(|slot| {
            let mine = outcomes.iter().filter(|o| o.adapter == Some(slot));
            let (ok, failed, tokens) = mine.fold((0, 0, 0), |(ok, failed, tokens), o| {
                if o.ok {
                    (ok + 1, failed, tokens + o.output_tokens())
                } else {
                    (ok, failed + 1, tokens)
                }
            });
            AdapterResults {
                adapter: adapters.label(slot),
                requests_ok: ok,
                requests_failed: failed,
                output_tokens_total: tokens,
                output_tokens_per_s: if wall_s > 0.0 {
                    tokens as f64 / wall_s
                } else {
                    0.0
                },
            }
        })
        .collect()
}

/// The table's lines for the adapters: one per adapter.
pub fn table_lines(s: &mut String, results: &[AdapterResults]) {
    for r in results {
        let _ = writeln!(
            s,
            "  adapter {:<14}{} ok, {} failed, {:.2} output tok/s",
            r.adapter, r.requests_ok, r.requests_failed, r.output_tokens_per_s
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(names: &[&str], ids: Option<usize>) -> AdapterArgs {
        AdapterArgs {
            lora_names: names.iter().map(|n| n.to_string()).collect(),
            lora_ids: ids,
        }
    }

    #[test]
    fn requests_take_adapters_in_turn_by_index() {
        let names = Adapters::Names(vec!["a".into(), "b".into(), "c".into()]);
        let picked: Vec<usize> = (0..7).map(|i| names.slot(i)).collect();
        assert_eq!(picked, [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(names.slot(u64::MAX), (u64::MAX % 3) as usize);
        let mut body = json!({"model": "base", "prompt": "x"});
        names.apply(4, &mut body);
        assert_eq!(body, json!({"model": "b", "prompt": "x"}));

        let ids = Adapters::Ids(4);
        let mut body = json!({"model": "base"});
        ids.apply(6, &mut body);
        assert_eq!(
            body,
            json!({"model": "base", "lora": [{"id": 2, "scale": 1.0}]})
        );
        assert_eq!(ids.label(2), "id 2");
    }

    #[test]
    fn flags_validate_into_adapters_or_name_their_problem() {
        assert_eq!(args(&[], None).validate(None), Ok(None));
        assert_eq!(
            args(&["a", " b"], None).validate(None),
            Ok(Some(Adapters::Names(vec!["a".into(), "b".into()])))
        );
        assert_eq!(
            args(&[], Some(4)).validate(Some("m")),
            Ok(Some(Adapters::Ids(4)))
        );
        let invalid = |a: AdapterArgs, model: Option<&str>, needle: &str| match a.validate(model) {
            Err(ConfigError::Invalid(m)) => assert!(m.contains(needle), "{m}"),
            other => panic!("{needle}: {other:?}"),
        };
        invalid(args(&["a"], Some(2)), None, "not both");
        invalid(args(&["a"], None), Some("m"), "--model");
        invalid(args(&["a", ""], None), None, "empty");
        invalid(args(&["a", "a"], None), None, "twice");
        for n in [0, MAX_ADAPTERS + 1] {
            assert!(matches!(
                args(&[], Some(n)).validate(None),
                Err(ConfigError::OutOfRange {
                    flag: "lora-ids",
                    ..
                })
            ));
        }
    }

    #[test]
    fn the_flags_reach_the_config_and_are_refused_for_embeddings() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: crate::config::BenchArgs,
        }
        let validate = |argv: &[&str]| {
            let mut full = vec!["bench"];
            full.extend_from_slice(argv);
            <Cli as clap::Parser>::try_parse_from(full)
                .expect("valid argv")
                .args
                .validate()
        };
        let cfg = validate(&["--lora-names", "a,b,c,d"]).expect("valid");
        let names = ["a", "b", "c", "d"].map(String::from).to_vec();
        assert_eq!(cfg.adapters, Some(Adapters::Names(names)));
        let cfg = validate(&["--lora-ids", "4", "--endpoint", "chat"]).expect("valid");
        assert_eq!(cfg.adapters, Some(Adapters::Ids(4)));
        assert_eq!(validate(&[]).expect("valid").adapters, None);
        for flag in [["--lora-names", "a,b"], ["--lora-ids", "2"]] {
            let argv = [&flag[..], &["--endpoint", "embeddings"]].concat();
            match validate(&argv) {
                Err(ConfigError::Invalid(m)) => {
                    assert!(m.starts_with(flag[0]) && m.contains("embeddings"), "{m}")
                }
                other => panic!("{flag:?}: {other:?}"),
            }
        }
        let both = validate(&["--lora-names", "a", "--lora-ids", "2"]);
        assert!(matches!(both, Err(ConfigError::Invalid(m)) if m.contains("not both")));
    }

    #[test]
    fn throughput_is_split_by_the_adapter_of_each_outcome() {
        let done = |adapter: usize, ok: bool, tokens: u64| Outcome {
            ok,
            adapter: Some(adapter),
            usage_completion_tokens: Some(tokens),
            ..Outcome::default()
        };
        let outcomes = [
            done(0, true, 10),
            done(1, true, 20),
            done(0, true, 10),
            done(1, false, 0),
        ];
        let r = per_adapter(&Adapters::Ids(3), &outcomes, 2.0);
        let got: Vec<_> = r
            .iter()
            .map(|a| {
                (
                    a.adapter.as_str(),
                    a.requests_ok,
                    a.requests_failed,
                    a.output_tokens_per_s,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("id 0", 2, 0, 10.0),
                ("id 1", 1, 1, 10.0),
                ("id 2", 0, 0, 0.0)
            ]
        );
        let mut s = String::new();
        table_lines(&mut s, &r);
        assert_eq!(s.lines().count(), 3);
        assert!(s.contains("adapter id 1") && s.contains("1 failed"), "{s}");
    }
}
