"""GPU idle the host set: one finding per cause, each claiming only the idle its own cause holds.

The ledger's host_dispatch term (diagnose/ledger.py) is the idle of gaps whose next work was launched
late; gaps.host_activity splits it by what the launching thread was doing at each gap's middle (the
outermost op or annotation, or a runtime call of a millisecond or more). The activities fall into causes
by what they mean, each with its own fix and its own saving — that cause's idle, never the whole term:

  data_loading  the DataLoader's frames, or a range the program named for loading a batch
  warmup        a kernel launch call taking milliseconds, or a module / library load: a first launch
                loading its code (lazy loading, JIT) — what warm-up steps before profiling remove
  allocator     inside a device malloc / free (each free waits for the device; the caching allocator
                emptied or missed)
  setup         inside stream / event / context / library-handle creation: objects made once, not per step
  blocking      inside another host-synchronous call (a blocking copy, a synchronize) that began after the
                GPU had gone idle
  graph         inside a CUDA / HIP graph call (what the ledger did not already count as graph_launch)
  optimizer     the optimizer's step / zero_grad
  dispatch      everything else: the CPU running Python and dispatching ops slower than the GPU runs them

The ledger's graph_launch term (idle while a feeding thread sat inside graph launches, instantiations or
uploads) is a finding of its own with its own advice (`graph_finding`).
"""

from __future__ import annotations

import re

from traceana import lazy_re
from traceana import units as u
from traceana.diagnose.advice import uses_compile, uses_graphs
from traceana.diagnose.gaps import SLOW_LAUNCH
from traceana.diagnose.ledger import IDLE_CAUSES, Account

#: A cause gets its own finding when its idle is at least this share of the span.
MIN_SHARE = 0.01
_DATA = lazy_re.compile(r"dataloader|data[_ ]?load|load[_ ]?(batch|data)|(next|get|fetch)[_ ]?batch|prefetch", re.I)
_OPTIMIZER = lazy_re.compile(r"optimizer|\.step#|zero_grad", re.I)
# runtime / driver calls by what they do (names without their cuda / cu / hip prefix and _v2 suffixes)
_MODULE = lazy_re.compile(r"Module(Load|GetFunction|GetGlobal)|Library(Load|GetKernel)|LinkComplete|GetFuncBySymbol|"
                          r"FuncGetAttributes|KernelGetFunction")
_ALLOC = lazy_re.compile(r"Malloc|Free|MemAlloc|MemCreate|MemMap|MemUnmap|MemRelease|MemAddressReserve|HostAlloc|"
                         r"HostRegister|MemPool")
_SETUP = lazy_re.compile(r"StreamCreate|StreamDestroy|EventCreate|EventDestroy|CtxCreate|PrimaryCtxRetain|SetDevice|"
                         r"DeviceReset|[a-z]Create(_v\d+)?$|Init$")
_BLOCKING = lazy_re.compile(r"Synchronize|Memcpy|Memset|EventQuery|StreamQuery")
_GRAPH = lazy_re.compile(r"Graph|Capture")


def cause_of(activity: str) -> str:
    """The cause of one host activity key (gaps.host_activity), from what its name means."""
    if activity == SLOW_LAUNCH:
        return "warmup"
    if activity.startswith("inside "):
        call = activity[7:]
        for cause, rx in (("graph", _GRAPH), ("warmup", _MODULE), ("allocator", _ALLOC), ("setup", _SETUP),
                          ("blocking", _BLOCKING)):
            if rx.search(call):
                return cause
        return "dispatch"
    if _DATA.search(activity):
        return "data_loading"
    if _OPTIMIZER.search(activity):
        return "optimizer"
    return "dispatch"


def _dispatch_fix(context: dict | None) -> str:
    """The dispatch cause's fix, for what the run already does (no torch.compile / CUDA graphs to a run that
    shows them)."""
    head = "Overlap the CPU's work with the GPU's: move logging and post-processing off the step, "
    if uses_graphs(context):
        return (head + "and prepare the next replay's inputs while the current one runs: this run already replays "
                "CUDA / HIP graphs, so the host time left is the Python between replays (input preparation, "
                "sampling, scheduling).")
    if uses_compile(context):
        return (head + "and issue fewer, larger ops: this run already uses torch.compile, so the host time left is "
                "outside its compiled regions (graph breaks, uncompiled code) or in launching them one by one — "
                "compile with mode=\"reduce-overhead\" to replay them as CUDA graphs.")
    return head + "and issue fewer, larger ops (torch.compile, CUDA graphs) so the CPU stays ahead."


def _what_fix(cause: str, top: str, context: dict | None) -> tuple[str, str]:
    """(what it is, what to do) for a cause; top: its largest activity."""
    if cause == "data_loading":
        if "singleprocess" in top.lower():
            return ("the DataLoader, loading in the training process (num_workers=0)",
                    "Load data in worker processes: DataLoader(num_workers=N, pin_memory=True, "
                    "persistent_workers=True); the batch is then ready when the step asks for it.")
        what = ("the DataLoader, whose workers do not keep up" if "dataloader" in top.lower()
                else f"data loading ({top})")
        return (what, "Give the DataLoader more workers or a deeper prefetch (num_workers, prefetch_factor), or make "
                      "the dataset's __getitem__ / collate cheaper (decode once, cache, move augmentation to the GPU).")
    if cause == "warmup":
        return ("slow kernel launches (first launches loading their code)",
                "Profile after warm-up steps (torch.profiler.schedule(wait=1, warmup=1, active=3)): a launch call "
                "that takes milliseconds is a kernel's first launch loading its code (lazy module loading, or a JIT "
                "compile when the binary has no code for this GPU); if it recurs every step, build for this GPU's "
                "architecture (TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH) so nothing is JIT-compiled.")
    if cause == "allocator":
        return (f"the allocator ({top[7:] if top.startswith('inside ') else top})",
                "Let the caching allocator keep its blocks: each device malloc / free synchronizes and takes long "
                "(no torch.cuda.empty_cache() in the loop; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; stable "
                "or padded shapes).")
    if cause == "setup":
        return (f"stream, event or handle creation ({top[7:] if top.startswith('inside ') else top})",
                "Create streams, events and library handles once, before the loop, and reuse them (keep "
                "torch.cuda.Stream / Event objects across steps; a thread's first cuBLAS / cuDNN call creates its "
                "handle, so run one step on each thread before profiling).")
    if cause == "blocking":
        return (f"a blocking call ({top[7:] if top.startswith('inside ') else top})",
                "Keep host-synchronous calls out of the step: copies to the host with non_blocking=True into pinned "
                "memory, no .item() / .cpu() / synchronize until the step's work is queued.")
    if cause == "graph":
        return (f"graph calls ({top[7:] if top.startswith('inside ') else top})", GRAPH_FIX)
    if cause == "optimizer":
        return ("the optimizer step's host work",
                "Use a fused or foreach optimizer (torch.optim.AdamW(..., fused=True)) or compile the step, so the "
                "update is a few kernels instead of one per parameter.")
    return (top, _dispatch_fix(context))


def host_findings(ledger: dict, acc: Account, activity: dict[str, float], context: dict | None = None) -> list[dict]:
    """One finding per host cause holding at least MIN_SHARE of the span: its saving is that cause's idle
    (an upper bound), its source the ledger's host_dispatch term within that cause's frames."""
    term, span = ledger["idle"]["by_cause"]["host_dispatch"], ledger["span_us"]
    if span <= 0 or term <= 0:
        return []
    by: dict[str, dict[str, float]] = {}
    for name, us in activity.items():
        by.setdefault(cause_of(name), {})[name] = us
    steps = ledger.get("steps") or 0
    n = int(((acc.gap_cause == IDLE_CAUSES.index("host_dispatch")) & (acc.rest_us() > 0)).sum())
    split_all = "; ".join(f"{k} {u.us(v)}" for k, v in list(activity.items())[:4])
    out = []
    for cause, acts in sorted(by.items(), key=lambda kv: -sum(kv[1].values())):
        t = sum(acts.values())
        if t < MIN_SHARE * span:
            continue
        top, top_us = max(acts.items(), key=lambda kv: kv[1])
        what, fix = _what_fix(cause, top, context)
        per = f", {u.us(t / steps)} per step" if steps > 1 else ""
        share = f"{t / span * 100:.1f}% of the span{per}"
        named = top != "other" and top_us >= 0.5 * t
        known = cause != "dispatch"
        if known:
            title = f"The GPU waits for {what}: {u.us(t)} idle ({share})"
        else:
            title = (f"The CPU sets the pace: GPU idle {u.us(t)} waiting for work to be issued ({share}"
                     + (f"; the CPU was mostly in {top}" if named else "") + ")")
        split = "; ".join(f"{k} {u.us(v)}" for k, v in sorted(acts.items(), key=lambda kv: -kv[1])[:4])
        others = term - t
        text = (f"The GPU sat idle {u.us(term)} ({term / span * 100:.1f}% of the span) in {u.plural(n, 'gap')} that "
                "ended with work launched only after the GPU had gone idle: the CPU, not the GPU, set the pace. What "
                f"the launching thread was doing during those gaps: {split_all}. "
                + (f"{u.us(t)} of it was {what} ({split}). " if known else
                   f"{u.us(t)} of it was the CPU running and dispatching ops ({split}). ")
                + fix + f" Saving shown: that {u.us(t)}, an upper bound"
                + (f" — the other {u.us(others)} of host-dispatch idle has causes of its own, each counted once."
                   if others > 0.005 * term else "."))
        out.append({"kind": "host_dispatch", "cause": cause, "title": title, "text": text,
                    "fix": fix.split(": ")[0].rstrip(".") + ".", "group": f"host:{cause}", "ops": [],
                    "saving_us": t, "idle_us": t, "activity": acts,
                    "source_term": {"term": "idle.host_dispatch", "us": t, "term_us": term,
                               "within": f"{cause.replace('_', ' ')}: " + ", ".join(list(acts)[:3])}})
    if out:  # where the largest cause's gaps end (ops of the biggest host gaps)
        out[0]["ops"] = [g["next_row"] for g in ledger["idle"]["largest"]
                         if g["cause"] == "host_dispatch" and g.get("next_row")]
    return out


GRAPH_FIX = ("Replay each graph once during warm-up, before the profiled steps (its first launch uploads it: "
             "cudaGraphUpload, or one replay), so no upload or instantiation lands in a step; when inputs change, "
             "update the instantiated graph (static input buffers copied into before replay, cudaGraphExecUpdate) "
             "instead of capturing and instantiating it again; and launch fewer graphs per step (capture one larger "
             "region instead of many small ones: each launch costs the host time per graph and per node).")


def graph_finding(ledger: dict, facts: dict) -> dict | None:
    """The ledger's graph_launch idle: the GPU out of work while the thread feeding it sat in graph calls.
    facts: gaps.launch_facts (the graph calls' counts and host time)."""
    t, span = ledger["idle"]["by_cause"].get("graph_launch", 0.0), ledger["span_us"]
    if span <= 0 or t < MIN_SHARE * span or t <= 0:
        return None
    steps = ledger.get("steps") or 0
    per = f", {u.us(t / steps)} per step" if steps > 1 else ""
    n, lau = facts.get("graph_launches") or 0, facts.get("graph_launch_us") or 0.0
    call = facts.get("graph_launch_call") or "graph launch"
    calls = []
    if n:
        calls.append(f"{u.plural(n, call + ' call')} took {u.us(lau)} of host time ("
                     + (f"{u.us(facts['graph_launch_min_us'])} to {u.us(facts['graph_launch_max_us'])} each, median "
                        f"{u.us(facts['graph_launch_median_us'])}" if n > 1 else "one call") + ")")
    if facts.get("graph_builds"):
        calls.append(f"{u.plural(facts['graph_builds'], 'instantiation / upload / capture call')} "
                     f"({', '.join(facts.get('graph_build_calls') or [])}) took {u.us(facts['graph_build_us'])}")
    title = (f"Graph launches hold the GPU idle: {u.us(t)} ({t / span * 100:.1f}% of the span{per}) with the host "
             f"inside {call if n else 'graph calls'}")
    text = (f"The GPU sat idle {u.us(t)} ({t / span * 100:.1f}% of the span{per}) while the thread feeding it was "
            f"inside CUDA / HIP graph calls: {'; '.join(calls) or 'graph calls'}. A graph's kernels start while its "
            "launch call is still submitting them, so when the call takes longer than the work already queued the "
            "GPU waits for the host; a graph's first launch also uploads it, and instantiating or capturing one "
            f"inside a step stops the GPU until it is done. {GRAPH_FIX} Saving shown: that idle, an upper bound.")
    return {"kind": "graph_launch", "title": title, "text": text,
            "fix": "Replay graphs once before profiling, update instead of re-capturing, and launch fewer per step.",
            "group": "graph_launch", "ops": [], "saving_us": t, "idle_us": t, "confidence": "medium",
            "graph_calls": {k: v for k, v in facts.items() if k.startswith("graph_")}}
