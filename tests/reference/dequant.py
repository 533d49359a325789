"""Dequantize ggml tensor data to float64 numpy arrays (reference, written from
ggml's block definitions; all math in float64 after decoding the f16 scales).

Supported types (ggml type id): F32(0) F16(1) Q4_0(2) Q8_0(8) Q4_K(12) Q6_K(14) BF16(30).

Block layouts (bytes, little-endian):
    Q4_0  32 elems, 18 B: f16 d | u8 qs[16]
          x[j] = (qs[j] & 0xF) - 8) * d,  x[j+16] = ((qs[j] >> 4) - 8) * d,  j < 16
    Q8_0  32 elems, 34 B: f16 d | i8 qs[32];  x[j] = qs[j] * d
    Q4_K 256 elems, 144 B: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
          8 sub-blocks of 32, each with a 6-bit scale sc and 6-bit min m
          (packing: see _q4k_scales_mins). For chunk c in 0..3 (64 elems,
          qs[32c:32c+32]): sub-block 2c takes the low nibbles, 2c+1 the high
          nibbles; x = d*sc*q - dmin*m.
    Q6_K 256 elems, 210 B: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
          two halves of 128; in half h (ql+64h, qh+32h, scales+8h), for l < 32:
            q1 = (ql[l]    & 0xF) | ((qh[l] >> 0 & 3) << 4)  -> y[l]      scale[l//16 + 0]
            q2 = (ql[l+32] & 0xF) | ((qh[l] >> 2 & 3) << 4)  -> y[l + 32] scale[l//16 + 2]
            q3 = (ql[l]    >> 4)  | ((qh[l] >> 4 & 3) << 4)  -> y[l + 64] scale[l//16 + 4]
            q4 = (ql[l+32] >> 4)  | ((qh[l] >> 6 & 3) << 4)  -> y[l + 96] scale[l//16 + 6]
          x = d * scale * (q - 32)
"""

import numpy as np

F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, BF16 = 0, 1, 2, 8, 12, 14, 30

# type id -> (elements per block, bytes per block)
BLOCK = {F32: (1, 4), F16: (1, 2), BF16: (1, 2), Q4_0: (32, 18), Q8_0: (32, 34),
         Q4_K: (256, 144), Q6_K: (256, 210)}
TYPE_NAMES = {F32: "F32", F16: "F16", Q4_0: "Q4_0", Q8_0: "Q8_0", Q4_K: "Q4_K",
              Q6_K: "Q6_K", BF16: "BF16"}


def row_bytes(type_id, n_per_row):
    if type_id not in BLOCK:
        raise ValueError(f"ggml type {type_id} not supported; supported: "
                         + " ".join(TYPE_NAMES.values()))
    blk, nbytes = BLOCK[type_id]
    if n_per_row % blk:
        raise ValueError(f"row of {n_per_row} is not a multiple of block {blk} for type {type_id}")
    return n_per_row // blk * nbytes


def _f16(u8_pairs):
    """[..., 2] uint8 -> float64 from little-endian f16."""
    return np.ascontiguousarray(u8_pairs).view("<f2")[..., 0].astype(np.float64)


def _q4_0(b):  # b: [nb, 18]
    d = _f16(b[:, 0:2])[:, None]
    qs = b[:, 2:18].astype(np.int64)
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1) - 8
    return q * d


def _q8_0(b):  # b: [nb, 34]
    d = _f16(b[:, 0:2])[:, None]
    q = b[:, 2:34].view(np.int8).astype(np.float64)
    return q * d


def _q4k_scales_mins(s):
    """s: [nb, 12] uint8 -> (sc [nb, 8], m [nb, 8]) 6-bit values (ggml get_scale_min_k4).
    j < 4:  sc = s[j] & 63,                          m = s[j+4] & 63
    j >= 4: sc = (s[j+4] & 0xF) | ((s[j-4] >> 6) << 4), m = (s[j+4] >> 4) | ((s[j] >> 6) << 4)
    """
    s = s.astype(np.int64)
    sc = np.empty((s.shape[0], 8), np.int64)
    m = np.empty_like(sc)
    for j in range(4):
        sc[:, j] = s[:, j] & 63
        m[:, j] = s[:, j + 4] & 63
    for j in range(4, 8):
        sc[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
        m[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, m


def _q4_k(b):  # b: [nb, 144]
    d = _f16(b[:, 0:2])[:, None]
    dmin = _f16(b[:, 2:4])[:, None]
    sc, m = _q4k_scales_mins(b[:, 4:16])
    qs = b[:, 16:144].astype(np.int64).reshape(-1, 4, 32)       # [nb][chunk][32]
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32)  # [nb][sub-block][32]
    y = d[:, :, None] * sc[:, :, None] * q - dmin[:, :, None] * m[:, :, None]
    return y.reshape(-1, 256)


def _q6_k(b):  # b: [nb, 210]
    ql = b[:, 0:128].astype(np.int64)
    qh = b[:, 128:192].astype(np.int64)
    scales = b[:, 192:208].view(np.int8).astype(np.float64)
    d = _f16(b[:, 208:210])[:, None]
    y = np.empty((b.shape[0], 256))
    for h in range(2):
        lo = ql[:, 64 * h:64 * h + 32]
        hi = ql[:, 64 * h + 32:64 * h + 64]
        qhh = qh[:, 32 * h:32 * h + 32]
        quarters = [(lo & 0xF) | ((qhh >> 0 & 3) << 4),
                    (hi & 0xF) | ((qhh >> 2 & 3) << 4),
                    (lo >> 4) | ((qhh >> 4 & 3) << 4),
                    (hi >> 4) | ((qhh >> 6 & 3) << 4)]
        for k, q in enumerate(quarters):
            # 16 elements per scale: l < 16 -> scale 2k, else 2k+1 (within this half)
            sc = np.repeat(scales[:, 8 * h + 2 * k:8 * h + 2 * k + 2], 16, axis=1)
            y[:, 128 * h + 32 * k:128 * h + 32 * k + 32] = d * sc * (q - 32)
    return y


_BLOCK_FN = {Q4_0: _q4_0, Q8_0: _q8_0, Q4_K: _q4_k, Q6_K: _q6_k}


def dequantize(type_id, ne, raw):
    """raw ggml bytes -> float64 array of shape reversed(ne) (numpy [ne1][ne0])."""
    n = int(np.prod(ne))
    nbytes = row_bytes(type_id, ne[0]) * (n // ne[0])
    buf = np.frombuffer(raw, dtype=np.uint8, count=nbytes)
    if type_id == F32:
        flat = buf.view("<f4").astype(np.float64)
    elif type_id == F16:
        flat = buf.view("<f2").astype(np.float64)
    elif type_id == BF16:
        flat = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        blk, bb = BLOCK[type_id]
        flat = _BLOCK_FN[type_id](buf.reshape(-1, bb)).reshape(-1)
    return flat.reshape(list(reversed(ne)))
