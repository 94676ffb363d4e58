"""The Python call tree of a with_stack=True trace as parent pointers (numpy, no recursion on the
trace's depth): each frame's parent from its ids, cycles cut, the nearest flagged ancestor, depths and
k-th ancestors, each by pointer doubling in about log2(depth) rounds. Pure.
"""

from __future__ import annotations

import numpy as np


def parent_index(py) -> np.ndarray:
    """Each frame's parent frame (index), from "Python parent id" -> "Python id"; -1 for a root. A parent
    that is not found, is on another thread or starts after its child makes the frame a root."""
    n = len(py)
    out = np.full(n, -1, dtype=np.int64)
    ids = py.py_id
    ok = ids >= 0
    if not ok.any():
        return out
    idx = np.flatnonzero(ok)
    order = idx if (np.diff(ids[idx]) > 0).all() else idx[np.argsort(ids[idx], kind="stable")]
    s = ids[order]
    want = py.parent
    pos = np.searchsorted(s, want)
    pos_c = np.minimum(pos, len(s) - 1)
    hit = (want >= 0) & (pos < len(s)) & (s[pos_c] == want)
    cand = np.where(hit, order[pos_c], -1)
    good = cand >= 0
    good[good] = (py.thread[cand[good]] == py.thread[good]) & (py.ts[cand[good]] <= py.ts[good])
    out[good] = cand[good]
    return out


def cut_cycles(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent with every cycle cut, the frames cut). A frame whose parent ids loop back to it (its own
    parent, or frames naming each other, which only equal starts let through) would make every walk up
    the tree endless: in each cycle, the frame recorded first becomes a root. Frames whose chain reaches
    a root are found by pointer doubling (log2(frames) rounds); only those that do not are walked one by
    one, each once."""
    n = len(parent)
    jump = parent.copy()
    live = np.flatnonzero(jump >= 0)
    for _ in range(max(1, n.bit_length()) + 1):  # 2**rounds > n: every chain that ends has ended
        if not len(live):
            return parent, np.zeros(0, dtype=np.int64)
        jump[live] = jump[jump[live]]
        live = live[jump[live] >= 0]
    if not len(live):
        return parent, np.zeros(0, dtype=np.int64)
    par = parent.copy()
    seen = np.full(n, -1, dtype=np.int64)  # the walk that reached each frame first
    cut = []
    for start in live.tolist():  # frames on a cycle or leading into one
        if seen[start] >= 0:
            continue
        walk = []
        v = start
        while v >= 0 and seen[v] < 0:
            seen[v] = start
            walk.append(v)
            v = int(par[v])
        if v >= 0 and seen[v] == start:  # this walk closed a cycle: v is on it
            first = min(walk[walk.index(v):])
            par[first] = -1
            cut.append(first)
    return par, np.array(sorted(cut), dtype=np.int64)


def nearest(parent: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """For each frame, the nearest frame at or above it (itself, its parent, ...) with `flag`; -1 when none.
    Pointer doubling over the frames not yet resolved: about log2(depth) rounds."""
    n = len(parent)
    r = np.where(flag, np.arange(n, dtype=np.int64), parent)
    todo = np.flatnonzero((r >= 0) & ~flag)  # r[i] is an ancestor not known to be flagged
    todo = todo[~flag[r[todo]]]
    for _ in range(64):
        if not len(todo):
            break
        r[todo] = r[r[todo]]  # jump: the ancestor's own pointer (flagged, -1, or further up)
        live = r[todo] >= 0
        todo = todo[live]
        todo = todo[~flag[r[todo]]]
    return r


def depths(up: np.ndarray) -> np.ndarray:
    """Ancestors of each node (up: its parent, -1 for a root; no cycles): pointer jumping, each round
    doubling the distance covered, so log2(depth) rounds."""
    dist = (up >= 0).astype(np.int64)
    jump = up.copy()
    live = np.flatnonzero(jump >= 0)
    while len(live):
        j = jump[live]
        dist[live] += dist[j]
        jump[live] = jump[j]
        live = live[jump[live] >= 0]
    return dist


def ancestor(up: np.ndarray, nodes: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The k-th ancestor of each node (k no more than its depth): its bits, lowest first, each a jump of
    2**bit; the jump table doubled each round, so log2(max k) rounds."""
    cur = nodes.copy()
    k = k.copy()
    jump = up.copy()
    while (k > 0).any():
        b = (k & 1) == 1
        cur[b] = jump[cur[b]]
        k >>= 1
        if (k > 0).any():
            jump = np.where(jump >= 0, jump[np.maximum(jump, 0)], -1)
    return cur
