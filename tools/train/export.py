"""Writes a trained model as a tensor bundle (bundle.json + weights.f32) that
`leoam gguf pack` turns into a GGUF file: llama architecture, byte-level gpt2 vocabulary
(the 256 bytes in GPT-2's byte-to-unicode spelling, no merges, then <s> and </s>)."""

import json
import os

import numpy as np

from llama_model import tensor_shapes


def byte_token_texts():
    """GPT-2's printable spelling of the 256 bytes (bytes_to_unicode), in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    spelled, extra = {}, 0
    for b in range(256):
        if b in keep:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + extra)
            extra += 1
    return [spelled[b] for b in range(256)]


def metadata(cfg):
    tokens = byte_token_texts() + ["<s>", "</s>"]
    types = [1] * 256 + [3, 3]  # normal bytes, then control tokens
    m = [("general.architecture", "str", "llama"),
         ("general.name", "str", "leoam-byte-4l"),
         ("general.file_type", "u32", 1),  # mostly F16
         ("llama.context_length", "u32", 32768),
         ("llama.embedding_length", "u32", cfg.dim),
         ("llama.block_count", "u32", cfg.n_layers),
         ("llama.feed_forward_length", "u32", cfg.ffn),
         ("llama.attention.head_count", "u32", cfg.n_heads),
         ("llama.attention.head_count_kv", "u32", cfg.n_kv_heads),
         ("llama.attention.key_length", "u32", cfg.head_dim),
         ("llama.attention.value_length", "u32", cfg.head_dim),
         ("llama.attention.layer_norm_rms_epsilon", "f32", cfg.eps),
         ("llama.rope.dimension_count", "u32", cfg.n_rot),
         ("llama.rope.freq_base", "f32", cfg.rope_base),
         ("llama.vocab_size", "u32", cfg.vocab),
         ("tokenizer.ggml.model", "str", "gpt2"),
         ("tokenizer.ggml.tokens", "arr_str", tokens),
         ("tokenizer.ggml.token_type", "arr_i32", types),
         ("tokenizer.ggml.merges", "arr_str", []),
         ("tokenizer.ggml.bos_token_id", "u32", 256),
         ("tokenizer.ggml.eos_token_id", "u32", 257),
         ("tokenizer.ggml.add_bos_token", "bool", True),
         ("tokenizer.ggml.add_eos_token", "bool", False)]
    if cfg.logn_length:
        m.append(("leoam.attention.logn_length", "u32", cfg.logn_length))
    return [{"key": k, "type": t, "value": v} for k, t, v in m]


def write_bundle(out_dir, cfg, weights):
    """weights: {GGUF name: torch tensor}. Norm gains stay F32, matrices are stored F16."""
    shapes = tensor_shapes(cfg)
    tensors, offset = [], 0
    with open(os.path.join(out_dir, "weights.f32"), "wb") as f:
        for name, shape in shapes.items():
            a = weights[name].detach().cpu().numpy().astype("<f4")
            assert a.shape == tuple(shape), (name, a.shape, shape)
            f.write(a.tobytes())
            tensors.append({"name": name, "shape": list(shape), "offset": offset,
                            "type": "f32" if len(shape) == 1 else "f16"})
            offset += a.nbytes
    manifest = {"format": "leoam-tensor-bundle", "version": 1, "data": "weights.f32",
                "metadata": metadata(cfg), "tensors": tensors}
    with open(os.path.join(out_dir, "bundle.json"), "w") as f:
        json.dump(manifest, f, indent=1)
