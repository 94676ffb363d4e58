"""The pipeline in one place: load -> link -> group -> cost -> device -> roofline -> diagnose.

`analyze(path, options)` returns the Analysis: a plain JSON-serialisable dict (see
docs/analysis-schema.md) that every renderer reads and that `traceana render` reloads.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import msgspec
import numpy as np

from traceana import __version__
from traceana.arrays import distinct
from traceana.cost.pair_tbe import CONTEXT_OPS as TBE_CONTEXT_OPS
from traceana.cost.pair_tbe import pair as pair_tbe
from traceana.link.copies import copy_split
from traceana.cost.recover import CONTEXT_OPS, recover
from traceana.roofline.devices import match_device
from traceana.roofline.comm_split import finish as finish_comm
from traceana.roofline.comm_split import topology as comm_topology
from traceana.roofline.devices.links import links_for
from traceana.diagnose import explain_rows
from traceana.errors import BadInput
from traceana.meter import OFF, Meter
from traceana.diagnose.context import run_context
from traceana.diagnose.hta_views import hta_views
from traceana.diagnose.memory import memory_section
from traceana.diagnose.cpu import cpu_breakdown
from traceana.diagnose.run import diagnose
from traceana.diagnose.timeline import step_timeline
from traceana.link.kernel_account import kernel_view
from traceana.link.kernel_classes import kernel_classes
from traceana.modules.launch_site import launch_sites
from traceana.modules.attribute import OPTIMIZER
from traceana.modules.attribute import places as op_places
from traceana.modules.table import finding_fields, module_table
from traceana.link.attribute import Links, link
from traceana.roofline.device_profile import Profile, sheet_figures
from traceana.load import Trace, load_trace
from traceana.link.replay.attach import attach as attach_capture
from traceana.diagnose.replay_account import account as opaque_account
from traceana.diagnose.replay_account import advice as account_advice
from traceana.diagnose.replay_account import line as account_line
from traceana.roofline.judge import launch_floor
from traceana.link.signatures import Group, calls_named, group_ops
from traceana.link.kernel_names.arch import family as arch_family
from traceana.link.kernel_names.arch import newest as newest_arch
from traceana.link.kernel_names.arch import sentence as arch_sentence
from traceana.roofline.rows import grid_blocks, op_row
from traceana.diagnose.coverage import coverage as coverage_of
from traceana.diagnose.coverage import coverage_warnings, meta_note

SCHEMA = "traceana.analysis/1"
#: distinct names (ops, launches, kernels) a trace may have: each op signature becomes a report
#: row (100,000 take ~20 s and < 1 GB); far more is not a profile of model code but of names
#: made unique per call, and would take minutes and GBs for a report no one can read
MAX_NAMES = 500_000


class Options(msgspec.Struct, frozen=True):
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


class Parts(msgspec.Struct, frozen=True):
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
    if props is None and device.key is None and not cpu_only:
        _built_for(trace, device_dict)
    if cpu_only:  # a CPU-only run has no device to name: its one warning says so
        device_dict["notes"] = []
    else:
        warnings.extend(device_dict["notes"])
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
    rows = [op_row(g, device_dict, recovered.get(i), options.meta, grid_blocks(blocks, trace.gpu.dur, g.events),
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
    coverage = coverage_of(trace, links, rows, total)
    coverage["meta"] = meta_note(options.meta, rows)
    meter.visit("coverage", len(trace.gpu))
    acc = opaque_account(trace, rows, device_dict, total, context["compiled"])
    if acc is not None:  # replayed / compiled kernels with no shapes: what ran, and how to record a costable trace
        coverage["opaque_account"] = acc
        coverage["opaque_advice"].update(account_advice(acc))
        warnings.append(account_line(acc))
    warnings.extend(coverage_warnings(trace, coverage, classes))
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
    # only a CPU-only trace needs these (~8 modules a GPU report does not import)
    from traceana.diagnose.cpu_levers import cpu_levers
    from traceana.diagnose.cpu_roofline import cpu_roofline, judge_ops
    from traceana.modules.cpu_table import cpu_finding_fields, cpu_module_table

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


def _built_for(trace: Trace, device_dict: dict) -> None:
    """A trace without deviceProperties: the newest architecture its kernels' names say they were built
    for (a lower bound on the GPU that ran them) as device["built_for"] and a note."""
    found = newest_arch(trace.names[c] for c in distinct(trace.gpu.name).tolist())
    if found is None:
        return
    cc, kernel = found
    device_dict["built_for"] = {"cc": f"{cc // 10}.{cc % 10}", "family": arch_family(cc), "kernel": kernel[:300]}
    note = (f"no deviceProperties in the trace, but {arch_sentence(cc, kernel)}: pass --device KEY for its roofline "
            "(`traceana devices` lists the rows and their compute capability)")
    notes = device_dict["notes"]
    at = next((i for i, n in enumerate(notes) if n.startswith("no deviceProperties in the trace")), None)
    if at is None:
        notes.append(note)
    else:  # in place of the note that only says the GPU is unknown
        notes[at] = note


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
