"""The post-load stages' fast paths give exactly what their plain versions give.

Link's op parents (pointer jumping) against the stack sweep; fusion's chains (per-signature facts
looked up, sums vectorised) against a plain per-occurrence implementation on real traces; the
array helpers against numpy. Equal means equal: the same floats bit for bit, so reports stay
byte-identical.
"""

from __future__ import annotations

from math import prod
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import shared_trace
from traceana.analysis import analyze
from traceana.arrays import distinct, median
from traceana.diagnose import attention, fusion
from traceana.diagnose.dataflow import REDUCTIONS, Flow, breaks, dense, feeds, fills_out_buffer, in_place, output, \
    reads, short
from traceana.link.attribute import CAUSE_KEYS, _innermost, _parents, _parents_sweep, link
from traceana.load import load_trace
from traceana.render.json_out import to_json_safe
from traceana.render.timeline import _column
from traceana.link.signatures import BY_KERNEL, group_ops
from traceana.units import num


def _sorted_ops(rng: np.random.Generator, n: int, threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random ops sorted as link sorts them (thread, start, longest first): ties, zero lengths,
    overlaps that do not nest; lo[i] = start of op i's thread run."""
    th = rng.integers(0, threads, n)
    ts = rng.integers(0, 200, n).astype(float)
    end = ts + rng.integers(0, 60, n) * (rng.random(n) < 0.9)
    o = np.lexsort((-end, ts, th))
    th, ts, end = th[o], ts[o], end[o]
    cut = np.flatnonzero(np.diff(th)) + 1
    starts, stops = np.concatenate(([0], cut)), np.concatenate((cut, [n]))
    return ts, end, np.repeat(starts, stops - starts)


def test_op_parents_match_the_stack_sweep():
    rng = np.random.default_rng(5)
    for _ in range(300):
        ts, end, lo = _sorted_ops(rng, int(rng.integers(1, 300)), int(rng.integers(1, 4)))
        assert np.array_equal(_parents(ts, end, lo), _parents_sweep(ts, end, lo))


def test_op_parents_deep_nesting_and_the_fallback():
    # 2,000 ops each inside the one before: every parent is the previous op (one round)
    n = 2000
    ts, end = np.arange(n, dtype=float), 2.0 * n - np.arange(n)
    lo = np.zeros(n, dtype=np.int64)
    par = _parents(ts, end, lo)
    assert par[0] == -1 and (par[1:] == np.arange(n - 1)).all()
    # 600 nested ops, op i spanning [i, 2000 - i], then one at [1900, 1950]: ops 0..99 end after 1900,
    # so its parent is op 99; from op 599 it climbs 500 levels, one per round, past the 256-round cap,
    # and the stack sweep finishes the job
    ts = np.append(np.arange(600, dtype=float), 1900.0)
    end = np.append(2000.0 - np.arange(600), 1950.0)
    lo = np.zeros(601, dtype=np.int64)
    par = _parents(ts, end, lo)
    assert par[600] == 99
    assert np.array_equal(par, _parents_sweep(ts, end, lo))


def test_chain_sums_round_as_numpy_does():
    """Per chain seq[i..j]: summed time, longest op, idle between kernels, as t[i:j + 1].sum() etc. give
    them (numpy adds fewer than 8 values one by one, more pairwise: both kinds of chain occur here)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(3, 300))
        t = rng.random(n) * rng.choice([1.0, 1e3, 1e7])
        ok = rng.random(n - 1) < 0.8
        edges = np.diff(np.concatenate(([0], ok.astype(np.int8), [0])))
        starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        start = np.sort(rng.random(n) * 1e4)
        end = start + rng.random(n) * 50
        total, longest, gap = fusion._chain_sums(t, start, end, starts, stops)
        for c, (i, j) in enumerate(zip(starts.tolist(), stops.tolist())):
            assert total[c] == float(t[i:j + 1].copy().sum())
            assert longest[c] == float(t[i:j + 1].max())
            assert gap[c] == float(np.clip(start[i + 1:j + 1] - end[i:j], 0, None).sum())


def test_distinct_and_median_are_numpys():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 60))
        x = rng.integers(-5, 10 ** int(rng.integers(1, 7)), n)
        assert np.array_equal(distinct(x), np.unique(x)) and distinct(x).dtype == x.dtype
        f = rng.random(n) * 1e6
        assert median(f) == float(np.median(f))
    assert distinct(np.array([3, 1, 3, 2, 1])).tolist() == [1, 2, 3]
    assert median(np.array([4.0, 1.0, 2.0, 3.0])) == 2.5  # (2 + 3) / 2
    assert len(distinct(np.zeros(0, dtype=np.int32))) == 0


_ODD_COLUMNS = [[1, 2.5, 3], [1, 2, 3], [1.0, float("nan")], [10 ** 400, 1.0], [True, 1], [2 ** 60, 1], [1.5, 2.5],
                [], [-0.0, 0], [2 ** 53 + 1, 3], "x", None, (1, 2.0), [float("inf")], ["a", None, 3, False]]


def test_number_columns_take_the_fast_path_to_the_same_values():
    """The timeline's columns and the JSON sanitiser skip the per-value calls for plain numbers, and
    give what the per-value path gives (types included: 3 in a float column is 3.0)."""
    def plain_column(v, integer):
        out = []
        for x in (list(v) if isinstance(v, (list, tuple)) else []):
            f = num(x)
            if f is None:
                return None
            out.append(int(f) if integer else f)
        return out

    for c in _ODD_COLUMNS:
        for integer in (False, True):
            assert repr(_column(c, None, integer)) == repr(plain_column(c, integer)), (c, integer)
        safe = to_json_safe(c)
        assert repr(safe) == repr([to_json_safe(x) for x in c] if isinstance(c, (list, tuple)) else to_json_safe(c))
    assert _column([1, 2.5], None, False) == [1.0, 2.5] and type(_column([1, 2.5], None, False)[0]) is float
    assert to_json_safe([1.0, float("nan"), 2]) == [1.0, None, 2]


# ----------------------------------------------------------------------------- chains, the plain way
# What fusion.chains computed before its per-signature facts were cached: every occurrence
# re-derives them from dataflow's rules, every sum is numpy's own.


def _ref_parent_names(trace, idx):
    ops = trace.ops
    order = np.lexsort((-ops.end, ops.ts, ops.thread))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    out = {}
    for i in idx:
        for k in range(rank[i] - 1, max(rank[i] - 17, -1), -1):
            j = order[k]
            if ops.thread[j] != ops.thread[i]:
                break
            if ops.ts[j] <= ops.ts[i] and ops.end[j] >= ops.end[i]:
                out[i] = trace.names[ops.name[j]]
                break
    return out


def _ref_pair(a, b):
    f = feeds(a, b)
    if f is None or fills_out_buffer(a, b):
        return None
    if prod(f[0]) <= 1 and short(a["name"]) not in REDUCTIONS:
        return None
    t = output(a)
    return tuple(i for i, _, _ in reads(b, t)) if t else None


def _ref_linked(trace, rows, seq, oe):
    ops = trace.ops
    r = oe["row"][seq]
    cand = np.array([x.get("bound") in fusion.FUSABLE_BOUNDS and x.get("bytes") is not None
                     and not x.get("opaque") and breaks(x) is None for x in rows], dtype=bool)
    st, th = oe["stream"][seq], ops.thread[seq]
    pre = ((th[1:] == th[:-1]) & (st[1:] == st[:-1]) & (st[1:] >= 0) & cand[r[:-1]] & cand[r[1:]]
           & (oe["first"][seq][1:] == oe["last"][seq][:-1] + 1) & (r[1:] != r[:-1]))
    ok = np.zeros(len(pre), dtype=bool)
    inlink = np.zeros(len(seq), dtype=bool)
    cache: dict = {}
    multi = len(np.unique(th)) > 1
    ts = ops.ts[seq]
    by_ts = np.argsort(ts, kind="stable")
    sig = [(int(x), ops.strides[int(o)]) for x, o in zip(r.tolist(), seq.tolist())]
    for i in np.flatnonzero(pre).tolist():
        a, b = int(r[i]), int(r[i + 1])
        args = _ref_pair(rows[a], rows[b])
        if not args:
            continue
        back = next((j for j in range(i, max(i - fusion.REPEAT_WINDOW, -1), -1)
                     if th[j] == th[i] and sig[j] == sig[i + 1]), None)
        if back is not None and not inlink[back]:
            continue
        if i + 2 < len(seq) and th[i + 2] == th[i] and sig[i + 2] == sig[i + 1]:
            continue
        if not in_place(rows[a]["name"]):
            st_b = fusion._strides(ops.strides[int(seq[i + 1])], cache)
            if isinstance(st_b, list) and not any(k < len(st_b) and dense(tuple(rows[b]["input_dims"][k]), st_b[k])
                                                  for k in args):
                continue
        if multi:
            t = output(rows[a])
            s_ts = ts[by_ts]
            lo, hi = np.searchsorted(s_ts, ts[i], "right"), np.searchsorted(s_ts, ts[i + 1], "left")
            if any(th[k] != th[i] and t is not None and reads(rows[int(r[k])], t) for k in by_ts[lo:hi].tolist()):
                continue
        ok[i] = inlink[i + 1] = True
    return ok


def _ref_neighbour(rows, r, th, i, j):
    if not 0 <= j < len(r) or th[j] != th[i] or r[j] < 0:
        return None
    a, b = (i, j) if j > i else (j, i)
    why = breaks(rows[int(r[j])])
    return why if why and feeds(rows[int(r[a])], rows[int(r[b])]) is not None else None


def _ref_chains(trace, links, ev_row, rows):
    ops = trace.ops
    oe = fusion._op_events(trace, links, ev_row)
    owned = np.flatnonzero(oe["row"] >= 0)
    seq = owned[np.lexsort((ops.ts[owned], ops.thread[owned]))]
    r, th = oe["row"][seq], ops.thread[seq]
    # unfused attention claims its ops first (diagnose/attention.py: one implementation, tests/test_attention.py)
    _, claimed = attention.find(trace, Flow(rows), seq, r, th, oe, links.op_device_us)
    ok = _ref_linked(trace, rows, seq, oe) & ~claimed[:-1] & ~claimed[1:]
    edges = np.diff(np.concatenate(([0], ok.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    copies = [int(seq[k]) for i, j in zip(starts.tolist(), stops.tolist()) for k in range(i, j)
              if short(rows[int(r[k])]["name"]) == "copy_"]
    parent = _ref_parent_names(trace, copies)
    groups: dict = {}
    for i, j in zip(starts.tolist(), stops.tolist()):
        idx = seq[i:j + 1]
        key = tuple(r[i:j + 1].tolist())
        inter = [feeds(rows[key[k]], rows[key[k + 1]]) for k in range(len(key) - 1)]
        fresh = [not in_place(rows[key[k]]["name"]) or parent.get(int(idx[k]), "") in fusion._FRESH_COPY_PARENTS
                 for k in range(len(key) - 1)]
        t = links.op_device_us[idx]
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"rows": key, "count": 0, "time_us": 0.0, "saved_bytes": 0.0, "links": inter,
                               "fresh": fresh, "launch_saved_us": 0.0, "gap_us": 0.0,
                               "kernels": int(sum(rows[k]["kernel_count"] for k in key) + 0.5),
                               "before": _ref_neighbour(rows, r, th, i, i - 1),
                               "after": _ref_neighbour(rows, r, th, j, j + 1)}
        g["count"] += 1
        g["time_us"] += float(t.sum())
        g["saved_bytes"] += float(sum(prod(s) * isz * (2 if f else 1) for (s, isz), f in zip(inter, fresh)))
        g["launch_saved_us"] += float(t.sum() - t.max())
        g["gap_us"] += float(np.clip(oe["start"][idx][1:] - oe["end"][idx][:-1], 0, None).sum())
    return groups


@pytest.mark.parametrize("rel", ["tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
                                 "hta/control.json.gz", "tracelens/mi300/resnet_act_checkpoint.json.gz",
                                 "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
def test_chains_equal_the_plain_implementation(rel, monkeypatch):
    path = shared_trace(rel)
    seen = {}
    real = fusion.chains

    def spy(trace, links, ev_row, rows, *rest):
        seen["args"] = (trace, links, ev_row, rows)
        seen["out"] = real(trace, links, ev_row, rows, *rest)
        return seen["out"]

    monkeypatch.setattr(fusion, "chains", spy)
    analyze(path)
    groups = _ref_chains(*seen["args"])
    fast = {tuple(g["rows"]): g for g in seen["out"] if not g.get("attention")}
    assert fast.keys() == groups.keys()
    for key, g in groups.items():
        for k, v in g.items():
            assert fast[key][k] == v, (key, k)
            assert type(fast[key][k]) is type(v), (key, k)
    assert len(groups) > 0  # each of these traces has chains


# ----------------------------------------------------------------------------- opaque groups, the plain way


def _ref_opaque(trace, links):
    """(cause, name) -> [calls, events] in order of first appearance, one event at a time: a graph replay's
    or compiled region's event under its kernel name (one call each), any other under its op's name (calls:
    op instances), else its kernel's (calls: launches, or events)."""
    names, out, seen = trace.names, {}, {}
    for j in np.flatnonzero(links.gpu_cause >= 0).tolist():
        c, o, la = CAUSE_KEYS[links.gpu_cause[j]], int(links.gpu_op[j]), int(links.gpu_launch[j])
        if c in BY_KERNEL:
            nm, call = names[trace.gpu.name[j]], ("e", j)
        elif o >= 0:
            nm, call = names[trace.ops.name[o]], ("o", o)
        else:
            nm, call = names[trace.gpu.name[j]], ("l", la) if la >= 0 else ("e", j)
        out.setdefault((c, nm), []).append(j)
        seen.setdefault((c, nm), set()).add(call)
    return {k: (len(seen[k]), ev) for k, ev in out.items()}


@pytest.mark.parametrize("rel", ["hta/df_index_resolver.json.gz", "tracelens/vllm_piecewise/graph_execution.json.gz",
                                 "hta/test.json.gz", "tracelens/mi210/gpu_only_trace.json.gz"])
def test_opaque_groups_equal_the_plain_grouping(rel):
    trace = load_trace(shared_trace(rel))
    links = link(trace)
    want = _ref_opaque(trace, links)
    got = [g for g in group_ops(trace, links) if g.cause is not None]
    assert len(want) > 0
    assert [(g.cause, g.name) for g in got] == list(want)  # the same groups, in order of first appearance
    for g in got:
        calls, events = want[(g.cause, g.name)]
        assert g.count == calls and g.events.tolist() == events


class _Cols(SimpleNamespace):
    """Columns of a few events (ts, end, thread), as Trace.ops / Trace.launches hold them."""

    def __len__(self) -> int:
        return len(self.ts)


def _ref_innermost(ops, la):
    """Launch -> innermost enclosing op, one thread at a time with the stack sweep's parents."""
    result = np.full(len(la.ts), -1, dtype=np.int64)
    order = np.lexsort((-ops.end, ops.ts, ops.thread))
    o_th, o_ts, o_end = ops.thread[order], ops.ts[order], ops.end[order]
    cut = np.flatnonzero(np.diff(o_th)) + 1
    starts, stops = np.concatenate(([0], cut)), np.concatenate((cut, [len(order)]))
    parent = _parents_sweep(o_ts, o_end, np.repeat(starts, stops - starts))
    for lo, hi in zip(starts.tolist(), stops.tolist()):
        sel = np.flatnonzero(la.thread == o_th[lo])
        for k in sel.tolist():
            c = int(np.searchsorted(o_ts[lo:hi], la.ts[k], side="right")) - 1 + lo
            c = -1 if c < lo else c
            while c >= 0 and o_end[c] < la.ts[k]:
                c = int(parent[c])
            result[k] = order[c] if c >= 0 else -1
    return result


def test_launches_find_their_innermost_op_on_their_thread():
    rng = np.random.default_rng(11)
    for _ in range(100):
        n, m = int(rng.integers(1, 200)), int(rng.integers(1, 100))
        ts = rng.integers(0, 300, n).astype(float)
        ops = _Cols(thread=rng.integers(0, 5, n).astype(np.int32), ts=ts,
                              end=ts + rng.integers(0, 80, n))
        la = _Cols(thread=rng.integers(0, 6, m).astype(np.int32),  # thread 5 has no ops
                             ts=rng.integers(0, 400, m).astype(float))
        assert np.array_equal(_innermost(SimpleNamespace(ops=ops, launches=la)), _ref_innermost(ops, la))
