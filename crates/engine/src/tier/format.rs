//! The bytes of one tile in a tier: a header that says exactly what the tile holds, the tile's
//! bytes (`Runner::export_tile`), and a checksum over both.
//!
//! Layout (little-endian): magic `TKVB`, format version (u16), reserved (u16), the tier key
//! (32 bytes), a parent flag (u8) and the parent's chain key (u128), the token count (u32) and
//! the token ids, the tile byte count (u32) and the bytes, then the first 8 bytes of SHA-256
//! over everything before. `decode` checks every field against what the caller expects; any
//! difference — another key, other tokens, another parent, a bad length or checksum, a newer
//! format — is a miss.

use sha2::{Digest, Sha256};

use super::TierKey;

const MAGIC: &[u8; 4] = b"TKVB";
/// Bumped whenever the bytes would mean something else.
pub const FORMAT_VERSION: u16 = 1;
const CHECKSUM: usize = 8;

/// What a stored tile must be: its key, the chain key of the tile before it (none for a
/// prefix's first tile) and its own token ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileMeta {
    pub key: TierKey,
    pub parent: Option<u128>,
    pub tokens: Vec<u32>,
}

/// A tile on its way to a tier.
#[derive(Clone, Debug)]
pub struct TierTile {
    pub meta: TileMeta,
    pub bytes: Vec<u8>,
}

fn checksum(b: &[u8]) -> [u8; CHECKSUM] {
    let d = Sha256::digest(b);
    let mut c = [0u8; CHECKSUM];
    c.copy_from_slice(&d[..CHECKSUM]);
    c
}

/// The stored value of `tile`.
pub fn encode(tile: &TierTile) -> Vec<u8> {
    let m = &tile.meta;
    let mut v = Vec::with_capacity(64 + 4 * m.tokens.len() + tile.bytes.len() + CHECKSUM);
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    v.extend_from_slice(&0u16.to_le_bytes());
    v.extend_from_slice(&m.key.0);
    v.push(u8::from(m.parent.is_some()));
    v.extend_from_slice(&m.parent.unwrap_or(0).to_le_bytes());
    v.extend_from_slice(&(m.tokens.len() as u32).to_le_bytes());
    for t in &m.tokens {
        v.extend_from_slice(&t.to_le_bytes());
    }
    v.extend_from_slice(&(tile.bytes.len() as u32).to_le_bytes());
    v.extend_from_slice(&tile.bytes);
    let c = checksum(&v);
    v.extend_from_slice(&c);
    v
}

/// Reads `n` bytes at `*at`, moving past them.
fn take<'a>(v: &'a [u8], at: &mut usize, n: usize) -> Option<&'a [u8]> {
    let s = v.get(*at..at.checked_add(n)?)?;
    *at += n;
    Some(s)
}

fn u32_at(v: &[u8], at: &mut usize) -> Option<u32> {
    take(v, at, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The tile bytes of a stored value, if it is exactly the tile `want` describes (see the
/// module docs); `None` for anything else.
pub fn decode(value: &[u8], want: &TileMeta) -> Option<Vec<u8>> {
    let body_len = value.len().checked_sub(CHECKSUM)?;
    if value[body_len..] != checksum(&value[..body_len]) {
        return None;
    }
    let v = &value[..body_len];
    let mut at = 0;
    if take(v, &mut at, 4)? != MAGIC {
        return None;
    }
    let version = take(v, &mut at, 2)?;
    if u16::from_le_bytes([version[0], version[1]]) != FORMAT_VERSION {
        return None;
    }
    take(v, &mut at, 2)?;
    if take(v, &mut at, 32)? != want.key.0 {
        return None;
    }
    let has_parent = take(v, &mut at, 1)?[0] == 1;
    let mut p = [0u8; 16];
    p.copy_from_slice(take(v, &mut at, 16)?);
    let parent = has_parent.then_some(u128::from_le_bytes(p));
    if parent != want.parent {
        return None;
    }
    let n = u32_at(v, &mut at)? as usize;
    if n != want.tokens.len() {
        return None;
    }
    for &t in &want.tokens {
        if u32_at(v, &mut at)? != t {
            return None;
        }
    }
    let len = u32_at(v, &mut at)? as usize;
    let bytes = take(v, &mut at, len)?;
    (at == v.len()).then(|| bytes.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile() -> TierTile {
        TierTile {
            meta: TileMeta {
                key: TierKey([7; 32]),
                parent: Some(42),
                tokens: vec![1, 2, 3, 4],
            },
            bytes: (0..100u8).collect(),
        }
    }

    #[test]
    fn a_value_decodes_only_as_the_tile_it_is() {
        let t = tile();
        let v = encode(&t);
        assert_eq!(decode(&v, &t.meta), Some(t.bytes.clone()));
        let mut other = t.meta.clone();
        other.tokens[2] = 9;
        assert_eq!(decode(&v, &other), None, "other tokens");
        let mut other = t.meta.clone();
        other.parent = None;
        assert_eq!(decode(&v, &other), None, "other parent");
        let mut other = t.meta.clone();
        other.key = TierKey([8; 32]);
        assert_eq!(decode(&v, &other), None, "other key");
    }

    #[test]
    fn damaged_truncated_or_newer_values_are_misses() {
        let t = tile();
        let v = encode(&t);
        for cut in [0, 1, 10, v.len() / 2, v.len() - 1] {
            assert_eq!(decode(&v[..cut], &t.meta), None, "cut at {cut}");
        }
        for i in [0, 5, 40, 60, v.len() - 20, v.len() - 1] {
            let mut bad = v.clone();
            bad[i] ^= 0x10;
            assert_eq!(decode(&bad, &t.meta), None, "byte {i} flipped");
        }
        // A newer format with a valid checksum is still refused.
        let mut newer = v[..v.len() - CHECKSUM].to_vec();
        newer[4] = 2;
        let c = checksum(&newer);
        newer.extend_from_slice(&c);
        assert_eq!(decode(&newer, &t.meta), None);
    }
}
