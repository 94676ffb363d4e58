"""Run every diagnosis over one trace from one account of the step (the ledger).

`diagnose` is the single entry point analysis.py calls; everything it returns is plain data. The
ledger (ledger.py: each µs of each device's span once, with its cause) is computed first; the lead,
the per-device breakdown, the idle table, the timeline's gap shading and every finding's time-on-the-
timeline saving read it, so one quantity has one number everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence


from traceana.diagnose import breakdown as bd
from traceana.diagnose import findings as fd
from traceana.diagnose import fusion, lead
from traceana.diagnose import memory as mem
from traceana.diagnose import ledger as lg
from traceana.diagnose.comm_advice import comm_findings
from traceana.diagnose.gaps import host_activity, largest_gaps, launch_facts, wait_finding
from traceana.diagnose.host_time import graph_finding, host_findings
from traceana.diagnose.kernel_levers import kernel_findings
from traceana.diagnose.kernel_sentence import sentence as kernel_sentence
from traceana.diagnose.launch_bound import launch_findings
from traceana.diagnose.layout import layout_findings
from traceana.diagnose.projection import plan, project
from traceana.diagnose.recompute import recompute_finding
from traceana.diagnose.stalls import stall_findings, stalls
from traceana.link.attribute import Links
from traceana.link.kernel_account import KernelView
from traceana.load.model import Trace
from traceana.meter import OFF, Meter


def diagnose(trace: Trace, links: Links, groups: Sequence, rows: list[dict], device: dict,
             total_us: float, context: dict | None = None, memory: dict | None = None,
             kernels: KernelView | None = None, meter: Meter = OFF) -> dict:
    """groups[i] is the signature Group behind rows[i] (rows sorted, ids assigned); memory: the memory
    section (diagnose/memory.py), whose findings join the others; kernels: the kernel account's view
    (link/kernel_account.py), whose levers cover the device time no costed op speaks for. meter: each
    part's visits and time."""
    lap = meter.laps("diagnose")
    lap("ledger")
    ev_row = bd.event_rows(len(trace.gpu), groups)
    accs = lg.accounts(trace, links, ev_row, rows)
    meter.visit("diagnose.ledger", len(trace.gpu) * max(len(accs), 1) + len(trace.launches))  # a pass per device
    primary = bd.primary_device(trace, device.get("id"))
    acc = accs.get(primary) if primary is not None else None
    timeline = bd.from_accounts(trace, accs, primary)
    span = acc.span_us if acc else 0.0
    util = bd.utilisation(trace, ev_row, rows, device, span, primary)
    ledger = None
    extra: list[dict] = []
    if acc is not None and span > 0:
        steps, step_us = lg.step_stats(trace)
        lap("stalls")
        found = stalls(trace, links, acc, ev_row, rows, steps, meter)
        lap("gaps")
        largest = largest_gaps(trace, links, acc, ev_row, rows, meter)
        ledger = lead.build(acc, steps, step_us, found, largest)
        timeline["idle"] = {"device": acc.device, "idle_us": ledger["idle_us"], "by_cause": ledger["idle"]["by_cause"],
                            "largest": largest, "short_limit_us": lg.LAUNCH_GAP_US}
        extra.extend(stall_findings(found, span, steps))
        facts = launch_facts(trace, links, ev_row, rows, acc)
        meter.visit("diagnose.gaps", 2 * len(trace.gpu))
        extra.extend(launch_findings([r for r in rows if r["bound"] == "latency"], total_us, facts, context))
        activity = host_activity(trace, links, acc, meter)
        ledger["idle"]["host_activity"] = activity
        ledger["idle"]["graph_calls"] = {k: v for k, v in facts.items() if k.startswith("graph_")}
        extra.extend(host_findings(ledger, acc, activity, context))
        f = graph_finding(ledger, facts)
        if f:
            extra.append(f)
        f = wait_finding(trace, links, ledger, acc, ev_row, rows, meter)
        if f:
            extra.append(f)
        extra.extend(comm_findings(ledger, rows, context, kernels.account if kernels is not None else None,
                                   device))
    lap("memory")
    if memory is not None:  # the allocator's frees: the ledger's sync idle, named once; fragmentation saves nothing
        meter.visit("diagnose.memory", len(trace.launches))
        churn = mem.churn_finding(trace, memory["allocator"], acc, lg.step_stats(trace)[0], span)
        extra.extend([churn] if churn else [])
        extra.extend(mem.fragmentation_findings(memory))
    lap("fusion")
    extra.extend(fusion.fusion_findings(fusion.chains(trace, links, ev_row, rows, device, meter), total_us))
    lap("layout")
    extra.extend(layout_findings(trace, links, ev_row, rows, total_us))
    meter.visit("diagnose.layout", len(trace.gpu))
    lap("recompute")
    f = recompute_finding(trace, links, rows, ev_row, total_us, device, memory, lg.step_stats(trace)[0])
    meter.visit("diagnose.recompute", len(trace.ops) + len(trace.python) + len(trace.gpu))
    extra.extend([f] if f else [])
    lap("kernels")
    if kernels is not None:
        extra.extend(kernel_findings(trace, kernels, rows, device, context, total_us))
        kernels.account["sentence"] = kernel_sentence(kernels, rows, trace, device)
        meter.visit("diagnose.kernels", len(rows))
    lap("findings")
    findings = fd.find(rows, device, total_us, extra, context, _copy_exposed(trace, acc), ledger)
    busy = ledger["busy_us"] if ledger else total_us
    idle_us = ledger["idle_us"] if ledger else 0.0
    streams = lg.stream_times(trace, acc.device, ev_row, rows) if acc is not None else None
    projection = project(findings, rows, busy, idle_us, streams)
    steps, step_us = (ledger["steps"], ledger["step_us"]) if ledger else (0, None)
    out = {"findings": findings, "timeline": timeline, "utilisation": util, "ledger": ledger,
           "projection": projection, "plan": plan(findings, rows, busy, idle_us, streams, steps or 0, step_us),
           "accounts": accs}
    lap.stop()
    return out


def _copy_exposed(trace: Trace, acc) -> float | None:
    """The share of the device's memcpy time that ran with nothing else on it (None: no copies)."""
    if acc is None:
        return None
    gpu = trace.gpu
    m = (gpu.device == acc.device) & (gpu.kind == 1)
    total = float(gpu.dur[m].sum())
    return min(acc.by_category.get("memcpy", 0.0) / total, 1.0) if total > 0 else None
