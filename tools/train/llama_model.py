"""A small Llama in PyTorch with exactly the engine's (llama.cpp's) forward pass.

RMSNorm with a gain, RoPE in ggml's NORM layout (adjacent pairs (x0, x1) rotated, only the
first n_rot dims of a head, theta_i = base^(-2i/n_rot)), grouped-query attention with
1/sqrt(head_dim) scaling (times log-n's ln(p+1)/ln(L) past L keys, when set) and a causal
mask, a SwiGLU feed-forward, untied output matrix.
Weights are named and shaped as in GGUF (a GGUF ne = [n_in, n_out] is a torch [n_out, n_in]),
so export is a plain copy.
"""

from dataclasses import dataclass, asdict
import math

import torch
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 258          # 256 bytes, BOS, EOS
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 4
    head_dim: int = 64
    n_rot: int = 8            # rotated dims per head; the other head_dim - n_rot are position-free
    rope_base: float = 1e5
    ffn: int = 640
    eps: float = 1e-5
    ctx_train: int = 512
    logn_length: int = 0      # leoam.attention.logn_length: queries past it scaled by ln(n)/ln(L); 0: none

    def to_dict(self):
        return asdict(self)


def tensor_shapes(cfg: Config):
    """GGUF tensor name -> torch shape [n_out, n_in] (or [n] for norms)."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    shapes = {"token_embd.weight": (cfg.vocab, cfg.dim)}
    for l in range(cfg.n_layers):
        p = f"blk.{l}."
        shapes.update({
            p + "attn_norm.weight": (cfg.dim,),
            p + "attn_q.weight": (q, cfg.dim),
            p + "attn_k.weight": (kv, cfg.dim),
            p + "attn_v.weight": (kv, cfg.dim),
            p + "attn_output.weight": (cfg.dim, q),
            p + "ffn_norm.weight": (cfg.dim,),
            p + "ffn_gate.weight": (cfg.ffn, cfg.dim),
            p + "ffn_up.weight": (cfg.ffn, cfg.dim),
            p + "ffn_down.weight": (cfg.dim, cfg.ffn),
        })
    shapes["output_norm.weight"] = (cfg.dim,)
    shapes["output.weight"] = (cfg.vocab, cfg.dim)
    return shapes


def rope_tables(cfg: Config, n_pos: int, device=None):
    i = torch.arange(cfg.n_rot // 2, dtype=torch.float64)
    inv_freq = cfg.rope_base ** (-2.0 * i / cfg.n_rot)
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(ang).float().to(device), torch.sin(ang).float().to(device)


def apply_rope(x, cos, sin, n_rot):
    """x: [batch, heads, pos, head_dim]; rotates adjacent pairs of the first n_rot dims."""
    rot, rest = x[..., :n_rot], x[..., n_rot:]
    x0, x1 = rot[..., 0::2], rot[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    rot = torch.stack((r0, r1), dim=-1).flatten(-2)
    return torch.cat((rot, rest), dim=-1)


def rms_norm(x, gain, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


class Llama(torch.nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.w = torch.nn.ParameterDict()
        for name, shape in tensor_shapes(cfg).items():
            init = torch.ones(shape) if len(shape) == 1 else torch.randn(shape) / math.sqrt(shape[1])
            self.w[name.replace(".", "__")] = torch.nn.Parameter(init)

    def p(self, name):
        return self.w[name.replace(".", "__")]

    def named_weights(self):
        return {k.replace("__", "."): v for k, v in self.w.items()}

    def embed(self, tokens):
        return F.embedding(tokens, self.p("token_embd.weight"))

    def forward(self, tokens, embed=None, attn_probe=None, constant_layers=0):
        """tokens: [batch, pos] -> logits [batch, pos, vocab]. `embed` overrides the embedding
        table (for a parametrized one). attn_probe=(layer, head) also returns that head's
        attention probabilities [batch, pos, pos]. The first `constant_layers` blocks are run
        without gradients (frozen blocks whose output does not depend on trained weights)."""
        cfg = self.cfg
        b, n = tokens.shape
        x = F.embedding(tokens, embed if embed is not None else self.p("token_embd.weight"))
        cos, sin = rope_tables(cfg, n, x.device)
        mask = torch.full((n, n), float("-inf"), device=x.device).triu(1)
        probe = None
        for l in range(cfg.n_layers):
            with torch.set_grad_enabled(torch.is_grad_enabled() and l >= constant_layers):
                delta, att = self.block(l, x, cos, sin, mask)
            x = x + delta
            if attn_probe is not None and attn_probe[0] == l:
                probe = att[:, attn_probe[1]]
        x = rms_norm(x, self.p("output_norm.weight"), cfg.eps)
        logits = x @ self.p("output.weight").T
        return (logits, probe) if attn_probe is not None else logits

    def block(self, l, x, cos, sin, mask):
        """One transformer block: returns what it adds to the residual x, and its attention
        probabilities [batch, heads, pos, pos]."""
        cfg = self.cfg
        b, n, _ = x.shape
        group = cfg.n_heads // cfg.n_kv_heads
        p = f"blk.{l}."
        h = rms_norm(x, self.p(p + "attn_norm.weight"), cfg.eps)
        q = (h @ self.p(p + "attn_q.weight").T).view(b, n, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        k = (h @ self.p(p + "attn_k.weight").T).view(b, n, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        v = (h @ self.p(p + "attn_v.weight").T).view(b, n, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin, cfg.n_rot), apply_rope(k, cos, sin, cfg.n_rot)
        # grouped-query attention: head h uses key/value head h // group
        q = q.reshape(b, cfg.n_kv_heads, group, n, cfg.head_dim) * (1.0 / math.sqrt(cfg.head_dim))
        if cfg.logn_length:  # log-n attention, as the engine: position p sees p + 1 keys
            keys = torch.arange(1, n + 1, dtype=q.dtype, device=q.device)
            q = q * torch.where(keys > cfg.logn_length, keys.log() / math.log(cfg.logn_length),
                                torch.ones_like(keys))[:, None]
        att = torch.softmax(q @ k.unsqueeze(2).transpose(-1, -2) + mask, dim=-1)
        o = (att @ v.unsqueeze(2)).reshape(b, cfg.n_heads, n, cfg.head_dim)
        o = o.transpose(1, 2).reshape(b, n, cfg.n_heads * cfg.head_dim)
        attn_out = o @ self.p(p + "attn_output.weight").T
        h = rms_norm(x + attn_out, self.p(p + "ffn_norm.weight"), cfg.eps)
        g = F.silu(h @ self.p(p + "ffn_gate.weight").T) * (h @ self.p(p + "ffn_up.weight").T)
        return attn_out + g @ self.p(p + "ffn_down.weight").T, att.reshape(b, cfg.n_heads, n, n)
