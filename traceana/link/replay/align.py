"""Align the kernels of one replayed graph launch with the nodes of one captured graph: pure
functions over token sequences (ints: one per kernel name, memcpy or memset).

The replay runs the captured nodes in capture order, so the two sequences are equal but for the
few events a profiler drops. The alignment is a longest common subsequence confined to a band
of `tol` around the diagonal: it skips up to `tol` events on either side and never pairs two
different names, so a shifted or different graph fails instead of being paired wrongly.
"""

from __future__ import annotations

from math import ceil

UNNAMED = -1  # a captured kernel launch whose kernel name the trace does not record (CUPTI)


def tolerance(n_replay: int, n_capture: int) -> int:
    """Events either side may leave unpaired: 2% of the longer sequence, at least one."""
    return max(1, ceil(0.02 * max(n_replay, n_capture)))


def align(replay: tuple[int, ...], capture: tuple[int, ...], tol: int) -> list[tuple[int, int]] | None:
    """(replay position, capture position) pairs, in order, or None when the sequences do not
    align: more than `tol` events of either left unpaired. A capture with unnamed kernels
    (UNNAMED tokens) aligns by position only: same length, and a kernel where a kernel was
    launched, a copy where a copy was."""
    n, m = len(replay), len(capture)
    if abs(n - m) > tol or n == 0 or m == 0:
        return None
    if replay == capture:
        return [(i, i) for i in range(n)]
    if UNNAMED in capture:
        return _by_position(replay, capture)
    pairs = _banded_lcs(replay, capture, tol)
    if n - len(pairs) > tol or m - len(pairs) > tol:
        return None
    return pairs


KIND_TOKENS = (-2, -3)  # memcpy, memset: the same token on both sides (see replay.graphs)


def _by_position(replay: tuple[int, ...], capture: tuple[int, ...]) -> list[tuple[int, int]] | None:
    if len(replay) != len(capture):
        return None
    for r, c in zip(replay, capture):
        if c == UNNAMED:
            if r in KIND_TOKENS:
                return None
        elif r != c:
            return None
    return [(i, i) for i in range(len(replay))]


def _banded_lcs(a: tuple[int, ...], b: tuple[int, ...], k: int) -> list[tuple[int, int]]:
    """Longest common subsequence of a and b with |i - j| <= k for every cell visited, and its
    pairs. Cells outside the band count as unreachable. O(len(a) * (2k + 1))."""
    n, m = len(a), len(b)
    width = 2 * k + 1
    neg = -1
    # score[i][d]: LCS of a[:i], b[:j] with j = i + d - k; move[i][d]: 0 match, 1 skip a, 2 skip b
    score = [[neg] * width for _ in range(n + 1)]
    move = [[0] * width for _ in range(n + 1)]
    for d in range(width):
        j = d - k
        if 0 <= j <= m:
            score[0][d] = 0
            move[0][d] = 2
    for i in range(1, n + 1):
        row, prev, mv = score[i], score[i - 1], move[i]
        ai = a[i - 1]
        for d in range(width):
            j = i + d - k
            if j < 0 or j > m:
                continue
            best, how = neg, 1
            if d + 1 < width and prev[d + 1] > best:  # skip a[i-1]: from (i-1, j)
                best, how = prev[d + 1], 1
            if j > 0 and d > 0 and row[d - 1] > best:  # skip b[j-1]: from (i, j-1)
                best, how = row[d - 1], 2
            if j > 0 and ai == b[j - 1] and prev[d] >= 0 and prev[d] + 1 > best:
                best, how = prev[d] + 1, 0
            row[d] = best
            mv[d] = how
    d_end = m - n + k
    if not 0 <= d_end < width or score[n][d_end] < 0:
        return []
    pairs: list[tuple[int, int]] = []
    i, d = n, d_end
    while i > 0 or i + d - k > 0:
        j = i + d - k
        how = move[i][d] if i > 0 else 2
        if how == 0:
            pairs.append((i - 1, j - 1))
            i -= 1
        elif how == 1:
            i -= 1
            d += 1
        else:
            d -= 1
    pairs.reverse()
    return pairs
