"""The HTML report's "Utilisation and idle time" section: achieved rates over the span, the
ledger's idle terms (each with its share of the idle time: the same numbers as the stacked bar
and the sentence), the blocking host calls behind the idle time, the largest gaps, and
Holistic Trace Analysis' own views beside them (with the ledger's notes where HTA uses the
same word for something else).

Reads the analysis dict only; strings are left to jinja's escaping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana.render.views import fmt_int, fmt_pct, fmt_sig, fmt_time_us, short_name
from traceana.document import mapping, seq, share
from traceana.units import num, text
from traceana.render.first import ledger, terms


#: Gaps shorter than this are not listed among the largest: under the trace clock's microsecond they are
#: rounding, not idle time (they stay in the idle terms, each µs counted once).
MIN_GAP_US = 1.0


def utilisation_view(a: Mapping[str, Any]) -> dict[str, Any]:
    """{devices, note, utilisation, util_note, idle, causes, stalls, gaps, notes, hta}."""
    bd = mapping(a.get("breakdown"))
    led = ledger(a)
    idle_terms = [t for t in terms(a) if t["group"] == "idle"]
    idle_us = sum(t["us"] for t in idle_terms)
    causes = [(t["label"], t["time"], fmt_pct(share(t["us"], idle_us)), t["meaning"]) for t in idle_terms]
    idle = mapping(led.get("idle"))
    largest = seq(idle.get("largest"))
    gaps = [{"length": fmt_time_us(g.get("length_us")), "at": fmt_time_us(g.get("start_us")),
             "cause": text(g.get("cause"), 30).replace("_", "-"),
             "next": short_name(g.get("next")), "next_full": text(g.get("next"), 2000),
             "cpu": text(g.get("cpu_call"), 80)}
            for g in map(mapping, largest) if (num(g.get("length_us")) or 0.0) >= MIN_GAP_US][:10]
    stalls = [{"call": text(s.get("call"), 80), "op": text(s.get("op"), 80) or "—", "count": fmt_int(s.get("count")),
               "idle": fmt_time_us(s.get("idle_us")),
               "per_step": fmt_time_us(s.get("per_step_us")) if num(s.get("per_step_us")) is not None else "—",
               "blocked": fmt_time_us(s.get("blocked_us"))}
              for s in map(mapping, seq(idle.get("stalls"))[:10])]
    util = mapping(a.get("utilisation"))
    headline = []
    for dt, v in list(mapping(util.get("by_dtype")).items())[:6]:
        v = mapping(v)
        if num(v.get("achieved_tflops")) is not None:
            peak = num(v.get("peak_tflops"))
            headline.append((f"{text(dt, 20)} FLOP/s", f"{fmt_sig(v.get('achieved_tflops'))} TFLOP/s"
                             + (f" of {fmt_sig(peak)} ({fmt_pct(v.get('pct_of_peak'))})" if peak else "")))
    if num(util.get("achieved_gbps")) is not None:
        bw = num(util.get("dram_gbps"))
        headline.append(("DRAM bandwidth", f"{fmt_sig(util.get('achieved_gbps'))} GB/s"
                         + (f" of {fmt_sig(bw)} ({fmt_pct(util.get('bandwidth_pct'))})" if bw else "")))
    notes = [(text(k, 40).replace("_", " "), text(v, 600)) for k, v in mapping(led.get("notes")).items() if text(v)]
    return {"devices": [mapping(d).get("device") for d in seq(bd.get("devices"))[:16]] or bool(idle_terms),
            "note": text(bd.get("note"), 500), "causes": causes, "gaps": gaps, "stalls": stalls,
            "idle": fmt_time_us(idle_us) if idle_terms else "", "utilisation": headline,
            "util_note": text(util.get("note"), 300), "notes": notes, "hta": _hta(a.get("hta"))}


def _hta(h: Any) -> dict[str, Any] | None:
    """Holistic Trace Analysis' views, when the analysis has them (`report --hta`)."""
    if not isinstance(h, Mapping):
        return None
    if h.get("error"):
        return {"error": text(h.get("error"), 500)}

    def err(v: Any) -> str:
        return text(v.get("error"), 300) if isinstance(v, Mapping) else ""

    tmp = mapping(h.get("temporal"))
    temporal = [(label, fmt_time_us(tmp.get(k)), fmt_pct(tmp.get(p)))
                for label, k, p in (("idle", "idle_us", "idle_pct"), ("compute", "compute_us", "compute_pct"),
                                    ("non-compute", "non_compute_us", "non_compute_pct"))] if tmp and not err(tmp) else []
    idle = [(text(mapping(r).get("stream"), 20), text(mapping(r).get("category"), 30),
             fmt_time_us(mapping(r).get("idle_us")), fmt_pct((num(mapping(r).get("ratio")) or 0) * 100))
            for r in seq(h.get("idle"))[:60]]
    types = [(text(mapping(r).get("type"), 40), fmt_time_us(mapping(r).get("us")), fmt_pct(mapping(r).get("pct")))
             for r in seq(h.get("kernel_types"))[:10]]
    overlap = h.get("comm_overlap_pct")
    return {"version": text(h.get("version"), 20), "rank": text(h.get("rank"), 12), "temporal": temporal,
            "temporal_error": err(h.get("temporal")), "idle": idle, "idle_error": err(h.get("idle")),
            "types": types, "types_error": err(h.get("kernel_types")),
            "overlap": fmt_pct(overlap) if num(overlap) is not None else (err(overlap) or "no collectives")}
