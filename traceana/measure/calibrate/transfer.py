"""Host<->device and peer bandwidth (needs a GPU; every call here touches CUDA).

One copy of `size` bytes per call, timed with CUDA events: host->device (h2d) and
device->host (d2h), from pinned (page-locked) and pageable host memory; pinned copies are
issued non_blocking (DMA straight from the buffer), pageable ones go through the driver's
staging buffer. Peer: device 0 -> device 1 when more than one GPU is visible. Bytes per call =
size (each byte crosses the link once).
"""

from __future__ import annotations

from typing import Any

from traceana.measure.calibrate.stats import figure, rates
from traceana.measure.calibrate.timing import Clock, repeat

MiB = 2**20
SIZE = {"quick": 64 * MiB, "full": 256 * MiB}
KEYS = ("h2d.pinned", "h2d.pageable", "d2h.pinned", "d2h.pageable")


def measure_host(torch: Any, clock: Clock, key: str, nbytes: int, *, device: str, repeats: int,
                 min_s: float, datasheet: float | None = None) -> dict:
    direction, memory = key.split(".")
    n = nbytes // 4
    host = torch.ones(n, pin_memory=memory == "pinned")
    dev = torch.ones(n, device=device)
    if direction == "h2d":
        fn = lambda: dev.copy_(host, non_blocking=memory == "pinned")  # noqa: E731
    else:
        fn = lambda: host.copy_(dev, non_blocking=memory == "pinned")  # noqa: E731
    t = repeat(clock, fn, repeats, min_s)
    return figure(rates(t.seconds, float(n * 4), t.iters, 1e9), "GB/s",
                  f"{n * 4 / MiB:,.0f} MiB per copy, {memory} host memory ({t.iters} call(s) per repeat)",
                  work=float(n * 4), datasheet=datasheet)


def measure_peer(torch: Any, clock: Clock, nbytes: int, *, repeats: int, min_s: float,
                 datasheet: float | None = None) -> dict:
    n = nbytes // 4
    src = torch.ones(n, device="cuda:0")
    dst = torch.empty(n, device="cuda:1")
    fn = lambda: dst.copy_(src, non_blocking=True)  # noqa: E731
    t = repeat(clock, fn, repeats, min_s)
    return figure(rates(t.seconds, float(n * 4), t.iters, 1e9), "GB/s",
                  f"{n * 4 / MiB:,.0f} MiB per copy, cuda:0 -> cuda:1 ({t.iters} call(s) per repeat)",
                  work=float(n * 4), datasheet=datasheet)
