"""Synthetic multi-rank runs made from a small real trace (the project's own T4 sample), and
distinct ranks of one job made from a real distributed trace (`stretched_ranks`, at the end).

`make_rank_dir(dst, n=8, slow={5: {"pow": 4.0}})` writes rank0.json.gz ... rank{n-1}.json.gz.
Every rank is the T4 trace (fill, mm, mul_, sum, pow kernels back to back on one stream) with
- its kernels `scale(r)` = 1 + 0.001 r slower (so no two ranks are identical),
- on the ranks in `slow`, the kernels named by KERNELS[key] `factor` times longer,
- one step: a ProfilerStep#1 annotation from the first op to the end of the collective,
- a synchronous all-reduce at the end of the step: an NCCL kernel lasting
  COLL_BASE + (the slowest rank's compute - this rank's compute) µs, i.e. every rank waits in
  the collective until the slowest arrives, so all step times end up equal; it is launched
  (cudaLaunchKernel) inside the backward phase,
- phases (`phases="marks"`): `## forward ##` around the fill and mm launches, `## backward ##`
  around mul_, sum and the all-reduce launch, `## optimizer ##` around pow; `phases="torch"`:
  no `##` marks, an `autograd::engine::evaluate_function: MulBackward0` op over the backward
  launches and an `Optimizer.step#SGD.step` range over pow (forward is then derived);
- distributedInfo {rank, world_size, backend} (world_size=None: n; 0: no distributedInfo),
- `reshape`: ranks whose aten::sum records other input dims (a data-dependent shape).
It returns each rank's compute time (µs) so tests can check the arithmetic.

Kernel times of the source (µs): fill 1141, mm (volta_sgemm) 230208, mul_ 2184,
sum (reduce_kernel) 991.583, pow 2167; sum 236691.583.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
T4 = REPO / "sample_traces" / "t4_seed_pow_mul.json"
COLL_BASE = 1000.0
POW_FACTOR = 4.0
COLL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
KERNELS = {"fill": "FillFunctor", "mm": "sgemm", "mul": "MulFunctor", "sum": "reduce_kernel",
           "pow": "pow_tensor_scalar"}
US = {"fill": 1141.0, "mm": 230208.0, "mul": 2184.0, "sum": 991.583, "pow": 2167.0}
TID = 2318
# launch times of the source's cudaLaunchKernel calls: fill 121594.591, mm 121732.007,
# mul_ 121803.824, sum 121945.683, pow 122144.11 (+ 3816204000000)
T0 = 3816204000000.0
MARKS = {"forward": (119523.0, 121770.0), "backward": (121780.0, 122100.0), "optimizer": (122120.0, 122170.0)}
COLL_LAUNCH = 122050.0


def scale(r: int) -> float:
    return 1 + 0.001 * r


def _ev(cat: str, name: str, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": TID, "tid": TID, "ts": T0 + ts, "dur": dur, "args": args}


def _rank_doc(base: dict, r: int, slow: dict[int, dict[str, float]]) -> tuple[dict, float, float]:
    doc = copy.deepcopy(base)
    events = doc["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    t = kernels[0]["ts"]
    for k in kernels:  # back to back on one stream, as in the source
        d = k["dur"] * scale(r)
        for key, factor in slow.get(r, {}).items():
            if KERNELS[key] in k["name"]:
                d *= factor
        k["ts"], k["dur"] = t, d
        t += d
    return doc, sum(k["dur"] for k in kernels), t


def _phases(events: list, style: str | None) -> None:
    if style == "marks":
        for p, (a, b) in MARKS.items():
            events.append(_ev("user_annotation", f"## {p} ##", a, b - a))
    elif style == "torch":
        a, b = MARKS["backward"]
        events.append(_ev("cpu_op", "autograd::engine::evaluate_function: MulBackward0", a, b - a))
        a, b = MARKS["optimizer"]
        events.append(_ev("user_annotation", "Optimizer.step#SGD.step", a, b - a))


def make_rank_dir(dst: Path, n: int = 8, slow: dict[int, dict[str, float]] | None = None,
                  phases: str | None = "marks", world_size: int | None = None,
                  reshape: tuple[int, ...] = (), straggler: int | None = None) -> dict[int, float]:
    """Write n rank files into dst; return {rank: compute µs}. `straggler=s` is short for
    slow={s: {"pow": POW_FACTOR}} (the default: rank 5)."""
    if slow is None:
        slow = {5 if straggler is None else straggler: {"pow": POW_FACTOR}}
    base = json.loads(T4.read_text())
    docs = {r: _rank_doc(base, r, slow) for r in range(n)}
    compute = {r: c for r, (_, c, _) in docs.items()}
    slowest = max(compute.values())
    dst.mkdir(parents=True, exist_ok=True)
    for r, (doc, c, end) in docs.items():
        coll = COLL_BASE + (slowest - c)
        events = doc["traceEvents"]
        start = min(e["ts"] for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")
        corr = 99000
        events.append(_ev("cuda_runtime", "cudaLaunchKernel", COLL_LAUNCH, 5.0, correlation=corr))
        events.append({"ph": "X", "cat": "kernel", "name": COLL_KERNEL, "pid": 0, "tid": 7, "ts": end, "dur": coll,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})
        events.append(_ev("user_annotation", "ProfilerStep#1", start - T0, end + coll - start))
        _phases(events, phases)
        if r in reshape:
            for e in events:
                if e.get("name") == "aten::sum":
                    e["args"]["Input Dims"] = [[4096, 8192], [], [], []]
        if world_size != 0:
            doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": world_size or n}
        (dst / f"rank{r}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return compute


# ----------------------------------------------------------------------------- from a real trace
# The bench (bench/bench_ranks.py) and the cross-rank tests make distinct ranks of one job from
# one real distributed trace: rank r is the trace with distributedInfo {rank: r, world_size: n}
# and its timeline stretched by 1 + stretch * r around its first timestamp (ts' = t0 + (ts - t0) s,
# dur' = dur s: order and nesting kept, every duration - steps, kernels, collectives - s times
# the source's). Edited as text, so a file keeps the profiler's own layout and size.

_TIME = re.compile(rb'"(ts|dur)": ?(-?\d+(?:\.\d+)?)')
_DIST = re.compile(rb'"distributedInfo": ?\{[^{}]*\}, ?\s*')


def first_ts(text: bytes) -> float:
    """The earliest timestamp of a timed event (metadata events, ph M, are left out)."""
    try:
        import orjson

        doc = orjson.loads(text)
    except ImportError:
        doc = json.loads(text)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M")


def rank_text(text: bytes, t0: float, rank: int, world: int, stretch: float) -> bytes:
    """The trace's text as rank `rank` of `world`, its times stretched by 1 + stretch * rank."""
    s = 1 + stretch * rank

    def sub(m: re.Match) -> bytes:
        v = float(m.group(2))
        if m.group(1) == b"ts":
            if v < t0:  # a metadata event's 0
                return m.group(0)
            v = t0 + (v - t0) * s
        else:
            v *= s
        return b'"%s": %s' % (m.group(1), (b"%.3f" % v).rstrip(b"0").rstrip(b"."))

    body = _TIME.sub(sub, _DIST.sub(b"", text, count=1))
    dist = b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d},\n  ' % (rank, world)
    i = body.index(b"{") + 1
    while body[i:i + 1] in (b"\n", b" "):
        i += 1
    return body[:i] + dist + body[i:]


def stretched_ranks(src: Path, dst: Path, n: int, stretch: float = 0.002) -> list[int]:
    """Write dst/rank0.json.gz ... rank{n-1}.json.gz (gzip level 1) made from src; return
    each file's JSON size in bytes."""
    data = Path(src).read_bytes()
    text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    t0 = first_ts(text)
    dst.mkdir(parents=True, exist_ok=True)
    sizes = []
    for r in range(n):
        out = rank_text(text, t0, r, n, stretch)
        with gzip.open(dst / f"rank{r}.json.gz", "wb", compresslevel=1) as fh:
            fh.write(out)
        sizes.append(len(out))
        del out
    return sizes


def shifted_ranks(src: Path, dst: Path, n: int, step_us: float = 2.0, kinds: int = 8, host_us: float = 1e6) -> list[int]:
    """Write dst/rank0.json.gz ... rank{n-1}.json.gz (gzip level 1) made from src, as `kinds` ranks per host:
    rank r is src with every timestamp `host_us x (r // kinds)` later (its host's clock: an offset the
    cross-rank pass estimates and takes out) plus `step_us x (r mod kinds)` (each rank a little late to every
    collective: waits of up to step_us x (kinds - 1)), and distributedInfo {rank: r, world_size: n}. Return
    each file's JSON size in bytes."""
    data = Path(src).read_bytes()
    text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    t0 = first_ts(text)
    body = _DIST.sub(b"", text, count=1)
    at = body.index(b"{") + 1
    while body[at:at + 1] in (b"\n", b" "):
        at += 1
    dst.mkdir(parents=True, exist_ok=True)
    sizes = []
    last: tuple[float, bytes] | None = None
    for r in range(n):
        shift = host_us * (r // kinds) + step_us * (r % kinds)

        def sub(m: re.Match, shift: float = shift) -> bytes:
            v = float(m.group(2))
            if m.group(1) == b"ts" and v >= t0:
                v += shift
            return b'"%s": %s' % (m.group(1), (b"%.3f" % v).rstrip(b"0").rstrip(b"."))

        if last is None or last[0] != shift:  # ranks of one host with step_us = 0 share one text
            last = (shift, _TIME.sub(sub, body) if shift else body)
        v = last[1]
        dist = b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d},\n  ' % (r, n)
        with gzip.open(dst / f"rank{r}.json.gz", "wb", compresslevel=1) as fh:
            fh.write(v[:at])
            fh.write(dist)
            fh.write(v[at:])
        sizes.append(len(v) + len(dist))
    return sizes
