"""The launch-bound lever: what fewer, larger kernels recover, and no more.

Two parts, both measured: the launch gaps (the ledger's idle.launch_gaps: gaps of at most 30 µs between
back-to-back GPU events) and the fixed per-kernel cost of the latency-bound kernels (their number x what
this device's shortest kernels take, at most their exposed time). CUDA graphs remove launch gaps, not
kernel time; fusion removes kernels and with them their fixed cost; neither removes the work.
"""

from __future__ import annotations

from traceana import units as u
from traceana.diagnose.advice import latency_fix, replays_graphs, uses_compile, uses_graphs

MIN_SHARE = 0.005  # as findings.MIN_SHARE: below this share of device time, no lever


def launch_findings(latency: list[dict], total_us: float, facts: dict | None,
                    context: dict | None = None) -> list[dict]:
    """One launch_bound finding: latency-bound ops (tiny kernels far under both roofs) and the short idle gaps
    between kernels (the fixed cost of issuing kernels one at a time). Its saving is what fewer kernels can
    remove, and no more: the launch gaps + the fixed cost of each latency-bound kernel (the measured per-kernel
    cost: what this device's shortest kernels take; without the trace, the model's launch floor), at most
    those kernels' exposed time."""
    t = sum(r["device_time_us"] for r in latency)
    short = facts["short_us"] if facts else 0.0
    replay, partly = replays_graphs(context), uses_graphs(context) and not replays_graphs(context)
    n = sum(r["count"] * (r.get("kernel_count") or 1) for r in latency)
    floor = facts.get("kernel_floor_us") if facts else None
    if floor is not None and n:
        fixed = n * floor
        fixed_how = (f"{u.plural(n, 'kernel')} x {u.us(floor)} (the {facts.get('kernel_floor_pct', 5)}th percentile of "
                     "this device's kernel durations: what its shortest kernels take, whatever their work)")
    else:
        fixed = sum(r["count"] * (r.get("launch_floor_us") or 0.0) for r in latency)
        fixed_how = f"{u.plural(n, 'kernel')} x the model's launch floor"
    busy = min(fixed, t)
    if facts and facts.get("lat_exposed_us") is not None:
        busy = min(busy, facts["lat_exposed_us"])  # hidden under other streams' work, fewer kernels save nothing
    saving = short + busy
    if total_us <= 0 or max(t, saving) < MIN_SHARE * total_us:
        return []
    parts = []
    if facts and facts["short_gaps"]:
        parts.append(f"{facts.get('events', facts['kernels']):,} GPU events (kernels, copies, memsets) ran one by one: "
                     f"{u.plural(facts['short_gaps'], 'gap')} of at most "
                     f"{facts['short_limit_us']:g} µs between them add up to {u.us(short)} of GPU idle (median "
                     f"{u.us(facts['short_median_us'])} per gap), "
                     + ("the graph's scheduling between dependent kernels." if replay else
                        "the fixed cost of launching each kernel separately."))
    if latency:
        parts.append(f"{u.plural(len(latency), 'op signature')} {'is' if len(latency) == 1 else 'are'} latency-bound, "
                     f"far under both roofs: {u.plural(n, 'kernel')} of "
                     f"{u.us(t / max(n, 1))} on average, {u.us(t)} ({t / total_us * 100:.1f}% of device time).")
    if facts and facts["launches"]:
        per_la = facts["launch_us"] / facts["launches"]
        per_k = facts["kernel_us"] / max(facts["kernels"], 1)
        parts.append(f"CPU side: {u.plural(facts['launches'], 'launch call')} took {u.us(facts['launch_us'])} "
                     f"({u.us(per_la)} per launch, against {u.us(per_k)} per kernel on the GPU)"
                     + ("; launching a kernel costs the CPU more than running it costs the GPU, so the CPU sets "
                        "the pace." if per_la > per_k else "."))
        if facts["lat_launches"]:
            parts.append("The latency-bound kernels alone took "
                         f"{u.plural(facts['lat_launches'], 'launch', 'launches')}, {u.us(facts['lat_launch_us'])} of "
                         "CPU time.")
    if facts and facts.get("graph_launches"):
        parts.append(f"{u.plural(facts['graph_launches'], 'graph launch', 'graph launches')} took "
                     f"{u.us(facts['graph_launch_us'])} of host time (the idle they caused is counted under graph "
                     "launches).")
    parts.append(latency_fix(context))
    hidden = (f" (at most their {u.us(facts['lat_exposed_us'])} not hidden under other work)"
              if facts and facts.get("lat_exposed_us") is not None and facts["lat_exposed_us"] < fixed else "")
    parts.append("Saving shown: " + " + ".join(x for x in (
        f"the launch gaps ({u.us(short)})" if short else "",
        f"the fixed per-kernel cost, {fixed_how} = {u.us(fixed)}{hidden}" if busy > 0 else "") if x)
                 + f" = {u.us(saving)}, an upper bound: fewer, larger kernels remove the gaps and the per-kernel cost, "
                   "not the work the kernels do.")
    title = (f"{u.plural(n, 'tiny kernel')} {'is' if round(n) == 1 else 'are'} launch-bound" if latency and t >= short
             else f"Launch overhead: {u.plural(facts['short_gaps'], 'short gap')} between kernels" if facts
             else f"{u.plural(n, 'tiny kernel')} {'is' if round(n) == 1 else 'are'} launch-bound")
    how = "fusion" if replay else "the run's graphs / fusion" if partly else "CUDA graphs / fusion"
    if replay:
        fix = "Fuse neighbouring kernels or give each more work (the run already replays graphs)."
    elif partly:
        fix = ("Capture these launches in the graphs the run already replays, or fuse neighbouring kernels.")
    elif uses_compile(context):
        fix = ("Launch fewer kernels: the run already uses torch.compile — mode=\"reduce-overhead\" replays its "
               "regions as CUDA graphs — or fuse.")
    else:
        fix = "Launch fewer kernels: CUDA graphs (torch.compile mode='reduce-overhead') or fusion."
    return [{"kind": "launch_bound", "title": f"{title}: {u.us(saving)} recoverable with {how}", "fix": fix,
             "group": "launch", "text": " ".join(parts),
             "ops": [r["id"] for r in sorted(latency, key=lambda r: -r["device_time_us"])[:50]],
             "saving_us": saving, "idle_us": short}]
