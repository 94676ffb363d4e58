"""Collectives (NCCL / RCCL / Gloo): the bytes each rank sends, by algorithm.

A collective does no arithmetic worth counting (the adds of a reduction are ignored: FLOPs = 0);
what sets its time is the link bandwidth, so it is costed as the data each rank sends and
judged by the bandwidth it achieved (roofline/judge.py: bound "communication", no DRAM roof).

S is the message size in the nccl-tests convention; n the group size:

    all_reduce      S = the buffer               sent per rank = 2(n-1)/n * S   (ring)
    all_gather      S = the gathered output      (n-1)/n * S
    reduce_scatter  S = the full input           (n-1)/n * S
    all_to_all      S = one rank's input         (n-1)/n * S
    broadcast, reduce, send / recv               S
    gather, scatter S = the gathered data        (n-1)/n * S

Cost.bytes is the per-rank volume, so achieved GB/s = bytes / time is nccl-tests' *bus
bandwidth* (comparable across collectives and group sizes; the link's peak bounds it) and
S / time its *algorithm bandwidth*; both are in the row's `comm` entry.

Where the facts come from, best first: record_param_comms' args (torch >= 2.1: "Collective
name", "In/Out msg nelems", "dtype", "Group size"); the op's name (c10d::allreduce_,
_c10d_functional::all_gather_into_tensor, ...) and its tensors; the NCCL kernel's name
(old record_param_comms events record only the input tensor); for the oldest, which record
nothing, the tensor of the library op that issued them (load.comm_parents). The group size is taken from
"Group size", from the ratio of an all_gather's output to its input, or from a functional
collective's group_size argument; otherwise it is assumed to be the world size in the trace's
distributedInfo, and the Cost is marked estimated.
"""

from __future__ import annotations

from traceana.cost.families._common import make, shape_problem
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_int, fmt_num, parse_int
from traceana.cost.types import Cost, OpCall, Unmodelled

ALGORITHMS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
              "send_recv", "gather", "scatter", "barrier")

# "Collective name" values (ProcessGroupNCCL / Gloo) and op names -> algorithm
_BY_NAME = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "allgather_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_allv": "all_to_all", "alltoall": "all_to_all",
    "alltoall_base": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "send": "send_recv", "recv": "send_recv",
    "recv_any_source": "send_recv", "gather": "gather", "scatter": "scatter", "barrier": "barrier",
    "monitored_barrier": "barrier", "wait": "barrier",
}
# NCCL/RCCL kernel-name fragments -> algorithm (old traces record no collective name)
_BY_KERNEL = (("AllReduce", "all_reduce"), ("AllGather", "all_gather"), ("ReduceScatter", "reduce_scatter"),
              ("AllToAll", "all_to_all"), ("SendRecv", "all_to_all"), ("Broadcast", "broadcast"),
              ("Reduce_", "reduce"), ("_Send", "send_recv"), ("_Recv", "send_recv"))
# record_param_comms "dtype" names -> bytes per element
_COMM_ITEMSIZE = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
                  "Char": 1, "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1,
                  "Float8_e5m2fnuz": 1, "ComplexFloat": 8, "ComplexDouble": 16, "UInt16": 2, "UInt32": 4,
                  "UInt64": 8}
_CANON = {1: "uint8", 2: "bf16", 4: "fp32", 8: "fp64", 16: "complex128"}

C10D_OPS = ("allreduce_", "allreduce_coalesced_", "allgather_", "_allgather_base_", "allgather_coalesced_",
            "allgather_into_tensor_coalesced_", "reduce_scatter_", "_reduce_scatter_base_",
            "reduce_scatter_tensor_coalesced_", "alltoall_", "alltoall_base_", "broadcast_", "reduce_",
            "send", "recv_", "recv_any_source_", "gather_", "scatter_", "barrier", "monitored_barrier_")
FUNCTIONAL_OPS = ("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_gather_into_tensor",
                  "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced", "reduce_scatter_tensor",
                  "reduce_scatter_tensor_coalesced", "all_to_all_single", "broadcast", "broadcast_")


def bus_factor(algo: str, n: int) -> tuple[float, str]:
    """Bytes sent per rank / S, and the factor as written in the arithmetic."""
    if algo == "barrier":
        return 0.0, "0"
    if algo == "all_reduce":
        return 2 * (n - 1) / n, f"2*(n-1)/n = 2*{n - 1}/{n}"
    if algo in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n, f"(n-1)/n = {n - 1}/{n}"
    return 1.0, "1"


def _algorithm(call: OpCall, short: str) -> tuple[str | None, str]:
    """(algorithm, where it was read) for this call."""
    rec = call.get("collective")
    if isinstance(rec, str) and rec in _BY_NAME:
        parent = call.get("message_from")
        if isinstance(parent, str):
            return _BY_NAME[rec], f"name of the op that issued it ({parent[:80]})"
        return _BY_NAME[rec], f"collective {rec!r} recorded"
    base = short.rstrip("_")
    if call.name != "record_param_comms" and base in _BY_NAME:
        return _BY_NAME[base], "op name"
    for k in call.kernel_names:
        for frag, algo in _BY_KERNEL:
            if frag in k:
                how = f"kernel name {k.split('(')[0][:60]!r}"
                if frag == "SendRecv":
                    how += " (grouped send/recv: taken as all_to_all)"
                return algo, how
    return None, ""


def _tensors(call: OpCall) -> list[tuple[tuple[int, ...], float, str]]:
    """(shape, itemsize, dtype) of every tensor argument, TensorList members included."""
    out = []
    for i in range(len(call.dims)):
        t = call.tensor(i)
        if t is not None:
            out.append((t.shape, t.itemsize, t.dtype))
            continue
        shapes = call.tensor_list(i)
        tt = call.types[i] if i < len(call.types) else ""
        if shapes and tt == "TensorList":
            size = _itemsize_of_list(call)
            for s in shapes:
                out.append((s, size[0], size[1]))
    return out


# NCCL/RCCL kernel-name dtype suffixes (ncclKernel_AllReduce_RING_LL_Sum_float, ..._Sum_bf16, ..._f32)
_KERNEL_DTYPE = (("_bf16", 2, "bf16"), ("_half", 2, "fp16"), ("_f16", 2, "fp16"), ("_float", 4, "fp32"),
                 ("_f32", 4, "fp32"), ("_double", 8, "fp64"), ("_f64", 8, "fp64"), ("_int64_t", 8, "int64"),
                 ("_i64", 8, "int64"), ("_int32_t", 4, "int32"), ("_i32", 4, "int32"), ("_u8", 1, "uint8"),
                 ("_uint8_t", 1, "uint8"), ("_i8", 1, "int8"), ("_int8_t", 1, "int8"))


def _itemsize_of_list(call: OpCall) -> tuple[float, str]:
    """Element size of a TensorList (the profiler records no dtype for one): the recorded "dtype"
    arg, else the NCCL kernel name's dtype suffix; (0, "unknown") when neither says."""
    d = call.get("dtype")
    if isinstance(d, str) and d in _COMM_ITEMSIZE:
        n = _COMM_ITEMSIZE[d]
        return float(n), {"BFloat16": "bf16", "Half": "fp16", "Float": "fp32"}.get(d, _CANON.get(n, "uint8"))
    for k in call.kernel_names:
        base = k.split("(", 1)[0]
        if "nccl" in base.lower() and "SendRecv" not in base:  # SendRecv kernels move int8_t bytes
            for suffix, n, name in _KERNEL_DTYPE:
                if base.endswith(suffix):
                    return float(n), name
    return 0.0, "unknown"


def _count(v) -> int | None:
    """A recorded count (elements, ranks) if it is a non-negative int."""
    return v if type(v) is int and 0 <= v < 2**62 else None


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _collective(call: OpCall) -> Cost | Unmodelled:
    short = call.name.split("::", 1)[1] if "::" in call.name else call.name
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    algo, how = _algorithm(call, short)
    if algo is None:
        return Unmodelled("collective not recorded (no 'Collective name' arg, no NCCL/RCCL kernel name): "
                          "its algorithm, and so its bytes per rank, are unknown", cause="comm_unsized")
    notes: list[str] = [f"algorithm from the {how}"]
    estimated = "taken as" in how
    parent = call.get("message_from")
    if isinstance(parent, str):
        notes.append(f"the collective recorded no sizes: its message is the tensor of the op that issued it, "
                     f"{parent[:80]}")
        estimated = True
    tensors = _tensors(call)
    itemsize, dtype = _itemsize_of_list(call)
    if not itemsize and tensors:
        itemsize, dtype = tensors[0][1], tensors[0][2]
    in_n, out_n = _count(call.get("in_nelems")), _count(call.get("out_nelems"))
    group = _count(call.get("group_size"))
    s_elems: float | None = None
    what, times_n = "", False
    if algo == "barrier":
        s_elems, what = 0, "no payload"
    elif isinstance(in_n, int) and isinstance(out_n, int) and itemsize:
        if algo == "all_gather":
            s_elems, what = out_n, "Out msg nelems"
            if not isinstance(group, int) and in_n:
                group = out_n // in_n if out_n % in_n == 0 else None
        elif algo == "reduce_scatter":
            s_elems, what = in_n, "In msg nelems"
            if not isinstance(group, int) and out_n:
                group = in_n // out_n if in_n % out_n == 0 else None
        else:
            s_elems, what = max(in_n, out_n), "msg nelems"
    elif tensors:
        sizes = [_numel(s) for s, _, _ in tensors]
        two = short in ("_allgather_base_", "_reduce_scatter_base_", "alltoall_base_") and len(sizes) >= 2
        if algo == "all_gather" and two:  # (output, input)
            s_elems, what = sizes[0], "the output tensor"
            if not isinstance(group, int) and sizes[1]:
                group = sizes[0] // sizes[1] if sizes[0] % sizes[1] == 0 else None
        elif algo == "reduce_scatter" and two:  # (output, input)
            s_elems, what = sizes[1], "the input tensor"
            if not isinstance(group, int) and sizes[0]:
                group = sizes[1] // sizes[0] if sizes[1] % sizes[0] == 0 else None
        elif algo == "all_to_all" and two:  # (output, input)
            s_elems, what = sizes[1], "the input tensor"
        elif short in ("all_gather_into_tensor", "all_gather_into_tensor_out", "reduce_scatter_tensor"):
            gpos = 1 if algo == "all_gather" else 2
            g = parse_int(call.scalar(gpos))
            g = g if g and g > 0 else None
            if g:
                group = g
            s_elems = sizes[0] * (g or 0) if algo == "all_gather" else sizes[0]
            what = "the input tensor" + (" x group size" if algo == "all_gather" else "")
            if algo == "all_gather" and not g:
                s_elems = None
        elif algo == "all_gather":  # only one rank's input is recorded: S = n x input, once n is known
            s_elems, what, times_n = sum(sizes), "the input tensor x group size", True
        else:
            s_elems, what = sum(sizes), ("the tensors" if len(sizes) > 1 else "the tensor")
    if s_elems is None:
        return Unmodelled(f"{algo}: message size not recorded (no tensor sizes, no msg nelems)", cause="comm_unsized")
    if not itemsize:
        return Unmodelled(f"{algo}: element size unknown (a TensorList has no recorded dtype, and neither a "
                          "'dtype' arg nor the kernel name gives one)", cause="comm_unsized")
    world = _count(call.get("world_size"))
    assumed = False
    if not isinstance(group, int) or group <= 0:
        if isinstance(world, int) and world > 0:
            group, assumed = world, True
            notes.append(f"group size not recorded: assumed the world size {world} (distributedInfo)")
            estimated = True
        elif algo in ("broadcast", "reduce", "send_recv", "barrier"):
            group = 0  # their bytes do not depend on n
        else:
            return Unmodelled(f"{algo}: group size unknown (no 'Group size' arg and no distributedInfo)",
                              cause="comm_unsized")
    if times_n:
        if group <= 0:
            return Unmodelled("all_gather: group size unknown, so the gathered size is too", cause="comm_unsized")
        s_elems *= group
    s_bytes = s_elems * itemsize
    factor, fexpr = bus_factor(algo, group) if group > 1 else ((0.0, "0 (a group of one sends nothing)")
                                                                 if group == 1 else bus_factor(algo, 2))
    sent = s_bytes * factor
    tr = Traffic().raw("send", "per rank", sent,
                       f"{algo} of S = {fmt_int(s_elems)} elements ({what}) * {fmt_num(itemsize)} B = "
                       f"{fmt_int(s_bytes)} B; x {fexpr}" + (f" over n = {group} ranks" if group else ""))
    notes.append("bytes = data each rank sends (nccl-tests bus bytes): achieved GB/s is the bus bandwidth, "
                 "S / time the algorithm bandwidth")
    detail = (("algorithm", algo), ("bus_factor", factor), ("group_size", group or None), ("msg_bytes", s_bytes),
              ("group_assumed", assumed))
    return make(0, tr, "comm", dtype if dtype != "unknown" else "uint8",
                "a collective: no arithmetic counted (reduction adds ignored) = 0",
                estimated=estimated, notes=notes, detail=detail)


formula("record_param_comms", exact=True)(_collective)
formula(*(f"c10d::{n}" for n in C10D_OPS),
        *(f"_c10d_functional::{n}" for n in FUNCTIONAL_OPS),
        *(f"c10d_functional::{n}" for n in FUNCTIONAL_OPS))(_collective)


def comm_rates(cost: Cost, mean_us: float) -> dict | None:
    """The row's `comm` entry: algorithm, n, S, bus factor, algorithm and bus bandwidth (GB/s)."""
    d = dict(cost.detail)
    if cost.family != "comm" or "msg_bytes" not in d:
        return None
    s = d["msg_bytes"]
    t = mean_us * 1e3  # ns: bytes / ns = GB/s
    return {"algorithm": d.get("algorithm"), "group_size": d.get("group_size"),
            "group_assumed": bool(d.get("group_assumed")), "msg_bytes": s,
            "bus_factor": d.get("bus_factor"), "bytes_per_rank": cost.bytes,
            "algbw_gbps": s / t if t > 0 else None, "busbw_gbps": cost.bytes / t if t > 0 else None}



# ---------------------------------------------------------------- collectives outside NCCL

# Ops of the serving engines and of torch's symmetric memory that run their own collective
# kernels (custom all-reduce over IPC buffers, NVLink SHARP multimem, one-/two-shot all-reduce):
# name -> (algorithm, position of the message tensor, what S is, position of an int group size).
# Their group is a group_name string (not its size): the world size in distributedInfo is taken,
# estimated, unless the op records it.
CUSTOM_COMM = {
    "_C_custom_ar::all_reduce": ("all_reduce", 1, "in", None),  # (fa, inp, out!, reg_buffer, sz)
    "_C_custom_ar::qr_all_reduce": ("all_reduce", 1, "in", None),  # (fa, inp, out, quant_level, cast)
    "sgl_kernel::all_reduce": ("all_reduce", 1, "in", None),  # (fa, inp, out!, reg_buffer, sz)
    "vllm::all_reduce": ("all_reduce", 0, "in", None),  # (tensor, group_name)
    "vllm::reduce_scatter": ("reduce_scatter", 0, "in", 2),  # (tensor, dim, world_size, group_name)
    "vllm::all_gather": ("all_gather", 0, "in x n", 2),  # (tensor, dim, world_size, group_name)
    "sglang::inplace_all_reduce": ("all_reduce", 0, "in", None),  # (tensor, group_name)
    "sglang::outplace_all_reduce": ("all_reduce", 0, "in", None),  # (tensor, group_name, method)
    "sglang::reg_all_gather_into_tensor": ("all_gather", 0, "out", None),  # (output, input, group_name)
    "symm_mem::one_shot_all_reduce": ("all_reduce", 0, "in", None),  # (input, reduce_op, group_name)
    "symm_mem::one_shot_all_reduce_out": ("all_reduce", 0, "in", None),
    "symm_mem::one_shot_all_reduce_copy": ("all_reduce", 1, "in", None),  # (symm_buffer, local_input, ...)
    "symm_mem::two_shot_all_reduce_": ("all_reduce", 0, "in", None),
    "symm_mem::two_shot_all_reduce_out": ("all_reduce", 0, "in", None),
    "symm_mem::multimem_all_reduce_": ("all_reduce", 0, "in", None),
    "symm_mem::multimem_one_shot_all_reduce": ("all_reduce", 0, "in", None),
    "symm_mem::multimem_one_shot_all_reduce_out": ("all_reduce", 0, "in", None),
    "symm_mem::multimem_all_gather_out": ("all_gather", 2, "out", None),  # (input, group_name, out!)
    "symm_mem::reduce_scatter_out": ("reduce_scatter", 0, "in", None),  # (input, group_name, split_last_dim, out!)
}


@formula(*CUSTOM_COMM)
def custom_collective(call: OpCall) -> Cost | Unmodelled:
    """A collective run by its own kernels: S from its tensor as the schema places it (all_gather:
    the gathered output, or the input x n), bytes per rank = S x the nccl-tests bus factor of its
    algorithm, so its achieved GB/s compares with NCCL's bus bandwidth."""
    algo, pos, what, gpos = CUSTOM_COMM[call.name]
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    t = call.tensor(pos)
    if t is None:
        return Unmodelled(f"{call.name}: argument {pos} (the message) is not a recorded tensor", cause="comm_unsized")
    notes: list[str] = []
    estimated = False
    group = parse_int(call.scalar(gpos)) if gpos is not None else None
    if not group or group <= 0:
        world = _count(call.get("world_size"))
        if not world:
            return Unmodelled(f"{call.name}: group size unknown (a group name is recorded, not its size, and the "
                              "trace has no distributedInfo world size)", cause="comm_unsized")
        group, estimated = world, True  # (estimated is then the group's being assumed)
        notes.append(f"group size not recorded (a group name): assumed the world size {world} (distributedInfo)")
    s_elems = t.numel * (group if what == "in x n" else 1)
    s_bytes = s_elems * t.itemsize
    factor, fexpr = bus_factor(algo, group) if group > 1 else (0.0, "0 (a group of one sends nothing)")
    label = {"in": "the input", "out": "the gathered output", "in x n": "the input x group size"}[what]
    tr = Traffic().raw("send", "per rank", s_bytes * factor,
                       f"{algo} of S = {fmt_int(s_elems)} elements ({label}) * {fmt_num(t.itemsize)} B = "
                       f"{fmt_int(s_bytes)} B; x {fexpr} over n = {group} ranks")
    notes.append("its own kernels (not NCCL): bytes = the nccl-tests bus bytes of the same collective, so "
                 "achieved GB/s compares with NCCL's bus bandwidth (a one-shot kernel reads every peer's "
                 "whole buffer: (n-1)*S, more than the ring's 2(n-1)/n*S)")
    detail = (("algorithm", algo), ("bus_factor", factor), ("group_size", group), ("msg_bytes", s_bytes),
              ("group_assumed", estimated))
    return make(0, tr, "comm", t.dtype, "a collective: no arithmetic counted (reduction adds ignored) = 0",
                estimated=estimated, notes=notes, detail=detail)
