"""Unfused attention's saving and finding: what a fused attention kernel would take for a chain that
diagnose/attention.py found, and the finding that says so, with the arithmetic.

Saving = measured time of the chain's ops - the fused kernel's time, per repetition, where
fused = max(bytes / DRAM bandwidth, FLOPs / (fraction x peak), the device's launch floor):
  forward   FLOPs 2*BH*Sq*Sk*(D + Dv) (= 4*B*H*Sq*Sk*D), bytes Q, K, V, O once (+ each mask / bias
            operand of the steps once);
  backward  FLOPs 2*BH*Sq*Sk*(3*D + 2*Dv) (2.5x: recompute S, dP, dV, dQ, dK), bytes Q, K, V, O, dO
            read and dQ, dK, dV written once, plus the fp32 log-sum-exp;
  peak      the chain's GEMMs' own roof (their dtype's: the tensor-core peak for bf16 / fp16);
  fraction  what the trace's own fused attention ops reach of their peak (time-weighted, those not
            latency-bound), else DEFAULT_FRACTION.
"""

from __future__ import annotations

from math import prod

from traceana import units as u
from traceana.diagnose.dataflow import short

# FlashAttention-2 reaches 50-73% of an A100's peak in the forward pass (Dao, "FlashAttention-2", 2023, sec. 4):
# its low end stands for a fused kernel when the trace has none to measure
DEFAULT_FRACTION = 0.5
_EXTRA = {True: "the attention backward's other GEMMs, which the fused backward kernel also does",
          False: ("the contiguous copies of Q / K^T / V the batched GEMMs need and a fused kernel does not (it "
                  "reads the strided views)")}
FIX = ('Call torch.nn.functional.scaled_dot_product_attention instead of the explicit matmul -> softmax -> '
       'matmul (in a Hugging Face transformers model: attn_implementation="sdpa").')


def fused_time(g: dict, rows: list[dict], dram_gbps: float | None, fraction: float, fraction_src: str) -> dict:
    """The fused kernel's FLOPs, bytes and time per repetition, with the arithmetic as text."""
    bh, sq, sk, d, dv, isz = g["bh"], g["sq"], g["sk"], g["d"], g["dv"], g["itemsize"]
    if g["backward"]:
        flops = 2 * bh * sq * sk * (3 * d + 2 * dv)
        fl_expr = f"2*BH*Sq*Sk*(3D + 2Dv) = 2*{bh}*{sq}*{sk}*(3*{d} + 2*{dv})"
        elems = 2 * (bh * sq * d + bh * sk * d + bh * sk * dv) + 2 * bh * sq * dv  # Q K V dQ dK dV, O dO
        by = elems * isz + bh * sq * 4 + g["mask_bytes"]
        by_expr = (f"(Q, K, V, O, dO read, dQ, dK, dV written: 2*{bh}*({sq}*{d} + {sk}*{d} + {sk}*{dv}) + "
                   f"2*{bh}*{sq}*{dv} elements)*{isz:g} B + log-sum-exp {bh}*{sq}*4 B")
    else:
        flops = 2 * bh * sq * sk * (d + dv)
        fl_expr = (f"4*BH*Sq*Sk*D = 4*{bh}*{sq}*{sk}*{d}" if d == dv else
                   f"2*BH*Sq*Sk*(D + Dv) = 2*{bh}*{sq}*{sk}*({d} + {dv})")
        elems = bh * (sq * d + sk * d + sk * dv + sq * dv)
        by = elems * isz + g["mask_bytes"]
        by_expr = f"(Q + K + V + O: {bh}*({sq}*{d} + {sk}*{d} + {sk}*{dv} + {sq}*{dv}) elements)*{isz:g} B"
    if g["mask_bytes"]:
        by_expr += f" + masks / biases {u.nbytes(g['mask_bytes'])}"
    grow = rows[g["gemm_row"]]
    peak = grow.get("peak_tflops") or 0.0
    floor = grow.get("launch_floor_us") or 0.0
    t_math = flops / (fraction * peak * 1e6) if peak > 0 else 0.0
    t_mem = by / (dram_gbps * 1e3) if dram_gbps else 0.0
    t = max(t_math, t_mem, floor)
    expr = (f"FLOPs {fl_expr} = {flops:,} at {fraction:.0%} of {peak:g} TFLOP/s ({fraction_src}) = "
            f"{u.us(t_math)}; bytes {by_expr} = {int(by):,} B at {dram_gbps or 0:g} GB/s = {u.us(t_mem)}"
            + (f"; launch floor {u.us(floor)}" if floor else "") + f": {u.us(t)} per repetition")
    return {"fused_flops": flops, "fused_bytes": by, "fused_us": t, "fused_expr": expr}


def fraction_of_peak(rows: list[dict]) -> tuple[float, str]:
    """What the trace's own fused attention ops reach of their peak (time-weighted), else the default."""
    done = [r for r in rows if r.get("family") == "attention" and r.get("flops") and r.get("peak_tflops")
            and r.get("device_time_us") and r.get("bound") not in ("latency", None) and not r.get("opaque")]
    if not done:
        return DEFAULT_FRACTION, ("FlashAttention-2's low end: it reaches 50-73% of an A100's peak; this trace has "
                                  "no fused attention to measure")
    flops = sum(r["flops"] * r["count"] for r in done)
    cap = sum(r["device_time_us"] * r["peak_tflops"] * 1e6 for r in done)
    return min(flops / cap, 1.0), f"what this trace's own fused attention ops reach ({len(done)} signature(s))"


def dram_gbps(rows: list[dict], device: dict | None) -> float | None:
    """The device's DRAM bandwidth: from the device, else from a DRAM-bound row's roof (bytes / memory time)."""
    if device and device.get("dram_gbps"):
        return float(device["dram_gbps"])
    got = sorted(r["bytes"] / r["memory_time_us"] / 1e3 for r in rows
                 if r.get("roof_kind") == "dram" and r.get("bytes") and r.get("memory_time_us"))
    return got[len(got) // 2] if got else None


def cost(groups: list[dict], rows: list[dict], device: dict | None) -> list[dict]:
    """Each group's saving: its measured time - count x the fused kernel's time."""
    frac, src = fraction_of_peak(rows)
    bw = dram_gbps(rows, device)
    for g in groups:
        g.update(fused_time(g, rows, bw, frac, src))
        g["saving_us"] = max(g["time_us"] - g["count"] * g["fused_us"], 0.0)
        g["names"] = [rows[k]["name"] for k in g["chain"]]
        g["ids"] = [rows[k]["id"] for k in g["rows"]]
        g["all_names"] = [rows[k]["name"] for k in g["rows"]]
        g["attention"] = True
        g["fix"] = FIX
    return groups


def finding(g: dict) -> dict:
    """The finding for one group of unfused attention chains."""
    chain = " → ".join(short(n) for n in g["names"])
    extra = [short(n) for k, n in zip(g["rows"], g["all_names"]) if k not in g["chain"]]
    s = g["scores"]
    what = "backward" if g["backward"] else "forward"
    text = (f"Attention computed op by op ({what}): {chain}, {g['count']:,} time(s), each op reading the tensor the "
            f"one before wrote. Every step writes and re-reads a full score-sized tensor "
            f"[{', '.join(map(str, s))}] ({u.nbytes(prod(s) * g['itemsize'])}) through DRAM"
            + (f"; with it run {', '.join(extra)}, " + _EXTRA[g["backward"]] if extra else "")
            + f". Measured {u.us(g['time_us'])}. A fused attention kernel keeps the scores on chip: "
            f"{g['fused_expr']}; x {g['count']:,} = {u.us(g['count'] * g['fused_us'])}. "
            f"Saving {u.us(g['time_us'])} - {u.us(g['count'] * g['fused_us'])} = {u.us(g['saving_us'])}. "
            f"Fix: {FIX}")
    return {"kind": "fusion", "group": "attention",
            "title": f"Unfused attention ({what}, {chain}): use scaled_dot_product_attention, saves "
                     f"{u.us(g['saving_us'])}",
            "text": text, "ops": list(dict.fromkeys(g["ids"])), "saving_us": g["saving_us"], "fix": FIX}
