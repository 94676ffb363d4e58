"""Clocks and the repeat loop.

A clock runs `fn` `iters` times and returns the elapsed seconds. On a CPU, torch ops are
synchronous, so the host's perf_counter times them. On a GPU the work is queued: a pair of
CUDA events on the current stream brackets the calls and the device is synchronised before the
elapsed time is read (events measure device time, not the host's launch loop). The CUDA clock
needs a GPU; its logic is tested with a stand-in `cuda` module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Clock(Protocol):
    def time(self, fn: Callable[[], Any], iters: int) -> float: ...


class HostClock:
    """perf_counter around the calls (CPU work, which torch runs synchronously)."""

    def time(self, fn: Callable[[], Any], iters: int) -> float:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return time.perf_counter() - t0


class CudaClock:
    """CUDA events around the calls; `cuda` is torch.cuda (needs a GPU)."""

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda

    def time(self, fn: Callable[[], Any], iters: int) -> float:
        start, end = self.cuda.Event(enable_timing=True), self.cuda.Event(enable_timing=True)
        self.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in ms


@dataclass(frozen=True)
class Timed:
    seconds: list[float]  # one per repeat, each for `iters` calls
    iters: int


def repeat(clock: Clock, fn: Callable[[], Any], repeats: int, min_s: float, max_iters: int = 100_000) -> Timed:
    """Warm up once, pick how many calls make one repeat last at least min_s, then time
    `repeats` repeats of that many calls."""
    first = clock.time(fn, 1)  # also the warm-up: first-touch page faults, BLAS handle, autotuning
    probe = clock.time(fn, 1)
    iters = iters_for(min(first, probe), min_s, max_iters)
    return Timed([clock.time(fn, iters) for _ in range(repeats)], iters)


def iters_for(one_call_s: float, min_s: float, max_iters: int) -> int:
    """Calls per repeat: enough for min_s, at least 1, at most max_iters."""
    if one_call_s <= 0:
        return max_iters
    return max(1, min(max_iters, math.ceil(min_s / one_call_s)))
