"""The tensor-core dtype levers from kernel names (kernel_levers.py), on the GEMM / convolution kernels no
costed op covers:

  tensor_core_dtype   fp32 GEMM / convolution kernels on CUDA cores where the device has faster tensor
                      cores: TF32 first where the device has it (Ampere on; no code change: the
                      allow_tf32 flags), else fp16 autocast (Volta, Turing: no TF32, no bf16 tensor cores);
                      TF32 kernels -> bf16 / fp16 autocast; bf16 / fp16 GEMM kernels -> fp8 where the device
                      has fp8 tensor cores. Never TF32 advice to GEMMs when the trace's GEMM kernels already
                      run TF32 (the flag is on; what stays fp32 is the library's choice), never fp8 advice to
                      a run that already runs fp8 GEMMs.
                      A name carries no FLOPs, so each kernel's time after is read from what its name says:
                      a GEMM / convolution kernel is taken as compute-bound, keeping its work at an
                      achievable fraction of each roof: t x (old peak x f_old) / (new peak x f_new), with
                      CUDA-core kernels at F_CUDA_CORES of theirs and f_new the architecture's achievable
                      share of the new roof (roofline/achievable.py; between tensor-core dtypes the same
                      fraction on both sides: the peaks' ratio); a kernel the name says is memory-bound
                      (matrix-vector: gemv, split-K reduce; depthwise / grouped convolutions) gains only
                      the bytes: t x BYTES[target] (16-bit operands halve them; TF32 keeps fp32 in memory:
                      nothing); no kernel drops below the device's per-kernel floor (launch_floor_us).
                      saving = the kernels' time - their time after; the text also gives the floor of the
                      saving if every kernel were memory-bound (small batches), so the range is said.
All are estimates from names (confidence low, estimated): the report asks for record_shapes=True to cost them.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.arrays import distinct
from traceana.diagnose.kernel_selection import MIN_SHARE, named, op_ids, source_term, top_names
from traceana.link.kernel_account import KernelView
from traceana.link.kernel_names import CLASSES, KernelName
from traceana.load.model import Trace
from traceana.roofline import achievable as achv
from traceana.roofline.judge import PEAK_LABEL

#: the achievable fraction of a CUDA-core kernel's roof: SGEMM / cuDNN fp32 kernels reach about 90% of the fp32
#: peak on large problems (the old roof's share; the new roof takes the architecture's, roofline/achievable.py, and
#: between tensor-core roofs, fp8 included, the share is the same on both sides)
F_CUDA_CORES = 0.9
#: time after / time before of a memory-bound kernel whose operands move to the target dtype
BYTES = {"tf32_tc": 1.0, "bf16_tc": 0.5, "fp16_tc": 0.5}
_GEMM = CLASSES.index("gemm")
_LABEL = {"fp32": "fp32", "tf32": "tf32", "fp32 matrix": "fp32 (matrix-core)", "bf16 cuda": "bf16 (CUDA-core)"}
_LOW = frozenset({"fp8", "fp6", "fp4", "int8", "uint8", "int4"})  # quantized GEMM operands


def dtype_findings(trace: Trace, view: KernelView, rows: list[dict], device: dict, context: dict,
                   total_us: float) -> list[dict]:
    peaks = device.get("peak_tflops") or {}
    rec = view.records
    dur = trace.gpu.dur
    gemm_conv = (view.cls == _GEMM) | (view.cls == CLASSES.index("convolution"))
    # per kernel event, read off its name's record (each test once per record, not per event)
    a_of = [k.a or "" for k in rec]
    tc = np.array([k.tensor_cores is True for k in rec], dtype=bool)[view.rec]
    cuda = np.array([k.tensor_cores is False for k in rec], dtype=bool)[view.rec]
    tf32 = np.array([k.tf32 for k in rec], dtype=bool)[view.rec]
    a_fp32 = np.array([x == "fp32" for x in a_of], dtype=bool)[view.rec]
    a_half = np.array([x in ("bf16", "fp16") for x in a_of], dtype=bool)[view.rec]
    gemm = view.cls == _GEMM
    tf32_on = bool((gemm & tf32).any())  # the matmul TF32 flag is on: the trace's GEMM kernels run TF32
    low = np.array([x in _LOW or (k.b or "") in _LOW for x, k in zip(a_of, rec)], dtype=bool)[view.rec]
    fp8_on = bool((gemm & low).any())  # the run already quantizes GEMMs (fp8 / fp4 / int8 operands)
    out = []
    shown = achv.shown_by_trace(rows, total_us)  # the most of a roof this trace's costed ops reach
    # the run already multiplies in 16 bits (autocast, or a half-precision model): its fp32 GEMMs ran outside that
    half_mm = gemm_conv & tc & a_half
    mm_us = float(dur[gemm_conv].sum())
    half = sorted({a_of[i] for i in distinct(view.rec[half_mm]).tolist()}) \
        if mm_us > 0 and dur[half_mm].sum() >= 0.1 * mm_us else []
    lever = dict(trace=trace, view=view, rows=rows, device=device, context=context, total_us=total_us, shown=shown,
                 half=half)
    simt = view.uncovered & gemm_conv & cuda & a_fp32
    f = _dtype_lever(sel=simt, what="fp32", old_key="fp32", tf32_on=tf32_on, **lever)
    out += [f] if f else []
    on_tf32 = view.uncovered & gemm_conv & tf32
    f = _dtype_lever(sel=on_tf32, what="tf32", old_key="tf32_tc", tf32_on=True, **lever)
    out += [f] if f else []
    # fp32 multiplied as fp32 on matrix cores (AMD's fp32 MFMA): the 16-bit types run several times faster
    mfma = view.uncovered & gemm_conv & tc & ~tf32 & a_fp32
    f = _dtype_lever(sel=mfma, what="fp32 matrix", old_key="fp32", tf32_on=True, **lever)
    out += [f] if f else []
    # bf16 on a GPU without bf16 tensor cores (Volta, Turing): its matmuls run on CUDA cores; fp16 has them
    if not peaks.get("bf16_tc") and peaks.get("fp16_tc"):
        a_bf16 = np.array([x == "bf16" for x in a_of], dtype=bool)[view.rec]
        slow = view.uncovered & gemm_conv & ~tc & a_bf16
        f = _dtype_lever(sel=slow, what="bf16 cuda", old_key="fp32", tf32_on=True, **lever)
        out += [f] if f else []
    half = view.uncovered & gemm & tc & a_half
    if not fp8_on and peaks.get("fp8_tc"):
        f = _fp8_lever(trace, view, rows, device, context, total_us, half)
        out += [f] if f else []
    return out


def _target(peaks: dict, old: float, tf32_ok: bool) -> str | None:
    for k in (("tf32_tc",) if tf32_ok else ()) + ("bf16_tc", "fp16_tc"):
        if peaks.get(k, 0.0) > 1.2 * old:
            return k
    return None


def memory_bound_by_name(k: KernelName) -> bool:
    """A matrix kernel whose name says it moves more bytes than it multiplies: matrix-vector products (gemv,
    gemmSN's small N, dot), a split-K GEMM's reduction of its partial sums, depthwise / grouped
    convolutions (one input channel per output channel)."""
    return k.op in ("gemv", "split-K reduce", "epilogue") or k.detail in ("depthwise", "grouped")


def _dtype_lever(trace: Trace, view: KernelView, rows: list[dict], device: dict, context: dict, total_us: float,
                 shown: dict, half: list[str], sel: np.ndarray, what: str, old_key: str,
                 tf32_on: bool) -> dict | None:
    peaks = device.get("peak_tflops") or {}
    d = trace.gpu.dur[sel]
    t = float(d.sum())
    old = peaks.get(old_key)
    if t < MIN_SHARE * total_us or not old:
        return None
    key = _target(peaks, old, what == "fp32" and not tf32_on)  # TF32 for CUDA-core fp32 only
    if key is None:
        return None
    new = peaks[key]
    f_new, f_why = achv.fraction(device, key, shown)
    cuda = what in ("fp32", "bf16 cuda")
    f_old = F_CUDA_CORES if cuda else f_new  # between tensor-core roofs: the same share of both
    ratio = (old * f_old) / (new * f_new)
    # to TF32 fp32 stays in memory (x 1); to a 16-bit type the bytes halve; bf16 -> fp16 moves as many
    by_bytes = 1.0 if what == "bf16 cuda" else BYTES[key]
    mem = np.array([memory_bound_by_name(k) for k in view.records], dtype=bool)[view.rec][sel]
    floor = float(device.get("launch_floor_us") or 0.0)
    after_each = np.maximum(d * np.where(mem, by_bytes, ratio), np.minimum(d, floor))
    after = float(after_each.sum())
    saving = max(t - after, 0.0)
    # the same kernels if every one were memory-bound (a small batch): only the bytes shrink
    low = max(t - float(np.maximum(d * by_bytes, np.minimum(d, floor)).sum()), 0.0)
    t_mem = float(d[mem].sum())
    conv = float(trace.gpu.dur[sel & (view.cls == CLASSES.index("convolution"))].sum())
    dev = device.get("name") or device.get("key") or "this device"
    training = context.get("mode") == "training"
    if what == "bf16 cuda":
        scaler = training
        how = ("torch.autocast('cuda', dtype=torch.float16) instead of bfloat16 (a bf16 model: model.half())"
               + (" with torch.amp.GradScaler (fp16 gradients need loss scaling)" if scaler else ""))
        fix = ("Use fp16, not bf16, on this GPU: torch.autocast('cuda', dtype=torch.float16)"
               + (" with a GradScaler." if scaler else "."))
    elif key == "tf32_tc":
        how = ("torch.backends.cuda.matmul.allow_tf32 = True (torch.set_float32_matmul_precision('high')) for the "
               "matmuls"
               + ("; torch.backends.cudnn.allow_tf32 = True (the default) for the convolutions" if conv else ""))
        fix = "Let fp32 matmuls and convolutions use TF32 tensor cores (set_float32_matmul_precision('high'))."
    elif half:  # the run already uses 16-bit GEMMs: these ran outside that region, not for want of autocast
        dt = "bfloat16" if "bf16" in half else "float16"
        how = (f"bring the ops behind them inside the torch.autocast('cuda', dtype=torch.{dt}) region (or cast their "
               f"module to {dt}), unless they are kept fp32 on purpose (autocast keeps some ops, e.g. losses and "
               "norms, in fp32; a model's head may be)")
        fix = f"Move these fp32 matmuls into the run's {half[0]} autocast region, unless they are fp32 on purpose."
    else:
        dt = "bfloat16" if key == "bf16_tc" else "float16"
        scaler = dt == "float16" and training
        how = (f"torch.autocast('cuda', dtype=torch.{dt})"
               + (" with torch.amp.GradScaler (fp16 gradients need loss scaling)" if scaler else ""))
        fix = (f"Run the matmuls and convolutions in {key[:4]} under autocast"
               + (" with a GradScaler." if scaler else "."))
    why = ""
    if what == "bf16 cuda":
        why = (f" {dev} has no bf16 tensor cores (they came with Ampere): its bf16 matmuls run on CUDA cores, at "
               "about the fp32 rate; its fp16 tensor cores take the same work.")
    elif half and what != "fp32 matrix":
        why = (f" The run already multiplies {' / '.join(half)} on tensor cores (autocast, or a half-precision "
               "model): these GEMMs stayed fp32.")
    elif what == "fp32" and key != "tf32_tc":
        why = (f" {dev} has no TF32 tensor cores faster than its fp32 units"
               + (", and no bf16 ones: fp16 is its tensor-core type." if key == "fp16_tc" else ".")
               if "tf32_tc" not in peaks or peaks["tf32_tc"] <= 1.2 * old else
               " The trace's GEMM kernels already run TF32 (the matmul flag is on): these stayed fp32, so TF32 "
               "flags will not move them; autocast will.")
    tops = top_names(trace, view, sel)
    src = {"fp32": f"fp32 on CUDA cores ({old:g} TFLOP/s {PEAK_LABEL.get(old_key, old_key)})",
           "tf32": f"fp32 operands on TF32 tensor cores ({old:g} TFLOP/s)",
           "fp32 matrix": f"fp32 on the matrix cores, multiplied as fp32 ({old:g} TFLOP/s)",
           "bf16 cuda": f"bf16 on CUDA cores (at most the {old:g} TFLOP/s fp32 rate)"}[what]
    frac = (f"{f_old * 100:.0f}% of the {old:g} TFLOP/s roof today (CUDA-core SGEMM / cuDNN kernels reach about that "
            f"on large problems) and the new roof's achievable share, {f_why}" if cuda else
            f"the same share of both tensor-core roofs (at most {f_new * 100:.0f}% of the new one: {f_why})")
    mem_part = (f"; the {u.us(t_mem)} of matrix-vector / depthwise kernels among them are memory-bound by their names: "
                f"x {by_bytes:g} (the bytes{' halve' if by_bytes < 1 else ' stay'})" if t_mem > 0 else "")
    text = (f"{u.us(t)} of GEMM / convolution kernels ({t / total_us * 100:.1f}% of kernel time) run {src}, and no "
            f"costed op covers them (no shapes recorded, or launched outside any op): {named(tops)}.{why} "
            f"{PEAK_LABEL.get(key, key)} on {dev} offer {new:g} TFLOP/s ({new / old:.1f}x). Fix: {how}, if the model "
            f"tolerates the precision. Estimate (kernel names carry no FLOPs): each GEMM / convolution kernel taken as "
            f"compute-bound, keeping its work at {frac}: x ({old:g} x {f_old:.2f}) / ({new:g} x {f_new:.2f}) = "
            f"x {ratio:.3f}{mem_part}; no kernel below the {floor:g} µs per-kernel floor: {u.us(t)} -> "
            f"{u.us(after)}, saving {u.us(saving)}. "
            + (f"Were they all memory-bound (small batches), the {key[:4]} operands would only halve their bytes: "
               f"{u.us(low)}. " if by_bytes < 1 and low < saving else
               "Were they memory-bound (small batches), TF32 would gain nothing: fp32 stays in memory. "
               if key == "tf32_tc" else
               "Were they memory-bound (small batches), fp16 would gain nothing: it moves as many bytes. "
               if what == "bf16 cuda" else "")
            + "Record with record_shapes=True to cost each op.")
    return {"kind": "tensor_core_dtype",
            "title": f"{u.us(t)} of {_LABEL[what]} GEMM / convolution kernels could run on "
            f"{key[:4]} tensor cores ({new / old:.1f}x the roof)",
            "text": text, "fix": fix, "ops": op_ids(view, rows, sel), "saving_us": saving, "estimated": True,
            "confidence": "low", "saving_if_memory_bound_us": low, "achievable_fraction": f_new,
            "source_term": source_term(view, rows, sel, t)}


def _fp8_lever(trace: Trace, view: KernelView, rows: list[dict], device: dict, context: dict, total_us: float,
               sel: np.ndarray) -> dict | None:
    peaks = device.get("peak_tflops") or {}
    t = float(trace.gpu.dur[sel].sum())
    dts = {view.records[i].a for i in distinct(view.rec[sel]).tolist()}
    old = min(peaks.get(f"{d}_tc", 0.0) or 0.0 for d in dts) if dts else 0.0
    new = peaks.get("fp8_tc", 0.0)
    if t < 0.1 * total_us or not old or new <= 1.2 * old:  # fp8 is a recipe change: only for GEMM-heavy runs
        return None
    d = trace.gpu.dur[sel]
    floor = float(device.get("launch_floor_us") or 0.0)
    after = float(np.maximum(d * old / new, np.minimum(d, floor)).sum())  # a tiny GEMM stays at the floor
    saving = t - after
    dev = device.get("name") or device.get("key") or "this device"
    how = ("a serving engine's fp8 quantization (vLLM / SGLang --quantization fp8, an fp8 checkpoint) or torchao "
           "float8 weights and activations" if context.get("mode") != "training" else
           "fp8 training recipes (Transformer Engine, torchao float8 training)")
    tops = top_names(trace, view, sel)
    text = (f"{u.us(t)} of GEMM kernels ({t / total_us * 100:.1f}% of kernel time) run {'/'.join(sorted(dts))} on "
            f"tensor cores and no costed op covers them: {named(tops)}. {dev}'s fp8 tensor cores offer {new:g} "
            f"TFLOP/s, {new / old:.1f}x its {old:g}; fp8 weights also halve the bytes a memory-bound (small-batch) "
            "GEMM "
            f"reads. Try {how}, checking accuracy. Estimate: each kernel at the same fraction of the fp8 roof, x "
            f"{old:g} / {new:g} (compute-bound: the peaks' ratio; memory-bound on its weights: their bytes halve), "
            f"never below the {floor:g} µs per-kernel floor: {u.us(t)} -> {u.us(after)}, saving {u.us(saving)} (from "
            "kernel names: record with record_shapes=True to see which GEMMs are compute- or memory-bound).")
    return {"kind": "tensor_core_dtype", "group": "fp8", "title": f"{u.us(t)} of {'/'.join(sorted(dts))} GEMM "
            f"kernels could run in fp8 ({new / old:.1f}x the roof)", "text": text,
            "fix": "Quantize the GEMMs to fp8 (weights and activations), checking accuracy.",
            "ops": op_ids(view, rows, sel), "saving_us": saving, "estimated": True, "confidence": "low",
            "source_term": source_term(view, rows, sel, t)}
