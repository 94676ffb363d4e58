"""Every op signature recorded in the real traces under ../shared/traces goes through the cost stage:
no formula may raise, and the common ops must be modelled."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from tests.conftest import SHARED
from traceana.cost import Cost, OpCall, Unmodelled, op_cost
from traceana.cost.registry import lookup

TRACES = SHARED / "traces"

# The profiler never records the index tensors of aten::index (a Tensor?[] argument): its output
# size is unknown, so it stays Unmodelled.
NEVER_RECORDED = {"aten::index"}
# ragged paged attention's KV lengths are kv_indptr's contents, which no profiler records: opaque
# (cause lengths_not_recorded) with its formula per KV token in the reason
NEVER_RECORDED |= {"sglang_profiler::attention_paged_attention_ragged_100"}
# Costed from the event's other args (record_param_comms' "Collective name", "Group size", ...), its
# kernel names, or facts the load stage puts on the op (vllm::moe_forward's expert-weight views
# recorded inside it: load/layer_weights.py), which this module's own parse of the traces does not
# carry: test_cost_comm_custom.py, test_cost_serving.py and the coverage table cover them.
NEEDS_EVENT_ARGS = {"record_param_comms", "vllm::moe_forward"}


class _Event(msgspec.Struct):
    name: str = ""
    cat: str = ""
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] = []


def _tup(x):
    return tuple(_tup(v) for v in x) if isinstance(x, list) else x


def _calls_in(path: Path):
    raw = gzip.open(path).read()
    try:
        events = msgspec.json.Decoder(_Trace).decode(raw).traceEvents
    except msgspec.ValidationError:
        return
    for e in events:
        if e.cat not in ("cpu_op", "Operator"):
            continue
        args = msgspec.json.decode(e.args)
        if not isinstance(args, dict) or "Input Dims" not in args:
            continue
        strides, concrete = args.get("Input Strides"), args.get("Concrete Inputs")
        yield OpCall(
            name=e.name,
            dims=_tup(args["Input Dims"]),
            types=tuple(args.get("Input type") or ()),
            strides=_tup(strides) if strides is not None else None,
            concrete=tuple(concrete) if concrete is not None else None,
        )


@pytest.fixture(scope="module")
def signatures() -> dict[OpCall, tuple[int, bool]]:
    """Unique signature -> (calls, whether its trace records Concrete Inputs: torch >= 2.4)."""
    if not TRACES.is_dir():
        pytest.skip(f"no traces at {TRACES}")
    seen: dict[OpCall, tuple[int, bool]] = {}
    for path in sorted(TRACES.rglob("*.json.gz")):
        calls = Counter(_calls_in(path))
        modern = any(c.concrete is not None for c in calls)
        for call, n in calls.items():
            old_n, old_modern = seen.get(call, (0, False))
            seen[call] = (old_n + n, old_modern or modern)
    if not seen:
        pytest.skip("the traces hold no op shapes")
    return seen


def test_no_formula_raises(signatures):
    for call in signatures:
        fn = lookup(call.name)
        if fn is None or not call.dims:
            continue
        r = fn(call)  # the formula itself, without op_cost's safety net
        assert isinstance(r, (Cost, Unmodelled)), call
        if isinstance(r, Cost):
            assert r.flops >= 0 and r.bytes >= 0, call
            assert r.family in {"gemm", "conv", "attention", "pointwise", "reduction", "norm", "memory",
                                "index", "comm", "compiled", "other"}
            assert r.matrix == (r.family in ("gemm", "conv", "attention")) or r.family == "compiled"
            assert r.flops_expr and r.bytes_expr.endswith(" B")
        assert isinstance(op_cost(call), (Cost, Unmodelled))


def _shares(signatures, modern_only: bool):
    total, modelled, calls = Counter(), Counter(), Counter()
    for call, (n, modern) in signatures.items():
        if lookup(call.name) is None or (modern_only and not modern):
            continue
        total[call.name] += 1
        calls[call.name] += n
        modelled[call.name] += isinstance(op_cost(call), Cost)
    return total, modelled, calls


def test_common_ops_are_modelled_in_modern_traces(signatures):
    """Traces with Concrete Inputs: every common registered op is costed for >= 85% of its
    signatures (old traces lack TensorList shapes, sizes and strides, and some of their records
    are corrupt; even new ones can leave a TensorList's shapes out, as one aten::cat here)."""
    total, modelled, calls = _shares(signatures, modern_only=True)
    common = [name for name, n in calls.most_common() if n >= 10 and name not in NEVER_RECORDED | NEEDS_EVENT_ARGS]
    assert len(common) > 40
    low = {name: f"{modelled[name]}/{total[name]}" for name in common if modelled[name] < 0.85 * total[name]}
    assert not low, f"ops modelled for under 85% of their signatures: {low}"


def test_most_signatures_are_modelled_in_all_traces(signatures):
    total, modelled, _ = _shares(signatures, modern_only=False)
    assert sum(modelled.values()) >= 0.95 * sum(total.values())


def test_matrix_ops_fully_modelled_in_modern_traces(signatures):
    """GEMM / conv / attention signatures with Concrete Inputs are always costed exactly."""
    for call in signatures:
        short = call.name.removeprefix("aten::")
        if call.concrete is None or short not in ("mm", "addmm", "bmm", "baddbmm", "linear", "convolution",
                                                  "_scaled_dot_product_flash_attention",
                                                  "_flash_attention_forward", "convolution_backward"):
            continue
        r = op_cost(call)
        assert isinstance(r, Cost) and not r.estimated, (call, r)
