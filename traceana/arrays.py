"""Array helpers the stages after loading share."""

from __future__ import annotations

import numpy as np


def distinct(x: np.ndarray) -> np.ndarray:
    """np.unique(x) for a 1-D integer array (the sorted distinct values), by sorting: numpy's own
    unique hashes integers, which is ~30x slower than a sort on a few hundred thousand distinct ids."""
    s = np.sort(x)
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def distinct_below(x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(x, return_inverse=True) for a 1-D array of integers in [0, n) (indices into a column of n):
    when n is not much larger than len(x), the values marked in a mask of n and numbered by a running count
    (no sort); else by sorting."""
    if n > 8 * len(x) + 4096:
        uniq, inv = np.unique(x, return_inverse=True)
        return uniq, inv.reshape(-1)
    present = np.zeros(n, dtype=bool)
    present[x] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present), rank[x]


def median(x: np.ndarray) -> float:
    """np.median(x) of a non-empty 1-D array without NaNs, by sorting (np.median imports numpy.ma,
    ~6 ms, to check for masked arrays): the middle value, or the mean of the middle two."""
    s = np.sort(x)
    h = len(s) // 2
    return float(s[h]) if len(s) % 2 else float((s[h - 1] + s[h]) / 2)


def codes_of(values: list, at: np.ndarray) -> tuple[np.ndarray, list]:
    """values[i] for each i in `at` as an integer code, equal codes for equal values (equal as dict keys are),
    numbered by first appearance; and the distinct values, by code. A column at a time (no tuple per item):
    the loader shares one object per distinct string, whose hash is computed once."""
    items = list(map(values.__getitem__, at.tolist()))
    code = dict(zip(dict.fromkeys(items), range(len(items))))
    return np.fromiter(map(code.__getitem__, items), dtype=np.int64, count=len(items)), list(code)


def first_codes(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of equal columns (non-negative integer codes) numbered 0, 1, ... by first appearance: the number
    of each row, and the first row of each number."""
    key = np.zeros(len(cols[0]), dtype=np.int64)
    span = 1
    for c in cols:
        top = int(c.max()) + 1 if len(c) else 1
        if span * top >= 1 << 62:  # compact the key so far before it overflows
            _, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1).astype(np.int64)
            span = int(key.max()) + 1 if len(key) else 1
        key = key * top + c
        span *= top
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank[inv.reshape(-1)], first[order]


def slices(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """values[lo[0]:hi[0]], values[lo[1]:hi[1]], ... concatenated, and which slice each item came from."""
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    which = np.repeat(np.arange(len(lo), dtype=np.int64), n)
    if not total:
        return values[:0], which
    first = np.concatenate(([0], np.cumsum(n)[:-1]))
    return values[np.arange(total, dtype=np.int64) - first[which] + lo[which]], which


def run_classes(r: np.ndarray, starts: np.ndarray, stops: np.ndarray,
                fresh: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Runs r[i..j] (i in starts, j in stops) numbered by first appearance, equal numbers for equal values
    (and, given fresh, equal fresh[i..j-1]): each run's number, and the first run of each number. One lexsort
    per run length, not a tuple per run."""
    n = len(starts)
    key = np.zeros(n, dtype=np.int64)
    if not n:
        return key, key
    length = stops - starts + 1
    base = 0
    for m in distinct(length).tolist():  # runs of one length at a time: a matrix of their values
        sel = np.flatnonzero(length == m)
        at = starts[sel][:, None] + np.arange(m)
        mat = r[at]
        if fresh is not None:
            mat = np.concatenate((mat, fresh[at[:, :-1]].astype(np.int64)), axis=1)
        o = np.lexsort(mat.T)  # equal rows side by side
        s = mat[o]
        new = np.ones(len(o), dtype=bool)
        new[1:] = (s[1:] != s[:-1]).any(axis=1)
        key[sel[o]] = base + np.cumsum(new) - 1
        base += len(sel)
    return first_codes(key)
