"""Layout conversions around convolutions: NCHW tensors fed to NHWC convolution kernels.

PyTorch's default memory format for 4-D tensors is NCHW (contiguous). The fastest convolution
kernels (tensor-core implicit GEMMs of cuDNN / CUTLASS, MIOpen's NHWC implicit-GEMM and composable-
kernel solvers) read and write NHWC. Handed NCHW tensors, the library converts them itself, inside
the convolution call: it transposes the input (and the filter) to NHWC, runs the NHWC kernel, and
transposes the output back. Those conversion kernels move every byte of each tensor twice and do no
arithmetic; with the model and its inputs in channels_last (NHWC in memory) the library reads them
as they are and the conversions disappear.

The conversion kernels, by library (names as the libraries and the shared traces write them):
  cuDNN   `nchwToNhwcKernel<...>` / `nhwcToNchwKernel<...>` (cuDNN 7-8 at the top level, cuDNN 9 as
          `cudnn::engines_precompiled::nchwToNhwcKernel`)
  MIOpen  `batched_transpose_<tile>_<type>` (its TransposeSolutionDefault2Nhwc / Nhwc2Default, run by
          the NHWC implicit-GEMM and CK solvers around their kernel). MIOpen's `transpose_NCHW2CNHW` /
          `transpose_CNHW2NCHW` (its GEMM 1x1 stride-2 path) are a different layout and are not counted.
A conversion counts when the op that launched it is a convolution (forward or backward, any library
op name: cudnn_convolution, miopen_convolution, convolution_backward, ...); when the trace links it to
no op (launched before the profiled window, or outside any op), when the nearest other kernel on its
stream, before or after it, is a convolution kernel (kernel_classes), as the library runs them.
"""

from __future__ import annotations

import re

import numpy as np

from traceana import units as u
from traceana.arrays import distinct
from traceana.link.kernel_classes import classify
from traceana.link.kernel_names import HEAD
from traceana.link.attribute import Links
from traceana.load.model import Trace

MIN_SHARE = 0.005  # the conversions are named from 0.5% of device time
CONVERSION = re.compile(r"nchwToNhwc|nhwcToNchw|(?:^|\W)batched_transpose_")
#: a name CONVERSION finds holds one of these: tested first (a substring test runs at memory speed, the
#: search's (?:^|\W) alternative tries every position: ~60 us over a 700-character kernel name)
_CONVERSION_WORDS = ("nchwToNhwc", "nhwcToNchw", "batched_transpose_")
_CONV_OP = re.compile(r"convolution|(?:^|::)conv(?:\d+d|_transpose\d+d|_tbc)?$")
_NHWC_KERNEL = re.compile(r"nhwc", re.I)
FIX = ("Run the model and its inputs in channels_last: model.to(memory_format=torch.channels_last) and "
       "x.to(memory_format=torch.channels_last).")


def _by_code(names: list[str], codes: np.ndarray, test) -> np.ndarray:
    """Boolean per name code (only the codes used are tested, each on its head: what a name says is there)."""
    out = np.zeros(len(names), dtype=bool)
    for c in distinct(codes).tolist():
        out[c] = bool(test(names[c][:HEAD]))
    return out


def _is_conversion(head: str) -> bool:
    return any(w in head for w in _CONVERSION_WORDS) and CONVERSION.search(head) is not None


def conversions(trace: Trace, links: Links) -> np.ndarray:
    """Indices of the GPU events that are NCHW<->NHWC conversions of a convolution (see the module doc)."""
    gpu, names = trace.gpu, trace.names
    kern = np.flatnonzero(gpu.kind == 0)
    if not len(kern):
        return kern
    is_conv_name = _by_code(names, gpu.name[kern], _is_conversion)
    cand = kern[is_conv_name[gpu.name[kern]]]
    if not len(cand):
        return cand
    op = links.gpu_op[cand]
    linked = op >= 0
    conv_op = _by_code(names, trace.ops.name[op[linked]], lambda n: _CONV_OP.search(n.split("::")[-1]))
    keep = np.zeros(len(cand), dtype=bool)
    keep[linked] = conv_op[trace.ops.name[op[linked]]]
    if (~linked).any():
        keep[~linked] = _next_to_convolution(trace, kern, is_conv_name, cand[~linked])
    return cand[keep]


def _next_to_convolution(trace: Trace, kern: np.ndarray, is_conversion: np.ndarray, events: np.ndarray) -> np.ndarray:
    """Per event: is the nearest non-conversion kernel on its stream (before or after) a convolution kernel."""
    gpu, names = trace.gpu, trace.names
    order = kern[np.lexsort((gpu.ts[kern], gpu.stream[kern], gpu.device[kern]))]
    lane = gpu.device[order] * (1 << 32) + gpu.stream[order]
    conv_kernel = _by_code(names, gpu.name[order], lambda n: classify(n) == "convolution")[gpu.name[order]]
    other = ~is_conversion[gpu.name[order]]
    pos = np.arange(len(order))
    prev = np.maximum.accumulate(np.where(other, pos, -1))  # last non-conversion at or before each position
    nxt = np.minimum.accumulate(np.where(other, pos, len(order))[::-1])[::-1]  # first at or after
    at = np.empty(len(gpu), dtype=np.int64)
    at[order] = pos
    p = at[events]
    out = np.zeros(len(events), dtype=bool)
    for side in (prev[p], nxt[p]):
        ok = (side >= 0) & (side < len(order))
        s = np.where(ok, side, 0)
        out |= ok & (lane[s] == lane[p]) & conv_kernel[s]
    return out


def layout_findings(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict], total_us: float) -> list[dict]:
    """The layout finding: the convolutions' NCHW<->NHWC conversion kernels, their time the saving
    (what channels_last removes). [] when they take under MIN_SHARE of device time."""
    ev = conversions(trace, links)
    gpu, names = trace.gpu, trace.names
    conv_us = float(gpu.dur[ev].sum()) if len(ev) else 0.0
    if total_us <= 0 or conv_us < MIN_SHARE * total_us:
        return []
    by_name: dict[str, list] = {}
    for code, d in zip(gpu.name[ev].tolist(), gpu.dur[ev].tolist()):
        s = by_name.setdefault(_short(names[code]), [0, 0.0])
        s[0] += 1
        s[1] += d
    linked = links.gpu_op[ev] >= 0
    ops = links.gpu_op[ev[linked]]
    op_names: dict[str, int] = {}
    for c in trace.ops.name[distinct(ops)].tolist():
        op_names[names[c]] = op_names.get(names[c], 0) + 1
    per_row: dict[int, float] = {}
    for r, d in zip(ev_row[ev].tolist(), gpu.dur[ev].tolist()):
        if r >= 0:
            per_row[r] = per_row.get(r, 0.0) + d
    ids = [rows[r]["id"] for r in sorted(per_row, key=lambda r: -per_row[r])]
    conv_rows = [rows[r] for r in per_row if not rows[r].get("opaque")]
    nhwc = _nhwc_kernels(rows, per_row)
    dtypes = sorted({r.get("dtype") for r in conv_rows if r.get("dtype")})
    libs = " / ".join(lib for lib, rx in (("cuDNN", "nchwToNhwc|nhwcToNchw"), ("MIOpen", "batched_transpose_"))
                      if any(re.search(rx, n) for n in by_name))
    kernels = ", ".join(f"{n} x{k[0]:,} ({u.us(k[1])})" for n, k in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:4])
    share = conv_us / total_us * 100.0
    text = (f"{len(ev):,} layout-conversion kernels ran around convolutions: {kernels}; {u.us(conv_us)} in all, "
            f"{share:.1f}% of device time. ")
    if op_names:
        text += ("They ran inside " + ", ".join(f"{n} ({k:,} call{'s' if k != 1 else ''})"
                                                  for n, k in sorted(op_names.items(), key=lambda kv: -kv[1]))
                 + (f", and {int((~linked).sum()):,} with no op recorded, next to convolution kernels on their stream"
                    if (~linked).any() else "") + ". ")
    else:
        text += "The trace links them to no op; each runs next to a convolution kernel on its stream. "
    text += ("The convolutions' tensors are NCHW (PyTorch's default) but the kernels the library picked "
             + (f"({', '.join(nhwc[:2])}) " if nhwc else "")
             + f"work in NHWC, so {libs} transposes the input (and filter) in and the output back out on "
             f"every call{' in ' + '/'.join(dtypes) if dtypes else ''}: bytes moved twice, no arithmetic. "
             f"{FIX} Then the library reads NHWC as it is and skips the conversions (channels_last also suits "
             "batch norm, pooling and element-wise ops, which follow the input's memory format). "
             f"Saving shown: the conversion kernels' time, {u.us(conv_us)} (an upper bound: the first layer's "
             "input conversion moves to the data pipeline, and the library may pick another NHWC kernel).")
    return [{
        "kind": "layout",
        "group": "layout",
        "title": f"NCHW↔NHWC conversions around convolutions take {u.us(conv_us)} ({share:.1f}%): use channels_last",
        "text": text,
        "fix": FIX,
        "ops": ids[:50],
        "saving_us": conv_us,
        "estimated": bool((~linked).any()),
    }]


def _short(name: str) -> str:
    """A conversion kernel's name without namespaces, template arguments or parameters."""
    base = name.split("(", 1)[0].split("<", 1)[0].strip()
    return base.rsplit("::", 1)[-1].removeprefix("void ").strip()


def _nhwc_kernels(rows: list[dict], per_row: dict[int, float]) -> list[str]:
    """Names of the NHWC convolution kernels in the rows that ran conversions (their names say nhwc)."""
    out = []
    for r in per_row:
        for k in rows[r].get("kernels") or []:
            n = k.get("name", "")
            if _NHWC_KERNEL.search(n) and not CONVERSION.search(n) and classify(n) == "convolution":
                s = n.split("(", 1)[0].removeprefix("void ")
                m = re.fullmatch(r"[\w:]*Kernel\d*<(\w+)>", s)  # CUTLASS's Kernel<name>: the name says it
                s = (m.group(1) if m else s)[:100]
                if s not in out:
                    out.append(s)
    return out
