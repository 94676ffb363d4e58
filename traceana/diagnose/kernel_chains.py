"""Chains of kernels on one stream that a fused kernel would replace, from kernel names (kernel_levers.py):

  fusion              runs of ATen element-wise / reduction / norm / copy kernels back to back on one stream
                      (each run: the kernels between two kernels of any other kind): torch.compile fuses such
                      chains; saving = each run's time but its longest kernel's (a fused kernel still does the
                      largest one's traffic). A compiled run is told its ATen kernels run outside its compiled
                      graphs (graph breaks), not to use torch.compile.
  attention           a softmax kernel between two GEMM kernels on its stream, with only element-wise steps
                      (scale, mask, dropout, casts) between: attention written out op by op; saving = the
                      softmax and the steps (a fused kernel keeps the scores on chip; the two GEMMs' work stays).
All are estimates from names (confidence low, estimated): the report asks for record_shapes=True to cost them.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.diagnose.kernel_selection import MIN_SHARE, named, op_ids, source_term, top_names
from traceana.link.kernel_account import KernelView
from traceana.link.kernel_names import CLASSES
from traceana.load.model import Trace

WINDOW = 6  # kernels searched on either side of a softmax for its GEMMs
_FUSABLE = frozenset(CLASSES.index(c) for c in ("elementwise", "reduction", "normalization", "copy"))
_STEPS = frozenset(CLASSES.index(c) for c in ("elementwise", "copy"))
_GEMM = CLASSES.index("gemm")


def chain_findings(trace: Trace, view: KernelView, rows: list[dict], context: dict, total_us: float) -> list[dict]:
    """The attention lever, then the fusion lever (a kernel in an attention chain is not counted again)."""
    out = []
    order = _stream_order(trace)
    chains, in_chain = _attention_chains(trace, view, order)
    f = _attention_finding(trace, view, rows, chains, total_us) if chains else None
    if f:
        out.append(f)
    f = _fusion_finding(trace, view, rows, order, in_chain, context, total_us)
    if f:
        out.append(f)
    return out


def _stream_order(trace: Trace) -> np.ndarray:
    """GPU events by (device, stream, start): each stream's sequence."""
    g = trace.gpu
    return np.lexsort((g.ts, g.stream, g.device))


def _attention_chains(trace: Trace, view: KernelView, order: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Softmax kernels between two GEMM kernels on their stream (element-wise steps between): each chain's
    events other than the GEMMs, and a mask of them."""
    g = trace.gpu
    soft = np.array([k.op == "softmax" for k in view.records], dtype=bool)[view.rec] & view.uncovered
    in_chain = np.zeros(len(g), dtype=bool)
    if not soft.any():
        return [], in_chain
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    lane = g.device[order] * (1 << 32) + g.stream[order]
    chains = []
    for e in np.flatnonzero(soft).tolist():
        p = int(pos[e])
        steps = [e]
        ok = [False, False]
        for side, step in ((0, -1), (1, 1)):
            q = p + step
            while 0 <= q < len(order) and abs(q - p) <= WINDOW and lane[q] == lane[p]:
                ev = int(order[q])
                if view.cls[ev] == _GEMM:
                    ok[side] = True
                    break
                if view.cls[ev] not in _STEPS:
                    break
                steps.append(ev)
                q += step
        if ok[0] and ok[1]:
            idx = np.array(steps, dtype=np.int64)
            chains.append(idx)
            in_chain[idx] = True
    return chains, in_chain


def _attention_finding(trace: Trace, view: KernelView, rows: list[dict], chains: list[np.ndarray],
                       total_us: float) -> dict | None:
    dur = trace.gpu.dur
    sel = np.zeros(len(dur), dtype=bool)
    for c in chains:
        sel[c] = True
    t = float(dur[sel].sum())
    if t < MIN_SHARE * total_us:
        return None
    soft = sel & np.array([k.op == "softmax" for k in view.records], dtype=bool)[view.rec]
    tops = top_names(trace, view, soft)
    fix = ("Call torch.nn.functional.scaled_dot_product_attention (transformers: attn_implementation='sdpa', or "
           "'flash_attention_2') instead of matmul -> softmax -> matmul.")
    text = (f"{u.plural(len(chains), 'softmax kernel')} run between two GEMM kernels on their stream with only "
            f"element-wise steps between: attention computed op by op, writing the score matrix and its softmax to "
            f"DRAM and reading them back. The softmax and the steps take {u.us(t)} ({t / total_us * 100:.1f}% of "
            f"kernel time): {named(tops)}. A fused attention kernel keeps the scores on chip; the two GEMMs' work "
            f"stays. Fix: {fix} Saving shown: the softmax and step kernels' time, {u.us(t)} (from kernel names: "
            "record with record_shapes=True for the fused kernel's own estimate).")
    return {"kind": "fusion", "group": "attention", "pattern": "Attention (from kernel names) written out",
            "title": f"Attention runs as GEMM → softmax → GEMM kernels ({len(chains):,} times): "
                     "use scaled_dot_product_attention",
            "text": text, "fix": fix, "ops": op_ids(view, rows, sel), "saving_us": t, "estimated": True,
            "confidence": "low", "source_term": source_term(view, rows, sel, t)}


def _fusion_finding(trace: Trace, view: KernelView, rows: list[dict], order: np.ndarray, in_chain: np.ndarray,
                    context: dict, total_us: float) -> dict | None:
    g = trace.gpu
    rec = view.records
    aten = np.array([k.library == "ATen" and k.op != "foreach" for k in rec], dtype=bool)[view.rec]
    fus = aten & np.isin(view.cls, list(_FUSABLE)) & view.uncovered & ~in_chain
    f = fus[order]
    if f.sum() < 2:
        return None
    lane = g.device[order] * (1 << 32) + g.stream[order]
    start = np.ones(len(order), dtype=bool)
    start[1:] = (f[1:] != f[:-1]) | (lane[1:] != lane[:-1])
    run = np.cumsum(start) - 1
    d = g.dur[order]
    n_runs = int(run[-1]) + 1
    size = np.bincount(run, minlength=n_runs)
    tot = np.bincount(run, weights=d, minlength=n_runs)
    longest = np.zeros(n_runs)
    np.maximum.at(longest, run, d)
    yes = np.zeros(n_runs, dtype=bool)
    yes[run[f]] = True
    keep = yes & (size >= 2)
    saving = float((tot - longest)[keep].sum())
    if saving < MIN_SHARE * total_us:
        return None
    sel_sorted = keep[run] & f
    sel = np.zeros(len(g), dtype=bool)
    sel[order[sel_sorted]] = True
    t = float(g.dur[sel].sum())
    tops = top_names(trace, view, sel, 5)
    big = int(np.argmax(np.where(keep, tot, -1.0)))  # the chain with the most time: its kernels in order
    steps = [view.records[i].op or CLASSES[view.cls[e]] for e, i in zip(order[run == big].tolist(),
                                                                         view.rec[order[run == big]].tolist())]
    chain = " → ".join(steps[:12]) + (f" → … ({len(steps) - 12} more)" if len(steps) > 12 else "")
    n = int(keep.sum())
    kernels = int(size[keep].sum())
    if context.get("compiled"):
        fix = ("These ATen kernels run outside the compiled graphs: find the graph breaks (TORCH_LOGS=graph_breaks) "
               "and compile those regions too, so Inductor fuses them.")
    else:
        fix = ("Fuse them: torch.compile turns each chain into one Triton kernel (mode='max-autotune-no-cudagraphs' if "
               "CUDA graphs are not wanted), or call fused ops (fused norms, foreach / fused optimizers).")
    text = (f"{kernels:,} ATen element-wise / reduction / norm / copy kernels run back to back in "
            f"{u.plural(n, 'chain')} on "
            f"their streams ({u.us(t)}, {t / total_us * 100:.1f}% of kernel time), with no costed op covering them: "
            f"{named(tops)}. The largest chain, {u.plural(int(size[big]), 'kernel')} for {u.us(float(tot[big]))}: "
            f"{chain}. Each kernel reads its inputs from DRAM and writes its output back; fused, a chain reads "
            f"and writes once. {fix} Estimate: each chain's time but its longest kernel's, {u.us(t)} - "
            f"{u.us(t - saving)} = {u.us(saving)} (from kernel names: record with record_shapes=True for the bytes "
            "each fusion saves).")
    return {"kind": "fusion", "group": "fusion", "title": f"{kernels:,} element-wise / reduction kernels in "
            f"{u.plural(n, 'chain')} could be fused", "text": text, "fix": fix,
            "ops": op_ids(view, rows, sel), "saving_us": saving, "estimated": True, "confidence": "low",
            "source_term": source_term(view, rows, sel, t)}
