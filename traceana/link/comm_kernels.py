"""Which kernels and ops are communication, however their library names them.

One rule for every stage (the timeline breakdown, kernel classes, the ops table, the cross-rank
facts), so a collective is never "communication" in one place and "other" in another.

A kernel is communication when the kernel-name grammar says so (traceana/link/kernel_names/comm.py:
NCCL / RCCL / MSCCL++ / NVSHMEM / DeepEP / pplx-kernels / custom all-reduce / symmetric-memory
kernels, and any other kernel whose name says all_reduce / all_gather / reduce_scatter /
all_to_all / sendrecv, not an Inductor-generated Triton kernel).

An op is communication when it is a collective, p2p or expert-parallel op: record_param_comms,
every c10d:: / _c10d_functional:: / c10d_functional:: op, torch symmetric memory (symm_mem::),
the serving engines' own collectives (cost/families/comm.py CUSTOM_COMM and the _C_custom_ar::
namespace) and pplx-kernels' all_to_all_* ops. Every kernel launched from such an op is
communication, whatever its name (analysis rows of those ops are "communication").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceana.arrays import distinct
from traceana.cost.families.comm import CUSTOM_COMM  # the serving engines' own collectives
from traceana.link.kernel_names import comm

# op names: namespaces whose every op is a collective / p2p op, and single ops
_COMM_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "symm_mem::", "_C_custom_ar::",
                     "pplx_kernels::all_to_all_")
_COMM_OPS = frozenset({"record_param_comms"})


def kernel_library(name: str) -> str | None:
    """The communication library a kernel name belongs to (the grammar's label), or None when the
    kernel is not communication. (Each distinct name head is read once.)"""
    return comm.library(name)


def is_comm_kernel(name: str) -> bool:
    return kernel_library(name) is not None


def comm_name_mask(names: Sequence[str]) -> np.ndarray:
    """Per name code: is it a communication kernel (see the module doc)?"""
    return np.fromiter((kernel_library(n) is not None for n in names), dtype=bool, count=len(names))


def comm_event_mask(names: Sequence[str], codes: np.ndarray) -> np.ndarray:
    """Per GPU event (its name code): is it a communication kernel? Each distinct name judged once."""
    mask = np.zeros(len(names), dtype=bool)
    for c in distinct(codes).tolist() if len(codes) else []:
        mask[c] = kernel_library(names[c]) is not None
    return mask[codes] if len(codes) else np.zeros(0, dtype=bool)


def is_comm_op(name: str) -> bool:
    """Is the op a collective / p2p / expert-parallel communication op?"""
    return name in _COMM_OPS or name.startswith(_COMM_OP_PREFIXES) or name in CUSTOM_COMM
