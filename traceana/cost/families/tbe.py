"""FBGEMM table-batched embedding (TBE): the fused lookup of many embedding tables in one kernel
(`fbgemm::split_embedding_codegen_lookup_<optimizer>_function`) and its autograd node
(`torch::autograd::CppNode<SplitLookupFunction_<optimizer>_Op>`), whose backward kernels also
run the optimizer step on the rows that were looked up.

What a trace records. The forward call records the sizes of all its tensors but no int-list or
tensor contents: T tables (weights_offsets [T], D_offsets [T+1]), the flat weights of all tables
(dev_weights + uvm_weights [W]), the indices [L] and offsets [bags + 1] (bags = B*T for a fixed
batch B), the per-sample weights [L] when the bags are weighted, and for the row-wise optimizers
one optimizer-state element per row (momentum1 [R]), so W / R is the mean row width. The autograd
node records only its gradient input [B, total_D], where total_D is the sum of the T tables'
widths. cost/pair_tbe.py pairs each forward signature with the node of the same lookup and hands
each formula the other half (total_D to the forward, the forward's arguments to the node).

What stays unknown: how the L indices split across the tables, and which of them repeat. The
model therefore uses the mean width D = total_D / T (every table contributing the same number
of lookups) or, without a paired node, D = W / R, counts repeated rows per lookup (as
index.embedding does: the cache may serve repeats) and bounds the rows the optimizer updates by
U = min(L, R). Every TBE cost is therefore marked estimated, with these assumptions as notes.

Forward (pooled, sum): read indices, offsets, per-sample weights and one D-wide row per lookup,
write the pooled output [bags, D] (= [B, total_D]); one add per looked-up element (a multiply
and an add when weighted). The output dtype (an int argument) is not recorded: fp32 assumed.

Backward + optimizer (the fused 'exact' kernels): read indices and offsets, sort the L (row,
lookup) pairs (one write and one read of 8 + 4 B each: the floor of a radix sort), read one
D-wide gradient row per lookup and accumulate it into its row (1 add per element, 2 when
weighted), then update the U rows: read and write the weights and the optimizer state. Optimizer
FLOPs per updated element / per updated row are in OPTIMIZERS.
"""

from __future__ import annotations


from traceana.cost.families._common import make, shape_problem
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_flops, fmt_int, fmt_num
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

import msgspec


class Optimizer(msgspec.Struct, frozen=True):
    """The state and arithmetic of one fused optimizer, per updated weight element and per row.

    state_per_row / state_per_element: fp32 state elements read and written per updated row /
    element; flops_per_element / flops_per_row: the update's arithmetic (counted from the update
    rule, each + - * / sqrt as 1)."""

    state_per_row: int
    state_per_element: int
    flops_per_element: int
    flops_per_row: int
    rule: str


_ROWWISE_ADAGRAD = Optimizer(1, 0, 4, 5, "row-wise Adagrad: m += sum(g^2)/D (2 per element + 2 per row); "
                                         "w -= lr*g/(sqrt(m)+eps) (2 per element + 3 per row)")
OPTIMIZERS: dict[str, Optimizer] = {
    "sgd": Optimizer(0, 0, 2, 0, "SGD: w -= lr*g (2 per element)"),
    "approx_sgd": Optimizer(0, 0, 2, 0, "SGD: w -= lr*g (2 per element)"),
    "rowwise_adagrad": _ROWWISE_ADAGRAD,
    "approx_rowwise_adagrad": _ROWWISE_ADAGRAD,
    "rowwise_adagrad_with_counter": _ROWWISE_ADAGRAD,
    "rowwise_adagrad_with_weight_decay": _ROWWISE_ADAGRAD,
    "rowwise_weighted_adagrad": _ROWWISE_ADAGRAD,
    "adagrad": Optimizer(0, 1, 7, 0, "Adagrad: m += g^2 (2); w -= lr*g/(sqrt(m)+eps) (5) per element"),
    "adam": Optimizer(0, 2, 13, 0, "Adam: m1 = b1*m1+(1-b1)*g (3); m2 = b2*m2+(1-b2)*g^2 (4); "
                                   "w -= lr*m1/(sqrt(m2)+eps) (4, + 2 bias corrections) per element"),
}
# optimizers whose momentum1 has one element per row (argument 20 of the forward): W / R = mean width
_ROW_STATE = frozenset(k for k, o in OPTIMIZERS.items() if o.state_per_row)
_ALL_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "rowwise_adagrad_with_counter",
                   "rowwise_adagrad_with_weight_decay", "rowwise_weighted_adagrad", "adam", "partial_rowwise_adam",
                   "lamb", "partial_rowwise_lamb", "lars_sgd", "approx_sgd", "approx_rowwise_adagrad", "none",
                   "dense")
FORWARD = {f"fbgemm::split_embedding_codegen_lookup_{o}_function{cpu}": o
           for o in _ALL_OPTIMIZERS for cpu in ("", "_cpu")}
BACKWARD = {f"torch::autograd::CppNode<SplitLookupFunction_{o}_Op>": o for o in _ALL_OPTIMIZERS}
# The unified (PT2) entry points: the same lookup with the table tensors packed in TensorLists
FORWARD_PT2 = {f"fbgemm::split_embedding_codegen_lookup_{o}_function_pt2": o for o in _ALL_OPTIMIZERS}
FORWARD.update(FORWARD_PT2)
BACKWARD.update({f"torch::autograd::CppNode<SplitLookupFunction_{o}_Op_pt2>": o for o in _ALL_OPTIMIZERS})
# PT2 layout: (placeholder, weights [dev, uvm, placements, offsets, lxu_cache] (a TensorList),
# D_offsets, total_D, max_D, hash_size_cumsum, total_hash_size_bits, indices, offsets, pooling_mode,
# indice_weights, feature_requires_grad, output_dtype, aux_tensor, aux_int, aux_float, aux_bool,
# momentum1 [dev, uvm, placements, offsets] (a TensorList), ...)
_PT2_WEIGHTS, _PT2_D_OFFSETS, _PT2_INDICES, _PT2_OFFSETS, _PT2_PSW, _PT2_OUT_DTYPE, _PT2_MOMENTUM1 = \
    1, 2, 7, 8, 10, 12, 17
# FBGEMM SparseType codes (output_dtype) -> the profiler's dtype strings
_SPARSE_TYPE = {"0": "float", "1": "c10::Half", "5": "c10::BFloat16", "6": "c10::Float8_e4m3fn"}
OUT_ITEMSIZE = 4  # the pooled output's dtype is an int argument (never recorded): fp32, FBGEMM's default

# argument positions of the forward (the prefix every optimizer's lookup function shares)
_DEV_W, _UVM_W, _W_OFFSETS, _D_OFFSETS, _INDICES, _OFFSETS, _PSW, _MOMENTUM1 = 1, 2, 5, 6, 11, 12, 14, 20
UNPAIRED = "no autograd node of this lookup in the trace"


class Lookup(msgspec.Struct, frozen=True):
    """What one forward call's recorded sizes say about the lookup."""

    optimizer: str
    tables: int  # T
    bags: int  # B*T (len(offsets) - 1)
    lookups: int  # L
    weights: int  # W: elements of all tables together
    rows: int | None  # R: rows of all tables (row-wise optimizers only)
    weight: TensorArg
    indices: TensorArg
    offsets: TensorArg
    weighted: bool  # per-sample weights [L] recorded
    psw: TensorArg | None
    uvm: int = 0  # elements of the tables held in host (UVM) memory

    @property
    def batch(self) -> int | None:
        """B, when every table has the same number of bags."""
        return self.bags // self.tables if self.tables and self.bags % self.tables == 0 else None

    @property
    def mean_width(self) -> float | None:
        """W / R: the mean row width over all rows (None without row-wise optimizer state)."""
        return self.weights / self.rows if self.rows else None


def _from_pt2(call: OpCall) -> OpCall | str:
    """A PT2 lookup call laid out as the classic one (the TensorLists unpacked to their positions).
    A TensorList records its members' sizes but not their dtype: the weights are taken as the
    output dtype (output_dtype, an FBGEMM SparseType code), fp32 when that is not recorded."""
    weights = call.tensor_list(_PT2_WEIGHTS)
    if not weights or len(weights) < 4:
        return (f"{call.name}: the weights TensorList (dev, uvm, placements, offsets, cache) was not recorded "
                "with its sizes")
    wtype = _SPARSE_TYPE.get(call.scalar(_PT2_OUT_DTYPE) or "0", "float")
    dims: list = [()] * 22
    types: list = [""] * 22
    for legacy, shape, ty in ((_DEV_W, weights[0], wtype), (_UVM_W, weights[1], wtype), (4, weights[2], "int"),
                              (_W_OFFSETS, weights[3], "long int")):
        dims[legacy], types[legacy] = shape, ty
    for legacy, pos in ((_D_OFFSETS, _PT2_D_OFFSETS), (_INDICES, _PT2_INDICES), (_OFFSETS, _PT2_OFFSETS),
                        (_PSW, _PT2_PSW)):
        if pos < len(call.dims):
            dims[legacy], types[legacy] = call.dims[pos], call.types[pos]
    m1 = call.tensor_list(_PT2_MOMENTUM1)
    if m1 and len(m1) >= 2:
        dims[_MOMENTUM1], types[_MOMENTUM1] = m1[0], "float"
        dims[_MOMENTUM1 + 1], types[_MOMENTUM1 + 1] = m1[1], "float"
    return OpCall(call.name, tuple(dims), tuple(types), None, None, call.kernel_names, call.extra)


def parse_forward(call: OpCall) -> Lookup | str:
    """The Lookup of a forward TBE call, or why its recorded arguments do not fit the layout."""
    opt = FORWARD.get(call.name)
    if opt is None:
        return f"{call.name} is not a table-batched embedding lookup"
    if call.name in FORWARD_PT2:
        bad = shape_problem(call)
        if bad:
            return f"{call.name}: {bad}"
        legacy = _from_pt2(call)
        if isinstance(legacy, str):
            return legacy
        call = legacy
    bad = shape_problem(call)
    if bad:
        return f"{call.name}: {bad}"
    t = {i: call.tensor(i) for i in (_DEV_W, _UVM_W, _W_OFFSETS, _D_OFFSETS, _INDICES, _OFFSETS, _PSW, _MOMENTUM1)}
    dev, uvm, woff, doff, idx, off = (t[i] for i in (_DEV_W, _UVM_W, _W_OFFSETS, _D_OFFSETS, _INDICES, _OFFSETS))
    if any(x is None or len(x.shape) != 1 for x in (dev, woff, doff, idx, off)):
        return (f"{call.name}: the recorded arguments do not match the lookup layout (weights, weights_offsets, "
                f"D_offsets, indices and offsets as 1-D tensors at positions 1, 5, 6, 11, 12)")
    tables = woff.shape[0]
    if tables < 1 or doff.shape[0] != tables + 1 or off.shape[0] < 1:
        return (f"{call.name}: weights_offsets {woff.shape} and D_offsets {doff.shape} do not describe "
                f"T and T+1 tables, or offsets {off.shape} is empty")
    in_uvm = uvm.numel if uvm is not None and len(uvm.shape) == 1 and uvm.dtype == dev.dtype else 0
    weights = dev.numel + in_uvm
    weight = dev if dev.numel else (uvm if uvm is not None else dev)
    lookups = idx.shape[0]
    psw = t[_PSW]
    weighted = psw is not None and psw.shape == (lookups,) and lookups > 0
    rows = None
    m1 = t[_MOMENTUM1]
    if opt in _ROW_STATE and m1 is not None and len(m1.shape) == 1:
        uvm_m1 = call.tensor(_MOMENTUM1 + 1)
        rows = m1.numel + (uvm_m1.numel if uvm_m1 is not None and len(uvm_m1.shape) == 1 else 0)
        if rows <= 0 or weights < rows:
            rows = None
    return Lookup(opt, tables, off.shape[0] - 1, lookups, weights, rows, weight, idx, off, weighted,
                  psw if weighted else None, in_uvm)


def _width(lk: Lookup, total_d: int | None) -> tuple[float, str] | None:
    """(mean width D per lookup, how it was found)."""
    if total_d:
        return total_d / lk.tables, (f"D = total_D / T = {fmt_int(total_d)} / {lk.tables} = {fmt_num(round(total_d / lk.tables, 2))} "
                                     f"(total_D from the gradient of the autograd node; every table assumed to "
                                     f"get the same number of lookups)")
    if lk.mean_width:
        d = lk.mean_width
        return d, (f"D = W / R = {fmt_int(lk.weights)} / {fmt_int(lk.rows)} = {fmt_num(round(d, 2))} (the mean row "
                   f"width over all rows: {UNPAIRED}; every row assumed equally likely to be looked up)")
    return None


def _per_lookup(lk: Lookup, d: float, itemsize: float) -> str:
    return f"L*D*{fmt_num(itemsize)} = {fmt_int(lk.lookups)}*{fmt_num(round(d, 2))}*{fmt_num(itemsize)} = " \
           f"{fmt_int(round(lk.lookups * d * itemsize))} B"


def _rows_read(tr: Traffic, lk: Lookup, d: float) -> Traffic:
    """Each distinct row once: min(L*D, W) elements (W caps it when lookups repeat rows)."""
    ws = lk.weight.itemsize
    if lk.lookups * d <= lk.weights:
        return tr.raw("read", "rows", lk.lookups * d * ws,
                      f"L*D*{fmt_num(ws)} = {fmt_int(lk.lookups)}*{fmt_num(round(d, 2))}*{fmt_num(ws)}")
    return tr.raw("read", "rows", lk.weights * ws,
                  f"all tables once, W*{fmt_num(ws)} = {fmt_int(lk.weights)}*{fmt_num(ws)}, as L*D > W")


def _uvm_note(lk: Lookup) -> list[str]:
    if not lk.uvm:
        return []
    return [f"{fmt_int(lk.uvm)} of the {fmt_int(lk.weights)} table elements live in host (UVM) memory: rows "
            f"read from there cross PCIe/NVLink, so the DRAM roof understates their cost"]


def _common_reads(tr: Traffic, lk: Lookup) -> Traffic:
    tr.read("indices", lk.indices).read("offsets", lk.offsets)
    if lk.psw is not None:
        tr.read("per-sample weights", lk.psw)
    return tr


def _accumulate_flops(lk: Lookup, d: float) -> tuple[float, str]:
    per = 2 if lk.weighted else 1
    flops = lk.lookups * d * per
    what = "multiply-adds" if lk.weighted else "adds"
    return flops, f"L*D*{per} = {fmt_int(lk.lookups)}*{fmt_num(round(d, 2))}*{per} {what} = {fmt_flops(flops)}"


def forward(call: OpCall) -> Cost | Unmodelled:
    lk = parse_forward(call)
    if isinstance(lk, str):
        return Unmodelled(lk)
    total_d = call.get("tbe_total_D")
    w = _width(lk, total_d)
    if w is None:
        return Unmodelled(f"{call.name}: the tables' widths are not recorded ({UNPAIRED}, and the "
                          f"{lk.optimizer} optimizer keeps no per-row state that would give the row count)",
                          cause="input_not_recorded")
    d, how = w
    tr = _common_reads(Traffic(), lk)
    _rows_read(tr, lk, d)
    b = lk.batch
    out_size, out_note = OUT_ITEMSIZE, "output dtype not recorded: fp32 assumed"
    code = call.scalar(_PT2_OUT_DTYPE) if call.name in FORWARD_PT2 else None
    if code in _SPARSE_TYPE:
        out_size = lk.weight.itemsize
        out_note = (f"output_dtype {code} ({lk.weight.dtype}); the weights' dtype (a TensorList's, not recorded) "
                    "taken as the same")
    if total_d and b is not None:
        tr.write("pooled out", (b, total_d), out_size)
    else:
        tr.raw("write", "pooled out", lk.bags * d * out_size,
               f"bags*D*{out_size:g} = {fmt_int(lk.bags)}*{fmt_num(round(d, 2))}*{out_size:g}")
    flops, fexpr = _accumulate_flops(lk, d)
    notes = [how, f"pooled (sum) lookup; counted per lookup, the rows would be {_per_lookup(lk, d, lk.weight.itemsize)}: "
                  f"repeats of a row are served by the cache", out_note] + _uvm_note(lk)
    return make(flops, tr, "index", lk.weight.dtype, fexpr, estimated=True, notes=notes)


def backward(call: OpCall) -> Cost | Unmodelled:
    opt = BACKWARD.get(call.name)
    fwd = call.get("tbe_forward")
    grad = call.tensor(0)
    if fwd is None or grad is None:
        return Unmodelled("autograd node of the table-batched embedding: its recorded dims are only its gradient "
                          "input [B, total_D]; no forward lookup in the trace could be paired with it, so the "
                          "indices it sorts and the rows it updates are unknown", cause="input_not_recorded")
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    lk = parse_forward(fwd) if isinstance(fwd, OpCall) else "the paired lookup is not an op call"
    if isinstance(lk, str):
        return Unmodelled(lk)
    if len(grad.shape) != 2 or lk.batch != grad.shape[0]:
        return Unmodelled(f"gradient {grad.shape} does not match the paired lookup ({lk.bags} bags of {lk.tables} "
                          "tables): its own lookup is not in the trace", cause="input_not_recorded")
    optimizer = OPTIMIZERS.get(opt or "")
    if optimizer is None:
        return Unmodelled(f"the fused {opt} optimizer step of the table-batched embedding is not modelled")
    d, how = _width(lk, grad.shape[1])
    u = min(lk.lookups, lk.rows) if lk.rows else lk.lookups
    u_how = (f"U = min(L, R) = min({fmt_int(lk.lookups)}, {fmt_int(lk.rows)}) = {fmt_int(u)}" if lk.rows
             else f"U = L = {fmt_int(lk.lookups)} (row count not recorded)")
    tr = _common_reads(Traffic(), lk)
    tr.raw("write+read", "sorted (row, lookup) pairs", 2 * lk.lookups * 12, f"2*L*(8+4) = 2*{fmt_int(lk.lookups)}*12")
    gs = grad.itemsize
    if lk.lookups * d <= grad.numel:
        tr.raw("read", "gradient rows", lk.lookups * d * gs,
               f"L*D*{fmt_num(gs)} = {fmt_int(lk.lookups)}*{fmt_num(round(d, 2))}*{fmt_num(gs)}")
    else:
        tr.read("gradient (once)", grad)
    ws = lk.weight.itemsize
    if u * d <= lk.weights:
        tr.raw("read+write", "updated rows", 2 * u * d * ws,
               f"2*U*D*{fmt_num(ws)} = 2*{fmt_int(u)}*{fmt_num(round(d, 2))}*{fmt_num(ws)}")
    else:
        tr.raw("read+write", "updated rows", 2 * lk.weights * ws,
               f"all tables, 2*W*{fmt_num(ws)} = 2*{fmt_int(lk.weights)}*{fmt_num(ws)}, as U*D > W")
    state = optimizer.state_per_row * u + optimizer.state_per_element * u * d
    if state:
        tr.raw("read+write", "optimizer state", 2 * state * 4,
               f"2*{fmt_int(round(state))}*4 (fp32: {optimizer.state_per_row} per row, "
               f"{optimizer.state_per_element} per element)")
    acc, acc_expr = _accumulate_flops(lk, d)
    upd = u * (optimizer.flops_per_element * d + optimizer.flops_per_row)
    flops = acc + upd
    fexpr = (f"gradient accumulation {acc_expr} + update U*({optimizer.flops_per_element}*D + "
             f"{optimizer.flops_per_row}) = {fmt_int(u)}*({optimizer.flops_per_element}*{fmt_num(round(d, 2))} + "
             f"{optimizer.flops_per_row}) = {fmt_flops(upd)}; total {fmt_flops(flops)}")
    notes = [how, f"rows updated: {u_how}, an upper bound (repeated indices update a row once)",
             f"gradient read once: counted per lookup it would be {_per_lookup(lk, d, gs)} (repeats of a bag "
             f"are served by the cache)",
             f"optimizer step fused into the backward: {optimizer.rule}",
             "sort counted as one write and one read of the (row, lookup) pairs: the floor of a radix sort"]
    notes += _uvm_note(lk)
    return make(flops, tr, "index", lk.weight.dtype, fexpr, estimated=True, notes=notes)


formula(*FORWARD)(forward)
formula(*BACKWARD)(backward)
