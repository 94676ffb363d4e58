"""What a CPU-only trace should change first, and where its span went.

Reads the judged op signatures (cpu_roofline.judge_ops) and the trace's annotations. Every lever
is a finding in the GPU findings' shape (id, kind, title, text, fix, saving_us, confidence, ops,
group), so each renderer shows CPU and GPU levers the same way:

  cpu_threads     matrix ops below half of their BLAS roof and other ops at under a tenth of
                  their roofline model, when together they ran over CONTENDED_TIMES x their model:
                  no shape explains that, the process was short of cores (threads oversubscribed,
                  a shared or throttled CPU); their time above the roofs (matrix ops) or the model
  cpu_blas        otherwise, matrix ops (GEMM, conv) below half of their BLAS roof: their time
                  above the roof (small or strided matrices, too few threads)
  cpu_underutilised  and the other ops under a tenth of their model: their time above it
  cpu_optimizer   an optimizer step (`Optimizer.step#X.step`) run one parameter at a time (no
                  `_foreach_` / `_fused_` op in it): its ops' time above their roofs, and the
                  Python time between them
  cpu_dispatch    ops whose work is smaller than the per-op dispatch cost: their time above their
                  roofs (fewer, larger or fused ops keep the work and lose the per-op cost)
  cpu_fusion      chains of element-wise ops, each reading the tensor the one before wrote
                  (dataflow.py's rules), run back to back on one thread: fused, a chain costs
                  about its longest op, so the saving is the time of the others
  cpu_data        data loading on the training thread (`enumerate(DataLoader)#...` annotations):
                  its time, which DataLoader workers overlap with the step
  cpu_python      the busiest thread running no op for PYTHON_SHARE of the span or more (outside the
                  optimizer step and data loading): Python between ops, which torch.compile removes

An op instance belongs to one lever only (optimizer first, then chains, then by bound), so two
levers never claim the same µs; the plan combines levers the projection's way all the same.

cpu_account.py says where the span went (the account and its sentence), cpu_chains.py finds the
element-wise chains, cpu_plan.py picks the plan.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.diagnose.cpu_account import account, sentence
from traceana.diagnose.cpu_chains import elementwise_chains
from traceana.diagnose.cpu_plan import plan
from traceana.diagnose.cpu_roofline import DISPATCH_FIX, Judged

#: A lever needs at least this share of the span.
MIN_SHARE = 0.01
#: Matrix ops under this % of their BLAS roof are a lever.
BLAS_BELOW_PCT = 50.0
#: Measured / model time over this: no shape explains it, the process was short of cores.
CONTENDED_TIMES = 100.0
#: The time outside any op is a lever from this share of the span on.
PYTHON_SHARE = 0.2
#: Chains shown as findings (the largest savings).
MAX_CHAINS = 6
OPTIMIZER_STEP = "Optimizer.step#"
DATA_LOADER = "enumerate(DataLoader)#"
CONTENDED_FIX = ("Give the process its cores: torch.set_num_threads(n) (or OMP_NUM_THREADS=n) with n no more "
                 "than the idle physical cores, one process per core set (taskset / numactl), and profile on an "
                 "idle machine")


def _inside(trace, prefix: str, thread: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Which of the given instants lie inside an annotation whose name starts with `prefix` on their
    thread; and those annotations' (start, end), outermost only."""
    ann, names = trace.annotations, trace.names
    pick = [i for i, c in enumerate(ann.name.tolist()) if names[c].startswith(prefix)]
    hit = np.zeros(len(ts), dtype=bool)
    spans: list[tuple[float, float]] = []
    if not pick:
        return hit, spans
    idx = np.array(pick, dtype=np.int64)
    for th in np.unique(ann.thread[idx]).tolist():
        k = idx[ann.thread[idx] == th]
        order = np.argsort(ann.ts[k], kind="stable")
        a, b = ann.ts[k][order], ann.end[k][order]
        cover = np.maximum.accumulate(b)  # outermost: an annotation inside an earlier one adds nothing
        outer = np.ones(len(a), dtype=bool)
        outer[1:] = a[1:] >= cover[:-1]
        a, b = a[outer], np.maximum.reduceat(b, np.flatnonzero(outer)) if len(b) else b
        spans += list(zip(a.tolist(), b.tolist()))
        m = thread == th
        pos = np.searchsorted(a, ts[m], side="right") - 1
        ok = pos >= 0
        inside = np.zeros(int(m.sum()), dtype=bool)
        inside[ok] = ts[m][ok] < b[pos[ok]]
        hit[m] = inside
    return hit, spans


def _above(j: Judged, mask: np.ndarray, what: str) -> dict[int, float]:
    """Per signature (row index), the self time of the masked instances above each call's `what`
    (roof: max(compute, memory); model: dispatch + roof)."""
    rows = j.rows
    per = np.array([(r.get("model_us") if what == "model" else max(r.get("compute_us") or 0.0,
                                                                     r.get("memory_us") or 0.0))
                    if r.get("model_us") is not None else 0.0 for r in rows] + [0.0])
    selfc = np.clip(j.self_us, 0.0, None)
    gain = np.clip(selfc - per[j.sig], 0.0, None)
    idx = np.flatnonzero(mask & (gain > 0))
    if not len(idx):
        return {}
    s = np.bincount(j.sig[idx], weights=gain[idx], minlength=len(rows))
    return {int(i): float(s[i]) for i in np.flatnonzero(s > 0)}


def _ops_of(by_sig: dict[int | str, float], j: Judged, limit: int = 20) -> list[str]:
    keys = sorted((k for k in by_sig if isinstance(k, int)), key=lambda k: (-by_sig[k], k))
    return [j.rows[k]["id"] for k in keys[:limit]]


def _top_names(by_sig: dict, j: Judged, n: int = 3) -> str:
    keys = sorted((k for k in by_sig if isinstance(k, int)), key=lambda k: (-by_sig[k], k))
    seen: list[str] = []
    for k in keys:
        nm = j.rows[k]["name"]
        if nm not in seen:
            seen.append(nm)
        if len(seen) >= n:
            break
    return ", ".join(seen)


def _ratio(j: Judged, by_sig: dict) -> float:
    """Measured over model time per call: the median weighted by the time above the model (the ratio the
    signatures holding half of that time reach or exceed; one preempted call does not set it). 0 when no
    row has a model."""
    pairs = []
    for k, w in by_sig.items():
        if not isinstance(k, int):
            continue
        r = j.rows[k]
        model, per = r.get("model_us"), r.get("self_per_call_us")
        if model and per and w > 0:
            pairs.append((per / model, w))
    if not pairs:
        return 0.0
    pairs.sort()
    half, acc = sum(w for _, w in pairs) / 2, 0.0
    for ratio, w in pairs:
        acc += w
        if acc >= half:
            return ratio
    return pairs[-1][0]


def _finding(kind: str, title: str, text: str, fix: str, by_sig: dict, j: Judged, confidence: str,
             group: str | None = None) -> dict:
    return {"kind": kind, "group": group or kind, "title": title, "text": text, "fix": fix,
            "saving_us": float(sum(by_sig.values())), "lever": True, "confidence": confidence, "estimated": False,
            "ops": _ops_of(by_sig, j), "_by": by_sig}


def findings(trace, j: Judged, optimizer: np.ndarray | None = None) -> list[dict]:
    """The CPU levers, largest saving first (ids c1, c2, ...). `optimizer`: per op instance, whether it ran
    in the optimizer step (modules.attribute's phase; None: from the Optimizer.step annotations alone)."""
    ops, rows = trace.ops, j.rows
    n = len(ops)
    if n == 0 or not rows:
        return []
    span = float(trace.span_us) or float((ops.end - ops.ts).sum())
    measured = j.roofs.get("source") == "profile"
    taken = np.zeros(n, dtype=bool)
    out: list[dict] = []
    bound = np.array([r["bound"] for r in rows] + ["unmodelled"])[j.sig]
    # the optimizer step, one parameter at a time
    in_step, steps = _inside(trace, OPTIMIZER_STEP, ops.thread, ops.ts)
    opt = in_step | (optimizer if optimizer is not None and len(optimizer) == n else False)
    names = np.array([r["name"] for r in rows] + [""])[j.sig]
    fused = bool(opt.any()) and any(("_foreach_" in x or "_fused_" in x) for x in set(names[opt].tolist()))
    if opt.any() and not fused:
        by = _above(j, opt, "roof")
        step_us = sum(b - a for a, b in steps)
        top = (ops.end - ops.ts)[opt & j.top_level].sum()
        python = max(step_us - float(top), 0.0)
        if python > 0:
            by["python"] = python
        label = _optimizer_name(trace)
        calls = int((opt & j.top_level).sum())
        taken |= opt
        out.append(_finding(
            "cpu_optimizer", f"The {label} step runs one parameter at a time: {calls:,} op calls, "
                             f"{u.us(sum(by.values()))} recoverable",
            f"{u.plural(len(steps), 'optimizer step')} took {u.us(step_us)}: {calls:,} top-level op calls "
            f"({_top_names(by, j)}, ...), each a pass over one parameter tensor, and {u.us(python)} of Python between "
            f"them. A fused (or foreach) step makes one pass over every parameter: it keeps the bytes (their "
            f"time at the memory roof) and loses the per-op cost: {u.us(sum(by.values()))}.",
            f"Use the fused step: torch.optim.{label}(params, fused=True) (or foreach=True).", by, j, "high"))
    # data loading on the training thread
    in_data, loads = _inside(trace, DATA_LOADER, ops.thread, ops.ts)
    load_us = sum(b - a for a, b in loads)
    if loads and load_us >= MIN_SHARE * span:
        single = any("_SingleProcessDataLoaderIter" in trace.names[c] for c in trace.annotations.name.tolist())
        taken |= in_data
        fix = ("Load in worker processes: DataLoader(..., num_workers=N, persistent_workers=True)" if single else
               "Raise DataLoader num_workers (and prefetch_factor), or make the dataset's __getitem__ cheaper")
        out.append(_finding(
            "cpu_data", f"The step waits {u.us(load_us)} for data on the training thread",
            f"{u.plural(len(loads), 'batch', 'batches')} were fetched on the training thread "
            f"({'num_workers=0: loading runs in the step' if single else 'the workers did not keep up'}), "
            f"{u.us(load_us)} ({u.pct(load_us / span * 100)} of the span) in which no model op ran on it.",
            fix + ".", {"data": load_us}, j, "medium"))
    # element-wise chains
    chain, chains = elementwise_chains(trace, j, taken)
    taken |= chain >= 0
    for g in chains[:MAX_CHAINS]:
        if g["saving_us"] < MIN_SHARE * span / 4:
            break
        steps_txt = " → ".join(rows[s]["name"].removeprefix("aten::") for s in g["sigs"])
        out.append(_finding(
            "cpu_fusion", f"Fuse {steps_txt}: {len(g['sigs'])} element-wise ops, each reading the last one's output",
            f"{u.plural(g['calls'], 'run')} of this chain took {u.us(g['time_us'])}; each op makes its own pass over "
            f"memory and pays its own dispatch. Fused, a chain costs about its longest op: "
            f"{u.us(g['saving_us'])} less.",
            "Fuse the chain into one loop: torch.compile (its C++ backend fuses element-wise ops on a CPU).",
            dict(g["by_sig"]), j, "medium", group="cpu_fusion"))
    # matrix ops below their BLAS roof, and the other ops far below their model: one lever when no shape
    # explains how slow they ran (the process was short of cores), else one each
    matrix = np.array([bool(r.get("matrix")) and (r.get("roof_pct") or 0.0) < BLAS_BELOW_PCT
                       and r["bound"] in ("compute", "memory", "underutilised") for r in rows] + [False])[j.sig] & ~taken
    under = (bound == "underutilised") & ~matrix & ~taken
    blas, slow = _above(j, matrix, "roof"), _above(j, under, "model")
    both = {**slow, **{k: blas.get(k, 0.0) + slow.get(k, 0.0) for k in blas}}
    if both and _ratio(j, both) >= CONTENDED_TIMES:
        t = float(np.clip(j.self_us[matrix | under], 0.0, None).sum())
        out.append(_finding(
            "cpu_threads", f"CPU ops ran {_ratio(j, both):,.0f}x their roofline model: the process was short of cores",
            f"{u.plural(int((matrix | under).sum()), 'op call')} ({_top_names(both, j)}, ...) took {u.us(t)} "
            f"({u.pct(t / span * 100)} of the span) at {_ratio(j, both):,.0f}x the time their FLOPs and bytes need at "
            "the CPU's roofs plus the per-op dispatch cost: far past what small or odd shapes cost. The threads of "
            "the BLAS and ATen kernels were not running: more threads than idle cores (other processes, or several "
            f"processes each using every core), or a throttled CPU. Time above the roofs: {u.us(sum(both.values()))}"
            + ("" if measured else " (against traceana's default roofs: calibrate this machine)") + ".",
            CONTENDED_FIX + ".", both, j, "medium" if measured else "low"))
        taken |= matrix | under
        blas = slow = {}
    if blas:
        taken |= matrix
        pct = sum(rows[k]["self_us"] * (rows[k].get("roof_pct") or 0.0) for k in blas) / max(
            sum(rows[k]["self_us"] for k in blas), 1e-9)
        head = (f"{u.plural(int(matrix.sum()), 'matrix op call')} ({_top_names(blas, j)}) reach "
                f"{u.pct(pct)} of the CPU's BLAS roof")
        out.append(_finding(
            "cpu_blas", head,
            f"{head} (weighted by time): small matrices leave the BLAS library's threads idle and pay its per-call "
            f"setup, strided operands are copied first. Time above the roof: {u.us(sum(blas.values()))}"
            + ("" if measured else " (against traceana's default roofs)") + ".",
            "Larger matrix ops: more rows per call (batch the work), one GEMM where several share an input, "
            "contiguous operands; and check torch.get_num_threads() against the physical cores.", blas, j, "medium"))
    disp = (bound == "dispatch") & ~taken
    by = _above(j, disp, "roof")
    if by:
        calls = int(disp.sum())
        out.append(_finding(
            "cpu_dispatch", f"{calls:,} calls of tiny ops ({_top_names(by, j)}) spend "
                            f"{u.us(sum(by.values()))} on per-op dispatch",
            f"{calls:,} op calls in {u.plural(len([k for k in by if isinstance(k, int)]), 'signature')} do less work "
            f"than the per-op dispatch cost ({u.us(j.roofs['dispatch_us'])} each"
            + ("" if measured else ", traceana's default") + f"): {u.us(sum(by.values()))} above their roofs.",
            DISPATCH_FIX[0].upper() + DISPATCH_FIX[1:] + ".", by, j, "high"))
        taken |= disp
    if slow:
        t = float(np.clip(j.self_us[under], 0.0, None).sum())
        out.append(_finding(
            "cpu_underutilised", f"{u.pct(t / span * 100)} of the span in ops at under a tenth of their roofline model "
                                 f"({_top_names(slow, j)})",
            f"These ops ran {_ratio(j, slow):,.0f}x their model time (dispatch + roofline): single-threaded kernels, "
            f"small or strided tensors, or allocation inside the op. Time above the model: {u.us(sum(slow.values()))}.",
            "Keep tensors contiguous and large enough to split over the threads (batch the work); check "
            "torch.get_num_threads() against the physical cores.", slow, j, "medium" if measured else "low"))
    # Python between ops on the busiest thread (what the optimizer and data levers claim left out)
    acc = account(trace, j)
    outside = acc["outside_us"] - sum(f["_by"].get(k, 0.0) for f in out for k in ("python", "data"))
    if outside >= PYTHON_SHARE * span:
        stacks = len(getattr(trace, "python", ())) > 0
        out.append(_finding(
            "cpu_python", f"{u.pct(outside / span * 100)} of the span runs no op: Python between ops",
            f"On the busiest thread no op ran for {u.us(outside)} of the {u.us(span)} span (outside the optimizer "
            "step and data loading): the Python of the model code and the framework between one op and the next. "
            "Small ops make it a large share: each costs more Python than arithmetic"
            + ("; with_stack=True recording slows Python itself, so record once without it to size this" if stacks
               else "") + ".",
            "Run less Python per op: torch.compile the model (one compiled graph per step), or give each op more "
            "work (larger batches).", {"outside": outside}, j, "low" if stacks else "medium"))
    out = [f for f in out if f["saving_us"] >= MIN_SHARE * span / 4]
    out.sort(key=lambda f: -f["saving_us"] * {"high": 1.0, "medium": 0.8, "low": 0.5}[f["confidence"]])
    for i, f in enumerate(out, 1):
        f["id"] = f"c{i}"
    return out


def _optimizer_name(trace) -> str:
    """'AdamW' from 'Optimizer.step#AdamW.step' ('optimizer' when not named)."""
    for c in trace.annotations.name.tolist():
        nm = trace.names[c]
        if nm.startswith(OPTIMIZER_STEP):
            return nm[len(OPTIMIZER_STEP):].split(".", 1)[0] or "optimizer"
    return "optimizer"


def cpu_levers(trace, j: Judged, optimizer: np.ndarray | None = None) -> dict:
    """{account, sentence, findings, plan} of a CPU-only trace (findings without their internal fields)."""
    acc = account(trace, j)
    found = findings(trace, j, optimizer)
    levers = plan(found, j, acc["span_us"])
    for f in found:
        f.pop("_by", None)
    return {"account": acc, "sentence": sentence(acc), "findings": found, "plan": levers}
