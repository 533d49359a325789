#!/usr/bin/env python3
"""tools/train/llama_model.py (the PyTorch model train.py trains) computes the same forward pass
as the independent numpy reference (tests/reference/llama_ref.py), on the committed model
(models/leoam-byte-4l) past its log-n length, so that the log-n queries are checked too.
Skipped (exit 77) without python3-torch.

    test_model_parity.py
"""

import os
import random
import sys

import numpy as np

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
MODEL = os.path.join(ROOT, "models", "leoam-byte-4l", "leoam-byte-4l.gguf")
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import llama_ref  # noqa: E402

# float32 (torch) against float64 (numpy) over 4 layers: measured 3e-7.
TOLERANCE = 1e-5


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def torch_model(ref, logn_length):
    """The reference's weights (the GGUF's, dequantized) in a llama_model.Llama."""
    import torch
    from llama_model import Config, Llama
    hp = ref["hp"]
    cfg = Config(vocab=ref["tok_embd"].shape[0], dim=hp["n_embd"], n_layers=hp["n_layer"], n_heads=hp["n_head"],
                 n_kv_heads=hp["n_head_kv"], head_dim=hp["head_dim"], n_rot=hp["n_rot"], rope_base=hp["freq_base"],
                 ffn=hp["n_ff"], eps=hp["eps"], logn_length=logn_length)
    model = Llama(cfg)
    weights = model.named_weights()
    tensors = {"token_embd.weight": ref["tok_embd"], "output_norm.weight": ref["output_norm"],
               "output.weight": ref["output"]}
    for il, layer in enumerate(ref["layers"]):
        for k in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                  "ffn_down"):
            tensors[f"blk.{il}.{k}.weight"] = layer[k]
    with torch.no_grad():
        for name, w in weights.items():
            w.copy_(torch.from_numpy(np.asarray(tensors[name], dtype=np.float32)))
    return model


def main():
    try:
        import torch
    except ImportError as e:
        print(f"SKIP: llama_model.py needs python3-torch ({e})")
        return SKIP
    torch.set_num_threads(2)
    ref = llama_ref.load_model(MODEL)
    logn = ref["hp"]["logn_length"]
    assert logn > 0, f"{MODEL} has no leoam.attention.logn_length: nothing here checks log-n"
    # Byte text past the log-n length: BOS, then one token per byte.
    words = "the pass key is remember it in the beginning god created heaven and earth 40271 .".split()
    rng = random.Random(0)
    text = " ".join(rng.choice(words) for _ in range(logn)).encode()[:logn + 255]
    tokens = [256] + list(text)
    n_tail = len(tokens) - logn  # positions that see more than logn keys

    want = llama_ref.forward(ref, tokens, llama_ref.new_kv_cache(ref))
    with torch.no_grad():
        got = torch_model(ref, logn)(torch.tensor([tokens]))[0].double().numpy()
        plain = torch_model(ref, 0)(torch.tensor([tokens]))[0].double().numpy()
    err = rel_l2(got, want)
    err_tail = rel_l2(got[-n_tail:], want[-n_tail:])
    print(f"[ measured ] {len(tokens)} tokens, log-n from {logn}: rel L2 {err:.3g} (last {n_tail}: {err_tail:.3g})")
    assert err <= TOLERANCE and err_tail <= TOLERANCE, (err, err_tail)
    # The check can fail: without log-n the torch model matches up to logn keys and not after.
    head, tail = rel_l2(plain[:logn], want[:logn]), rel_l2(plain[-n_tail:], want[-n_tail:])
    print(f"[ measured ] without log-n: rel L2 {head:.3g} up to {logn} keys, {tail:.3g} after")
    assert head <= TOLERANCE and tail > 100 * TOLERANCE, (head, tail)
    print("model parity test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
