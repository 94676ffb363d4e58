"""Kernel classes from kernel names alone: what the device time was spent on when no shapes exist.

Every GPU event gets one class: `memcpy/memset` by its kind, otherwise the first class whose
pattern in _PATTERNS matches its lower-cased name (template arguments kept, parameter list
dropped): KV-cache writes and optimizer steps, table lookups (other), communication (as
traceana/link/comm_kernels.py says: the one rule every stage uses; and every kernel of an op that is
communication), attention, convolution, GEMM, normalization, reduction, elementwise, then `other`.
The order matters: cuDNN's `implicit_gemm` convolution kernels are convolutions,
a flash-attention kernel is attention even though it does GEMMs. No FLOPs are invented: the
classes only say where the time went, and the report asks for record_shapes=True to cost it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from traceana.arrays import distinct
from traceana.link.comm_kernels import kernel_library
from traceana.load.model import Trace

CLASSES = ("gemm", "convolution", "attention", "elementwise", "reduction", "normalization",
           "communication", "memcpy/memset", "other")

_PATTERNS = (
    ("elementwise", r"reshape_and_cache|store_kv|multi_tensor_apply"),  # cache writes, optimizer steps
    # table lookups (gathers), DeepEP routing layout; a rotary (position) embedding is element-wise, no lookup
    ("other", r"(?<!rotary_)embedding|bounds_check|deep_ep::layout"),
    ("communication", None),  # traceana.link.comm_kernels decides (one rule for every stage)
    ("attention", r"flash|fmha|attention|attn|sdpa|mha_|_mha|paged_?att|flashinfer|xformers|"
                  r"cutlassf?_?mha|unified_attention|batch_?prefill|batch_?decode"),
    ("convolution", r"conv|scudnn|winograd|wgrad|dgrad|fprop|implicit_?convolve|miopen.*(fwd|bwd)|igemm_(fwd|bwd|wrw)|"
                    r"cudnn::cnn|cudnn::detail::(im2col|implicit)|im2col|col2im|precomputed_convolve"),
    ("gemm", r"gemm|cutlass|cublas|xmma|cijk_|matmul|_mm_|\bmm_|triton_tem|wvsplitk|nvjet|hipblaslt|"
             r"s1688|h1688|s16816|h16816|bmm|gemv|dot_kernel|splitk"),
    ("normalization", r"norm|batchnorm|bn_fw|bn_bw|welford|gammabeta"),
    ("reduction", r"reduce|softmax|triton_red_|triton_per_|argmax|argmin|sum_kernel|max_kernel|mean_kernel|"
                  r"topk|max_pool|avg_pool|adaptive_(max|avg)|pool_(forward|backward)"),
    ("elementwise", r"elementwise|triton_poi_|pointwise|vectorized|unrolled|fill|copy|cat_?array|"
                    r"act_and_mul|silu|gelu|relu|rotary|dropout|"
                    r"where|masked|clamp|cast|convert|transpose|permute"),
)
_COMPILED = [(c, re.compile(p) if p else None) for c, p in _PATTERNS]


def classify(name: str) -> str:
    """The class of one kernel name (memcpy / memset events are classed by kind, not here)."""
    low = name.replace("(anonymous namespace)", "").split("(", 1)[0].lower()  # drop the parameter list
    if low.startswith(("memcpy", "memset")):
        return "memcpy/memset"
    for cls, rx in _COMPILED:
        if rx is None:
            if kernel_library(name) is not None:
                return cls
        elif rx.search(low):
            return cls
    return "other"


def event_classes(trace: Trace) -> np.ndarray:
    """Index into CLASSES per GPU event."""
    gpu = trace.gpu
    if len(gpu) == 0:
        return np.zeros(0, dtype=np.int8)
    used = distinct(gpu.name)
    per_name = np.zeros(len(trace.names), dtype=np.int8)
    for code in used.tolist():
        per_name[code] = CLASSES.index(classify(trace.names[code]))
    cls = per_name[gpu.name]
    cls[gpu.kind != 0] = CLASSES.index("memcpy/memset")
    return cls


def kernel_classes(trace: Trace, groups: Sequence, rows: Sequence[dict]) -> dict:
    """analysis["kernel_classes"]: device time per class over all GPU events and over the opaque
    ones; sets row["kernel_class"] (the class with the most of its time) on every opaque row, and
    on opaque rows made only of memcpy / memset events their recorded `bytes` (recorded_bytes per
    call, recorded_gbps): the row stays opaque (no op, no shapes), the numbers are shown."""
    cls = event_classes(trace)
    dur = trace.gpu.dur
    for g, r in zip(groups, rows):  # a communication op's kernels are communication, whatever their names
        ev = getattr(g, "events", None)
        if r.get("bound") == "communication" and ev is not None and len(ev):
            cls[ev[trace.gpu.kind[ev] == 0]] = CLASSES.index("communication")
    n = len(CLASSES)
    total = np.bincount(cls, weights=dur, minlength=n) if len(cls) else np.zeros(n)
    opaque = np.zeros(n)
    for g, r in zip(groups, rows):
        ev = getattr(g, "events", None)
        if not r.get("opaque") or ev is None or not len(ev):
            continue
        t = np.bincount(cls[ev], weights=dur[ev], minlength=n)
        opaque += t
        r["kernel_class"] = CLASSES[int(np.argmax(t))]
        nb = trace.gpu.nbytes[ev]
        if (trace.gpu.kind[ev] != 0).all() and np.isfinite(nb).all():  # copies / fills: bytes recorded
            total_b = float(nb.sum())
            r["recorded_bytes"] = total_b / max(r.get("count") or 1, 1)
            r["recorded_gbps"] = total_b / (r["device_time_us"] * 1e3) if r["device_time_us"] > 0 else None

    def table(v: np.ndarray) -> dict[str, float]:
        order = sorted(range(n), key=lambda i: (-v[i], i))
        return {CLASSES[i]: float(v[i]) for i in order if v[i] > 0}

    return {"by_class": table(total), "opaque_by_class": table(opaque), "total_us": float(dur.sum())}
