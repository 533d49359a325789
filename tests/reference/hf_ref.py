"""Independent float64 numpy reference of a Hugging Face checkpoint folder's forward pass.

Written from the published descriptions of LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM and
OPTForCausalLM (transformers' modeling code conventions: weights [out, in], RoPE that rotates
each head's two halves, `rotate_half`), apart from the C++ engine and from llama_ref.py, which
follows GGUF's layout. Gemma has its own forward (forward_gemma): its norms scale by 1 + w, and
its post_attention_layernorm normalizes the attention output where Llama's is the pre-FFN norm.
OPT has its own too (forward_opt): learned absolute positions (no RoPE) stored with an offset of
2 rows, LayerNorm with a bias, biases on every linear layer, a ReLU MLP without a gate.
Reads config.json and the safetensors files (single or sharded by
model.safetensors.index.json) itself: f32, f16 and bf16.

CLI:
    hf_ref.py --model DIR --tokens 1,2,3 --out logits.txt
        writes the logits of every position: one line per position, '%.9g' floats.
"""

import argparse
import json
import math
import os
import struct

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dtype = info["dtype"]
        if dtype == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dtype == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif dtype == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: dtype {dtype} not supported")
        tensors[name] = a.astype(np.float64).reshape(info["shape"])
    return tensors


def read_folder(folder):
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    weights = {}
    for shard in shards:
        weights.update(read_safetensors(os.path.join(folder, shard)))
    return config, weights


def inv_frequencies(config, head_dim, seq_len):
    """The inverse frequencies of the rotated pairs, and the factor on cos and sin."""
    theta = config.get("rope_theta", 10000.0)
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in ("longrope", "su"):
        # Phi-3: per-pair factors, the long set once the sequence is longer than the original
        # context; cos and sin scaled by sqrt(1 + ln(s) / ln(original)).
        original = scaling.get("original_max_position_embeddings", config.get("original_max_position_embeddings"))
        factors = scaling["long_factor"] if seq_len > original else scaling["short_factor"]
        s = config["max_position_embeddings"] / original
        mscale = scaling.get("attention_factor",
                             1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(original)))
        return inv_freq / np.asarray(factors, dtype=np.float64), mscale
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        # Meta's Llama 3.1 rule: long wavelengths slowed by the factor, short ones kept, the band
        # between interpolated.
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = np.where(wavelen < old / high, inv_freq,
                            np.where(wavelen > old / low, inv_freq / factor, blended))
    elif kind != "default":
        raise ValueError(f"rope scaling {kind} not covered by this reference")
    return inv_freq, 1.0


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def softcap(x, c):
    """c * tanh(x / c); c None or 0: x unchanged."""
    return c * np.tanh(x / c) if c else x


def attention(q, k, v, scale, mask, cap=None):
    """Grouped-query attention of q [n, n_head, d] over k, v [n, n_kv, d]: query head h reads kv
    head h // (n_head / n_kv); scores scaled, soft-capped (cap), masked (additive), softmaxed."""
    n, n_head, head_dim = q.shape
    group = n_head // k.shape[1]
    out = np.empty((n, n_head, head_dim))
    for hd in range(n_head):
        scores = softcap(q[:, hd, :] @ k[:, hd // group, :].T * scale, cap) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        out[:, hd, :] = scores @ v[:, hd // group, :]
    return out.reshape(n, n_head * head_dim)


def forward(config, w, tokens):
    arch = (config.get("architectures") or [""])[0]
    if arch in GEMMA:
        return forward_gemma(config, w, tokens)
    if arch == "OPTForCausalLM":
        return forward_opt(config, w, tokens)
    n_embd = config["hidden_size"]
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    head_dim = config.get("head_dim") or n_embd // n_head
    eps = config["rms_norm_eps"]
    n = len(tokens)

    inv_freq, mscale = inv_frequencies(config, head_dim, n)
    angles = np.outer(np.arange(n, dtype=np.float64), inv_freq)
    emb = np.concatenate([angles, angles], axis=-1)
    cos, sin = np.cos(emb)[:, None, :] * mscale, np.sin(emb)[:, None, :] * mscale

    # Phi-3 keeps q, k, v in one matrix and gate, up in another: split them as its model does.
    n_q, n_kv_dim, n_ff = n_head * head_dim, n_kv * head_dim, config["intermediate_size"]
    for il in range(config["num_hidden_layers"]):
        p = f"model.layers.{il}."
        qkv = w.pop(p + "self_attn.qkv_proj.weight", None)
        if qkv is not None:
            w[p + "self_attn.q_proj.weight"] = qkv[:n_q]
            w[p + "self_attn.k_proj.weight"] = qkv[n_q:n_q + n_kv_dim]
            w[p + "self_attn.v_proj.weight"] = qkv[n_q + n_kv_dim:]
        gate_up = w.pop(p + "mlp.gate_up_proj.weight", None)
        if gate_up is not None:
            w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"] = gate_up[:n_ff], gate_up[n_ff:]

    def linear(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    x = w["model.embed_tokens.weight"][tokens]
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    if config.get("sliding_window"):  # Mistral, Phi-3: every layer sees its last sliding_window keys
        dist = np.arange(n)[:, None] - np.arange(n)[None, :]
        mask = np.where((dist < 0) | (dist >= config["sliding_window"]), -np.inf, 0.0)
    for il in range(config["num_hidden_layers"]):
        p = f"model.layers.{il}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, p + "self_attn.q_proj").reshape(n, n_head, head_dim)
        k = linear(h, p + "self_attn.k_proj").reshape(n, n_kv, head_dim)
        v = linear(h, p + "self_attn.v_proj").reshape(n, n_kv, head_dim)
        if p + "self_attn.q_norm.weight" in w:  # Qwen3: each head RMS-normalized before RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        x = x + linear(attention(q, k, v, 1 / math.sqrt(head_dim), mask), p + "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = linear(h, p + "mlp.gate_proj")
        x = x + linear(gate / (1 + np.exp(-gate)) * linear(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


GEMMA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM")


def gemma_norm(x, w, eps):
    """Gemma's RMSNorm: the stored weight is the offset from 1."""
    return rms_norm(x, 1.0 + w, eps)


def gelu_tanh(u):
    return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def sliding_layers(config):
    """Whether each layer attends through the sliding window."""
    if config.get("layer_types"):
        return [t == "sliding_attention" for t in config["layer_types"]]
    if config["architectures"][0] == "Gemma2ForCausalLM":  # alternating, sliding first
        return [il % 2 == 0 for il in range(config["num_hidden_layers"])]
    pattern = config.get("sliding_window_pattern", 6)  # Gemma 3: pattern - 1 sliding, then 1 global
    return [(il + 1) % pattern != 0 for il in range(config["num_hidden_layers"])]


def forward_gemma(config, w, tokens):
    act = config.get("hidden_activation") or config.get("hidden_act")
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"hidden activation {act} not covered by this reference")
    gemma3 = config["architectures"][0] == "Gemma3ForCausalLM"
    n_embd = config["hidden_size"]
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    head_dim = config.get("head_dim") or n_embd // n_head
    eps = config["rms_norm_eps"]
    n = len(tokens)
    sliding = sliding_layers(config)
    scale = config.get("query_pre_attn_scalar", 256) ** -0.5  # 256: transformers' default
    attn_cap, final_cap = config.get("attn_logit_softcapping"), config.get("final_logit_softcapping")

    def cos_sin(cfg):
        inv_freq, _ = inv_frequencies(cfg, head_dim, n)
        angles = np.outer(np.arange(n, dtype=np.float64), inv_freq)
        emb = np.concatenate([angles, angles], axis=-1)
        return np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]

    # by whether the layer is sliding: (cos, sin) and the additive mask. Gemma 3's sliding layers
    # have their own base and no scaling (rope_scaling is the global layers'); Gemma 2's share one.
    rope = {False: cos_sin(config)}
    rope[True] = cos_sin(dict(config, rope_theta=config.get("rope_local_base_freq", 10000.0),
                              rope_scaling=None)) if gemma3 else rope[False]
    dist = np.arange(n)[:, None] - np.arange(n)[None, :]  # query position - key position
    masks = {False: np.where(dist < 0, -np.inf, 0.0),
             True: np.where((dist < 0) | (dist >= config["sliding_window"]), -np.inf, 0.0)}

    x = w["model.embed_tokens.weight"][tokens] * math.sqrt(n_embd)
    for il in range(config["num_hidden_layers"]):
        p = f"model.layers.{il}."
        cos, sin = rope[sliding[il]]
        h = gemma_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(n, n_head, head_dim)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(n, n_kv, head_dim)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n, n_kv, head_dim)
        if gemma3:  # each head RMS-normalized before RoPE
            q = gemma_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = gemma_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = attention(q, k, v, scale, masks[sliding[il]], attn_cap) @ w[p + "self_attn.o_proj.weight"].T
        x = x + gemma_norm(a, w[p + "post_attention_layernorm.weight"], eps)
        h = gemma_norm(x, w[p + "pre_feedforward_layernorm.weight"], eps)
        m = gelu_tanh(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        m = m @ w[p + "mlp.down_proj.weight"].T
        x = x + gemma_norm(m, w[p + "post_feedforward_layernorm.weight"], eps)
    x = gemma_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return softcap(x @ head.T, final_cap)


def layer_norm(x, w, b, eps):
    """LayerNorm over the last axis (population variance), then the affine weight and bias."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def forward_opt(config, w, tokens):
    n_embd = config["hidden_size"]
    # only the pre-LN layout of every size but 350m is covered: 350m normalizes after the residual
    # add and projects its 512-wide embeddings in and out of the 1024-wide decoder
    if not config.get("do_layer_norm_before", True):
        raise ValueError("OPT with do_layer_norm_before false (post-LN, opt-350m) not covered by this reference")
    if config.get("word_embed_proj_dim", n_embd) != n_embd:
        raise ValueError("OPT with word_embed_proj_dim != hidden_size (project_in/out) not covered by this reference")
    act = config.get("activation_function", "relu")
    if act != "relu":
        raise ValueError(f"OPT activation {act} not covered by this reference")
    if not config.get("enable_bias", True) or not config.get("layer_norm_elementwise_affine", True):
        raise ValueError("OPT without biases or without affine LayerNorms not covered by this reference")
    if config.get("_remove_final_layer_norm"):
        raise ValueError("OPT without its final LayerNorm not covered by this reference")
    n_head = config["num_attention_heads"]
    head_dim = n_embd // n_head
    eps = 1e-5  # torch's LayerNorm default: OPT's config has no key for it
    n = len(tokens)
    if n > config["max_position_embeddings"]:
        raise ValueError(f"{n} tokens exceed max_position_embeddings {config['max_position_embeddings']}")

    def linear(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    def norm(x, name):
        return layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)

    d = "model.decoder."
    # the position table keeps 2 rows before position 0 (OPT's offset): position p reads row p + 2
    x = w[d + "embed_tokens.weight"][tokens] + w[d + "embed_positions.weight"][np.arange(n) + 2]
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    for il in range(config["num_hidden_layers"]):
        p = f"{d}layers.{il}."
        h = norm(x, p + "self_attn_layer_norm")
        q = linear(h, p + "self_attn.q_proj").reshape(n, n_head, head_dim)
        k = linear(h, p + "self_attn.k_proj").reshape(n, n_head, head_dim)
        v = linear(h, p + "self_attn.v_proj").reshape(n, n_head, head_dim)
        x = x + linear(attention(q, k, v, 1 / math.sqrt(head_dim), mask), p + "self_attn.out_proj")
        h = norm(x, p + "final_layer_norm")
        x = x + linear(np.maximum(linear(h, p + "fc1"), 0.0), p + "fc2")
    x = norm(x, d + "final_layer_norm")
    head = w.get("lm_head.weight", w[d + "embed_tokens.weight"])  # tied when absent
    return x @ head.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the checkpoint folder")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="where to write the logits")
    args = ap.parse_args()
    config, weights = read_folder(args.model)
    logits = forward(config, weights, [int(t) for t in args.tokens.split(",")])
    with open(args.out, "w", encoding="utf-8") as f:
        for row in logits:
            f.write(" ".join(f"{v:.9g}" for v in row) + "\n")


if __name__ == "__main__":
    main()
