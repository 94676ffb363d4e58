"""Holistic Trace Analysis (HTA) timeline views, fed from traceana's own parse.

HTA (`pip install traceana[hta]`, package holistictraceanalysis) computes the temporal
breakdown, the idle-time breakdown by cause, the kernel-type breakdown and the comm/compute
overlap. Its analyzers read a pandas DataFrame per rank; this module builds that DataFrame
from the Trace columns traceana already has (no second parse of the file) and calls HTA's
analyzer functions. HTA and pandas are imported here only, lazily, and only for `--hta`:
the default report path never pays for them.

To give the numbers HTA gives when it parses the file itself, the frame repeats HTA's own
preprocessing (hta.common.trace / trace_parser, v0.5.0):
  * timestamps with a fraction (ns-resolution traces) are rounded like HTA's
    round_down_time_stamps: start up (ceil), end down (floor), dur = end - start;
  * GPU events (kernel, memcpy, memset) carry their stream; CPU events stream -1;
  * a GPU event's index_correlation points at its launch (cudaLaunchKernel ...) by correlation;
  * with two or more ProfilerStep annotations, only GPU events launched before the last step
    started are kept (HTA's default include_last_profiler_step=False), as HTA does.
Known difference: HTA also counts CPU-side events that carry a `stream` argument (some ROCm
runtime events) as GPU events; traceana does not load them.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from traceana.link.attribute import Links
from traceana.load.model import KIND_NAMES, Trace
from traceana.arrays import distinct

CONSECUTIVE_KERNEL_DELAY_US = 30  # HTA's default for get_idle_time_breakdown
_GPU_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}


def available() -> bool:
    """True when HTA and pandas can be imported (without importing them)."""
    return importlib.util.find_spec("hta") is not None and importlib.util.find_spec("pandas") is not None


def hta_frame(trace: Trace, links: Links):
    """(DataFrame in HTA's layout, symbol table) for one rank, from traceana's columns."""
    import pandas as pd
    from hta.common.trace_symbol_table import TraceSymbolTable

    gpu, la, ann = trace.gpu, trace.launches, trace.annotations
    names = trace.names
    step = np.array([n.startswith("ProfilerStep") for n in names], dtype=bool)
    steps = np.flatnonzero(step[ann.name]) if len(ann) else np.zeros(0, np.int64)
    n_g, n_l, n_s = len(gpu), len(la), len(steps)
    ts = np.concatenate([gpu.ts, la.ts, ann.ts[steps]])
    end = np.concatenate([gpu.ts + gpu.dur, la.end, ann.end[steps]])
    if len(ts) and np.any(ts != np.floor(ts)):  # HTA: round_down_time_stamps
        ts, end = np.ceil(ts), np.floor(end)
    ts = ts.astype(np.int64)
    dur = end.astype(np.int64) - ts
    name_code = np.concatenate([gpu.name, la.name, ann.name[steps]]).astype(np.int64)
    cat_names = [_GPU_CAT[k] for k in KIND_NAMES] + ["cuda_runtime", "user_annotation"]
    cat = np.concatenate([gpu.kind.astype(np.int64), np.full(n_l, 3), np.full(n_s, 4)])
    corr = np.concatenate([gpu.corr, la.corr, np.full(n_s, -1)])
    stream = np.concatenate([gpu.stream, np.full(n_l + n_s, -1)])
    index = np.arange(1, len(ts) + 1, dtype=np.int64)  # HTA's index 0 is the file's first event
    # index_correlation: launch <-> GPU event by correlation (HTA's transform_correlation_to_index)
    idx_corr = np.where(corr >= 0, 0, -1)
    g_has = links.gpu_launch >= 0
    idx_corr[:n_g][g_has] = index[n_g + links.gpu_launch[g_has]]
    idx_corr[n_g + links.gpu_launch[g_has]] = index[:n_g][g_has]
    keep = np.ones(len(ts), dtype=bool)
    step_names = {names[c] for c in ann.name[steps].tolist()}
    if len(step_names) >= 2:  # HTA: _filter_irrelevant_gpu_kernels
        last_start = ts[n_g + n_l:].max()
        cpu_ok = np.ones(len(ts), dtype=bool)
        cpu_ok[n_g:] = ts[n_g:] < last_start
        kept_corr = distinct(corr[n_g:][cpu_ok[n_g:] & (corr[n_g:] >= 0)])
        keep[:n_g] = np.isin(corr[:n_g], kept_corr) & (corr[:n_g] >= 0)
        keep[n_g:] = cpu_ok[n_g:]
    used = distinct(name_code[keep])
    sym = TraceSymbolTable()
    sym.add_symbols(cat_names + [names[c] for c in used.tolist()])
    sid = sym.get_sym_id_map()
    name_map = np.full(len(names) + 1, -1, dtype=np.int64)
    name_map[used] = [sid[names[c]] for c in used.tolist()]
    cat_map = np.array([sid[c] for c in cat_names], dtype=np.int64)
    df = pd.DataFrame({
        "index": index[keep], "ts": ts[keep], "dur": dur[keep], "pid": 0, "tid": 0,
        "stream": stream[keep], "correlation": corr[keep], "index_correlation": idx_corr[keep],
        "cat": cat_map[cat[keep]], "name": name_map[name_code[keep]],
    })
    if len(df):
        df["ts"] -= df["ts"].min()  # HTA aligns every rank to start at 0
    df = df.set_index("index", drop=False)
    df.index.names = [None]
    return df, sym


def hta_trace(trace: Trace, links: Links):
    """An hta.common.trace.Trace holding the frame, as if HTA had loaded the file."""
    from hta.common.trace import Trace as HtaTrace

    df, sym = hta_frame(trace, links)
    t = HtaTrace(trace_files={}, trace_dir=".")
    rank = _rank(trace)
    t.traces = {rank: df}
    t.symbol_table = sym
    t.is_parsed = True
    return t


def _rank(trace: Trace) -> int:
    r = (trace.distributed or {}).get("rank")
    return r if isinstance(r, int) else 0


def views_from_hta(t, rank: int) -> dict:
    """The four timeline views of an HTA Trace object, as plain data. A view HTA fails on (its
    asserts trip on some traces, whoever parsed them) is replaced by {"error": ...}."""
    import logging

    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis
    from hta.utils.utils import get_kernel_type

    logging.getLogger("hta").setLevel(logging.ERROR)

    def temporal():
        tb = BreakdownAnalysis.get_temporal_breakdown(t, visualize=False).iloc[0]
        return {k: float(tb[c]) for k, c in (
            ("idle_us", "idle_time(us)"), ("compute_us", "compute_time(us)"),
            ("non_compute_us", "non_compute_time(us)"), ("kernel_us", "kernel_time(us)"),
            ("idle_pct", "idle_time_pctg"), ("compute_pct", "compute_time_pctg"),
            ("non_compute_pct", "non_compute_time_pctg"))}

    def idle():
        df, _ = BreakdownAnalysis.get_idle_time_breakdown(
            t, consecutive_kernel_delay=CONSECUTIVE_KERNEL_DELAY_US, rank=rank, visualize=False)
        return [{"stream": int(r.stream), "category": str(r.idle_category), "idle_us": float(r.idle_time),
                 "ratio": float(r.idle_time_ratio)} for r in df.itertuples()]

    def kernel_breakdown():
        types, kernels = BreakdownAnalysis.get_gpu_kernel_breakdown(
            t, visualize=False, include_memory_kernels=True, num_kernels=10)
        top = kernels.sort_values("sum (us)", ascending=False).head(15)
        return ([{"type": str(r.kernel_type), "us": float(r[2]), "pct": float(r.percentage)}
                 for r in types.itertuples()],
                [{"type": str(r.kernel_type), "name": str(r.name)[:200], "us": float(r[2])} for r in top.itertuples()])

    def overlap():
        sym = t.symbol_table.get_sym_table()
        df = t.get_trace(rank)
        names = df.loc[df["stream"].ne(-1), "name"].unique()
        if not any(get_kernel_type(sym[c]) == "COMMUNICATION" for c in names):
            return None  # no collectives: HTA would divide by zero
        res = CommunicationAnalysis.get_comm_comp_overlap(t, visualize=False)
        return float(res["comp_comm_overlap_pctg"].iloc[0])

    out: dict = {"rank": rank}
    for key, fn in (("temporal", temporal), ("idle", idle), ("kernels", kernel_breakdown),
                    ("comm_overlap_pct", overlap)):
        try:
            out[key] = fn()
        except Exception as exc:  # noqa: BLE001 - report HTA's failure per view, keep the others
            out[key] = {"error": f"HTA failed: {type(exc).__name__}: {exc}"[:300]}
    k = out.pop("kernels")
    out["kernel_types"], out["top_kernels"] = k if isinstance(k, tuple) else (k, k)
    return out


def hta_views(trace: Trace, links: Links) -> dict:
    """HTA's timeline views of the trace, or {"error": ...} when HTA is missing or fails."""
    if not available():
        return {"error": "HTA is not installed: pip install 'traceana[hta]'"}
    try:
        from importlib.metadata import version

        out = views_from_hta(hta_trace(trace, links), _rank(trace))
        out["version"] = version("holistictraceanalysis")
        return out
    except Exception as exc:  # noqa: BLE001 - HTA is optional; its failure must not sink the report
        return {"error": f"HTA failed: {type(exc).__name__}: {exc}"[:500]}
