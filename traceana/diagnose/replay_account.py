"""What ran where no op could be costed because the kernels were replayed from a CUDA/HIP graph with no
capture trace at hand, or ran inside a torch.compile region: an account by kernel class and by kernel
name (time, count, share, and what each name says: a GEMM's tile, a collective, the ops a Triton
kernel fused), copies judged by the bytes the profiler recorded for them, and the recipe that records a
trace this kind of run can be costed from.

The kind of run is read from what the trace holds, never assumed: the serving engine whose own ops or
kernels ran (vLLM registers its ops as `vllm::` / `_C::` / `_C_cache_ops::` / `_moe_C::` and names its
kernels in the `vllm` namespace; SGLang's are `sgl_kernel::` / `sglang::` and the `sgl_hip` /
`sgl_kernel` kernel namespaces; SGLang builds use vLLM's kernels too, so SGLang's marks win), else
torch.compile (analysis["context"]["compiled"], diagnose/context.py), else plain CUDA/HIP graphs.

The engines' options come from their own code: vLLM's ProfilerConfig (vllm/config/profiler.py:
`profiler`, `torch_profiler_dir`, `torch_profiler_record_shapes`, and `capture_torch_profiler`, "a
torch profiler during CUDA graph capture on rank 0", traces in `capture_traces/` under the profiler
dir; `--enforce-eager` runs without graphs); SGLang's server arguments (`--enable-profile-cuda-graph`,
"profiling of cuda graph capture", which profiles the capture with record_shapes; `--disable-cuda-graph`;
SGLANG_TORCH_PROFILER_DIR and /start_profile's record_shapes for the serving trace). Inductor records
kernel_num_gb / kernel_flop on each Triton launch with torch._inductor.config.benchmark_kernel
(TORCHINDUCTOR_BENCHMARK_KERNEL=1); torch.compile without CUDA graphs is mode="max-autotune-no-cudagraphs"
or torch._inductor.config.triton.cudagraphs = False.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from traceana import units as u
from traceana.diagnose.compiled_regions import kernel_facts
from traceana.link.copies import LINK, classify
from traceana.link.attribute import CAUSES
from traceana.load.model import Trace
from traceana.link.signatures import BY_KERNEL

TOP = 30  # kernel names listed in the account

_VLLM_OPS = ("vllm::", "_C::", "_C_cache_ops::", "_moe_C::", "_rocm_C::", "_custom_ar::")
_SGLANG_OPS = ("sgl_kernel::", "sglang::", "sglang_profiler::")
# a kernel's own namespace: demangled `void vllm::f<...>(...)` / `vllm::f`, or Itanium-mangled _ZN4vllm...
_VLLM_KERNEL = re.compile(r"^(?:void\s+)?vllm::|^_ZN4vllm")
_SGLANG_KERNEL = re.compile(r"^(?:void\s+)?(?:sgl_hip|sgl_kernel|sglang)::|^_ZN(?:7sgl_hip|10sgl_kernel|6sglang)")

VLLM = ("vLLM: record the graph capture with the engine's profiler: --profiler-config.profiler=torch "
        "--profiler-config.torch_profiler_dir=DIR --profiler-config.torch_profiler_record_shapes=true "
        "--profiler-config.capture_torch_profiler=true (vLLM's ProfilerConfig; the capture traces go to "
        "DIR/capture_traces/), then traceana report TRACE --capture DIR/capture_traces/FILE (or list the files in "
        "capture_traces/execution_details.json to have them found); or profile a step without graphs "
        "(--enforce-eager).")
SGLANG = ("SGLang: launch with --enable-profile-cuda-graph (profiles the graph capture with record_shapes) and pass "
          "that capture trace with traceana report TRACE --capture FILE (builds that only log the capture's top "
          "kernels write no trace); profile the serving steps with SGLANG_TORCH_PROFILER_DIR=DIR and "
          "/start_profile with record_shapes; or profile a step without graphs (--disable-cuda-graph).")
COMPILE_GRAPHS = ("torch.compile with CUDA graphs (mode=\"reduce-overhead\"): record the steps that capture the graphs "
                  "too: traceana record -- python PROG.py keeps the compile and capture steps as the capture trace "
                  "(capture_traces/ beside the trace, found by traceana report; --capture on keeps them whatever the "
                  "program does by its first step); with your own profiler, profile the "
                  "compiled function's first calls (warm-up, capture) and pass that trace with --capture; or profile a "
                  "step without CUDA graphs (mode=\"max-autotune-no-cudagraphs\", or "
                  "torch._inductor.config.triton.cudagraphs = False).")
GRAPHS = ("CUDA/HIP graphs: profile the capture (torch.cuda.graph) with record_shapes=True and pass that trace "
          "with --capture (traceana record -- python PROG.py keeps it beside the trace); or profile a step run "
          "eagerly.")
COMPILED = ("torch.compile: profile with torch >= 2.1 and record_shapes=True so each Triton launch is recorded as an "
            "op with its tensors (traceana record does), and set torch._inductor.config.benchmark_kernel = True "
            "(TORCHINDUCTOR_BENCHMARK_KERNEL=1): each launch then carries Inductor's kernel_num_gb and kernel_flop; "
            "or profile the eager model once for per-op costs.")
BENCHMARK = (" Set torch._inductor.config.benchmark_kernel = True (TORCHINDUCTOR_BENCHMARK_KERNEL=1) as well: each "
             "Triton launch then records Inductor's kernel_num_gb and kernel_flop.")


def run_kind(trace: Trace, compiled: bool) -> str:
    """"sglang", "vllm", "torch.compile" or "graphs": what produced the trace's replays / regions
    (compiled: the run context found torch.compile)."""
    names = trace.names
    op_names = {names[i] for i in set(trace.ops.name.tolist())}
    kernels = [names[i] for i in set(trace.gpu.name.tolist())]
    if any(n.startswith(_SGLANG_OPS) for n in op_names) or any(_SGLANG_KERNEL.search(k) for k in kernels):
        return "sglang"
    if any(n.startswith(_VLLM_OPS) for n in op_names) or any(_VLLM_KERNEL.search(k) for k in kernels):
        return "vllm"
    return "torch.compile" if compiled else "graphs"


def recipe(kind: str, causes: set[str]) -> str:
    """How to record a trace whose replayed / compiled kernels can be costed, for this kind of run."""
    replay = bool(causes & {"graph_replay", "graph_unaligned"})
    if kind == "vllm":
        return VLLM + (BENCHMARK if "compiled" in causes else "")
    if kind == "sglang":
        return SGLANG + (BENCHMARK if "compiled" in causes else "")
    if kind == "torch.compile":
        return (COMPILE_GRAPHS + BENCHMARK) if replay else COMPILED
    return GRAPHS if replay else COMPILED


def account(trace: Trace, rows: Sequence[dict], device: dict, total_us: float, compiled: bool) -> dict | None:
    """coverage["opaque_account"], or None when no kernel is opaque for a replay or a compiled region.
    Sets on each such row its reason (the cause, what its kernel name says, the recipe's first step)
    and, on a copy row with recorded bytes, `copy_judged`."""
    mine = [r for r in rows if r.get("cause") in BY_KERNEL and not r.get("cause_from_cost")]
    t = sum(r["device_time_us"] for r in mine)
    if not mine or t <= 0:
        return None
    causes = {r["cause"] for r in mine}
    kind = run_kind(trace, compiled)
    how = recipe(kind, causes)
    share = (lambda x: x / total_us * 100.0) if total_us > 0 else (lambda x: 0.0)  # noqa: E731
    by_class: dict[str, dict] = {}
    kernels, copies = [], []
    for r in sorted(mine, key=lambda r: -r["device_time_us"]):
        cls = r.get("kernel_class") or "other"
        c = by_class.setdefault(cls, {"time_us": 0.0, "count": 0})
        c["time_us"] += r["device_time_us"]
        c["count"] += r["count"]
        judged = _judge_copy(r, device)
        facts = kernel_facts(r["name"]) if judged is None else judged["text"]
        r["reason"] = CAUSES[r["cause"]] + (f"; {facts}" if facts else "") + f". To cost it: {_first(how)}"
        if judged is not None:
            r["copy_judged"] = {k: v for k, v in judged.items() if k != "text"}
            copies.append({"name": r["name"], **r["copy_judged"]})
        if len(kernels) < TOP:
            kernels.append({"name": r["name"], "class": cls, "cause": r["cause"], "time_us": r["device_time_us"],
                            "count": r["count"], "pct": share(r["device_time_us"]), "detail": facts})
    for c in by_class.values():
        c["pct"] = share(c["time_us"])
    return {
        "time_us": t, "pct": share(t), "causes": sorted(causes), "run": kind,
        "by_class": dict(sorted(by_class.items(), key=lambda kv: -kv[1]["time_us"])),
        "kernels": kernels, "kernel_names": len(mine), "copies": copies, "recipe": how,
    }


def advice(acc: dict) -> dict[str, str]:
    """The recipe as the opaque advice of each of the account's causes (coverage["opaque_advice"])."""
    return {c: acc["recipe"] for c in acc["causes"]}


def line(acc: dict) -> str:
    """One warning: where the account's time went, by class and by the top kernel names, and the recipe."""
    what = {"graph_replay": "replayed from CUDA/HIP graphs with no capture trace",
            "graph_unaligned": "replayed from graphs that did not align with the capture",
            "compiled": "run inside torch.compile regions with no per-kernel shapes"}
    head = " or ".join(what[c] for c in acc["causes"])
    classes = ", ".join(f"{k} {v['pct']:.1f}%" for k, v in list(acc["by_class"].items())[:6])
    top = "; ".join(f"{u.kernel_name(k['name'], 50)} {k['pct']:.1f}% ({u.plural(k['count'], 'run')}"
                    + (f", {k['detail']}" if k["detail"] else "") + ")" for k in acc["kernels"][:4])
    return (f"{acc['pct']:.1f}% of device time ran in kernels {head} ({u.plural(acc['kernel_names'], 'kernel name')}): "
            f"by class {classes}; the largest: {top}. To cost them: {acc['recipe']}")


def _first(how: str) -> str:
    """The recipe's first sentence (the row reason carries it; the coverage advice has all of it)."""
    head, _, rest = how.partition(": ")
    cut = rest.find("; or ")
    return f"{head}: {rest[:cut] if cut > 0 else rest}".rstrip(".") + "."


def _judge_copy(row: dict, device: dict) -> dict | None:
    """A copy or fill replayed from a graph, held to what it crosses by the bytes the profiler recorded:
    a device-to-device copy reads and writes them in DRAM (2x), a fill writes them, a host copy crosses
    the host link once, a peer copy the peer link. None when the row is no copy or recorded no bytes."""
    nbytes = row.get("recorded_bytes")
    mean = row.get("mean_time_us") or 0.0
    if not nbytes or mean <= 0 or row.get("kernel_class") != "memcpy/memset":
        return None
    name = row["name"]
    if "memset" in name.lower():
        direction, traffic, roof, rate = "memset", nbytes, "DRAM", device.get("dram_gbps")
    else:
        direction = classify(name)[0]
        if direction is None:
            return None
        link = LINK[direction]
        if link == "dram":
            traffic, roof, rate = 2 * nbytes, "DRAM", device.get("dram_gbps")
        else:
            traffic, roof, rate = nbytes, device.get(link) or link.replace("_", " "), device.get(f"{link}_gbps")
    gbps = nbytes / (mean * 1e3)
    pct = traffic / (rate * 1e3) / mean * 100.0 if rate else None
    how = f"{u.nbytes(nbytes)} per run recorded ({direction}), {u.rate_gbps(gbps)}"
    if pct is not None:
        how += (f": {u.pct(pct)} of the {roof}'s {rate:g} GB/s"
                + (" (read and written: 2x the bytes)" if roof == "DRAM" and direction != "memset" else ""))
    return {"direction": direction, "bytes": nbytes, "traffic_bytes": traffic, "gbps": gbps, "roof": roof,
            "roof_gbps": rate, "roof_pct": pct, "text": how}
