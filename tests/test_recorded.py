"""The recorder (tests/recorded.py): real model code recorded on CPU, re-shaped as a CUDA trace."""

from __future__ import annotations

import bisect
import gzip
import json

from tests.recorded import KERNEL_FIXED_US, MEM_EFF, STREAM, device_row, kernel_time_us


def _load(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_bert_kernels_follow_the_rules(recorded_trace):
    ev = _load(recorded_trace("bert"))
    ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op"}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"]: e for e in ev if e.get("name") == "cudaLaunchKernel"}
    assert kernels and len(launches) == len(kernels)
    starts = sorted((o["ts"], i, o) for i, o in enumerate(ops.values()))
    by_op = {}
    for k in kernels:
        assert k["args"]["stream"] == STREAM and k["args"]["device"] == 0
        launch = launches[k["args"]["correlation"]]
        op = ops[k["args"]["External id"]]
        # the launch sits inside its op and outside every child of it, the kernel starts after its launch
        assert op["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= op["ts"] + op["dur"]
        near = starts[bisect.bisect_left(starts, (op["ts"],)):bisect.bisect_right(starts, (launch["ts"], 1e300))]
        inner = [o["name"] for _, _, o in near if o["tid"] == op["tid"] and o is not op
                 and launch["ts"] + launch["dur"] <= o["ts"] + o["dur"]]
        assert inner == [], (op["name"], inner)
        assert k["ts"] >= launch["ts"]
        by_op.setdefault(op["name"], []).append(k["name"])
    # views, metadata and the composite ops above GEMMs launch nothing
    for quiet in ("aten::view", "aten::transpose", "aten::expand", "aten::matmul", "aten::linear", "aten::empty",
                  "aten::reshape", "aten::softmax", "aten::dropout", "aten::as_strided"):
        assert quiet not in by_op, quiet
    # eager BERT attention per layer: Q K^T and P V as bmm, softmax, 2 layers
    assert by_op["aten::bmm"] == ["ampere_sgemm_64x64_nn"] * 4
    assert len(by_op["aten::_softmax"]) == 2 and all("softmax_warp_forward" in n for n in by_op["aten::_softmax"])
    assert all(n == "ampere_sgemm_128x64_tn" for n in by_op["aten::addmm"])
    assert all("vectorized_layer_norm_kernel" in n for n in by_op["aten::native_layer_norm"])


def test_time_model_arithmetic(recorded_trace):
    ev = _load(recorded_trace("bert"))
    ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op"}
    soft = [k for k in ev if k.get("cat") == "kernel" and ops[k["args"]["External id"]]["name"] == "aten::_softmax"]
    # softmax over [2, 4, 256, 256] fp32: read 2*4*256*256*4 = 2,097,152 B, write as much: 4,194,304 B
    # 2.0 us + 4,194,304 B / (0.8 * 1555 GB/s) = 2.0 + 4,194,304 / 1,244,000 B/us = 2.0 + 3.371627 us
    assert KERNEL_FIXED_US == 2.0 and MEM_EFF == 0.8
    assert len(soft) == 2
    for k in soft:
        assert abs(k["dur"] - (2.0 + 4_194_304 / 1_244_000)) < 1e-9
    row = device_row()
    # a bf16 GEMM of 2*1024*1024*1024 FLOPs: compute-bound at 0.6 * 312 TFLOP/s = 187.2 FLOP/ps
    # bytes 3 * 1024*1024*2 = 6,291,456 B -> 5.06 us of DRAM; FLOPs 2,147,483,648 / 187.2e6 = 11.47 us
    assert abs(kernel_time_us(6_291_456, 2 * 1024 ** 3, "c10::BFloat16", row) - (2.0 + 2 * 1024 ** 3 / 187.2e6)) < 1e-9


def test_train_records_backward_and_one_dropout_kernel(recorded_trace):
    ev = _load(recorded_trace("bert_train"))
    ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op"}
    names = [ops[k["args"]["External id"]]["name"] for k in ev if k.get("cat") == "kernel"]
    assert names.count("aten::_softmax_backward_data") == 2  # one per layer
    # dropout in training is one fused kernel: its CPU helpers (bernoulli_, div_, mul) launch nothing
    # 1 (embeddings) + 2 layers * 3 (attention probabilities, attention output, FFN output) = 7
    assert names.count("aten::dropout") == 7 and "aten::bernoulli_" not in names
