"""Savings that add up: how sure each finding is, and one projection that counts each µs once.

Findings overlap: a memory-bound op can be in a fusion chain, a launch-bound group and a dtype
finding at once, so their savings cannot be summed. Each finding keeps its own recoverable time
(`saving_us`, an upper bound for that one change); `projection` applies them all together:

  * a finding's saving is split into device busy time (`saving_us - idle_us`) and GPU idle time
    (`idle_us`: the host-wait gaps an idle or launch finding recovers);
  * the busy part is spread over the finding's ops in proportion to their device time, as a
    fraction of each op's time that is left after the earlier findings: an op keeps
    t x (1 - f1) x (1 - f2) ..., so two findings on one op never remove more than all of it;
  * idle savings are capped at the idle time of the span.

`now_us` is the device's busy time (the union of its GPU events), `after_us` what is left if
every finding were applied (never below zero). Busy time saved on one stream while another
stream ran is not hidden overlap in this model, so `after_us` is optimistic where streams overlap;
the text says so. One floor holds whatever the levers claim: the span after them is never shorter
than the kernels' own time on the critical stream (the stream with the most GPU time: its events
run one after another), less what the levers take out of that stream's ops (`floor_us`).

Confidence (`high`, `medium`, `low`) is part of a finding's rank: `high` for a measured time
against an exact roof, `medium` for estimated costs and upper-bound savings (launch overhead,
idle time, fusion along the shapes the trace recorded), `low` for guesses about ops the trace
gives no shapes for. Findings are ranked by saving x weight, so a sure 5 ms lever comes before a
guessed 8 ms one.
"""

from __future__ import annotations

from traceana import units as u

WEIGHT = {"high": 1.0, "medium": 0.6, "low": 0.3}
# Kinds whose savings are upper bounds or rest on assumptions, whatever their ops' costs.
MEDIUM_KINDS = frozenset({"launch_bound", "host_dispatch", "fusion", "underutilised", "comm_exposed", "sync_stall", "recompute",
                          "allocator_churn"})
LOW_KINDS = frozenset()
# Kinds about time on the timeline, not op costs: the ops they name are where a gap ends.
TIMELINE_KINDS = frozenset({"host_dispatch", "sync_stall", "comm_exposed", "comm_wait", "comm_unsized", "stream_wait",
                            "allocator_churn"})
# A finding that recovers less than this is a note, not a lever.
LEVER_MIN_US = 1.0
PLAN_SIZE = 3  # "Do this first": the first levers, at most
# One short imperative per kind, for findings that do not carry their own `fix`.
FIX = {
    "memory_bound": "Move fewer bytes: fuse it with its neighbours, or narrow its dtype.",
    "compute_bound": "Use a faster dtype's tensor cores, or do fewer FLOPs.",
    "tensor_core_dtype": "Run the matmuls in bf16/fp16 (autocast) or TF32 tensor cores.",
    "gemm_shape": "Pad or reshape the GEMM's dimensions to the kernel's tile and alignment.",
    "fusion": "Fuse the chain into one kernel (torch.compile or a fused op).",
    "underutilised": "Give the kernel more parallel work (larger batch, more blocks) or a better kernel.",
    "host_copy": "Pin host memory and copy with non_blocking=True, overlapped with compute.",
    "opaque_time": "Record what the trace lacks to cost this time (see the finding).",
    "unmodelled": "Nothing to change in the run: these ops have no cost formula yet.",
}


def annotate(findings: list[dict], rows: list[dict]) -> list[dict]:
    """Set estimated, confidence and lever on each finding (in place) and rank them."""
    by_id = {r["id"]: r for r in rows}
    for f in findings:
        ops = [] if f["kind"] in TIMELINE_KINDS else [by_id[i] for i in f.get("ops") or () if i in by_id]
        est = bool(f.get("estimated")) or any(r.get("estimated") for r in ops)
        opaque = bool(ops) and all(r.get("opaque") for r in ops)
        f["estimated"] = est or opaque
        if "confidence" not in f:
            if opaque or f["kind"] in LOW_KINDS:
                f["confidence"] = "low"
            elif est or f["kind"] in MEDIUM_KINDS:
                f["confidence"] = "medium"
            else:
                f["confidence"] = "high"
        f["lever"] = f.get("saving_us", 0.0) >= LEVER_MIN_US
        f.setdefault("group", f["kind"])
        if not f.get("fix"):
            f["fix"] = FIX.get(f["kind"]) or _first_sentence(f.get("text") or "")
    findings.sort(key=lambda f: (not f["lever"], -f.get("saving_us", 0.0) * WEIGHT[f["confidence"]],
                                 f["kind"], f["title"]))
    return findings


def project(findings: list[dict], rows: list[dict], busy_us: float, idle_us: float,
            streams: list[dict[str, float]] | None = None) -> dict:
    """The combined projection of every lever, each µs of device time counted once. streams: per stream of
    the primary device, its GPU time by op id ("" for events of no op): the span after never drops below the
    critical stream's time left after the levers (`floor_us`)."""
    left = {r["id"]: r["device_time_us"] for r in rows}
    total = {r["id"]: r["device_time_us"] for r in rows}
    idle_saved = 0.0
    unassigned = 0.0
    for f in findings:
        if not f.get("lever"):
            continue
        idle_part = min(max(f.get("idle_us") or 0.0, 0.0), f["saving_us"])
        busy = f["saving_us"] - idle_part
        idle_saved += idle_part
        ids = [i for i in f.get("ops") or () if total.get(i)]
        weight = sum(total[i] for i in ids)
        if busy <= 0:
            continue
        if weight <= 0:
            unassigned += busy
            continue
        for i in ids:
            frac = min(busy * total[i] / weight / total[i], 1.0)  # the share of this op's time it recovers
            left[i] *= 1.0 - frac
    saved_busy = sum(total[i] - left[i] for i in total) + unassigned
    sum_time = sum(total.values())
    # savings are counted on summed kernel time; the busy union is at most that sum
    scale = busy_us / sum_time if sum_time > 0 and busy_us < sum_time else 1.0
    after_busy = max(busy_us - saved_busy * scale, 0.0)
    after_idle = max(idle_us - idle_saved, 0.0)
    floor = critical_floor(streams, left, total)
    return {
        "now_us": busy_us,
        "after_us": after_busy,
        "saved_us": busy_us - after_busy,
        "idle_now_us": idle_us,
        "idle_after_us": after_idle,
        "span_now_us": busy_us + idle_us,
        "span_after_us": max(after_busy + after_idle, floor),
        "floor_us": floor,
        "levers": sum(1 for f in findings if f.get("lever")),
        "claimed_us": sum(f["saving_us"] for f in findings if f.get("lever")),
        "note": ("each finding's saving is an upper bound for that change alone; combined, an op keeps "
                 "t x (1 - f1) x (1 - f2) ... of its time, so overlapping findings never count a µs twice. "
                 "Savings on one stream under another stream's work are assumed to shorten the busy time."),
    }


def critical_floor(streams: list[dict[str, float]] | None, left: dict[str, float], total: dict[str, float]) -> float:
    """The critical stream's GPU time left after the levers: each op's time on it scaled by the share of the op
    the levers leave (events of no op, and ops no lever touches, keep all of theirs); the largest over streams."""
    best = 0.0
    for st in streams or ():
        kept = sum(t * (left[i] / total[i] if total.get(i) else 1.0) for i, t in st.items())
        best = max(best, kept)
    return best


def _first_sentence(text: str) -> str:
    cut = text.find(". ")
    return text if cut < 0 else text[:cut + 1]


# kinds whose findings share one fix: several of one group are one lever in the plan
MERGE_KINDS = frozenset({"tensor_core_dtype", "fusion", "gemm_shape", "host_copy", "layout", "sync_stall"})
_MANY = {"tensor_core_dtype": "{n} matmul / convolution signatures could run on faster tensor cores",
         "fusion": "{n} op chains could each be one kernel",
         "gemm_shape": "{n} GEMM shapes waste work on tile and wave padding",
         "host_copy": "{n} host copies could be pinned and overlapped",
         "layout": "{n} layout conversions run around convolutions",
         "sync_stall": "{n} blocking host calls stall the GPU",
         # groups of a kind that read better by what they are
         "attention": "{n} attention blocks are written out as separate matmul and softmax kernels"}


def _merged_title(members: list[dict]) -> str:
    """One lever made of several findings of a kind: how many, and what they are when each names
    what it is (fusion chains name the layer they write out), else the largest's title."""
    f = members[0]
    head = _MANY.get(f.get("group") or "", _MANY[f["kind"]]).format(n=len(members))
    named = [(m["pattern"].split(" written out")[0], m["saving_us"]) for m in members if m.get("pattern")]
    if len(named) == len(members):
        return head + ": " + ", ".join(f"{name} ({u.us(us)})" for name, us in named[:4]) + (
            f" and {len(named) - 4} more" if len(named) > 4 else "")
    return head + f"; the largest: {f['title']}"


def _merged_fix(members: list[dict]) -> str | None:
    """The fixes of a lever's findings, each said once, in saving order (at most three)."""
    fixes = list(dict.fromkeys(m.get("fix") for m in members if m.get("fix")))
    return " ".join(fixes[:3]) if fixes else None


def plan(findings: list[dict], rows: list[dict], busy_us: float, idle_us: float,
         streams: list[dict[str, float]] | None = None, steps: int = 0, step_us: float | None = None) -> list[dict]:
    """"Do this first": the PLAN_SIZE best levers, findings of one group that share one fix (MERGE_KINDS: every
    fp32 conv to bf16, every fusion chain by torch.compile) being one lever ranked by their savings together
    (x confidence weight, as findings are ranked), and notes on time nothing costs (`holds_us`: a kernel
    launched outside any op that dominates the device) ranked by the time they hold, saving nothing; each with
    its saving (its findings together), the ledger term it comes from (`source_term`), and the span left after
    it and every lever above it (the projection's rule, so no µs is saved twice; never below the critical
    stream's own time, `floor_us`). With two profiler steps or more, `step_us` (the median step) and
    `step_after_us`: the median step less the span's saving spread over the steps, at least the step's
    share of the floor (step x floor / span). Every renderer reads these numbers; none computes its own."""
    entries: list[dict] = []
    fill: list[dict] = []  # notes on uncosted time that take the places levers leave (fills_plan)
    for i, f in enumerate(findings):
        if not f.get("lever"):
            if f.get("holds_us") and f.get("fills_plan"):
                fill.append({"group": f"note:{i}", "idx": [i], "merge": False})
            elif f.get("holds_us"):  # a note on time nothing costs (a dominating kernel outside any op): listed by it
                entries.append({"group": f"note:{i}", "idx": [i], "merge": False})
            continue
        g = f.get("group") or f["kind"]
        same = next((e for e in entries if e["group"] == g and e["merge"]), None) if f["kind"] in MERGE_KINDS else None
        if same is not None:
            same["idx"].append(i)
        else:
            entries.append({"group": g, "idx": [i], "merge": f["kind"] in MERGE_KINDS})
    # a lever of several findings (every fp32 conv by one autocast) is ranked by what they save together
    score = {id(e): sum((findings[j]["saving_us"] or findings[j].get("holds_us") or 0.0)
                        * WEIGHT[findings[j]["confidence"]] for j in e["idx"]) for e in entries}
    entries = sorted(entries, key=lambda e: -score[id(e)])[:PLAN_SIZE]
    entries += sorted(fill, key=lambda e: -findings[e["idx"][0]]["holds_us"])[:PLAN_SIZE - len(entries)]
    out = []
    for k, e in enumerate(entries, 1):
        f = findings[e["idx"][0]]
        mine = project([findings[j] for j in e["idx"]], rows, busy_us, idle_us, streams)
        p = project([findings[j] for x in entries[:k] for j in x["idx"]], rows, busy_us, idle_us, streams)
        more = len(e["idx"]) - 1
        members = [findings[j] for j in e["idx"]]
        entry = {"finding": e["idx"][0], "findings": list(e["idx"]), "id": f.get("id"), "kind": f["kind"],
                 "title": _merged_title(members) if more else f["title"], "fix": _merged_fix(members),
                 "saving_us": f["saving_us"] if not more else mine["span_now_us"] - mine["span_after_us"],
                 "confidence": f["confidence"], "span_after_us": p["span_after_us"],
                 "span_now_us": p["span_now_us"], "floor_us": p["floor_us"],
                 "source_term": _merged_source(members)}
        if steps >= 2 and step_us:
            saved = p["span_now_us"] - p["span_after_us"]
            floor = step_us * p["floor_us"] / p["span_now_us"] if p["span_now_us"] > 0 else 0.0
            entry.update({"step_us": step_us, "step_after_us": max(step_us - saved / steps, floor, 0.0)})
        out.append(entry)
    return out


def _merged_source(members: list[dict]) -> dict | None:
    """The ledger term(s) a plan entry's findings come from, and what they may claim together: per term the
    members' claims added, at most the term."""
    srcs = [{**m["source_term"], "us": m["source_term"]["us"] if m["source_term"].get("us") is not None
             else m.get("saving_us", 0.0)} for m in members if isinstance(m.get("source_term"), dict)]
    if not srcs:
        return None
    by: dict[str, list[dict]] = {}
    for x in srcs:
        by.setdefault(x["term"], []).append(x)
    us = 0.0
    for group in by.values():
        claim = sum(x.get("us") or 0.0 for x in group)
        whole = group[0].get("term_us")
        us += min(claim, whole) if whole is not None else claim
    return {"term": " | ".join(by), "us": us,
            "term_us": by[srcs[0]["term"]][0].get("term_us") if len(by) == 1 else None}
