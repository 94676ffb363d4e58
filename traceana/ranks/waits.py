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
    bounds = np.searchsorted(m.rank, np.arange(len(summaries) + 1))  # the calls are laid out rank by rank
    for i, s in enumerate(summaries):
        nums = np.asarray(s.get("step_numbers") or [], dtype=np.int64)
        if not len(nums):
            continue
        st = np.asarray(s["step_starts"], dtype=np.float64)
        o = np.argsort(nums)
        k = step[bounds[i]:bounds[i + 1]]
        j = np.clip(np.searchsorted(nums[o], k), 0, len(nums) - 1)
        out[bounds[i]:bounds[i + 1]] = np.where(nums[o][j] == k, st[o][j] - m.offsets[i], np.nan)
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
    by_op: list[dict[str, float]] = [{} for _ in range(n)]
    idx = np.flatnonzero(m.set >= 0)
    idx = idx[np.lexsort((t[idx], m.set[idx]))]  # by set, then arrival: the last is each run's end
    sid = m.set[idx]
    new = np.ones(len(idx), dtype=bool)
    new[1:] = sid[1:] != sid[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(idx) - 1) if len(idx) else first
    run = np.cumsum(new) - 1  # per member: its set's run
    L = idx[last]  # per run: the last arrival
    Lm = L[run]  # per member: its set's last arrival
    other = idx[np.ones(len(idx), dtype=bool) & (np.arange(len(idx)) != last[run])]
    o_run = run[np.arange(len(idx)) != last[run]]
    dur = np.where(np.isfinite(end), end - t, np.inf)
    w = np.clip(t[Lm] - t[idx], 0.0, dur[idx])[np.arange(len(idx)) != last[run]]
    n_runs = len(first)
    total = np.bincount(o_run, weights=w, minlength=n_runs)
    # a late step start: the late rank's interval holds its step's start; each other's wait up to how much
    # later the late rank entered that step is the step start's
    holds = np.isfinite(s_start[L]) & (w0[L] < s_start[L]) & (s_start[L] <= t[L])
    lag = np.nan_to_num(np.clip(s_start[L][o_run] - s_start[other], 0.0, None), nan=0.0, posinf=0.0)
    step_part = np.bincount(o_run, weights=np.where(holds[o_run], np.minimum(lag, w), 0.0), minlength=n_runs)
    r_last = m.rank[L]
    ph_last = np.where(phase[L] >= 0, phase[L], BUCKETS.index("unknown"))
    last_count = np.bincount(r_last, minlength=n)
    np.add.at(caused, (r_last, ph_last), total - step_part)
    np.add.at(caused, (r_last, np.full(n_runs, BUCKETS.index("step start"))), step_part)
    ph_o = np.where(phase[other] >= 0, phase[other], BUCKETS.index("unknown"))
    np.add.at(suffered, (m.rank[other], ph_o), w)
    # the late rank's interval against the median of the others' intervals in the same set
    med = np.column_stack([_run_median(o_run, col[other], n_runs) for col in (*parts.T, length, w0)])
    ex = np.column_stack([parts[L] - med[:, :len(PARTS)], length[L] - med[:, len(PARTS)]])
    start_delay = w0[L] - med[:, len(PARTS) + 1]
    by_cause = np.zeros((n, len(CAUSES)))
    charged = total - step_part
    for k in np.flatnonzero(charged > 0).tolist():  # runs with a wait: few beside the members
        weights = _weights(ex[k], float(start_delay[k]))
        if weights.sum() > 0:
            by_cause[r_last[k]] += charged[k] * weights
            _charge_ops(by_op[r_last[k]], summaries[r_last[k]], int(m.call[L[k]]), charged[k] * weights[CAUSES.index("work")])
    order = np.argsort(-total, kind="stable")
    order = order[total[order] > 0]
    top = []
    for k in order[:TOP_SETS].tolist():
        mem = idx[first[k]:last[k] + 1]
        x = {"set": int(m.set[L[k]]), "total": float(total[k]), "L": int(L[k]), "others": mem[:-1],
             "w": w[o_run == k], "step_part": float(step_part[k]), "ex": ex[k], "med_len": float(med[k, len(PARTS)]),
             "ph": BUCKETS[ph_last[k]], "lead": float(t[L[k]] - t[mem[-2]]) if len(mem) >= 2 else 0.0}
        top.append(_set_row(x, summaries, m, labels, kind, step, length))
    return {
        "caused": caused, "suffered": suffered, "last_count": last_count, "by_cause": by_cause, "by_op": by_op,
        "top_sets": top, "sets_with_wait": int((total > 0).sum()), "skew": step_skew(summaries, m, labels),
    }


def _run_median(run: np.ndarray, v: np.ndarray, n_runs: int) -> np.ndarray:
    """Per run (0..n_runs-1; runs is non-decreasing): the median of its values (nan for an empty run)."""
    out = np.full(n_runs, np.nan)
    if not len(run):
        return out
    o = np.lexsort((v, run))
    r, x = run[o], v[o]
    lo = np.searchsorted(r, np.arange(n_runs), side="left")
    hi = np.searchsorted(r, np.arange(n_runs), side="right")
    has = hi > lo
    a = lo + (hi - lo - 1) // 2
    b = lo + (hi - lo) // 2
    out[has] = (x[a[has]] + x[b[has]]) / 2
    return out


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
