"""Which tensor an op writes, and whether the next op reads it: the data-flow rules of fusion.

Everything here works on one op signature (a row: name, input_dims, input_types,
concrete_inputs) and follows the op's schema, never the shapes at hand:

  output    in-place ops (`mul_`, `clamp_`, `index_add_`) and `copy_` write their self argument;
            element-wise ops write the broadcast of their tensor inputs in the promoted dtype
            (the cost model's rules: traceana.cost.families.pointwise.output_tensor, out= tensors
            included); norms and softmax write their input's shape; reductions
            reduce the dims their `dim` argument names (from Concrete Inputs, or every dim when
            the overload takes none); `cat` concatenates along its dim. Anything else (GEMMs,
            index and scan ops, library ops, a reduction whose dims were not recorded) has no
            output the trace can prove, and starts no link.
  feeds     the next op reads the output when one of the inputs it reads is the same tensor up to a
            view that only adds or drops size-1 dims (same element count, same other dims, same
            dtype). Inputs it reads: an element-wise op's operands (not its out= tensor), a norm's
            input (and a norm backward's gradient), `copy_`'s source; ops that overwrite their
            self (`fill_`, `normal_`, `copy_`) do not read it. TensorList elements record no
            dtype: they match on shape alone. Factories that take a tensor for its dtype / shape
            only (`new_ones`, `zeros_like`) read none.
  breaks    library kernels (cuBLAS/cuDNN/MIOpen/NCCL/FBGEMM/CUTLASS/Tensile...), GEMMs,
            convolutions, attention, collectives, copies run as memcpy/memset, compiled (already
            fused) kernels and any op outside the aten namespace end a chain: torch.compile does
            not fuse through them.
"""

from __future__ import annotations

from math import prod

from traceana.cost.dtypes import NON_TENSOR, dtype_info
from traceana.cost.families._common import ITEMSIZE, dtype_from_enum
from traceana.cost.families.pointwise import output_tensor
from traceana.cost.types import OpCall
from traceana.link.kernel_names import parse

Tensor = tuple[tuple[int, ...], "str | None"]  # (shape, canonical dtype or None when not recorded)

FUSABLE_FAMILIES = frozenset({"pointwise", "reduction", "norm", "memory", "index", "resample"})
BREAK_CLASSES = frozenset({"gemm", "convolution", "attention", "communication", "memcpy/memset"})
# kernels of these libraries end a chain (a vendor library call, or a kernel Inductor already fused)
_NOT_LIBRARY = frozenset({"ATen", "custom", "CUDA/HIP runtime"})
_NORM_FWD = frozenset({"native_layer_norm", "native_group_norm", "native_batch_norm", "_fused_rms_norm", "layer_norm",
                       "rms_norm", "group_norm", "batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm",
                       "miopen_batch_norm"})
_NORM = _NORM_FWD | {"native_layer_norm_backward", "native_group_norm_backward", "native_batch_norm_backward",
                     "_fused_rms_norm_backward", "_softmax_backward_data", "_log_softmax_backward_data",
                     "cudnn_batch_norm_backward", "miopen_batch_norm_backward"}
# in-place ops that overwrite their self without reading it
_OVERWRITE = frozenset({"fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_",
                        "geometric_", "log_normal_", "cauchy_", "copy_", "resize_", "set_"})
# factories that take a tensor only for its dtype / device / shape (`x.new_ones(...)`, `torch.zeros_like(x)`)
_LIKE = frozenset({"new_ones", "new_zeros", "new_full", "new_empty", "new_empty_strided", "ones_like", "zeros_like",
                   "full_like", "empty_like", "rand_like", "randn_like", "randint_like"})
_SOFTMAX = frozenset({"_softmax", "_log_softmax", "softmax", "log_softmax", "_safe_softmax"})
# reductions: the index of their `dim` argument
_REDUCE_DIM = {"sum": 1, "mean": 1, "prod": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "argmax": 1, "argmin": 1,
               "all": 1, "any": 1, "var": 1, "std": 1, "logsumexp": 1, "nansum": 1, "norm": 2,
               "linalg_vector_norm": 2}
_GEMM = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear"})
_LOSS = frozenset({"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                   "binary_cross_entropy_with_logits"})
REDUCTIONS = frozenset(_REDUCE_DIM) | _LOSS
_INT_RESULT = {"argmax": "int64", "argmin": "int64"}
def short(name: str) -> str:
    return name.split("::", 1)[-1]


def in_place(name: str) -> bool:
    n = short(name)
    return n.endswith("_") and not n.endswith("__") and not n.startswith("_foreach")


def _args(row: dict) -> list[tuple[object, str]]:
    dims, types = row.get("input_dims") or [], row.get("input_types") or []
    return list(zip(dims, types))


def _shape(d: object) -> tuple[int, ...] | None:
    if isinstance(d, (list, tuple)) and all(type(x) is int and x >= 0 for x in d):
        return tuple(d)
    return None


def tensor_args(row: dict) -> list[tuple[int, Tensor, float]]:
    """(argument index, (shape, dtype), bytes per element) of each single-tensor argument."""
    out = []
    for i, (d, t) in enumerate(_args(row)):
        info = dtype_info(t) if t not in NON_TENSOR else None
        s = _shape(d)
        if info and s is not None:
            out.append((i, (s, info[0]), info[1]))
    return out


def _list_args(row: dict) -> list[tuple[int, tuple[int, ...]]]:
    """(argument index, shape) of each TensorList element (no dtype recorded)."""
    out = []
    for i, (d, t) in enumerate(_args(row)):
        if t == "TensorList" and isinstance(d, (list, tuple)):
            out.extend((i, s) for s in map(_shape, d) if s is not None and s)
    return out


def _concrete(row: dict, i: int) -> str | None:
    c = row.get("concrete_inputs") or []
    v = c[i] if i < len(c) else None
    return v if isinstance(v, str) and v != "" else None


def _ints(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        v = [int(x) for x in text.strip("[]() ").split(",") if x.strip()]
    except ValueError:
        return None
    return v


def _reduce_out(row: dict, name: str, ts: list[tuple[int, Tensor, float]]) -> Tensor | None:
    if not ts or ts[0][0] != 0:
        return None
    src, dt = ts[0][1]
    types = row.get("input_types") or []
    dt = _INT_RESULT.get(name) or ("bool" if name in ("all", "any") else dt)
    if name in ("sum", "prod", "nansum") and (dt == "bool" or dt.startswith(("int", "uint"))):
        dt = "int64"
    k = _REDUCE_DIM[name]
    if len(types) > k + 2 and types[-1] == "" and _concrete(row, len(types) - 1):
        dt = dtype_from_enum(_concrete(row, len(types) - 1))  # an explicit dtype= argument
        if dt is None:
            return None
    if k >= len(types) or (types[k] == "" and _concrete(row, k) is None):
        return (), dt  # no dim argument (or dim=None): every dim reduced
    dims = _ints(_concrete(row, k))
    if not dims:
        return None  # the reduced dims were not recorded
    axes = {d % len(src) for d in dims if -len(src) <= d < len(src)} if src else set()
    if len(axes) != len(dims):
        return None
    if _concrete(row, k + 1) == "True":  # keepdim
        return tuple(1 if i in axes else s for i, s in enumerate(src)), dt
    return tuple(s for i, s in enumerate(src) if i not in axes), dt


def _cat_out(row: dict) -> Tensor | None:
    ls = [s for _, s in _list_args(row)]
    if not ls or len({len(s) for s in ls}) != 1:
        return None
    rank = len(ls[0])
    dim = _ints(_concrete(row, 1))
    if dim and len(dim) == 1 and -rank <= dim[0] < rank:
        axis = dim[0] % rank
    else:
        diff = [i for i in range(rank) if len({s[i] for s in ls}) > 1]
        if len(diff) != 1:
            return None  # the axis cannot be told from the shapes
        axis = diff[0]
    if any(s[i] != ls[0][i] for s in ls for i in range(rank) if i != axis):
        return None
    return tuple(sum(s[axis] for s in ls) if i == axis else ls[0][i] for i in range(rank)), None


def _gemm_out(name: str, ts: list[tuple[int, Tensor, float]]) -> Tensor | None:
    """C of a matrix multiply (used to say where a chain's input comes from; GEMMs never join one)."""
    mats = [t for _, t, _ in ts if len(t[0]) >= 2]
    if len(mats) < 2:
        return None
    if name == "linear":
        (x, dt), (w, _) = mats[0], mats[1]
        return x[:-1] + (w[0],), dt
    (a, dt), (b, _) = (mats[-2], mats[-1]) if name in ("addmm", "baddbmm") else (mats[0], mats[1])
    return (a[:-1] + (b[-1],), dt) if a[-1] == b[-2] else None


def output(row: dict) -> Tensor | None:
    """(shape, dtype) of the tensor the op writes, or None when the trace cannot tell."""
    name = short(row["name"])
    if not row["name"].startswith("aten::"):
        return None
    ts = tensor_args(row)
    if name == "cat":
        return _cat_out(row)
    if in_place(name) or name == "copy_":
        return ts[0][1] if ts and ts[0][0] == 0 else None
    if name in _REDUCE_DIM:
        return _reduce_out(row, name, ts)
    if name in _LOSS:  # the last argument is the reduction: 0 none, 1 mean, 2 sum
        red = _concrete(row, len(row.get("input_types") or []) - 1)
        if red not in ("0", "1", "2") or not ts or ts[0][0] != 0:
            return None
        return (ts[0][1] if red == "0" else ((), ts[0][1][1]))
    if name in _NORM or name in _SOFTMAX:
        if not ts or ts[0][0] != 0:
            return None
        shape, dt = ts[0][1]
        if name in _SOFTMAX and _concrete(row, 2) == "True":
            dt = "fp32"  # half_to_float
        return shape, dt
    if name in _GEMM:
        return _gemm_out(name, ts)
    pw = output_tensor(_call(row))
    return (pw[0], pw[1]) if pw and pw[1] in ITEMSIZE else None


def _call(row: dict) -> OpCall:
    return OpCall(row["name"], tuple(row.get("input_dims") or ()), tuple(row.get("input_types") or ()),
                  concrete=tuple(row.get("concrete_inputs") or ()) or None)


def _read_args(row: dict) -> set[int] | None:
    """Argument positions the op reads data from (None: every tensor argument)."""
    name = short(row["name"])
    if name in _NORM_FWD or name in _SOFTMAX:
        return {0}
    if name in _NORM:
        return {0, 1}  # a norm backward: the gradient and the forward input (not weights / statistics)
    pw = output_tensor(_call(row)) if row["name"].startswith("aten::") else None
    if pw:
        return set(pw[2])  # an element-wise op's operands, not its out= tensor
    return None


def same_tensor(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """a and b hold the same elements up to a view that only adds or drops size-1 dims."""
    return prod(a) == prod(b) and tuple(x for x in a if x != 1) == tuple(x for x in b if x != 1)


def reads(row: dict, t: Tensor) -> list[tuple[int, tuple[int, ...], float | None]]:
    """The inputs of `row` that may be the tensor t: (argument index, shape, bytes per element)."""
    shape, dt = t
    name = short(row["name"])
    which = _read_args(row)
    out: list[tuple[int, tuple[int, ...], float | None]] = []
    for i, (s, d), isz in tensor_args(row):
        if (i == 0 and (name in _OVERWRITE or name in _LIKE)) or (which is not None and i not in which):
            continue  # fill_, normal_, copy_ overwrite their self; weights, statistics and out= are not the data
        if same_tensor(s, shape) and (dt is None or d == dt):
            out.append((i, s, isz))
    for i, s in _list_args(row):
        if same_tensor(s, shape):
            out.append((i, s, None))
    return out


def fills_out_buffer(a: dict, b: dict) -> bool:
    """a only fills a constant (`fill_`, `zero_`) into a tensor shaped like b's out= argument: the
    buffer b writes its result into, not an input it reads."""
    t = output(a)
    which = _read_args(b)
    if short(a["name"]) not in ("fill_", "zero_") or t is None or which is None or in_place(b["name"]):
        return False
    return any(i not in which and same_tensor(s, t[0]) and d == t[1] for i, (s, d), _ in tensor_args(b))


def feeds(a: dict, b: dict) -> tuple[tuple[int, ...], float] | None:
    """(intermediate shape, bytes per element) when b reads the tensor a writes, else None."""
    t = output(a)
    hits = reads(b, t) if t is not None else []
    if not hits:
        return None
    isz = next((x for _, _, x in hits if x is not None), None)
    if isz is None and t[1] in ITEMSIZE:
        isz = float(ITEMSIZE[t[1]])
    return (t[0], isz) if isz is not None else None


def dense(shape: tuple[int, ...], strides: object) -> bool:
    """The strides lay the shape out without gaps or overlap (any dim order): what a freshly
    written output looks like. True when the strides were not recorded."""
    if not isinstance(strides, (list, tuple)) or len(strides) != len(shape) \
            or not all(type(x) is int for x in strides):
        return True
    step = 1
    for st, n in sorted((st, n) for st, n in zip(strides, shape) if n != 1):
        if st != step:
            return False
        step *= n
    return True


def breaks(row: dict) -> str | None:
    """Why the op ends a chain (a library, GEMM, collective or copy-engine op), or None."""
    name = row["name"]
    if not name.startswith("aten::"):
        return f"{name[:60]} is a library / custom op"
    fam = row.get("family")
    if fam in ("gemm", "conv", "attention", "comm", "compiled"):
        return f"{short(name)} is a {'collective' if fam == 'comm' else fam} op"
    for k in row.get("kernels") or []:
        kn = k["name"] if isinstance(k, dict) else str(k)
        k = parse(kn)
        cls = k.cls
        if cls in BREAK_CLASSES:
            return f"{short(name)} runs {'a memcpy/memset' if cls == 'memcpy/memset' else 'a ' + cls + ' kernel'}"
        if k.library not in _NOT_LIBRARY:
            return f"{short(name)} runs a library kernel ({kn[:50]})"
    if fam not in FUSABLE_FAMILIES:
        return f"{short(name)} is not an element-wise, reduction, norm or copy op"
    return None


class Flow:
    """The rules above over a list of rows, each fact worked out once per row (or pair of rows):
    loops over op instances look them up instead of re-deriving them per occurrence."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self._output: dict[int, Tensor | None] = {}
        self._feeds: dict[tuple[int, int], tuple[tuple[int, ...], float] | None] = {}
        self._reads_output: dict[tuple[int, int], bool] = {}
        self._breaks: dict[int, str | None] = {}
        self._args: dict[int, list[tuple[int, Tensor, float]]] = {}
        self._reads: dict[tuple[int, Tensor], list[tuple[int, tuple[int, ...], float | None]]] = {}

    def args(self, a: int) -> list[tuple[int, Tensor, float]]:
        """tensor_args of row a."""
        got = self._args.get(a)
        if got is None:
            got = self._args[a] = tensor_args(self.rows[a])
        return got

    def reads(self, b: int, t: Tensor) -> list[tuple[int, tuple[int, ...], float | None]]:
        """reads(row b, t)."""
        key = (b, t)
        got = self._reads.get(key)
        if got is None:
            got = self._reads[key] = reads(self.rows[b], t)
        return got

    def output(self, a: int) -> Tensor | None:
        if a not in self._output:
            self._output[a] = output(self.rows[a])
        return self._output[a]

    def feeds(self, a: int, b: int) -> tuple[tuple[int, ...], float] | None:
        key = (a, b)
        if key not in self._feeds:
            self._feeds[key] = feeds(self.rows[a], self.rows[b])
        return self._feeds[key]

    def reads_output(self, b: int, a: int) -> bool:
        """Whether row b reads a tensor like the one row a writes."""
        key = (b, a)
        if key not in self._reads_output:
            t = self.output(a)
            self._reads_output[key] = t is not None and bool(reads(self.rows[b], t))
        return self._reads_output[key]

    def breaks(self, a: int) -> str | None:
        if a not in self._breaks:
            self._breaks[a] = breaks(self.rows[a])
        return self._breaks[a]
