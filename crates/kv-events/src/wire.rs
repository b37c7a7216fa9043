//! vLLM's KV event wire format, in MessagePack, as its `msgspec` structs encode it.
//!
//! A batch is an array `[ts, events, data_parallel_rank]`: `ts` a float64 (Unix seconds), the
//! rank 0 (one engine). Each event is a map whose first entry is its tag, `"type"`: the
//! struct's class name (msgspec `tag=True`), then its fields by name in declaration order.
//! Fields that have no default are always written, `None` as nil; fields with a default are
//! left out at their default (`omit_defaults=True`):
//!
//! - `BlockStored`: `block_hashes` (one), `parent_block_hash` (nil for a first tile),
//!   `token_ids`, `block_size`, `lora_id`, `medium` nil, `lora_name` (`lora_id` and
//!   `lora_name` nil for the base model; see `kv_events::LoraTag`), then
//!   `extra_keys` (`[nil]`: no extra keys for the block), `group_idx` (the KV group),
//!   `kv_cache_spec_kind` (`"full_attention"`, or `"sliding_window"` with
//!   `kv_cache_spec_sliding_window`, the window in tokens, for a group whose out-of-window
//!   tiles are released).
//! - `BlockRemoved`: `block_hashes` (one), `medium` nil, `group_idx`.
//! - `AllBlocksCleared`: the tag alone.
//!
//! Block hashes are unsigned 64-bit integers (`kv_events::external_hash`: the low 64 bits of
//! the tile's key in its group), written in msgpack's shortest integer form, as msgspec
//! writes Python ints. `medium` is nil rather than vLLM's `"GPU"`: the pool is the memory
//! attention reads from, on the CPU; subscribers such as llm-d index events without a medium
//! under their primary tier.
//!
//! vLLM encoded events as positional arrays until its KV event structs dropped `array_like`
//! (vLLM PR 42892); the batch stayed an array. This is the current form, which llm-d's
//! subscriber decodes along with the old one.

use engine::kv_events::{external_hash, KvEvent, KvEventBatch, StoredTile};
use rmp::encode::{write_array_len, write_f64, write_map_len, write_nil, write_str, write_uint};

/// Writing into a `Vec` cannot fail; rmp still returns a `Result` for any `Write`.
fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    r.expect("writing msgpack into a Vec cannot fail: this is a bug")
}

fn key(out: &mut Vec<u8>, k: &str) {
    ok(write_str(out, k));
}

fn uint(out: &mut Vec<u8>, v: u64) {
    ok(write_uint(out, v));
}

fn nil(out: &mut Vec<u8>) {
    ok(write_nil(out));
}

/// The msgpack payload of one batch.
pub fn encode_batch(batch: &KvEventBatch, tile_size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + batch.events.len() * (96 + 3 * tile_size));
    ok(write_array_len(&mut out, 3));
    ok(write_f64(&mut out, batch.ts));
    ok(write_array_len(&mut out, batch.events.len() as u32));
    for e in &batch.events {
        encode_event(&mut out, e, tile_size);
    }
    uint(&mut out, 0); // data_parallel_rank
    out
}

fn encode_event(out: &mut Vec<u8>, e: &KvEvent, tile_size: usize) {
    match e {
        KvEvent::Stored(t) => encode_stored(out, t, tile_size),
        KvEvent::Removed { group, key: k } => {
            ok(write_map_len(out, 4));
            key(out, "type");
            key(out, "BlockRemoved");
            key(out, "block_hashes");
            ok(write_array_len(out, 1));
            uint(out, external_hash(*k));
            key(out, "medium");
            nil(out);
            key(out, "group_idx");
            uint(out, *group as u64);
        }
        KvEvent::AllCleared => {
            ok(write_map_len(out, 1));
            key(out, "type");
            key(out, "AllBlocksCleared");
        }
    }
}

fn encode_stored(out: &mut Vec<u8>, t: &StoredTile, tile_size: usize) {
    ok(write_map_len(out, if t.window.is_some() { 12 } else { 11 }));
    key(out, "type");
    key(out, "BlockStored");
    key(out, "block_hashes");
    ok(write_array_len(out, 1));
    uint(out, external_hash(t.key));
    key(out, "parent_block_hash");
    match t.parent {
        Some(p) => uint(out, external_hash(p)),
        None => nil(out),
    }
    key(out, "token_ids");
    ok(write_array_len(out, t.tokens.len() as u32));
    for &id in &t.tokens {
        uint(out, u64::from(id));
    }
    key(out, "block_size");
    uint(out, tile_size as u64);
    key(out, "lora_id");
    match t.lora.as_ref().and_then(|l| l.id) {
        Some(id) => uint(out, id),
        None => nil(out),
    }
    key(out, "medium");
    nil(out);
    key(out, "lora_name");
    match &t.lora {
        Some(l) => ok(write_str(out, &l.name)),
        None => nil(out),
    }
    key(out, "extra_keys");
    ok(write_array_len(out, 1));
    nil(out);
    key(out, "group_idx");
    uint(out, t.group as u64);
    key(out, "kv_cache_spec_kind");
    match t.window {
        None => key(out, "full_attention"),
        Some(w) => {
            key(out, "sliding_window");
            key(out, "kv_cache_spec_sliding_window");
            uint(out, w as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::kv_events::LoraTag;

    /// A msgpack fixstr (under 32 bytes): 0xa0 | length, then the bytes.
    fn s(text: &str) -> Vec<u8> {
        assert!(text.len() < 32);
        let mut v = vec![0xa0 | text.len() as u8];
        v.extend_from_slice(text.as_bytes());
        v
    }

    fn batch(events: Vec<KvEvent>) -> KvEventBatch {
        KvEventBatch {
            seq: 0,
            ts: 1.5,
            events,
        }
    }

    /// `[1.5, [event], 0]` around the event's bytes.
    fn framed(event: &[u8]) -> Vec<u8> {
        let mut v = vec![0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x91];
        v.extend_from_slice(event);
        v.push(0x00);
        v
    }

    #[test]
    fn block_stored_has_vllms_bytes() {
        let tile = StoredTile {
            group: 0,
            window: None,
            // Only the low 64 bits go on the wire.
            key: 0xdead_beef_0000_0000_fedc_ba98_7654_3210,
            parent: None,
            tokens: vec![1, 300],
            lora: None,
        };
        let mut e = vec![0x8b]; // a map of 11 entries
        e.extend(s("type"));
        e.extend(s("BlockStored"));
        e.extend(s("block_hashes"));
        e.extend([0x91, 0xcf, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10]); // [uint64]
        e.extend(s("parent_block_hash"));
        e.push(0xc0); // nil
        e.extend(s("token_ids"));
        e.extend([0x92, 0x01, 0xcd, 0x01, 0x2c]); // [1, uint16 300]
        e.extend(s("block_size"));
        e.push(0x02);
        for k in ["lora_id", "medium", "lora_name"] {
            e.extend(s(k));
            e.push(0xc0);
        }
        e.extend(s("extra_keys"));
        e.extend([0x91, 0xc0]); // [nil]
        e.extend(s("group_idx"));
        e.push(0x00);
        e.extend(s("kv_cache_spec_kind"));
        e.extend(s("full_attention"));
        assert_eq!(
            encode_batch(&batch(vec![KvEvent::Stored(tile)]), 2),
            framed(&e)
        );
    }

    #[test]
    fn a_sliding_window_block_names_its_window_and_its_parent() {
        let tile = StoredTile {
            group: 3,
            window: Some(512),
            key: 7,
            parent: Some(200),
            tokens: vec![5],
            lora: None,
        };
        let bytes = encode_batch(&batch(vec![KvEvent::Stored(tile)]), 1);
        assert_eq!(bytes[11], 0x8c, "12 entries");
        let mut tail = s("group_idx");
        tail.push(0x03);
        tail.extend(s("kv_cache_spec_kind"));
        tail.extend(s("sliding_window"));
        tail.extend(s("kv_cache_spec_sliding_window"));
        tail.extend([0xcd, 0x02, 0x00]); // uint16 512
        tail.push(0x00); // the batch's rank
        assert!(bytes.ends_with(&tail));
        let mut parent = s("parent_block_hash");
        parent.push(0xcc); // uint8 200
        parent.push(200);
        assert!(bytes.windows(parent.len()).any(|w| w == parent));
    }

    #[test]
    fn a_block_computed_with_an_adapter_names_it() {
        let tagged = |id, name: &str| StoredTile {
            group: 0,
            window: None,
            key: 7,
            parent: None,
            tokens: vec![5],
            lora: Some(std::sync::Arc::new(LoraTag {
                id,
                name: name.into(),
            })),
        };
        let bytes = encode_batch(&batch(vec![KvEvent::Stored(tagged(Some(3), "sql"))]), 1);
        let mut fields = s("lora_id");
        fields.push(0x03);
        fields.extend(s("medium"));
        fields.push(0xc0);
        fields.extend(s("lora_name"));
        fields.extend(s("sql"));
        assert!(bytes.windows(fields.len()).any(|w| w == fields));

        let bytes = encode_batch(&batch(vec![KvEvent::Stored(tagged(None, "a*0.5"))]), 1);
        let mut fields = s("lora_id");
        fields.push(0xc0);
        fields.extend(s("medium"));
        fields.push(0xc0);
        fields.extend(s("lora_name"));
        fields.extend(s("a*0.5"));
        assert!(bytes.windows(fields.len()).any(|w| w == fields));
    }

    #[test]
    fn block_removed_and_all_cleared_have_vllms_bytes() {
        let mut removed = vec![0x84];
        removed.extend(s("type"));
        removed.extend(s("BlockRemoved"));
        removed.extend(s("block_hashes"));
        removed.extend([0x91, 0x2a]);
        removed.extend(s("medium"));
        removed.push(0xc0);
        removed.extend(s("group_idx"));
        removed.push(0x01);
        let e = KvEvent::Removed { group: 1, key: 42 };
        assert_eq!(encode_batch(&batch(vec![e]), 16), framed(&removed));

        let mut cleared = vec![0x81];
        cleared.extend(s("type"));
        cleared.extend(s("AllBlocksCleared"));
        assert_eq!(
            encode_batch(&batch(vec![KvEvent::AllCleared]), 16),
            framed(&cleared)
        );
    }
}
