"""Every stage stays linear in the trace: the events each stage visits (traceana/meter.py's counts) grow
in proportion to the trace when a real trace is replicated 1x / 4x / 16x (bench/replicate.py: copies
shifted in time with their own ids, as if the profiler had recorded 16 times as many steps).

A count, not a timing: a stage that scans all events once per item (per stall, per chain, per call)
visits k items x k events at k copies, so its count grows as k^2. The growth exponent b (count ~ k^b)
between 4x and 16x must stay at most MAX_EXPONENT (linear: 1; quadratic: 2). 4x -> 16x rather than
1x -> 16x: a single copy lacks what only copies have (the idle gap between two copies, charged to the
sync call in flight; a different set of largest gaps), which changes a stage's count by a bounded
factor, not its growth.
"""

from __future__ import annotations

import gzip
import json
import math

import pytest

from bench.replicate import replicate
from tests.conftest import shared_trace
from traceana.analysis import analyze
from traceana.meter import Meter

SIZES = (1, 4, 16)
MAX_EXPONENT = 1.25  # log(count(16x) / count(4x)) / log(4): 1 for linear growth, 2 for a scan per item


def _doc(path: str) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _measure(doc: dict, tmp_path, tag: str) -> dict[int, tuple[dict[str, int], dict]]:
    """Per size: (visits per stage, the analysis)."""
    out = {}
    for k in SIZES:
        p = tmp_path / f"{tag}_x{k}.json"
        p.write_text(json.dumps(replicate(doc, k)))
        m = Meter()
        a = analyze(str(p), meter=m)
        out[k] = (dict(m.visits), a)
        p.unlink()
    return out


def _exponent(lo: int, hi: int) -> float:
    return math.log(hi / lo) / math.log(SIZES[2] / SIZES[1])


def _check_linear(res: dict, must_visit: tuple[str, ...]) -> dict[str, float]:
    """Every stage's growth exponent from 4x to 16x; the stages in must_visit did visit events."""
    v1, v4, v16 = (res[k][0] for k in SIZES)
    for st in must_visit:
        assert v4.get(st, 0) > 0, f"stage {st} visited nothing: the trace does not exercise it ({sorted(v4)})"
    # the events loaded grow as the trace: each copy adds the same events (the metadata is written once),
    # so 16x - 1x (15 copies added) = 5 x (4x - 1x) (3 copies added)
    assert v16["load"] - v1["load"] == 5 * (v4["load"] - v1["load"]) > 0
    exps = {}
    for st in sorted(set(v4) | set(v16)):
        lo, hi = v4.get(st, 0), v16.get(st, 0)
        if lo == 0:
            assert hi == 0, f"stage {st}: visited nothing at 4x, {hi} events at 16x"
            continue
        exps[st] = _exponent(lo, hi)
    bad = {st: round(b, 2) for st, b in exps.items() if b > MAX_EXPONENT}
    assert not bad, f"stages whose visits grow faster than the trace (exponent, 1 = linear): {bad}; all: {exps}"
    return exps


def test_gpu_trace_stages_linear(tmp_path):
    """A BERT inference trace from an H100 (Python stacks, memory events, a sync stall, fusion chains)."""
    res = _measure(_doc(shared_trace("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")), tmp_path, "bert")
    exps = _check_linear(res, ("link", "cost", "context", "modules.places", "modules.table", "memory",
                               "diagnose.ledger", "diagnose.stalls", "diagnose.gaps", "diagnose.fusion",
                               "timeline"))
    # the stalls found grow with the copies: every copy's blocking call is found, none scanned per call
    calls = {k: sum(s["count"] for s in res[k][1]["ledger"]["idle"]["stalls"]) for k in SIZES}
    assert calls[16] >= 4 * calls[4] > 0, calls
    assert exps["diagnose.stalls"] <= MAX_EXPONENT


def test_collectives_linear(tmp_path):
    """A distributed recsys step (rank 0 of 2): the collective calls and their matmuls."""
    res = _measure(_doc(shared_trace("hta/sampled_rank-0.json.gz")), tmp_path, "rank")
    _check_linear(res, ("context", "diagnose.ledger", "diagnose.gaps"))
    par = {k: res[k][1]["context"]["evidence"] for k in SIZES}
    assert par[16].keys() == par[1].keys()  # the same parallelism found at every size


def test_recorded_training_linear(tmp_path, recorded_trace):
    """A BERT masked-LM training step recorded on CPU (eager attention, with_stack, profile_memory), shaped
    as a CUDA run: unfused attention chains forward and backward, backward ops placed through their
    forward's sequence number, the allocator's events."""
    res = _measure(_doc(recorded_trace.train_step_gpu()), tmp_path, "train")
    _check_linear(res, ("diagnose.attention", "diagnose.fusion", "modules.places", "memory", "diagnose.memory"))
    att = {k: [f for f in res[k][1]["findings"] if f.get("group") == "attention"] for k in SIZES}
    assert att[1], "the recorded step has unfused attention (eager BERT)"
    # every copy's chains are found: the same findings, each 16 times the time at 16 copies
    assert len(att[16]) == len(att[1])
    for a, b in zip(att[1], att[16]):
        assert b["saving_us"] == pytest.approx(16 * a["saving_us"], rel=1e-6)
