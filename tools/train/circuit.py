"""The constructed retrieval circuit: previous-token heads and an n-gram induction head.

Small models trained briefly on a CPU do not form induction heads, so this model's retrieval
circuit is set by hand and frozen; training fits everything else around it.

Residual stream layout (dim 256):
    [0, 8)          C0   code of the current byte (a fixed 8-dim code per token)
    [8k, 8k+8)      Pk   code of the byte k positions back, k = 1..7 (written by layer 0)
    [64, 72)        O    code of the byte the induction head copies (written by layer 1)
    72              a constant 1, the positional heads' input
    [73, 256)       free: a learned embedding of fixed norm, and whatever training writes

Layer 0 (all frozen): head h < 7 attends to exactly k = h + 1 positions back and writes the
code it finds there into Pk. Its query and key use only the rotated (RoPE) dims: the key is a
constant vector, so after rotation the score is sum_j a_j cos(theta_j (delta - k)) for a
query-key distance delta. The amplitudes a_j maximise the worst-case gap between delta = k and
any other delta up to max_ctx (a small linear programme). Head 7 and the feed-forward are zero.

Layer 1, head 0 (frozen): the induction head. Its query is the last 7 codes (C0, P1..P6) and
its key at position j is P1..P7 there, each in its own 8 position-free dims of the head, so
the score counts how many of the 7 bytes before j equal the 7 bytes ending at the query: it
finds where the current text occurred before and copies (through its value, C0 at j) the
byte that followed into O. Every code has the same component mu along its last dim and BOS's
code is only that dim (beta), so BOS's key scores a fixed threshold: with no good match the
head rests on BOS, whose value writes no byte code. Head 1 shares this key/value head (GQA),
so its key and value are frozen too; its query and output are trained.

The head's value leaves out the shared code dim, so resting on BOS writes nothing, and its
output writes the copied code at norm copy_norm (COPY_NORM by default): large against the rest
of the residual, so that a confident copy stands out through the final norm. The output matrix starts reading O as
the copied byte. Everything else (the free embedding dims, layer 1's other heads and
feed-forward, layers 2 and 3, the output) is trained.
"""

import numpy as np
import torch

from llama_model import Config

CODE = 8
N_PREV = 7
SLOT_C0 = 0
SLOT_O = 64
CONST = 72
FREE = 73
BOS, EOS = 256, 257

EMB_CODE = 1.0    # norm of a code in the residual
EMB_CONST = 1.0   # the constant dim
EMB_FREE = 2.0    # norm of the learned part of the embedding
MU = 0.35         # shared component of every byte code
BETA = 2.53       # BOS's code: n_prev * MU * BETA = 6.2, the threshold out of 7 matching bytes
POS_LOGIT_GAP = 16.0   # worst-case logit gap of a previous-token head
POS_KEY = 8.0          # norm of each rotated pair of the positional key
IND_LOGIT_PER_BYTE = 6.0  # induction logit per matching byte
IND_KEY = 4.0          # key scale of the induction head (the KV cache holds keys of this size)
VALUE = 1.0
COPY_NORM = 6.0        # default norm of O when the induction head copies a byte (it dominates the residual)
COPY_LOGIT = 2.0       # initial output weight on O (trained)


def byte_codes(seed=0, iters=400):
    """Unit 8-dim codes: 7 dims spread apart for the printable bytes, plus MU on the last."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((258, CODE - 1))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    common = np.r_[9, 10, np.arange(32, 127)]
    for _ in range(iters):  # push the common bytes' codes apart (lower their max coherence)
        s = v[common]
        g = s @ s.T
        np.fill_diagonal(g, 0.0)
        s = s - 0.05 * (g ** 3) @ s
        v[common] = s / np.linalg.norm(s, axis=1, keepdims=True)
    codes = np.concatenate([v * np.sqrt(1 - MU * MU), np.full((258, 1), MU)], axis=1)
    codes[BOS] = 0.0
    codes[BOS, -1] = BETA
    return codes


def positional_amplitudes(cfg: Config, max_ctx: int):
    """Amplitudes a_j >= 0, sum 1, maximising min over delta != 0 in [-N_PREV, max_ctx] of
    sum_j a_j (1 - cos(theta_j delta)); returns (a, gap)."""
    from scipy.optimize import linprog

    theta = cfg.rope_base ** (-2.0 * np.arange(cfg.n_rot // 2) / cfg.n_rot)
    delta = np.arange(-N_PREV - 1, max_ctx + 1)
    delta = delta[delta != 0]
    m = 1.0 - np.cos(np.outer(delta, theta))
    j = len(theta)
    res = linprog(np.r_[np.zeros(j), -1.0],
                  A_ub=np.vstack([np.c_[-m, np.ones(len(delta))], np.r_[np.ones(j), 0.0]]),
                  b_ub=np.r_[np.zeros(len(delta)), 1.0],
                  bounds=[(0, None)] * j + [(None, None)], method="highs")
    if not res.success:
        raise RuntimeError("positional amplitudes: " + res.message)
    return res.x[:j], res.x[j], theta


def residual_rms(cfg: Config, n_codes: int):
    return np.sqrt((n_codes * EMB_CODE ** 2 + EMB_CONST ** 2 + EMB_FREE ** 2) / cfg.dim)


def output_readout(cfg: Config, codes):
    """Initial output matrix: reads O as the copied byte (trained afterwards)."""
    w = torch.randn(cfg.vocab, cfg.dim) * 0.02
    w[:, SLOT_O:SLOT_O + CODE] = COPY_LOGIT * codes
    return w


def copy_norm_of(attn_output_1):
    """The copy norm that construct() built layer 1's output matrix (out x in) with."""
    return float(attn_output_1[SLOT_O, 0]) * VALUE


def construct(cfg: Config, max_ctx: int, copy_norm: float = COPY_NORM):
    """Returns {tensor name: (values, frozen mask)} for the constructed parts, and a report."""
    assert cfg.dim == 256 and cfg.head_dim - cfg.n_rot == N_PREV * CODE and cfg.n_heads >= N_PREV + 1
    codes = torch.tensor(byte_codes(), dtype=torch.float32)
    hd, group = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
    out = {}

    def frozen(name, shape):
        if name not in out:
            out[name] = (torch.zeros(shape), torch.zeros(shape, dtype=torch.bool))
        return out[name]

    # Embedding: code and constant frozen; the free dims are trained (their norm fixed by the trainer).
    emb, m = frozen("token_embd.weight", (cfg.vocab, cfg.dim))
    emb[:, SLOT_C0:SLOT_C0 + CODE] = EMB_CODE * codes
    emb[:, CONST] = EMB_CONST
    m[:, :FREE] = True

    # Layer 0: previous-token heads. The norm input is the embedding: rms with one code.
    n0 = 1.0 / residual_rms(cfg, 1)  # normalised = n0 * residual
    amp, gap, theta = positional_amplitudes(cfg, max_ctx)
    scale = POS_LOGIT_GAP / gap      # logit amplitudes a_j * scale
    for name in ("attn_norm.weight", "ffn_norm.weight"):
        g, gm = frozen("blk.0." + name, (cfg.dim,))
        g[:] = 1.0
        gm[:] = True
    for name, shape in (("attn_q.weight", (cfg.n_heads * hd, cfg.dim)), ("attn_k.weight", (cfg.n_kv_heads * hd, cfg.dim)),
                        ("attn_v.weight", (cfg.n_kv_heads * hd, cfg.dim)), ("attn_output.weight", (cfg.dim, cfg.n_heads * hd)),
                        ("ffn_gate.weight", (cfg.ffn, cfg.dim)), ("ffn_up.weight", (cfg.ffn, cfg.dim)),
                        ("ffn_down.weight", (cfg.dim, cfg.ffn))):
        frozen("blk.0." + name, shape)[1][:] = True
    wq, _ = out["blk.0.attn_q.weight"]
    wk, _ = out["blk.0.attn_k.weight"]
    wv, _ = out["blk.0.attn_v.weight"]
    wo, _ = out["blk.0.attn_output.weight"]
    n_const = EMB_CONST * n0
    for g in range(cfg.n_kv_heads):
        for j in range(cfg.n_rot // 2):
            wk[g * hd + 2 * j, CONST] = POS_KEY / n_const
        for d in range(CODE):
            wv[g * hd + d, SLOT_C0 + d] = VALUE / (EMB_CODE * n0)
    for h in range(N_PREV):
        k = h + 1
        for j in range(cfg.n_rot // 2):
            # logit a_j cos(theta_j (delta - k)): |q| |key| / sqrt(head_dim) = a_j, phase -theta_j k
            qn = amp[j] * scale * np.sqrt(hd) / POS_KEY
            wq[h * hd + 2 * j, CONST] = qn * np.cos(-theta[j] * k) / n_const
            wq[h * hd + 2 * j + 1, CONST] = qn * np.sin(-theta[j] * k) / n_const
        for d in range(CODE):
            wo[8 * k + d, h * hd + d] = EMB_CODE / VALUE

    # Layer 1: the induction head (head 0; its key/value head 0 is shared with head 1).
    n1 = 1.0 / residual_rms(cfg, 1 + N_PREV)
    g1, g1m = frozen("blk.1.attn_norm.weight", (cfg.dim,))
    g1[:] = 1.0
    g1m[:] = True
    wq, mq = frozen("blk.1.attn_q.weight", (cfg.n_heads * hd, cfg.dim))
    wk, mk = frozen("blk.1.attn_k.weight", (cfg.n_kv_heads * hd, cfg.dim))
    wv, mv = frozen("blk.1.attn_v.weight", (cfg.n_kv_heads * hd, cfg.dim))
    wo, mo = frozen("blk.1.attn_output.weight", (cfg.dim, cfg.n_heads * hd))
    mq[:hd] = True
    mk[:hd] = True
    mv[:hd] = True
    mo[:, :hd] = True
    q_scale = IND_LOGIT_PER_BYTE * np.sqrt(hd) / IND_KEY
    for b in range(N_PREV):
        for d in range(CODE):
            col = cfg.n_rot + b * CODE + d
            wq[col, 8 * b + d] = q_scale / (EMB_CODE * n1)        # C0 (b = 0) or Pb
            wk[col, 8 * (b + 1) + d] = IND_KEY / (EMB_CODE * n1)  # P(b+1)
    for d in range(CODE - 1):  # the value leaves out the shared MU dim: resting on BOS copies nothing
        wv[d, SLOT_C0 + d] = VALUE / (EMB_CODE * n1)
        wo[SLOT_O + d, d] = copy_norm / VALUE

    report = {"positional_gap_logits": POS_LOGIT_GAP, "positional_amplitudes": (amp * scale).tolist(),
              "rope_theta": theta.tolist(), "max_ctx": max_ctx,
              "induction_logit_per_byte": IND_LOGIT_PER_BYTE, "copy_norm": copy_norm,
              "induction_threshold_bytes": N_PREV * MU * BETA}
    return out, codes, report


