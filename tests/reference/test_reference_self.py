"""Self-test of the numpy reference (no pytest needed):

    /usr/bin/python3 tests/reference/test_reference_self.py

1. dequant: hand-built blocks with known values, plus Q4_K/Q6_K blocks built by
   a per-element encoder (the inverse of ggml's layout) checked against the
   vectorized decoder.
2. forward: greedy decoding from BOS on stories260K (GGUF v3) and
   tinyllamas-stories-260k-f32 (GGUF v1) must tell the known story, and the two
   files must give identical logits.
Exits 0 with a message when <repo root>/../shared is absent.
"""

import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dequant as dq  # noqa: E402
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


def main():
    tests = [test_float_types, test_q4_0, test_q8_0, test_q4_k_scale_packing_literal,
             test_q4_k, test_q6_k, test_rope]
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
