#!/usr/bin/env python3
"""Unpack a GGUF model into a BF16 Hugging Face checkpoint (safetensors + tokenizer).

vLLM's CPU backend cannot run GGUF; for a goodput comparison it serves the weights that
transformers dequantizes from the same GGUF file, stored as bfloat16. So vLLM runs the same
network as Tessera and llama.cpp, but at BF16 where they run the GGUF's quantized weights.

Usage: gguf_to_bf16.py GGUF OUT_DIR
Run it with the vLLM venv's python (transformers, torch and gguf installed by
install_vllm_cpu.sh).
"""

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", help="path of the .gguf file")
    parser.add_argument("out_dir", help="directory to write the BF16 checkpoint into")
    args = parser.parse_args()

    path = os.path.abspath(args.gguf)
    if not os.path.isfile(path):
        print(f"error: no such file: {args.gguf}", file=sys.stderr)
        return 1
    directory, name = os.path.split(path)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    # dequantize=True: every weight unpacked into a dense bfloat16 tensor (transformers can
    # otherwise keep GGUF blocks packed behind its own matmul kernels, which vLLM cannot read).
    model = AutoModelForCausalLM.from_pretrained(
        directory,
        gguf_file=name,
        torch_dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.bfloat16}:
        print(f"error: the unpacked model holds {sorted(map(str, dtypes))}, not only bfloat16", file=sys.stderr)
        return 1
    # The weights are now plain tensors; drop the GGUF quantizer, which refuses to be saved and
    # would write a quantization_config that tells vLLM to expect GGUF blocks.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    os.makedirs(args.out_dir, exist_ok=True)
    model.save_pretrained(args.out_dir)
    tokenizer.save_pretrained(args.out_dir)
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params / 1e6:.1f}M parameters, bfloat16, written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
