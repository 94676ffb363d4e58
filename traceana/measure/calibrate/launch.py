"""Fixed cost per op: dispatch overhead on a CPU, kernel launch latency on a GPU.

CPU: torch.add of two 1-element tensors into a preallocated output, back to back: the time per
call is torch's dispatch (argument checks, dispatcher, TensorIterator set-up) with next to no
arithmetic. An op whose self time is close to this does nothing but dispatch.
GPU: the same tiny add, queued back to back and timed with CUDA events: each kernel's share of
the device timeline when the host keeps up, the floor of any kernel (needs a GPU).
"""

from __future__ import annotations

from typing import Any

from traceana.measure.calibrate.stats import figure, per_call_us
from traceana.measure.calibrate.timing import Clock, repeat

CALLS = {"quick": 2000, "full": 10000}


def measure(torch: Any, clock: Clock, *, kind: str, device: str, repeats: int, min_s: float) -> dict:
    a = torch.ones(1, device=device)
    out = torch.empty(1, device=device)
    fn = lambda: torch.add(a, a, out=out)  # noqa: E731
    t = repeat(clock, fn, repeats, min_s)
    what = "per-op dispatch" if kind == "cpu" else "kernel launch"
    return figure(per_call_us(t.seconds, t.iters), "us", f"torch.add on 1-element tensors, {t.iters} calls per repeat",
                  note=f"{what}: time per call")
