"""A CPU-only trace shown the way a GPU trace is: its judged op signatures (cpu.roofline.verdicts) as
rows of the ops table and points of the roofline chart, its CPU roofs as the chart's roofs, its CPU
as the device card. Display data only, read from the analysis dict (every field may be missing).

A verdict's self time stands where a GPU op's device time stands; its roof time is max(compute,
memory) per call against the CPU's BLAS figure and memory bandwidth (diagnose/cpu_roofline.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana.document import mapping, seq, share
from traceana.render.first import cpu_only
from traceana.render.views import fmt_int, fmt_pct, fmt_sig, fmt_time_us, profile_sentence
from traceana.units import num, text

__all__ = ["cpu_only", "cpu_ops", "cpu_device", "cpu_device_card", "cpu_coverage", "CPU_BOUND_WORDS"]

#: The CPU verdicts' bounds, in the order the report lists them.
CPU_BOUNDS = ("compute", "memory", "dispatch", "underutilised", "composite", "unmodelled")
CPU_BOUND_WORDS = {"compute": "at the BLAS roof's side (FLOPs set the time)",
                   "memory": "at the memory roof's side (bytes set the time)",
                   "dispatch": "less work than the per-op dispatch cost",
                   "underutilised": "under a tenth of the roofline model",
                   "composite": "glue in ops whose work is counted in the ops they call",
                   "unmodelled": "no FLOP/byte formula"}


def _roofs(a: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(mapping(mapping(a.get("cpu")).get("roofline")).get("roofs"))


def cpu_ops(a: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The CPU verdicts as op rows (the keys the ops table and the chart read), most self time first."""
    out = []
    for v in seq(mapping(mapping(a.get("cpu")).get("roofline")).get("verdicts")):
        if not isinstance(v, Mapping):
            continue
        flops, nbytes = num(v.get("flops")), num(v.get("bytes"))
        c, m = num(v.get("compute_us")), num(v.get("memory_us"))
        gf = num(v.get("achieved_gflops"))
        out.append({
            "id": text(v.get("id"), 40), "name": v.get("name"), "input_dims": v.get("input_dims"),
            "input_types": v.get("input_types"), "count": v.get("calls"), "device_time_us": v.get("self_us"),
            "mean_time_us": v.get("self_per_call_us"), "flops": flops, "bytes": nbytes,
            "intensity": flops / nbytes if flops is not None and nbytes else None,
            "achieved_tflops": gf / 1000 if gf is not None else None, "achieved_gbps": v.get("achieved_gbps"),
            "roofline_time_us": max(c, m) if c is not None and m is not None else None,
            "roof_pct": v.get("roof_pct"), "bound": text(v.get("bound"), 20) or "unmodelled",
            "peak_tflops": v.get("peak_tflops"), "peak_dtype": v.get("peak"), "peak_why": v.get("peak_why"),
            "peak_label": f"{text(v.get('peak'), 10)} BLAS" if text(v.get("peak")) else "",
            "family": v.get("family"), "flops_expr": v.get("flops_expr"), "bytes_expr": v.get("bytes_expr"),
            "estimated": v.get("estimated") is True, "reason": v.get("text"),
            **{k: v.get(k) for k in ("module", "module_class", "module_instances", "module_share", "source",
                                     "source_function", "phase")},
        })
    return out


def cpu_device(a: Mapping[str, Any]) -> dict[str, Any]:
    """The CPU as the chart's device: its roofs (BLAS TFLOP/s per dtype, memory GB/s)."""
    r = _roofs(a)
    dev = mapping(mapping(a.get("cpu")).get("device"))
    return {"name": text(dev.get("name"), 120) or "CPU", "peak_tflops": dict(mapping(r.get("peak_tflops"))),
            "dram_gbps": r.get("dram_gbps")}


def cpu_device_card(a: Mapping[str, Any]) -> dict[str, Any]:
    """The device card of a CPU-only trace: the CPU, where its roofs came from, the roofs."""
    r = _roofs(a)
    dev = mapping(mapping(a.get("cpu")).get("device"))
    name = text(dev.get("name"), 200)
    measured = set(text(k, 10) for k in seq(r.get("measured")))
    peaks = [(f"BLAS {text(k, 10)}", f"{fmt_sig(v)} TFLOP/s" + ("" if k in measured else " (default)"))
             for k, v in sorted(mapping(r.get("peak_tflops")).items()) if num(v) is not None]
    facts = [("Threads", fmt_int(dev.get("threads")) if num(dev.get("threads")) else ""),
             ("Dispatch per op", fmt_time_us(r.get("dispatch_us")) if num(r.get("dispatch_us")) else ""),
             ("Roofs from", text(r.get("note"), 400)),
             ("Device profile", profile_sentence(mapping(mapping(a.get("device")).get("profile"))))]
    return {"name": name or "CPU (model not recorded in the trace)", "key": "", "cpu": True,
            "dram": f"{fmt_sig(r.get('dram_gbps'))} GB/s" if num(r.get("dram_gbps")) else "—",
            "dram_label": "Memory bandwidth", "peaks_label": "roof",
            "peaks": peaks, "facts": [(k, v) for k, v in facts if v], "notes": []}


def cpu_coverage(a: Mapping[str, Any]) -> dict[str, Any]:
    """How much of the CPU self time traceana could put a cost on: by verdict, modelled or not."""
    roof = mapping(mapping(a.get("cpu")).get("roofline"))
    total = num(roof.get("self_us"))
    by = mapping(roof.get("by_bound"))
    costed = sum(num(by.get(k)) or 0.0 for k in ("compute", "memory", "underutilised"))
    rows = [("CPU self time", fmt_time_us(total), fmt_pct(100.0 if total else None))]
    rows += [(f"{k} ({CPU_BOUND_WORDS.get(text(k), '')})".replace(" ()", ""), fmt_time_us(v), fmt_pct(share(v, total)))
             for k, v in sorted(by.items(), key=lambda kv: -(num(kv[1]) or 0.0)) if num(v)]
    return {"rows": rows, "costed": fmt_pct(share(costed, total)),
            "signatures": fmt_int(roof.get("signatures"))}
