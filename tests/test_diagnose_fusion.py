"""Fusion chains: data flow from shapes, bytes saved, time at the measured bandwidth, grouping."""

from __future__ import annotations

import pytest

from tests import synth
from tests.conftest import SAMPLES
from traceana.analysis import analyze
from traceana.diagnose.fusion import feeds, fix_for, out_shape

X = [1024, 1024]  # fp32: 4,194,304 B


def _row(name, dims, types=None):
    return {"name": name, "input_dims": dims, "input_types": types or ["float"] * len(dims)}


def test_output_shapes_follow_the_cost_model():
    assert out_shape(_row("aten::mul", [[8, 1, 64], [1, 32, 64]])) == (8, 32, 64)  # broadcast
    assert out_shape(_row("aten::mul_", [[8, 32], []], ["float", "Scalar"])) == (8, 32)  # in place
    assert out_shape(_row("aten::addmm", [[64], [128, 32], [32, 64], [], []],
                          ["float", "float", "float", "Scalar", "Scalar"])) == (128, 64)
    assert out_shape(_row("aten::bmm", [[4, 128, 32], [4, 32, 64]])) == (4, 128, 64)
    assert out_shape(_row("aten::cat", [[[2, 3, 8], [2, 3, 8]], []], ["TensorList", "Scalar"])) == (2, 3, 16)


def test_data_flow_between_ops():
    pow_ = _row("aten::pow", [[16, 559, 1024], []], ["float", "Scalar"])
    mean = _row("aten::mean", [[16, 559, 1024], [], [], []], ["float", "ScalarList", "Scalar", ""])
    add = _row("aten::add", [[16, 559, 1], [], []], ["float", "Scalar", "Scalar"])
    assert feeds(pow_, mean) == ((16, 559, 1024), 4)
    assert feeds(mean, add) == ((16, 559, 1), 4)  # the reduced (keepdim) output feeds the add
    assert feeds(add, pow_) is None  # [16, 559, 1] is not a [16, 559, 1024] input


def test_fix_names_the_fused_kernel():
    assert "rms_norm" in fix_for(["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"])
    assert "scaled_dot_product_attention" in fix_for(["aten::bmm", "aten::_softmax", "aten::bmm"])
    assert "fused=True" in fix_for(["aten::mul_", "aten::addcdiv_"])
    assert "torch.compile" in fix_for(["aten::mul", "aten::add"])
    fbgemm = fix_for(["fbgemm::permute_pooled_embs_auto_grad", "fbgemm::recat_embedding_grad_output_mixed_D_batch"])
    assert "does not fuse" in fbgemm and "fbgemm::permute_pooled_embs_auto_grad" in fbgemm


def _chain_events():
    ev, t, corr = [], 0, 0

    def call(name, dims, types, concrete, kdur):
        nonlocal t, corr
        corr += 1
        ev.append(synth.op(name, t, 10, corr, dims=dims, types=types, concrete=concrete))
        ev.append(synth.launch(t + 2, corr))
        ev.append(synth.kernel(f"k_{name}", 10_000 + t, kdur, corr))
        t += kdur + 20

    for _ in range(2):
        call("aten::pow", [X, []], ["float", "Scalar"], ["", "2"], 40)  # 8,388,608 B: 26.2 µs at 320 GB/s
        call("aten::mul", [X, X], ["float", "float"], ["", ""], 50)  # 12,582,912 B: 39.3 µs
        call("aten::add", [X, X, []], ["float", "float", "Scalar"], ["", "", "1"], 50)  # 12,582,912 B
        call("aten::mm", [X, X], ["float", "float"], ["", ""], 400)  # compute-bound: ends the chain
    return ev


def test_chain_found_grouped_and_costed(tmp_path):
    a = analyze(synth.write(tmp_path, synth.trace(_chain_events())))
    bounds = {r["name"]: r["bound"] for r in a["ops"]}
    assert bounds == {"aten::pow": "memory", "aten::mul": "memory", "aten::add": "memory", "aten::mm": "compute"}
    (f,) = [f for f in a["findings"] if f["kind"] == "fusion"]
    assert f["title"].startswith("Fuse pow → mul → add")
    assert "2 time(s)" in f["text"]
    # per repetition two intermediates of 4,194,304 B, each written and read back: 4 x 4,194,304
    # = 16,777,216 B; two repetitions = 33,554,432 B
    assert "16,777,216 B" in f["text"] and "33,554,432 B" in f["text"]
    # the chain moves 8,388,608 + 2 x 12,582,912 = 33,554,432 B in 140 µs per repetition;
    # at that bandwidth the saved half takes 70 µs, x 2 repetitions = 140 µs
    assert f["saving_us"] == pytest.approx(140.0)


def test_t4_mul_then_sum_is_a_fusion_chain():
    a = analyze(str(SAMPLES / "t4_seed_pow_mul.json"))
    (f,) = [f for f in a["findings"] if f["kind"] == "fusion"]
    assert f["title"].startswith("Fuse mul_ → sum")
    # mul_ works in place: its result lives on, so fusing saves only sum's re-read of it,
    # 8192 x 8192 x 4 = 268,435,456 B. The chain moves 536,870,9xx + 268,435,460 B in
    # 2,184 + 991.583 µs (254 GB/s): 3,175.583 µs x 268,435,456 / 805,306,3xx = 1,058.5 µs
    assert "268,435,456 B" in f["text"]
    assert f["saving_us"] == pytest.approx(1058.53, abs=0.02)


def test_chains_follow_real_dataflow_on_every_shared_trace():
    """Never through a GEMM (but bmm -> softmax -> bmm, the unfused attention SDPA replaces), a
    library op or a custom op; never copy -> copy (independent copies)."""
    from tests.analyses import analysis
    from tests.conftest import all_shared_traces

    for rel in all_shared_traces():
        a = analysis(rel)
        by_id = {r["id"]: r for r in a["ops"]}
        for f in a["findings"]:
            if f["kind"] != "fusion":
                continue
            chain = f["title"].split("Fuse ", 1)[1].split(":", 1)[0].split(" → ")
            for x, y in zip(chain, chain[1:]):
                assert not (x in ("copy_", "clone", "_to_copy") and y in ("copy_", "clone", "_to_copy")), (rel, chain)
                for g, other in ((x, y), (y, x)):
                    if g in ("mm", "addmm", "linear", "_flash_attention_forward", "convolution"):
                        raise AssertionError((rel, chain))
                    if g in ("bmm", "baddbmm", "matmul"):
                        assert other in ("_softmax", "softmax", "_safe_softmax"), (rel, chain)
            assert all(by_id[i]["name"].startswith("aten::") for i in f["ops"]), (rel, chain)


def test_rank0_tiny_chains_are_pitched_as_launches():
    from tests.analyses import analysis

    a = analysis("hta/rank0.json.gz")
    tiny = [f for f in a["findings"] if f["kind"] == "fusion"]
    assert tiny and all("launches → 1 per repetition" in f["title"] for f in tiny)
    f = next(f for f in tiny if f["title"].startswith("Fuse copy_ → clamp_"))
    # 13 ops on [1, 4096] tensors, 40 repetitions: launch-bound, the DRAM bytes are irrelevant
    assert "13 launches → 1" in f["title"] and "not DRAM traffic" in f["text"]
