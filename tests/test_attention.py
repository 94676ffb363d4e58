"""Unfused attention found by data flow in real library code (traceana/diagnose/attention.py).

Each trace is a tiny Hugging Face transformers model built from a config, run on CPU under
torch.profiler and re-shaped as a CUDA trace by tests/recorded.py, whose time model sets each
kernel's duration: kt() below is that model (2 us + max(bytes / (0.8 x 1555 GB/s),
FLOPs / (0.6 x peak))), so every measured time here is written out from the op's shapes.
The fused kernel (attention.py): max(FLOPs / (0.5 x peak), bytes / 1555 GB/s, the 2 us launch floor),
0.5 being the default fraction (these traces have no fused attention kernel that is not latency-bound).
"""

from __future__ import annotations

import re

import pytest

from traceana.analysis import analyze
from traceana.diagnose.attention import DEFAULT_FRACTION, FIX, fraction_of_peak

DRAM = 0.8 * 1555e3  # B/us the recorded kernels stream at
FP32, BF16 = 19.5, 312.0  # A100 TFLOP/s: fp32 CUDA cores (PyTorch's fp32 matmul without TF32), bf16 tensor cores


def kt(nbytes: float, flops: float = 0.0, peak: float = FP32) -> float:
    """A recorded kernel's duration (tests/recorded.py's time model)."""
    return 2.0 + max(nbytes / DRAM, flops / (0.6 * peak * 1e6))


def fused(flops: float, nbytes: float, peak: float = FP32) -> float:
    """The fused attention kernel's time per repetition (attention.py, default fraction 0.5)."""
    return max(flops / (DEFAULT_FRACTION * peak * 1e6), nbytes / 1555e3, 2.0)


def _attention(doc: dict) -> list[tuple[str, float, set[str], dict]]:
    """(direction + chain from the title, saving, op names, the finding) of each attention finding."""
    names = {r["id"]: r["name"] for r in doc["ops"]}
    out = []
    for f in doc["findings"]:
        if f.get("group") == "attention":
            m = re.match(r"Unfused attention \((\w+), (.+?)\):", f["title"])
            out.append((f"{m.group(1)}: {m.group(2)}", f["saving_us"], {names[i] for i in f["ops"]}, f))
    return sorted(out, key=lambda x: -x[1])


def _no_elementwise_chain_through_softmax(doc: dict) -> None:
    """The element-wise fusion chains leave the attention ops to the attention finding (no double count)."""
    for f in doc["findings"]:
        if f["kind"] == "fusion" and f.get("group") != "attention":
            assert "softmax" not in f["title"], f["title"]


def test_bert_eager_forward(recorded_trace):
    doc = analyze(recorded_trace("bert"))
    [(chain, saving, ops, f)] = _attention(doc)
    assert chain == "forward: bmm → mul → add → _softmax → bmm"
    assert ops == {"aten::copy_", "aten::bmm", "aten::mul", "aten::add", "aten::_softmax"}
    assert f["kind"] == "fusion" and f["fix"] == FIX and "scaled_dot_product_attention" in f["fix"]
    assert 'attn_implementation="sdpa"' in f["fix"]
    # per layer (2 layers): B*H = 2*4 = 8, S = 256, D = 16, fp32
    copy = kt(2 * 2 * 4 * 256 * 16 * 4)  # Q, K^T, V made contiguous for bmm: 131,072 B read + written
    qk = kt(2 * 8 * 256 * 16 * 4 + 8 * 256 * 256 * 4, 2 * 8 * 256 * 256 * 16)  # 2,359,296 B; 16,777,216 FLOPs
    mul = kt(2 * 2 * 4 * 256 * 256 * 4 + 8)  # * scaling: scores read + written, the Python float 8 B
    add = kt(2 * 2 * 4 * 256 * 256 * 4 + 2 * 1 * 256 * 256 * 4)  # + the [2, 1, 256, 256] padding mask
    soft = kt(2 * 2 * 4 * 256 * 256 * 4)
    pv = kt(8 * 256 * 256 * 4 + 2 * 8 * 256 * 16 * 4, 2 * 8 * 256 * 256 * 16)
    measured = 2 * (3 * copy + qk + mul + add + soft + pv)  # = 61.92 us
    # fused: 4*B*H*S*S*D = 4*8*256*256*16 = 33,554,432 FLOPs at 0.5 * 19.5 TFLOP/s = 3.44 us (over the
    # bytes: Q + K + V + O 8*4*256*16*4 = 524,288 B + mask 524,288 B at 1555 GB/s = 0.67 us)
    per = fused(4 * 8 * 256 * 256 * 16, 4 * 8 * 256 * 16 * 4 + 2 * 256 * 256 * 4)
    assert per == pytest.approx(33_554_432 / 9.75e6)
    assert saving == pytest.approx(measured - 2 * per, rel=1e-9)
    assert saving == pytest.approx(55.04, abs=0.01)
    _no_elementwise_chain_through_softmax(doc)


def test_bert_training_forward_and_backward(recorded_trace):
    doc = analyze(recorded_trace("bert_train"))
    (fc, fs, fops, _), (bc, bs, bops, bf) = _attention(doc)
    assert fc == "forward: bmm → mul → add → _softmax → dropout → bmm"
    assert bc == "backward: bmm → mul → _softmax_backward_data → mul → bmm"
    assert bops == {"aten::bmm", "aten::mul", "aten::_softmax_backward_data"}
    copy = kt(2 * 2 * 4 * 256 * 16 * 4)
    gemm = kt(2 * 8 * 256 * 16 * 4 + 8 * 256 * 256 * 4, 2 * 8 * 256 * 256 * 16)  # every [8, 256, 256] x 16 GEMM
    scores = kt(2 * 2 * 4 * 256 * 256 * 4)  # softmax, dropout: one score-sized tensor read, one written
    mul = kt(2 * 2 * 4 * 256 * 256 * 4 + 8)
    add = kt(2 * 2 * 4 * 256 * 256 * 4 + 2 * 1 * 256 * 256 * 4)
    forward = 2 * (3 * copy + 2 * gemm + mul + add + 2 * scores)  # dropout in training is one more kernel
    assert fs == pytest.approx(forward - 2 * fused(4 * 8 * 256 * 256 * 16, 0), rel=1e-9)
    # backward per layer: dP = dO V^T, the dropout mask (mul of two score-sized tensors), the softmax
    # backward (reads dP and P), the scale, then dK = Q^T dS; with them dQ = dS K and dV = P^T dO: 4 GEMMs
    two = kt(3 * 2 * 4 * 256 * 256 * 4)  # 6,291,456 B
    backward = 2 * (4 * gemm + two + two + mul)  # = 70.15 us
    # fused backward: 2*BH*S*S*(3D + 2D) = 2*8*256*256*80 = 83,886,080 FLOPs at 9.75 TFLOP/s = 8.60 us
    assert bs == pytest.approx(backward - 2 * 83_886_080 / 9.75e6, rel=1e-9)
    assert "2*8*256*256*(3*16 + 2*16) = 83,886,080" in bf["text"]
    _no_elementwise_chain_through_softmax(doc)


def test_gpt2_causal(recorded_trace):
    doc = analyze(recorded_trace("gpt2"))
    [(chain, saving, ops, _)] = _attention(doc)
    # transformers 5 adds GPT-2's causal + padding mask as one additive [B, 1, S, S] tensor
    assert chain == "forward: bmm → mul → add → _softmax → bmm"
    assert ops == {"aten::copy_", "aten::bmm", "aten::mul", "aten::add", "aten::_softmax"}
    # per layer: B*H = 8, S = 32, D = 16; K and V come out of the cache's cat contiguous: only Q is copied
    s = 2 * 4 * 32 * 32 * 4  # 32,768 B of scores
    chain_us = (kt(2 * 2 * 4 * 32 * 16 * 4) + kt(2 * 8 * 32 * 16 * 4 + s, 2 * 8 * 32 * 32 * 16) + kt(2 * s + 8)
                + kt(2 * s + 2 * 32 * 32 * 4) + kt(2 * s) + kt(s + 2 * 8 * 32 * 16 * 4, 2 * 8 * 32 * 32 * 16))
    # fused: 4*8*32*32*16 = 524,288 FLOPs = 0.054 us, 73,728 B = 0.047 us: the 2 us launch floor
    assert saving == pytest.approx(2 * chain_us - 2 * 2.0, rel=1e-9)


def test_t5_position_bias_self_and_cross(recorded_trace):
    doc = analyze(recorded_trace("t5"))
    found = _attention(doc)
    # encoder self-attention (32 x 32), decoder self-attention (16 x 16), cross-attention (16 x 32):
    # each adds the relative position bias [1, H, Sq, Sk], then the mask [B, 1, Sq, Sk]; the scale is T5's 1.0
    assert [c for c, _, _, _ in found] == ["forward: bmm → mul → add → add → _softmax → bmm"] * 3

    def one(sq, sk, copies):
        s = 2 * 4 * sq * sk * 4
        q, kv = 8 * sq * 16 * 4, 8 * sk * 16 * 4
        return (copies[0] * kt(2 * q) + copies[1] * kt(2 * kv) + kt(q + kv + s, 2 * 8 * sq * sk * 16) + kt(2 * s + 8)
                + kt(2 * s + 4 * sq * sk * 4) + kt(2 * s + 2 * sq * sk * 4) + kt(2 * s)
                + kt(s + kv + q, 2 * 8 * sq * sk * 16))
    # encoder: Q, K^T and V copied; decoder: K and V come from the cache's cat, only Q is copied
    expected = sorted([2 * one(32, 32, (1, 2)) - 4.0, 2 * one(16, 16, (1, 0)) - 4.0, 2 * one(16, 32, (1, 0)) - 4.0],
                      reverse=True)
    assert [s for _, s, _, _ in found] == pytest.approx(expected, rel=1e-9)
    _no_elementwise_chain_through_softmax(doc)


def test_vit(recorded_trace):
    doc = analyze(recorded_trace("vit"))
    [(chain, saving, ops, _)] = _attention(doc)
    assert chain == "forward: bmm → mul → _softmax → bmm"  # no mask
    assert ops == {"aten::copy_", "aten::bmm", "aten::mul", "aten::_softmax"}
    # 16 patches + [CLS] = 17 tokens; B*H = 8, D = 16; Q, K^T, V copies of 8*17*16*4 = 8,704 B
    s, q = 8 * 17 * 17 * 4, 8 * 17 * 16 * 4
    per_layer = (3 * kt(2 * q) + kt(2 * q + s, 2 * 8 * 17 * 17 * 16) + kt(2 * s + 8) + kt(2 * s)
                 + kt(s + 2 * q, 2 * 8 * 17 * 17 * 16))
    assert saving == pytest.approx(2 * per_layer - 2 * 2.0, rel=1e-9)


def test_video_transformer(recorded_trace):
    doc = analyze(recorded_trace("videomae"))
    [(chain, saving, ops, _)] = _attention(doc)
    assert chain == "forward: bmm → mul → _softmax → bmm"
    # batch 1: merging B and H is a view, no copies. 4 frames / tubelet 2 x (32 / 8)^2 patches = 32 tubelets
    assert ops == {"aten::bmm", "aten::mul", "aten::_softmax"}
    s, q = 4 * 32 * 32 * 4, 4 * 32 * 16 * 4
    per_layer = kt(2 * q + s, 2 * 4 * 32 * 32 * 16) + kt(2 * s + 8) + kt(2 * s) + kt(s + 2 * q, 2 * 4 * 32 * 32 * 16)
    assert saving == pytest.approx(2 * per_layer - 2 * 2.0, rel=1e-9)


def test_bloom_bf16_alibi_baddbmm_and_casts(recorded_trace):
    doc = analyze(recorded_trace("bloom"))
    [(chain, saving, ops, f)] = _attention(doc)
    # ALiBi bias through baddbmm, the mask added, softmax in fp32 (a cast each way)
    assert chain == "forward: baddbmm → add → copy_ → _softmax → copy_ → bmm"
    assert ops == {"aten::copy_", "aten::baddbmm", "aten::add", "aten::_softmax", "aten::bmm"}
    s = 2 * 4 * 32 * 32 * 2  # 16,384 B of bf16 scores
    q = 8 * 32 * 16 * 2
    per_layer = (kt(2 * q)  # Q copied
                 + kt(8 * 32 * 2 + 2 * q + s, 2 * 8 * 32 * 32 * 16, BF16)  # baddbmm reads the [8, 1, 32] ALiBi bias
                 + kt(2 * s + 2 * 32 * 32 * 2)  # + mask
                 + kt(s + 2 * s)  # to fp32: reads bf16, writes fp32
                 + kt(2 * 2 * s)  # fp32 softmax
                 + kt(2 * s + 2 * s)  # back to bf16: reads fp32 (the write counted at the larger size)
                 + kt(s + 2 * q, 2 * 8 * 32 * 32 * 16, BF16))
    assert saving == pytest.approx(2 * per_layer - 2 * 2.0, rel=1e-9)
    assert "312 TFLOP/s" in f["text"]  # the bf16 GEMMs' tensor-core roof


def test_deberta_relative_bias_and_masked_fill(recorded_trace):
    doc = analyze(recorded_trace("deberta"))
    [(chain, saving, ops, _)] = _attention(doc)
    # scores + the disentangled bias (c2p + p2c, built by its own bmm / gather / div / add_ from the
    # position embeddings: not the scores' path), then masked_fill with the padding mask
    assert chain == "forward: bmm → add → masked_fill → _softmax → bmm"
    assert ops == {"aten::bmm", "aten::add", "aten::masked_fill", "aten::_softmax"}
    s = 8 * 32 * 32 * 4  # 32,768 B of scores; Q, K, V 8*32*16*4 = 16,384 B each
    per_layer = (kt(2 * 16_384 + s, 2 * 8 * 32 * 32 * 16) + kt(3 * s)  # scores + bias
                 + kt(2 * s + 2 * 32 * 32)  # masked_fill reads the [2, 1, 32, 32] bool mask
                 + kt(2 * s) + kt(s + 2 * 16_384, 2 * 8 * 32 * 32 * 16))
    assert saving == pytest.approx(2 * per_layer - 2 * 2.0, rel=1e-9)


@pytest.mark.parametrize("model", ["bert_sdpa", "gpt2_sdpa"])
def test_sdpa_is_never_unfused(recorded_trace, model):
    doc = analyze(recorded_trace(model))
    assert _attention(doc) == []
    fused_rows = [r for r in doc["ops"] if r["family"] == "attention"]
    assert fused_rows and all("scaled_dot_product" in r["name"] for r in fused_rows)


def test_fraction_from_the_trace_fused_kernels():
    rows = [{"family": "attention", "flops": 4e9, "count": 2, "peak_tflops": 312.0, "device_time_us": 40.0,
             "bound": "compute", "opaque": False},
            {"family": "attention", "flops": 1e6, "count": 9, "peak_tflops": 312.0, "device_time_us": 30.0,
             "bound": "latency", "opaque": False}]
    frac, why = fraction_of_peak(rows)
    # the latency-bound one says nothing about the kernel's speed: 2*4e9 FLOPs / (40 us * 312e6 FLOP/us) = 0.641
    assert frac == pytest.approx(8e9 / (40 * 312e6))
    assert "this trace's own fused attention" in why
    assert fraction_of_peak(rows[1:])[0] == DEFAULT_FRACTION


def test_sdpa_math_fallback_in_training_is_not_unfused(recorded_trace):
    # On CPU, training with dropout runs scaled_dot_product_attention's math fallback: its forward bmm /
    # softmax / bmm sit inside aten::scaled_dot_product_attention, its backward runs under autograd outside
    # it. Neither is "unfused attention" to replace with SDPA: the model already calls it.
    doc = analyze(recorded_trace("bert_sdpa_train"))
    names = {r["name"] for r in doc["ops"]}
    assert {"aten::_softmax", "aten::_softmax_backward_data", "aten::bmm"} <= names
    assert _attention(doc) == []
