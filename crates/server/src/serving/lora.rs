//! LoRA adapters as the HTTP layer sees them: the table of adapters requests may name (id,
//! name, file, global scale), and which adapters a request computes with.
//!
//! A request chooses adapters in either of the ways users already do:
//! - vLLM's: `"model": "NAME"`, an adapter's name, computes with that adapter at scale 1;
//! - llama-server's: `"lora": [{"id": 0, "scale": 0.5}]` on chat and completions, ids in the
//!   order adapters were added (`--lora` first, then `/v1/load_lora_adapter`; never reused).
//!
//! Both may be combined (an adapter once). A request that names none computes with the global
//! scales (`POST /lora-adapters`, llama-server's), which start at 0: the base model. The engine
//! holds the adapters themselves (`engine::lora`); this table mirrors its names for the
//! checks a handler makes before it submits, and is changed only after the engine agreed.

use std::path::PathBuf;
use std::sync::Mutex;

use engine::LoraRequest;

use crate::base::ApiError;
use crate::protocol::request::LoraChoice;
use crate::serving::state::Loaded;

/// One adapter requests may name.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraEntry {
    /// llama-server's id: its place in the order adapters were added.
    pub id: u64,
    pub name: String,
    pub path: PathBuf,
    /// The scale requests naming no adapter compute with (0: not applied).
    pub scale: f32,
}

/// The adapters requests may name.
#[derive(Debug, Default)]
pub struct LoraTable {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    entries: Vec<LoraEntry>,
    next_id: u64,
}

impl LoraTable {
    /// The adapters the engine started with, in order (ids 0, 1, ...), global scales 0.
    pub fn new(adapters: &[(String, PathBuf)]) -> LoraTable {
        let t = LoraTable::default();
        for (name, path) in adapters {
            t.add(name, path.clone());
        }
        t
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table stays consistent whatever panicked while holding the lock.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every adapter, in id order.
    pub fn list(&self) -> Vec<LoraEntry> {
        self.lock().entries.clone()
    }

    pub fn by_name(&self, name: &str) -> Option<LoraEntry> {
        self.lock().entries.iter().find(|e| e.name == name).cloned()
    }

    /// Adds an adapter the engine has loaded; its id is the next one.
    pub fn add(&self, name: &str, path: PathBuf) -> LoraEntry {
        let mut t = self.lock();
        let e = LoraEntry {
            id: t.next_id,
            name: name.to_string(),
            path,
            scale: 0.0,
        };
        t.next_id += 1;
        t.entries.push(e.clone());
        e
    }

    /// Removes adapter `name`; false when there is none.
    pub fn remove(&self, name: &str) -> bool {
        let mut t = self.lock();
        let before = t.entries.len();
        t.entries.retain(|e| e.name != name);
        t.entries.len() < before
    }

    /// Sets the global scales (llama-server's `POST /lora-adapters`): the adapters listed get
    /// their scale, the others 0. All or nothing: an unknown id or a bad scale changes none.
    pub fn set_scales(&self, scales: &[LoraChoice]) -> Result<(), ApiError> {
        let mut t = self.lock();
        let mut new: Vec<f32> = vec![0.0; t.entries.len()];
        for (i, c) in scales.iter().enumerate() {
            let at = position(&t.entries, c.id, &format!("[{i}].id"))?;
            new[at] = scale(c.scale, &format!("[{i}].scale"))?;
        }
        for (e, s) in t.entries.iter_mut().zip(new) {
            e.scale = s;
        }
        Ok(())
    }
}

/// Where adapter `id` is in `entries`, or a 400 naming `param`.
fn position(entries: &[LoraEntry], id: i64, param: &str) -> Result<usize, ApiError> {
    entries
        .iter()
        .position(|e| i64::try_from(e.id) == Ok(id))
        .ok_or_else(|| {
            let ids: Vec<String> = entries.iter().map(|e| e.id.to_string()).collect();
            let known = if ids.is_empty() {
                "no LoRA adapters are loaded".to_string()
            } else {
                format!("the loaded adapters' ids are {}", ids.join(", "))
            };
            ApiError::invalid(param, format!("no LoRA adapter has id {id}; {known}"))
        })
}

/// A scale as the engine takes it, or a 400 naming `param`.
fn scale(s: f64, param: &str) -> Result<f32, ApiError> {
    let f = s as f32;
    if !f.is_finite() {
        return Err(ApiError::invalid(
            param,
            format!("a LoRA scale must be a finite number, not {s}"),
        ));
    }
    Ok(f)
}

/// The model name a reply reports: the adapter's name when `model` names an adapter (as vLLM
/// answers), else the served model's.
pub fn served_as(model: Option<&str>, m: &Loaded) -> String {
    match model {
        Some(name) if m.loras.by_name(name).is_some() => name.to_string(),
        _ => m.model_id.clone(),
    }
}

/// The adapters a request computes with: the one `model` names if it is an adapter's name,
/// those `lora` lists, or, when it names none, the global scales. Errors name the field.
pub fn request_loras(
    model: Option<&str>,
    lora: Option<&[LoraChoice]>,
    m: &Loaded,
) -> Result<Vec<LoraRequest>, ApiError> {
    let entries = m.loras.list();
    let mut out = Vec::new();
    if let Some(e) = model.and_then(|n| entries.iter().find(|e| e.name == n)) {
        out.push(LoraRequest {
            name: e.name.clone(),
            scale: 1.0,
        });
    }
    let asked_any = !out.is_empty() || lora.is_some();
    for (i, c) in lora.unwrap_or_default().iter().enumerate() {
        let e = &entries[position(&entries, c.id, &format!("lora[{i}].id"))?];
        let scale = scale(c.scale, &format!("lora[{i}].scale"))?;
        if out.iter().any(|l| l.name == e.name) {
            return Err(ApiError::invalid(
                &format!("lora[{i}].id"),
                format!("LoRA adapter {} ('{}') is named twice", e.id, e.name),
            ));
        }
        out.push(LoraRequest {
            name: e.name.clone(),
            scale,
        });
    }
    if !asked_any {
        out = entries
            .iter()
            .filter(|e| e.scale != 0.0)
            .map(|e| LoraRequest {
                name: e.name.clone(),
                scale: e.scale,
            })
            .collect();
    }
    Ok(out)
}
