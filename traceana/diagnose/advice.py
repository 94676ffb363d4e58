"""What to change, per bound and per opaque cause (sentences shared by explanations and findings)."""

from __future__ import annotations

import re

# one line each: what to record so the time can be costed (a plan note's fix, diagnose/findings.py)
OPAQUE_FIX = {
    "no_launch": "Start the profiler one step earlier so these kernels' launches are recorded with their ops.",
    "graph_replay": "Profile the graph capture too and pass it with --capture, or profile one step without graphs.",
    "graph_unaligned": "Profile the capture of this same run (same batch sizes and modes) and pass it with --capture.",
    "outside_op": "Wrap the code that launches them in record_function, or register it as a custom op.",
    "compiled": "Set torch._inductor.config.benchmark_kernel = True, or profile the eager model once.",
    "no_shapes": "Profile with record_shapes=True.",
    "shapes_not_recorded": "Profile with a recent torch and record_shapes=True.",
    "scalars_not_recorded": "Profile with torch >= 2.4 and record_shapes=True.",
    "comm_unsized": "Profile with torch >= 2.1 and record_shapes=True so collectives record their sizes.",
}
OPAQUE_ADVICE = {
    "no_launch": "Start profiling one step earlier (a warm-up step in the profiler schedule) so the "
                 "launches of these kernels are captured with their ops.",
    "graph_replay": "Kernels replayed from a CUDA/HIP graph carry no per-op shapes: profile one step "
                    "without graphs (or the capture run) to see what each kernel does; or profile the graph "
                    "capture too and give that trace with --capture (or put it in a capture_traces/ folder "
                    "with execution_details.json beside the trace): each replayed kernel then takes the shapes "
                    "of the op that captured it.",
    "graph_unaligned": "The capture trace given does not match these graph launches: profile the capture of the "
                       "same run (same model, batch sizes and modes) and list each capture file with its batch "
                       "size in execution_details.json, so each replayed graph finds its capture.",
    "outside_op": "These launches ran outside any profiled op: wrap the code that issues them in "
                  "torch.profiler.record_function, or check that CPU activities were recorded.",
    "compiled": "torch.compile kernels have no per-kernel shapes: set "
                "torch._inductor.config.benchmark_kernel = True (the trace then carries kernel_flop "
                "and kernel_num_gb) or profile the eager model once for per-op costs.",
    "no_shapes": "Record with torch.profiler.profile(record_shapes=True) so each op's input shapes "
                 "and dtypes are in the trace.",
    "shapes_not_recorded": "Profile with a recent torch (record_shapes=True): older profilers wrote no sizes "
                           "for TensorList arguments (cat, stack, collectives' tensor lists), and newer ones "
                           "still drop them for long lists (e.g. a foreach optimizer step over every "
                           "parameter), so these ops cannot be costed from this trace.",
    "scalars_not_recorded": "Profile with torch >= 2.4 (record_shapes=True): it records the op's int and "
                            "int-list arguments as 'Concrete Inputs', which these ops' costs need.",
    "lengths_not_recorded": "Record the lengths next to the op: wrap the attention call in "
                            "torch.profiler.record_function with the batch's total and maximum KV length in its "
                            "name, or call an entry point that takes max_seq_len as an argument (vLLM's paged "
                            "attention does); the FLOPs are 4*Hq*D*sum(Sq_i*Sk_i) and the bytes the K/V rows read.",
    "comm_unsized": "Profile with torch >= 2.1: record_param_comms then records each collective's message "
                    "size, dtype and group size ('In msg nelems', 'dtype', 'Group size'), so its bytes per rank "
                    "and bus bandwidth can be computed.",
    "input_not_recorded": "Record the ops that carry the missing input: profile with record_shapes=True a window "
                          "that includes them. A layer's own ops show the weights it holds (vLLM's moe_forward: "
                          "the expert GEMMs' weight views and the routing's top-k; for a layer replayed from a "
                          "CUDA graph, its capture trace). An embedding lookup and its backward must be in the "
                          "same window. The op's reason names what is missing.",
    "bad_shapes": "The recorded shapes of these ops are corrupt: record the trace again (a newer torch, "
                  "record_shapes=True) to cost them.",
}

MEMORY_FIX = ("Only moving fewer bytes helps: fuse it with its neighbours (torch.compile, or a fused "
              "kernel) so the tensor crosses DRAM once.")
NARROW_FIX = " Or keep it in a narrower dtype: bf16/fp16 halves the bytes."
# Families whose work is streaming element-wise passes over tensors: any such op over the same bytes
# takes about as long, whatever its math.
STREAMING = frozenset({"pointwise", "norm", "reduction", "memory", "resample"})
MATRIX = frozenset({"gemm", "conv", "attention", "moe", "attention_paged", "tbe"})
_WIDE = frozenset({"fp32", "fp64", "float", "double"})

# Gathers / scatters (family "index") below this share of the bandwidth roof get GATHER_FIX instead of
# MEMORY_FIX: their time is set by scattered accesses, not by how many bytes stream.
SCATTERED_ROOF_PCT = 30.0
GATHER_FIX = ("A gather or scatter this far below the roof is bound by its access pattern, not by bandwidth: "
              "each scattered row is its own DRAM transaction, and repeated indices serialise on atomics or a "
              "sort, so an element-wise op over the same bytes would be several times faster. What helps: "
              "narrower rows (fp16 or int8 embedding tables move half or a quarter of the bytes per row), rows "
              "that fill whole 32 B sectors, and fewer lookups (deduplicated indices, smaller pooling factors).")

LATENCY_FIX = ("Kernels this short are dominated by launch latency and fixed per-kernel costs: fewer, "
               "larger kernels help — CUDA graphs (torch.compile mode=\"reduce-overhead\"), fusion, "
               "or a larger batch per launch.")

LATENCY_REPLAY_FIX = ("Kernels this short are dominated by fixed per-kernel costs; this run already replays them "
                      "from a CUDA/HIP graph, so launch overhead is gone and only fewer kernels help: fuse "
                      "neighbouring ops (torch.compile, fused kernels) or give each kernel more work (a larger batch).")


REPLAYED = 0.5  # a run whose GPU time is mostly graph replays is told nothing about CUDA graphs


def replays_graphs(context: dict | None) -> bool:
    """Does graph replay run most of this run's GPU time? (a bare flag without a share counts as yes)"""
    c = context or {}
    if not c.get("graph_replay"):
        return False
    share = c.get("graph_replay_share")
    return share is None or share >= REPLAYED


LATENCY_PARTIAL_FIX = ("Kernels this short are dominated by launch latency and fixed per-kernel costs; this run "
                       "already replays part of its work from CUDA/HIP graphs, and these kernels were launched one "
                       "by one outside them: capture them in the graphs too, or fuse neighbouring ops (fused "
                       "kernels), or give each kernel more work (a larger batch).")


def latency_fix(context: dict | None) -> str:
    """LATENCY_FIX, unless the run replays CUDA/HIP graphs already (then graphs are no new advice: mostly
    replayed, only fewer kernels help; partly, the launches outside the graphs can join them)."""
    if replays_graphs(context):
        return LATENCY_REPLAY_FIX
    return LATENCY_PARTIAL_FIX if uses_graphs(context) else LATENCY_FIX


def uses_graphs(context: dict | None) -> bool:
    """Does the run replay CUDA / HIP graphs at all (diagnose/context.py)? Then no advice proposes them."""
    return bool((context or {}).get("graph_replay"))


def uses_compile(context: dict | None) -> bool:
    """Did torch.compile run (diagnose/context.py)? Then no advice proposes it as if it were new."""
    return bool((context or {}).get("compiled"))


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
_ALREADY_COMPILE = "This run already uses torch.compile: these ops ran outside its compiled regions."
_ALREADY_GRAPHS = "This run already replays CUDA graphs (or HIP graphs): these kernels were launched outside them."
_COMPILED_OP = ("This kernel is already torch.compile's own output (an Inductor kernel): it fuses further only "
                "across a graph break removed, or in a hand-written kernel.")


def fit_to_run(s: str, context: dict | None, compiled_ops: bool = False) -> str:
    """Advice written for any run, said to a run that already uses torch.compile or CUDA graphs: after the
    first sentence proposing either, unless the text already says so, a sentence that the run uses it and
    that this work ran outside it (so the advice reads as: bring this work in too); compiled_ops: the
    finding's ops are torch.compile's own kernels, which is said instead."""
    if not s:
        return s
    rules = [(w, add) for w, add, said, on in (
        ("torch.compile", _COMPILED_OP if compiled_ops else _ALREADY_COMPILE,
         "already torch.compile's" if compiled_ops else "already uses torch.compile", uses_compile(context)),
        ("CUDA graph", _ALREADY_GRAPHS, "already replays", uses_graphs(context))) if on and said not in s]
    if not rules:
        return s
    parts = _SENTENCE.split(s)
    for word, add in rules:
        i = next((i for i, p in enumerate(parts) if word in p), None)
        if i is not None:
            if not parts[i].rstrip().endswith((".", "!", "?")):
                parts[i] = parts[i].rstrip() + "."
            parts.insert(i + 1, add)
    return " ".join(parts)


def scattered(row: dict) -> bool:
    """A gather / scatter (family index) running far below the bandwidth roof."""
    pct = row.get("roof_pct")
    return row.get("family") == "index" and pct is not None and pct < SCATTERED_ROOF_PCT


def memory_advice(row: dict, ridge: float | None = None) -> str:
    """Why a memory-bound op takes its time and what helps, from what the op is: a gather by its access
    pattern, a matrix op by its shape (near the ridge, more work per call tips it), a streaming
    element-wise op by its bytes alone. A narrower dtype is offered only to ops in a wide one."""
    if scattered(row):
        return GATHER_FIX
    fam = row.get("family")
    wide = row.get("dtype") in _WIDE
    if fam in MATRIX:
        x = row.get("intensity")
        near = ridge and x is not None and x >= 0.5 * ridge
        return ((f"Its arithmetic intensity {x:.3g} FLOP/B is close to the ridge ({ridge:.3g} FLOP/B): bytes and FLOPs "
                 "both matter, and a little more work per call (a larger batch or sequence) makes it compute-bound. "
                 if near else
                 "The matrices are too thin or small for the FLOPs to matter: more work per call (a larger batch, "
                 "fewer and larger matmuls) raises the intensity; a fused kernel that keeps its output on chip moves "
                 "fewer bytes. ")
                + (NARROW_FIX.strip() if wide else ""))
    if fam in STREAMING:
        return ("Its FLOP count is irrelevant: any element-wise op over the same tensors (sin, log, a multiply) "
                "would take about as long. " + MEMORY_FIX + (NARROW_FIX if wide else ""))
    return "Its bytes set its time. " + MEMORY_FIX + (NARROW_FIX if wide else "")

def memory_fix(row: dict) -> str:
    """memory_advice in one imperative sentence (a card's fix line)."""
    if scattered(row):
        return "Narrow the gathered rows (fp16 / int8 tables) and deduplicate the indices."
    wide = row.get("dtype") in _WIDE
    if row.get("family") in MATRIX:
        return "Give each call more work (a larger batch or sequence) or fuse what reads its output."
    return "Fuse it with its neighbours (torch.compile)" + (" or keep it in bf16/fp16." if wide else ".")


#: Below this share of the dtype's roof a matrix kernel falls well short of the library's best: the
#: kernel choice (or its tuning) is the first lever, before a narrower dtype.
FAR_FROM_ROOF_PCT = 60.0


def compute_fix(row: dict, faster: str | None, pct: float, context: dict | None) -> str:
    """A compute-bound op's fix in a sentence or two: the kernel first when it is far from its roof
    (tuned GEMM selection, the device's best attention kernel, a tuned fused-MoE config, cuDNN's
    autotuner), then a faster dtype the device has (fp8 for bf16/fp16 matmuls)."""
    fam = row.get("family")
    out = []
    if pct < FAR_FROM_ROOF_PCT:
        if fam == "gemm":
            out.append("Tune the GEMM kernel per shape (PYTORCH_TUNABLEOP_ENABLED=1 tries the cuBLAS / hipBLASLt "
                       "candidates and keeps the fastest).")
        elif fam == "moe":
            out.append("Tune the fused-MoE kernel's tile config for this GPU and batch size (serving engines ship a "
                       "tuning script that writes one per device).")
        elif fam == "attention":
            out.append("Use the device's fastest attention kernel (FA3 on Hopper, CK / aiter on ROCm).")
        elif fam == "conv":
            out.append("Let cuDNN / MIOpen pick its fastest algorithm (torch.backends.cudnn.benchmark = True) "
                       "and use channels_last.")
    if faster == "fp8_tc" and fam in MATRIX:
        inference = (context or {}).get("mode") == "inference"
        out.append(("Or" if out else "Use") + " fp8: 2x the tensor-core peak (" + (
            "fp8 weight and activation quantization" if inference else "torchao float8 or Transformer Engine") + ").")
    elif faster and row.get("dtype") == "bf16" and faster == "fp16_tc":
        out.append("This GPU has no bf16 tensor cores (they came with Ampere): run it in fp16 on its fp16 tensor "
                   "cores (torch.autocast('cuda', dtype=torch.float16)" + (
                       ", with torch.amp.GradScaler)." if (context or {}).get("mode") == "training" else ")."))
    elif faster == "tf32_tc":
        out.append("TF32 tensor cores raise the roof (torch.set_float32_matmul_precision('high')).")
    elif faster:
        out.append(f"A faster dtype's tensor cores raise the roof (autocast to {faster.replace('_tc', '')}).")
    return " ".join(out) or "Do fewer FLOPs: the kernel is near its roof and the device has no faster dtype."

