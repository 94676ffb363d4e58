"""Memory bandwidth: DRAM copy and triad with a working set far beyond the last-level cache,
and cache bandwidth with one that fits in L2.

Bytes are counted STREAM-style, what the program asks to move:
    copy   dst = src            2 x N x 4 B (read src, write dst; fp32)
    triad  a = b + s x c        3 x N x 4 B (read b and c, write a)
A CPU's write-allocate also reads the destination's lines, so the hardware moves more than
this; the figure is what an op of that shape achieves, which is what the roofline needs.
"""

from __future__ import annotations

from typing import Any

from traceana.measure.calibrate.stats import figure, rates
from traceana.measure.calibrate.timing import Clock, repeat

MiB = 2**20
ELEM = 4  # fp32
ARRAYS = {"copy": 2, "triad": 3}
# DRAM working set: this many times the last-level cache, within [floor, cap] per mode
LLC_TIMES = 4
DRAM_FLOOR = 256 * MiB
DRAM_CAP = {"quick": 1024 * MiB, "full": 4096 * MiB}


def copy_bytes(n: int, elem: int = ELEM) -> float:
    """Bytes one copy of n elements moves: read n, write n."""
    return 2.0 * n * elem


def triad_bytes(n: int, elem: int = ELEM) -> float:
    """Bytes one triad a = b + s*c over n elements moves: read b and c, write a."""
    return 3.0 * n * elem


def kernel_bytes(which: str, n: int) -> float:
    return copy_bytes(n) if which == "copy" else triad_bytes(n)


def dram_working_set(llc_bytes: int | None, mode: str, available: int | None) -> int:
    """Total bytes of the arrays: LLC_TIMES x the last-level cache, at least DRAM_FLOOR, at
    most the mode's cap and a quarter of the memory available now."""
    want = max(DRAM_FLOOR, LLC_TIMES * (llc_bytes or 0))
    want = min(want, DRAM_CAP[mode])
    if available:
        want = min(want, available // 4)
    return int(want)


def cache_working_set(kind: str, l2_bytes: int | None) -> int:
    """Half of L2: of one core's L2 on a CPU (measured on one thread: a multi-threaded copy of a
    cache-sized array times the threads' barrier, and on a shared machine a descheduled thread,
    more than the cache), of the whole L2 on a GPU. 256 KiB when the size is unknown."""
    if kind == "cpu":
        return l2_bytes // 2 if l2_bytes else 256 * 1024
    return (l2_bytes or 8 * MiB) // 2


def elements(which: str, working_set: int) -> int:
    """Elements per array so that all the kernel's arrays together fill the working set."""
    return max(1024, working_set // (ARRAYS[which] * ELEM))


def _kernel(torch: Any, which: str, n: int, device: str):
    if which == "copy":
        src = torch.ones(n, device=device)
        dst = torch.zeros(n, device=device)
        return lambda: dst.copy_(src)
    a = torch.zeros(n, device=device)
    b = torch.ones(n, device=device)
    c = torch.ones(n, device=device)
    return lambda: torch.add(b, c, alpha=3.0, out=a)


def measure(torch: Any, clock: Clock, which: str, working_set: int, *, device: str, repeats: int,
            min_s: float, level: str, datasheet: float | None = None, note: str | None = None,
            threads: int | None = None) -> dict:
    """GB/s of `which` (copy | triad) over arrays filling `working_set` bytes (on `threads` CPU
    threads when given, torch's setting otherwise)."""
    n = elements(which, working_set)
    fn = _kernel(torch, which, n, device)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        t = repeat(clock, fn, repeats, min_s)
    finally:
        torch.set_num_threads(before)
    work = kernel_bytes(which, n)
    size = (f"{level}: {ARRAYS[which]} x {n * ELEM / MiB:,.2f} MiB fp32 arrays "
            f"({n * ELEM * ARRAYS[which] / MiB:,.1f} MiB working set, {t.iters} call(s) per repeat)")
    return figure(rates(t.seconds, work, t.iters, 1e9), "GB/s", size, work=work, datasheet=datasheet, note=note)
