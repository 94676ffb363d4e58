"""The Python call tree of a with_stack=True trace as parent pointers (numpy, no recursion on the
trace's depth): each frame's parent from its ids, cycles cut, the nearest flagged ancestor, depths and
k-th ancestors, each by pointer doubling in about log2(depth) rounds; the nearest flagged ancestor of a
few frames (the ops' innermost ones) by walking up from them, at most twice the tree's size in steps. Pure.
"""

from __future__ import annotations

import numpy as np


def parent_index(py) -> np.ndarray:
    """Each frame's parent frame (index), from "Python parent id" -> "Python id"; -1 for a root. A parent
    that is not found, is on another thread or starts after its child makes the frame a root."""
    n = len(py)
    ids = py.py_id
    ok = ids >= 0
    if not ok.any():
        return np.full(n, -1, dtype=np.int64)
    want = py.parent
    every = bool(ok.all())
    idx = np.arange(n, dtype=np.int64) if every else np.flatnonzero(ok)
    s = ids if every else ids[idx]
    rising = bool((s[1:] > s[:-1]).all())
    hi = int(s[-1])
    if rising and hi <= 3 * n + 1024:  # distinct ids, not far above 0 (the profiler counts 1, 2, ...): a table by id
        at = np.full(hi + 2, n, dtype=np.int64)  # n: no such frame; the last entry for every id outside [0, hi]
        at[s] = idx
        cand = at[np.clip(want, -1, hi + 1)]
    else:
        order = idx if rising else idx[np.argsort(s, kind="stable")]
        s = ids[order]
        pos = np.searchsorted(s, want)
        pos_c = np.minimum(pos, len(s) - 1)
        hit = (want >= 0) & (pos < len(s)) & (s[pos_c] == want)
        cand = np.where(hit, order[pos_c], n)
    # (a parent index n reads the last frame, mode="clip"; it is dropped whatever that says)
    good = (cand < n) & (py.thread.take(cand, mode="clip") == py.thread) & (py.ts.take(cand, mode="clip") <= py.ts)
    cand[~good] = -1
    return cand


def cut_cycles(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent with every cycle cut, the frames cut). A frame whose parent ids loop back to it (its own
    parent, or frames naming each other, which only equal starts let through) would make every walk up
    the tree endless: in each cycle, the frame recorded first becomes a root. Frames whose chain reaches
    a root are found by pointer doubling (log2(frames) rounds); only those that do not are walked one by
    one, each once."""
    n = len(parent)
    if (parent < np.arange(n)).all():  # every parent recorded before its child (the usual order): no cycle possible
        return parent, np.zeros(0, dtype=np.int64)
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


def nearest_at(parent: np.ndarray, flag: np.ndarray, at: np.ndarray) -> np.ndarray:
    """nearest(parent, flag) at the distinct frames `at` only (each >= 0): from each, a step up at a time,
    all at once, until a flagged frame or the top. A flagged frame is usually a few calls above (an op's
    module and user frame are), so this visits far fewer frames than the doubling over the whole tree; once
    the steps taken pass twice the tree's size (deep chains with no flag), the doubling answers for the
    frames still climbing, so the work stays linear."""
    res = np.full(len(at), -1, dtype=np.int64)
    pos = np.arange(len(at))
    cur = at
    budget = 2 * len(parent) + len(at)
    while len(cur):
        hit = flag[cur]
        res[pos[hit]] = cur[hit]
        up = parent[cur]
        go = ~hit & (up >= 0)  # not found yet, and not at the top
        pos, cur = pos[go], up[go]
        budget -= len(cur)
        if budget < 0 and len(cur):
            res[pos] = nearest(parent, flag)[cur]
            break
    return res


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
