"""Copies by direction: which link a memcpy crossed, and how many bytes it moved.

Kineto names every copy by direction and memory kind: `Memcpy HtoD (Pageable -> Device)`,
`Memcpy DtoH (Device -> Pinned)`, `Memcpy DtoD (Device -> Device)`, `Memcpy PtoP (Device ->
Device)` (peer, across GPUs), ROCm `Memcpy HtoD (Host -> Device)`; older roctracer names say
`CopyHostToDevice` / `CopyDeviceToHost` / `CopyDeviceToDevice`. Its `bytes` arg is what actually
crossed. Host<->device copies are held to the host link (PCIe or NVLink-C2C), peer copies to the
peer link (NVLink / Infinity Fabric), device-to-device copies to DRAM: never one roof for all.
"""

from __future__ import annotations

import re

import numpy as np

from traceana.load.model import Trace

# direction -> (link the copy crosses, roof_kind)
LINK = {"HtoD": "host_link", "DtoH": "host_link", "HtoH": "host_link", "PtoP": "peer_link", "DtoD": "dram"}
_KINETO = re.compile(r"Memcpy\s+(HtoD|DtoH|DtoD|PtoP|HtoH)\b(?:\s*\((\w+)\s*->\s*(\w+)\))?", re.I)
_ROCTRACER = {"copyhosttodevice": "HtoD", "copydevicetohost": "DtoH", "copydevicetodevice": "DtoD",
              "copyhosttohost": "HtoH", "copypeertopeer": "PtoP"}


def classify(name: str) -> tuple[str | None, str | None]:
    """(direction, host memory kind) of a memcpy event name; (None, None) if it says neither.
    The memory kind is "Pageable" or "Pinned" when the name says so (ROCm says "Host")."""
    m = _KINETO.search(name)
    if m:
        d = m.group(1)
        d = d[0].upper() + "to" + d[3].upper()
        ends = {(m.group(2) or "").capitalize(), (m.group(3) or "").capitalize()}
        kind = "Pageable" if "Pageable" in ends else "Pinned" if "Pinned" in ends else None
        return d, kind
    key = re.sub(r"[^a-z]", "", name.lower())
    for k, d in _ROCTRACER.items():
        if key.startswith(k):
            return d, None
    return None, None


def copy_split(trace: Trace, events: np.ndarray | None) -> dict[str, dict]:
    """Per direction (and memory kind) of a signature's memcpy events: time, bytes, events."""
    out: dict[str, dict] = {}
    if events is None or not len(events):
        return out
    gpu = trace.gpu
    ev = events[gpu.kind[events] == 1]
    for i in ev.tolist():
        d, kind = classify(trace.names[int(gpu.name[i])])
        if d is None:
            continue
        key = f"{d} ({kind})" if kind else d
        s = out.setdefault(key, {"direction": d, "memory": kind, "time_us": 0.0, "bytes": 0.0, "events": 0,
                                 "bytes_known": True})
        s["time_us"] += float(gpu.dur[i])
        b = float(gpu.nbytes[i])
        if np.isfinite(b):
            s["bytes"] += b
        else:
            s["bytes_known"] = False
        s["events"] += 1
    return out


def dominant_host_copy(split: dict[str, dict], device_us: float) -> dict | None:
    """The host<->device or peer part of a signature when it takes at least half its time."""
    link = {k: v for k, v in split.items() if LINK[v["direction"]] in ("host_link", "peer_link")}
    if not link or device_us <= 0:
        return None
    key = max(link, key=lambda k: link[k]["time_us"])
    part = link[key]
    t = sum(v["time_us"] for v in link.values() if LINK[v["direction"]] == LINK[part["direction"]])
    if t < 0.5 * device_us:
        return None
    return {"key": key, **part, "bytes_known": part["bytes_known"] and part["bytes"] > 0}
