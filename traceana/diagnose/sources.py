"""Every lever names the ledger term its saving comes from, and no saving is larger than that term.

The ledger (diagnose/ledger.py, lead.py) splits the primary device's span into terms, each µs once. A
finding's saving is time it takes out of one or more of them: the launch-bound lever out of the launch
gaps and the latency-bound kernels, a DataLoader lever out of the host-dispatch idle inside the
data-loading frames, a memory-bound op out of the memory-bound kernels. `attach` gives each finding
`source_term` = {term, us, term_us[, within]} — the term's name (`idle.launch_gaps`,
`kernels.memory`, `communication.transfer`, `copies` ...; several joined by " + "), the time the lever
may claim (`us`: the term, or the part of it the finding's own cause holds, and for a lever on ops at
most those ops' device time) and the whole term (`term_us`) — and caps `saving_us` at `us`, saying so
in the text when the finding's own estimate was larger.

The terms, by kind (a kind not listed takes the work terms of its ops' bounds, else the span):

  launch_bound      idle.launch_gaps + kernels.latency
  host_dispatch     idle.host_dispatch (the finding's cause's own share: diagnose/host_time.py)
  graph_launch      idle.graph_launch
  sync_stall, allocator_churn   idle.sync
  stream_wait       idle.stream_wait
  comm_exposed      communication.transfer;  comm_wait: communication.wait;  comm_unsized: .unsized
  host_copy         copies
"""

from __future__ import annotations

from traceana import units as u
from traceana.diagnose.ledger import IDLE_CAUSES, WORK

_ALIAS = {"host_link": "copies", "peer_link": "copies", "communication": "communication.exposed"}
BY_KIND = {
    "launch_bound": ("idle.launch_gaps", "kernels.latency"),
    "host_dispatch": ("idle.host_dispatch",),
    "graph_launch": ("idle.graph_launch",),
    "sync_stall": ("idle.sync",),
    "allocator_churn": ("idle.sync",),
    "stream_wait": ("idle.stream_wait",),
    "comm_exposed": ("communication.transfer",),
    "comm_wait": ("communication.wait",),
    "comm_unsized": ("communication.unsized",),
    "host_copy": ("copies",),
}
# terms whose levers each claim a disjoint part (their savings add up to at most the term)
PARTITIONED = tuple(f"idle.{c}" for c in IDLE_CAUSES) + ("communication.transfer", "copies")


def term_values(ledger: dict) -> dict[str, float]:
    """Every ledger term by its dotted name (zero when the ledger has none of it)."""
    work = ledger.get("work_by_bound") or {}
    out = {f"kernels.{k}": float(work.get(k, 0.0)) for k in WORK}
    c = ledger.get("communication") or {}
    out.update({"communication.transfer": float(c.get("exposed_transfer_us") or 0.0),
                "communication.wait": float(c.get("exposed_wait_us") or 0.0),
                "communication.unsized": float(c.get("exposed_unsized_us") or 0.0),
                "communication.exposed": float(c.get("exposed_us") or 0.0),
                "copies": float((ledger.get("copies") or {}).get("exposed_us") or 0.0),
                "span": float(ledger.get("span_us") or 0.0)})
    idle = (ledger.get("idle") or {}).get("by_cause") or {}
    out.update({f"idle.{k}": float(idle.get(k, 0.0)) for k in IDLE_CAUSES})
    return out


def _terms_of(f: dict, by_id: dict[str, dict]) -> tuple[tuple[str, ...], float | None]:
    """(the terms a finding draws on, the device time of its ops when its terms are its ops' work)."""
    if f["kind"] in BY_KIND:
        return BY_KIND[f["kind"]], None
    ops = [by_id[i] for i in f.get("ops") or () if i in by_id]
    if not ops:
        return ("span",), None
    names = []
    for r in ops:
        b = r.get("bound") or "unmodelled"
        names.append(_ALIAS.get(b) or (f"kernels.{b}" if b in WORK else "kernels.unmodelled"))
    return tuple(dict.fromkeys(names)), sum(r["device_time_us"] for r in ops)


def attach(findings: list[dict], ledger: dict | None, rows: list[dict]) -> None:
    """Set source_term on each finding and cap its saving there (in place)."""
    by_id = {r["id"]: r for r in rows}
    values = term_values(ledger) if ledger else None
    for f in findings:
        pre = f.get("source_term") if isinstance(f.get("source_term"), dict) else {}
        terms, ops_us = ((tuple(pre["term"].split(" + ")), None) if pre.get("term") else _terms_of(f, by_id))
        term_us = sum(values.get(t, 0.0) for t in terms) if values is not None else None
        caps = [x for x in (term_us, pre.get("us"), ops_us) if x is not None]
        cap = max(min(caps), 0.0) if caps else None
        src = {"term": " + ".join(terms), "us": cap, "term_us": term_us}
        if pre.get("within"):
            src["within"] = pre["within"]
        f["source_term"] = src
        old = f.get("saving_us") or 0.0
        if cap is not None and old > cap + 1e-6:
            f["saving_us"] = cap
            if f.get("idle_us"):
                f["idle_us"] = min(f["idle_us"], cap)
            f["text"] = (f.get("text") or "") + (
                f" Capped at its source: the ledger's {src['term']} holds {u.us(cap)}"
                + (f" (this finding's ops: {u.us(ops_us)})" if ops_us is not None and ops_us <= (term_us or ops_us)
                   else "") + f", so the saving is {u.us(cap)}, not the {u.us(old)} estimated.")
