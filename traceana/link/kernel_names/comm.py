"""Communication kernels: which library's, and which collective they run.

A kernel is communication when its name (parameter list dropped, lower-cased, anonymous namespaces
removed) shows one of these libraries' kernels. Each rule names the library and where its kernel
names come from (the libraries' own sources):

  NCCL / RCCL / MSCCL        ncclKernel_<Coll>_<Algo>_<Proto>_<Op>_<type>, ncclDevKernel_<Coll>_<Op>_<type>_
                             <Algo>_<Proto> (NCCL >= 2.19; ncclDevKernel_Generic runs any of them), RCCL the
                             same; MSCCL runs inside the NCCL kernels
  MSCCL++                    its collectives (allreduce7, allreduceAllPairs, allgather6, ...) and its
                             executor, mscclpp::executionKernel<...>
  NVSHMEM / rocSHMEM         nvshmemi_* kernels (proxy entry points, team reductions, waits), rocshmem's
  DeepEP                     every kernel in the deep_ep:: namespace (intranode / internode / internode_ll
                             notify_dispatch, dispatch, combine, ...; v2's deep_ep::ep::*) and its dpsk::ep::
                             spelling, except deep_ep::layout:: (get_dispatch_layout computes the routing on
                             the local GPU: no data leaves it)
  pplx-kernels               dispatchKernel<...> and combineKernel<...> (intra- and inter-node all-to-all,
                             declared outside any namespace)
  custom all-reduce          vLLM / SGLang / aiter cross_device_reduce_1stage / _2stage / _1stage_naive,
                             quickreduce::allreduce_prototype_*; TensorRT-LLM / FlashInfer one- and two-shot
                             all-reduce (Lamport buffers) and MoE all-to-all (moeA2A*)
  torch symmetric memory     one_shot_all_reduce_kernel, two_shot_all_reduce_kernel, multimem_all_reduce_kernel,
                             multimem_all_gather_kernel, ...
  any other                  a kernel whose name says all_reduce / all_gather / reduce_scatter / all_to_all /
                             sendrecv — but not an Inductor-generated Triton kernel
                             (triton_poi_fused_all_gather_into_tensor_0 copies a functional collective's
                             buffer; it moves nothing between GPUs)
"""

from __future__ import annotations

import functools
import re

from traceana import lazy_re
from traceana.link.kernel_names.dtypes import cxx_types, word_types
from traceana.link.kernel_names.record import KernelName as K
from traceana.link.kernel_names.parts import HEAD, Parts

# (library, pattern) — the library is what the report names; first match wins
_RULES = (
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
_RX = [(lib, lazy_re.compile(p)) for lib, p in _RULES]
# any rule at all: one search rejects the many names that are no communication (not one per rule)
_ANY = lazy_re.compile("|".join(f"(?:{p})" for _, p in _RULES))
# kernels that match a rule above but move nothing between GPUs
_NOT_COMM = lazy_re.compile(r"deep_ep::layout::|dpsk::ep::layout::")
_INDUCTOR = lazy_re.compile(r"^(void\s+)?triton_")  # Inductor names kernels after the ops they fuse

#: collective kinds in kernel (and op) names, first match wins
KINDS = (("AllReduce", r"all_?reduce|cross_device_reduce|quickreduce"), ("ReduceScatter", r"reduce_?scatter"),
         ("AllGather", r"all_?gather"), ("AllToAll", r"all_?to_?all"), ("Broadcast", r"broadcast|bcast"),
         ("SendRecv", r"send_?recv"), ("Dispatch", r"dispatch"), ("Combine", r"combine"),  # expert all-to-all
         ("Send", r"send"), ("Recv", r"recv"), ("Reduce", r"reduce"))
_KIND_RX = [(k, lazy_re.compile(p, re.IGNORECASE)) for k, p in KINDS]
#: the kinds as the rest of traceana spells a collective's algorithm
ALGORITHM = {"AllReduce": "all_reduce", "ReduceScatter": "reduce_scatter", "AllGather": "all_gather",
             "AllToAll": "all_to_all", "Dispatch": "all_to_all", "Combine": "all_to_all", "Broadcast": "broadcast",
             "SendRecv": "send_recv", "Send": "send_recv", "Recv": "send_recv", "Reduce": "reduce"}
_NCCL = lazy_re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)_(\w+)", re.IGNORECASE)
_ALGOS = ("RING", "TREE", "NVLS_TREE", "NVLS", "COLLNET_DIRECT", "COLLNET_CHAIN", "PAT")
_PROTOS = ("LL128", "LL", "SIMPLE")


def _clean(name: str) -> str:
    """The kernel name as the rules read it: parameter list dropped, lower case."""
    return name.replace("(anonymous namespace)", "").split("(", 1)[0].lower()


@functools.lru_cache(maxsize=1 << 18)
def _library(head: str) -> str | None:
    low = _clean(head)
    if not _ANY.search(low) or _NOT_COMM.search(low):
        return None
    for lib, rx in _RX:
        if rx.search(low):
            if lib == "collective" and _INDUCTOR.search(low):
                return None
            return lib
    return None


def library(name: str) -> str | None:
    """The communication library a kernel name belongs to (the rule's label), or None when the kernel is
    not communication. Reads the name's head; each distinct head once."""
    return _library(name[:HEAD] if len(name) > HEAD else name)


def kind(name: str) -> str:
    """AllReduce, AllGather, ... from a kernel or op name; "other" when it says none."""
    head = name[:HEAD] if len(name) > HEAD else name
    for k, rx in _KIND_RX:
        if rx.search(head):
            return k
    return "other"


def record(p: Parts, lib: str):
    """The KernelName of a communication kernel: library, collective, element type, and for NCCL / RCCL
    the algorithm and protocol (`detail`)."""
    k = kind(p.base if p.base and not p.mangled else p.head)
    if k == "other":
        k = kind(p.head.split("(", 1)[0])
    detail = None
    dtype = None
    m = _NCCL.search(p.base or p.head)
    if m and lib in ("NCCL", "RCCL"):
        rest = m.group(2).split("_")
        algo = next((x for x in rest if x.upper() in _ALGOS), None)
        proto = next((x for x in rest if x.upper() in _PROTOS), None)
        detail = " ".join(x for x in (algo, proto) if x) or None
        if m.group(1) == "Generic":  # one kernel for every collective: the name says none
            k = "other"
        dtype = _nccl_type(rest)
    else:
        types = cxx_types(p.targs) if p.targs else word_types(p.base)
        dtype = types[0] if types else None
    return K(library=lib, cls="communication", op=ALGORITHM.get(k), a=dtype, out=dtype, detail=detail)


# NCCL's type names in kernel names (ncclKernel_..._float, ncclDevKernel_..._bf16_..., ..._int8_t)
_NCCL_TYPES = {"float": "fp32", "double": "fp64", "half": "fp16", "f32": "fp32", "f64": "fp64", "f16": "fp16",
               "bf16": "bf16", "fp8e4m3": "fp8", "fp8e5m2": "fp8", "f8e4m3": "fp8", "f8e5m2": "fp8",
               "int8": "int8", "uint8": "uint8", "i8": "int8", "u8": "uint8", "int32": "int32", "uint32": "int32",
               "i32": "int32", "u32": "int32", "int64": "int64", "uint64": "int64", "i64": "int64", "u64": "int64"}


def _nccl_type(parts: list[str]) -> str | None:
    for i, x in enumerate(parts):
        low = x.lower()
        if low == "t" and i:  # int8_t split at "_"
            continue
        if low in _NCCL_TYPES:
            return _NCCL_TYPES[low]
    return None
