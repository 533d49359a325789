#!/usr/bin/env python3
"""Train leoam's long-context test model: a byte-level Llama with a constructed retrieval circuit.

    train.py --out DIR [--minutes 40] [--init MODEL.gguf] [--leoam build/release/leoam]

The previous-token heads and the induction head are built by circuit.py and frozen; the rest
is trained on public-domain text mixed with synthetic retrieval samples. Writes into DIR:
    checkpoint.pt        resumable state (--resume continues from it)
    log.jsonl            one line per logged step: step, seconds, train and held-out bits per byte
                         (held out: the same 24 windows of --eval-ctx bytes at every evaluation)
    bundle.json, weights.f32   the tensor bundle; `leoam gguf pack` turns it into GGUF
    model.gguf           when --leoam is given (the project's own GGUF writer)
    train_summary.json   config, data, command, wall time, final held-out bits per byte
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
import circuit  # noqa: E402
from dequant import dequantize  # noqa: E402
from gguf_read import read_gguf  # noqa: E402
from corpus import Corpus  # noqa: E402
from export import write_bundle  # noqa: E402
from llama_model import Config, Llama  # noqa: E402

DEFAULT_TEXTS = ["kjv_bible.txt", "devils_dictionary.txt", "jargon-4.4.7.txt"]


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    fixtures = os.path.normpath(os.path.join(here, "../../../shared/fixtures/text"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--texts", nargs="+", default=[os.path.join(fixtures, t) for t in DEFAULT_TEXTS],
                    help="training text files (default: the Debian texts in ../shared/fixtures/text)")
    ap.add_argument("--minutes", type=float, default=40.0, help="training wall-time budget")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time only)")
    ap.add_argument("--ctx", type=int, default=512, help="training window in bytes")
    ap.add_argument("--eval-ctx", type=int, default=1536, help="held-out window in bytes")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--synthetic", type=float, default=0.25, help="share of synthetic retrieval samples")
    ap.add_argument("--max-ctx", type=int, default=32768, help="context the positional heads are built for")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--resume", action="store_true", help="continue from DIR/checkpoint.pt")
    ap.add_argument("--init", metavar="GGUF", help="start from this model's weights (one train.py made; "
                    "the optimizer starts afresh) instead of random ones")
    ap.add_argument("--logn-length", type=int, metavar="L", help="log-n attention: queries past L keys scaled by "
                    "ln(n)/ln(L), written as leoam.attention.logn_length (default: --init's or the checkpoint's; "
                    "0: none)")
    ap.add_argument("--copy-norm", type=float, help="norm the induction head's copied byte is written at (default: "
                    f"--init's or the checkpoint's, else {circuit.COPY_NORM}); with --init, the trained weights are "
                    "kept and only the constructed parts change")
    ap.add_argument("--leoam", help="leoam binary: pack the result into DIR/model.gguf")
    args = ap.parse_args()
    if args.copy_norm is not None and not args.copy_norm > 0:
        ap.error(f"--copy-norm: {args.copy_norm} is not positive")
    if args.logn_length is not None and args.logn_length != 0 and not 2 <= args.logn_length <= 2**30:
        ap.error(f"--logn-length: {args.logn_length} is not 0 or in [2, 2^30] (the engine's range)")
    return args


class Trainer:
    def __init__(self, args):
        self.args = args
        torch.manual_seed(args.seed)
        self.cfg = Config(ctx_train=args.ctx)
        self.model = Llama(self.cfg)
        # Each source is read once: the copy norm and then the weights come from it.
        self.init_gguf = read_gguf(args.init) if args.init else None
        self.checkpoint = torch.load(os.path.join(args.out, "checkpoint.pt")) if args.resume else None
        self.copy_norm = args.copy_norm if args.copy_norm is not None else self.built_copy_norm()
        parts, self.codes, self.circuit_report = circuit.construct(self.cfg, args.max_ctx, self.copy_norm)
        self.frozen = {}  # name -> (values, mask) re-imposed after every step
        weights = self.model.named_weights()
        with torch.no_grad():
            weights["output.weight"].copy_(circuit.output_readout(self.cfg, self.codes))
            for name, (values, mask) in parts.items():
                weights[name][mask] = values[mask]
                self.frozen[name] = (values, mask)
        # The learned part of the embedding has a fixed norm (keeps layer 0's and 1's inputs at a fixed scale).
        self.free = torch.nn.Parameter(torch.randn(self.cfg.vocab, self.cfg.dim - circuit.FREE))
        if args.init:
            self.init_from()
        if args.logn_length is not None:
            self.cfg.logn_length = args.logn_length
        params = [self.free] + [p for n, p in weights.items() if not (n in parts and bool(parts[n][1].all()))]
        decay = [p for p in params if p.dim() == 2]
        no_decay = [p for p in params if p.dim() != 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                                     lr=args.lr, betas=(0.9, 0.95))
        self.step = 0
        self.seconds = 0.0
        self.corpus = Corpus(args.texts, seed=args.seed)

    def built_copy_norm(self):
        """The copy norm --init's model or the checkpoint was built with (the circuit's default without either)."""
        if self.checkpoint is not None:
            return self.checkpoint.get("copy_norm", circuit.COPY_NORM)
        if self.init_gguf is not None:
            raw = self.init_gguf[1]
            name = "blk.1.attn_output.weight"
            w = dequantize(*raw[name]) if name in raw else None
            if w is not None and w.shape == tuple(self.model.named_weights()[name].shape):  # else init_from() says why
                return circuit.copy_norm_of(w)
        return circuit.COPY_NORM

    def init_from(self):
        """Copies every tensor of --init (a GGUF file train.py wrote); the frozen parts are re-imposed after."""
        path = self.args.init
        meta, raw = self.init_gguf
        self.cfg.logn_length = int(meta.get("leoam.attention.logn_length", 0))  # kept in the export
        weights = self.model.named_weights()
        if set(raw) != set(weights):
            raise SystemExit(f"{path}: its tensors are not this model's ({sorted(set(raw) ^ set(weights))[:4]} ...)")
        with torch.no_grad():
            for name, w in weights.items():
                value = torch.from_numpy(dequantize(*raw[name]).astype(np.float32))
                if value.shape != w.shape:
                    raise SystemExit(f"{path}: {name} is {tuple(value.shape)}, this model's is {tuple(w.shape)}")
                w.copy_(value)
            self.free.copy_(weights["token_embd.weight"][:, circuit.FREE:])
        self.restore_frozen()

    def embedding(self):
        e = self.model.p("token_embd.weight")
        free = circuit.EMB_FREE * self.free / self.free.norm(dim=1, keepdim=True)
        return torch.cat([e[:, :circuit.FREE], free], dim=1)

    def restore_frozen(self):
        weights = self.model.named_weights()
        with torch.no_grad():
            for name, (values, mask) in self.frozen.items():
                weights[name][mask] = values[mask]

    def loss(self, tokens):
        logits = self.model(tokens[:, :-1], embed=self.embedding(), constant_layers=1)
        return F.cross_entropy(logits.reshape(-1, self.cfg.vocab), tokens[:, 1:].reshape(-1))

    def lr_at(self, progress):
        warm = min(1.0, self.step / 50.0)
        return self.args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    @torch.no_grad()
    def held_out_bpb(self):
        windows = torch.from_numpy(self.corpus.held_out_windows(self.args.eval_ctx + 1, 24))
        total = 0.0
        for i in range(0, len(windows), 8):
            total += float(self.loss(windows[i:i + 8])) * len(windows[i:i + 8])
        return total / len(windows) / math.log(2)

    def save(self):
        state = {"model": self.model.state_dict(), "free": self.free.detach(), "opt": self.opt.state_dict(),
                 "step": self.step, "seconds": self.seconds, "rng": self.corpus.rng.bit_generator.state,
                 "logn_length": self.cfg.logn_length, "copy_norm": self.copy_norm}
        path = os.path.join(self.args.out, "checkpoint.pt")
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)

    def load(self):
        state = self.checkpoint
        self.model.load_state_dict(state["model"])
        with torch.no_grad():
            self.free.copy_(state["free"])
        self.opt.load_state_dict(state["opt"])
        self.step, self.seconds = state["step"], state["seconds"]
        self.corpus.rng.bit_generator.state = state["rng"]
        if self.args.logn_length is None:
            self.cfg.logn_length = state.get("logn_length", 0)

    def run(self):
        a = self.args
        log = open(os.path.join(a.out, "log.jsonl"), "a")
        budget = a.minutes * 60.0
        start = time.time() - self.seconds
        last_bpb = None
        while True:
            self.seconds = time.time() - start
            if self.seconds >= budget or (a.max_steps and self.step >= a.max_steps):
                break
            for g in self.opt.param_groups:
                g["lr"] = self.lr_at(self.seconds / budget)
            tokens = torch.from_numpy(self.corpus.batch(a.batch, a.ctx + 1, a.synthetic))
            loss = self.loss(tokens)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for g in self.opt.param_groups for p in g["params"]], 1.0)
            self.opt.step()
            self.restore_frozen()
            self.step += 1
            line = {"step": self.step, "seconds": round(time.time() - start, 1),
                    "train_bpb": round(float(loss) / math.log(2), 4)}
            if self.step % a.eval_every == 0:
                last_bpb = self.held_out_bpb()
                line["held_out_bpb"] = round(last_bpb, 4)
                self.save()
            log.write(json.dumps(line) + "\n")
            log.flush()
            if self.step % 10 == 0 or "held_out_bpb" in line:
                print(f"step {self.step:5d}  {line['seconds']:7.0f}s  train {line['train_bpb']:.3f} bpb"
                      + (f"  held-out {last_bpb:.3f} bpb" if "held_out_bpb" in line else ""), flush=True)
        self.seconds = time.time() - start
        last_bpb = self.held_out_bpb()
        self.save()
        return last_bpb


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(args.threads)
    trainer = Trainer(args)
    if args.resume:
        trainer.load()
    bpb = trainer.run()
    with torch.no_grad():
        weights = {n: p.detach().clone() for n, p in trainer.model.named_weights().items()}
        weights["token_embd.weight"] = trainer.embedding().detach()
    write_bundle(args.out, trainer.cfg, weights)
    summary = {"config": trainer.cfg.to_dict(), "texts": args.texts, "steps": trainer.step,
               "train_seconds": round(trainer.seconds), "held_out_bpb": round(bpb, 4),
               "circuit": trainer.circuit_report, "command": " ".join(sys.argv),
               "torch": torch.__version__, "threads": args.threads}
    with open(os.path.join(args.out, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"trained {trainer.step} steps in {trainer.seconds:.0f}s; held-out {bpb:.3f} bits per byte")
    if args.leoam:
        gguf = os.path.join(args.out, "model.gguf")
        subprocess.run([args.leoam, "gguf", "pack", os.path.join(args.out, "bundle.json"), "-o", gguf], check=True)
        print("wrote", gguf)


if __name__ == "__main__":
    main()
