"""FBGEMM table-batched embedding: the lookup, its autograd node (backward + fused optimizer), and
the pre-pass that pairs them. Calls are built as hta/control.json.gz records them (29 arguments)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import synth as s
from tests.analyses import analysis
from traceana.cost import Cost, OpCall, Unmodelled, op_cost
from traceana.cost.pair_tbe import pair
from traceana.cost.recover import cost_variants

FWD, BWD, TYPES = s.TBE_FWD, s.TBE_BWD, s.TBE_TYPES


def fwd(weights=96000, tables=1, lookups=61072, bags=8192, rows=1000, weighted=True, name=FWD, extra=()):
    dims, types = s.tbe_lookup_args(weights, tables, lookups, bags, rows, weighted)
    return OpCall(name, dims, types, None, None, (), tuple(extra))


def bwd(b=8192, total_d=96, forward=None):
    return OpCall(BWD, ((b, total_d),), ("float",), None, None, (),
                  (("tbe_forward", forward),) if forward is not None else ())


def cost(c: OpCall) -> Cost:
    r = op_cost(c)
    assert isinstance(r, Cost), r
    return r


def test_lookup_alone_uses_the_mean_row_width():
    c = cost(fwd())
    # D = W / R = 96000 / 1000 = 96; L*D = 61072*96 = 5,862,912 > W, so every row is read once: 96000*4
    idx, off, psw, rows, out = 61072 * 8, 8193 * 8, 61072 * 4, 96000 * 4, 8192 * 96 * 4
    assert c.bytes == idx + off + psw + rows + out == 4328136  # 488,576 + 65,544 + 244,288 + 384,000 + 3,145,728
    assert c.flops == 61072 * 96 * 2 == 11725824  # L*D*2: a multiply-add per element (weighted bags)
    assert c.estimated and c.family == "index" and c.dtype == "fp32"
    assert any("W / R" in n for n in c.notes)


def test_lookup_paired_uses_total_d_and_reads_rows_per_lookup_when_they_fit():
    c = cost(fwd(weights=7487072, tables=122, lookups=15807216, bags=999424, rows=90837, weighted=False,
                 extra=(("tbe_total_D", 8720),)))
    d = 8720 / 122  # D = total_D / T = 71.48
    # L*D = 15807216*71.48 = 1.13e9 > W = 7,487,072: the tables are read once
    expect = 15807216 * 8 + 999425 * 8 + 7487072 * 4 + 8192 * 8720 * 4  # indices, offsets, rows, out [B, total_D]
    assert c.bytes == expect == 450138376  # 126,457,728 + 7,995,400 + 29,948,288 + 285,736,960
    assert c.flops == pytest.approx(15807216 * d)  # one add per looked-up element = 1.13e9
    assert "total_D / T" in c.notes[0]


def test_lookup_rows_counted_per_lookup_below_the_table_size():
    c = cost(fwd(weights=1_000_000, rows=1000, lookups=100, bags=10, weighted=False))
    # D = 1000; L*D = 100*1000 = 100,000 <= W: read 100,000*4
    assert c.bytes == 100 * 8 + 11 * 8 + 100_000 * 4 + 10 * 1000 * 4 == 440888


def test_node_with_its_lookup_counts_sort_gradient_rows_and_optimizer_state():
    c = cost(bwd(forward=fwd()))
    # U = min(L, R) = min(61072, 1000) = 1000 rows updated, D = 96
    reads = 61072 * 8 + 8193 * 8 + 61072 * 4  # indices, offsets, per-sample weights
    sort = 2 * 61072 * 12  # (row, lookup) pairs written and read once: 1,465,728
    grad = 8192 * 96 * 4  # L*D > B*total_D: the gradient read once = 3,145,728
    rows = 2 * 1000 * 96 * 4  # read + write the updated rows = 768,000
    state = 2 * 1000 * 4  # row-wise Adagrad: one fp32 per row, read + write = 8,000
    assert c.bytes == reads + sort + grad + rows + state == 6185864
    # accumulate L*D*2 = 11,725,824 (weighted) + update U*(4*D + 5) = 1000*389 = 389,000
    assert c.flops == 11725824 + 389000
    assert c.estimated and any("U = min(L, R)" in n for n in c.notes)


def test_unpaired_node_and_unknown_widths_stay_unmodelled_with_the_reason():
    r = op_cost(bwd())
    assert isinstance(r, Unmodelled) and "paired" in r.reason
    sgd = fwd(name="fbgemm::split_embedding_codegen_lookup_sgd_function")
    r = op_cost(sgd)  # SGD keeps no per-row state: no R, so no W / R
    assert isinstance(r, Unmodelled) and "widths are not recorded" in r.reason
    bad = OpCall(FWD, ((0,), (10,)), ("float", "float"))
    r = op_cost(bad)
    assert isinstance(r, Unmodelled) and "layout" in r.reason
    r = op_cost(bwd(b=4096, forward=fwd()))  # the gradient's B disagrees with the lookup's 8192
    assert isinstance(r, Unmodelled) and "does not match" in r.reason


def test_pairing_by_batch_and_width():
    small = [fwd(lookups=n) for n in (61072, 56896)]  # T=1, D = 96: one module over two steps
    big = [fwd(weights=7487072, tables=122, lookups=n, bags=999424, rows=90837, weighted=False)
           for n in (15807216, 15781672)]  # T=122: T*W/R = 122*82.4 = 10,056, nearest to 8720
    nodes = [bwd(total_d=8720), bwd(total_d=96)]
    calls = small + big + nodes
    out = pair(calls, [1, 1, 1, 1, 2, 2])
    assert set(out) == {0, 1, 2, 3, 4, 5}
    assert out[0][0][0][0].get("tbe_total_D") == 96 and out[2][0][0][0].get("tbe_total_D") == 8720
    variants, how = out[4]  # the [8192, 8720] node: both steps of the big module, one call each
    assert [v[0].get("tbe_forward") for v in variants] == big and [v[1] for v in variants] == [1, 1]
    c = cost_variants(variants, how, 2, op_cost)
    each = [cost(v[0]) for v in variants]
    assert c.bytes == pytest.approx((each[0].bytes + each[1].bytes) / 2)  # the call-weighted mean
    assert out[5][0][0][0].get("tbe_forward") in small


@pytest.mark.parametrize("rel", ["hta/control.json.gz", "hta/test.json.gz", "hta/rank0.json.gz",
                                 "hta/sampled_rank-0.json.gz", "hta/sampled_rank-1.json.gz"])
def test_real_traces_model_every_tbe_call_below_the_roof(rel):
    a = analysis(rel)  # skips when ../shared is absent
    rows = [r for r in a["ops"] if r["name"] in (FWD, BWD)]
    assert rows
    for r in rows:  # the sampled ranks name no device: no roof, but FLOPs and bytes all the same
        assert r["flops"] is not None and r["estimated"], (r["name"], r["reason"])
        assert r["roof_pct"] is None or 0 < r["roof_pct"] < 100, r["name"]


def test_control_tbe_node_pinned():
    a = analysis("hta/control.json.gz")
    rows = [r for r in a["ops"] if r["name"] in (FWD, BWD)]
    assert len(rows) == 14  # 12 lookups (2 modules x 6 steps, one signature each: L differs) + 2 autograd nodes
    node = next(r for r in rows if r["name"] == BWD and [list(d) for d in r["input_dims"]] == [[8192, 8720]])
    # 9.58 ms per call: its bytes at 1555 GB/s take 5.7% of that and its kernels' 2 µs launch floors
    # a few µs more, under a tenth of the time in all, so neither roof bounds it: the rows it gathers
    # and scatters are spread over the tables (family tbe: scattered access)
    assert node["count"] == 6 and node["bound"] == "underutilised"
    assert node["limiter"].startswith("scattered access")
    assert node["model_pct"] < 10.0
    # mean over the 6 steps: indices + offsets + sort 2*L*12 + gradient once 8192*8720*4 + rows and state,
    # L ~ 15.8M lookups, D = 8720/122
    assert node["bytes"] == pytest.approx(852103844, rel=1e-6)
    assert node["roof_pct"] == pytest.approx(5.7, abs=0.1)  # 852 MB / 9.58 ms = 89 GB/s of the A100's 1555
    look = next(r for r in rows if r["name"] == FWD and r["input_dims"][11] == [15807216])
    # indices 15807216*8 + offsets 999425*8 + tables once 7487072*4 + out [8192, 8720]*4 (total_D from the node)
    assert look["bytes"] == 450138376 and "paired autograd node" in look["notes"][0]
    assert look["roof_pct"] == pytest.approx(11.4, abs=0.1)  # 450 MB / 2.546 ms = 177 GB/s of 1555


def test_context_signatures_pair_with_the_groups_that_own_kernels():
    """calls_named() builds signatures without kernel names: the lookup must still get total_D."""
    owned = OpCall(FWD, fwd().dims, fwd().types, None, None, ("split_embedding_codegen_forward_kernel",))
    out = pair([owned, bwd()], [1, 1], context=[(fwd(), 1)])
    assert out[0][0][0][0].get("tbe_total_D") == 96


SIZE = st.integers(-3, 2**40) | st.sampled_from([0, 1, 2, 8192, 2**62, 2**63])


@settings(max_examples=150, deadline=None)
@given(w=SIZE, t=SIZE, n_idx=SIZE, bags=SIZE, rows=SIZE, b=SIZE, d=SIZE, weighted=st.booleans(),
       dtype=st.sampled_from(["float", "c10::Half", "unsigned char", "Scalar", "", "weird"]))
def test_any_recorded_sizes_never_raise_and_never_give_negative_costs(w, t, n_idx, bags, rows, b, d, weighted, dtype):
    dims = ((0,), (w,), (0,), (0, 0), (t,), (t,), (t + 1,), (), (), (t + 1,), (), (n_idx,), (bags + 1,), (),
            (n_idx,) if weighted else (), (), (0,), (), (), (), (rows,), (0,), (t,), (t,), (), (), (), (), ())
    types = (TYPES[0], dtype) + TYPES[2:]
    look = OpCall(FWD, dims, types)
    node = bwd(b=b, total_d=d)
    calls = [look, node]
    out = pair(calls, [1, 1])  # the pre-pass must never raise either
    for i, (variants, how) in out.items():
        r = cost_variants(variants, how, 1, op_cost)
        assert isinstance(r, (Cost, Unmodelled))
    for c in (look, bwd(b=b, total_d=d, forward=look)):
        r = op_cost(c)
        if isinstance(r, Cost):
            assert r.bytes >= 0 and r.flops >= 0 and math.isfinite(r.bytes) and math.isfinite(r.flops)


def test_tables_in_host_memory_are_named():
    dims, types = s.tbe_lookup_args()
    dims = dims[:1] + ((0,), (96000,)) + dims[3:]  # dev_weights empty, uvm_weights [96000]
    c = cost(OpCall(FWD, dims, types))
    assert c.bytes == 4328136  # the same traffic as from device memory: W = 0 + 96,000
    assert any("UVM" in n and "PCIe" in n for n in c.notes)


def test_pt2_lookup_unpacks_its_tensor_lists():
    """split_embedding_codegen_lookup_rowwise_adagrad_function_pt2: the weights and momentum1 arrive
    as TensorLists [dev, uvm, placements, offsets, cache] / [dev, uvm, placements, offsets]; the same
    numbers as the classic lookup of test_lookup_alone_uses_the_mean_row_width."""
    dims = [(0,), ((96000,), (0,), (1,), (1,), (0, 0)), (2,), (), (), (2,), (), (61072,), (8193,), (), (61072,), (),
            (), (), (), (), (), ((1000,), (0,), (1,), (1,))]
    types = ["float", "TensorList", "int", "Scalar", "Scalar", "long int", "Scalar", "long int", "long int",
             "Scalar", "float", "", "Scalar", "GenericList", "ScalarList", "ScalarList", "ScalarList", "TensorList"]
    concrete = ["", "", "", "96", "96", "", "17", "", "", "0", "", "", "0", "", "[]", "[]", "[]", ""]
    call = OpCall("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function_pt2", tuple(dims),
                  tuple(types), None, tuple(concrete), (), ())
    c = cost(call)
    # D = W / R = 96000 / 1000 = 96; output_dtype 0 = fp32: the same 4,328,136 B and 11,725,824 FLOPs
    assert c.bytes == 61072 * 8 + 8193 * 8 + 61072 * 4 + 96000 * 4 + 8192 * 96 * 4 == 4328136
    assert c.flops == 61072 * 96 * 2
    assert any("output_dtype 0" in n for n in c.notes)
    # the weights TensorList without sizes: said, not guessed
    bare = op_cost(OpCall(call.name, ((0,), (), *call.dims[2:]), call.types, None, call.concrete, (), ()))
    assert isinstance(bare, Unmodelled) and "weights TensorList" in bare.reason
