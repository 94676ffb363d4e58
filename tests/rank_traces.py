"""Synthetic multi-rank runs made from a small real trace (the project's own T4 sample).

`make_rank_dir(dst, n=8, straggler=5)` writes rank0.json.gz ... rank{n-1}.json.gz: every rank
is the T4 trace (fill, mm, mul_, sum, pow kernels on one stream) with
- its kernels `SCALE(r)` = 1 + 0.001 r slower (so no two ranks are identical),
- on the straggler, the aten::pow kernel (memory-bound) POW_FACTOR times longer,
- one step: a ProfilerStep#1 annotation from the first op to the end of the step,
- a synchronous all-reduce at the end of the step: an NCCL kernel lasting
  COLL_BASE + (the slowest rank's compute - this rank's compute) µs, i.e. every rank waits in
  the collective until the straggler arrives, so all step times end up equal,
- distributedInfo {rank, world_size, backend}.
It returns each rank's compute time (µs) so tests can check the arithmetic.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
T4 = REPO / "sample_traces" / "t4_seed_pow_mul.json"
POW_FACTOR = 1.6
COLL_BASE = 1000.0
COLL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def scale(r: int) -> float:
    return 1 + 0.001 * r


def _rank_doc(base: dict, r: int, n: int, straggler: int) -> tuple[dict, float]:
    doc = copy.deepcopy(base)
    events = doc["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    t = kernels[0]["ts"]
    for k in kernels:  # back to back on one stream, as in the source
        d = k["dur"] * scale(r)
        if r == straggler and "pow_tensor_scalar" in k["name"]:
            d *= POW_FACTOR
        k["ts"], k["dur"] = t, d
        t += d
    compute = sum(k["dur"] for k in kernels)
    doc["_compute_end"] = t
    return doc, compute


def make_rank_dir(dst: Path, n: int = 8, straggler: int = 5) -> dict[int, float]:
    """Write n rank files into dst; return {rank: compute µs}."""
    base = json.loads(T4.read_text())
    docs = {r: _rank_doc(base, r, n, straggler) for r in range(n)}
    compute = {r: c for r, (_, c) in docs.items()}
    slowest = max(compute.values())
    dst.mkdir(parents=True, exist_ok=True)
    for r, (doc, c) in docs.items():
        end = doc.pop("_compute_end")
        coll = COLL_BASE + (slowest - c)
        events = doc["traceEvents"]
        start = min(e["ts"] for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")
        corr = 99000
        events.append({"ph": "X", "cat": "kernel", "name": COLL_KERNEL, "pid": 0, "tid": 7, "ts": end, "dur": coll,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})
        step_end = end + coll
        events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": events[0].get("pid", 1),
                       "tid": events[0].get("tid", 1), "ts": start, "dur": step_end - start, "args": {}})
        doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": n}
        (dst / f"rank{r}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return compute
