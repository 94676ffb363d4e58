"""Levers from kernel names alone, for the device time no costed op speaks for (no shapes recorded,
kernels launched outside any op, graph replays, ops with no formula): traceana/link/kernel_account.py's
view of every GPU event (class, dtypes, library, tensor-core use from the kernel-name grammar).

  tensor_core_dtype   fp32 GEMM / convolution kernels on CUDA cores -> TF32 / bf16 / fp16 tensor cores, 16-bit
                      GEMMs -> fp8, each kernel's time after read from what its name says (kernel_dtypes.py)
  fusion              runs of ATen element-wise / reduction / norm / copy kernels back to back on one stream,
                      which torch.compile fuses (kernel_chains.py)
  attention           a softmax kernel between two GEMM kernels on its stream: attention written out op by op
                      (kernel_chains.py)
  outside_op_kernel   the largest kernel launched outside any profiled op, when it dominates: a note
                      (outside_kernels.py)
All are estimates from names (confidence low, estimated): the report asks for record_shapes=True to cost them.
kernel_selection.py says which ops and ledger terms a lever's kernels belong to; kernel_sentence.py writes the
one sentence of what the kernels were.
"""

from __future__ import annotations

from traceana.diagnose.kernel_chains import chain_findings
from traceana.diagnose.kernel_dtypes import dtype_findings
from traceana.diagnose.outside_kernels import outside_op_finding
from traceana.link.kernel_account import KernelView
from traceana.load.model import Trace


def kernel_findings(trace: Trace, view: KernelView, rows: list[dict], device: dict, context: dict | None,
                    total_us: float) -> list[dict]:
    """Every lever and note from the kernel account (see the module doc), in that order."""
    if total_us <= 0 or not len(view.rec):
        return []
    context = context or {}
    out = dtype_findings(trace, view, rows, device, context, total_us)
    out += chain_findings(trace, view, rows, context, total_us)
    f = outside_op_finding(trace, view, rows, total_us, device)
    if f:
        out.append(f)
    return out
