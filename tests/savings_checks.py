"""The rules every analysis keeps about its savings (tests/test_savings_bounded.py applies them to every
shared and recorded trace): each lever names the ledger term it comes from and saves no more than it; levers
of one idle / transfer / copy term add up to at most that term; the plan's span after never drops below the
critical stream's own time; no advice proposes torch.compile or CUDA graphs as new to a run that uses them."""

from __future__ import annotations

import re

import numpy as np

EPS = 1e-6
PARTITIONED = ("idle.sync", "idle.launch_gaps", "idle.host_dispatch", "idle.graph_launch", "idle.stream_wait",
               "idle.no_work", "communication.transfer", "copies")


def critical_stream_us(trace, device: int) -> float:
    """The GPU time of the primary device's busiest stream, from the trace itself (its events run in turn)."""
    gpu = trace.gpu
    m = gpu.device == device
    if not m.any():
        return 0.0
    streams, inv = np.unique(gpu.stream[m], return_inverse=True)
    return float(np.bincount(inv, weights=gpu.dur[m]).max())


def _busy(f: dict) -> float:
    s = f.get("saving_us") or 0.0
    return s - min(max(f.get("idle_us") or 0.0, 0.0), s)


def check(a: dict, trace=None, where: str = "") -> None:
    led = a.get("ledger")
    findings = a["findings"]
    levers = [f for f in findings if f.get("lever")]
    for f in levers:
        src = f.get("source_term")
        assert isinstance(src, dict) and src.get("term"), (where, f["kind"], f["title"])
        if led:
            assert src["us"] is not None and f["saving_us"] <= src["us"] + EPS, (where, f["title"], src)
            assert src["term_us"] is not None and src["us"] <= src["term_us"] + EPS, (where, f["title"], src)
    claimed: dict[str, float] = {}
    for f in levers:
        t = f["source_term"]["term"]
        if t in PARTITIONED:
            claimed[t] = claimed.get(t, 0.0) + f["saving_us"]
    for t, us in claimed.items():
        whole = next(f["source_term"]["term_us"] for f in levers if f["source_term"]["term"] == t)
        assert us <= whole * (1 + 1e-9) + EPS, (where, t, us, whole)
    crit = critical_stream_us(trace, led["device"]) if trace is not None and led else None
    busy_so_far = 0.0
    for p in a["plan"]:
        src = p.get("source_term")
        assert src and src.get("term"), (where, p["title"])
        assert p["saving_us"] <= src["us"] + EPS, (where, p["title"], src)
        assert p["span_after_us"] >= p["floor_us"] - EPS, (where, p["title"])
        busy_so_far += sum(_busy(findings[i]) for i in p["findings"])
        if crit is not None:
            # the span after the levers so far keeps at least the critical stream's own time, less what those
            # levers take out of kernels (each at most its busy part)
            assert p["span_after_us"] >= crit - busy_so_far - 1e-3, (where, p["title"], p["span_after_us"], crit)
        if p.get("step_after_us") is not None:
            floor = p["step_us"] * p["floor_us"] / p["span_now_us"]
            assert floor - EPS <= p["step_after_us"] <= p["step_us"] + EPS, (where, p)
    check_advice(a, where)


_SENT = re.compile(r"(?<=[.!?])\s+")


def check_advice(a: dict, where: str = "") -> None:
    """A run that shows torch.compile / CUDA graphs is told nothing about them without being told it uses them."""
    ctx = a.get("context") or {}
    for f in a["findings"]:
        for field in ("fix", "text"):
            s = f.get(field) or ""
            for on, word in ((ctx.get("compiled"), "torch.compile"), (ctx.get("graph_replay"), "CUDA graph")):
                if on and word in s:  # said in a sentence that says the run already does it
                    assert any("already" in x for x in _SENT.split(s) if word in x), (where, f["kind"], field, s)
