"""Which kernels and ops are communication, however their library names them.

One rule for every stage (the timeline breakdown, kernel classes, the ops table, the cross-rank
facts), so a collective is never "communication" in one place and "other" in another.

A kernel is communication when its name (parameter list dropped, lower-cased, anonymous
namespaces removed) shows one of these libraries' kernels. Each rule names the library and where
its kernel names come from (the libraries' own sources):

  NCCL / RCCL / MSCCL        ncclKernel_<Coll>_<Algo>_<Proto>_<Op>_<type>, ncclDevKernel_<...>
                             (NCCL >= 2.19), RCCL the same; MSCCL runs inside the NCCL kernels
  MSCCL++                    its collectives (allreduce7, allreduceAllPairs, allgather6, ...) and
                             its executor, mscclpp::executionKernel<...>
  NVSHMEM / rocSHMEM         nvshmemi_* kernels (proxy entry points, team reductions, waits),
                             rocshmem's likewise
  DeepEP                     every kernel in the deep_ep:: namespace (intranode / internode /
                             internode_ll notify_dispatch, cached_notify_dispatch, dispatch,
                             cached_notify_combine, combine, clean_low_latency_buffer; v2's
                             deep_ep::ep::dispatch_impl, hybrid_dispatch_impl, ...) and its
                             dpsk::ep:: spelling, except deep_ep::layout:: (get_dispatch_layout
                             computes the routing on the local GPU: no data leaves it)
  pplx-kernels               dispatchKernel<...> and combineKernel<...> (its intra- and
                             inter-node all-to-all, declared outside any namespace)
  custom all-reduce          vLLM / SGLang / aiter cross_device_reduce_1stage / _2stage /
                             _1stage_naive, quickreduce::allreduce_prototype_*; TensorRT-LLM /
                             FlashInfer one- and two-shot all-reduce (Lamport buffers) and MoE
                             all-to-all (moeA2A*)
  torch symmetric memory     one_shot_all_reduce_kernel, two_shot_all_reduce_kernel,
                             multimem_all_reduce_kernel, multimem_all_gather_kernel, ...
  any other                  a kernel whose name says all_reduce / all_gather / reduce_scatter /
                             all_to_all / sendrecv — but not an Inductor-generated Triton kernel
                             (triton_poi_fused_all_gather_into_tensor_0 copies a functional
                             collective's buffer; it moves nothing between GPUs)

An op is communication when it is a collective, p2p or expert-parallel op: record_param_comms,
every c10d:: / _c10d_functional:: / c10d_functional:: op, torch symmetric memory (symm_mem::),
the serving engines' own collectives (cost/families/comm.py CUSTOM_COMM and the _C_custom_ar::
namespace) and pplx-kernels' all_to_all_* ops. Every kernel launched from such an op is
communication, whatever its name (analysis rows of those ops are "communication").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from traceana.arrays import distinct
from traceana.cost.families.comm import CUSTOM_COMM  # the serving engines' own collectives

# (library, pattern) — the library is what the report names; first match wins
_KERNEL_RULES = (
    ("NCCL", r"nccl"),
    ("RCCL", r"rccl"),
    ("MSCCL++", r"msccl|executionkernel<"),
    ("NVSHMEM", r"nvshmem"),
    ("rocSHMEM", r"rocshmem"),
    ("DeepEP", r"(^|[\s:])(deep_ep|dpsk::ep)::"),
    ("pplx-kernels", r"(^|[\s:])(dispatch|combine)kernel<"),
    ("custom all-reduce", r"cross_device_reduce|quickreduce|lamport|moe_?a2a"),
    ("symmetric memory", r"symmetric_memory|symm_mem|multimem"),
    ("collective", r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv"),
)
_KERNEL_RX = [(lib, re.compile(p)) for lib, p in _KERNEL_RULES]
# kernels that match a rule above but move nothing between GPUs
_NOT_COMM = re.compile(r"deep_ep::layout::|dpsk::ep::layout::")
_INDUCTOR = re.compile(r"^(void\s+)?triton_")  # Inductor names kernels after the ops they fuse

# op names: namespaces whose every op is a collective / p2p op, and single ops
_COMM_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "symm_mem::", "_C_custom_ar::",
                     "pplx_kernels::all_to_all_")
_COMM_OPS = frozenset({"record_param_comms"})


def _clean(name: str) -> str:
    """The kernel name as the rules read it: parameter list dropped, lower case."""
    return name.replace("(anonymous namespace)", "").split("(", 1)[0].lower()


def kernel_library(name: str) -> str | None:
    """The communication library a kernel name belongs to (the rule's label), or None when the
    kernel is not communication."""
    low = _clean(name)
    if _NOT_COMM.search(low):
        return None
    for lib, rx in _KERNEL_RX:
        if rx.search(low):
            if lib == "collective" and _INDUCTOR.search(low):
                return None
            return lib
    return None


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
