"""Findings: what to do first, each with an honest estimate of recoverable time (saving_us).

saving_us, per kind (all upper bounds of what that one change recovers; the text says which):
  memory_bound / compute_bound  measured time minus the time at the op's roof (a better kernel
                                can win no more; to go below the floor change bytes or dtype)
  tensor_core_dtype             measured time minus the time at the faster roof, assuming the op
                                keeps the fraction of the roof it reaches now
  gemm_shape                    the share of the measured time spent on padding: 1 - tile x wave
                                efficiency (only when a kernel name shows the tile); for misaligned
                                dims, the gap to the roof fraction that the trace's aligned GEMMs of
                                the same dtype reach
  fusion                        bytes of the intermediates at the chain's measured bandwidth; for
                                chains of tiny (latency-bound) ops, the measured time of all but the
                                longest kernel; for unfused attention, the softmax's time twice
  launch_bound                  kernel time above the roofs + the host-wait idle right before
  idle_gap                      host-wait and kernel-wait idle not already counted above
Findings are ranked by saving_us, so the first three are the three biggest wins.
"""

from __future__ import annotations

import re

from traceana import units as u
from traceana.diagnose import gemm_shape as gs
from traceana.diagnose.advice import GATHER_FIX, LATENCY_FIX, OPAQUE_ADVICE, scattered
from traceana.link import CAUSES
from traceana.roofline import PEAK_LABEL

MIN_SHARE = 0.005  # ops under 0.5% of device time get no finding of their own
HOST_LINK_GBPS = 25.0  # a pinned host<->device copy over PCIe 4.0 x16 reaches about this
MAX_FINDINGS = 25
_FASTER = {"fp32": ("tf32_tc", "bf16_tc", "fp16_tc"), "tf32_tc": ("bf16_tc", "fp16_tc"),
           "bf16_tc": ("fp8_tc",), "fp16_tc": ("fp8_tc",)}


def _above_roof(row: dict) -> float:
    roof = row.get("roofline_time_us")
    if roof is None:
        return 0.0
    return max(row["device_time_us"] - row["count"] * roof, 0.0)


def _what(row: dict) -> str:
    dims = u.dims(row.get("input_dims"))
    dt = row.get("dtype") or ""
    return f"{row['name']} [{dims}] {dt}".strip()


def _calls(n: int) -> str:
    return f"{n:,} call{'s' if n != 1 else ''}"


def find(rows: list[dict], device: dict, total_us: float, extra: list[dict] | None = None) -> list[dict]:
    """Row findings (+ trace-level ones in extra), ranked by saving_us."""
    out: list[dict] = []
    peaks = device.get("peak_tflops") or {}
    latency = []
    copies: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        share = row["device_time_us"] / total_us if total_us > 0 else 0.0
        bound = row["bound"]
        if bound == "latency":
            latency.append(row)
            continue
        if share < MIN_SHARE:
            continue
        copy = _host_copy(row) if bound == "memory" else None
        if copy:  # one finding per op and copy direction, however many signatures
            copies.setdefault((row["name"], copy), []).append(row)
        elif bound == "memory":
            out.append(memory_finding(row, device))
        elif bound == "compute":
            out.append(compute_finding(row, device))
    for (name, copy), group in copies.items():
        out.append(memory_finding(group[0], device) if len(group) == 1 else host_copies_finding(group, copy, device))
    out.extend(gs.shape_findings(rows, device, total_us))
    if extra is None and latency:  # without the trace, the launch finding is built from rows alone
        out.extend(launch_findings(latency, total_us, None))
    out.extend(extra or [])
    out.extend(_opaque_gemm_findings(rows, peaks, total_us))
    out.sort(key=lambda f: (-f["saving_us"], f["kind"], f["title"]))
    # what the analysis could not see is always said, however many findings save more
    return out[:MAX_FINDINGS] + _coverage_findings(rows, total_us)


def _host_copy(row: dict) -> str | None:
    """The kernel name when the op's time is a host<->device memcpy (PCIe, not DRAM, bound)."""
    for k in row.get("kernels") or []:
        if k["name"].startswith("Memcpy") and ("HtoD" in k["name"] or "DtoH" in k["name"]) \
                and k["time_us"] >= 0.5 * row["device_time_us"]:
            return k["name"]
    return None


def host_copies_finding(rows: list[dict], copy: str, device: dict) -> dict:
    """Several signatures of one op copying host<->device the same way: one finding for them all."""
    bw = device.get("dram_gbps")
    t = sum(r["device_time_us"] for r in rows)
    calls = sum(r["count"] for r in rows)
    each_way = sum(r["bytes"] / 2 * r["count"] for r in rows)  # bytes count the read and the write
    rates = [r["bytes"] / 2 / (r["mean_time_us"] * 1e3) for r in rows if r["mean_time_us"] > 0]
    links = [r["bytes"] / 2 * r["count"] / (HOST_LINK_GBPS * 1e3) for r in rows]
    saving = sum(max(r["device_time_us"] - link, 0.0) for r, link in zip(rows, links))
    link = sum(links)
    pageable = "Pageable" in copy
    span = f"{min(rates):.3g}–{max(rates):.3g} GB/s" if rates else "an unknown rate"
    return {
        "kind": "host_copy",
        "title": f"{rows[0]['name']} copies host<->device at {span} ({copy}), {len(rows)} signatures",
        "text": (f"{rows[0]['name']}: {len(rows)} signatures, {_calls(calls)}, {u.us(t)}, {u.nbytes(each_way)} each "
                 f"way in all. It crosses PCIe/NVLink, not DRAM, so the {bw:g} GB/s roof does not apply. "
                 + ("Pageable host memory makes the copy synchronous and staged through a bounce buffer: pin the "
                    "host tensors (pin_memory=True, tensor.pin_memory()) and copy with non_blocking=True so they can "
                    "overlap with kernels. " if pageable else "Overlap them with compute (non_blocking=True on a "
                                                               "side stream) or keep the data on the GPU. ")
                 + f"At the {HOST_LINK_GBPS:g} GB/s a pinned copy reaches on PCIe 4.0 x16 they would take "
                   f"{u.us(link)}. Saving shown: per signature, its time minus that, summed ({u.us(saving)})."),
        "ops": [r["id"] for r in rows][:50],
        "saving_us": saving,
    }


def memory_finding(row: dict, device: dict) -> dict:
    bw = device.get("dram_gbps")
    n, mean, floor = row["count"], row["mean_time_us"], row["memory_time_us"]
    copy = _host_copy(row)
    if copy:
        t = row["device_time_us"]
        link = row["bytes"] / 2 * n / (HOST_LINK_GBPS * 1e3)  # bytes count the read and the write
        pageable = "Pageable" in copy
        return {
            "kind": "host_copy",
            "title": f"{row['name']} copies host<->device at {row['bytes'] / 2 / (mean * 1e3):.3g} GB/s ({copy})",
            "text": (f"{_what(row)}: {_calls(n)}, {u.us(t)}, {u.nbytes(row['bytes'] / 2)} each way per call. It crosses "
                     f"PCIe/NVLink, not DRAM, so the {bw:g} GB/s roof does not apply. "
                     + ("Pageable host memory makes the copy synchronous and staged through a bounce buffer: pin the "
                        "host tensor (pin_memory=True, tensor.pin_memory()) and copy with non_blocking=True so it can "
                        "overlap with kernels. " if pageable else "Overlap it with compute (non_blocking=True on a "
                                                                   "side stream) or keep the data on the GPU. ")
                     + (f"At the {HOST_LINK_GBPS:g} GB/s a pinned copy reaches on PCIe 4.0 x16 it would take "
                        f"{u.us(link)}. Saving shown: {u.us(t)} - {u.us(link)}." if link < t else
                        f"It already runs faster than the {HOST_LINK_GBPS:g} GB/s of a pinned PCIe 4.0 x16 copy: only "
                        "fewer or overlapped copies help (no saving estimated).")),
            "ops": [row["id"]],
            "saving_us": max(t - link, 0.0),
        }
    fl_peak = row.get("peak_tflops")
    flop_us = row["flops"] / (fl_peak * 1e6) if fl_peak and row.get("flops") else None
    matrix = row.get("family") in ("gemm", "conv", "attention")
    if matrix:
        why = (f"Its FLOPs need {u.us(flop_us)} at {fl_peak:g} TFLOP/s, less than its bytes: the matrices are too "
               "thin or small for the FLOPs to matter (arithmetic intensity "
               f"{row.get('intensity') or 0:.3g} FLOP/B). More work per call (a larger batch, fewer and larger "
               "matmuls) raises the intensity; a fused kernel that keeps its output on chip moves fewer bytes. "
               if flop_us is not None else "")
    elif scattered(row):
        why = ((f"Its {u.count(row['flops'])} FLOPs would need {u.us(flop_us)} at {fl_peak:g} TFLOP/s: irrelevant. "
                if flop_us is not None else "") + GATHER_FIX)
    else:
        why = ((f"Its {u.count(row['flops'])} FLOPs would need {u.us(flop_us)} at {fl_peak:g} TFLOP/s: irrelevant. "
                if flop_us is not None else "")
               + "Any element-wise op over the same tensors would take as long: only fewer bytes help: fuse it with "
                 "its neighbours (see fusion findings) or use a narrower dtype.")
        if row.get("dtype") == "fp32":
            why += f" In bf16/fp16 the bytes halve and so does the floor ({u.us(floor / 2)} per call)."
    return {
        "kind": "memory_bound",
        "title": f"{row['name']} is memory-bound at {u.pct(row['roof_pct'])} of the {bw:g} GB/s roof",
        "text": (f"{_what(row)}: {_calls(n)}, {u.us(row['device_time_us'])}. Each call moves {u.nbytes(row['bytes'])}; "
                 f"at {bw:g} GB/s that takes at least {u.us(floor)} ({row['bytes']:,.0f} B / {bw:g} GB/s), "
                 f"measured {u.us(mean)} per call ({u.rate_gbps(row['achieved_gbps'])}, {u.pct(row['roof_pct'])} "
                 f"of the roof). {why} Saving shown: time above the floor, ({u.us(mean)} - {u.us(floor)}) x {n:,}."),
        "ops": [row["id"]],
        "saving_us": _above_roof(row),
    }


def compute_finding(row: dict, device: dict) -> dict:
    peaks = device.get("peak_tflops") or {}
    used, key = row.get("peak_tflops") or 0, row.get("peak_dtype")
    matrix = row.get("family") in ("gemm", "conv", "attention")
    tdt = gs.tensor_dtype(row) if matrix else None
    if key == "fp32" and matrix and tdt is None:
        f = _dtype_finding(row, device, peaks)
        if f:
            return f
    total_floor = row["count"] * row["compute_time_us"]
    note = ""
    if key == "fp32" and tdt == "tf32" and peaks.get("tf32_tc"):
        # the kernel name shows TF32 tensor cores (e.g. cutlass s1688 / xmma): hold it to that roof
        used, key = peaks["tf32_tc"], "tf32_tc"
        total_floor = row["count"] * row["flops"] / (used * 1e6)
        note = (f" Its kernels ({', '.join(k['name'][:50] for k in row.get('kernels') or [])}) run on TF32 tensor "
                f"cores, so the {used:g} TFLOP/s TF32 roof applies: {total_floor / row['device_time_us'] * 100:.1f}% "
                "of it.")
    faster = ""
    for k in _FASTER.get(key or "", ()):
        if peaks.get(k, 0) > used:
            faster = (f" A faster dtype raises the roof: {PEAK_LABEL[k]} {peaks[k]:g} TFLOP/s "
                      f"({peaks[k] / used:.1f}x) would put the floor at {u.us(total_floor * used / peaks[k])}"
                      + (" (needs an fp8 recipe: Transformer Engine, torchao float8)." if k == "fp8_tc" else "."))
            break
    return {
        "kind": "compute_bound",
        "title": f"{row['name']} is compute-bound at {u.pct(total_floor / row['device_time_us'] * 100)} of "
                 f"{used:g} TFLOP/s ({key})",
        "text": (f"{_what(row)}: {_calls(row['count'])}, {u.count(row['flops'])} FLOPs each ({row.get('flops_expr')}). "
                 f"At {used:g} TFLOP/s ({row.get('peak_why') if not note else 'TF32 tensor cores'}) they need at "
                 f"least {u.us(total_floor)}; measured "
                 f"{u.us(row['device_time_us'])} ({u.rate_tflops(row['achieved_tflops'])}). FLOPs set its time: "
                 f"bytes do not.{note}{faster} Saving shown: time above the floor."),
        "ops": [row["id"]],
        "saving_us": max(row["device_time_us"] - total_floor, 0.0),
    }


def _dtype_finding(row: dict, device: dict, peaks: dict) -> dict | None:
    used = row.get("peak_tflops") or 0
    better = [(k, peaks[k]) for k in ("tf32_tc", "bf16_tc", "fp16_tc") if peaks.get(k, 0) > used]
    if not better or not row.get("flops"):
        return None
    k, v = better[0]
    eff = min((row.get("roof_pct") or 100.0) / 100.0, 1.0)
    best = row["count"] * row["flops"] / (v * 1e6)
    likely = best / eff if eff > 0 else best
    names = ", ".join(x["name"][:60] for x in row.get("kernels") or [])
    dev = device.get("name") or "this device"
    if k == "tf32_tc":
        how = "torch.backends.cuda.matmul.allow_tf32 = True (torch.set_float32_matmul_precision('high'))"
        limits = f"{dev} has TF32 tensor cores at {v:g} TFLOP/s, but this GEMM did not use them"
    else:
        dt = k.replace("_tc", "")
        how = f"torch.autocast('cuda', dtype=torch.{'bfloat16' if dt == 'bf16' else 'float16'})"
        limits = (f"{dev} has no TF32 tensor cores, so fp32 matmuls run on CUDA cores at {used:g} TFLOP/s; "
                  f"its {dt} tensor cores offer {v:g} TFLOP/s")
    return {
        "kind": "tensor_core_dtype",
        "title": f"{row['name']} runs fp32 on CUDA cores at {u.pct(row['roof_pct'])} of {used:g} TFLOP/s: "
                 f"{k.replace('_tc', '')} tensor cores offer {v / used:.1f}x",
        "text": (f"{_what(row)}: {_calls(row['count'])}, {u.count(row['flops'])} FLOPs each; kernels {names} show no "
                 f"tensor-core (TF32) path. {limits}. At {used:g} TFLOP/s the FLOPs need at least "
                 f"{u.us(row['count'] * row['compute_time_us'])}; measured {u.us(row['device_time_us'])} "
                 f"({u.rate_tflops(row['achieved_tflops'])}, {u.pct(row['roof_pct'])}). At {v:g} TFLOP/s they need "
                 f"{u.us(best)} (best case); at the same {eff * 100:.0f}% of that roof about {u.us(likely)}. "
                 f"Fix: {how}, if the model tolerates the precision. Saving shown: {u.us(row['device_time_us'])} "
                 f"- {u.us(likely)}."),
        "ops": [row["id"]],
        "saving_us": max(row["device_time_us"] - likely, 0.0),
    }


def launch_findings(latency: list[dict], total_us: float, facts: dict | None) -> list[dict]:
    """One launch_bound finding: latency-bound ops (tiny kernels far under both roofs) and the
    short idle gaps between kernels (the fixed cost of issuing kernels one at a time)."""
    t = sum(r["device_time_us"] for r in latency)
    above = sum(_above_roof(r) for r in latency)
    short = facts["short_us"] if facts else 0.0
    saving = above + short
    if total_us <= 0 or max(t, saving) < MIN_SHARE * total_us:
        return []
    n = sum(r["count"] * (r.get("kernel_count") or 1) for r in latency)
    parts = []
    if facts and facts["short_gaps"]:
        parts.append(f"{facts.get('events', facts['kernels']):,} GPU events (kernels, copies, memsets) ran one by one: "
                     f"{facts['short_gaps']:,} gaps of at most "
                     f"{facts['short_limit_us']:g} µs between them add up to {u.us(short)} of GPU idle (median "
                     f"{u.us(facts['short_median_us'])} per gap), the fixed cost of launching each kernel separately.")
    if latency:
        parts.append(f"{len(latency)} op signatures are latency-bound, far under both roofs: {n:,.0f} kernels of "
                     f"{u.us(t / max(n, 1))} on average, {u.us(t)} ({t / total_us * 100:.1f}% of device time), "
                     f"{u.us(above)} of it above their roofs (fixed per-kernel cost).")
    if facts and facts["launches"]:
        per_la = facts["launch_us"] / facts["launches"]
        per_k = facts["kernel_us"] / max(facts["kernels"], 1)
        parts.append(f"CPU side: {facts['launches']:,} launch calls took {u.us(facts['launch_us'])} "
                     f"({u.us(per_la)} per launch, against {u.us(per_k)} per kernel on the GPU)"
                     + ("; launching a kernel costs the CPU more than running it costs the GPU, so the CPU sets "
                        "the pace." if per_la > per_k else "."))
        if facts["lat_launches"]:
            parts.append(f"The latency-bound kernels alone took {facts['lat_launches']:,} launches, "
                         f"{u.us(facts['lat_launch_us'])} of CPU time.")
    parts.append(LATENCY_FIX)
    parts.append("Saving shown: " + " + ".join(x for x in (f"the short gaps ({u.us(short)})" if short else "",
                                                           f"time above the roofs ({u.us(above)})" if above else "") if x)
                 + ", an upper bound: graphs and fusion shrink but do not remove per-kernel costs.")
    title = (f"{n:,.0f} tiny kernels are launch-bound" if latency and t >= short
             else f"Launch overhead: {facts['short_gaps']:,} short gaps between kernels" if facts
             else f"{n:,.0f} tiny kernels are launch-bound")
    return [{"kind": "launch_bound", "title": f"{title}: {u.us(saving)} recoverable with CUDA graphs / fusion",
             "text": " ".join(parts),
             "ops": [r["id"] for r in sorted(latency, key=lambda r: -r["device_time_us"])[:50]],
             "saving_us": saving}]


def _opaque_gemm_findings(rows: list[dict], peaks: dict, total_us: float) -> list[dict]:
    """GEMM kernels with no shapes (compiled regions, no launch): the dtype from the kernel name."""
    tf32_t, cc_t, ids, align1, names = 0.0, 0.0, [], 0.0, set()
    for r in rows:
        if not r.get("opaque"):
            continue
        for k in r.get("kernels") or []:
            nm = k["name"].lower()
            if "gemm" not in nm or any(x in nm for x in ("bf16", "f16", "h1688", "h16816", "i8", "e4m3")):
                continue
            if any(h in nm for h in gs.TF32_HINTS):
                tf32_t += k["time_us"]
            elif any(h in nm for h in gs.CUDA_CORE_HINTS):
                cc_t += k["time_us"]
            else:
                continue
            align1 += k["time_us"] if "align1" in nm or "align2" in nm else 0.0
            m = re.search(r"\w*gemm\w*", k["name"])
            names.add(m.group(0) if m else k["name"][:70])
            if r["id"] not in ids:
                ids.append(r["id"])
    t = tf32_t + cc_t
    if total_us <= 0 or t / total_us < 0.01 or not peaks.get("bf16_tc"):
        return []
    base = peaks.get("tf32_tc") or peaks.get("fp32") or peaks["bf16_tc"]
    saving = tf32_t * (1 - (peaks.get("tf32_tc") or base) / peaks["bf16_tc"]) + \
        cc_t * (1 - (peaks.get("fp32") or base) / peaks["bf16_tc"])
    text = (f"{u.us(t)} of GEMM kernels with no recorded shapes run fp32 inputs ({u.us(tf32_t)} on TF32 tensor "
            f"cores, {u.us(cc_t)} on CUDA cores), e.g. {', '.join(sorted(names)[:3])}. bf16 tensor cores offer "
            f"{peaks['bf16_tc']:g} TFLOP/s vs {peaks.get('tf32_tc') or '-'} (TF32) / {peaks.get('fp32') or '-'} "
            "(fp32) TFLOP/s: torch.autocast('cuda', dtype=torch.bfloat16). ")
    if align1:
        text += (f"{u.us(align1)} of them are align1/align2 kernels: some of M, N, K are not multiples of 4 "
                 "(16 bytes of fp32); padding them (e.g. to multiples of 8) lets full-width kernels run. ")
    text += "Saving shown: best case if they are compute-bound, time x (1 - old roof / bf16 roof)."
    return [{"kind": "tensor_core_dtype", "title": f"{u.us(t)} of fp32 GEMM kernels (no shapes) could run in bf16",
             "text": text, "ops": ids[:50], "saving_us": saving}]


def _coverage_findings(rows: list[dict], total_us: float) -> list[dict]:
    out = []
    by_cause: dict[str, list[dict]] = {}
    unmodelled = []
    for r in rows:
        if r["bound"] == "opaque":
            by_cause.setdefault(r.get("cause") or "", []).append(r)
        elif r["bound"] == "unmodelled":
            unmodelled.append(r)
    for cause, rs in sorted(by_cause.items()):
        t = sum(r["device_time_us"] for r in rs)
        if total_us <= 0 or t / total_us < 0.01:
            continue
        out.append({
            "kind": "opaque_time",
            "title": f"{u.us(t)} ({t / total_us * 100:.1f}%) of device time has no shapes: {cause.replace('_', ' ')}",
            "text": f"{CAUSES.get(cause, cause)}. {OPAQUE_ADVICE.get(cause, '')}",
            "ops": [r["id"] for r in rs[:50]],
            "saving_us": 0.0,
        })
    t = sum(r["device_time_us"] for r in unmodelled)
    if unmodelled and total_us > 0 and t / total_us >= 0.01:
        names = sorted({r["name"] for r in unmodelled})
        why: dict[str, str] = {}
        for r in unmodelled:  # rows are sorted by time: the first reason per name is its biggest
            why.setdefault(r["name"], r.get("reason") or "no formula")
        top = sorted(why, key=lambda n: -sum(r["device_time_us"] for r in unmodelled if r["name"] == n))[:5]
        out.append({
            "kind": "unmodelled",
            "title": f"{u.us(t)} ({t / total_us * 100:.1f}%) of device time is in ops with no cost formula",
            "text": "No FLOP/byte model for: " + ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
                    + ". Why, for the largest: " + "; ".join(f"{n}: {why[n]}" for n in top) + ".",
            "ops": [r["id"] for r in unmodelled[:50]],
            "saving_us": 0.0,
        })
    return out
