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


def median(x: np.ndarray) -> float:
    """np.median(x) of a non-empty 1-D array without NaNs, by sorting (np.median imports numpy.ma,
    ~6 ms, to check for masked arrays): the middle value, or the mean of the middle two."""
    s = np.sort(x)
    h = len(s) // 2
    return float(s[h]) if len(s) % 2 else float((s[h - 1] + s[h]) / 2)
