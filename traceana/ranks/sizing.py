"""How many rank files may be analysed at once: each one's peak memory estimated from a ratio to its
JSON bytes — a prior until the workers have measured it, then the largest ratio measured.

A worker measures each file it analyses (`measure`): its resident set before, and its peak (VmHWM,
/proc/self/status) after; when the file raised the peak, the growth over its JSON bytes is a ratio.
Only files of at least MIN_JSON count (on smaller ones the fixed costs of a first analysis, lazy
imports and caches, would read as an absurd ratio, and their memory matters little). The gate
(`MemoryGate`) admits the next file (largest first) while the estimates of the files in flight fit in
the budget; one file is always admitted, so a single rank larger than memory still runs, alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

MIN_JSON = 32 << 20  # files this large or larger teach the gate their ratio
MARGIN = 1.25  # on the measured ratio: another rank's trace may be denser


def _status() -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of this process in bytes; None where /proc is not there."""
    rss = hwm = None
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return (rss, hwm) if rss is not None and hwm is not None else None


class Measure:
    """with Measure() as m: ...analyse...; m.growth is the peak's growth over the resident set before, in
    bytes (None when the peak was set earlier in this process, or there is no /proc)."""

    growth: int | None = None

    def __enter__(self) -> Measure:
        self._before = _status()
        return self

    def __exit__(self, *exc: Any) -> None:
        after = _status()
        if self._before and after and after[1] > self._before[1]:
            self.growth = after[1] - self._before[0]


class MemoryGate:
    """Admits rank files (indices into `sizes`, uncompressed JSON bytes) while their estimated peaks,
    ratio x JSON + base, fit in `budget` bytes (None: no limit)."""

    def __init__(self, sizes: Sequence[int], budget: float | None, prior: float, base: float):
        self.sizes, self.budget, self.prior, self.base = list(sizes), budget, prior, base
        self.measured: float | None = None
        self.held_back = False  # the budget kept a file waiting at least once

    @property
    def ratio(self) -> float:
        return self.measured * MARGIN if self.measured is not None else self.prior

    def estimate(self, i: int) -> float:
        return self.ratio * self.sizes[i] + self.base

    def admits(self, running: Iterable[int], i: int) -> bool:
        running = list(running)
        if self.budget is None or not running:
            return True
        ok = sum(self.estimate(j) for j in running) + self.estimate(i) <= self.budget
        self.held_back |= not ok
        return ok

    def learn(self, i: int, result: dict[str, Any]) -> None:
        g = result.get("rss_growth")
        if isinstance(g, int) and g > 0 and self.sizes[i] >= MIN_JSON:
            r = g / self.sizes[i]
            self.measured = r if self.measured is None else max(self.measured, r)
