"""Copies by direction: which link a memcpy crossed, and how many bytes it moved.

Kineto names every copy by direction and memory kind: `Memcpy HtoD (Pageable -> Device)`,
`Memcpy DtoH (Device -> Pinned)`, `Memcpy DtoD (Device -> Device)`, `Memcpy PtoP (Device ->
Device)` (peer, across GPUs), ROCm `Memcpy HtoD (Host -> Device)`; older roctracer names say
`CopyHostToDevice` / `CopyDeviceToHost` / `CopyDeviceToDevice`. Its `bytes` arg is what actually
crossed. Host<->device copies are held to the host link (PCIe or NVLink-C2C), peer copies to the
peer link (NVLink / Infinity Fabric), device-to-device copies to DRAM: never one roof for all.

A copy needs no shapes to be judged: what it moved is its own `bytes` arg and which memory it read
or wrote is in its name (CUPTI's memory kinds; Kineto writes no other field for them). So a copy
whose op recorded no shapes, has no formula, or that has no op at all is held to its link with the
recorded bytes (judge_recorded), and only a copy that recorded no bytes stays unjudged.
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


def link_verdict(row: dict, part: dict, device: dict, count: int) -> None:
    """Hold a signature whose time is mostly a host<->device (or peer) copy to that link, with
    the bytes the profiler recorded as crossing it (in place, on the row)."""
    kind = LINK[part["direction"]]
    gbps = device.get(f"{kind}_gbps")
    if part["bytes_known"]:
        per_call = part["bytes"] / count if count else part["bytes"]
    else:  # ROCm traces may record 0 bytes: the tensor (half the formula's read + write) crosses once
        per_call = (row["bytes"] or 0.0) / 2
        part = {**part, "bytes": per_call * count}
        row["estimated"] = True
        row["notes"] = list(row["notes"]) + ["the copies recorded no bytes: the bytes crossing the link are the "
                                             "tensor's size from its shape"]
    rate = part["bytes"] / (part["time_us"] * 1e3) if part["time_us"] > 0 else None
    link_name = device.get(kind) or ("host link" if kind == "host_link" else "peer link")
    row["copy"] = {"direction": part["direction"], "memory": part["memory"], "link": link_name,
                   "link_gbps": gbps, "bytes": per_call, "time_us": part["time_us"], "gbps": rate,
                   "events": part["events"]}
    mean = row["mean_time_us"]
    roof = per_call / (gbps * 1e3) if gbps else None
    floor = row.get("launch_floor_us") or 0.0
    row.update({
        "bound": kind, "roof_kind": kind, "bytes": per_call, "flops": 0.0, "intensity": 0.0,
        "bytes_expr": (f"{per_call:,.0f} B per call crossed the {link_name} {part['direction']}"
                       f"{' from ' + part['memory'] + ' memory' if part['memory'] else ''} (the copies' recorded bytes)"),
        "achieved_gbps": per_call / (mean * 1e3) if mean > 0 else None, "achieved_tflops": 0.0,
        "roofline_time_us": roof, "memory_time_us": roof, "compute_time_us": 0.0 if roof is not None else None,
        "roof_pct": roof / mean * 100.0 if roof is not None and mean > 0 else None,
        "model_time_us": floor + roof if roof is not None else None,
        "model_pct": (floor + roof) / mean * 100.0 if roof is not None and mean > 0 else None,
        "peak_dtype": None, "peak_tflops": None, "limiter": None, "family": "memory",
        "peak_why": (f"a {part['direction']} copy crosses the {link_name}"
                     + (f" ({gbps:g} GB/s per direction), not DRAM" if gbps else
                        ": its bandwidth is not in the device table (pass --host-link-gbps)")),
    })
    row["over_roof"] = None
    if rate is not None and gbps and rate > gbps:
        row["over_roof"] = {"pct": rate / gbps * 100.0, "reason": "model",
                            "text": f"{rate:.3g} GB/s is faster than the {link_name}'s {gbps:g} GB/s per direction: "
                                    "the device table's link is not this machine's (pass --host-link-gbps)"}


def judge_recorded(row: dict, split: dict[str, dict] | None, device: dict, count: int, why: str) -> bool:
    """A signature with no cost from shapes (no op, no shapes, no formula: `why` says which) that is
    mostly host<->device or peer copies which recorded their bytes: held to the link with those bytes,
    in place; True when it was. Its time is then costed (FLOPs 0, bytes as recorded), not opaque."""
    if not split:
        return False
    part = dominant_host_copy(split, row["device_time_us"])
    if part is None or not part["bytes_known"]:
        return False
    mean = row["mean_time_us"]
    floor = min(row["kernel_count"] * (device.get("launch_floor_us") or 0.0), mean)
    row.update({"opaque": False, "cause": None, "reason": None, "launch_floor_us": floor,
                "notes": list(row["notes"]) + [f"{why}: the copies are judged from their own recorded bytes"],
                "copies": {k: {kk: v[kk] for kk in ("time_us", "bytes", "events")} for k, v in sorted(split.items())}})
    link_verdict(row, part, device, count)
    return True
