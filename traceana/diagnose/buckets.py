"""Intervals on tracks brought under a cap: short neighbours merged into buckets.

Intervals come sorted by (track, start). Over the cap, adjacent intervals shorter than a threshold
q, of one category on one track and less than q apart, become one bucket (its count, its busy
time, its longest interval as representative); q is the smallest that fits (bisection on a
monotone count, to a ratio of 1.01). When same-category merging cannot fit (short intervals of
alternating categories), neighbours of any category merge and a bucket takes the category with
most of its time. Used by the timeline's GPU lanes and its CPU tracks. Vectorised.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Buckets(NamedTuple):
    """Intervals (sorted by track, start) after merging: per bucket its first and representative
    (longest) interval's position, start, end, count, busy time and category."""

    first: np.ndarray
    rep: np.ndarray
    start: np.ndarray
    end: np.ndarray
    n: np.ndarray
    busy: np.ndarray
    cat: np.ndarray
    aggregated: bool
    q: float
    mixed: bool


def buckets(track: np.ndarray, s: np.ndarray, e: np.ndarray, c: np.ndarray, cap: int) -> Buckets:
    """Intervals sorted by (track, start) brought under `cap`: when over it, adjacent intervals shorter
    than a threshold, of one category on one track and less than the threshold apart, become one bucket
    (any category when that cannot fit: the bucket takes the category with most of its time)."""
    n = len(s)
    starts = np.ones(n, dtype=bool)  # True where an interval (bucket) begins
    q, mixed = 0.0, False
    if n > cap:
        mixed = _count(track, s, e, c, np.inf, same_cat=True) > cap
        q = _threshold(track, s, e, c, not mixed, cap)
        starts = _joins(track, s, e, c, q, not mixed)
    first = np.flatnonzero(starts)
    d = e - s
    gid = np.cumsum(starts) - 1
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        return Buckets(empty, empty, s, e, empty, d, empty, False, q, mixed)
    longest = np.lexsort((-d, gid))
    rep = longest[np.searchsorted(gid[longest], np.arange(len(first)))]
    if mixed:
        ncat = int(c.max()) + 1
        per = np.bincount(gid * ncat + c, weights=np.maximum(d, 1e-9), minlength=len(first) * ncat)
        b_cat = per.reshape(len(first), ncat).argmax(axis=1)
    else:
        b_cat = c[first]
    return Buckets(first, rep, s[first], np.maximum.reduceat(e, first), np.diff(np.append(first, n)),
                   np.add.reduceat(d, first), b_cat, bool(n > cap), q, bool(mixed))


def _joins(stream: np.ndarray, s: np.ndarray, e: np.ndarray, c: np.ndarray, q: float, same_cat: bool) -> np.ndarray:
    """True where an interval starts a new bucket at threshold q (intervals sorted by stream, start)."""
    n = len(s)
    short = (e - s) < q
    join = np.zeros(n, dtype=bool)
    if n > 1:
        join[1:] = short[1:] & short[:-1] & (stream[1:] == stream[:-1]) & (s[1:] - e[:-1] < q)
        if same_cat:
            join[1:] &= c[1:] == c[:-1]
    return ~join


def _count(stream, s, e, c, q: float, same_cat: bool) -> int:
    return int(_joins(stream, s, e, c, q, same_cat).sum())


def _threshold(stream, s, e, c, same_cat: bool, cap: int) -> float:
    """The smallest threshold (to a ratio of 1.01) that leaves at most `cap` intervals."""
    span = float(e.max() - s.min()) if len(s) else 1.0
    lo, hi = 1e-3, max(span, 1e-3) * 2
    if _count(stream, s, e, c, hi, same_cat) > cap:
        return np.inf
    while hi / lo > 1.01:
        mid = float(np.sqrt(lo * hi))
        if _count(stream, s, e, c, mid, same_cat) > cap:
            lo = mid
        else:
            hi = mid
    return hi
