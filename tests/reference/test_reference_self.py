"""Self-test of the numpy reference (no pytest needed):

    /usr/bin/python3 tests/reference/test_reference_self.py

1. dequant: hand-built blocks with known values, plus Q4_K/Q6_K blocks built by
   a per-element encoder (the inverse of ggml's layout) checked against the
   vectorized decoder.
2. forward: greedy decoding from BOS on stories260K (GGUF v3) and
   tinyllamas-stories-260k-f32 (GGUF v1) must tell the known story, and the two
   files must give identical logits.
3. gemma2 / gemma3: a tiny random model written both as a Hugging Face folder and as the GGUF
   llama.cpp's converter makes of it; hf_ref and llama_ref must agree, incremental decoding must
   equal one pass, and the sliding window must reach exactly its width back.
4. opt: the same for a tiny random OPT (HF OPTForCausalLM folder and leoam's GGUF layout), tied and
   untied; the learned positions' offset of 2 must matter.
Exits 0 with a message when <repo root>/../shared is absent (3 and 4 run without it).
"""

import json
import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dequant as dq  # noqa: E402
import hf_ref  # noqa: E402
import llama_ref  # noqa: E402

SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))
MODEL_DIR = os.path.join(SHARED, "fixtures", "models", "stories260K")
EXPECTED_TEXT = ("Once upon a time, there was a little girl named Lily. "
                 "She loved to play outside in the park")


def f16_bytes(v):
    return np.float16(v).tobytes()


# ---------------------------------------------------------------- dequant ---

def test_float_types():
    assert dq.dequantize(dq.F32, [2], struct.pack("<2f", 1.5, -3.25)).tolist() == [1.5, -3.25]
    assert dq.dequantize(dq.F16, [3], bytes.fromhex("003c00c0 0038".replace(" ", ""))).tolist() \
        == [1.0, -2.0, 0.5]
    # bf16 = upper half of f32: 0x3F80 = 1.0, 0xC040 = -3.0
    assert dq.dequantize(dq.BF16, [2], struct.pack("<2H", 0x3F80, 0xC040)).tolist() == [1.0, -3.0]


def test_q4_0():
    # qs[j] = lo | hi << 4 with lo = j, hi = 15 - j; d = 0.5
    raw = f16_bytes(0.5) + bytes(j | (15 - j) << 4 for j in range(16))
    x = dq.dequantize(dq.Q4_0, [32], raw)
    expected = [(j - 8) * 0.5 for j in range(16)] + [(15 - j - 8) * 0.5 for j in range(16)]
    assert x.shape == (32,) and x.tolist() == expected, x


def test_q8_0():
    q = list(range(-16, 16))
    raw = f16_bytes(0.25) + struct.pack("<32b", *q)
    x = dq.dequantize(dq.Q8_0, [32, 2], raw * 2)
    assert x.shape == (2, 32) and x[1].tolist() == [v * 0.25 for v in q]


def test_q4_k_scale_packing_literal():
    # bytes 0-3: sc[0..3] (low 6 bits), bytes 4-7: m[0..3], bytes 8-11: low nibble
    # sc[4..7], high nibble m[4..7]; the top 2 bits of bytes 0-3 / 4-7 are bits 4-5
    # of sc[4..7] / m[4..7].
    s = np.array([[1 | 0x40, 2, 3, 4, 5, 6 | 0x80, 7, 8, 0x21, 0x43, 0x65, 0x87]], np.uint8)
    sc, m = dq._q4k_scales_mins(s)
    assert sc.tolist() == [[1, 2, 3, 4, 1 + 16, 3, 5, 7]], sc
    assert m.tolist() == [[5, 6, 7, 8, 2, 4 + 32, 6, 8]], m


def encode_q4_k(d, dmin, sc, m, q):
    """Per-element encoder: sc, m: 8 six-bit ints; q: 256 nibbles in element order."""
    s = [0] * 12
    for j in range(8):
        if j < 4:
            s[j] |= sc[j] & 63
            s[j + 4] |= m[j] & 63
        else:
            s[j + 4] |= (sc[j] & 0xF) | (m[j] & 0xF) << 4
            s[j - 4] |= (sc[j] >> 4) << 6
            s[j] |= (m[j] >> 4) << 6
    qs = [0] * 128
    for e in range(256):
        c, r = divmod(e, 64)                     # 64-element chunk, offset in it
        qs[32 * c + r % 32] |= q[e] << (0 if r < 32 else 4)
    return f16_bytes(d) + f16_bytes(dmin) + bytes(s) + bytes(qs)


def test_q4_k():
    rng = np.random.default_rng(0)
    sc, m = rng.integers(0, 64, 8).tolist(), rng.integers(0, 64, 8).tolist()
    q = rng.integers(0, 16, 256).tolist()
    raw = encode_q4_k(0.125, 0.0625, sc, m, q)
    assert len(raw) == 144
    x = dq.dequantize(dq.Q4_K, [256], raw)
    expected = [0.125 * sc[e // 32] * q[e] - 0.0625 * m[e // 32] for e in range(256)]
    assert x.tolist() == expected


def encode_q6_k(d, scales, q):
    """scales: 16 int8; q: 256 six-bit values in element order."""
    ql, qh = [0] * 128, [0] * 64
    for e in range(256):
        h, r = divmod(e, 128)                    # half, offset in half
        k, l = divmod(r, 32)                     # quarter, lane
        ql[64 * h + l + (32 if k % 2 else 0)] |= (q[e] & 0xF) << (4 if k >= 2 else 0)
        qh[32 * h + l] |= (q[e] >> 4) << (2 * k)
    return bytes(ql) + bytes(qh) + struct.pack("<16b", *scales) + f16_bytes(d)


def test_q6_k():
    rng = np.random.default_rng(1)
    scales = rng.integers(-128, 128, 16).tolist()
    q = rng.integers(0, 64, 256).tolist()
    raw = encode_q6_k(0.5, scales, q)
    assert len(raw) == 210
    x = dq.dequantize(dq.Q6_K, [256], raw)
    # scale index: half h, quarter k, lane l -> 8h + 2k + l // 16 = e // 16
    expected = [0.5 * scales[e // 16] * (q[e] - 32) for e in range(256)]
    assert x.tolist() == expected
    # literal: all q = 33 (ql nibble 1, qh bits 0b10), scale 3, d 0.5 -> 1.5
    raw = bytes([0x11] * 128) + bytes([0xAA] * 64) + bytes([3] * 16) + f16_bytes(0.5)
    assert dq.dequantize(dq.Q6_K, [256], raw).tolist() == [1.5] * 256


# ------------------------------------------------------------------- rope ---

def rope_hp(**kw):
    hp = dict(n_rot=8, freq_base=10000.0, freq_scale=1.0, ext_factor=0.0, attn_factor=1.0,
              beta_fast=32.0, beta_slow=1.0, n_ctx_orig=4096)
    hp.update(kw)
    return hp


def test_rope():
    pos = np.array([0, 1, 7, 1000])
    hp = rope_hp()
    cos, sin = llama_ref.rope_cos_sin(hp, None, pos)
    theta = pos[:, None] * 10000.0 ** (-np.arange(4) / 4)
    assert np.allclose(cos + 1j * sin, np.exp(1j * theta), rtol=0, atol=1e-12)
    # normal pairing = complex rotation of x[2i] + i x[2i+1]; NeoX: x[i] + i x[i+4];
    # dims >= n_rot (here 8..11 of a 12-wide head) pass through
    x = np.random.default_rng(2).standard_normal((4, 3, 12))
    z = np.exp(1j * theta)[:, None, :]
    y = llama_ref.apply_rope(x, cos, sin, 8, neox=False)
    assert np.allclose(y[..., 0:8:2] + 1j * y[..., 1:8:2], (x[..., 0:8:2] + 1j * x[..., 1:8:2]) * z)
    y = llama_ref.apply_rope(x, cos, sin, 8, neox=True)
    assert np.allclose(y[..., 0:4] + 1j * y[..., 4:8], (x[..., 0:4] + 1j * x[..., 4:8]) * z)
    assert np.array_equal(y[..., 8:], x[..., 8:])
    # linear: positions divided by the factor; freq factors divide the frequency
    c, s = llama_ref.rope_cos_sin(rope_hp(freq_scale=0.25), np.array([1, 2, 4, 8.]), pos)
    assert np.allclose(c + 1j * s, np.exp(1j * theta * 0.25 / np.array([1, 2, 4, 8.])))
    # yarn with factor 1 is plain RoPE
    c, s = llama_ref.rope_cos_sin(rope_hp(ext_factor=1.0), None, pos)
    assert np.allclose(c, cos) and np.allclose(s, sin)
    # yarn factor 4, n_rot 64, base 1e4, n_ctx_orig 4096:
    # corr_dim(beta) = 64 ln(4096 / (2 pi beta)) / (2 ln 1e4)
    # = 10.47 (beta 32), 22.51 (beta 1) -> (low, high) = (10, 23);
    # pairs <= low keep theta_extrap, pairs >= high use theta_interp;
    # every pair is scaled by mscale = 1 + 0.1 ln 4
    hp = rope_hp(n_rot=64, freq_scale=0.25, ext_factor=1.0)
    assert llama_ref.yarn_corr_dims(hp) == (10, 23), llama_ref.yarn_corr_dims(hp)
    c, s = llama_ref.rope_cos_sin(hp, None, pos)
    th = pos[:, None] * 10000.0 ** (-np.arange(32) / 32)
    mscale = 1 + 0.1 * np.log(4)
    z = (c + 1j * s) / mscale
    assert np.allclose(z[:, :11], np.exp(1j * th[:, :11]))
    assert np.allclose(z[:, 23:], np.exp(1j * th[:, 23:] * 0.25))


# ---------------------------------------------------------------- forward ---

def detokenize(vocab, ids):
    out = bytearray()
    for t in ids:
        piece = vocab[t]
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(int(piece[3:5], 16))
        else:
            out += piece.replace("\u2581", " ").encode("utf-8")
    return out.decode("utf-8", errors="replace")


def test_stories(n_gen=30):
    logits = {}
    for name in ("stories260K.gguf", "tinyllamas-stories-260k-f32.gguf"):
        model = llama_ref.load_model(os.path.join(MODEL_DIR, name))
        ids = llama_ref.greedy(model, [1], n_gen)
        text = detokenize(model["meta"]["tokenizer.ggml.tokens"], ids).lstrip(" ")
        print(f"  {name}: {' '.join(map(str, ids))}\n    -> {text!r}")
        assert text.startswith(EXPECTED_TEXT), text
        seq = [1] + ids
        logits[name] = llama_ref.forward(model, seq, llama_ref.new_kv_cache(model))
        # incremental (KV cache) decoding agrees with one full pass
        cache = llama_ref.new_kv_cache(model)
        step = np.concatenate([llama_ref.forward(model, [t], cache) for t in seq])
        assert np.allclose(step, logits[name], rtol=0, atol=1e-10)
        # drop_keys: dropping nothing changes nothing; keeping each query's own key alone makes
        # every position's attention its own value, so each logits row is that of its token alone
        kept = llama_ref.forward(model, seq, llama_ref.new_kv_cache(model), drop_keys=lambda il, s, pos: None)
        assert np.array_equal(kept, logits[name])

        def own_key_only(il, s, pos):
            own = np.arange(s.shape[2])[None, :] == pos[:, None]
            s[:, ~own] = -np.inf
        alone = llama_ref.forward(model, seq, llama_ref.new_kv_cache(model), drop_keys=own_key_only)
        each = np.concatenate([llama_ref.forward(model, [t], llama_ref.new_kv_cache(model)) for t in seq])
        assert np.allclose(alone, each, rtol=0, atol=1e-10)
        assert not np.allclose(alone, logits[name], rtol=0, atol=1e-3)
        # the f16 KV path stays close and keeps the same greedy tokens
        assert llama_ref.greedy(model, [1], n_gen, kv_f16=True) == ids
    a, b = logits.values()
    assert np.array_equal(a, b), np.abs(a - b).max()


# ------------------------------------------------------------------ gemma ---

def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.size * 4]}
        offset += a.size * 4
    blob = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for a in tensors.values():
            f.write(a.astype("<f4").tobytes())


def write_gguf(path, meta, tensors):
    """GGUF v3, F32 tensors only; numpy shape [out, in] is ne = [in, out]."""
    def string(v):
        b = v.encode()
        return struct.pack("<Q", len(b)) + b

    def value(v):
        if isinstance(v, str):
            return struct.pack("<I", 8) + string(v)
        if isinstance(v, int):
            return struct.pack("<II", 4, v)
        return struct.pack("<If", 6, v)

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    out += b"".join(string(k) + value(v) for k, v in meta.items())
    data, offsets = b"", []
    for a in tensors.values():
        offsets.append(len(data))
        data += a.astype("<f4").tobytes()
        data += bytes(-len(data) % 32)
    for (name, a), offset in zip(tensors.items(), offsets):
        out += string(name) + struct.pack("<I", a.ndim) + struct.pack(f"<{a.ndim}Q", *a.shape[::-1])
        out += struct.pack("<IQ", dq.F32, offset)
    with open(path, "wb") as f:
        f.write(out + bytes(-len(out) % 32) + data)


def tiny_gemma(arch, rng):
    """A random Gemma 2 or 3 checkpoint (config, weights), every value exact in float32 and the
    norm weights multiples of 2^-10, so that both layouts (w and 1 + w) hold the same numbers."""
    config = dict(architectures=[arch], hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, intermediate_size=48, num_hidden_layers=6, vocab_size=48,
                  rms_norm_eps=2.0 ** -20, rope_theta=10000.0, sliding_window=3,
                  hidden_activation="gelu_pytorch_tanh", max_position_embeddings=64)
    if arch == "Gemma2ForCausalLM":  # caps that bite on these weights; scalar = head_dim (the default)
        config.update(query_pre_attn_scalar=16, attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
    else:
        config.update(model_type="gemma3_text", query_pre_attn_scalar=64, attn_logit_softcapping=None,
                      final_logit_softcapping=None, rope_theta=1e6, rope_local_base_freq=10000.0,
                      rope_scaling={"rope_type": "linear", "factor": 4.0}, sliding_window_pattern=6)

    def mat(n_out, n_in, sigma=0.3):
        return (rng.standard_normal((n_out, n_in)) * sigma).astype(np.float32).astype(np.float64)

    def norm(n):
        return rng.integers(-256, 257, n) / 1024.0

    d, hd, ff = config["hidden_size"], config["head_dim"], config["intermediate_size"]
    w = {"model.embed_tokens.weight": mat(config["vocab_size"], d, 1.0), "model.norm.weight": norm(d)}
    for il in range(config["num_hidden_layers"]):
        p = f"model.layers.{il}."
        for k, shape in (("self_attn.q_proj", (4 * hd, d)), ("self_attn.k_proj", (2 * hd, d)),
                         ("self_attn.v_proj", (2 * hd, d)), ("self_attn.o_proj", (d, 4 * hd)),
                         ("mlp.gate_proj", (ff, d)), ("mlp.up_proj", (ff, d)), ("mlp.down_proj", (d, ff))):
            w[p + k + ".weight"] = mat(*shape)
        for k in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            w[p + k + ".weight"] = norm(d)
        if arch == "Gemma3ForCausalLM":
            w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"] = norm(hd), norm(hd)
    return config, w


def gemma_to_gguf(config, w):
    """The GGUF (meta, tensors) llama.cpp's converter makes: norms + 1, q/k rows as they are."""
    arch = "gemma2" if config["architectures"][0] == "Gemma2ForCausalLM" else "gemma3"
    meta = {"general.architecture": arch}
    for key, field in (("context_length", "max_position_embeddings"), ("embedding_length", "hidden_size"),
                       ("block_count", "num_hidden_layers"), ("feed_forward_length", "intermediate_size"),
                       ("attention.head_count", "num_attention_heads"),
                       ("attention.head_count_kv", "num_key_value_heads"),
                       ("attention.key_length", "head_dim"),
                       ("attention.layer_norm_rms_epsilon", "rms_norm_eps"), ("rope.freq_base", "rope_theta"),
                       ("attention.sliding_window", "sliding_window"),
                       ("attn_logit_softcapping", "attn_logit_softcapping"),
                       ("final_logit_softcapping", "final_logit_softcapping")):
        if config.get(field) is not None:
            meta[f"{arch}.{key}"] = config[field]
    if arch == "gemma3":  # gemma2's scale is left to the default (the head size), gemma3's given
        meta["gemma3.attention.scale"] = config["query_pre_attn_scalar"] ** -0.5
        meta["gemma3.rope.scaling.type"] = "linear"
        meta["gemma3.rope.scaling.factor"] = config["rope_scaling"]["factor"]
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    tensors = {"token_embd.weight": w["model.embed_tokens.weight"],
               "output_norm.weight": 1 + w["model.norm.weight"]}
    for name, a in w.items():
        if name.startswith("model.layers."):
            il, rest = name[len("model.layers."):].split(".", 1)
            base = rest[:-len(".weight")]
            tensors[f"blk.{il}.{names[base]}.weight"] = 1 + a if base.endswith("norm") else a
    return meta, tensors


def test_gemma_hparams():
    meta = {"general.architecture": "gemma2", "gemma2.context_length": 8192, "gemma2.embedding_length": 2304,
            "gemma2.block_count": 26, "gemma2.feed_forward_length": 9216, "gemma2.attention.head_count": 8,
            "gemma2.attention.head_count_kv": 4, "gemma2.attention.key_length": 256,
            "gemma2.attention.layer_norm_rms_epsilon": 1e-6}
    hp = llama_ref.load_hparams(meta)
    assert hp["swa"][:4] == [True, False, True, False] and hp["n_swa"] == 4096
    assert (hp["attn_softcap"], hp["final_softcap"]) == (50.0, 30.0) and hp["kq_scale"] == 1 / 16
    assert hp["rope_swa"] == {"freq_base": 10000.0} and hp["neox"] and not hp["head_norms"]
    hp = llama_ref.load_hparams({**meta, "gemma2.block_count": 46, "gemma2.embedding_length": 4608,
                                 "gemma2.attention.head_count": 32})
    assert hp["kq_scale"] == 1 / 12  # 27B: 1/sqrt(4608 / 32)
    meta = {k.replace("gemma2", "gemma3"): v for k, v in meta.items()}
    hp = llama_ref.load_hparams({**meta, "general.architecture": "gemma3", "gemma3.rope.freq_base": 1e6,
                                 "gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8.0})
    assert hp["swa"][:7] == [True] * 5 + [False, True] and hp["n_swa"] == 512
    assert (hp["attn_softcap"], hp["final_softcap"]) == (0.0, 0.0) and hp["head_norms"]
    assert hp["freq_scale"] == 1 / 8
    assert hp["rope_swa"] == dict(freq_base=10000.0, freq_scale=1.0, ext_factor=0.0)


def test_gemma():
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 48, 16).tolist()
    for arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        config, w = tiny_gemma(arch, rng)
        n_layer, W = config["num_hidden_layers"], config["sliding_window"]
        with tempfile.TemporaryDirectory() as tmp:
            write_safetensors(os.path.join(tmp, "model.safetensors"), w)
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(config, f)
            write_gguf(os.path.join(tmp, "m.gguf"), *gemma_to_gguf(config, w))
            hf = hf_ref.forward(*hf_ref.read_folder(tmp), tokens)
            model = llama_ref.load_model(os.path.join(tmp, "m.gguf"))
        hp = model["hp"]

        def run(toks, **kw):
            return llama_ref.forward(model, toks, llama_ref.new_kv_cache(model), **kw)

        full = run(tokens)
        # the two layouts and their two readings agree; the caps hold
        assert np.allclose(hf, full, rtol=0, atol=1e-10 * np.abs(full).max()), np.abs(hf - full).max()
        if config["final_logit_softcapping"]:
            assert np.abs(full).max() < config["final_logit_softcapping"]
        # (a) incremental decoding, token by token and in chunks wider than the window, equals one
        # pass; greedy's tokens are the pass's argmaxes
        cache = llama_ref.new_kv_cache(model)
        step = np.concatenate([llama_ref.forward(model, [t], cache) for t in tokens])
        cache = llama_ref.new_kv_cache(model)
        chunks = np.concatenate([llama_ref.forward(model, tokens[a:b], cache)
                                 for a, b in ((0, 5), (5, 6), (6, 16))])
        assert np.allclose(step, full, rtol=0, atol=1e-10) and np.allclose(chunks, full, rtol=0, atol=1e-10)
        ids = llama_ref.greedy(model, tokens[:4], 8)
        assert ids == np.argmax(run(tokens[:4] + ids)[3:-1], axis=-1).tolist(), ids
        assert len(llama_ref.greedy(model, tokens[:4], 8, kv_f16=True)) == 8
        # (b) every layer sliding: position t reaches back n_layer * (W - 1), so changing token 0
        # changes row n_layer * (W - 1) and no later one, in both readings
        reach = n_layer * (W - 1)
        other = [(tokens[0] + 1) % 48] + tokens[1:]
        hp["swa"] = [True] * n_layer
        cfg = dict(config, layer_types=["sliding_attention"] * n_layer)
        for f in (run, lambda toks: hf_ref.forward(cfg, w, toks)):
            a, b = f(tokens), f(other)
            assert np.array_equal(a[reach + 1:], b[reach + 1:]) and not np.allclose(a[reach], b[reach])
        assert np.allclose(run(tokens), hf_ref.forward(cfg, w, tokens), rtol=0,
                           atol=1e-10 * np.abs(full).max())
        # a window as long as the input is no window: the same as every layer global, once the
        # sliding layers' RoPE is the global one; a short window is not
        hp["swa"], hp["rope_swa"] = [True] * n_layer, {}
        short = run(tokens)
        hp["n_swa"] = len(tokens)
        wide = run(tokens)
        hp["swa"] = [False] * n_layer
        assert np.array_equal(wide, run(tokens)) and not np.allclose(short, wide, rtol=0, atol=1e-3)
        cfg = dict(config, rope_local_base_freq=config["rope_theta"], rope_scaling=None)
        glob = hf_ref.forward(dict(cfg, layer_types=["full_attention"] * n_layer), w, tokens)
        wide = hf_ref.forward(dict(cfg, layer_types=["sliding_attention"] * n_layer, sliding_window=16),
                              w, tokens)
        short = hf_ref.forward(dict(cfg, layer_types=["sliding_attention"] * n_layer), w, tokens)
        assert np.array_equal(wide, glob) and not np.allclose(short, wide, rtol=0, atol=1e-3)


# -------------------------------------------------------------------- opt ---

def tiny_opt(rng, tied=True):
    """A random OPT checkpoint (config, weights) in OPTForCausalLM's names, every value exact in
    float32 so that both files hold the same numbers."""
    config = dict(architectures=["OPTForCausalLM"], model_type="opt", hidden_size=32, num_attention_heads=4,
                  num_hidden_layers=3, ffn_dim=64, max_position_embeddings=20, vocab_size=40,
                  activation_function="relu", do_layer_norm_before=True, word_embed_proj_dim=32,
                  enable_bias=True, layer_norm_elementwise_affine=True, tie_word_embeddings=tied)

    def f32(shape, sigma, mean=0.0):
        return (mean + rng.standard_normal(shape) * sigma).astype(np.float32).astype(np.float64)

    d, ff, d_ = config["hidden_size"], config["ffn_dim"], "model.decoder."
    w = {d_ + "embed_tokens.weight": f32((config["vocab_size"], d), 1.0),
         # + 2 rows: OPT's position offset
         d_ + "embed_positions.weight": f32((config["max_position_embeddings"] + 2, d), 1.0),
         d_ + "final_layer_norm.weight": f32(d, 0.2, 1.0), d_ + "final_layer_norm.bias": f32(d, 0.2)}
    for il in range(config["num_hidden_layers"]):
        p = f"{d_}layers.{il}."
        for k, shape in (("self_attn.q_proj", (d, d)), ("self_attn.k_proj", (d, d)), ("self_attn.v_proj", (d, d)),
                         ("self_attn.out_proj", (d, d)), ("fc1", (ff, d)), ("fc2", (d, ff))):
            w[p + k + ".weight"], w[p + k + ".bias"] = f32(shape, 0.3), f32(shape[0], 0.3)
        for k in ("self_attn_layer_norm", "final_layer_norm"):
            w[p + k + ".weight"], w[p + k + ".bias"] = f32(d, 0.2, 1.0), f32(d, 0.2)
    if not tied:
        w["lm_head.weight"] = f32((config["vocab_size"], d), 1.0)
    return config, w


def opt_to_gguf(config, w):
    """leoam's GGUF layout of an OPT checkpoint: position_embd without HF's first 2 rows."""
    meta = {"general.architecture": "opt", "opt.context_length": config["max_position_embeddings"],
            "opt.embedding_length": config["hidden_size"], "opt.block_count": config["num_hidden_layers"],
            "opt.feed_forward_length": config["ffn_dim"], "opt.attention.head_count": config["num_attention_heads"],
            "opt.attention.head_count_kv": config["num_attention_heads"],
            "opt.attention.layer_norm_epsilon": 1e-5, "opt.vocab_size": config["vocab_size"]}
    d_ = "model.decoder."
    tensors = {"token_embd.weight": w[d_ + "embed_tokens.weight"],
               "position_embd.weight": w[d_ + "embed_positions.weight"][2:],
               "output_norm.weight": w[d_ + "final_layer_norm.weight"],
               "output_norm.bias": w[d_ + "final_layer_norm.bias"]}
    if "lm_head.weight" in w:
        tensors["output.weight"] = w["lm_head.weight"]
    names = {"self_attn_layer_norm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.out_proj": "attn_output", "final_layer_norm": "ffn_norm",
             "fc1": "ffn_up", "fc2": "ffn_down"}
    for name, a in w.items():
        if name.startswith(d_ + "layers."):
            il, rest = name[len(d_ + "layers."):].split(".", 1)
            base, kind = rest.rsplit(".", 1)
            tensors[f"blk.{il}.{names[base]}.{kind}"] = a
    return meta, tensors


def test_opt_config():
    config, w = tiny_opt(np.random.default_rng(4))
    for bad in (dict(do_layer_norm_before=False), dict(word_embed_proj_dim=16),
                dict(activation_function="gelu"), dict(enable_bias=False)):
        try:
            hf_ref.forward(dict(config, **bad), w, [1, 2])
        except ValueError:
            continue
        raise AssertionError(f"hf_ref accepted OPT with {bad}")
    hp = llama_ref.load_hparams(opt_to_gguf(config, w)[0])
    assert hp["opt"] and hp["n_rot"] == 0 and hp["head_dim"] == 8 and abs(hp["eps"] - 1e-5) < 1e-12


def test_opt():
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 40, 16).tolist()
    for tied in (True, False):
        config, w = tiny_opt(rng, tied)
        with tempfile.TemporaryDirectory() as tmp:
            write_safetensors(os.path.join(tmp, "model.safetensors"), w)
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(config, f)
            gguf = os.path.join(tmp, "m.gguf")
            write_gguf(gguf, *opt_to_gguf(config, w))
            hf = hf_ref.forward(*hf_ref.read_folder(tmp), tokens)
            model = llama_ref.load_model(gguf)
            # the CLI writes the same logits ('%.9g') and greedy's ids
            out = os.path.join(tmp, "logits.txt")
            llama_ref.main(["--model", gguf, "--tokens", ",".join(map(str, tokens)), "--out", out])
            cli = np.loadtxt(out)
        assert (model["output"] is model["tok_embd"]) == tied

        def run(toks, **kw):
            return llama_ref.forward(model, toks, llama_ref.new_kv_cache(model), **kw)

        full = run(tokens)
        # the two layouts agree (the GGUF's eps is float32(1e-5), 2.5e-13 off HF's)
        assert np.allclose(hf, full, rtol=0, atol=1e-10), np.abs(hf - full).max()
        assert np.allclose(cli, full, rtol=1e-8, atol=1e-8 * np.abs(full).max())
        # incremental decoding, token by token and in chunks, equals one pass; greedy's ids are argmaxes
        cache = llama_ref.new_kv_cache(model)
        step = np.concatenate([llama_ref.forward(model, [t], cache) for t in tokens])
        cache = llama_ref.new_kv_cache(model)
        chunks = np.concatenate([llama_ref.forward(model, tokens[a:b], cache) for a, b in ((0, 5), (5, 6), (6, 16))])
        assert np.allclose(step, full, rtol=0, atol=1e-10) and np.allclose(chunks, full, rtol=0, atol=1e-10)
        ids = llama_ref.greedy(model, tokens[:4], 8)
        assert ids == np.argmax(run(tokens[:4] + ids)[3:-1], axis=-1).tolist(), ids
        f16 = run(tokens, kv_f16=True)
        assert not np.array_equal(f16, full) and np.allclose(f16, full, rtol=0, atol=1e-2 * np.abs(full).max())
        # the offset matters: reading rows p instead of p + 2 changes the logits, the same in both
        # readings (HF's table shifted down 2 rows holds row p at p + 2)
        pos = w["model.decoder.embed_positions.weight"]
        model["pos_embd"] = pos[:-2]
        wrong = run(tokens)
        shifted = dict(w, **{"model.decoder.embed_positions.weight": np.concatenate([pos[:2], pos[:-2]])})
        assert np.allclose(hf_ref.forward(config, shifted, tokens), wrong, rtol=0, atol=1e-10)
        assert not np.allclose(wrong, full, rtol=0, atol=1e-3)
        # positions matter at all, and none past the table
        model["pos_embd"] = np.zeros_like(pos[2:])
        assert not np.allclose(run(tokens), full, rtol=0, atol=1e-3)
        try:
            run(list(range(config["max_position_embeddings"] + 1)))
        except ValueError:
            pass
        else:
            raise AssertionError("opt ran past its learned positions")


def main():
    tests = [test_float_types, test_q4_0, test_q8_0, test_q4_k_scale_packing_literal,
             test_q4_k, test_q6_k, test_rope, test_gemma_hparams, test_gemma, test_opt_config, test_opt]
    if os.path.isdir(SHARED):
        tests.append(test_stories)
    else:
        print(f"SKIP model tests: {SHARED} not found (fixtures live in <repo root>/../shared)")
    for t in tests:
        print(t.__name__)
        t()
    print(f"OK: {len(tests)} tests passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
