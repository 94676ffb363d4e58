"""What every renderer shows the same way: the formatters, the words for bounds and findings, and
the sentences read from the analysis (the verdict, the projection, the CPU-only lines).

Numbers, shapes, dtypes and kernel names are formatted by traceana/units.py only (one voice);
the fmt_* names below are its functions under the names the renderers use. The dict is read
through traceana/document.py, so a saved, older or hand-edited analysis renders too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana import units
from traceana.document import bound_of, by_bound, gpu_busy, mapping, seq, share
from traceana.roofline.bounds import BOUNDS
from traceana.units import num, text

#: The formatters every renderer uses, all from traceana/units.py (one voice).
fmt_time_us = units.us
fmt_ms = units.ms
fmt_sig = units.sig
fmt_si = units.si
fmt_bytes = units.bytes_iec
fmt_int = units.integer
fmt_pct = units.pct
fmt_dims = units.dims
fmt_types = units.dtypes
fmt_delta_us = units.signed_us
fmt_signed_pct = units.signed_pct
plural = units.plural
short_name = units.kernel_name


BOUND_WORDS: dict[str, str] = {
    "compute": "limited by compute throughput",
    "memory": "limited by DRAM bandwidth",
    "latency": "limited by launch overhead and latency",
    "underutilised": "far below both roofs and above the launch floor (grid, access pattern, occupancy)",
    "host_link": "copying between host and device (held to the PCIe / NVLink-C2C link)",
    "peer_link": "copying between GPUs (held to NVLink / Infinity Fabric)",
    "communication": "in collectives (judged by their bus bandwidth)",
    "unmodelled": "in ops traceana has no cost model for",
    "opaque": "in opaque ops (no shapes or no formula)",
}


def verdict(analysis: Mapping[str, Any]) -> str:
    """One plain-text sentence: where the time goes (the ledger's sentence) and which op matters
    most."""
    from traceana.render.first import sentence

    if sentence(analysis):
        out = sentence(analysis)
        ops = [o for o in seq(analysis.get("ops")) if isinstance(o, Mapping)]
        if ops:
            top = ops[0]
            out += (f" The biggest op is {short_name(top.get('name')) or '(unnamed op)'} "
                    f"({fmt_time_us(top.get('device_time_us'))}, {bound_of(top)}).")
        return out
    parts, total = by_bound(analysis)
    ops = [o for o in seq(analysis.get("ops")) if isinstance(o, Mapping)]
    cpu = mapping(analysis.get("cpu"))
    if cpu and not total:
        top = [r for r in seq(cpu.get("by_self_time")) if isinstance(r, Mapping)][:3]
        roof = mapping(mapping(cpu.get("roofline")).get("roofs"))
        judged = ("" if not roof else "judged against the CPU's roofs ("
                  + (f"device profile {text(roof.get('profile'), 120)}" if roof.get("source") == "profile"
                     else "traceana's defaults, not measured on this machine") + "). ")
        return (f"No GPU activity: a CPU-only trace, {judged or 'so no GPU roofline applies. '}"
                f"{plural(cpu.get('op_calls'), 'CPU op call')}, {fmt_time_us(cpu.get('top_level_us'))} in top-level ops"
                + (f" over {fmt_int(cpu.get('steps'))} steps" if num(cpu.get("steps")) else "")
                + ("; most self time in " + ", ".join(f"{text(r.get('name'), 60)} ({fmt_time_us(r.get('self_us'))})"
                                                      for r in top) if top else "") + ".")
    if not parts or not total:
        if not ops:
            return "No GPU time was found in this trace."
        return f"{len(ops):,} op signatures took GPU time; no breakdown by bound is available."
    top_bound = max(parts, key=lambda b: (parts[b], -BOUNDS.index(b)))
    pct = share(parts[top_bound], total)
    busy = gpu_busy(analysis)
    what = "GPU busy time" if busy is not None and busy["busy_us"] > 0 else "device time"
    out = f"{fmt_pct(pct)} of {fmt_time_us(total)} {what} is {BOUND_WORDS[top_bound]}"
    if ops:
        top = ops[0]
        name = short_name(top.get("name")) or "(unnamed op)"
        bits = [fmt_time_us(top.get("device_time_us"))]
        if num(top.get("roof_pct")) is not None:
            bits.append(f"{fmt_pct(top.get('roof_pct'))} of roof")
        bits.append(bound_of(top))
        out += f"; the biggest op is {name} ({', '.join(bits)})"
    return out + "."


FINDING_KINDS: dict[str, str] = {
    "memory_bound": "memory-bound", "compute_bound": "compute-bound", "tensor_core_dtype": "faster dtype",
    "gemm_shape": "GEMM shape", "fusion": "fusion", "launch_bound": "launch overhead", "idle_gap": "GPU idle",
    "host_copy": "host copy", "underutilised": "underutilised", "opaque_time": "not visible",
    "unmodelled": "no cost model", "comm_exposed": "exposed communication",
    # a CPU-only trace's levers (diagnose/cpu_levers.py)
    "cpu_threads": "cores short", "cpu_optimizer": "per-parameter optimizer", "cpu_dispatch": "per-op dispatch",
    "cpu_fusion": "fusion", "cpu_blas": "BLAS below roof", "cpu_underutilised": "underutilised",
    "cpu_data": "data loading", "cpu_python": "Python between ops",
}


def finding_kind(kind: Any) -> str:
    """A finding's kind as words (unknown kinds: underscores become spaces)."""
    k = text(kind, 60)
    return FINDING_KINDS.get(k, k.replace("_", " "))


def finding_tags(f: Mapping[str, Any]) -> list[str]:
    """Short tags for a finding: how sure it is, and whether it is a lever or a note."""
    tags = []
    if f.get("lever") is False:
        tags.append("note")
    conf = text(f.get("confidence"), 10)
    if conf in ("medium", "low"):
        tags.append(f"{conf} confidence")
    if f.get("estimated") is True:
        tags.append("estimated")
    return tags


def over_roof_mark(op: Mapping[str, Any]) -> str:
    """A short mark for an op measured faster than its roof ("" when it is not)."""
    o = op.get("over_roof")
    if not isinstance(o, Mapping):
        return ""
    return {"l2": "fits in L2", "estimate": "estimate", "algorithm": "Winograd/FFT"}.get(
        text(o.get("reason"), 20), "model over-counts")


def projection_line(analysis: Mapping[str, Any]) -> str:
    """One sentence: every lever applied together, each µs counted once ("" when absent)."""
    p = mapping(analysis.get("projection"))
    now, after = num(p.get("now_us")), num(p.get("after_us"))
    if now is None or after is None or not p.get("levers"):
        return ""
    claimed = num(p.get("claimed_us")) or 0.0
    line = (f"All {fmt_int(p.get('levers'))} levers together: device busy {fmt_time_us(now)} → "
            f"{fmt_time_us(after)} ({fmt_pct(share(now - after, now))} less)")
    span_now, span_after = num(p.get("span_now_us")), num(p.get("span_after_us"))
    if span_now and span_after is not None:
        line += f"; span {fmt_time_us(span_now)} → {fmt_time_us(span_after)}"
    if claimed > (now - after) + (num(p.get("idle_now_us")) or 0.0) - (num(p.get("idle_after_us")) or 0.0) + 1:
        line += (f". The findings claim {fmt_time_us(claimed)} one by one: they overlap, and each µs is "
                 "counted once here")
    return line + "."


#: The analysis' warning for a trace without GPU events; the verdict of such a trace says it already.
CPU_ONLY_WARNING = "no GPU activity in this trace"


def shown_warnings(analysis: Mapping[str, Any]) -> list[Any]:
    """The analysis' warnings as a report shows them: when a CPU-only trace's first line already says
    there was no GPU activity, its warning is not repeated."""
    from traceana.render.first import sentence

    cpu_only = bool(mapping(analysis.get("cpu"))) and not by_bound(analysis)[1]
    said = CPU_ONLY_WARNING.lower() in (sentence(analysis) or verdict(analysis)).lower()
    out = []
    for w in seq(analysis.get("warnings")):
        if not text(w) or (cpu_only and said and text(w).startswith(CPU_ONLY_WARNING)):
            continue
        out.append(w)
    return out


#: Bounds a CPU-only trace's verdicts add to BOUNDS (diagnose/cpu_roofline.py).
CPU_ONLY_BOUNDS = ("dispatch", "composite")


def row_bound(op: Mapping[str, Any]) -> str:
    """A row's bound as the report colours and filters it: one of BOUNDS or a CPU verdict's own
    (dispatch, composite), else "unmodelled"."""
    b = op.get("bound")
    return b if isinstance(b, str) and b in CPU_ONLY_BOUNDS else bound_of(op)


def cpu_rows(analysis: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(op, calls, self time, total time) rows of a CPU-only trace's breakdown."""
    cpu = mapping(analysis.get("cpu"))
    return [(text(r.get("name"), 120), fmt_int(r.get("calls")), fmt_time_us(r.get("self_us")),
             fmt_time_us(r.get("total_us"))) for r in seq(cpu.get("by_self_time")) if isinstance(r, Mapping)]


def profile_sentence(prof: Mapping[str, Any]) -> str:
    """One sentence naming the device profile a report used and whether its roofs applied."""
    p = mapping(prof)
    if not p:
        return ""
    name = (f"device profile {text(p.get('file'), 120)} ({text(p.get('name'), 120)}, {text(p.get('kind'), 10)}, "
            f"measured {text(p.get('date'))[:10]})")
    if p.get("applied") is False:
        if text(p.get("kind")) == "cpu":
            return f"{name}: not applied (a CPU profile; a GPU trace keeps its datasheet roofs)"
        return f"{name}: not applied (a GPU profile; a CPU-only trace is judged against the default CPU roofs)"
    unusable = sorted(text(k, 40) for k in mapping(p.get("unusable")))
    if unusable:  # figures calibrate found unstable or contradictory: the datasheet / CPU default stands in
        name += f" (not used: {', '.join(unusable)}, unstable or contradictory when measured)"
    if text(p.get("kind")) == "cpu":
        return f"{name}: CPU ops judged against its measured BLAS, memory and dispatch figures"
    peaks = ", ".join(f"{text(k, 20)} {fmt_sig(v)}" for k, v in sorted(mapping(p.get("peak_tflops")).items())
                      if num(v) is not None)
    dram = num(p.get("dram_gbps"))
    roofs = "; ".join(x for x in ((f"{peaks} TFLOP/s" if peaks else ""),
                                  (f"DRAM {fmt_sig(dram)} GB/s" if dram is not None else "")) if x)
    return (f"{name}: ops shown against its achievable roofs ({roofs}) as well as the datasheet; "
            "savings measured against achievable")


def cpu_verdict_rows(analysis: Mapping[str, Any]) -> list[dict[str, str]]:
    """A CPU-only trace's per-op roofline verdicts as display strings."""
    roof = mapping(mapping(analysis.get("cpu")).get("roofline"))
    out = []
    for v in seq(roof.get("verdicts")):
        if not isinstance(v, Mapping):
            continue
        gf, gb = num(v.get("achieved_gflops")), num(v.get("achieved_gbps"))
        out.append({"name": text(v.get("name"), 120), "dims": fmt_dims(v.get("input_dims"), 60),
                    "types": fmt_types(v.get("input_types"), 40), "calls": fmt_int(v.get("calls")),
                    "self": fmt_time_us(v.get("self_us")), "per_call": fmt_time_us(v.get("self_per_call_us")),
                    "gflops": f"{gf:,.1f}" if gf is not None else "—",
                    "gbps": f"{gb:,.2f}" if gb is not None else "—",
                    "pct": fmt_pct(v.get("roof_pct")), "bound": text(v.get("bound"), 20),
                    "text": text(v.get("text"), 600)})
    return out


def cpu_roof_lines(analysis: Mapping[str, Any]) -> list[str]:
    """The CPU roofs used and the dispatch total, as sentences ([] without CPU verdicts)."""
    roof = mapping(mapping(analysis.get("cpu")).get("roofline"))
    if not roof:
        return []
    r = mapping(roof.get("roofs"))
    peaks = ", ".join(f"{text(k, 10)} {fmt_sig(v)}" for k, v in sorted(mapping(r.get("peak_tflops")).items())
                      if num(v) is not None)
    lines = [text(r.get("note"), 400),
             f"Roofs: BLAS {peaks} TFLOP/s; memory {fmt_sig(r.get('dram_gbps'))} GB/s; dispatch "
             f"{fmt_time_us(r.get('dispatch_us'))} per op."]
    by = mapping(roof.get("by_bound"))
    total = num(roof.get("self_us"))
    if by and total:
        lines.append("CPU self time by bound: " + ", ".join(
            f"{text(k, 20)} {fmt_time_us(v)} ({fmt_pct(share(v, total))})"
            for k, v in sorted(by.items(), key=lambda kv: -(num(kv[1]) or 0.0))) + ".")
    d = text(mapping(roof.get("dispatch")).get("text"), 600)
    if d:
        lines.append(d + ".")
    return lines
