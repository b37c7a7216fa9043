//! LoRA adapter management: llama-server's `GET` / `POST /lora-adapters` (the adapters with
//! their ids, and the global scales requests naming no adapter compute with) and vLLM's
//! `POST /v1/load_lora_adapter` / `/v1/unload_lora_adapter` (adapters added and removed at run
//! time). All are behind the API key when one is set. Which adapters a generation request uses
//! is `serving::lora`.

pub mod handler;
pub mod protocol;
