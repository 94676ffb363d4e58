"""Work done once and reused gives exactly what doing it each time gives.

The link stage's op nesting (link/nesting.py) against a fresh lexsort and stack sweep; the column codes
(arrays.codes_of, first_codes) against a dict of the values; the sync stalls' calls described all at once
(stalls.describe_calls) against one call at a time, as stalls.py described them before; unfused attention's
search reused for an identical neighbourhood (attention._Seen) against a search at every softmax. On real
traces, and on a recorded training step replicated (the copies are what the reuse meets).
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from bench.replicate import replicate
from tests.conftest import shared_trace
from traceana.analysis import analyze
from traceana.arrays import codes_of, distinct, first_codes
from traceana.diagnose import attention, fusion, run
from traceana.diagnose.dataflow import Flow
from traceana.diagnose.stalls import EPS_US, _Calls, describe_calls
from traceana.link.attribute import _parents_sweep, link
from traceana.link.copies import classify
from traceana.link.nesting import nest_order, nesting_of, op_nesting
from traceana.load import load_trace
from traceana.load.model import CpuOps

OWL = "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"


def test_nest_order_is_the_lexsort():
    """None exactly when the columns already are in (thread, start, longest first) order, else the lexsort."""
    rng = np.random.default_rng(7)
    for k in range(400):
        n = int(rng.integers(0, 80))
        th = rng.integers(0, 3, n).astype(np.int32)
        ts = rng.integers(0, 30, n).astype(float)
        end = ts + rng.integers(0, 10, n)
        want = np.lexsort((-end, ts, th))
        if k % 2:  # half of them given in that order already (ties included)
            th, ts, end = th[want], ts[want], end[want]
            want = np.lexsort((-end, ts, th))
        got = nest_order(th, ts, end)
        if got is None:
            assert np.array_equal(want, np.arange(n))
        else:
            assert np.array_equal(got, want) and not np.array_equal(want, np.arange(n))
    assert nest_order(np.zeros(2, np.int32), np.array([1.0, 1.0]), np.array([2.0, 3.0])).tolist() == [1, 0]
    assert nest_order(np.zeros(2, np.int32), np.array([1.0, np.nan]), np.array([2.0, 3.0])) is not None


def test_op_nesting_is_the_sorted_stack_sweep():
    rng = np.random.default_rng(8)
    for _ in range(100):
        n = int(rng.integers(1, 150))
        cols = type("Cols", (), {})()
        cols.thread = rng.integers(0, 4, n).astype(np.int32)
        cols.ts = rng.integers(0, 100, n).astype(float)
        cols.end = cols.ts + rng.integers(0, 40, n)
        nest = op_nesting(cols)
        order = np.lexsort((-cols.end, cols.ts, cols.thread))
        assert np.array_equal(nest.order, order)
        assert np.array_equal(nest.pos()[order], np.arange(n))
        lo = nest.lo()
        assert np.array_equal(nest.parent, _parents_sweep(cols.ts[order], cols.end[order], lo))
        assert (cols.thread[order][lo] == cols.thread[order]).all()


def test_the_links_nesting_serves_only_its_own_ops():
    trace = load_trace(shared_trace("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"))
    links = link(trace)
    assert nesting_of(trace, links) is links.nesting and links.nesting.ops is trace.ops
    ops = trace.ops
    other = CpuOps(ops.name, ops.thread, ops.ts + 1.0, ops.end + 1.0, ops.ext, ops.dims, ops.types, ops.strides,
                   ops.concrete, ops.kernel_flop, ops.kernel_num_gb)
    fresh = nesting_of(type("T", (), {"ops": other})(), links)  # a trace whose ops are not the linked ones
    assert fresh is not links.nesting and fresh.ops is other
    assert np.array_equal(fresh.ts, links.nesting.ts + 1.0) and np.array_equal(fresh.parent, links.nesting.parent)


def test_column_codes_number_equal_values_alike():
    a, b = b"[[2, 3]]", b"[[4]]"
    twin = bytes(bytearray(a))  # equal to a, another object
    values = [b, a, twin, b"", b, a, (1, 2), (1, 2)]
    code, distinct_values = codes_of(values, np.arange(len(values)))
    assert code.tolist() == [0, 1, 1, 2, 0, 1, 3, 3]  # by first appearance: b, a (= twin), b"", (1, 2)
    assert distinct_values == [b, a, b"", (1, 2)]
    code, _ = codes_of(values, np.array([5, 0, 2]))
    assert code.tolist() == [0, 1, 0]
    rng = np.random.default_rng(9)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        cols = [rng.integers(0, int(rng.integers(1, 5)), n) for _ in range(int(rng.integers(1, 4)))]
        got, first = first_codes(*cols)
        keys: dict = {}
        want = [keys.setdefault(row, len(keys)) for row in zip(*(c.tolist() for c in cols))]
        assert got.tolist() == want
        assert first.tolist() == [want.index(k) for k in range(len(keys))]


# ----------------------------------------------------------------------------- sync stalls, one call at a time


class _RefNesting:
    """Intervals of each thread by (start, longest first), parents from the stack sweep (their own sort)."""

    def __init__(self, thread, ts, end, keep):
        idx = np.flatnonzero(keep)
        self.order = idx[np.lexsort((-end[idx], ts[idx], thread[idx]))]
        self.th, self.ts, self.end = thread[self.order], ts[self.order], end[self.order]
        cut = np.flatnonzero(np.diff(self.th)) + 1
        starts, stops = np.concatenate(([0], cut)), np.concatenate((cut, [len(self.order)]))
        self.parent = _parents_sweep(self.ts, self.end, np.repeat(starts, stops - starts)) \
            if len(self.order) else self.order

    def enclosing(self, th, t0, t1):
        """Innermost first: the climb from the last interval of the thread started by t0."""
        on = np.flatnonzero(self.th == th)
        if not len(on):
            return []
        lo, hi = int(on[0]), int(on[-1]) + 1
        c = lo + int(np.searchsorted(self.ts[lo:hi], t0 + EPS_US, "right")) - 1
        out = []
        while c >= lo:
            if self.end[c] >= t1 - EPS_US:
                out.append(int(self.order[c]))
            c = int(self.parent[c])
        return out


def _ref_describe(trace, links, ev_row, rows, call, ops_nest, ann_nest):
    """One blocking call described as stalls.py did, a call at a time: a climb up the ops and annotations
    enclosing it, its first memcpy, the rows its op launched."""
    names, la, gpu, ops, ann = trace.names, trace.launches, trace.gpu, trace.ops, trace.annotations
    direction = memory = None
    for e in np.flatnonzero(links.gpu_launch == call).tolist():
        if gpu.kind[e] == 1:
            direction, memory = classify(names[int(gpu.name[e])])
            break
    th, ts, end = int(la.thread[call]), float(la.ts[call]), float(la.end[call])
    chain = ops_nest.enclosing(th, ts, end)[::-1]
    anns = ann_nest.enclosing(th, ts, end)
    op = -1
    for i in reversed(chain):
        if names[int(ops.name[i])].startswith("aten::"):
            op = i
        elif op >= 0:
            break
    ids = []
    if op >= 0:
        near = np.flatnonzero((la.thread == th) & (la.ts >= ops.ts[op]) & (la.ts <= ops.end[op]))
        ev = np.flatnonzero(np.isin(links.gpu_launch, near))
        for r in distinct(ev_row[ev]).tolist():
            if r >= 0 and rows[r]["id"] not in ids:
                ids.append(rows[r]["id"])
    label = names[int(la.name[call])]
    if direction:
        label += f" ({direction}{', ' + memory + ' memory' if memory else ''}, host-synchronous)"
    return {"call": names[int(la.name[call])], "label": label, "direction": direction, "memory": memory,
            "op": names[int(ops.name[op])] if op >= 0 else None,
            "annotation": names[int(ann.name[anns[0]])] if anns else None, "ops": ids[:10],
            "blocked_us": float(la.end[call] - la.ts[call])}


@pytest.mark.parametrize("rel", [OWL, "hta/rank0.json.gz", "hta/sampled_rank-0.json.gz",
                                 "tracelens/sglang/sglang_Qwen3-8B_prefilldecode.json.gz"])
def test_stalls_described_at_once_as_one_at_a_time(rel, monkeypatch):
    seen = {}
    real = run.stalls

    def spy(trace, links, acc, ev_row, rows, steps, meter):
        seen["args"] = (trace, links, acc, ev_row, rows)
        return real(trace, links, acc, ev_row, rows, steps, meter)

    monkeypatch.setattr(run, "stalls", spy)
    analyze(shared_trace(rel))
    trace, links, acc, ev_row, rows = seen["args"]
    stalled = distinct(acc.gap_sync_call[acc.gap_sync_us > 0])
    assert len(stalled) > 0  # each of these traces has sync stalls
    # the stalled calls, and every 7th launch besides (calls inside ops, annotations, copies, none)
    calls = distinct(np.concatenate((stalled, np.arange(0, len(trace.launches), 7)))).astype(np.int64)[:1500]
    got = describe_calls(trace, links, ev_row, rows, calls, _Calls(trace, links))
    ops, ann = trace.ops, trace.annotations
    step = np.array([n.startswith("ProfilerStep#") for n in trace.names], dtype=bool)
    ops_nest = _RefNesting(ops.thread, ops.ts, ops.end, np.ones(len(ops), dtype=bool))
    ann_nest = _RefNesting(ann.thread, ann.ts, ann.end, ~step[ann.name] if len(ann) else np.zeros(0, bool))
    want = [_ref_describe(trace, links, ev_row, rows, c, ops_nest, ann_nest) for c in calls.tolist()]
    assert got == want
    assert any(d["op"] for d in want) and any(d["ops"] for d in want)


# ----------------------------------------------------------------------------- attention, a search per softmax


def _ref_find(trace, flow, seq, r, th, oe, op_us):
    """attention.find as it was: _chain at every softmax, one _Seq (and its walks' answers) for all."""
    claimed = np.zeros(len(seq), dtype=bool)
    q = attention._Seq(flow, seq, r, th, oe["stream"][seq], trace.ops.strides)
    centre = np.array([n in attention.SOFTMAX_FWD or n in attention.SOFTMAX_BWD for n in q.names], dtype=bool)
    at = np.flatnonzero((r >= 0) & centre[np.maximum(r, 0)])
    inside = attention._inside_fused(trace, seq[at])
    fused_p = {attention._first_tensor(flow.args(int(r[c]))) for c in at[inside].tolist()
               if q.name(c) in attention.SOFTMAX_FWD}
    groups: dict = {}
    for c in at[~inside].tolist():
        if claimed[c] or (q.name(c) in attention.SOFTMAX_BWD
                          and attention._first_tensor(flow.args(int(r[c])), 1) in fused_p):
            continue
        hit = attention._chain(q, c, claimed)
        if hit is None:
            continue
        positions, facts = hit
        claimed[positions] = True
        key = tuple(int(r[p]) for p in positions)
        g = groups.setdefault(key, {"rows": key, "count": 0, "time_us": 0.0, **facts})
        g["count"] += 1
        g["time_us"] += float(sum(op_us[seq[p]] for p in positions))
    return list(groups.values()), claimed


def _find_both(path, monkeypatch):
    seen = {}
    real = fusion.chains

    def spy(trace, links, ev_row, rows, *rest):
        seen["args"] = (trace, links, ev_row, rows)
        return real(trace, links, ev_row, rows, *rest)

    monkeypatch.setattr(fusion, "chains", spy)
    analyze(path)
    trace, links, ev_row, rows = seen["args"]
    ops = trace.ops
    oe = fusion._op_events(trace, links, ev_row)
    owned = np.flatnonzero(oe["row"] >= 0)
    seq = owned[np.lexsort((ops.ts[owned], ops.thread[owned]))]
    r, th = oe["row"][seq], ops.thread[seq]
    args = (trace, Flow(rows), seq, r, th, oe, links.op_device_us)
    return attention.find(*args), _ref_find(*args)


def test_attention_reused_as_searched_at_every_softmax(monkeypatch):
    (got, claimed), (want, want_claimed) = _find_both(shared_trace(OWL), monkeypatch)
    assert got == want and np.array_equal(claimed, want_claimed)
    assert sum(g["count"] for g in want) > 100  # OWLv2's eager attention: every layer's


def test_attention_reused_across_copies_of_a_training_step(tmp_path, recorded_trace, monkeypatch):
    """Forward and backward chains (the backward's extra GEMMs, the forward's copies), in 3 copies of a step."""
    with gzip.open(recorded_trace.train_step_gpu(), "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    path = tmp_path / "x3.json"
    path.write_text(json.dumps(replicate(doc, 3)))
    (got, claimed), (want, want_claimed) = _find_both(str(path), monkeypatch)
    assert got == want and np.array_equal(claimed, want_claimed)
    assert {g["backward"] for g in want} == {False, True}
    assert all(g["count"] % 3 == 0 for g in want)  # each copy's chains found
