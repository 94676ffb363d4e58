"""What each stage of one analysis visited, and how long it took.

A Meter is handed to analysis.analyze (and from there to each stage) by whoever wants the figures:
tests/test_linear.py checks that the counts grow linearly with the trace, bench/bench_stages.py prints
each stage's share of the time. Everyone else gets OFF, which records nothing.

    visit(stage, n)   the stage touched n events (array elements): a pass over a column adds its length,
                      a lookup per item adds the slice it searched, a per-item loop adds what each turn
                      reads. A scan of all events per item then shows as a count that grows with the
                      square of the trace, which is what the linearity test catches.
    timed(stage)      a context manager adding the wall time spent inside it to seconds[stage], and the
                      process's CPU time to cpu[stage] (what other load on the machine disturbs least).
    laps(stage)       a stopwatch for a run of parts: laps("x") starts timing "stage.x" and stops the
                      part before it; laps.stop() stops the last one (so a sequence of calls is timed
                      by inserting one line before each, without re-indenting it).

Stage names are dotted from the pipeline's stages down ("diagnose.stalls"); timings of a stage include
those of the stages named under it.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from time import perf_counter, process_time
from typing import ContextManager


class Meter:
    """Counts and seconds per stage (see the module doc)."""

    __slots__ = ("visits", "seconds", "cpu")

    def __init__(self) -> None:
        self.visits: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def visit(self, stage: str, n: int) -> None:
        self.visits[stage] = self.visits.get(stage, 0) + int(n)

    def add_time(self, stage: str, wall: float, cpu: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + wall
        self.cpu[stage] = self.cpu.get(stage, 0.0) + cpu

    @contextmanager
    def _timer(self, stage: str):
        t0, c0 = perf_counter(), process_time()
        try:
            yield
        finally:
            self.add_time(stage, perf_counter() - t0, process_time() - c0)

    def timed(self, stage: str) -> ContextManager[None]:
        return self._timer(stage)

    def laps(self, stage: str) -> Laps:
        return Laps(self, stage)


class Laps:
    """Consecutive parts of a stage timed one after the other (Meter.laps)."""

    __slots__ = ("meter", "stage", "part", "t0", "c0")

    def __init__(self, meter: Meter, stage: str) -> None:
        self.meter, self.stage, self.part, self.t0, self.c0 = meter, stage, None, 0.0, 0.0

    def __call__(self, part: str) -> None:
        self.stop()
        self.part = f"{self.stage}.{part}" if self.stage else part
        self.t0, self.c0 = perf_counter(), process_time()

    def stop(self) -> None:
        if self.part is not None:
            self.meter.add_time(self.part, perf_counter() - self.t0, process_time() - self.c0)
        self.part = None


class _NoLaps(Laps):
    """OFF's laps: times nothing, holds nothing."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def __call__(self, part: str) -> None:
        pass

    def stop(self) -> None:
        pass


_NO_LAPS = _NoLaps()


class _Off(Meter):
    """The Meter that records nothing (holds no state)."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def visit(self, stage: str, n: int) -> None:
        pass

    def add_time(self, stage: str, wall: float, cpu: float) -> None:
        pass

    def timed(self, stage: str) -> ContextManager[None]:
        return nullcontext()

    def laps(self, stage: str) -> Laps:
        return _NO_LAPS


OFF: Meter = _Off()
