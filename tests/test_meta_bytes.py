"""Bytes of modelled ops on the real traces = inputs read once + outputs written once, computed by
running the same aten op on meta tensors (cost/meta.py), for a seeded sample of ~100 signatures.

Ops whose byte model is deliberately not "every input read, every output written" are skipped,
with the reason (docs/cost-model.md lists them too). Signatures the meta run cannot rebuild
(arguments not recorded by the trace) are not compared.
"""

from __future__ import annotations

import random

import pytest

from tests.conftest import shared_trace
from traceana.cost import Cost, op_cost

torch = pytest.importorskip("torch")

# Traces that record Concrete Inputs and strides (the meta run needs the scalars and int lists).
TRACES = (
    "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "tracelens/mi300/resnet_act_checkpoint.json.gz",
    "tracelens/perf_model/normalization_layer_test.json.gz",
    "tracelens/sglang/sglang_Qwen3-8B_prefilldecode.json.gz",
    "tracelens/torch_compile_triton/trace.json.gz",
)
SAMPLE = 100
SKIP = {
    "aten::copy_": "the destination is overwritten, not read",
    "aten::fill_": "writes its tensor without reading it",
    "aten::zero_": "writes its tensor without reading it",
    "aten::normal_": "writes its tensor without reading it",
    "aten::uniform_": "writes its tensor without reading it",
    "aten::gather": "reads only the gathered elements of its input",
    "aten::index_select": "reads only the selected rows of its input",
    "aten::embedding": "reads only the looked-up rows of the table",
    "aten::max_pool2d_with_indices_backward": "the kernel reads grad_output and the indices, not the forward input",
    "aten::convolution_backward": "reads only what the gradients requested by output_mask need",
    "aten::native_batch_norm": "training updates running_mean / running_var in place (read and written)",
    "aten::miopen_batch_norm": "training updates running_mean / running_var in place (read and written)",
    "aten::cudnn_batch_norm": "training updates running_mean / running_var in place (read and written)",
    "aten::native_layer_norm_backward": "the bias is not read (only whether it exists matters)",
}


def _signatures():
    from traceana.link.attribute import link
    from traceana.load import load_trace
    from traceana.link.signatures import group_ops

    calls = {}
    for rel in TRACES:
        trace = load_trace(shared_trace(rel))
        for g in group_ops(trace, link(trace)):
            c = g.call
            if c is None or not c.name.startswith("aten::") or c.name in SKIP:
                continue
            cost = op_cost(c)
            if isinstance(cost, Cost) and not cost.estimated and cost.family != "comm":
                calls.setdefault((c.name, c.dims, c.types, c.strides, c.concrete), (c, cost))
    return [calls[k] for k in sorted(calls, key=repr)]


def test_bytes_equal_inputs_plus_outputs_on_meta_tensors():
    from traceana.cost.meta import run_on_meta

    pool = _signatures()
    sample = random.Random(20240613).sample(pool, min(SAMPLE, len(pool)))
    compared, differ = 0, []
    for call, cost in sample:
        meta = run_on_meta(call)
        if not isinstance(meta, Cost):
            continue  # an argument the trace does not record: nothing to compare
        compared += 1
        if meta.bytes != pytest.approx(cost.bytes, rel=1e-9, abs=1e-9):
            differ.append(f"{call.name} {call.dims} {call.types}: formula {cost.bytes_expr} | meta {meta.bytes_expr}")
    assert compared >= 0.6 * len(sample), f"only {compared} of {len(sample)} signatures ran on meta tensors"
    assert not differ, "\n".join(differ)
