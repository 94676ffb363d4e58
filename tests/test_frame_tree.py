"""The Python call tree's pointer passes (traceana/modules/frame_tree.py) give the same answers on their
fast paths as on the general ones: parent_index by a table of ids (ids counted up from 0 or 1, as the
profiler numbers calls) and by a search (ids out of order or far apart); nearest_at (a walk up from the
frames asked about) and nearest (pointer doubling over every frame), including the walk's hand-over to
the doubling when chains are long and unflagged; the innermost enclosing frame of an op on each way of
pairing threads. By hand, then on a real trace's call tree."""

from __future__ import annotations

import numpy as np

from tests.conftest import shared_trace
from traceana.load.model import PyFrames
from traceana.modules import frame_tree
from traceana.modules.frame_tree import cut_cycles, nearest, nearest_at, parent_index


def _frames(ids, parents, thread, ts) -> PyFrames:
    n = len(ids)
    return PyFrames(name=np.zeros(n, dtype=np.int32), thread=np.asarray(thread, dtype=np.int32),
                    ts=np.asarray(ts, dtype=np.float64), end=np.asarray(ts, dtype=np.float64) + 100,
                    py_id=np.asarray(ids, dtype=np.int64), parent=np.asarray(parents, dtype=np.int64),
                    module_id=np.full(n, -1, dtype=np.int64))


# frame:            0   1  2  3  4   5   6
IDS = np.array([1, 2, 3, 4, 5, 6, 7])
PARENTS = np.array([-1, 1, 2, 2, 9, 2, 1])  # frame 4 names id 9 (not recorded)
THREAD = np.array([0, 0, 0, 0, 0, 1, 0])  # frame 5 is on another thread than its parent (frame 1)
TS = np.array([0, 1, 2, 3, 4, 5, -1])  # frame 6 starts before its parent (frame 0)
# frame 1's parent is id 1 = frame 0; frames 2 and 3: id 2 = frame 1; 4: id 9 missing; 5: another thread;
# 6: starts before id 1 does
WANT = [-1, 0, 1, 1, -1, -1, -1]


def test_parent_index_by_table():
    assert parent_index(_frames(IDS, PARENTS, THREAD, TS)).tolist() == WANT


def test_parent_index_by_search_gives_the_same():
    # ids 1,000 apart: the largest, 7,000, is above 3 x 7 frames + 1,024 = 1,045, so no table: the search
    far = _frames(IDS * 1000, np.where(PARENTS > 0, PARENTS * 1000, -1), THREAD, TS)
    assert parent_index(far).tolist() == WANT
    # recorded out of id order: frames reversed, so frame i is old frame 6 - i
    rev = _frames(IDS[::-1], PARENTS[::-1], THREAD[::-1], TS[::-1])
    assert parent_index(rev).tolist() == [6 - p if p >= 0 else -1 for p in WANT[::-1]]
    # some frames without an id (-1): they are nobody's parent
    part = _frames(np.where(np.arange(7) == 1, -1, IDS), PARENTS, THREAD, TS)
    # frames 2, 3 and 5 named id 2, frame 1's, now unrecorded
    assert parent_index(part).tolist() == [-1, 0, -1, -1, -1, -1, -1]


def test_cut_cycles_keeps_a_tree_recorded_parents_first():
    par = np.array([-1, 0, 1, 1, 0])
    same, cut = cut_cycles(par)
    assert same.tolist() == [-1, 0, 1, 1, 0] and not len(cut)


def test_nearest_at_by_hand():
    # a chain 0-1-2-3-4 and a branch 0-5-6; frames 1 and 5 flagged
    up = np.array([-1, 0, 1, 2, 3, 0, 5])
    flag = np.zeros(7, dtype=bool)
    flag[[1, 5]] = True
    # 4 -> 3 -> 2 -> 1 (flagged); 6 -> 5; 3 -> 2 -> 1; 0: nothing above it; 1 itself
    assert nearest_at(up, flag, np.array([4, 6, 3, 0, 1])).tolist() == [1, 5, 1, -1, 1]
    assert nearest(up, flag)[[4, 6, 3, 0, 1]].tolist() == [1, 5, 1, -1, 1]


def test_nearest_at_hands_long_walks_to_the_doubling(monkeypatch):
    """A chain of 1,000 frames flagged only at the top: asked about every frame, the walks would take
    0 + 1 + ... + 999 = 499,500 steps; past 2 x 1,000 + 1,000 = 3,000 the doubling answers the rest."""
    n = 1000
    up = np.arange(-1, n - 1)
    flag = np.zeros(n, dtype=bool)
    flag[0] = True
    calls = []
    real = frame_tree.nearest
    monkeypatch.setattr(frame_tree, "nearest", lambda p, f: calls.append(1) or real(p, f))
    assert (nearest_at(up, flag, np.arange(n)) == 0).all()
    assert len(calls) == 1
    # one walk from the bottom: 999 steps, within the budget (2 x 1,000 + 1 = 2,001)
    assert nearest_at(up, flag, np.array([n - 1])).tolist() == [0]
    assert len(calls) == 1


def test_fast_paths_agree_on_a_recorded_call_tree():
    """BERT-small's python_function events (with_stack=True on an H100): the table and the search find
    the same parents, and the walk the same nearest module / user frames as the doubling, at every frame."""
    from traceana.load import load_trace
    from traceana.modules.frames import module_name, parse_frame

    trace = load_trace(shared_trace("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"))
    py = trace.python
    assert len(py) > 1000
    par = parent_index(py)
    spread = PyFrames(name=py.name, thread=py.thread, ts=py.ts, end=py.end, module_id=py.module_id,
                      py_id=np.where(py.py_id >= 0, py.py_id * 7, -1),
                      parent=np.where(py.parent >= 0, py.parent * 7, -1))
    assert spread.py_id.max() > 3 * len(py) + 1024  # ids 7 apart: too far for the table, the search
    assert np.array_equal(parent_index(spread), par)
    assert (par >= 0).sum() > 0.9 * len(py)
    is_mod = np.array([module_name(n) is not None for n in trace.names])[py.name]
    is_user = np.array([(f := parse_frame(n)) is not None and f.user for n in trace.names])[py.name]
    every = np.arange(len(py))
    for flag in (is_mod, is_user):
        assert flag.any()
        assert np.array_equal(nearest_at(par, flag, every), nearest(par, flag))


def test_innermost_enclosing_interval_per_thread():
    """attribute._innermost on each way of pairing threads (one on either side, a few, many). Per thread k:
    A = [0, 100] (a root), B = [10, 50] inside A; queries [20, 30] -> B, [60, 70] -> A (B, the last to
    start, ended at 50: climbed to its parent), [200, 210] -> none open (A ended at 100; A is a root)."""
    from traceana.modules.attribute import _innermost

    def case(iv_threads, q_threads):
        th, ts, end, par = [], [], [], []
        for k in iv_threads:
            a = len(th)
            th += [k, k]
            ts += [0.0, 10.0]
            end += [100.0, 50.0]
            par += [-1, a]
        qth, qts, qend = [], [], []
        for k in q_threads:
            qth += [k, k, k]
            qts += [20.0, 60.0, 200.0]
            qend += [30.0, 70.0, 210.0]
        got = _innermost(np.array(th, dtype=np.int32), np.array(ts), np.array(end), np.array(par),
                         np.array(qth, dtype=np.int32), np.array(qts), np.array(qend))
        want = []
        for k in q_threads:
            if k in iv_threads:
                a = 2 * iv_threads.index(k)
                want += [a + 1, a, -1]  # B, A, none
            else:
                want += [-1, -1, -1]  # no interval on the query's thread
        assert got.tolist() == want, (iv_threads, q_threads)

    case([0], [0])  # one thread each side
    case([0], [1, 0])  # one interval thread
    case([2, 0], [0])  # one query thread
    case([0, 1, 2], [2, 1, 3])  # a few on both sides
    case(list(range(7)), [6, 5, 4, 3, 2, 1, 0, 9])  # more than four on both: a sort by thread
