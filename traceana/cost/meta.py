"""The meta-tensor fallback: bytes for an aten op that has no formula, by running it on meta tensors.

Meta tensors carry shape, dtype and strides but no data, so running the real aten op on them
gives its output shapes (and so its bytes: inputs read once at their stored size, outputs
written once) at no memory cost. FLOPs cannot be known this way: they are 0 and the Cost is
marked estimated, with a note. Used only for ops with no formula (never on the formula path),
only when asked (`traceana report --meta`, or torch already imported: `import torch` alone
costs ~2.6 s, which the default report path never pays), at most MAX_SIGNATURES signatures
and TOTAL_BUDGET_S seconds per process, each run cut off after CALL_BUDGET_S when the platform
allows (a SIGALRM timer in the main thread). Anything that goes wrong leaves the op unmodelled
with the reason; nothing here raises.

Arguments are rebuilt from the recorded inputs: tensors as empty_strided meta tensors with the
recorded dims, dtype and strides; TensorLists from their recorded shapes (in the first tensor
argument's dtype, TensorList dtypes are not recorded); scalars and int lists from `Concrete
Inputs`; dtype enums as torch dtypes; anything unrecorded falls back to the schema default.
The overload is the first whose schema has exactly as many arguments as were recorded and
accepts them; any `device` argument is forced to "meta" so that nothing is ever allocated.
"""

from __future__ import annotations

import importlib.util
import signal
import threading
import time
from math import prod

from traceana.cost.dtypes import dtype_info
from traceana.cost.families._common import SCALAR_TYPE, is_python_scalar, itemsize_from_kernels
from traceana.cost.shapes import Traffic, parse_bool, parse_float, parse_int, parse_ints
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

MAX_SIGNATURES = 200
CALL_BUDGET_S = 5.0  # the first meta run in a process warms torch up (~1 s)
TOTAL_BUDGET_S = 30.0
SOURCE = ("source", "meta")

_cache: dict[tuple, Cost | Unmodelled] = {}
_spent = {"runs": 0, "seconds": 0.0}
_available: list[bool] = []


def available() -> bool:
    """torch can be imported (checked without importing it)."""
    if not _available:
        try:
            _available.append(importlib.util.find_spec("torch") is not None)
        except (ImportError, ValueError):
            _available.append(False)
    return _available[0]


def meta_cost(call: OpCall) -> Cost | Unmodelled:
    """Cached, budgeted run_on_meta: the fallback the cost stage uses."""
    key = (call.name, call.dims, call.types, call.strides, call.concrete)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    if not available():
        return Unmodelled(f"no formula for {call.name} (meta fallback: torch is not installed)")
    if _spent["runs"] >= MAX_SIGNATURES or _spent["seconds"] >= TOTAL_BUDGET_S:
        return Unmodelled(f"no formula for {call.name} (meta fallback budget used up: at most "
                          f"{MAX_SIGNATURES} signatures or {TOTAL_BUDGET_S:g} s per run)")
    t0 = time.perf_counter()
    result = run_on_meta(call)
    _spent["runs"] += 1
    _spent["seconds"] += time.perf_counter() - t0
    _cache[key] = result
    return result


def run_on_meta(call: OpCall) -> Cost | Unmodelled:
    """Run the op on meta tensors built from the recorded inputs; Cost(bytes = inputs + outputs)."""
    try:
        return _run(call)
    except Exception as exc:  # noqa: BLE001 - any failure leaves the op unmodelled
        return Unmodelled(f"no formula for {call.name}; the meta-tensor fallback failed: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")


class _Skip(Exception):
    """This overload does not fit the recorded arguments."""


def _run(call: OpCall) -> Cost | Unmodelled:
    ns, sep, opname = call.name.partition("::")
    if ns != "aten" or not opname.isidentifier():  # only aten ops: others may have side effects
        return Unmodelled(f"no formula for {call.name} (not an aten op: no meta-tensor fallback)")
    import torch

    try:
        packet = getattr(getattr(torch.ops, ns), opname)
    except (AttributeError, RuntimeError):
        return Unmodelled(f"no formula for {call.name}, and torch has no such op to run on meta tensors")
    n = len(call.dims)
    names = sorted(packet.overloads(), key=lambda o: (o != "default", o))
    tried = []
    for ov in names:
        op = getattr(packet, ov)
        schema = op._schema
        if len(schema.arguments) != n:
            continue
        try:
            args, kwargs, reads = _arguments(torch, call, schema)
        except _Skip as why:
            tried.append(f"{ov}: {why}")
            continue
        try:
            out = _timed(lambda: op(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the next overload may fit
            tried.append(f"{ov}: {type(exc).__name__}")
            continue
        bound = list(args) + [kwargs.get(a.name) for a in schema.arguments[len(args):]]
        return _cost(call, schema, ov, reads, out, tuple(bound))
    why = "; ".join(tried[:3]) or f"no overload takes {n} arguments"
    return Unmodelled(f"no formula for {call.name}; no overload ran on meta tensors ({why})")


def _timed(fn):
    """fn() under a CALL_BUDGET_S timer when a SIGALRM timer can be used (main thread, Unix)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return fn()

    def alarm(signum, frame):
        raise TimeoutError(f"meta run took over {CALL_BUDGET_S:g} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CALL_BUDGET_S)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


_TORCH_DTYPES = {"fp32": "float32", "fp64": "float64", "fp16": "float16", "bf16": "bfloat16", "int64": "int64",
                 "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
                 "complex64": "complex64", "complex128": "complex128", "complex32": "complex32"}
_EXACT = {"c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
          "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
          "unsigned short": "uint16", "unsigned int": "uint32", "unsigned long": "uint64"}


def _torch_dtype(torch, type_str: str):
    name = _EXACT.get(type_str)
    if name is None:
        info = dtype_info(type_str)
        name = _TORCH_DTYPES.get(info[0]) if info else None
    dt = getattr(torch, name, None) if name else None
    if dt is None:
        raise _Skip(f"dtype {type_str!r} has no torch equivalent")
    return dt


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def _tensor(torch, shape, strides, type_str):
    if not isinstance(shape, tuple) or not all(isinstance(d, int) and 0 <= d < 2**48 for d in shape):
        raise _Skip("malformed dims")
    st = strides if isinstance(strides, tuple) and len(strides) == len(shape) and \
        all(isinstance(s, int) and s >= 0 for s in strides) else _contiguous(shape)
    return torch.empty_strided(shape, st, dtype=_torch_dtype(torch, type_str), device="meta")


_TYPE_STR = {"fp16": "c10::Half", "bf16": "c10::BFloat16", "fp32": "float", "fp64": "double",
             "int64": "long int", "int32": "int", "uint8": "unsigned char", "bool": "bool"}


def _list_dtype(call: OpCall) -> str:
    """TensorList members' dtype (never recorded): the kernel names' element size, else the first
    tensor argument's dtype, else float."""
    k = itemsize_from_kernels(call)
    if k is not None and k[1] in _TYPE_STR:
        return _TYPE_STR[k[1]]
    for t in call.types:
        if dtype_info(t) is not None:
            return t
    return "float"


def _arguments(torch, call: OpCall, schema):
    """Positional args, kwargs and the (label, TensorArg) inputs that are read."""
    args, kwargs, reads = [], {}, []
    for i, a in enumerate(schema.arguments):
        value = _argument(torch, call, i, a, reads)
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    return args, kwargs, reads


def _schema_type(a) -> tuple[str, bool]:
    """(base type, optional): 'Optional[List[int]]' -> ('List[int]', True)."""
    typ = str(a.type)
    if typ.startswith("Optional[") and typ.endswith("]"):
        return typ[9:-1], True
    return typ.rstrip("?"), typ.endswith("?")


def _argument(torch, call: OpCall, i: int, a, reads: list):
    base, optional = _schema_type(a)
    typ = str(a.type)
    rec_t = call.types[i] if i < len(call.types) else ""
    dims = call.dims[i]
    conc = call.scalar(i)
    strides = call.strides[i] if call.strides is not None and i < len(call.strides) else None
    if a.name in ("device",):
        return torch.device("meta")
    if a.name == "pin_memory":
        return False
    if base == "Tensor":
        if dtype_info(rec_t) is None:
            if optional and rec_t in ("", "None"):
                return None
            raise _Skip(f"argument {a.name} is not a recorded tensor")
        ta = TensorArg(dims, rec_t, strides if isinstance(strides, tuple) else None)
        if i and is_python_scalar(ta):  # a Python number: passed by value, promotes as a scalar
            v = parse_float(conc) if conc is not None else None
            return (v if v is not None else 1.0) if ta.dtype != "int64" else int(v if v is not None else 1)
        t = _tensor(torch, dims, strides, rec_t)
        writes_only = a.alias_info is not None and a.alias_info.is_write and a.is_out
        if not writes_only:
            reads.append((a.name, ta))
        return t
    if base in ("List[Tensor]", "List[Optional[Tensor]]"):
        shapes = call.tensor_list(i)
        if shapes is None:
            raise _Skip(f"argument {a.name}: TensorList sizes not recorded")
        dt = _list_dtype(call)
        out = []
        for j, s in enumerate(shapes):
            out.append(_tensor(torch, s, None, dt))
            reads.append((f"{a.name}[{j}]", TensorArg(s, dt)))
        return out
    if conc is None:
        if a.has_default_value():
            return a.default_value
        if optional:
            return None
        raise _Skip(f"argument {a.name} ({typ}) not recorded")
    if a.name in ("memory_format", "layout") and optional:
        return None
    if base == "int" and a.name == "dtype":  # a ScalarType: the enum value
        code = parse_int(conc)
        name = _TORCH_DTYPES.get(SCALAR_TYPE.get(code, "")) if code is not None else None
        v = getattr(torch, name) if name else None
    elif base in ("int", "SymInt"):
        v = parse_int(conc)
    elif base in ("List[int]", "List[SymInt]"):
        v = parse_ints(conc)
    elif base == "float":
        v = parse_float(conc)
    elif base == "bool":
        v = parse_bool(conc)
    elif base == "number":  # a Scalar
        v = parse_int(conc)
        if v is None:
            b = parse_bool(conc)
            v = b if b is not None else parse_float(conc)
    elif base == "List[bool]":
        v = [x.strip() == "True" for x in conc.strip("[]").split(",")] if conc.strip("[]") else []
    else:
        v = None
    if v is None:
        if a.has_default_value():
            return a.default_value
        if optional:
            return None
        raise _Skip(f"argument {a.name} ({typ}) = {conc!r} not understood")
    return v


def _outputs(out) -> list:
    if isinstance(out, (list, tuple)):
        flat = []
        for x in out:
            flat.extend(_outputs(x))
        return flat
    return [out]


def _cost(call: OpCall, schema, overload: str, reads: list, out, args: tuple = ()) -> Cost:
    import torch

    results = _outputs(out)
    returns = list(schema.returns)
    tr = Traffic()
    views = 0
    written = []
    for a, v in zip(schema.arguments, args):  # in-place / out= arguments: written
        if a.alias_info is not None and a.alias_info.is_write:
            written.extend(x for x in _outputs(v) if isinstance(x, torch.Tensor))
    for k, t in enumerate(results):
        if not isinstance(t, torch.Tensor):
            continue
        r = returns[k] if k < len(returns) else (returns[-1] if returns else None)
        alias = getattr(r, "alias_info", None) if r is not None else None
        if alias is not None:
            views += not alias.is_write  # a view of an input (no kernel writes it), or a mutated argument
            continue
        written.append(t)
    if views and not written:
        return Cost(0.0, 0.0, "other", _dtype(reads), False, "a view (meta fallback): 0", Traffic().expr(), True,
                    (f"no formula: {call.name}.{overload} run on meta tensors returns views of its inputs: "
                     "no DRAM traffic",), (SOURCE,))
    for label, ta in reads:
        tr.read(label, ta)
    for k, t in enumerate(written):
        shape = tuple(t.shape)
        tr.add("write", f"out{k}", shape, t.element_size())
    notes = (f"no formula: bytes from running {call.name}.{overload} on meta tensors (torch "
             f"{torch.__version__}): every input read once, every output written once; FLOPs not counted",)
    n = sum(prod(t.shape) for t in written)
    return Cost(0.0, tr.total, "other", _dtype(reads), False,
                f"not counted (meta fallback; {n:,} output elements) = 0", tr.expr(), True, notes, (SOURCE,))


def _dtype(reads: list) -> str:
    for _, t in reads:
        if t.dtype not in ("unknown", "int64", "int32", "bool"):
            return t.dtype
    return reads[0][1].dtype if reads else "fp32"
