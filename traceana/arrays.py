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
