//! `tessera serve`'s LoRA flags: adapters requests choose (`--lora NAME=PATH`, `--max-loras`)
//! and adapters merged into the weights at load (`--lora-merge NAME`).

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Clone, Debug, Default)]
pub struct LoraArgs {
    /// A LoRA adapter (a GGUF adapter file in llama.cpp's format, checked against the model at
    /// start) that requests choose by name, repeatable: `"model": "NAME"` (vLLM's), or
    /// `"lora": [{"id": 0, "scale": 0.5}]` with ids in the order of these flags
    /// (llama-server's). Requests naming none get the base model (or the scales set with
    /// `POST /lora-adapters`). More load at run time with `POST /v1/load_lora_adapter`.
    #[arg(long = "lora", value_name = "NAME=PATH", value_parser = parse_lora)]
    pub lora: Vec<(String, PathBuf)>,
    /// Most LoRA adapters loaded at once: loading another drops the least recently used one
    /// no request is using (it is loaded again from its file when named).
    #[arg(long, default_value_t = 4)]
    pub max_loras: usize,
    /// Merge the --lora adapter NAME into the weights at load (scale 1), for a server of one
    /// fine-tune: no per-request cost, and NAME is then not chosen per request. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub lora_merge: Vec<String>,
}

fn parse_lora(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.trim().is_empty() && !path.is_empty() => {
            Ok((name.trim().to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("expected NAME=PATH, not `{s}`")),
    }
}

/// The adapters as the engine takes them (requests choose) and the files merged at load.
#[derive(Debug, Default, PartialEq)]
pub struct LoraPlan {
    pub served: Vec<(String, PathBuf)>,
    pub merged: Vec<PathBuf>,
}

impl LoraArgs {
    /// Checks the names (unique, none a name of the model itself in `model_names`) and splits
    /// the adapters into served and merged.
    pub fn plan(&self, model_names: &[String]) -> Result<LoraPlan> {
        let mut plan = LoraPlan::default();
        for (i, (name, path)) in self.lora.iter().enumerate() {
            if self.lora[..i].iter().any(|(n, _)| n == name) {
                bail!("--lora: the name `{name}` is given twice");
            }
            if model_names.contains(name) {
                bail!("--lora: `{name}` is the model's own name; give the adapter another");
            }
            if self.lora_merge.contains(name) {
                plan.merged.push(path.clone());
            } else {
                plan.served.push((name.clone(), path.clone()));
            }
        }
        for name in &self.lora_merge {
            if !self.lora.iter().any(|(n, _)| n == name) {
                bail!("--lora-merge {name}: no --lora adapter has that name");
            }
        }
        if self.max_loras == 0 {
            bail!("--max-loras must be at least 1");
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(lora: &[&str], merge: &[&str]) -> LoraArgs {
        LoraArgs {
            lora: lora
                .iter()
                .map(|s| parse_lora(s).expect("parses"))
                .collect(),
            max_loras: 4,
            lora_merge: merge.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn adapters_split_into_served_and_merged_with_their_names_checked() {
        assert!(parse_lora("noequals").is_err());
        assert!(parse_lora("=x.gguf").is_err());
        assert!(parse_lora("a=").is_err());
        let plan = args(&["a=a.gguf", "b=b.gguf"], &["b"])
            .plan(&[])
            .expect("valid");
        assert_eq!(
            plan.served,
            vec![("a".to_string(), PathBuf::from("a.gguf"))]
        );
        assert_eq!(plan.merged, vec![PathBuf::from("b.gguf")]);
        let err = |a: LoraArgs| a.plan(&["base".into()]).expect_err("refused").to_string();
        assert!(err(args(&["a=1", "a=2"], &[])).contains("twice"));
        assert!(err(args(&["base=1"], &[])).contains("model's own name"));
        assert!(err(args(&["a=1"], &["b"])).contains("--lora-merge b"));
    }
}
