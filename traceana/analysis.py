"""The pipeline in one place: load -> link -> group -> cost -> device -> roofline -> diagnose.

`analyze(path, options)` returns the Analysis: a plain JSON-serialisable dict (see
docs/analysis-schema.md) that every renderer reads and that `traceana render` reloads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from traceana import __version__
from traceana.cost import Cost, op_cost
from traceana.cost.families.comm import comm_rates
from traceana.cost.meta import SOURCE as META_SOURCE
from traceana.cost.pair_tbe import CONTEXT_OPS as TBE_CONTEXT_OPS
from traceana.cost.pair_tbe import pair as pair_tbe
from traceana.link.copies import copy_split, dominant_host_copy, judge_recorded, link_verdict
from traceana.cost.recover import CONTEXT_OPS, cost_variants, recover
from traceana.roofline.devices import match_device
from traceana.roofline.comm_split import finish as finish_comm
from traceana.roofline.comm_split import topology as comm_topology
from traceana.roofline.devices.links import links_for
from traceana.diagnose import explain_rows
from traceana.errors import BadInput
from traceana.meter import OFF, Meter
from traceana.diagnose.advice import OPAQUE_ADVICE
from traceana.diagnose.context import run_context
from traceana.diagnose.hta_views import hta_views
from traceana.diagnose.memory import memory_section
from traceana.diagnose.cpu import cpu_breakdown
from traceana.diagnose.cpu_levers import cpu_levers
from traceana.diagnose.cpu_roofline import cpu_roofline, judge_ops
from traceana.diagnose.run import diagnose
from traceana.diagnose.timeline import step_timeline
from traceana.link.kernel_account import kernel_view
from traceana.link.kernel_classes import kernel_classes
from traceana.modules.launch_site import launch_sites
from traceana.modules.attribute import OPTIMIZER
from traceana.modules.attribute import places as op_places
from traceana.modules.cpu_table import cpu_finding_fields, cpu_module_table
from traceana.modules.table import finding_fields, module_table
from traceana.link.attribute import CAUSES, Links, link
from traceana.roofline.device_profile import Profile, sheet_figures
from traceana.load import Trace, load_trace
from traceana.link.replay.attach import attach as attach_capture
from traceana.diagnose.replay_account import account as opaque_account
from traceana.diagnose.replay_account import advice as account_advice
from traceana.diagnose.replay_account import line as account_line
from traceana.roofline.judge import judge, launch_floor
from traceana.link.signatures import Group, calls_named, group_ops

SCHEMA = "traceana.analysis/1"
#: distinct names (ops, launches, kernels) a trace may have: each op signature becomes a report
#: row (100,000 take ~20 s and < 1 GB); far more is not a profile of model code but of names
#: made unique per call, and would take minutes and GBs for a report no one can read
MAX_NAMES = 500_000


@dataclass(frozen=True)
class Options:
    device_key: str | None = None
    peak_tflops: dict[str, float] | None = None
    bandwidth_gbps: float | None = None
    explain_top: int = 8
    hta: bool = False  # add Holistic Trace Analysis' timeline views (optional extra)
    # run ops with no formula on meta tensors for their bytes (imports torch: ~2.6 s). The CLI
    # turns it on with --meta, or when torch is already imported; the API default is off.
    meta: bool = False
    launch_floor_us: float | None = None  # per-kernel launch floor; None: the device's default
    host_link_gbps: float | None = None  # the host link's per-direction GB/s; None: the table's
    network_gbps: float | None = None  # per-GPU network GB/s per direction, for collectives spanning hosts
    # a graph capture trace (file, or folder with execution_details.json) for the trace's graph replays;
    # with find_capture, a capture_traces/ folder beside the trace is used when none is given
    capture: str | None = None
    find_capture: bool = True
    # a device profile from `traceana calibrate` (traceana.roofline.device_profile.load_profile): achievable roofs
    profile: Profile | None = None


@dataclass(frozen=True)
class Parts:
    """What the Analysis was computed from, for a stage that needs it per event (traceana.annotate):
    the trace (after graph replays met their capture), its links, and the group of each row of
    analysis["ops"], in that order."""

    trace: Trace
    links: Links
    groups: list[Group]


def analyze(path: str, options: Options = Options(), stage: Callable[[str], None] | None = None,
            progress: Callable[[float], None] | None = None, meter: Meter = OFF) -> dict:
    """`stage(name)` at each stage; `progress(fraction)` of the file read, while it loads; `meter`: what
    each stage visited and how long it took (traceana/meter.py)."""
    return analyze_trace(_load(path, stage, progress, meter), options, stage, meter)


def analyze_parts(path: str, options: Options = Options(), stage: Callable[[str], None] | None = None,
                  progress: Callable[[float], None] | None = None, meter: Meter = OFF) -> tuple[dict, Parts]:
    """analyze(), and the Parts it was computed from."""
    return analyze_trace_parts(_load(path, stage, progress, meter), options, stage, meter)


def _load(path: str, stage: Callable[[str], None] | None, progress: Callable[[float], None] | None,
          meter: Meter) -> Trace:
    with meter.timed("load"):
        trace = load_trace(path, stage, progress)
    meter.visit("load", trace.n_events)
    return trace


def analyze_trace(trace: Trace, options: Options = Options(), stage: Callable[[str], None] | None = None,
                  meter: Meter = OFF) -> dict:
    """`stage(name)` is told when link, cost and diagnose start (the progress bar)."""
    return analyze_trace_parts(trace, options, stage, meter)[0]


def analyze_trace_parts(trace: Trace, options: Options = Options(),
                        stage: Callable[[str], None] | None = None, meter: Meter = OFF) -> tuple[dict, Parts]:
    """analyze_trace(), and the Parts it was computed from. `meter`: each stage's visits and time."""
    if len(trace.names) > MAX_NAMES:
        raise BadInput(
            f"{trace.path}: {len(trace.names):,} distinct op and kernel names (more than {MAX_NAMES:,}): "
            "traceana reports one row per op signature, and that many would take minutes and GBs; "
            "model code has thousands. Names made unique per call (a record_function label with a step, "
            "sample or request id in it) are the usual cause: label with a fixed name instead")
    if stage:
        stage("link")
    lap = meter.laps("")  # each part's time; its events counted as it goes
    lap("link")
    links = link(trace)
    meter.visit("link", len(trace.ops) + len(trace.launches) + len(trace.gpu) + len(trace.annotations))
    recorded_ops = len(trace.ops)  # graph replays' synthetic ops are appended after these
    trace, links, capture = attach_capture(trace, links, options.capture, options.find_capture)
    groups = group_ops(trace, links)
    meter.visit("link", len(trace.ops) + len(trace.gpu))
    warnings = list(trace.warnings)
    dev_id, props = _primary_device(trace, warnings)
    device = match_device(props, key=options.device_key, peak_tflops=options.peak_tflops,
                          bandwidth_gbps=options.bandwidth_gbps)
    device_dict = {
        "name": device.name, "key": device.key, "peak_tflops": dict(sorted(device.peak_tflops.items())),
        "dram_gbps": device.dram_gbps, "source": device.source, "sms": device.sms,
        "vendor": device.vendor, "arch": device.arch, "notes": list(device.notes), "id": dev_id,
        "borrowed": device.borrowed,
    }
    floor, floor_src = launch_floor(device.arch, device.vendor, options.launch_floor_us)
    device_dict.update(links_for(device.key, options.host_link_gbps))
    device_dict["launch_floor_us"] = floor
    device_dict["launch_floor_source"] = floor_src
    cpu_only = len(trace.gpu) == 0
    if cpu_only:  # a CPU-only run has no device to name: its one warning says so
        device_dict["notes"] = []
    else:
        warnings.extend(device.notes)
    achievable = None
    if options.profile is not None:
        achievable = _achievable(options.profile, device, device_dict, cpu_only, warnings)
    if stage:
        stage("cost")
    lap("cost")
    sigs, counts = [g.call for g in groups], [g.count for g in groups]
    recovered = recover(sigs, counts, calls_named(trace, CONTEXT_OPS))
    recovered.update(pair_tbe(sigs, counts, calls_named(trace, TBE_CONTEXT_OPS)))
    blocks = trace.gpu.blocks
    rows = [_row(g, device_dict, recovered.get(i), options.meta, _grid_blocks(blocks, trace.gpu.dur, g.events),
                 copy_split(trace, g.events), achievable)
            for i, g in enumerate(groups)]
    meter.visit("cost", len(trace.ops) + sum(len(g.events) for g in groups if g.events is not None))
    topo = comm_topology(trace)
    for r, g in zip(rows, groups):  # every collective a communication row: its link, transfer and wait
        finish_comm(r, device_dict, topo, options.network_gbps, trace, links, g.events, meter)
    group_of = {id(r): g for r, g in zip(rows, groups)}
    rows.sort(key=lambda r: (-r["device_time_us"], r["name"], str(r["input_dims"]), str(r["input_types"])))
    for i, r in enumerate(rows, 1):
        r["id"] = f"op{i}"
    total = float(trace.gpu.dur.sum())
    if stage:
        stage("diagnose")
    ordered = [group_of[id(r)] for r in rows]
    lap("context")
    context = {**run_context(trace, links, rows, capture, meter), "record_shapes": trace.record_shapes}
    lap("modules.places")
    places = op_places(trace, links, recorded_ops)
    meter.visit("modules.places", len(trace.python) + len(trace.ops) + len(trace.annotations))
    lap("memory")
    warnings.extend(places.warnings)
    memory = memory_section(trace, links, places, meter=meter, warnings=warnings)
    lap("kernels")
    kernels = kernel_view(trace, ordered, rows)  # every kernel by class x dtype x library, from its name
    classes = kernel_classes(trace, ordered, rows, kernels.cls)
    launch_sites(trace, links, ordered, rows)  # where kernels launched outside any op came from
    meter.visit("kernels", 2 * len(trace.gpu))
    lap("diagnose")
    diag = diagnose(trace, links, ordered, rows, device_dict, total, context, memory, kernels, meter)
    lap("timeline")
    timeline = step_timeline(trace, links, ordered, rows, diag["timeline"]["primary"], diag["accounts"], meter)
    lap("modules.table")
    modules = module_table(places, trace, links, ordered, rows, total)  # also each row's module / source
    meter.visit("modules.table", len(trace.gpu))
    finding_fields(diag["findings"], rows)
    lap("coverage")
    coverage = _coverage(trace, links, rows, total)
    coverage["meta"] = _meta_note(options.meta, rows)
    meter.visit("coverage", len(trace.gpu))
    acc = opaque_account(trace, rows, device_dict, total, context["compiled"])
    if acc is not None:  # replayed / compiled kernels with no shapes: what ran, and how to record a costable trace
        coverage["opaque_account"] = acc
        coverage["opaque_advice"].update(account_advice(acc))
        warnings.append(account_line(acc))
    warnings.extend(_coverage_warnings(trace, coverage, classes))
    lap("cpu")
    cpu = _cpu(trace, device_dict.get("profile"), places) if cpu_only else None
    meter.visit("cpu", 2 * len(trace.ops) if cpu_only else 0)
    findings, plan = diag["findings"], diag["plan"]
    if cpu is not None and cpu.get("findings") is not None:  # a CPU-only run: its levers, modules and account
        findings, plan, modules = cpu.pop("findings"), cpu.pop("plan"), cpu.pop("modules")
    by_bound: dict[str, float] = {k: 0.0 for k in ("compute", "memory", "latency", "underutilised", "host_link",
                                                   "unknown", "unmodelled", "opaque")}
    for r in rows:
        by_bound[r["bound"]] = by_bound.get(r["bound"], 0.0) + r["device_time_us"]
    lap("explain")
    analysis = {
        "schema": SCHEMA,
        "tool": {"name": "traceana", "version": __version__},
        "trace": {
            "file": os.path.basename(trace.path), "format": trace.format, "events": trace.n_events,
            "span_us": trace.span_us, "gpu_events": len(trace.gpu), "cpu_ops": len(trace.ops),
            "record_shapes": trace.record_shapes, "distributed": _distributed(trace),
            "steps": len({n for n in map(trace.names.__getitem__, trace.annotations.name.tolist())
                          if n.startswith("ProfilerStep#")}),
            "link": {"by_nesting": links.by_nesting, "by_external_id": links.by_external_id,
                     "external_ids_reliable": links.external_ids_reliable},
            **({"capture": capture} if capture is not None else {}),
        },
        "device": device_dict,
        "context": context,
        "coverage": coverage,
        "kernel_classes": classes,
        "kernels": kernels.account,
        "ledger": diag["ledger"],
        **({"cpu": cpu} if cpu_only else {}),
        "breakdown": {"by_bound": by_bound, "total_us": total, **diag["timeline"]},
        "utilisation": diag["utilisation"],
        "timeline": timeline,
        "modules": modules,
        "memory": memory,
        **({"hta": hta_views(trace, links)} if options.hta else {}),
        "ops": rows,
        "explanations": explain_rows(rows, device_dict, total, options.explain_top, context),
        "findings": findings,
        "projection": diag["projection"],
        "plan": plan,
        "warnings": warnings,
    }
    lap.stop()
    return analysis, Parts(trace, links, ordered)


def _cpu(trace: Trace, profile: dict | None, places=None) -> dict | None:
    """A CPU-only trace: ops by self time, each op signature judged against the CPU roofs, the span's account
    and sentence, and (popped by the caller) its levers, plan and by-module table from CPU self time."""
    out = cpu_breakdown(trace)
    if out is None:
        return None
    judged = judge_ops(trace, profile)
    levers = cpu_levers(trace, judged, places.phase == OPTIMIZER if places is not None else None)
    modules = cpu_module_table(places, judged.rows, judged.sig, judged.self_us) if places is not None else None
    cpu_finding_fields(levers["findings"], judged.rows)
    out["roofline"] = cpu_roofline(judged)
    out["device"] = _cpu_device(profile, out["roofline"]["roofs"])
    out.update({"account": levers["account"], "sentence": levers["sentence"], "findings": levers["findings"],
                "plan": levers["plan"], "modules": modules})
    return out


def _cpu_device(profile: dict | None, roofs: dict) -> dict:
    """The CPU the trace ran on, as far as anything says: the trace records no CPU model, a CPU device
    profile (traceana calibrate --device cpu on that machine) does."""
    if profile and profile.get("kind") == "cpu" and profile.get("applied") is not False:
        return {"name": profile.get("name"), "threads": profile.get("threads"), "source": "profile",
                "profile": profile.get("file")}
    return {"name": None, "threads": None, "source": None, "profile": None}


def _primary_device(trace: Trace, warnings: list[str]) -> tuple[int | None, dict | None]:
    """The GPU with the most device time, and its deviceProperties entry."""
    props = trace.device_properties
    gpu = trace.gpu
    dev_id = None
    if len(gpu):
        ids, inv = np.unique(gpu.device, return_inverse=True)
        t = np.bincount(inv, weights=gpu.dur)
        dev_id = int(ids[int(np.argmax(t))])
        if len(ids) > 1:
            warnings.append(f"GPU events on {len(ids)} devices ({', '.join(map(str, ids.tolist()))}); "
                            f"roofs are those of device {dev_id}, which has the most time")
    if not props:  # devices.match_device says so (and how to name the device) in its notes
        return dev_id, None
    for p in props:
        if dev_id is not None and p.get("id") == dev_id:
            return dev_id, p
    if dev_id is not None and len(props) > 1:
        warnings.append(f"no deviceProperties entry has id {dev_id}; using the first entry")
    return dev_id, props[0]


UNSTABLE_PCT = 25.0  # as traceana.measure.calibrate.run: repeats that disagree more than this


def _achievable(prof: Profile, device, device_dict: dict, cpu_only: bool, warnings: list[str]) -> dict | None:
    """The achievable roofs a GPU trace's ops are judged against (device.profile records the
    profile; None when it does not apply: a CPU-only trace, judged by cpu.py, or a CPU profile).
    A figure far outside the device's datasheet (over 2x, under 1/1000) is unusable, with a warning."""
    if not cpu_only and prof.kind != "cpu":
        sheet = sheet_figures(device.peak_tflops, device.dram_gbps, device_dict.get("host_link_gbps"),
                              device_dict.get("peer_link_gbps"))
        prof, absurd = prof.judged_against(sheet)
        for k, why in sorted(absurd.items()):
            warnings.append(f"profile {prof.label()}: {k} {why}; it is not used as a roof")
    rec = prof.as_dict()
    device_dict["profile"] = rec
    shaky = {k: v for k, v in (rec.get("spread_pct") or {}).items() if v > UNSTABLE_PCT}
    if shaky:
        warnings.append(f"profile {prof.label()}: " + ", ".join(f"{k} {v:.0f}%" for k, v in sorted(shaky.items()))
                        + f" spread between repeats (over {UNSTABLE_PCT:g}%): those measured roofs are unsteady "
                        "(a busy machine while calibrating?); calibrate again on an idle machine")
    if cpu_only:
        rec["applied"] = prof.kind == "cpu"
        if prof.kind != "cpu":
            warnings.append(f"profile {prof.label()} measured a GPU: this CPU-only trace's ops are judged against "
                            "the default CPU roofs (calibrate the CPU: traceana calibrate --device cpu)")
        return None
    if prof.kind == "cpu":
        rec["applied"] = False
        warnings.append(f"profile {prof.label()} measured a CPU: this trace's GPU ops keep their datasheet roofs")
        return None
    measured = prof.peaks()
    peaks = {**device.peak_tflops, **measured}
    dram = prof.dram_gbps() or device.dram_gbps
    rec["applied"] = True
    if device.name and prof.name != device.name:
        warnings.append(f"profile {prof.label()} was measured on {prof.name!r}, the trace ran on {device.name!r}: "
                        "its achievable roofs are applied as given")
    return {"peak_tflops": dict(sorted(peaks.items())), "dram_gbps": dram, "measured": sorted(measured),
            "dram_measured": prof.dram_gbps() is not None}


def _distributed(trace: Trace) -> dict | None:
    d = trace.distributed
    if not d:
        return None
    return {k: d.get(k) for k in ("rank", "world_size", "backend") if isinstance(d.get(k), (int, str))}


def _grid_blocks(blocks: np.ndarray | None, dur: np.ndarray, events: np.ndarray | None) -> float | None:
    """The launch grid (thread blocks) of a signature's kernels, weighted by their time: half of
    its recorded kernel time ran in grids of at most this many blocks. None if not recorded."""
    if blocks is None or events is None or not len(events):
        return None
    b, d = blocks[events], dur[events]
    ok = np.isfinite(b)
    if not ok.any():
        return None
    b, d = b[ok], d[ok]
    order = np.argsort(b, kind="stable")
    cum = np.cumsum(d[order])
    if cum[-1] <= 0:
        return float(b[order[len(order) // 2]])
    return float(b[order[int(np.searchsorted(cum, cum[-1] / 2))]])


def _row(g: Group, device: dict, recovered: tuple | None = None, meta: bool = False,
         blocks: float | None = None, copies: dict | None = None, achievable: dict | None = None) -> dict:
    mean = g.device_us / g.count if g.count else g.device_us
    kernel_count = g.gpu_events / g.count if g.count else float(g.gpu_events)
    row = {
        "name": g.name,
        "input_dims": list(g.call.dims) if g.call else [],
        "input_types": list(g.call.types) if g.call else [],
        "concrete_inputs": list(g.call.concrete) if g.call and g.call.concrete else [],
        "count": g.count,
        "device_time_us": g.device_us,
        "mean_time_us": mean,
        "kernel_count": kernel_count,
        "kernels": [{"name": k, "time_us": t, "count": n} for k, t, n in g.kernels],
        "opaque": g.cause is not None,
        "cause": g.cause,
        "flops": None, "bytes": None, "intensity": None, "achieved_tflops": None, "achieved_gbps": None,
        "roofline_time_us": None, "roof_pct": None, "compute_time_us": None, "memory_time_us": None,
        "peak_dtype": None, "peak_tflops": None, "peak_why": None, "family": None,
        "flops_expr": None, "bytes_expr": None, "estimated": False, "notes": [], "reason": None,
        "launch_floor_us": None, "model_time_us": None, "model_pct": None, "limiter": None, "over_roof": None,
        "grid_blocks": None,
    }
    row["roof_kind"] = "none"
    if g.cause is not None:
        if judge_recorded(row, copies, device, g.count, CAUSES[g.cause]):
            return row
        row["bound"] = "opaque"
        row["reason"] = CAUSES[g.cause]  # replays and compiled regions: replay_account adds what ran
        return row
    cost = cost_variants(*recovered, g.count, op_cost) if recovered else op_cost(g.call, meta=meta)
    if not isinstance(cost, Cost):
        why = CAUSES[cost.cause] if cost.cause in CAUSES else f"no cost formula ({cost.reason})"
        if judge_recorded(row, copies, device, g.count, why):
            return row
        if cost.cause in CAUSES:  # a formula whose input the trace lacks: opaque for that cause
            row.update({"bound": "opaque", "opaque": True, "cause": cost.cause, "cause_from_cost": True,
                        "reason": f"{cost.reason} ({CAUSES[cost.cause]})"})
            return row
        row["bound"] = "unmodelled"
        row["reason"] = cost.reason
        return row
    v = judge(cost, mean, mean / max(kernel_count, 1e-9), device["peak_tflops"], device["dram_gbps"],
              g.call.kernel_names, kernels=kernel_count, floor_us=device.get("launch_floor_us") or 0.0,
              l2_bytes=device.get("l2_bytes"), blocks=blocks, sms=device.get("sms"))
    row.update({
        "flops": cost.flops, "bytes": cost.bytes, "intensity": v.intensity,
        "achieved_tflops": v.achieved_tflops, "achieved_gbps": v.achieved_gbps,
        "roofline_time_us": v.roofline_us, "roof_pct": v.roof_pct, "compute_time_us": v.compute_us,
        "memory_time_us": v.memory_us, "bound": v.bound, "peak_dtype": v.peak.key,
        "peak_tflops": v.peak.tflops, "peak_why": v.peak.why, "family": cost.family,
        "flops_expr": cost.flops_expr, "bytes_expr": cost.bytes_expr, "estimated": cost.estimated,
        "notes": list(cost.notes), "dtype": cost.dtype,
        "launch_floor_us": v.floor_us, "model_time_us": v.model_us, "model_pct": v.model_pct,
        "limiter": v.limiter, "over_roof": v.over_roof, "grid_blocks": blocks,
    })
    comm = comm_rates(cost, mean)
    if comm:  # its link, transfer and wait: comm_split.finish
        row["comm"] = comm
    row["roof_kind"] = _roof_kind(row)
    if achievable is not None and v.bound != "communication":
        a = judge(cost, mean, mean / max(kernel_count, 1e-9), achievable["peak_tflops"], achievable["dram_gbps"],
                  g.call.kernel_names, kernels=kernel_count, floor_us=device.get("launch_floor_us") or 0.0,
                  l2_bytes=device.get("l2_bytes"), blocks=blocks, sms=device.get("sms"))
        row["datasheet_pct"] = v.roof_pct
        row["achievable_pct"] = a.roof_pct
        row["achievable"] = {
            "roofline_time_us": a.roofline_us, "model_time_us": a.model_us, "compute_time_us": a.compute_us,
            "memory_time_us": a.memory_us, "bound": a.bound, "peak_dtype": a.peak.key, "peak_tflops": a.peak.tflops,
            "dram_gbps": achievable["dram_gbps"],
            "measured": _measured_roof(a, achievable),
        }
    if copies:
        row["copies"] = {k: {kk: v[kk] for kk in ("time_us", "bytes", "events")} for k, v in sorted(copies.items())}
        part = dominant_host_copy(copies, g.device_us)
        if part:
            link_verdict(row, part, device, g.count)
            for k in ("datasheet_pct", "achievable_pct", "achievable"):  # held to its link, not DRAM/compute
                row.pop(k, None)
    if META_SOURCE in cost.detail:
        row["meta"] = True
    return row


def _measured_roof(v, achievable: dict) -> bool:
    """Whether the roof that binds the op came from the profile (else the datasheet stood in)."""
    compute_side = v.compute_us is not None and (v.memory_us is None or v.compute_us > v.memory_us)
    return v.peak.key in achievable["measured"] if compute_side else achievable["dram_measured"]


def _roof_kind(row: dict) -> str:
    """Which roof the row's roofline time was computed against."""
    if row["bound"] == "communication":
        return "network"
    if row.get("roofline_time_us") is None:
        return "none"
    c, m = row.get("compute_time_us"), row.get("memory_time_us")
    return "compute" if c is not None and (m is None or c > m) else "dram"


def _coverage(trace: Trace, links: Links, rows: list[dict], total: float) -> dict:
    dur = trace.gpu.dur
    attributed = float(dur[links.gpu_op >= 0].sum())
    # opaque: kernels with no costable op (link stage), plus ops whose formula lacks an input the trace
    # did not record (cost stage: row["cause_from_cost"])
    # (copies judged from their recorded bytes are costed: copies.judge_recorded)
    opaque = sum(r["device_time_us"] for r in rows if r["opaque"])
    modeled = sum(r["device_time_us"] for r in rows if r["flops"] is not None)
    estimated = sum(r["device_time_us"] for r in rows if r["flops"] is not None and r["estimated"])
    unmodeled = sum(r["device_time_us"] for r in rows if r["bound"] == "unmodelled")
    by_cause: dict[str, float] = {}
    for r in rows:
        if r["cause"]:
            by_cause[r["cause"]] = by_cause.get(r["cause"], 0.0) + r["device_time_us"]
    unmodeled_by_op: dict[str, float] = {}
    for r in rows:
        if r["bound"] == "unmodelled":
            unmodeled_by_op[r["name"]] = unmodeled_by_op.get(r["name"], 0.0) + r["device_time_us"]
    return {
        "device_time_us": total,
        "attributed_time_us": attributed,
        "unattributed_time_us": float(dur[links.gpu_op < 0].sum()),
        "modeled_time_us": modeled,
        "estimated_time_us": estimated,  # the part of modeled_time_us whose cost is an estimate
        "opaque_time_us": opaque,
        "unmodeled_time_us": unmodeled,
        "opaque_by_cause": dict(sorted(by_cause.items(), key=lambda kv: -kv[1])),
        "opaque_advice": {c: OPAQUE_ADVICE[c] for c in by_cause if c in OPAQUE_ADVICE},
        "unmodeled_by_op": dict(sorted(unmodeled_by_op.items(), key=lambda kv: -kv[1])),
    }


def _meta_note(enabled: bool, rows: list[dict]) -> dict:
    """coverage["meta"]: was the meta-tensor fallback on, how many signatures it costed, and a note."""
    used = sum(1 for r in rows if r.get("meta"))
    no_formula = sum(1 for r in rows if r["bound"] == "unmodelled" and str(r.get("reason")).startswith("no formula"))
    if enabled:
        note = (f"ops with no formula were run on meta tensors (--meta): {used} signature(s) costed that way "
                "(bytes only, FLOPs 0, marked estimated)")
    else:
        note = ("ops with no formula were not run on meta tensors (off by default: it imports torch, ~2.6 s; "
                "pass --meta, or it is on when torch is already imported)")
    return {"enabled": enabled, "signatures": used, "no_formula_signatures": no_formula, "note": note}


def _coverage_warnings(trace: Trace, cov: dict, classes: dict | None = None) -> list[str]:
    out = []
    total = cov["device_time_us"]
    if len(trace.gpu) == 0:
        if len(trace.ops):
            out.append("no GPU activity in this trace (a CPU-only run): there is no device time to judge against "
                       "a GPU roofline; the CPU ops are listed by self time and judged against the CPU's roofs "
                       "(BLAS peak, memory bandwidth, per-op dispatch)")
        else:
            out.append("the trace has neither GPU events nor CPU ops: nothing to analyse")
        return out
    if total > 0 and cov["opaque_time_us"] / total > 0.05:
        parts = ", ".join(f"{k.replace('_', ' ')} {v / total * 100:.1f}%" for k, v in cov["opaque_by_cause"].items())
        out.append(f"{cov['opaque_time_us'] / total * 100:.1f}% of device time cannot be costed from what the trace "
                   f"recorded ({parts})")
    if not trace.record_shapes and len(trace.ops):
        by = (classes or {}).get("by_class") or {}
        parts = ", ".join(f"{k} {v / total * 100:.1f}%" for k, v in list(by.items())[:6]) if total > 0 else ""
        out.append("the trace was recorded without record_shapes=True: no FLOPs or bytes can be computed"
                   + (f" (kernel time by class, from kernel names: {parts})" if parts else "")
                   + "; record with torch.profiler.profile(record_shapes=True) to cost each op")
    return out
