"""The loaded trace: events split by role into columns (numpy arrays + name tables)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np


class CpuOps(msgspec.Struct, frozen=True):
    """cpu_op / Operator events. Shape args stay raw JSON bytes (b'' when not recorded)."""

    name: np.ndarray  # int32 code into Trace.names
    thread: np.ndarray  # int32 thread code
    ts: np.ndarray  # float64 µs
    end: np.ndarray  # float64 µs
    ext: np.ndarray  # int64 External id, -1 when absent
    dims: list[bytes]
    types: list[bytes]
    strides: list[bytes]
    concrete: list[bytes]
    kernel_flop: np.ndarray  # float64, nan when absent (torch.compile benchmark_kernel)
    kernel_num_gb: np.ndarray  # float64, nan when absent
    # op index -> ((key, value), ...): the extra args of the few ops that have them
    # (record_param_comms' collective, sizes and group: load.comm_args.comm_extra, read from the
    # op's own event on every load path, the C scanner's and the Python loader's alike)
    extra: dict[int, tuple] = msgspec.field(default_factory=dict)
    # op index -> ((key, value), ...): which call of which process group a record_param_comms is
    # (seq, pg, in_split / out_split, src / dst: load.comm_args.comm_ids), for matching it across
    # ranks; apart from `extra` because it differs per call and must not split an op signature
    comm_ids: dict[int, tuple] = msgspec.field(default_factory=dict)
    # op index -> its "Call stack" arg (with_stack=True in older torch: "file.py(12): fn;..." innermost
    # first), only the ops with a non-empty one
    call_stack: dict[int, str] = msgspec.field(default_factory=dict)
    # op index -> its "Module Hierarchy" arg (TorchScript modules), only the ops with a non-empty one
    module_hierarchy: dict[int, str] = msgspec.field(default_factory=dict)
    # int64 "Sequence number" (autograd: a forward op's node, repeated by the backward's evaluate_function
    # op), -1 when absent; None when the trace was built without it (tests' hand-made columns)
    seq: np.ndarray | None = None
    # int64 place of each op's event in the file's traceEvents list (-1: an op traceana made, e.g. a
    # graph replay's capturing op); how traceana.annotate finds the event again in the text
    ordinal: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ts)


class Launches(msgspec.Struct, frozen=True):
    """cuda_runtime / cuda_driver / Runtime events (cudaLaunchKernel, hipMemcpyAsync, ...)."""

    name: np.ndarray
    thread: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    corr: np.ndarray  # int64, -1 when absent
    ext: np.ndarray
    kernel: np.ndarray  # int32 name code of the kernel the launch names in its args (ROCm), -1 when absent

    def __len__(self) -> int:
        return len(self.ts)


class GpuEvents(msgspec.Struct, frozen=True):
    """kernel / gpu_memcpy / gpu_memset events (and their 2021 names)."""

    name: np.ndarray
    kind: np.ndarray  # int8: 0 kernel, 1 memcpy, 2 memset
    device: np.ndarray  # int64
    stream: np.ndarray  # int64
    ts: np.ndarray
    dur: np.ndarray
    corr: np.ndarray
    ext: np.ndarray
    nbytes: np.ndarray  # float64, nan when absent
    graph_node: np.ndarray  # int64 `graph node id` of an event replayed from a CUDA graph, -1 when absent
    # float64 thread blocks of the launch grid (x*y*z), nan when not recorded (memcpy, old traces)
    blocks: np.ndarray | None = None
    ordinal: np.ndarray | None = None  # int64 place of the event in traceEvents (as CpuOps.ordinal)

    def __len__(self) -> int:
        return len(self.ts)


KIND_NAMES = ("kernel", "memcpy", "memset")


class Annotations(msgspec.Struct, frozen=True):
    """user_annotation events (ProfilerStep#N, record_function ranges)."""

    name: np.ndarray
    thread: np.ndarray
    ts: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)


# the columns of a trace without these events (zero-length, read-only: shared by every such trace)
_I8, _I32, _I64, _F64 = (np.zeros(0, t) for t in (np.int8, np.int32, np.int64, np.float64))
for _a in (_I8, _I32, _I64, _F64):
    _a.flags.writeable = False


def _none(empty: np.ndarray):
    return msgspec.field(default_factory=lambda: empty)


class PyFrames(msgspec.Struct, frozen=True):
    """python_function events (with_stack=True): the Python call tree, nn.Module entries included."""

    # int32 code into Trace.names ("nn.Module: Linear_0", "transformers/models/x.py(123): forward",
    # "<built-in method ...>")
    name: np.ndarray = _none(_I32)
    thread: np.ndarray = _none(_I32)  # int32 thread code, same coding as CpuOps.thread
    ts: np.ndarray = _none(_F64)  # float64 µs
    end: np.ndarray = _none(_F64)  # float64 µs
    py_id: np.ndarray = _none(_I64)  # int64 "Python id", -1 when absent
    parent: np.ndarray = _none(_I64)  # int64 "Python parent id", -1 when absent
    module_id: np.ndarray = _none(_I64)  # int64 "Python module id" (nn.Module entries), -1 when absent

    def __len__(self) -> int:
        return len(self.ts)


class MemoryEvents(msgspec.Struct, frozen=True):
    """[memory] instant events (profile_memory=True), in trace order."""

    ts: np.ndarray = _none(_F64)  # float64 µs
    thread: np.ndarray = _none(_I32)  # int32 thread code
    addr: np.ndarray = _none(_I64)  # int64 "Addr" (0 when absent)
    nbytes: np.ndarray = _none(_I64)  # int64 "Bytes": > 0 allocation, < 0 free (0 when absent)
    total_allocated: np.ndarray = _none(_F64)  # float64 "Total Allocated", nan when absent
    total_reserved: np.ndarray = _none(_F64)  # float64 "Total Reserved", nan when absent
    device_type: np.ndarray = _none(_I8)  # int8 "Device Type" as recorded (0 CPU, 1 CUDA, ...), -1 when absent
    device: np.ndarray = _none(_I64)  # int64 "Device Id", -1 when absent

    def __len__(self) -> int:
        return len(self.ts)


class Trace(msgspec.Struct, frozen=True):
    path: str
    format: str  # "kineto" | "kineto-2021"
    names: list[str]
    threads: list[str]
    ops: CpuOps
    launches: Launches
    gpu: GpuEvents
    annotations: Annotations
    device_properties: list[dict[str, Any]]
    distributed: dict[str, Any] | None
    record_shapes: bool
    n_events: int
    span_us: float
    warnings: list[str] = msgspec.field(default_factory=list)
    python: PyFrames = msgspec.field(default_factory=PyFrames)
    memory: MemoryEvents = msgspec.field(default_factory=MemoryEvents)
    host: str | None = None  # the machine that recorded it (the trace's top-level host_name), when recorded
