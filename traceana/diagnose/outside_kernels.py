"""The kernel launched outside any profiled op that dominates the device time (kernel_levers.py):

  outside_op_kernel   the largest kernel launched outside any profiled op, when it dominates (a note: what the
                      kernel is, its launch site and grid, and the library kernel of its class to compare it
                      with); the kernel sentence names it first (kernel_sentence.py).
All are estimates from names (confidence low, estimated): the report asks for record_shapes=True to cost them.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.arrays import median
from traceana.link.kernel_account import KernelView
from traceana.load.model import Trace

DOMINANT = 0.3  # an outside-op kernel with this share of device time is named first
_COMPARE = {
    "gemm": "torch.matmul on the same shapes (cuBLAS / cuBLASLt, hipBLASLt on AMD)",
    "convolution": "torch.nn.functional.conv2d on the same shapes (cuDNN, MIOpen on AMD)",
    "attention": "torch.nn.functional.scaled_dot_product_attention on the same shapes (flash / memory-efficient)",
    "normalization": "torch's own norm (F.layer_norm / F.rms_norm) or its torch.compile'd kernel",
    "elementwise": "the same math under torch.compile (one fused Triton kernel)",
    "reduction": "the same reduction under torch.compile, or torch's own",
    "copy": "a plain tensor copy (copy_ / contiguous) of the same size, held to DRAM bandwidth",
}


def dominant_outside(rows: list[dict], total_us: float) -> dict | None:
    """The largest row of kernels launched outside any op, when it holds DOMINANT of the device time. Collectives
    and copies are not among them: the communication and copy levers speak for those."""
    out = [r for r in rows if r.get("cause") == "outside_op" and r.get("bound") != "communication"
           and r.get("kernel_class") not in ("communication", "memcpy/memset")]
    if not out or total_us <= 0:
        return None
    top = max(out, key=lambda r: r["device_time_us"])
    return top if top["device_time_us"] >= DOMINANT * total_us else None


def outside_facts(trace: Trace | None, view: KernelView, rows: list[dict], r: dict,
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


def outside_op_finding(trace: Trace, view: KernelView, rows: list[dict], total_us: float,
                        device: dict | None = None) -> dict | None:
    r = dominant_outside(rows, total_us)
    if r is None:
        return None
    x = outside_facts(trace, view, rows, r, device)
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
