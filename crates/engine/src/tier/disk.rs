//! The local disk tier: one file per tile under a directory, `<key hex>.tkv`.
//!
//! Writes go to a temporary file in the same directory and are renamed into place, so a reader
//! (this process or another sharing the directory) sees a whole file or none; a crash leaves at
//! worst a stray temporary file, removed at the next start. The index of what is stored and how
//! recently it was used is rebuilt from the directory at start (oldest modification first), and
//! files beyond the size cap are deleted least recently used first. A second process on the
//! same directory keeps its own index: it reads what the other wrote (a file not in its index is
//! still looked for) and a file the other deleted is simply a miss.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use super::{KvTier, TierError, TierKey};

const EXT: &str = "tkv";
const TMP_PREFIX: &str = ".tmp-";

/// See the module docs.
pub struct DiskTier {
    dir: PathBuf,
    max_bytes: u64,
    /// Size and last use of each stored file.
    entries: HashMap<TierKey, (u64, u64)>,
    /// Last use → key, oldest first.
    lru: BTreeMap<u64, TierKey>,
    bytes: u64,
    clock: u64,
    tmp_seq: u64,
}

fn io_err(what: impl Into<String>, source: std::io::Error) -> TierError {
    TierError::Io {
        tier: "disk",
        what: what.into(),
        source,
    }
}

impl DiskTier {
    /// Opens (creating it if needed) a tier in `dir` holding at most `max_bytes`.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<DiskTier, TierError> {
        fs::create_dir_all(dir).map_err(|e| io_err(format!("creating {}", dir.display()), e))?;
        let mut found = Vec::new();
        let listing =
            fs::read_dir(dir).map_err(|e| io_err(format!("reading {}", dir.display()), e))?;
        for entry in listing.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(TMP_PREFIX) {
                // Left by a crash mid-write (or another process writing right now: it will
                // see its rename fail and count one write error).
                let _ = fs::remove_file(entry.path());
                continue;
            }
            let Some(key) = name.strip_suffix(".tkv").and_then(TierKey::from_hex) else {
                continue;
            };
            let Ok(md) = entry.metadata() else { continue };
            let mtime = md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            found.push((mtime, key, md.len()));
        }
        found.sort();
        let mut tier = DiskTier {
            dir: dir.to_path_buf(),
            max_bytes,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            bytes: 0,
            clock: 0,
            tmp_seq: 0,
        };
        for (_, key, len) in found {
            tier.note(key, len);
        }
        tier.trim();
        Ok(tier)
    }

    /// Bytes of the files indexed.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Files indexed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn path(&self, key: &TierKey) -> PathBuf {
        self.dir.join(format!("{}.{EXT}", key.hex()))
    }

    /// Records `key` (of `len` bytes) as the most recently used.
    fn note(&mut self, key: TierKey, len: u64) {
        self.forget(&key);
        self.clock += 1;
        self.entries.insert(key, (len, self.clock));
        self.lru.insert(self.clock, key);
        self.bytes += len;
    }

    fn forget(&mut self, key: &TierKey) {
        if let Some((len, used)) = self.entries.remove(key) {
            self.lru.remove(&used);
            self.bytes -= len;
        }
    }

    /// Deletes least recently used files until the rest fit the cap.
    fn trim(&mut self) {
        while self.bytes > self.max_bytes {
            let Some((_, key)) = self.lru.pop_first() else {
                break;
            };
            if let Some((len, _)) = self.entries.remove(&key) {
                self.bytes -= len;
            }
            let _ = fs::remove_file(self.path(&key));
        }
    }
}

impl KvTier for DiskTier {
    fn name(&self) -> &'static str {
        "disk"
    }

    fn get(&mut self, keys: &[TierKey]) -> Result<Vec<Option<Vec<u8>>>, TierError> {
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            match fs::read(self.path(key)) {
                Ok(v) => {
                    self.note(*key, v.len() as u64);
                    out.push(Some(v));
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    self.forget(key);
                    out.push(None);
                }
                Err(e) => return Err(io_err(format!("reading {}", key.hex()), e)),
            }
        }
        self.trim();
        Ok(out)
    }

    fn put(&mut self, key: &TierKey, value: &[u8]) -> Result<(), TierError> {
        if value.len() as u64 > self.max_bytes {
            return Ok(()); // would evict everything and still not fit
        }
        self.tmp_seq += 1;
        let tmp = self.dir.join(format!(
            "{TMP_PREFIX}{}-{}",
            std::process::id(),
            self.tmp_seq
        ));
        let write = || -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(value)?;
            fs::rename(&tmp, self.path(key))
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(format!("writing {}", key.hex()), e));
        }
        self.note(*key, value.len() as u64);
        self.trim();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u8) -> TierKey {
        TierKey([i; 32])
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("tessera-disk-tier-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn values_survive_a_reopen_and_the_cap_evicts_least_recently_used() {
        let dir = tmpdir("lru");
        let mut t = DiskTier::open(&dir, 300).expect("opens");
        for i in 0..3 {
            t.put(&key(i), &[i; 100]).expect("writes");
        }
        assert_eq!(t.get(&[key(0)]).expect("reads"), vec![Some(vec![0; 100])]);
        t.put(&key(3), &[3; 100]).expect("writes");
        // Key 1 was the least recently used.
        let got = t.get(&[key(0), key(1), key(2), key(3)]).expect("reads");
        assert_eq!(got.iter().filter(|v| v.is_some()).count(), 3);
        assert!(got[1].is_none());
        drop(t);
        let mut again = DiskTier::open(&dir, 300).expect("reopens");
        assert_eq!(again.len(), 3);
        assert_eq!(
            again.get(&[key(3)]).expect("reads"),
            vec![Some(vec![3; 100])]
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_second_process_view_reads_what_the_first_wrote_and_stray_temp_files_go() {
        let dir = tmpdir("shared");
        let mut a = DiskTier::open(&dir, 1 << 20).expect("opens");
        let mut b = DiskTier::open(&dir, 1 << 20).expect("opens");
        fs::write(dir.join(".tmp-999-1"), b"half a write").expect("stray file");
        a.put(&key(9), b"hello").expect("writes");
        assert_eq!(
            b.get(&[key(9)]).expect("reads"),
            vec![Some(b"hello".to_vec())]
        );
        drop(a);
        let _ = DiskTier::open(&dir, 1 << 20).expect("reopens");
        assert!(!dir.join(".tmp-999-1").exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
