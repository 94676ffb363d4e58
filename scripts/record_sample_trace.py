#!/usr/bin/env python3
"""Record sample_traces/cpu_mlp_train.json.gz: a real torch.profiler trace of a tiny training loop.

The workload is one small transformer-style block trained for a few steps: token embedding,
LayerNorm, a QKV Linear, causal softmax attention through F.scaled_dot_product_attention, an output
Linear with a residual add, an MLP (Linear -> GELU -> Linear) with a second residual add, a final
LayerNorm and vocabulary Linear, cross-entropy loss, backward, and an AdamW step.  Everything is
seeded (torch.manual_seed, a seeded generator for the synthetic batches), so the recorded ops and
shapes are the same on every run; only the timings differ.

Profiling: torch.profiler.profile(record_shapes=True) with schedule(wait=1, warmup=1, active=2),
so the trace holds two training steps, each wrapped in its ProfilerStep#N user annotation.  The
trace is written with export_chrome_trace and then gzipped (gzip header mtime 0).

This machine is CPU-only, so the default recording has no GPU events at all: no kernels, no
cudaLaunchKernel, empty deviceProperties.  traceana's report on it therefore shows the CPU side
only (ops, shapes, CPU time), with no roofline numbers.  To record a CUDA trace of the same
workload, run on a GPU machine:

    python scripts/record_sample_trace.py --device cuda
    # -> sample_traces/cuda_mlp_train.json.gz (activities CPU + CUDA)

Usage: python scripts/record_sample_trace.py [--device cpu|cuda] [--out PATH] [--steps N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VOCAB = 256
D_MODEL = 64
N_HEADS = 4
SEQ = 32
BATCH = 8
SEED = 0


class TinyBlock(nn.Module):
    """Embedding -> pre-LN attention block -> pre-LN MLP block -> LN -> vocabulary head."""

    def __init__(self, vocab: int = VOCAB, d: int = D_MODEL, heads: int = N_HEADS) -> None:
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.emb(idx)
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        hd = x.shape[-1] // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        x = x + self.fc2(self.act(self.fc1(self.ln2(x))))
        return self.head(self.ln_f(x))


def record(device: str, out_path: str, steps: int) -> str:
    torch.manual_seed(SEED)
    dev = torch.device(device)
    model = TinyBlock().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(SEED)
    batches = [torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen) for _ in range(steps)]

    activities = [ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    tmpdir = tempfile.mkdtemp(prefix="traceana_rec_")
    json_path = os.path.join(tmpdir, os.path.basename(out_path).removesuffix(".gz"))

    def on_ready(prof: profile) -> None:
        prof.export_chrome_trace(json_path)

    sched = schedule(wait=1, warmup=1, active=steps - 2, repeat=1)
    try:
        with profile(activities=activities, schedule=sched, on_trace_ready=on_ready,
                     record_shapes=True) as prof:
            for tokens in batches:
                tokens = tokens.to(dev)
                inp, tgt = tokens[:, :-1], tokens[:, 1:]
                with record_function("forward"):
                    logits = model(inp)
                    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1))
                with record_function("backward"):
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                with record_function("optimizer_step"):
                    opt.step()
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                prof.step()
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(json_path, "rb") as src:
            text = stable_trace_name(src.read(), json_path)
        with open(out_path, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                gz.write(text)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return out_path


def stable_trace_name(text: bytes, json_path: str) -> bytes:
    """The profiler writes the temporary export path as "traceName": keep only the file name, so
    the shipped trace does not name a machine's temp folder."""
    old = b'"traceName": ' + json.dumps(json_path).encode()
    return text.replace(old, b'"traceName": ' + json.dumps(os.path.basename(json_path)).encode(), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", default=None,
                    help="output .json.gz (default: sample_traces/<device>_mlp_train.json.gz)")
    ap.add_argument("--steps", type=int, default=4,
                    help="training steps run; the first 2 are wait/warmup, the rest recorded "
                         "(default: %(default)s -> 2 recorded steps)")
    args = ap.parse_args(argv)
    if args.steps < 3:
        ap.error("--steps must be at least 3 (1 wait + 1 warmup + >= 1 active)")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False on this machine")
    out = args.out or os.path.join(REPO, "sample_traces", f"{args.device}_mlp_train.json.gz")
    record(args.device, out, args.steps)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
