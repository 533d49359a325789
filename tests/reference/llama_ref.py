"""Independent float64 numpy reference of the llama / qwen2 / qwen3 / phi3 / gemma2 / gemma3 /
opt forward pass.

Written from the ggml / llama.cpp conventions, apart from the C++ engine, so the
engine's logits can be checked against it.

CLI:
    llama_ref.py --model M.gguf --tokens 1,2,3 [--kv-f16] [--q8-activations] [--n-ctx N] --out logits.txt
        writes logits of every position: one line per position, '%.9g' floats.
    llama_ref.py --model M.gguf --tokens 1 --greedy N
        prints the N greedily generated token ids (one line, space separated).

Shapes: a GGUF weight with ne = [n_in, n_out] loads as numpy [n_out][n_in]; y = W @ x.

llama (Mistral) and phi3 with `attention.sliding_window` shorter than the context (phi3 mini and
medium 4K without the key: 2047, llama.cpp's default): every layer sees only the last that many
positions, its own included (leoam's reading; this llama.cpp applies it to phi3 only).

gemma2 / gemma3, as llama.cpp's converter writes them: the norm weights already hold Gemma's
1 + w, q/k rows unpermuted (NeoX pairing), output tied to token_embd. The embedding is scaled by
sqrt(n_embd), attention and FFN outputs are RMS-normalized again before their residual adds
(post_attention_norm, post_ffw_norm), the FFN is GELU (tanh form), q.k and the logits may be
soft-capped (c * tanh(x / c)), and sliding layers see only the last `attention.sliding_window`
positions, their own included.

opt, in leoam's own layout (llama.cpp has no OPT): no RoPE; learned absolute positions added to
the token embedding (position_embd.weight, [context_length][n_embd], row p is position p: HF's
table without its first 2 rows); LayerNorm with a bias (attention.layer_norm_epsilon) where the
others have RMSNorm; a bias on every matrix but the output; a ReLU FFN with no gate
(ffn_up = fc1, ffn_down = fc2).

--q8-activations: the inputs of the Q4_0, Q8_0, Q4_K and Q6_K matrices are rounded to 8 bits
per block (32 elements for Q4_0 and Q8_0, 256 for the K-quants) as the engine's integer products
round them (kernels/cpu/q8_activation.h: d = amax / 127, q = round-half-even(x * (127 / amax)),
both in float32). The engine does this in decode, and in prefill where its CPU has the 8-bit GEMM.
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dequant import Q4_0, Q4_K, Q6_K, Q8_0, dequantize  # noqa: E402

Q8_BLOCK = {Q4_0: 32, Q8_0: 32, Q4_K: 256, Q6_K: 256}  # the 8-bit activation block of each type
from gguf_read import read_gguf  # noqa: E402


# ---------------------------------------------------------------- hparams ---

def load_hparams(meta):
    arch = meta["general.architecture"]
    if arch not in ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "opt"):
        raise ValueError(f"architecture '{arch}' not supported; "
                         "supported: llama qwen2 qwen3 phi3 gemma2 gemma3 opt")

    def get(key, default=None):
        v = meta.get(f"{arch}.{key}", default)
        if v is None:
            raise ValueError(f"missing metadata key '{arch}.{key}'")
        return v

    n_embd = int(get("embedding_length"))
    n_head = int(get("attention.head_count"))
    head_dim = int(get("attention.key_length", n_embd // n_head))
    n_ctx_train = int(get("context_length"))
    scaling = get("rope.scaling.type", "none")
    if scaling not in ("none", "linear", "yarn"):
        raise ValueError(f"rope.scaling.type '{scaling}' not supported; "
                         "supported: none linear yarn")
    factor = float(get("rope.scaling.factor", 1.0)) if scaling != "none" else 1.0
    n_layer = int(get("block_count"))
    freq_base = float(get("rope.freq_base", 10000.0))
    # no sliding layers, the q.k factor 1/sqrt(head_dim), no caps: all but gemma
    extra = dict(gemma=False, swa=[False] * n_layer, n_swa=0, rope_swa={}, kq_scale=None,
                 attn_softcap=0.0, final_softcap=0.0)
    if arch in ("gemma2", "gemma3"):
        extra = load_gemma_hparams(arch, get, meta, n_layer, n_embd, n_head, head_dim, freq_base)
    else:  # llama (Mistral), phi3 with a window shorter than the context: every layer slides
        # phi3 mini and medium 4K files without the key: llama.cpp's 2047
        phi3_4k = arch == "phi3" and n_layer in (32, 40) and n_ctx_train == 4096
        n_swa = int(get("attention.sliding_window", 2047 if phi3_4k else 0))
        if 0 < n_swa < n_ctx_train and arch in ("llama", "phi3"):
            extra.update(swa=[True] * n_layer, n_swa=n_swa)
    opt = arch == "opt"  # LayerNorm, learned positions, no RoPE (n_rot 0), biases, ReLU FFN
    return dict(
        arch=arch,
        n_embd=n_embd,
        n_layer=n_layer,
        n_ff=int(get("feed_forward_length")),
        n_head=n_head,
        n_head_kv=int(get("attention.head_count_kv", n_head)),
        head_dim=head_dim,
        eps=float(get("attention.layer_norm_epsilon" if opt else "attention.layer_norm_rms_epsilon")),
        n_ctx_train=n_ctx_train,
        n_rot=0 if opt else int(get("rope.dimension_count", head_dim)),
        freq_base=freq_base,
        # ggml: freq_scale = 1/factor for linear and yarn; ext_factor only for yarn.
        freq_scale=1.0 / factor if factor else 1.0,
        ext_factor=float(get("rope.scaling.yarn_ext_factor", 1.0)) if scaling == "yarn" else 0.0,
        attn_factor=float(get("rope.scaling.yarn_attn_factor", get("rope.scaling.attn_factor", 1.0))),
        beta_fast=float(get("rope.scaling.yarn_beta_fast", 32.0)),
        beta_slow=float(get("rope.scaling.yarn_beta_slow", 1.0)),
        n_ctx_orig=int(get("rope.scaling.original_context_length", n_ctx_train)),
        neox=(arch in ("qwen2", "qwen3", "phi3", "gemma2", "gemma3")),
        head_norms=(arch in ("qwen3", "gemma3")),
        # log-n attention: queries past this many keys are scaled by ln(n_keys) / ln(logn_length)
        logn_length=int(meta.get("leoam.attention.logn_length", 0)),
        opt=opt,
        **extra,
    )


def load_gemma_hparams(arch, get, meta, n_layer, n_embd, n_head, head_dim, freq_base):
    """What gemma2 / gemma3 add: the sliding layers and their window, the sliding layers' RoPE,
    the factor on q.k and the soft caps (0: none), with llama.cpp's defaults for absent keys."""
    g2 = arch == "gemma2"
    # gemma2 alternates sliding and global layers, sliding first; gemma3 has 5 sliding, then 1
    swa = [il % 2 == 0 if g2 else (il + 1) % 6 != 0 for il in range(n_layer)]
    # gemma2 27B and gemma3 27B (46, 62 layers) scale by n_embd / n_head (their
    # query_pre_attn_scalar), the others by the head size; C++'s integer division, exact for both
    kq_scale = meta.get(f"{arch}.attention.scale")
    if not kq_scale:  # absent (or 0, which would blind every layer)
        big = n_layer == (46 if g2 else 62)
        kq_scale = 1.0 / math.sqrt(n_embd // n_head if big else head_dim)
    # gemma3's sliding layers have their own base and no scaling; gemma2's share the global RoPE
    rope_swa = dict(freq_base=float(get("rope.freq_base_swa", freq_base if g2 else 10000.0)))
    if not g2:
        rope_swa.update(freq_scale=1.0, ext_factor=0.0)
    return dict(
        gemma=True,
        swa=swa,
        n_swa=int(get("attention.sliding_window", 4096 if g2 else 512)),
        rope_swa=rope_swa,
        kq_scale=float(kq_scale),
        # a cap of 0 would be no cap at all: read it as none
        attn_softcap=float(get("attn_logit_softcapping", 50.0 if g2 else 0.0)),
        final_softcap=float(get("final_logit_softcapping", 30.0 if g2 else 0.0)),
    )


# ------------------------------------------------------------------ model ---

def load_model(path):
    meta, raw = read_gguf(path)
    hp = load_hparams(meta)

    types = {}  # the GGUF type of every matrix loaded, by name

    def w(name):
        type_id, ne, data = raw[name]
        types[name] = type_id
        return dequantize(type_id, ne, data)

    def w_opt(name):
        return w(name) if name in raw else None

    opt = hp["opt"]
    layers = []
    for il in range(hp["n_layer"]):
        p = f"blk.{il}."
        layers.append({k: w_opt(p + k + ".weight") for k in (
            "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
            "ffn_norm", "ffn_up", "ffn_down") + (() if opt else ("ffn_gate",))})
        if p + "attn_qkv.weight" in raw:  # phi3: q, k and v stacked in one matrix, in that order
            qkv = w(p + "attn_qkv.weight")
            n_q, n_kv = hp["n_head"] * hp["head_dim"], hp["n_head_kv"] * hp["head_dim"]
            layers[-1].update(attn_q=qkv[:n_q], attn_k=qkv[n_q:n_q + n_kv], attn_v=qkv[n_q + n_kv:])
            for k in ("attn_q", "attn_k", "attn_v"):
                types[p + k + ".weight"] = types[p + "attn_qkv.weight"]
        if arch_fused_ffn(hp):  # phi3: ffn_up holds gate's rows, then up's
            gate_up = layers[-1]["ffn_up"]
            layers[-1].update(ffn_gate=gate_up[:hp["n_ff"]], ffn_up=gate_up[hp["n_ff"]:])
            types[p + "ffn_gate.weight"] = types[p + "ffn_up.weight"]
        for k in ("attn_q", "attn_k", "attn_v"):
            layers[-1][k + "_bias"] = w_opt(p + k + ".bias")
        if opt:  # every matrix and norm has a bias, all required below
            for k in ("attn_norm", "attn_output", "ffn_norm", "ffn_up", "ffn_down"):
                layers[-1][k + "_bias"] = w_opt(p + k + ".bias")
        if hp["gemma"]:  # the norms of the attention and FFN outputs
            layers[-1]["post_attention_norm"] = w(p + "post_attention_norm.weight")
            layers[-1]["post_ffw_norm"] = w(p + "post_ffw_norm.weight")
        if hp["head_norms"]:  # qwen3, gemma3: RMSNorm of each q and k head before RoPE
            layers[-1]["attn_q_norm"] = w(p + "attn_q_norm.weight")
            layers[-1]["attn_k_norm"] = w(p + "attn_k_norm.weight")
        missing = [k for k, v in layers[-1].items() if v is None and (opt or not k.endswith("_bias"))]
        if missing:
            raise ValueError(f"{path}: layer {il} is missing tensors {missing}")
    tok_embd = w("token_embd.weight")                      # [n_vocab][n_embd]
    output_tied = "output.weight" not in raw
    if opt and int(meta.get("opt.vocab_size", tok_embd.shape[0])) != tok_embd.shape[0]:
        raise ValueError(f"{path}: opt.vocab_size {meta['opt.vocab_size']} but token_embd has {tok_embd.shape[0]} rows")
    for il, L in enumerate(layers):  # the activation block of each matrix with an 8-bit product
        L["q8_block"] = {k: Q8_BLOCK[types[f"blk.{il}.{k}.weight"]] for k in L
                         if Q8_BLOCK.get(types.get(f"blk.{il}.{k}.weight")) is not None}
    return dict(
        hp=hp,
        meta=meta,
        tok_embd=tok_embd,
        layers=layers,
        output_norm=w("output_norm.weight"),
        output_norm_bias=w("output_norm.bias") if opt else None,
        pos_embd=w("position_embd.weight") if opt else None,  # [n_ctx_train][n_embd], row p = position p
        output=tok_embd if output_tied else w("output.weight"),  # tied when absent
        output_q8_block=Q8_BLOCK.get(types["token_embd.weight" if output_tied else "output.weight"]),
        rope_freqs=w_opt("rope_freqs.weight"),               # [n_rot/2] or None
        # phi3's LongRoPE: the long set serves contexts past rope.scaling.original_context_length
        rope_factors=(w_opt("rope_factors_short.weight"), w_opt("rope_factors_long.weight")),
    )


def arch_fused_ffn(hp):
    return hp["arch"] == "phi3"


def rope_factors(model, n_ctx):
    """The frequency factors a context of n_ctx positions runs with (llama.cpp's choice)."""
    short, long = model["rope_factors"]
    if long is not None:
        return long if n_ctx > model["hp"]["n_ctx_orig"] else short
    return model["rope_freqs"]


# ------------------------------------------------------------------- rope ---
# Checked against ggml's rope_yarn, rope_yarn_ramp and ggml_rope_yarn_corr_dims:
# same formulas; the ramp's argument i0/2 in ggml is the pair index i used here.
# The only differences are float32 vs float64 evaluation (noted below).

def yarn_corr_dims(hp):
    """ggml_rope_yarn_corr_dims: [low, high] pair-index range of the YaRN ramp.
    ggml evaluates this in float32; float64 here can differ only when corr_dim
    lands within float32 rounding of an integer (floor/ceil edge)."""
    n_rot, base = hp["n_rot"], hp["freq_base"]

    def corr_dim(beta):
        return n_rot * math.log(hp["n_ctx_orig"] / (beta * 2 * math.pi)) / (2 * math.log(base))

    low = max(0.0, math.floor(corr_dim(hp["beta_fast"])))
    high = min(n_rot - 1.0, math.ceil(corr_dim(hp["beta_slow"])))
    return low, high


def rope_cos_sin(hp, freq_factors, positions):
    """cos, sin: [n_pos][n_rot/2], mscale folded in (ggml rope_yarn).
    ggml computes theta_scale^i by repeated float32 multiplication; here exactly."""
    n_pairs = hp["n_rot"] // 2
    i = np.arange(n_pairs, dtype=np.float64)
    inv_freq = hp["freq_base"] ** (-2.0 * i / hp["n_rot"])   # theta_scale^i
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    theta_extrap = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    theta_interp = hp["freq_scale"] * theta_extrap
    theta = theta_interp
    mscale = hp["attn_factor"]
    if hp["ext_factor"] != 0.0:
        low, high = yarn_corr_dims(hp)
        ramp = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
        ramp_mix = ramp * hp["ext_factor"]
        theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / hp["freq_scale"])
    return np.cos(theta) * mscale, np.sin(theta) * mscale


def apply_rope(x, cos, sin, n_rot, neox):
    """x: [n_tok][n_heads][head_dim]; cos, sin: [n_tok][n_rot/2].
    normal (llama): pairs (x[2i], x[2i+1]); NeoX (qwen2): pairs (x[i], x[i + n_rot/2]).
    Dimensions >= n_rot pass through."""
    y = x.copy()
    c, s = cos[:, None, :], sin[:, None, :]
    if neox:
        x0, x1 = x[..., :n_rot // 2], x[..., n_rot // 2:n_rot]
        y[..., :n_rot // 2] = x0 * c - x1 * s
        y[..., n_rot // 2:n_rot] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        y[..., 0:n_rot:2] = x0 * c - x1 * s
        y[..., 1:n_rot:2] = x0 * s + x1 * c
    return y


# ---------------------------------------------------------------- forward ---

def rmsnorm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layernorm(x, weight, bias, eps):
    """LayerNorm over the last axis (population variance), then weight and bias (opt)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def softcap(x, c):
    """c * tanh(x / c); c == 0: x unchanged."""
    return c * np.tanh(x / c) if c else x


def logn_scale(hp, positions):
    """Log-n attention's factor on the queries at `positions`: ln(n) / ln(logn_length) where the
    query sees n = position + 1 > logn_length keys, else 1 (also without the key)."""
    n_keys = np.asarray(positions) + 1
    if not hp["logn_length"]:
        return np.ones(n_keys.shape)
    return np.where(n_keys > hp["logn_length"], np.log(n_keys) / math.log(hp["logn_length"]), 1.0)


def new_kv_cache(model):
    """Per layer: k, v as [n_past][n_head_kv][head_dim] (grown by forward)."""
    hp = model["hp"]
    empty = np.zeros((0, hp["n_head_kv"], hp["head_dim"]))
    return [{"k": empty, "v": empty} for _ in range(hp["n_layer"])]


def q8_round(x, block):
    """x [n][k] rounded to 8 bits per block, as the engine's activation quantizer does."""
    x32 = x.astype(np.float32).reshape(x.shape[0], -1, block)
    amax = np.abs(x32).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(x32 * inv)
    d = (amax / np.float32(127)).astype(np.float32)
    return (d.astype(np.float64) * q.astype(np.float64)).reshape(x.shape)


def forward(model, tokens, cache, kv_f16=False, drop_keys=None, q8_activations=False):
    """Run tokens at positions [n_past, n_past + n_tok); append to cache.
    Returns logits [n_tok][n_vocab].

    drop_keys, if given, is called per layer as drop_keys(layer, scores, positions) with the
    scaled (and soft-capped), causally (and in sliding layers window-) masked scores
    [n_head][n_tok][n_past + n_tok] and the query positions; it
    may set scores to -inf to keep those keys out of the softmax (sparse attention probes)."""
    hp = model["hp"]
    n_tok = len(tokens)
    n_past = cache[0]["k"].shape[0]
    n_head, n_head_kv, head_dim = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    group = n_head // n_head_kv
    positions = np.arange(n_past, n_past + n_tok)
    # by whether the layer is sliding: (cos, sin), and the mask over [n_tok][n_past + n_tok]
    rope = {False: rope_cos_sin(hp, model["rope_freqs"], positions) if hp["n_rot"] else (None, None)}
    rope[True] = rope_cos_sin({**hp, **hp["rope_swa"]}, model["rope_freqs"], positions) \
        if hp["rope_swa"] else rope[False]
    # causal: query t sees keys at pos <= n_past + t; sliding also pos > n_past + t - n_swa,
    # on absolute positions, so the window holds across calls on the same cache
    dist = positions[:, None] - np.arange(n_past + n_tok)[None, :]
    masks = {False: dist < 0, True: (dist < 0) | (dist >= hp["n_swa"])}

    def q8(h, block):  # the engine's 8-bit input, where it has one
        return q8_round(h, block) if q8_activations and block is not None else h

    def mm(h, L, name):  # h @ W.T, + the matrix's bias where it has one
        y = q8(h, L["q8_block"].get(name)) @ L[name].T
        bias = L.get(name + "_bias")
        return y if bias is None else y + bias

    def norm(x, L, name):  # L: a layer, or the model for output_norm
        if hp["opt"]:
            return layernorm(x, L[name], L[name + "_bias"], hp["eps"])
        return rmsnorm(x, L[name], hp["eps"])

    x = model["tok_embd"][np.asarray(tokens)]                # [n_tok][n_embd]
    if hp["gemma"]:
        x = x * math.sqrt(hp["n_embd"])
    if model["pos_embd"] is not None:  # opt: learned absolute positions
        if positions[-1] >= model["pos_embd"].shape[0]:
            raise ValueError(f"position {positions[-1]} past the {model['pos_embd'].shape[0]} learned positions")
        x = x + model["pos_embd"][positions]
    for il, (L, kv) in enumerate(zip(model["layers"], cache)):
        cos, sin = rope[hp["swa"][il]]
        mask = masks[hp["swa"][il]]
        h = norm(x, L, "attn_norm")
        q, k, v = mm(h, L, "attn_q"), mm(h, L, "attn_k"), mm(h, L, "attn_v")
        q, k = q.reshape(n_tok, n_head, head_dim), k.reshape(n_tok, n_head_kv, head_dim)
        if hp["head_norms"]:
            q, k = rmsnorm(q, L["attn_q_norm"], hp["eps"]), rmsnorm(k, L["attn_k_norm"], hp["eps"])
        if hp["n_rot"]:  # opt has none
            q = apply_rope(q, cos, sin, hp["n_rot"], hp["neox"])
            k = apply_rope(k, cos, sin, hp["n_rot"], hp["neox"])
        v = v.reshape(n_tok, n_head_kv, head_dim)
        q = q * logn_scale(hp, positions)[:, None, None]
        if kv_f16:  # emulate the engine's F16 KV cache
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        kv["k"] = np.concatenate([kv["k"], k])
        kv["v"] = np.concatenate([kv["v"], v])

        # query head i reads kv head i // group
        K = np.repeat(kv["k"], group, axis=1)                # [n_kv][n_head][head_dim]
        V = np.repeat(kv["v"], group, axis=1)
        scores = np.einsum("thd,shd->hts", q, K)
        if hp["kq_scale"] is None:
            scores /= math.sqrt(head_dim)
        else:
            scores = softcap(scores * hp["kq_scale"], hp["attn_softcap"])
        scores[:, mask] = -np.inf
        if drop_keys is not None:
            drop_keys(il, scores, positions)
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", p, V).reshape(n_tok, n_head * head_dim)
        if hp["gemma"]:  # each block's output normalized again before the residual add
            x = x + rmsnorm(mm(attn, L, "attn_output"), L["post_attention_norm"], hp["eps"])
            h = rmsnorm(x, L["ffn_norm"], hp["eps"])
            ffn = mm(gelu_tanh(mm(h, L, "ffn_gate")) * mm(h, L, "ffn_up"), L, "ffn_down")
            x = x + rmsnorm(ffn, L["post_ffw_norm"], hp["eps"])
        else:
            x = x + mm(attn, L, "attn_output")
            h = norm(x, L, "ffn_norm")
            if hp["opt"]:  # fc1, ReLU, fc2: no gate
                x = x + mm(np.maximum(mm(h, L, "ffn_up"), 0.0), L, "ffn_down")
            else:
                x = x + mm(silu(mm(h, L, "ffn_gate")) * mm(h, L, "ffn_up"), L, "ffn_down")

    h = norm(x, model, "output_norm")
    return softcap(q8(h, model["output_q8_block"]) @ model["output"].T, hp["final_softcap"])


def greedy(model, tokens, n_gen, kv_f16=False):
    """Greedy-decode n_gen tokens after tokens; returns the generated ids."""
    cache = new_kv_cache(model)
    logits = forward(model, tokens, cache, kv_f16)
    out = []
    for _ in range(n_gen):
        nxt = int(np.argmax(logits[-1]))
        out.append(nxt)
        logits = forward(model, [nxt], cache, kv_f16)
    return out


# -------------------------------------------------------------------- cli ---

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--kv-f16", action="store_true", help="round K (after RoPE) and V to f16")
    ap.add_argument("--q8-activations", action="store_true",
                    help="round the inputs of Q4_0/Q8_0/Q4_K/Q6_K matrices to 8 bits, as the engine's integer products do")
    ap.add_argument("--n-ctx", type=int, default=0,
                    help="context capacity check (default: model context_length); it changes the math "
                         "only with LongRoPE (phi3), whose long factors serve contexts past the original one")
    ap.add_argument("--out", help="write per-position logits here")
    ap.add_argument("--greedy", type=int, default=0, help="generate N tokens greedily, print ids")
    args = ap.parse_args(argv)

    model = load_model(args.model)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    if not tokens:
        ap.error("--tokens is empty")
    n_ctx = args.n_ctx or model["hp"]["n_ctx_train"]
    model["rope_freqs"] = rope_factors(model, n_ctx)
    if len(tokens) + args.greedy > n_ctx:
        ap.error(f"{len(tokens)} tokens + {args.greedy} generated exceed n_ctx {n_ctx}")
    n_vocab = model["tok_embd"].shape[0]
    if any(t < 0 or t >= n_vocab for t in tokens):
        ap.error(f"token id out of range [0, {n_vocab})")
    if not args.out and not args.greedy:
        ap.error("nothing to do: give --out and/or --greedy")

    if args.out:
        logits = forward(model, tokens, new_kv_cache(model), args.kv_f16, q8_activations=args.q8_activations)
        with open(args.out, "w") as f:
            for row in logits:
                f.write(" ".join("%.9g" % v for v in row) + "\n")
    if args.greedy:
        print(" ".join(str(t) for t in greedy(model, tokens, args.greedy, args.kv_f16)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
