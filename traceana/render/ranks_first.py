"""Display strings of the cross-rank first screen and collective waits (render/ranks_html.py's page and
markdown): "Do this first" for the run, who waited for whom at which collective, how the collectives
were matched, and the rank table's wait, communication, memory and projection columns.

Reads the untrusted saved document through traceana/document.py's helpers: every string cut, every
number checked; a hand-edited or older document renders what it has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana.document import mapping, seq
from traceana.ranks.first import WORDS
from traceana.render.views import fmt_bytes, fmt_int, fmt_time_us
from traceana.units import num, text

TOP_WAITS = 10
_METHOD = {"seq": "by the trace's sequence numbers", "order": "by their order in the group",
           "time": "by time (their order did not line up: events missing from a rank, or other windows)"}
_PARTS = {"work": "work", "comm": "other collectives", "data": "data loading", "sync": "blocking calls",
          "host_dispatch": "host dispatch", "launch_gaps": "launch gaps", "stream_wait": "stream waits",
          "no_work": "GPU idle", "untracked": "host time, no op"}


def levers(doc: Mapping[str, Any]) -> list[dict[str, str]]:
    return [{"title": text(x.get("title"), 300), "text": text(x.get("text"), 1500), "fix": text(x.get("fix"), 600),
             "kind": text(x.get("kind"), 20)} for x in seq(doc.get("first")) if isinstance(x, Mapping)]


def rank_columns(r: Mapping[str, Any]) -> dict[str, str]:
    """The rank table's added columns for one rank row."""
    bound, own = num(r.get("projected_bound_us")), num(r.get("projected_step_us"))
    proj = ""
    if own is not None:
        proj = fmt_time_us(own)
        by = text(r.get("projected_bound_by"), 60)
        if by and bound is not None and bound > own:
            proj = f"{fmt_time_us(bound)} (bound by {by}; alone {fmt_time_us(own)})"
    return {"caused": fmt_time_us(r.get("wait_caused_us")), "suffered": fmt_time_us(r.get("collective_wait_us")),
            "comm_bytes": fmt_bytes(r.get("comm_bytes")) if num(r.get("comm_bytes")) is not None else "—",
            "peak_mem": fmt_bytes(r.get("peak_memory_bytes")) if num(r.get("peak_memory_bytes")) is not None else "—",
            "projected": proj or "—", "lag": fmt_time_us(r.get("step_start_lag_us"))
            if num(r.get("step_start_lag_us")) is not None else "—"}


def _what(t: Mapping[str, Any]) -> str:
    """What the late rank did in its interval, against the others' (the larger differences)."""
    ex = {k: v for k, v in mapping(t.get("extra")).items() if k in _PARTS and (num(v) or 0) > 0}
    parts = sorted(ex.items(), key=lambda kv: -kv[1])[:2]
    out = [f"{_PARTS[k]} +{fmt_time_us(v)}" for k, v in parts if (num(v) or 0) >= 1]
    ops = [f"{text(o.get('name'), 60)} {fmt_time_us(o.get('us'))}" for o in seq(t.get("ops"))[:2] if isinstance(o, Mapping)]
    return "; ".join(out) + (f" (ran {', '.join(ops)})" if ops else "")


def waits_view(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    col = mapping(doc.get("collectives"))
    if not col:
        return None
    top = []
    for t in seq(col.get("top"))[:TOP_WAITS]:
        if not isinstance(t, Mapping):
            continue
        step = num(t.get("step"))
        top.append({"kind": text(t.get("kind"), 30), "group": text(t.get("group"), 60),
                    "step": fmt_int(step) if step is not None else "—", "phase": text(t.get("phase"), 20),
                    "late": text(t.get("late"), 60), "lead": fmt_time_us(t.get("lead_us")),
                    "wait": fmt_time_us(t.get("wait_us")), "ranks": fmt_int(t.get("ranks")),
                    "most": f"{text(t.get('max_wait_rank'), 60)} {fmt_time_us(t.get('max_wait_us'))}",
                    "interval": f"{fmt_time_us(t.get('interval_us'))} vs {fmt_time_us(t.get('others_interval_us'))}",
                    "what": _what(t)})
    by = []
    for b in seq(col.get("by_rank"))[:TOP_WAITS]:
        if not isinstance(b, Mapping):
            continue
        phases = ", ".join(f"{text(k, 20)} {fmt_time_us(v)}" for k, v in mapping(b.get("by_phase_us")).items())
        causes = sorted(mapping(b.get("by_cause_us")).items(), key=lambda kv: -(num(kv[1]) or 0))[:3]
        by.append({"label": text(b.get("label"), 60), "caused": fmt_time_us(b.get("caused_us")),
                   "last": fmt_int(b.get("last_arrivals")), "phases": phases,
                   "causes": ", ".join(f"{WORDS.get(text(k, 30), text(k, 30))} {fmt_time_us(v)}" for k, v in causes),
                   "ops": "; ".join(f"{text(o.get('name'), 80)} {fmt_time_us(o.get('us'))}"
                                    for o in seq(b.get("ops"))[:3] if isinstance(o, Mapping))})
    notes = []
    methods = mapping(col.get("methods"))
    if methods:
        groups = [f"{text(g, 60)} {_METHOD.get(text(m), text(m, 20))}" for g, m in list(methods.items())[:6]]
        notes.append(f"{fmt_int(col.get('matched'))} collectives matched across ranks ({'; '.join(groups)}); "
                     f"{fmt_int(col.get('unmatched_calls'))} of the ranks' {fmt_int(col.get('calls'))} calls had no "
                     "counterpart and are not counted.")
    clock = mapping(col.get("clock"))
    offs = mapping(clock.get("offsets_us"))
    if offs:
        shown = ", ".join(f"{text(k, 60)} {fmt_time_us(v)}" for k, v in list(offs.items())[:6])
        notes.append(f"Clocks: {fmt_int(len(offs))} rank(s) recorded on another clock than {text(clock.get('reference'), 60)} "
                     f"({'hosts differ' if clock.get('hosts_differ') else 'their collectives end apart'}); "
                     f"their times are shifted by the median difference of the collectives' ends: {shown}.")
    mism = []
    for x in seq(col.get("mismatches"))[:5]:
        if not isinstance(x, Mapping):
            continue
        odd = ", ".join(f"rank {text(o.get('rank'), 12)} {text(o.get('value'), 40)}" for o in seq(x.get("odd"))[:4]
                        if isinstance(o, Mapping))
        mism.append(f"collective #{fmt_int(x.get('set'))}: {text(x.get('what'), 10)} differs — most ranks "
                    f"{text(x.get('common'), 40)}; {odd}")
    count = num(col.get("mismatch_count")) or 0
    return {"top": top, "by_rank": by, "notes": notes, "mismatches": mism,
            "mismatch_more": fmt_int(count - len(mism)) if count > len(mism) else ""}
