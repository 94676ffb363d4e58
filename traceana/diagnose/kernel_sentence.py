"""One sentence of what the kernels were, from kernel names: time by class with each class's dominant
dtype, tensor-core use and library; a dominating kernel launched outside any op first (outside_kernels.py).
"""

from __future__ import annotations

from traceana import units as u
from traceana.diagnose.outside_kernels import dominant_outside, outside_facts
from traceana.link.kernel_account import KernelView
from traceana.link.kernel_names import MATRIX
from traceana.load.model import Trace


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
        x = outside_facts(trace, view, rows, r, device)
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
