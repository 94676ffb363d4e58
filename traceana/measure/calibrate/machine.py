"""The machine being calibrated: name, kind, driver, threads, cache sizes, datasheet figures.

`cpu_caches` and `datasheet` are pure (a folder, a matched table row in; numbers out);
`detect` asks torch about the device.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceana.roofline.devices import match_device
from traceana.roofline.devices.links import links_for
from traceana.numbers import ascii_int
from traceana.ranks.executor import mem_available

CPU_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"


@dataclass(frozen=True)
class Machine:
    kind: str  # cpu | cuda | rocm
    name: str
    torch: str
    threads: int  # CPU threads torch uses (torch.get_num_threads())
    driver: str | None = None  # CUDA / HIP runtime version torch was built with, driver when known
    index: int | None = None  # the GPU calibrated
    gpus: int = 0  # GPUs visible
    capability: tuple[int, int] | None = None
    l2_bytes: int | None = None  # per core on a CPU, the whole L2 on a GPU
    llc_bytes: int | None = None  # last-level cache (CPU L3; GPU: the L2)
    memory_bytes: int | None = None  # RAM available now (CPU) / device memory (GPU)
    table_key: str | None = None
    datasheet: dict[str, float] = field(default_factory=dict)  # figure key -> spec value


def parse_size(text: str) -> int | None:
    """'2048K' / '480M' / '64' -> bytes (sysfs cache sizes)."""
    t = text.strip().upper()
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in "KMG" else t
    n = ascii_int(digits)
    return n * mult if n is not None else None


def cpu_caches(root: str = CPU_CACHE_DIR) -> dict[int, int]:
    """Cache level -> bytes of one data/unified cache seen by cpu0 (sysfs; {} when absent)."""
    out: dict[int, int] = {}
    base = Path(root)
    if not base.is_dir():
        return out
    for d in sorted(base.glob("index*")):
        try:
            kind = (d / "type").read_text().strip()
            level = int((d / "level").read_text().strip())
            size = parse_size((d / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size:
            out[level] = max(out.get(level, 0), size)
    return out




def cpu_name(path: str = "/proc/cpuinfo") -> str:
    try:
        with open(path) as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def datasheet(props: dict[str, Any]) -> tuple[str | None, dict[str, float]]:
    """The device table's row for a GPU's properties, and its spec figures keyed like the
    profile's: gemm.<peak key> (TFLOP/s), dram.copy / dram.triad (GB/s), the host link per
    direction for h2d.* / d2h.* and the peer link for peer.copy (GB/s)."""
    dev = match_device(props)
    out: dict[str, float] = {f"gemm.{k}": v for k, v in dev.peak_tflops.items()}
    if dev.dram_gbps:
        out["dram.copy"] = out["dram.triad"] = float(dev.dram_gbps)
    links = links_for(dev.key)
    if links.get("host_link_gbps"):
        for k in ("h2d.pinned", "h2d.pageable", "d2h.pinned", "d2h.pageable"):
            out[k] = float(links["host_link_gbps"])
    if links.get("peer_link_gbps"):
        out["peer.copy"] = float(links["peer_link_gbps"])
    return dev.key, out


def detect(torch: Any, want: str | None = None) -> Machine:
    """The device to calibrate: `want` 'cpu', 'cuda' / 'cuda:N', or None (a GPU when there is one)."""
    version = str(torch.__version__).split("+")[0]
    threads = int(torch.get_num_threads())
    if want != "cpu" and torch.cuda.is_available():
        index = int(want.split(":", 1)[1]) if want and ":" in want else torch.cuda.current_device()
        p = torch.cuda.get_device_properties(index)
        hip = getattr(torch.version, "hip", None)
        props = {"name": p.name, "numSms": p.multi_processor_count, "totalGlobalMem": p.total_memory,
                 "computeMajor": p.major, "computeMinor": p.minor}
        key, sheet = datasheet(props)
        l2 = getattr(p, "L2_cache_size", None) or None
        driver = f"HIP {hip}" if hip else f"CUDA runtime {torch.version.cuda}"
        getter = getattr(torch._C, "_cuda_getDriverVersion", None)
        if getter and not hip:
            try:
                v = int(getter())
                driver += f", driver API {v // 1000}.{v % 1000 // 10}"
            except (RuntimeError, TypeError, ValueError):
                pass
        return Machine("rocm" if hip else "cuda", p.name, version, threads, driver, index,
                       torch.cuda.device_count(), (p.major, p.minor), l2, l2, p.total_memory, key, sheet)
    caches = cpu_caches()
    return Machine("cpu", cpu_name(), version, threads, None, None, 0, None, caches.get(2),
                   caches.get(max(caches)) if caches else None, mem_available(), None, {})


def cores() -> int:
    return os.cpu_count() or 1
