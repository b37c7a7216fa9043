//! LoRA adapters on the engine's side: the registry of the adapters requests may name (name →
//! file), which of them the runner has loaded, and the key that keeps their KV apart.
//!
//! - A request names adapters by name with a scale each (`LoraRequest`); the engine resolves
//!   them when it queues the request into the runner's `LoraId`s (`SeqChunk::loras`), loading
//!   an adapter the runner dropped again from its file. Scale 0 is the base model for that
//!   adapter, so such an entry is left out.
//! - At most `max_loaded` adapters are loaded at once. A load that needs room drops the least
//!   recently used loaded adapter that no request in the engine uses (waiting, running, parked
//!   on a KV tier fetch or waiting to fork: every request the engine holds state for); when all
//!   are in use, the load fails and says so.
//! - Removing an adapter (`unregister`) forgets its name at once; the runner drops it when no
//!   request uses it any more (`sweep`).
//! - `adapters_key`: SHA-256 over each adapter's file contents (hashed when it is loaded) and
//!   scale, order-free. It roots the sequence's prefix chain (`kv_manager`), so prefix-cache
//!   keys, KV tier keys and KV events all differ between adapters, scales and the base, and a
//!   tier's tiles (which outlive the process) are found again only for the same file contents.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use model::{LoraId, LoraUse};
use sha2::{Digest, Sha256};

use crate::kv_events::LoraTag;
use crate::request::EngineError;
use crate::runner::Runner;
use crate::tiles::PrefixKey;

/// One adapter a request computes with, by the name it was registered under.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraRequest {
    pub name: String,
    /// Multiplies the adapter's `alpha / rank` (llama.cpp's scale); 0 is the base model.
    pub scale: f32,
}

/// An adapter the registry knows, as listed (`Engine::loras`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoraInfo {
    /// Its number: 1 for the first adapter registered, and so on, never reused (the `lora_id`
    /// of its KV events).
    pub id: u64,
    pub name: String,
    pub path: PathBuf,
    /// Whether the runner holds it now (an adapter not loaded is loaded again when used).
    pub loaded: bool,
}

/// A registered adapter.
struct Adapter {
    /// See `LoraInfo::id`.
    id: u64,
    path: PathBuf,
    /// SHA-256 of the file as last loaded.
    hash: [u8; 32],
    loaded: Option<LoraId>,
    /// The registry's use counter when it was last named (least recently used goes first).
    last_used: u64,
    /// Registration order (listing order).
    order: u64,
}

/// The adapters requests may name and which the runner holds.
pub(crate) struct LoraRegistry {
    max_loaded: usize,
    adapters: HashMap<String, Adapter>,
    /// Adapters whose name was removed while requests still used them: the runner drops each
    /// once no request does.
    retired: Vec<LoraId>,
    uses: u64,
    /// Adapters registered so far (the last `Adapter::id`).
    registered: u64,
}

/// SHA-256 of the file at `path`.
fn file_hash(path: &Path) -> Result<[u8; 32], String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// The key of a set of adapters with their scales (file contents hash, scale): none for the
/// empty set (the base model); the same whatever the order.
pub fn adapters_key(adapters: &[([u8; 32], f32)]) -> Option<PrefixKey> {
    if adapters.is_empty() {
        return None;
    }
    let mut sorted: Vec<([u8; 32], u32)> =
        adapters.iter().map(|(h, s)| (*h, s.to_bits())).collect();
    sorted.sort_unstable();
    let mut h = Sha256::new();
    h.update(b"tessera-lora-v1");
    for (hash, scale) in sorted {
        h.update(hash);
        h.update(scale.to_le_bytes());
    }
    let d = h.finalize();
    let mut k = [0u8; 16];
    k.copy_from_slice(&d[..16]);
    Some(u128::from_le_bytes(k))
}

fn invalid(m: String) -> EngineError {
    EngineError::InvalidRequest(m)
}

impl LoraRegistry {
    pub(crate) fn new(max_loaded: usize) -> LoraRegistry {
        LoraRegistry {
            max_loaded: max_loaded.max(1),
            adapters: HashMap::new(),
            retired: Vec::new(),
            uses: 0,
            registered: 0,
        }
    }

    /// Registers `name` for the adapter file at `path` and loads it (checked against the
    /// model: the error names the file and the tensor), dropping the least recently used
    /// adapter no request uses if `max_loaded` are loaded.
    pub(crate) fn register<R: Runner>(
        &mut self,
        runner: &mut R,
        name: &str,
        path: &Path,
        in_use: &HashSet<LoraId>,
    ) -> Result<(), EngineError> {
        if name.is_empty() {
            return Err(invalid("a LoRA adapter needs a name".into()));
        }
        if self.adapters.contains_key(name) {
            return Err(invalid(format!(
                "a LoRA adapter named '{name}' is already loaded"
            )));
        }
        let (id, hash) = self.load(runner, path, in_use)?;
        self.uses += 1;
        let order = self.uses;
        self.registered += 1;
        self.adapters.insert(
            name.to_string(),
            Adapter {
                id: self.registered,
                path: path.to_path_buf(),
                hash,
                loaded: Some(id),
                last_used: self.uses,
                order,
            },
        );
        Ok(())
    }

    /// Forgets `name`; the runner drops the adapter now if no request uses it, else once none
    /// does (`sweep`).
    pub(crate) fn unregister<R: Runner>(
        &mut self,
        runner: &mut R,
        name: &str,
        in_use: &HashSet<LoraId>,
    ) -> Result<(), EngineError> {
        let a = self
            .adapters
            .remove(name)
            .ok_or_else(|| invalid(format!("no LoRA adapter named '{name}' is loaded")))?;
        if let Some(id) = a.loaded {
            self.retired.push(id);
        }
        self.sweep(runner, in_use);
        Ok(())
    }

    /// Adapters the runner holds (removed ones still in use included).
    pub(crate) fn loaded(&self) -> usize {
        self.adapters
            .values()
            .filter(|a| a.loaded.is_some())
            .count()
            + self.retired.len()
    }

    /// Whether adapters wait to be dropped once no request uses them.
    pub(crate) fn has_retired(&self) -> bool {
        !self.retired.is_empty()
    }

    /// Drops the retired adapters no request uses.
    pub(crate) fn sweep<R: Runner>(&mut self, runner: &mut R, in_use: &HashSet<LoraId>) {
        self.retired.retain(|id| {
            if in_use.contains(id) {
                return true;
            }
            if let Err(e) = runner.unload_lora(*id) {
                tracing::warn!("dropping LoRA adapter {}: {e}", id.0);
            }
            false
        });
    }

    /// The adapters registered, in registration order.
    pub(crate) fn list(&self) -> Vec<LoraInfo> {
        let mut v: Vec<(&String, &Adapter)> = self.adapters.iter().collect();
        v.sort_by_key(|(_, a)| a.order);
        v.into_iter()
            .map(|(name, a)| LoraInfo {
                id: a.id,
                name: name.clone(),
                path: a.path.clone(),
                loaded: a.loaded.is_some(),
            })
            .collect()
    }

    /// The runner's ids and the adapters' key for `asked` (entries of scale 0 left out),
    /// loading adapters the runner dropped. `in_use`: the adapters requests in the engine use.
    pub(crate) fn resolve<R: Runner>(
        &mut self,
        runner: &mut R,
        asked: &[LoraRequest],
        in_use: &HashSet<LoraId>,
    ) -> Result<(Vec<LoraUse>, Option<PrefixKey>), EngineError> {
        let asked: Vec<&LoraRequest> = asked.iter().filter(|l| l.scale != 0.0).collect();
        for (i, l) in asked.iter().enumerate() {
            if !l.scale.is_finite() {
                return Err(invalid(format!(
                    "the scale of LoRA adapter '{}' must be a finite number",
                    l.name
                )));
            }
            if !self.adapters.contains_key(&l.name) {
                return Err(invalid(format!(
                    "no LoRA adapter named '{}' is loaded",
                    l.name
                )));
            }
            if asked[..i].iter().any(|o| o.name == l.name) {
                return Err(invalid(format!(
                    "LoRA adapter '{}' is named twice in one request",
                    l.name
                )));
            }
        }
        if asked.len() > self.max_loaded {
            return Err(invalid(format!(
                "the request names {} LoRA adapters; at most {} can be loaded at once \
                 (--max-loras)",
                asked.len(),
                self.max_loaded
            )));
        }
        // The adapters this request names count as in use while the others load.
        let mut held = in_use.clone();
        held.extend(
            asked
                .iter()
                .filter_map(|l| self.adapters.get(&l.name).and_then(|a| a.loaded)),
        );
        let mut uses = Vec::with_capacity(asked.len());
        let mut keyed = Vec::with_capacity(asked.len());
        for l in asked {
            self.uses += 1;
            let now = self.uses;
            let a = self
                .adapters
                .get(&l.name)
                .ok_or_else(|| invalid(format!("no LoRA adapter named '{}' is loaded", l.name)))?;
            let id = match a.loaded {
                Some(id) => id,
                None => {
                    let path = a.path.clone();
                    let (id, hash) = self.load(runner, &path, &held)?;
                    if let Some(a) = self.adapters.get_mut(&l.name) {
                        a.loaded = Some(id);
                        a.hash = hash;
                    }
                    held.insert(id);
                    id
                }
            };
            if let Some(a) = self.adapters.get_mut(&l.name) {
                a.last_used = now;
                keyed.push((a.hash, l.scale));
            }
            uses.push(LoraUse { id, scale: l.scale });
        }
        Ok((uses, adapters_key(&keyed)))
    }

    /// How KV events name the adapters of `asked` (entries of scale 0 left out; see
    /// `LoraTag`); none for the base model.
    pub(crate) fn tag(&self, asked: &[LoraRequest]) -> Option<LoraTag> {
        let used: Vec<&LoraRequest> = asked.iter().filter(|l| l.scale != 0.0).collect();
        match used[..] {
            [] => None,
            [l] if l.scale == 1.0 => Some(LoraTag {
                id: self.adapters.get(&l.name).map(|a| a.id),
                name: l.name.clone(),
            }),
            _ => {
                let mut parts: Vec<String> = used
                    .iter()
                    .map(|l| format!("{}*{}", l.name, l.scale))
                    .collect();
                parts.sort();
                Some(LoraTag {
                    id: None,
                    name: parts.join("+"),
                })
            }
        }
    }

    /// Loads the file at `path` into the runner (after making room) and hashes it.
    fn load<R: Runner>(
        &mut self,
        runner: &mut R,
        path: &Path,
        in_use: &HashSet<LoraId>,
    ) -> Result<(LoraId, [u8; 32]), EngineError> {
        let hash =
            file_hash(path).map_err(|e| invalid(format!("cannot read LoRA adapter file {e}")))?;
        self.make_room(runner, in_use)?;
        let id = runner.load_lora(path).map_err(|e| {
            let msg = e.to_string();
            let msg = msg.strip_prefix("bad batch: ").unwrap_or(&msg);
            invalid(format!("LoRA adapter {}: {msg}", path.display()))
        })?;
        Ok((id, hash))
    }

    /// Drops least recently used adapters no request uses until one more fits.
    fn make_room<R: Runner>(
        &mut self,
        runner: &mut R,
        in_use: &HashSet<LoraId>,
    ) -> Result<(), EngineError> {
        while self.loaded() >= self.max_loaded {
            self.sweep(runner, in_use);
            if self.loaded() < self.max_loaded {
                break;
            }
            let victim = self
                .adapters
                .values_mut()
                .filter(|a| a.loaded.is_some_and(|id| !in_use.contains(&id)))
                .min_by_key(|a| a.last_used);
            let Some(a) = victim else {
                return Err(EngineError::Overloaded(format!(
                    "all {} loaded LoRA adapters (--max-loras) are in use by requests: \
                     no room to load another until one of them is free",
                    self.max_loaded
                )));
            };
            let id = a.loaded.take().expect("filtered on loaded: this is a bug");
            runner.unload_lora(id).map_err(|e| {
                EngineError::Internal(format!("dropping LoRA adapter {}: {e}", id.0))
            })?;
        }
        Ok(())
    }
}

impl<R: Runner> crate::engine::Engine<R> {
    /// The adapters the requests in the engine use.
    pub(crate) fn loras_in_use(&self) -> HashSet<LoraId> {
        self.reqs
            .values()
            .flat_map(|r| r.loras.iter().map(|l| l.id))
            .collect()
    }

    /// Names the adapters of root `key` for KV events. The names of roots no request uses any
    /// more are forgotten once there are many (tiles keep theirs): scales are the client's
    /// choice, so the roots seen are unbounded.
    pub(crate) fn tag_lora_root(&mut self, key: PrefixKey, tag: LoraTag) {
        const ROOT_TAGS: usize = 256;
        if self.sched.kv_mut().root_tags() >= ROOT_TAGS {
            let live: HashSet<PrefixKey> = self.reqs.values().filter_map(|r| r.lora_key).collect();
            self.sched.kv_mut().retain_root_tags(|k| live.contains(&k));
        }
        self.sched.kv_mut().tag_root(key, tag);
    }

    /// Drops the removed adapters no request uses any more.
    pub(crate) fn sweep_loras(&mut self) {
        if self.loras.has_retired() {
            let in_use = self.loras_in_use();
            self.loras.sweep(&mut self.runner, &in_use);
        }
    }

    /// Registers adapter `name` (the GGUF adapter file at `path`) for requests to name, and
    /// loads it (see `LoraRegistry::register`).
    pub fn load_lora(&mut self, name: &str, path: &Path) -> Result<(), EngineError> {
        let in_use = self.loras_in_use();
        self.loras.register(&mut self.runner, name, path, &in_use)
    }

    /// Forgets adapter `name`: new requests cannot name it; the runner drops it once the
    /// requests using it have ended.
    pub fn unload_lora(&mut self, name: &str) -> Result<(), EngineError> {
        let in_use = self.loras_in_use();
        self.loras.unregister(&mut self.runner, name, &in_use)
    }

    /// The adapters requests may name, in registration order.
    pub fn loras(&self) -> Vec<LoraInfo> {
        self.loras.list()
    }

    /// How many adapters the runner holds now (removed ones still in use included).
    pub fn loras_loaded(&self) -> usize {
        self.loras.loaded()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_depends_on_contents_and_scale_not_order() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert_eq!(adapters_key(&[]), None);
        let k = adapters_key(&[(a, 1.0), (b, 0.5)]);
        assert_eq!(k, adapters_key(&[(b, 0.5), (a, 1.0)]));
        assert_ne!(k, adapters_key(&[(a, 1.0), (b, 1.0)]));
        assert_ne!(k, adapters_key(&[(a, 1.0)]));
        assert_ne!(adapters_key(&[(a, 1.0)]), adapters_key(&[(b, 1.0)]));
    }
}
