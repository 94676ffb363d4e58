"""The cross-rank collective section: matched collectives, who waited for whom, and why.

`collective_section(rows, summaries)` runs ranks/match.py and ranks/waits.py over every rank's call
summary and returns (per-rank figures, the document's "collectives" section). Times are per step when
every rank has steps (each rank's totals x its `scale`), else per trace. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from traceana.ranks.calls import KINDS
from traceana.ranks.match import match
from traceana.ranks.waits import BUCKETS, CAUSES, waits

TOP_OPS = 5


def _received(summaries: Sequence[dict], m: Any) -> np.ndarray:
    """Per call: the elements it received in an all_to_all (nan when not known): its output's elements,
    else its out splits' sum x elements per row (its input's elements / its in splits' sum)."""
    out = []
    for s in summaries:
        n_out = np.asarray(s["n_out"], dtype=np.float64)
        r = np.where(n_out >= 0, n_out, np.nan)
        for i, (ins, outs) in (s.get("splits") or {}).items():
            i = int(i)
            if np.isnan(r[i]) and outs and ins and s["n_in"][i] >= 0 and sum(ins):
                r[i] = sum(outs) * s["n_in"][i] / sum(ins)
        out.append(r)
    return np.concatenate(out) if out else np.zeros(0)


def _a2a(summaries: Sequence[dict], m: Any, labels: Sequence[str], scale: np.ndarray) -> dict[str, Any] | None:
    """Uneven all_to_all: per rank the elements it received in matched all_to_all calls (per step), and
    how far the largest is from the mean."""
    kind = np.concatenate([np.asarray(s["kind"], dtype=np.int64) for s in summaries])
    recv = _received(summaries, m)
    sel = (m.set >= 0) & (kind == KINDS.index("all_to_all")) & np.isfinite(recv)
    if not sel.any():
        return None
    per = np.bincount(m.rank[sel], weights=recv[sel], minlength=len(summaries)) * scale
    held = np.bincount(m.rank[sel], minlength=len(summaries)) > 0
    if held.sum() < 2 or per[held].mean() <= 0:
        return None
    mean = float(per[held].mean())
    top = int(np.argmax(np.where(held, per, -1)))
    low = int(np.argmin(np.where(held, per, np.inf)))
    return {"calls": int(sel.sum()), "received_elements": {labels[i]: float(per[i]) for i in np.flatnonzero(held)},
            "max_rank": labels[top], "max_elements": float(per[top]), "min_rank": labels[low],
            "min_elements": float(per[low]), "mean_elements": mean, "max_over_mean": float(per[top]) / mean}


def collective_section(rows: list[dict[str, Any]], summaries: Sequence[dict]) -> dict[str, Any]:
    """Sets each row's wait_total / caused_total (totals, like the other per-rank totals before scaling)
    and returns the "collectives" section (already per step / per trace)."""
    labels = [r["label"] for r in rows]
    ranks = [r["rank"] for r in rows]
    scale = np.array([r["scale"] for r in rows])
    m = match(summaries, ranks)
    w = waits(summaries, m, labels)
    n = len(rows)
    for i, r in enumerate(rows):
        r["wait_total"] = float(w["suffered"][i].sum())
        r["caused_total"] = float(w["caused"][i].sum())
        r["caused_by_phase"] = {b: float(v) for b, v in zip(BUCKETS, w["caused"][i].tolist()) if v > 0}
        r["suffered_by_phase"] = {b: float(v) for b, v in zip(BUCKETS, w["suffered"][i].tolist()) if v > 0}
        r["last_arrivals"] = int(w["last_count"][i])
        b = np.asarray(summaries[i]["bytes"], dtype=np.float64)
        st = np.asarray(summaries[i]["step"])
        use = np.isfinite(b) & ((st >= 0) if r["steps"] else True)
        r["comm_bytes_total"] = float(b[use].sum()) if use.any() else None
        r["calls_n"] = int(summaries[i].get("n") or 0)
    by_rank = []
    for i in np.argsort(-w["caused"].sum(axis=1), kind="stable").tolist():
        caused = w["caused"][i] * scale[i]
        if caused.sum() <= 0:
            continue
        ops = sorted(w["by_op"][i].items(), key=lambda kv: -kv[1])[:TOP_OPS]
        by_rank.append({
            "rank": ranks[i], "label": labels[i], "caused_us": float(caused.sum()),
            "by_phase_us": {b: float(v) for b, v in zip(BUCKETS, caused.tolist()) if v > 0},
            "last_arrivals": int(w["last_count"][i]),
            "by_cause_us": {c: float(v) * scale[i] for c, v in zip(CAUSES, w["by_cause"][i].tolist()) if v > 0},
            "ops": [{"name": k, "us": float(v) * scale[i]} for k, v in ops],
        })
    skew = w["skew"]
    skew_out = None
    if skew is not None:
        med = skew["median_lag_us"]
        for i, r in enumerate(rows):
            r["step_start_lag_us"] = float(med[i])
        skew_out = {"steps": len(skew["steps"]), "rank": ranks[skew["rank_row"]], "label": skew["label"],
                    "lag_median_us": skew["lag_median_us"], "lag_max_us": skew["lag_max_us"],
                    "latest_each_step": skew["latest"][:64],
                    "caused_us": float(sum(w["caused"][i][BUCKETS.index("step start")] * scale[i] for i in range(n)))}
    clock = m.clock
    ref = clock.get("reference", 0)
    total_wait = float(sum(w["suffered"][i].sum() * scale[i] for i in range(n)))
    return {
        "matched": m.n_sets, "calls": int(len(m.set)), "unmatched_calls": int((m.set < 0).sum()),
        "methods": m.methods, "wait_us": total_wait,
        "clock": {"reference": labels[ref] if n else None, "applied": clock.get("applied", False),
                  "hosts_differ": clock.get("hosts_differ", False),
                  "hosts": sorted({str(s.get("host")) for s in summaries if s.get("host")})[:16],
                  "offsets_us": {labels[x["rank_row"]]: x["offset_us"] for x in clock.get("ranks", []) if x["applied"]},
                  "estimates": [{"label": labels[x["rank_row"]], "offset_us": x["offset_us"], "spread_us": x["spread_us"],
                                 "collectives": x["sets"], "applied": x["applied"]} for x in clock.get("ranks", [])[:64]]},
        "mismatches": [{**x, "odd": [{"rank": o["rank"], "value": o["value"]} for o in x["odd"]]} for x in m.mismatches],
        "mismatch_count": m.mismatch_count,
        "by_rank": by_rank,
        "top": [{k: v for k, v in t.items() if k != "late_row"} for t in w["top_sets"]],
        "sets_with_wait": w["sets_with_wait"],
        "step_skew": skew_out,
        "all_to_all": _a2a(summaries, m, labels, scale),
        "work_us": {labels[i]: float(np.asarray(summaries[i]["work_us"], dtype=np.float64).sum() * scale[i])
                    for i in range(n)},
    }
