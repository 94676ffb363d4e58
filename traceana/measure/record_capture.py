"""The capture trace in `traceana record`: for a program that uses torch.compile or CUDA graphs, the steps
where the graphs are compiled and captured are kept as a trace of their own, beside the steady-state trace,
in the layout `traceana report` finds (traceana/link/replay/index.py): `capture_traces/` holding the trace and
`execution_details.json`, a list of {"file", "batch_size", "mode"}.

Why: a kernel replayed from a CUDA graph links only to the graph launch, so the steady-state trace has no
op or shapes for it; the trace of the capture has them (each captured launch inside the op that issued
it), and the report aligns the two (replay/align.py). torch.compile's CUDA graphs (mode="reduce-overhead",
cudagraph trees) warm up on a graph's first run and capture it on its second, so the capture needs the
step after the first too: the recording started with the program therefore goes on through the first step
and the wait steps (at least one) when the program has compiled something or captured a graph by the end
of its first step, and is written as the capture trace; the scheduled window follows with the wait steps
it has left (so the window is the same iterations, or one later when --wait is 0).

How the program is seen using them, from torch itself: torch._dynamo's counters (frames compiled since
recording started), and torch.cuda.CUDAGraph.capture_begin, wrapped while recording to count captures
(every torch.cuda.graph capture, cudagraph trees' included, goes through it). Capturing CUDA graphs needs
a GPU; on a CPU-only machine the capture trace holds torch.compile's first steps (compilation, the first
runs of the compiled code), which a report names as not needed when the steady state replays no graph.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from traceana.link.replay.index import FOLDER, INDEX

MODES = ("auto", "on", "off")


class GraphCapture:
    """Watches the recorded program for torch.compile and CUDA graph captures (see the module docstring).

    mode: "auto" (keep the capture steps when the program compiles or captures), "on" (always keep the
    first steps as the capture trace), "off" (never)."""

    def __init__(self, mode: str = "auto") -> None:
        if mode not in MODES:
            raise ValueError(f"capture must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.captures = 0  # CUDA graph captures begun while recording
        self.held = 0  # steps after the first that the first recording went on through
        self._frames = 0
        self._real: Any = None
        self._graph_class: Any = None

    # ------------------------------------------------------------------ watching the program

    def start(self) -> None:
        """Note torch.compile's count so far and wrap CUDAGraph.capture_begin (no-op with mode "off")."""
        if self.mode == "off":
            return
        self._frames = compiled_frames()
        try:
            import torch.cuda.graphs as graphs
        except ImportError:  # a torch built without CUDA graph support
            return
        cls = getattr(graphs, "CUDAGraph", None)
        real = getattr(cls, "capture_begin", None)
        if cls is None or real is None or getattr(real, "__traceana_counts__", False):
            return
        self._graph_class, self._real = cls, real
        cls.capture_begin = self.counting(real)

    def counting(self, real: Any) -> Any:
        """`real` (CUDAGraph.capture_begin) wrapped to count each capture begun."""
        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            self.captures += 1
            return real(graph, *args, **kwargs)

        capture_begin.__traceana_counts__ = True  # type: ignore[attr-defined]
        capture_begin.__wrapped__ = real  # type: ignore[attr-defined]
        return capture_begin

    def stop(self) -> None:
        """Put CUDAGraph.capture_begin back (only when it is still our wrapper)."""
        cls = self._graph_class
        if cls is not None and getattr(cls.capture_begin, "__wrapped__", None) is self._real:
            cls.capture_begin = self._real
        self._graph_class = self._real = None

    def used(self) -> bool:
        """Whether the capture steps are kept: the program compiled or captured something (mode "auto")."""
        if self.mode != "auto":
            return self.mode == "on"
        return self.captures > 0 or compiled_frames() > self._frames

    # ------------------------------------------------------------------ the steps it covers

    def holds(self, step: int, wait: int) -> bool:
        """At the end of step `step` (1 = the first), before the schedule starts: whether the first recording
        goes on through the next step (the capture steps: the first, then max(wait, 1) more)."""
        if self.held or step == 1:
            if step < 1 + max(wait, 1) and (self.held or self.used()):
                self.held = step
                return True
        return False

    def wait(self, wait: int) -> int:
        """The steps before the schedule's warm-up, counted from the end of the first step (the wait steps,
        or the capture steps when they are more)."""
        return max(wait, self.held)

    def wait_left(self, wait: int) -> int:
        """The schedule's own wait steps once the capture steps are recorded."""
        return max(0, wait - self.held)

    # ------------------------------------------------------------------ writing it

    def folder(self, out_dir: str) -> str:
        """DIR/capture_traces, created."""
        path = os.path.join(out_dir, FOLDER)
        os.makedirs(path, exist_ok=True)
        return path

    def index(self, trace: str) -> str:
        """Write capture_traces/execution_details.json naming `trace` (this run's capture: a folder holds one
        run's index, so a new run replaces the index of an earlier one); its path."""
        from traceana.output.safe_write import write_bytes

        entry = {"file": os.path.basename(trace), "batch_size": None, "mode": None,
                 "steps": f"1-{1 + self.held}", "graph_captures": self.captures,
                 "compiled": compiled_frames() > self._frames, "recorded_by": "traceana record"}
        path = os.path.join(os.path.dirname(trace), INDEX)
        write_bytes(path, (json.dumps([entry], indent=2) + "\n").encode())
        return path

    def describe(self) -> str:
        """What the capture trace holds, for the terminal line."""
        what = []
        if compiled_frames() > self._frames:
            what.append("torch.compile's compilation and first runs")
        if self.captures:
            what.append(f"{self.captures} CUDA graph capture{'s' if self.captures != 1 else ''}")
        steps = f"steps 1-{1 + self.held}" if self.held else "step 1"
        return f"{steps}: {' and '.join(what) or 'the first steps'}"


def compiled_frames() -> int:
    """Frames torch.compile (TorchDynamo) has compiled in this process so far (0 when it was never imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None) if utils is not None else None
    try:
        return int(counters["frames"]["ok"]) if counters is not None else 0
    except (KeyError, TypeError, ValueError):
        return 0
