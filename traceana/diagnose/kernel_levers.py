"""Levers from kernel names alone, for the device time no costed op speaks for (no shapes recorded,
kernels launched outside any op, graph replays, ops with no formula): traceana/link/kernel_account.py's
view of every GPU event (class, dtypes, library, tensor-core use from the kernel-name grammar).

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
  fusion              runs of ATen element-wise / reduction / norm / copy kernels back to back on one stream
                      (each run: the kernels between two kernels of any other kind): torch.compile fuses such
                      chains; saving = each run's time but its longest kernel's (a fused kernel still does the
                      largest one's traffic). A compiled run is told its ATen kernels run outside its compiled
                      graphs (graph breaks), not to use torch.compile.
  attention           a softmax kernel between two GEMM kernels on its stream, with only element-wise steps
                      (scale, mask, dropout, casts) between: attention written out op by op; saving = the
                      softmax and the steps (a fused kernel keeps the scores on chip; the two GEMMs' work stays).
  outside_op_kernel   the largest kernel launched outside any profiled op, when it dominates (a note: what the
                      kernel is, its launch site and grid, and the library kernel of its class to compare it
                      with); the kernel sentence names it first.
All are estimates from names (confidence low, estimated): the report asks for record_shapes=True to cost them.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.arrays import median
from traceana.diagnose.ledger import WORK
from traceana.link.kernel_account import KernelView
from traceana.link.kernel_names import CLASSES, MATRIX, KernelName
from traceana.load.model import Trace
from traceana.roofline import achievable as achv
from traceana.roofline.judge import PEAK_LABEL

MIN_SHARE = 0.01  # a lever from kernel names needs 1% of the kernel time
DOMINANT = 0.3  # an outside-op kernel with this share of device time is named first
#: achievable fractions of a roof: CUDA-core SGEMM / cuDNN fp32 kernels reach about 90% of the fp32 peak on
#: large problems; tensor-core GEMMs about 70% of theirs (vendor libraries reach 70-85% on large shapes): the
#: fp8 lever's and the fallback's; the dtype lever's new roof takes the architecture's (roofline/achievable.py)
F_CUDA_CORES, F_TENSOR_CORES = 0.9, 0.7
#: time after / time before of a memory-bound kernel whose operands move to the target dtype
BYTES = {"tf32_tc": 1.0, "bf16_tc": 0.5, "fp16_tc": 0.5}
WINDOW = 6  # kernels searched on either side of a softmax for its GEMMs
_FUSABLE = frozenset(CLASSES.index(c) for c in ("elementwise", "reduction", "normalization", "copy"))
_STEPS = frozenset(CLASSES.index(c) for c in ("elementwise", "copy"))
_GEMM = CLASSES.index("gemm")
_LABEL = {"fp32": "fp32", "tf32": "tf32", "fp32 matrix": "fp32 (matrix-core)", "bf16 cuda": "bf16 (CUDA-core)"}
_LOW = frozenset({"fp8", "fp6", "fp4", "int8", "uint8", "int4"})  # quantized GEMM operands
_COMPARE = {
    "gemm": "torch.matmul on the same shapes (cuBLAS / cuBLASLt, hipBLASLt on AMD)",
    "convolution": "torch.nn.functional.conv2d on the same shapes (cuDNN, MIOpen on AMD)",
    "attention": "torch.nn.functional.scaled_dot_product_attention on the same shapes (flash / memory-efficient)",
    "normalization": "torch's own norm (F.layer_norm / F.rms_norm) or its torch.compile'd kernel",
    "elementwise": "the same math under torch.compile (one fused Triton kernel)",
    "reduction": "the same reduction under torch.compile, or torch's own",
    "copy": "a plain tensor copy (copy_ / contiguous) of the same size, held to DRAM bandwidth",
}


def kernel_findings(trace: Trace, view: KernelView, rows: list[dict], device: dict, context: dict | None,
                    total_us: float) -> list[dict]:
    """Every lever and note from the kernel account (see the module doc)."""
    if total_us <= 0 or not len(view.rec):
        return []
    context = context or {}
    out = dtype_findings(trace, view, rows, device, context, total_us)
    order = _stream_order(trace)
    chains, in_chain = _attention_chains(trace, view, order)
    f = _attention_finding(trace, view, rows, chains, total_us) if chains else None
    if f:
        out.append(f)
    f = _fusion_finding(trace, view, rows, order, in_chain, context, total_us)
    if f:
        out.append(f)
    f = _outside_op_finding(trace, view, rows, total_us, device)
    if f:
        out.append(f)
    return out


def _ids(view: KernelView, rows: list[dict], sel: np.ndarray) -> list[str]:
    """The ids of the rows the selected events belong to, largest share first (at most 50)."""
    r = view.row[sel]
    r = r[r >= 0]
    if not len(r):
        return []
    t = np.bincount(r, minlength=len(rows))
    return [rows[i]["id"] for i in np.argsort(-t, kind="stable")[:50].tolist() if t[i] > 0]


def _source(view: KernelView, rows: list[dict], sel: np.ndarray, us: float) -> dict:
    """The ledger terms the selected events' time sits in (their rows' bounds, every row, not the 50 listed in
    `ops`; an event of no op is unmodelled work) and what the lever may claim: those events' own time."""
    r = np.unique(view.row[sel])
    names = []
    for i in r.tolist():
        b = rows[i].get("bound") if i >= 0 else "unmodelled"
        names.append(f"kernels.{b}" if b in WORK else "kernels.unmodelled")
    return {"term": " + ".join(dict.fromkeys(names)) or "kernels.unmodelled", "us": us}


def _top_names(trace: Trace, view: KernelView, sel: np.ndarray, n: int = 3) -> list[tuple[str, float, KernelName]]:
    """The n largest kernel names among the selected events: (readable name, µs, record)."""
    if not sel.any():
        return []
    t = np.bincount(view.rec[sel], weights=trace.gpu.dur[sel], minlength=len(view.records))
    top = [i for i in np.argsort(-t, kind="stable")[:n].tolist() if t[i] > 0]
    labels = u.kernel_names([trace.names[int(view.codes[i])] for i in top], 70)
    return [(labels[j], float(t[i]), view.records[i]) for j, i in enumerate(top)]


def _named(tops: list[tuple[str, float, KernelName]]) -> str:
    return "; ".join(f"{name} ({', '.join(x for x in (k.op, k.a, k.library) if x)}) {u.us(t)}" for name, t, k in tops)


# ----------------------------------------------------------------------------- dtypes


def dtype_findings(trace: Trace, view: KernelView, rows: list[dict], device: dict, context: dict,
                   total_us: float) -> list[dict]:
    peaks = device.get("peak_tflops") or {}
    rec = view.records
    dur = trace.gpu.dur
    gemm_conv = np.isin(view.cls, [_GEMM, CLASSES.index("convolution")])
    a = np.array([k.a or "" for k in rec], dtype=object)[view.rec]
    tc = np.array([k.tensor_cores is True for k in rec], dtype=bool)[view.rec]
    cuda = np.array([k.tensor_cores is False for k in rec], dtype=bool)[view.rec]
    tf32 = np.array([k.tf32 for k in rec], dtype=bool)[view.rec]
    gemm = view.cls == _GEMM
    tf32_on = bool((gemm & tf32).any())  # the matmul TF32 flag is on: the trace's GEMM kernels run TF32
    b = np.array([k.b or "" for k in rec], dtype=object)[view.rec]
    low = np.isin(a, list(_LOW)) | np.isin(b, list(_LOW))
    fp8_on = bool((gemm & low).any())  # the run already quantizes GEMMs (fp8 / fp4 / int8 operands)
    out = []
    shown = achv.shown_by_trace(rows, total_us)  # the most of a roof this trace's costed ops reach
    # the run already multiplies in 16 bits (autocast, or a half-precision model): its fp32 GEMMs ran outside that
    half_mm = gemm_conv & tc & np.isin(a, ["bf16", "fp16"])
    mm_us = float(dur[gemm_conv].sum())
    half = sorted({str(x) for x in a[half_mm]}) if mm_us > 0 and dur[half_mm].sum() >= 0.1 * mm_us else []
    lever = dict(trace=trace, view=view, rows=rows, device=device, context=context, total_us=total_us, shown=shown,
                 half=half)
    simt = view.uncovered & gemm_conv & cuda & (a == "fp32")
    f = _dtype_lever(sel=simt, what="fp32", old_key="fp32", tf32_on=tf32_on, **lever)
    out += [f] if f else []
    on_tf32 = view.uncovered & gemm_conv & tf32
    f = _dtype_lever(sel=on_tf32, what="tf32", old_key="tf32_tc", tf32_on=True, **lever)
    out += [f] if f else []
    # fp32 multiplied as fp32 on matrix cores (AMD's fp32 MFMA): the 16-bit types run several times faster
    mfma = view.uncovered & gemm_conv & tc & ~tf32 & (a == "fp32")
    f = _dtype_lever(sel=mfma, what="fp32 matrix", old_key="fp32", tf32_on=True, **lever)
    out += [f] if f else []
    # bf16 on a GPU without bf16 tensor cores (Volta, Turing): its matmuls run on CUDA cores; fp16 has them
    if not peaks.get("bf16_tc") and peaks.get("fp16_tc"):
        slow = view.uncovered & gemm_conv & ~tc & (a == "bf16")
        f = _dtype_lever(sel=slow, what="bf16 cuda", old_key="fp32", tf32_on=True, **lever)
        out += [f] if f else []
    half = view.uncovered & gemm & tc & np.isin(a, ["bf16", "fp16"])
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
    tops = _top_names(trace, view, sel)
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
            f"costed op covers them (no shapes recorded, or launched outside any op): {_named(tops)}.{why} "
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
            f"{key[:4]} tensor cores ({new / old:.1f}x the roof): saves about {u.us(saving)}",
            "text": text, "fix": fix, "ops": _ids(view, rows, sel), "saving_us": saving, "estimated": True,
            "confidence": "low", "saving_if_memory_bound_us": low, "achievable_fraction": f_new,
            "source_term": _source(view, rows, sel, t)}


def _fp8_lever(trace: Trace, view: KernelView, rows: list[dict], device: dict, context: dict, total_us: float,
               sel: np.ndarray) -> dict | None:
    peaks = device.get("peak_tflops") or {}
    t = float(trace.gpu.dur[sel].sum())
    dts = {view.records[i].a for i in np.unique(view.rec[sel]).tolist()}
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
    tops = _top_names(trace, view, sel)
    text = (f"{u.us(t)} of GEMM kernels ({t / total_us * 100:.1f}% of kernel time) run {'/'.join(sorted(dts))} on "
            f"tensor cores and no costed op covers them: {_named(tops)}. {dev}'s fp8 tensor cores offer {new:g} "
            f"TFLOP/s, {new / old:.1f}x its {old:g}; fp8 weights also halve the bytes a memory-bound (small-batch) "
            "GEMM "
            f"reads. Try {how}, checking accuracy. Estimate: each kernel at the same fraction of the fp8 roof, x "
            f"{old:g} / {new:g} (compute-bound: the peaks' ratio; memory-bound on its weights: their bytes halve), "
            f"never below the {floor:g} µs per-kernel floor: {u.us(t)} -> {u.us(after)}, saving {u.us(saving)} (from "
            "kernel names: record with record_shapes=True to see which GEMMs are compute- or memory-bound).")
    return {"kind": "tensor_core_dtype", "group": "fp8", "title": f"{u.us(t)} of {'/'.join(sorted(dts))} GEMM "
            f"kernels could run in fp8 ({new / old:.1f}x the roof): saves about {u.us(saving)}", "text": text,
            "fix": "Quantize the GEMMs to fp8 (weights and activations), checking accuracy.",
            "ops": _ids(view, rows, sel), "saving_us": saving, "estimated": True, "confidence": "low",
            "source_term": _source(view, rows, sel, t)}


# ----------------------------------------------------------------------------- fusion and attention


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
    tops = _top_names(trace, view, soft)
    fix = ("Call torch.nn.functional.scaled_dot_product_attention (transformers: attn_implementation='sdpa', or "
           "'flash_attention_2') instead of matmul -> softmax -> matmul.")
    text = (f"{u.plural(len(chains), 'softmax kernel')} run between two GEMM kernels on their stream with only "
            f"element-wise steps between: attention computed op by op, writing the score matrix and its softmax to "
            f"DRAM and reading them back. The softmax and the steps take {u.us(t)} ({t / total_us * 100:.1f}% of "
            f"kernel time): {_named(tops)}. A fused attention kernel keeps the scores on chip; the two GEMMs' work "
            f"stays. Fix: {fix} Saving shown: the softmax and step kernels' time, {u.us(t)} (from kernel names: "
            "record with record_shapes=True for the fused kernel's own estimate).")
    return {"kind": "fusion", "group": "attention", "pattern": "Attention (from kernel names) written out",
            "title": f"Attention runs as GEMM → softmax → GEMM kernels ({len(chains):,} times): "
                     f"scaled_dot_product_attention saves about {u.us(t)}",
            "text": text, "fix": fix, "ops": _ids(view, rows, sel), "saving_us": t, "estimated": True,
            "confidence": "low", "source_term": _source(view, rows, sel, t)}


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
    tops = _top_names(trace, view, sel, 5)
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
            f"{_named(tops)}. The largest chain, {u.plural(int(size[big]), 'kernel')} for {u.us(float(tot[big]))}: "
            f"{chain}. Each kernel reads its inputs from DRAM and writes its output back; fused, a chain reads "
            f"and writes once. {fix} Estimate: each chain's time but its longest kernel's, {u.us(t)} - "
            f"{u.us(t - saving)} = {u.us(saving)} (from kernel names: record with record_shapes=True for the bytes "
            "each fusion saves).")
    return {"kind": "fusion", "group": "fusion", "title": f"{kernels:,} element-wise / reduction kernels in "
            f"{u.plural(n, 'chain')} could be fused: saves about {u.us(saving)}", "text": text, "fix": fix,
            "ops": _ids(view, rows, sel), "saving_us": saving, "estimated": True, "confidence": "low",
            "source_term": _source(view, rows, sel, t)}


# ----------------------------------------------------------------------------- kernels outside ops


def dominant_outside(rows: list[dict], total_us: float) -> dict | None:
    """The largest row of kernels launched outside any op, when it holds DOMINANT of the device time. Collectives
    and copies are not among them: the communication and copy levers speak for those."""
    out = [r for r in rows if r.get("cause") == "outside_op" and r.get("bound") != "communication"
           and r.get("kernel_class") not in ("communication", "memcpy/memset")]
    if not out or total_us <= 0:
        return None
    top = max(out, key=lambda r: r["device_time_us"])
    return top if top["device_time_us"] >= DOMINANT * total_us else None


def _outside_facts(trace: Trace | None, view: KernelView, rows: list[dict], r: dict,
                   device: dict | None = None) -> dict:
    """What the name and the launches say of an outside-op row: what it is, its grid (the median launch's
    thread blocks, and against the device's SMs), its launch site and the library kernel to compare it with."""
    from traceana.link.kernel_names import parse

    k = parse(r["name"])
    grid = r.get("grid_blocks")
    blocks = trace.gpu.blocks if trace is not None else None
    if grid is None and blocks is not None:  # the grid its launches ran (the median one)
        b = blocks[view.row == rows.index(r)]
        b = b[np.isfinite(b)]
        grid = median(b) if len(b) else None
    cores = "tensor cores" if k.tensor_cores else "CUDA cores" if k.tensor_cores is False else None
    what = ", ".join(x for x in (k.cls if k.cls != "other" else None, k.op, k.a,
                                 k.library if k.library != "custom" else None, cores) if x)
    sms = (device or {}).get("sms")
    grid_txt = ""
    if grid:
        grid_txt = f"grid of {grid:,.0f} blocks"
        if sms and grid < sms:
            grid_txt += f" for {sms} SMs: {sms - grid:,.0f} SMs get no block"
        elif sms:
            grid_txt += f" ({grid / sms:.1f} per SM of {sms})"
    return {"k": k, "what": what, "grid": grid, "grid_txt": grid_txt, "site": r.get("launch_site"),
            "compare": _COMPARE.get(k.cls)}


def _outside_op_finding(trace: Trace, view: KernelView, rows: list[dict], total_us: float,
                        device: dict | None = None) -> dict | None:
    r = dominant_outside(rows, total_us)
    if r is None:
        return None
    x = _outside_facts(trace, view, rows, r, device)
    k, site, compare = x["k"], x["site"], x["compare"]
    text = (f"{u.kernel_name(r['name'], 80)}" + (f" ({x['what']})" if x["what"] else "")
            + f" takes {u.us(r['device_time_us'])}, {r['device_time_us'] / total_us * 100:.1f}% of device time, in "
            f"{u.plural(r['count'], 'launch', 'launches')} made outside any profiled op"
            + (f", from {site}" if site else " (no Python frame recorded: profile with with_stack=True to see where)")
            + (f"; {x['grid_txt']}" if x["grid_txt"] else "") + ". With no op around it the trace records no shapes, "
            "so nothing costs it."
            + (f" Compare it with {compare}: time both with torch.utils.benchmark." if compare else "")
            + " Register it as a custom op (torch.library.custom_op) so the profiler records its inputs' shapes.")
    return {"kind": "outside_op_kernel", "title": f"{u.kernel_name(r['name'], 60)}"
            + (f" ({k.cls})" if k.cls != "other" else "") + " launched outside any op "
            f"takes {r['device_time_us'] / total_us * 100:.0f}% of device time: nothing costs it",
            "text": text,
            "fix": ("Time it against " + (compare.split(" (")[0] if compare else
                                          "the library kernel of its class on the same shapes")
                    + "; register it as a custom op to record its shapes."),
            "ops": [r["id"]], "saving_us": 0.0, "confidence": "low", "estimated": True,
            # a note the plan lists by the time it holds (diagnose/projection.py): no lever says more about it
            "holds_us": float(r["device_time_us"])}


# ----------------------------------------------------------------------------- the sentence


def sentence(view: KernelView, rows: list[dict], trace: Trace | None = None, device: dict | None = None) -> str:
    """One sentence of what the kernels were, by class with their dominant dtype, tensor-core use and
    library; a dominating kernel launched outside any op first (what it is, its launch site and grid, what to
    compare it with)."""
    acc = view.account
    total = acc.get("total_us") or 0.0
    if total <= 0:
        return ""
    head = ""
    r = dominant_outside(rows, total)
    if r is not None:
        x = _outside_facts(trace, view, rows, r, device)
        where = "; ".join(b for b in ((f"from {x['site']}" if x["site"] else ""), x["grid_txt"]) if b)
        head = (f"{u.kernel_name(r['name'], 50)}" + (f" ({x['what']})" if x["what"] else "")
                + f", launched outside any op, takes {r['device_time_us'] / total * 100:.0f}% of device time"
                + (f" ({where})" if where else "") + ". ")
    parts = []
    for cls, t in list(acc["by_class"].items())[:4]:
        if t < 0.03 * total:
            break
        best = next((x for x in acc["rows"] if x["class"] == cls), None)
        bits = []
        if best is not None:
            mostly = "" if best["time_us"] >= 0.8 * t else "mostly "
            if best["dtype"] != "?" and cls != "communication":
                bits.append(mostly + best["dtype"])
            if cls in MATRIX and best["tensor_cores"] is not None:
                bits.append("CUDA cores" if not best["tensor_cores"] else
                            f"{best['math'].upper()} tensor cores" if best.get("math") in ("tf32", "xf32") else
                            "tensor cores")
            if best["library"] not in ("custom", "CUDA/HIP runtime"):
                bits.append(best["library"])
        parts.append(f"{t / total * 100:.0f}% {cls}" + (f" ({', '.join(bits)})" if bits else ""))
    mat = acc.get("matrix_us") or 0.0
    unknown = acc.get("tensor_core_unknown_us") or 0.0
    tail = ""
    if mat >= 0.05 * total:
        tail = f"; {acc['tensor_core_us'] / mat * 100:.0f}% of the matrix-kernel time on tensor cores"
        if unknown >= 0.05 * mat:  # a custom / Triton kernel's name does not say: not counted as CUDA cores
            tail += f", {unknown / mat * 100:.0f}% in kernels whose names do not say"
    return head + "Kernel time by kernel name: " + ", ".join(parts) + tail + "."
