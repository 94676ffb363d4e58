"""Findings: what to do first, each with an honest estimate of recoverable time (saving_us).

saving_us, per kind (all upper bounds of what that one change recovers; the text says which):
  memory_bound                  measured time minus the time at the op's roof (a better kernel
                                can win no more; to go below the floor change bytes or dtype)
  compute_bound                 measured time minus the time at an achievable fraction of the op's
                                compute roof (roofline/achievable.py: the device profile's measured
                                roof, else the most of that roof this trace shows, else the
                                architecture's default), never 100% of the datasheet
  tensor_core_dtype             measured time minus the time at the faster roof, assuming the op
                                keeps the fraction of the roof it reaches now
  gemm_shape                    the share of the measured time spent on padding: 1 - tile x wave
                                efficiency (only when a kernel name shows the tile); for misaligned
                                dims, the gap to the roof fraction that the trace's aligned GEMMs of
                                the same dtype reach
  fusion                        bytes of the intermediates at the chain's measured bandwidth; for
                                chains of tiny (latency-bound) ops, the measured time of all but the
                                longest kernel; for unfused attention, the softmax's time twice
  launch_bound                  the launch gaps (ledger idle.launch_gaps) + the fixed cost of the
                                latency-bound kernels: their number x the measured per-kernel cost
                                (what this device's shortest kernels take), at most their exposed time
Every lever then names the ledger term it comes from and is capped by it (diagnose/sources.py).
Every saving is measured against the op's model time (launch floor + roofline time, roofline/judge.py):
the launch floor is recovered only by fewer kernels (launch_bound, fusion), not by a better kernel.
Findings are ranked by saving_us x confidence (diagnose/projection.py), so the first three are the
three biggest sure wins; a finding with nothing to recover is a note, listed after the levers.
"""

from __future__ import annotations

from traceana import units as u
from traceana.diagnose import gemm_shape as gs
from traceana.diagnose.context import INDUCTOR_KERNEL
from traceana.diagnose.advice import OPAQUE_ADVICE, OPAQUE_FIX, compute_fix, fit_to_run, memory_advice, memory_fix
from traceana.diagnose.projection import MERGE_KINDS, annotate
from traceana.diagnose.sources import attach
from traceana.diagnose.launch_bound import launch_findings
from traceana.roofline import achievable as achv
from traceana.link.attribute import CAUSES
from traceana.roofline.judge import PEAK_LABEL

MIN_SHARE = 0.005  # ops under 0.5% of device time get no finding of their own
MAX_FINDINGS = 25  # findings kept, besides the other members of a plan lever's group and ALWAYS_SAY notes
# notes that say where time went which no lever here can recover: kept past the cap
ALWAYS_SAY = frozenset({"comm_wait", "comm_unsized", "stream_wait"})
# an opaque cause holding this share of device time is named in "Do this first" where levers leave a place:
# a first screen with one 50 µs lever over a run 97% uncosted would say nothing of why
OPAQUE_SAYS_FIRST = 0.30
_FASTER = {"fp32": ("tf32_tc", "bf16_tc", "fp16_tc"), "tf32_tc": ("bf16_tc", "fp16_tc"),
           "bf16_tc": ("fp8_tc",), "fp16_tc": ("fp8_tc",)}


def _above_roof(row: dict) -> float:
    """Time above the op's model time (launch floor + roofline time): what a better kernel could win.
    With a device profile, the model at the achievable roofs (what this machine has shown it does)."""
    ach = row.get("achievable") or {}
    roof = ach.get("model_time_us") if ach.get("model_time_us") is not None else row.get("model_time_us")
    if roof is None:
        roof = row.get("roofline_time_us")
    if roof is None:
        return 0.0
    return max(row["device_time_us"] - row["count"] * roof, 0.0)


def achievable_note(row: dict) -> str:
    """With a device profile: the op against the measured roof, and what the saving is measured
    against ("" without one)."""
    ach = row.get("achievable")
    if not isinstance(ach, dict) or ach.get("model_time_us") is None:
        return ""
    roof = ("bandwidth" if ach.get("memory_time_us") is not None and (ach.get("compute_time_us") is None
                                                                   or ach["memory_time_us"] >= ach["compute_time_us"])
            else "compute")
    src = "measured" if ach.get("measured") else "datasheet (the profile has no figure for it)"
    n = row["count"]
    return (f" Against the achievable roofs of the device profile ({roof} roof {src}): "
            f"{u.pct(row.get('achievable_pct'))} of achievable, {u.pct(row.get('datasheet_pct'))} of datasheet; "
            f"the saving shown is the time above the achievable model, ({u.us(row['mean_time_us'])} - "
            f"{u.us(ach['model_time_us'])}) x {n:,}.")


def _what(row: dict) -> str:
    return u.op_label(row["name"], row.get("input_dims"), row.get("dtype"))


def _calls(n: int) -> str:
    return u.plural(n, "call")


def find(rows: list[dict], device: dict, total_us: float, extra: list[dict] | None = None,
         context: dict | None = None, copy_exposed: float | None = None, ledger: dict | None = None) -> list[dict]:
    """Row findings (+ trace-level ones in extra), ranked by saving_us; `context` (diagnose/context.py)
    keeps advice that contradicts the run out. `copy_exposed`: the share of the primary device's copy
    time that ran with nothing else on it (the ledger's); a faster copy hidden under kernels saves nothing.
    `ledger` (lead.build): each finding's saving is capped by the ledger term it comes from."""
    out: list[dict] = []
    shown = achv.shown_by_trace(rows, total_us)
    context = dict(context or {}, half_gemms=_half_gemms(rows))
    latency = []
    copies: dict[tuple[str, str], list[dict]] = {}
    # ops inside an unfused attention: the one lever is the fused kernel, not a faster softmax or a padded bmm
    in_attention = {i for f in extra or () if f.get("group") == "attention" for i in f.get("ops") or ()}
    for row in rows:
        if row["id"] in in_attention:
            continue
        share = row["device_time_us"] / total_us if total_us > 0 else 0.0
        bound = row["bound"]
        if bound == "latency":
            latency.append(row)
            continue
        if share < MIN_SHARE or row.get("over_roof"):  # no finding on a number the model got wrong
            continue
        if bound == "underutilised":
            out.append(underutilised_finding(row))
            continue
        if bound in ("host_link", "peer_link") and row.get("copy"):
            # one finding per op, direction and memory kind, however many signatures
            c = row["copy"]
            copies.setdefault((row["name"], c["direction"], c.get("memory") or ""), []).append(row)
        elif bound == "memory":
            out.append(memory_finding(row, device))
        elif bound == "compute":
            out.append(compute_finding(row, device, context, shown))
    for group in copies.values():
        out.append(copy_finding(group, device, copy_exposed))
    out.extend(gs.shape_findings([r for r in rows if r["id"] not in in_attention], device, total_us))
    if extra is None and latency:  # without the trace, the launch finding is built from rows alone
        out.extend(launch_findings(latency, total_us, None, context))
    out.extend(extra or [])
    attach(out, ledger, rows)  # each saving at most the ledger term it comes from
    names = {r["id"]: r["name"] for r in rows}
    for f in out:  # no advice proposes torch.compile / CUDA graphs as new to a run that uses them
        ops = [names[i] for i in f.get("ops") or () if i in names]
        inductor = bool(ops) and all(INDUCTOR_KERNEL.search(n) for n in ops)
        f["text"] = fit_to_run(f.get("text") or "", context, inductor)
        f["fix"] = fit_to_run(f.get("fix") or "", context, inductor) or None
    annotate(out, rows)  # estimated, confidence, lever; ranked by saving x confidence, notes last
    # a lever of several findings (every fp32 conv by one autocast) keeps all its members: cut at the cap, the
    # plan would show 20 of 53 convolutions' savings as the whole lever
    kept = out[:MAX_FINDINGS]
    groups = {_group(f) for f in kept if f["lever"] and f["kind"] in MERGE_KINDS}
    members = [f for f in out[MAX_FINDINGS:] if f["lever"] and f["kind"] in MERGE_KINDS and _group(f) in groups]
    # what the analysis could not see is always said, however many findings save more
    said = [f for f in out[MAX_FINDINGS:] if f["kind"] in ALWAYS_SAY]
    notes = _coverage_findings(rows, total_us, context)
    attach(notes, ledger, rows)
    out = ([f for f in kept if f["lever"]] + members + [f for f in kept if not f["lever"]] + said
           + annotate(notes, rows))
    for i, f in enumerate(out, 1):
        f["id"] = f"f{i}"
    return out


def _half_gemms(rows: list[dict]) -> list[str]:
    """The 16-bit dtypes the trace's matmuls run on tensor cores, when they hold at least 10% of its matmul time
    (autocast or a half-precision model is on: an fp32 matmul beside them ran outside it)."""
    mm = [r for r in rows if r.get("family") in ("gemm", "conv") and r.get("flops")]
    total = sum(r["device_time_us"] for r in mm)
    half: dict[str, float] = {}
    for r in mm:
        if r.get("peak_dtype") in ("bf16_tc", "fp16_tc"):
            half[r["peak_dtype"][:4]] = half.get(r["peak_dtype"][:4], 0.0) + r["device_time_us"]
    return sorted(half) if total > 0 and sum(half.values()) >= 0.1 * total else []


def _group(f: dict) -> str:
    return f.get("group") or f["kind"]


def underutilised_finding(row: dict) -> dict:
    """An op far below both roofs and well above its launch floor: what bounds it, as far as seen."""
    n, mean = row["count"], row["mean_time_us"]
    model = row.get("model_time_us") or 0.0
    limiter = row.get("limiter") or "not visible in the trace"
    short = limiter.split(":")[0]
    return {
        "kind": "underutilised",
        "title": f"{row['name']} runs at {u.pct(row['roof_pct'])} of its roof: {short}",
        "text": (f"{_what(row)}: {_calls(n)}, {u.us(row['device_time_us'])}, {u.us(mean)} per call. Its FLOPs and "
                 f"bytes need {u.us(row.get('roofline_time_us'))} per call and its "
                 f"{row.get('kernel_count') or 1:g} kernel(s) {u.us(row.get('launch_floor_us'))} of launch floor: "
                 f"{u.us(model)} in all, {u.pct(row.get('model_pct'))} of the measured time. Neither the roofs nor "
                 f"launch overhead bound it. What does, as far as the trace shows: {limiter}. Saving shown: time "
                 f"above the model, ({u.us(mean)} - {u.us(model)}) x {n:,}, an upper bound.") + achievable_note(row),
        "ops": [row["id"]],
        "saving_us": _above_roof(row),
    }


def copy_finding(rows: list[dict], device: dict, exposed: float | None = None) -> dict:
    """Signatures of one op copying one way over the host (or peer) link: one finding, held to
    that link's bandwidth with the bytes the profiler recorded as crossing it. Its saving is at most
    its share of the exposed copy time (`exposed`: the device's exposed share of all copy time)."""
    c0 = rows[0]["copy"]
    direction, memory, link, gbps = c0["direction"], c0.get("memory"), c0["link"], c0.get("link_gbps")
    t = sum(r["device_time_us"] for r in rows)
    copy_t = sum(r["copy"]["time_us"] for r in rows)
    calls = sum(r["count"] for r in rows)
    moved = sum(r["copy"]["bytes"] * r["count"] for r in rows)
    rate = moved / (copy_t * 1e3) if copy_t > 0 else None
    at_link = moved / (gbps * 1e3) if gbps else None
    saving = max(copy_t - at_link, 0.0) if at_link is not None else 0.0
    host = direction in ("HtoD", "DtoH", "HtoH")
    small = calls and moved / calls < 256 * 1024
    if memory == "Pageable":
        fix = ("The host side is pageable memory: the driver stages it through a pinned bounce buffer and the "
               "copy cannot overlap with kernels. Pin it (DataLoader(pin_memory=True), tensor.pin_memory()) and "
               "copy with non_blocking=True.")
        short = "Pin the host memory (pin_memory=True) and copy with non_blocking=True."
    elif host:
        fix = ("Overlap the copies with compute: non_blocking=True from pinned memory, issued on a side stream "
               "ahead of use (prefetch the next batch while this one computes); or keep the data on the GPU.")
        short = ("Overlap the copies with compute: non_blocking=True on a side stream, ahead of use."
                 if memory == "Pinned" else "Pin the host memory and copy with non_blocking=True, overlapped with "
                                            "compute.")
    else:
        fix = ("Peer copies: keep each tensor on the GPU that uses it, or overlap the copy with compute on a "
               "side stream.")
        short = "Keep each tensor on the GPU that uses it, or overlap the peer copy with compute."
    if small:
        fix += (f" The copies are small ({u.nbytes(moved / calls)} each): their fixed cost dominates; batch them "
                "into fewer, larger copies.")
        short = "Batch the small copies into fewer, larger ones. " + short
    names = f"{len(rows)} signatures, " if len(rows) > 1 else ""
    where = f"{direction}{' from ' + memory + ' memory' if memory else ''}"
    text = (f"{rows[0]['name']}: {names}{_calls(calls)}, {u.us(t)} of device time, {u.us(copy_t)} of it copying "
            f"{where}: {u.nbytes(moved)} crossed the {link} at {u.rate_gbps(rate)}. ")
    if gbps:
        text += (f"The {link} carries {gbps:g} GB/s per direction (the device table; --host-link-gbps overrides "
                 f"it), so the copies need at least {u.us(at_link)}. ")
        if rate is not None and rate > gbps:
            text += "They ran faster than that: the table's link is not this machine's. "
    else:
        text += "The device table has no figure for this link (pass --host-link-gbps), so no saving is estimated. "
    hidden = ""
    if exposed is not None and exposed < 0.999 and saving > 0:
        cap = copy_t * max(exposed, 0.0)
        hidden = (f" Only {exposed * 100:.0f}% of the device's copy time ran with nothing else on the GPU; the rest "
                  "was hidden under kernels, where a faster copy shortens nothing: the saving is capped at this "
                  f"op's share of the exposed time, {u.us(cap)}.")
        saving = min(saving, cap)
    text += fix + (f" Saving shown: the copy time above the link's floor, {u.us(copy_t)} - {u.us(at_link)}."
                   if at_link is not None else "") + hidden
    return {
        "kind": "host_copy",
        "title": (f"{rows[0]['name']} copies {where} at {u.rate_gbps(rate)}"
                  + (f" ({rate / gbps * 100:.0f}% of the {gbps:g} GB/s {link})" if gbps and rate else "")
                  + (f", {len(rows)} signatures" if len(rows) > 1 else "")),
        "text": text,
        "ops": [r["id"] for r in rows][:50],
        "saving_us": saving,
        "fix": short,
    }


def memory_finding(row: dict, device: dict) -> dict:
    bw = device.get("dram_gbps")
    n, mean, floor = row["count"], row["mean_time_us"], row["memory_time_us"]
    fl_peak = row.get("peak_tflops")
    flop_us = row["flops"] / (fl_peak * 1e6) if fl_peak and row.get("flops") else None
    ridge = fl_peak * 1e12 / (bw * 1e9) if fl_peak and bw else None
    why = ((f"Its {u.count(row['flops'])} FLOPs would need {u.us(flop_us)} at {fl_peak:g} TFLOP/s. "
            if flop_us is not None else "") + memory_advice(row, ridge))
    if row.get("dtype") in ("fp32", "fp64") and row.get("family") != "index":
        why += f" In bf16/fp16 the floor would be {u.us(floor / 2)} per call."
    return {
        "kind": "memory_bound",
        "fix": memory_fix(row),
        "title": f"{row['name']} is memory-bound at {u.pct(row['roof_pct'])} of the {bw:g} GB/s roof",
        "text": (f"{_what(row)}: {_calls(n)}, {u.us(row['device_time_us'])}. Each call moves {u.nbytes(row['bytes'])}; "
                 f"at {bw:g} GB/s that takes at least {u.us(floor)} ({row['bytes']:,.0f} B / {bw:g} GB/s), "
                 f"measured {u.us(mean)} per call ({u.rate_gbps(row['achieved_gbps'])}, {u.pct(row['roof_pct'])} "
                 f"of the roof). {why} Saving shown: time above the model, ({u.us(mean)} - {u.us(floor)} - "
                 f"{u.us(row.get('launch_floor_us') or 0.0)} launch floor) x {n:,}.") + achievable_note(row),
        "ops": [row["id"]],
        "saving_us": _above_roof(row),
    }


def compute_finding(row: dict, device: dict, context: dict | None = None,
                    shown: dict[str, tuple[float, str]] | None = None) -> dict:
    """A compute-bound op: its saving is the measured time above the time at the achievable fraction of its
    roof (roofline/achievable.py), or above the device profile's measured model when one is given."""
    peaks = device.get("peak_tflops") or {}
    used, key = row.get("peak_tflops") or 0, row.get("peak_dtype")
    matrix = row.get("family") in ("gemm", "conv", "attention", "moe")
    tdt = gs.tensor_dtype(row) if matrix else None
    if key == "fp32" and matrix and tdt is None:
        f = _dtype_finding(row, device, peaks, shown or {}, context)
        if f:
            return f
    launch = row["count"] * (row.get("launch_floor_us") or 0.0)
    total_floor = row["count"] * row["compute_time_us"]
    note = ""
    if key == "fp32" and tdt == "tf32" and peaks.get("tf32_tc"):
        # the kernel name shows TF32 tensor cores (e.g. cutlass s1688 / xmma): hold it to that roof
        used, key = peaks["tf32_tc"], "tf32_tc"
        total_floor = row["count"] * row["flops"] / (used * 1e6)
        note = (f" Its kernels ({', '.join(k['name'][:50] for k in row.get('kernels') or [])}) run on TF32 tensor "
                f"cores, so the {used:g} TFLOP/s TF32 roof applies: {total_floor / row['device_time_us'] * 100:.1f}% "
                "of it.")
    ach = bool(achievable_note(row)) and not note  # with a profile: saving against the achievable roof
    frac, frac_why = achv.fraction(device, key, shown or {})
    at_frac = total_floor / frac
    saving = _above_roof(row) if ach else max(row["device_time_us"] - at_frac - launch, 0.0)
    bar = ("" if ach else f" Saving shown: time above the floor at the achievable {frac_why} — "
           f"{u.us(row['device_time_us'])} - {u.us(total_floor)} / {frac:.2f} - {u.us(launch)} launch floor = "
           f"{u.us(saving)}" + (" (it already runs at that share: no kernel is likely to do much better)."
                                if saving <= 0 else "."))
    faster, fk = "", None
    for k in _FASTER.get(key or "", ()):
        if peaks.get(k, 0) > used:
            fk = k
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
                 f"bytes do not.{note}{faster}" + (achievable_note(row) if ach else bar)),
        "ops": [row["id"]],
        "saving_us": saving, "achievable_fraction": None if ach else frac,
        "fix": compute_fix(row, fk, total_floor / row["device_time_us"] * 100, context),
    }


def _dtype_finding(row: dict, device: dict, peaks: dict, shown: dict | None = None,
                   context: dict | None = None) -> dict | None:
    used = row.get("peak_tflops") or 0
    better = [(k, peaks[k]) for k in ("tf32_tc", "bf16_tc", "fp16_tc") if peaks.get(k, 0) > used]
    if not better or not row.get("flops"):
        return None
    k, v = better[0]
    # the faster roof at the share of its roof the op reaches now, at most the achievable share of it
    frac, frac_why = achv.fraction(device, k, shown or {})
    eff = min((row.get("roof_pct") or 100.0) / 100.0, frac)
    best = row["count"] * row["flops"] / (v * 1e6)
    likely = best / eff if eff > 0 else best
    names = ", ".join(x["name"][:60] for x in row.get("kernels") or [])
    dev = device.get("name") or "this device"
    if k == "tf32_tc":
        how = "torch.backends.cuda.matmul.allow_tf32 = True (torch.set_float32_matmul_precision('high'))"
        limits = f"{dev} has TF32 tensor cores at {v:g} TFLOP/s, but this GEMM did not use them"
    else:
        dt = k.replace("_tc", "")
        half = (context or {}).get("half_gemms") or []
        how = f"torch.autocast('cuda', dtype=torch.{'bfloat16' if dt == 'bf16' else 'float16'})" + (
            " with torch.amp.GradScaler (fp16 gradients need loss scaling)"
            if dt == "fp16" and (context or {}).get("mode") == "training" else "")
        if half:  # the run already multiplies in 16 bits: this op ran outside its autocast region
            how = (f"the run already multiplies {' / '.join(half)} on tensor cores, so run this op inside its "
                   f"autocast region ({how}) unless it is fp32 on purpose")
        tf32 = peaks.get("tf32_tc")
        limits = ((f"{dev}'s TF32 tensor cores run no faster than its fp32 CUDA cores ({tf32:g} TFLOP/s), so "
                   f"TF32 gains nothing here; its {dt} tensor cores offer {v:g} TFLOP/s") if tf32 else
                  (f"{dev} has no TF32 tensor cores, so fp32 matmuls run on CUDA cores at {used:g} TFLOP/s; "
                   f"its {dt} tensor cores offer {v:g} TFLOP/s"))
    return {
        "kind": "tensor_core_dtype",
        "fix": f"Use {k.replace('_tc', '')} tensor cores: {how}.",
        "title": f"{row['name']} runs fp32 on CUDA cores at {u.pct(row['roof_pct'])} of {used:g} TFLOP/s: "
                 f"{k.replace('_tc', '')} tensor cores offer {v / used:.1f}x",
        "text": (f"{_what(row)}: {_calls(row['count'])}, {u.count(row['flops'])} FLOPs each; kernels {names} show no "
                 f"tensor-core (TF32) path. {limits}. At {used:g} TFLOP/s the FLOPs need at least "
                 f"{u.us(row['count'] * row['compute_time_us'])}; measured {u.us(row['device_time_us'])} "
                 f"({u.rate_tflops(row['achieved_tflops'])}, {u.pct(row['roof_pct'])}). At {v:g} TFLOP/s they need "
                 f"{u.us(best)} (best case); at {eff * 100:.0f}% of that roof (the share it reaches now, at most the "
                 f"achievable {frac_why}) about {u.us(likely)}. "
                 f"Fix: {how}, if the model tolerates the precision. Saving shown: {u.us(row['device_time_us'])} "
                 f"- {u.us(likely)}."),
        "ops": [row["id"]],
        "saving_us": max(row["device_time_us"] - likely, 0.0),
    }




def _coverage_findings(rows: list[dict], total_us: float, context: dict | None = None) -> list[dict]:
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
        note = {
            "kind": "opaque_time",
            "title": f"{u.us(t)} ({t / total_us * 100:.1f}%) of device time has no shapes: {cause.replace('_', ' ')}",
            "text": f"{CAUSES.get(cause, cause)}. {_opaque_advice(cause, context)}",
            "ops": [r["id"] for r in rs[:50]],
            "saving_us": 0.0,
        }
        if t >= OPAQUE_SAYS_FIRST * total_us:  # most of the run is uncosted: the plan says so when levers leave room
            note.update(holds_us=t, fills_plan=True, fix=OPAQUE_FIX.get(cause))
        out.append(note)
    t = sum(r["device_time_us"] for r in unmodelled)
    if unmodelled and total_us > 0 and t / total_us >= 0.01:
        names = sorted({r["name"] for r in unmodelled})
        why: dict[str, str] = {}
        time_of: dict[str, float] = {}
        for r in unmodelled:  # rows are sorted by time: the first reason per name is its biggest
            n = r["name"]
            why.setdefault(n, r.get("reason") or "no formula")
            time_of[n] = time_of.get(n, 0.0) + r["device_time_us"]
        top = sorted(why, key=lambda n: -time_of[n])[:5]  # one pass, not a sum over every row per name
        out.append({
            "kind": "unmodelled",
            "title": f"{u.us(t)} ({t / total_us * 100:.1f}%) of device time is in ops with no cost formula",
            "text": "No FLOP/byte model for: " + ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
                    + ". Why, for the largest: " + "; ".join(f"{n}: {why[n]}" for n in top) + ".",
            "ops": [r["id"] for r in unmodelled[:50]],
            "saving_us": 0.0,
        })
    return out


def _opaque_advice(cause: str, context: dict | None) -> str:
    """OPAQUE_ADVICE, unless the run already does what it says (a trace that recorded shapes)."""
    if cause == "no_shapes" and (context or {}).get("record_shapes"):
        return ("The trace did record shapes: these kernels' enclosing ops simply carry none (a record_function "
                "range, a Python-level or custom op without a schema). Launch them from an op with tensor "
                "arguments (a registered custom op) so their shapes are recorded.")
    return OPAQUE_ADVICE.get(cause, "")
