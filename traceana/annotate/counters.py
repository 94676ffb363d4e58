"""Counter tracks per device for the annotated trace ("ph": "C" events, cat "traceana").

- achieved TFLOP/s: while a kernel runs it adds its op signature's achieved rate (the row's
  achieved_tflops: FLOPs per call / mean device time per call), so the track at any instant is the
  sum over the kernels running on the device then (several streams add up); 0 when nothing costed runs.
- DRAM GB/s: the same with achieved_gbps, for rows judged against DRAM or compute (copies held to
  the host or peer link and collectives, whose bytes cross a link, are left out).
- idle cause: during each idle gap of the device (the ledger's account, diagnose/ledger.py), the
  gap's cause is 1 and the other causes 0; all 0 while the device is busy.

The tracks are step functions: one sample where the value changes. Everything is numpy over the
device's events (sorts and cumulative sums); only the samples are Python objects, and they are
encoded a few thousand at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import numpy as np

from traceana.analysis import Parts
from traceana.diagnose import ledger as lg
from traceana.diagnose.breakdown import event_rows
from traceana.arrays import distinct

CAT = "traceana"  # every event the annotation adds carries this category
TFLOPS = "traceana achieved TFLOP/s"
DRAM = "traceana DRAM GB/s"
IDLE = "traceana idle cause"
_NOT_DRAM = frozenset({"host_link", "peer_link", "communication"})
_ENC = msgspec.json.Encoder()
_BATCH = 4096


def step(ts: np.ndarray, end: np.ndarray, rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of the sum of `rate` over the intervals [ts, end) running at each instant,
    one sample per change (intervals with rate 0 are left out; the value is exactly 0 where none runs)."""
    keep = rate > 0
    ts, end, rate = ts[keep], end[keep], rate[keep]
    if not len(ts):
        return np.zeros(0), np.zeros(0)
    t = np.concatenate((ts, end))
    d = np.concatenate((rate, -rate))
    n = np.concatenate((np.ones(len(ts), np.int64), -np.ones(len(ts), np.int64)))
    o = np.argsort(t, kind="stable")
    t, d, n = t[o], d[o], n[o]
    first = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
    t = t[first]
    v = np.cumsum(np.add.reduceat(d, first))
    running = np.cumsum(np.add.reduceat(n, first))
    v[running == 0] = 0.0  # no float residue where nothing runs
    change = np.r_[True, v[1:] != v[:-1]]
    return t[change], v[change]


def tracks(analysis: dict, parts: Parts) -> dict[int, dict[str, tuple]]:
    """Per device: {TFLOPS: (times, values), DRAM: (times, values), IDLE: (starts, ends, cause codes)}."""
    trace, links = parts.trace, parts.links
    gpu, rows = trace.gpu, analysis["ops"]
    if not len(gpu):
        return {}
    ev_row = event_rows(len(gpu), parts.groups)
    tf = np.array([r.get("achieved_tflops") or 0.0 for r in rows] + [0.0], dtype=np.float64)
    gb = np.array([0.0 if r.get("bound") in _NOT_DRAM else (r.get("achieved_gbps") or 0.0) for r in rows] + [0.0],
                  dtype=np.float64)
    tf[~np.isfinite(tf)] = 0.0
    gb[~np.isfinite(gb)] = 0.0
    r = np.where(ev_row >= 0, ev_row, len(rows))
    accs = lg.accounts(trace, links, ev_row, rows)
    out = {}
    for dev in distinct(gpu.device).tolist():
        idx = np.flatnonzero(gpu.device == dev)
        ts, end = gpu.ts[idx], gpu.ts[idx] + gpu.dur[idx]
        acc = accs[int(dev)]
        out[int(dev)] = {
            TFLOPS: step(ts, end, tf[r[idx]]),
            DRAM: step(ts, end, gb[r[idx]]),
            IDLE: (acc.gap_start, acc.gap_start + acc.gap_len, acc.gap_codes()),
        }
    return out


def _rate_events(name: str, unit: str, dev: int, t: np.ndarray, v: np.ndarray) -> Iterator[dict]:
    for ts, val in zip(t.tolist(), v.tolist()):
        yield {"ph": "C", "cat": CAT, "name": name, "pid": dev, "ts": ts, "args": {unit: float(f"{val:.9g}")}}


def _idle_events(dev: int, starts: np.ndarray, ends: np.ndarray, codes: np.ndarray) -> Iterator[dict]:
    zero = {c: 0 for c in lg.IDLE_CAUSES}
    for s, e, c in zip(starts.tolist(), ends.tolist(), codes.tolist()):
        yield {"ph": "C", "cat": CAT, "name": IDLE, "pid": dev, "ts": s, "args": {**zero, lg.IDLE_CAUSES[c]: 1}}
        yield {"ph": "C", "cat": CAT, "name": IDLE, "pid": dev, "ts": e, "args": zero}


def events(per_device: dict[int, dict[str, tuple]]) -> Iterator[dict]:
    """The counter events, device by device, each track in time order."""
    for dev, tr in sorted(per_device.items()):
        yield from _rate_events(TFLOPS, "TFLOP/s", dev, *tr[TFLOPS])
        yield from _rate_events(DRAM, "GB/s", dev, *tr[DRAM])
        yield from _idle_events(dev, *tr[IDLE])


def count(per_device: dict[int, dict[str, tuple]]) -> int:
    """How many counter events `events` yields."""
    return sum(len(tr[TFLOPS][0]) + len(tr[DRAM][0]) + 2 * len(tr[IDLE][0]) for tr in per_device.values())


def encoded(per_device: dict[int, dict[str, tuple]], cat: str = CAT) -> Iterator[bytes]:
    """The counter events as JSON text, comma-separated, a batch at a time (no leading comma); `cat`: their
    category (the annotation's key: annotate/keys.py)."""
    batch: list[dict] = []
    for ev in events(per_device):
        if cat != CAT:
            ev["cat"] = cat
        batch.append(ev)
        if len(batch) == _BATCH:
            yield _ENC.encode(batch)[1:-1]
            batch = []
    if batch:
        yield _ENC.encode(batch)[1:-1]
