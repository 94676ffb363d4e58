"""Arrival and wait per matched collective, who caused it, and what the late rank was doing.

Everyone leaves a collective together, so whoever arrives last sets the time. For each matched set
(ranks/match.py), on the reference clock:

  last arrival   the latest arrival among its ranks; `lead` = how much later than the second-latest
  wait           each other rank's: last arrival - its arrival (at most its own time in the call)
  caused         the set's waits summed, charged to the last rank, in the phase it issued the call
                 in — except the part explained by a late step start: when the late rank's interval
                 before the call holds its ProfilerStep start, each other rank's wait up to how much
                 later the late rank entered that step is charged to "step start"
  why            the late rank's interval before the call (ranks/windows.py) against the median of the
                 other ranks' intervals for the same call: longer by `extra`, split into more work,
                 more idle by cause, more data loading, more communication

Summed over the run: each rank's wait caused (by phase: forward / backward / optimizer / step start /
unknown) and suffered, how often it was last, and the split of its extra interval time. Step-start
skew: per ProfilerStep, each rank's start on the reference clock less the earliest rank's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from traceana.link.steps import PHASES
from traceana.ranks.calls import KINDS
from traceana.ranks.match import Matched
from traceana.ranks.windows import IDLE

BUCKETS = (*PHASES, "step start", "unknown")
PARTS = ("work", "comm", "data", *IDLE)  # the interval split the "why" compares
#: what a late rank's lateness is charged to: a later start of its interval (it left an earlier
#: collective later), or more of one part of the interval than the other ranks had
CAUSES = ("earlier", *PARTS)
TOP_SETS = 10


def _col(summaries: Sequence[dict], key: str, dtype: Any) -> np.ndarray:
    arrs = [np.asarray(s[key], dtype=dtype) for s in summaries]
    return np.concatenate(arrs) if arrs else np.zeros(0, dtype)


def _step_start(summaries: Sequence[dict], m: Matched, step: np.ndarray) -> np.ndarray:
    """Per call: the (corrected) start of its rank's ProfilerStep of that number, nan when none."""
    out = np.full(len(step), np.nan)
    for i, s in enumerate(summaries):
        nums = list(s.get("step_numbers") or [])
        if not nums:
            continue
        sel = np.flatnonzero(m.rank == i)
        starts = dict(zip(nums, s["step_starts"]))
        out[sel] = [starts.get(int(k), np.nan) - m.offsets[i] for k in step[sel].tolist()]
    return out


def waits(summaries: Sequence[dict], m: Matched, labels: Sequence[str]) -> dict[str, Any]:
    """The per-set and per-rank figures (totals over the traces; see the module doc)."""
    n = len(summaries)
    kind = _col(summaries, "kind", np.int64)
    phase = _col(summaries, "phase", np.int64)
    step = _col(summaries, "step", np.int64)
    w0 = _col(summaries, "w0", np.float64) - (np.array(m.offsets)[m.rank] if n else 0.0)
    parts = np.column_stack([_col(summaries, "work_us", np.float64), _col(summaries, "comm_us", np.float64),
                             _col(summaries, "data_us", np.float64)]
                            + [np.concatenate([np.asarray(s["idle_us"], dtype=np.float64).reshape(-1, len(IDLE))[:, j]
                                               for s in summaries]) if n else np.zeros(0) for j in range(len(IDLE))])
    t, end = m.t, m.end
    length = np.maximum(t - w0, 0.0)
    s_start = _step_start(summaries, m, step)
    caused = np.zeros((n, len(BUCKETS)))
    suffered = np.zeros((n, len(BUCKETS)))
    last_count = np.zeros(n, dtype=np.int64)
    by_cause = np.zeros((n, len(CAUSES)))
    by_op: list[dict[str, float]] = [{} for _ in range(n)]
    sets: list[dict[str, Any]] = []
    idx = np.flatnonzero(m.set >= 0)
    idx = idx[np.lexsort((t[idx], m.set[idx]))]  # by set, then arrival: the last is each run's end
    cuts = np.flatnonzero(np.diff(m.set[idx])) + 1
    starts = np.concatenate(([0], cuts)) if len(idx) else np.zeros(0, np.int64)
    stops = np.concatenate((cuts, [len(idx)])) if len(idx) else np.zeros(0, np.int64)
    dur = np.where(np.isfinite(end), end - t, np.inf)
    for a, b in zip(starts.tolist(), stops.tolist()):
        mem = idx[a:b]
        L = mem[-1]
        others = mem[:-1]
        w = np.clip(t[L] - t[others], 0.0, dur[others])
        total = float(w.sum())
        ph = PHASES[phase[L]] if phase[L] >= 0 else "unknown"
        r_last = int(m.rank[L])
        last_count[r_last] += 1
        # a late step start: the late rank's interval holds its step's start
        step_part = 0.0
        if np.isfinite(s_start[L]) and w0[L] < s_start[L] <= t[L]:
            lag = np.clip(s_start[L] - s_start[others], 0.0, None)
            lag = np.where(np.isfinite(lag), lag, 0.0)
            step_part = float(np.minimum(lag, w).sum())
        caused[r_last, BUCKETS.index("step start")] += step_part
        caused[r_last, BUCKETS.index(ph)] += total - step_part
        for c, wq in zip(others.tolist(), w.tolist()):
            pq = PHASES[phase[c]] if phase[c] >= 0 else "unknown"
            suffered[int(m.rank[c]), BUCKETS.index(pq)] += wq
        med_parts = np.median(parts[others], axis=0)
        med_len = float(np.median(length[others]))
        ex = np.concatenate((parts[L] - med_parts, [length[L] - med_len]))
        weights = _weights(ex, float(w0[L] - np.median(w0[others])))
        charged = total - step_part
        if charged > 0 and weights.sum() > 0:
            by_cause[r_last] += charged * weights
            _charge_ops(by_op[r_last], summaries[r_last], int(m.call[L]), charged * weights[CAUSES.index("work")])
        if total > 0:
            sets.append({"set": int(m.set[L]), "total": total, "L": int(L), "others": others, "w": w,
                         "step_part": step_part, "ex": ex, "med_len": med_len, "ph": ph,
                         "lead": float(t[L] - t[mem[-2]]) if len(mem) >= 2 else 0.0})
    sets.sort(key=lambda x: -x["total"])
    top = [_set_row(x, summaries, m, labels, kind, step, length) for x in sets[:TOP_SETS]]
    return {
        "caused": caused, "suffered": suffered, "last_count": last_count, "by_cause": by_cause, "by_op": by_op,
        "top_sets": top, "sets_with_wait": len(sets), "skew": step_skew(summaries, m, labels),
    }


def _weights(ex: np.ndarray, start_delay: float) -> np.ndarray:
    """Shares of CAUSES explaining one late arrival: the positive differences of the late rank's interval
    against the others' (data loading taken out of the host-side idle it shows up as), normalised."""
    d = {p: float(v) for p, v in zip(PARTS, ex[:len(PARTS)].tolist())}
    data = max(d["data"], 0.0)
    for host in ("host_dispatch", "untracked", "no_work"):  # the loader's time is host time the GPU or thread lost
        take = min(max(d[host], 0.0), data)
        d[host] -= take
        data -= take
    d["data"] = max(d["data"], 0.0) - data  # what was not idle anyway
    v = np.array([max(start_delay, 0.0)] + [max(d[p], 0.0) for p in PARTS])
    tot = v.sum()
    return v / tot if tot > 0 else v


def _charge_ops(into: dict[str, float], s: dict, call: int, us: float) -> None:
    """Spread `us` of work over the ops that ran most in the call's interval (by their time in it)."""
    names = s.get("names") or []
    top = [(names[k], float(u)) for k, u in zip(np.asarray(s["top"])[call].tolist(), np.asarray(s["top_us"])[call].tolist())
           if k >= 0 and u > 0]
    tot = float(np.asarray(s["work_us"])[call])
    if us <= 0 or tot <= 0:
        return
    for name, u in top:
        into[name] = into.get(name, 0.0) + us * min(u / tot, 1.0)


def _set_row(x: dict, summaries: Sequence[dict], m: Matched, labels: Sequence[str], kind: np.ndarray,
             step: np.ndarray, length: np.ndarray) -> dict[str, Any]:
    L = x["L"]
    r = int(m.rank[L])
    s = summaries[r]
    names = s.get("names") or []
    call = int(m.call[L])
    waits_ = {labels[int(m.rank[c])]: float(w) for c, w in zip(x["others"].tolist(), x["w"].tolist())}
    most = max(waits_.items(), key=lambda kv: kv[1])
    return {
        "set": x["set"], "kind": KINDS[kind[L]], "group": (s.get("groups") or ["?"])[int(np.asarray(s["group"])[call])],
        "step": int(step[L]) if step[L] >= 0 else None, "phase": x["ph"], "late": labels[r], "late_row": r,
        "ranks": len(x["others"]) + 1, "wait_us": x["total"], "lead_us": x["lead"], "step_start_us": x["step_part"],
        "max_wait_us": most[1], "max_wait_rank": most[0], "median_wait_us": float(np.median(x["w"])),
        "interval_us": float(length[L]), "others_interval_us": x["med_len"],
        "extra": {p: float(v) for p, v in zip((*PARTS, "interval"), x["ex"].tolist())},
        "ops": [{"name": names[k], "us": float(u)} for k, u in zip(np.asarray(s["top"])[call].tolist(),
                                                                   np.asarray(s["top_us"])[call].tolist())
                if k >= 0 and u > 0],
    }


def step_skew(summaries: Sequence[dict], m: Matched, labels: Sequence[str]) -> dict[str, Any] | None:
    """Per ProfilerStep every rank has: each rank's start (reference clock) less the earliest's."""
    common = None
    for s in summaries:
        nums = set(s.get("step_numbers") or [])
        common = nums if common is None else common & nums
    if not common or len(summaries) < 2:
        return None
    steps = sorted(common)
    lag = np.zeros((len(summaries), len(steps)))
    for i, s in enumerate(summaries):
        st = dict(zip(s["step_numbers"], s["step_starts"]))
        lag[i] = [st[k] - m.offsets[i] for k in steps]
    lag -= lag.min(axis=0)
    latest = lag.argmax(axis=0)
    med = np.median(lag, axis=1)
    worst = int(np.argmax(med))
    return {"steps": steps, "lag_us": lag, "latest": [labels[int(i)] for i in latest.tolist()],
            "median_lag_us": med, "rank_row": worst, "label": labels[worst], "lag_median_us": float(med[worst]),
            "lag_max_us": float(lag.max())}
