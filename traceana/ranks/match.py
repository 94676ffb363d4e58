"""Collectives matched across ranks: the k-th call of each process group on every rank is one
collective, seen from every rank that took part. Pure: rank summaries (ranks/summary.py) in, matched
sets out.

Keys, first that applies:
  seq      every call of the group, on every rank, recorded its "Seq": (group, seq)
  order    (group, ProfilerStep number, place among the group's calls in that step) when every rank
           has steps, else (group, place among the group's calls); a group is its "Process Group
           Name", else the kernel's stream (stream ids relabelled by first use when the ranks' sets of
           streams differ), else one group for the whole rank (CPU backends record no group)
  p2p      a send from a to b and the recv on b from a: (a, b, step, place among a's sends to b);
           without a recorded peer a p2p call is left unmatched
  time     a group whose order-matched collectives are impossible — some rank left before another
           arrived, in more than a fifth of them (events missing from a rank's trace, ranks that
           started profiling at different points) — is matched again by time: each rank's calls
           against those of the rank with the most, in order, pairing calls whose intervals overlap
           and whose ends agree (everyone leaves together), of the same kind

Clocks. Ranks on one machine share a clock; ranks on different hosts (the traces' host_name
differ) or whose clocks disagree get an offset: the median, over the collectives a rank shares with
the reference rank, of its end less the reference's end (everyone leaves together, so the ends
agree on one clock). Without differing host names an offset is applied only when it stands out
from the spread of those differences: |median| > max(3 x their median absolute deviation, 100 µs).
Corrected time = recorded time - offset.

Checks: the calls of one set must agree on kind, and for all_reduce / broadcast / reduce /
all_gather / reduce_scatter on their element counts; a set that does not is a mismatch, named with
its ranks in the report's warnings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traceana.ranks.calls import KINDS, P2P, SAME_SIZE
from traceana.arrays import distinct

TOL_US = 50.0  # clock noise: a rank may seem to leave this long before another arrived
OFFSET_FLOOR_US = 100.0
BAD_SHARE = 0.2  # a group with more impossible order-matched sets than this is matched by time
_P2P_CODES = np.array([k in P2P for k in KINDS])
_OTHER = KINDS.index("other")
_SEND_RECV = {KINDS.index("send"), KINDS.index("recv")}


@dataclass
class Matched:
    """Every call of every rank (flattened, rank by rank) and the set each belongs to (-1: none)."""

    rank: np.ndarray  # row index of the rank (input order) per call
    call: np.ndarray  # the call's index in its rank's summary
    set: np.ndarray  # matched set id, -1 when unmatched
    t: np.ndarray  # arrival, corrected to the reference clock
    end: np.ndarray
    n_sets: int
    offsets: list[float]  # µs subtracted from each rank's times
    clock: dict[str, Any]
    methods: dict[str, str]  # group -> how its calls were matched
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    mismatch_count: int = 0


def _group_names(summaries: Sequence[dict]) -> list[list[str]]:
    """Each rank's group name per group index, streams relabelled by first use when the ranks' stream
    sets differ (stream ids are the process's own; the order communicators are used in is shared)."""
    names = [list(s.get("groups") or []) for s in summaries]
    streams = [frozenset(g for g in n if g.startswith("stream:")) for n in names]
    if len(set(streams)) <= 1:
        return names
    out = []
    for s, n in zip(summaries, names):
        first: dict[int, float] = {}
        for g, t in zip(np.asarray(s["group"]).tolist(), np.asarray(s["t"]).tolist()):
            first.setdefault(g, t)
        order = [g for g in sorted(first, key=first.get) if n[g].startswith("stream:")]
        rel = {g: f"stream#{i}" for i, g in enumerate(order)}
        out.append([rel.get(i, x) for i, x in enumerate(n)])
    return out


def _keys(summaries: Sequence[dict], ranks: Sequence[int], gnames: list[list[str]]
          ) -> tuple[list[list[Any]], dict[str, bool]]:
    """Per rank, per call: its matching key (None: not matched); and which groups are keyed by seq."""
    stepped = all(len(s.get("step_numbers") or ()) for s in summaries)
    seq_groups: dict[str, bool] = {}
    for s, gn in zip(summaries, gnames):
        seq, grp = np.asarray(s["seq"]), np.asarray(s["group"])
        coll = ~_P2P_CODES[np.asarray(s["kind"], dtype=np.int64)] if len(seq) else np.zeros(0, bool)
        for g in set(grp[coll].tolist()):
            ok = bool((seq[coll & (grp == g)] >= 0).all())
            seq_groups[gn[g]] = seq_groups.get(gn[g], True) and ok
    out = []
    for s, me, gn in zip(summaries, ranks, gnames):
        kind, grp, seq = np.asarray(s["kind"]).tolist(), np.asarray(s["group"]).tolist(), np.asarray(s["seq"]).tolist()
        step, peer = np.asarray(s["step"]).tolist(), np.asarray(s["peer"]).tolist()
        count: dict[tuple, int] = {}
        keys: list[Any] = []
        for k, g, q, st, p in zip(kind, grp, seq, step, peer):
            name = gn[g]
            st = st if stepped else None
            if KINDS[k] in P2P:
                if p < 0:
                    keys.append(None)
                    continue
                src, dst = (me, p) if KINDS[k] == "send" else (p, me)
                c = ("p2p", src, dst, st)
            elif seq_groups.get(name):
                c = (name, "seq", q)  # (a call split in two keeps its seq: the repeat is its own key)
            else:
                c = (name, st)
            n = count.get(c, 0)
            count[c] = n + 1
            keys.append((*c, n))
        out.append(keys)
    return out, seq_groups


def _number(keys: list[list[Any]]) -> tuple[np.ndarray, int]:
    ids: dict[Any, int] = {}
    flat = []
    for ks in keys:
        for k in ks:
            flat.append(-1 if k is None else ids.setdefault(k, len(ids)))
    return np.array(flat, dtype=np.int64), len(ids)


def _shared_sets(set_id: np.ndarray, rank: np.ndarray, n_ranks: int) -> np.ndarray:
    """set ids held by at least two ranks -> a mask over calls (others become -1)."""
    ok = set_id >= 0
    if not ok.any():
        return ok
    pairs = np.unique(np.stack([set_id[ok], rank[ok]]), axis=1)
    held = np.bincount(pairs[0], minlength=int(set_id.max()) + 1)
    return ok & (held[np.maximum(set_id, 0)] >= 2)


def _offsets(set_id: np.ndarray, rank: np.ndarray, end: np.ndarray, hosts: Sequence[Any], n: int
             ) -> tuple[list[float], dict[str, Any]]:
    """Per rank: the µs to subtract to put it on the reference rank's clock (see the module doc)."""
    ok = (set_id >= 0) & np.isfinite(end)
    counts = np.bincount(rank[ok], minlength=n)
    ref = int(np.argmax(counts)) if n else 0
    known = [h for h in hosts if h]
    differ = len(known) == len(hosts) and len(set(known)) > 1
    offsets = [0.0] * n
    applied, stats = [], []
    if not ok.any():
        return offsets, {"reference": ref, "applied": False, "hosts_differ": differ, "ranks": []}
    r_end = np.full(int(set_id.max()) + 1, np.nan)
    sel = ok & (rank == ref)
    r_end[set_id[sel]] = end[sel]
    diff = np.where(ok, end - r_end[np.maximum(set_id, 0)], np.nan)
    bounds = np.searchsorted(rank, np.arange(n + 1))  # the calls are rank by rank (match() lays them out so)
    for i in range(n):
        if i == ref:
            continue
        d = diff[bounds[i]:bounds[i + 1]]
        d = d[np.isfinite(d)]
        if len(d) < 1:
            continue
        med = float(np.median(d))
        mad = float(np.median(np.abs(d - med)))
        use = (differ and hosts[i] != hosts[ref]) or (len(d) >= 3 and abs(med) > max(3 * mad, OFFSET_FLOOR_US))
        stats.append({"rank_row": i, "offset_us": med, "spread_us": mad, "sets": len(d), "applied": bool(use)})
        if use:
            offsets[i] = med
            applied.append(i)
    return offsets, {"reference": ref, "applied": bool(applied), "hosts_differ": differ, "ranks": stats}


def _impossible(set_id: np.ndarray, t: np.ndarray, end: np.ndarray, kind: np.ndarray, n_sets: int) -> np.ndarray:
    """Per set: some rank left it before another arrived (beyond TOL_US)."""
    ok = (set_id >= 0) & np.isfinite(end) & ~_P2P_CODES[kind] & (kind != KINDS.index("broadcast"))
    last = np.full(n_sets, -np.inf)
    first_end = np.full(n_sets, np.inf)
    np.maximum.at(last, set_id[ok], t[ok])
    np.minimum.at(first_end, set_id[ok], end[ok])
    return last > first_end + TOL_US


def _compatible(a0: float, a1: float, b0: float, b1: float, ka: int, kb: int) -> bool:
    if ka != kb and _OTHER not in (ka, kb):
        return False
    if not (np.isfinite(a1) and np.isfinite(b1)):
        return False
    if a0 > b1 + TOL_US or b0 > a1 + TOL_US:
        return False
    return abs(a1 - b1) <= max(2 * TOL_US, 0.05 * min(a1 - a0, b1 - b0))


def _align(ref: list[int], other: list[int], t: np.ndarray, end: np.ndarray, kind: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (ref call, other call), in order, of compatible calls (see the module doc)."""
    i = j = 0
    out = []
    while i < len(ref) and j < len(other):
        a, b = ref[i], other[j]
        if _compatible(t[a], end[a], t[b], end[b], kind[a], kind[b]):
            if j + 1 < len(other) and _compatible(t[a], end[a], t[other[j + 1]], end[other[j + 1]], kind[a],
                                                  kind[other[j + 1]]) \
                    and abs(end[other[j + 1]] - end[a]) < abs(end[b] - end[a]):
                j += 1
                continue
            if i + 1 < len(ref) and _compatible(t[ref[i + 1]], end[ref[i + 1]], t[b], end[b], kind[ref[i + 1]], kind[b]) \
                    and abs(end[ref[i + 1]] - end[b]) < abs(end[a] - end[b]):
                i += 1
                continue
            out.append((a, b))
            i += 1
            j += 1
        elif (end[a] if np.isfinite(end[a]) else t[a]) < t[b]:
            i += 1
        else:
            j += 1
    return out


def match(summaries: Sequence[dict], ranks: Sequence[int]) -> Matched:
    """Match every rank's calls (see the module doc)."""
    n = len(summaries)
    gnames = _group_names(summaries)
    sizes = [int(s.get("n") or 0) for s in summaries]
    rank = np.repeat(np.arange(n), sizes)
    call = np.concatenate([np.arange(k) for k in sizes]) if n else np.zeros(0, np.int64)
    cat = (lambda key, dt: np.concatenate([np.asarray(s[key], dtype=dt) for s in summaries]) if n
           else np.zeros(0, dt))
    t_raw, end_raw = cat("t", np.float64), cat("end", np.float64)
    kind = cat("kind", np.int64)
    gtable: dict[str, int] = {}
    group = np.array([gtable.setdefault(gn[g], len(gtable)) for s, gn in zip(summaries, gnames)
                      for g in np.asarray(s["group"]).tolist()], dtype=np.int64)
    keys, seq_groups = _keys(summaries, ranks, gnames)
    set_id, _ = _number(keys)
    set_id = np.where(_shared_sets(set_id, rank, n), set_id, -1)
    hosts = [s.get("host") for s in summaries]
    offsets, clock = _offsets(set_id, rank, end_raw, hosts, n)
    off = np.array(offsets)[rank] if n else np.zeros(0)
    t, end = t_raw - off, end_raw - off
    methods = {g: ("seq" if seq_groups.get(g) else "order") for g in gtable}
    # groups whose order-matched sets are impossible: matched again by time
    n_sets = int(set_id.max()) + 1 if (set_id >= 0).any() else 0
    bad = _impossible(set_id, t, end, kind, n_sets) if n_sets else np.zeros(0, bool)
    realigned = False
    for g, code in gtable.items():
        if methods[g] == "seq":
            continue
        in_g = np.flatnonzero((group == code) & ~_P2P_CODES[kind])
        sets = distinct(set_id[in_g][set_id[in_g] >= 0])
        if len(sets) < 2 or bad[sets].sum() < 2 or bad[sets].mean() <= BAD_SHARE:
            continue
        srt = in_g[np.lexsort((t[in_g], rank[in_g]))]
        cut = np.flatnonzero(np.diff(rank[srt])) + 1
        by_rank = {int(rank[part[0]]): part.tolist() for part in np.split(srt, cut) if len(part)}
        ref = max(by_rank, key=lambda r: (len(by_rank[r]), -r))
        nxt = int(set_id.max()) + 1
        set_id[in_g] = -1
        for pos, c in enumerate(by_rank[ref]):
            set_id[c] = nxt + pos
        for r, cs in by_rank.items():
            if r != ref:
                for a, b in _align(by_rank[ref], cs, t, end, kind):
                    set_id[b] = set_id[a]
        methods[g] = "time"
        realigned = True
    if realigned:
        set_id = np.where(_shared_sets(set_id, rank, n), set_id, -1)
        if clock["applied"]:  # the offsets again, from the sets as now matched
            offsets, clock = _offsets(set_id, rank, end_raw, hosts, n)
            off = np.array(offsets)[rank]
            t, end = t_raw - off, end_raw - off
    # renumber the sets 0..n_sets-1 in order of first arrival
    ok = set_id >= 0
    if ok.any():
        u, inv = np.unique(set_id[ok], return_inverse=True)
        first = np.full(len(u), np.inf)
        np.minimum.at(first, inv, t[ok])
        order = np.argsort(np.argsort(first, kind="stable"), kind="stable")
        set_id[ok] = order[inv]
        n_sets = len(u)
    else:
        n_sets = 0
    m = Matched(rank=rank, call=call, set=set_id, t=t, end=end, n_sets=n_sets, offsets=offsets, clock=clock,
                methods=methods)
    _check(m, summaries, ranks, kind)
    return m


def _check(m: Matched, summaries: Sequence[dict], ranks: Sequence[int], kind: np.ndarray) -> None:
    """Kind and size mismatches within sets (see the module doc)."""
    ok = m.set >= 0
    if not ok.any():
        return
    n_in = np.concatenate([np.asarray(s["n_in"], dtype=np.int64) for s in summaries])
    n_out = np.concatenate([np.asarray(s["n_out"], dtype=np.int64) for s in summaries])
    idx = np.flatnonzero(ok)
    idx = idx[np.argsort(m.set[idx], kind="stable")]
    cuts = np.flatnonzero(np.diff(m.set[idx])) + 1
    out, count = [], 0
    for members in np.split(idx, cuts):
        kinds = kind[members]
        known = kinds[kinds != _OTHER]
        problem = None
        if set(known.tolist()) == _SEND_RECV:
            continue  # a p2p pair: one side sends, the other receives
        if len(distinct(known)) > 1:
            problem = "kind"
            vals = [KINDS[k] for k in kinds]
        else:
            k = KINDS[int(known[0])] if len(known) else "other"
            size = n_out[members] if k == "reduce_scatter" else n_in[members]
            if k in SAME_SIZE and len(distinct(size[size >= 0])) > 1:
                problem = "size"
                vals = [f"{v:,} elements" if v >= 0 else "?" for v in size.tolist()]
        if problem is None:
            continue
        count += 1
        if len(out) < 10:
            # the minority against the majority
            common = max(set(vals), key=vals.count)
            odd = [(ranks[int(m.rank[c])], v) for c, v in zip(members.tolist(), vals) if v != common]
            out.append({"set": int(m.set[members[0]]), "what": problem, "common": common,
                        "odd": [{"rank": r, "value": v} for r, v in odd[:8]], "odd_count": len(odd)})
    m.mismatches, m.mismatch_count = out, count
