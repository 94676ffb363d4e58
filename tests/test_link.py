"""Link stage: kernel -> launch (correlation) -> innermost op (nesting / External id)."""

from __future__ import annotations

import numpy as np
import pytest

from tests import synth as s
from tests.conftest import shared_trace
from traceana.link.attribute import CAUSE_KEYS, link
from traceana.load import load_trace


def _names(tr, links):
    return [tr.names[tr.ops.name[i]] if i >= 0 else None for i in links.gpu_op.tolist()]


def test_modern_trace_links_to_innermost_op(tmp_path):
    ev = [
        s.op("aten::linear", 100, 50, ext=10, dims=[[4, 8], [16, 8], [16]]),
        s.op("aten::addmm", 105, 40, ext=11, dims=[[16], [4, 8], [8, 16], [], []]),
        s.launch(110, corr=500, ext=11),
        s.kernel("gemm_kernel", 200, 7.5, corr=500, ext=11),
        s.launch(130, corr=501, ext=11, name="cudaMemsetAsync"),
        s.kernel("memset", 210, 1.5, corr=501, ext=11, cat="gpu_memset"),
    ]
    tr = load_trace(s.write(tmp_path, s.trace(ev)))
    links = link(tr)
    assert _names(tr, links) == ["aten::addmm", "aten::addmm"]
    addmm = tr.names.index("aten::addmm")
    i = int(np.flatnonzero(tr.ops.name == addmm)[0])
    assert links.op_device_us[i] == 9.0  # 7.5 µs kernel + 1.5 µs memset
    assert links.op_gpu_events[i] == 2
    assert links.external_ids_reliable


def test_pre_2024_external_id_equal_to_correlation_is_ignored(tmp_path):
    # The launch's External id (= its correlation 77) names a different op: nesting must win.
    ev = [
        s.op("aten::mul", 10, 20, ext=77, dims=[[4], [4]]),
        s.op("aten::add", 100, 20, ext=5, dims=[[4], [4]]),
        s.launch(105, corr=77, ext=77),
        s.kernel("add_kernel", 150, 3, corr=77, ext=77),
    ]
    tr = load_trace(s.write(tmp_path, s.trace(ev)))
    links = link(tr)
    assert _names(tr, links) == ["aten::add"]
    assert not links.external_ids_reliable
    assert links.by_nesting == 1


def test_external_id_fallback_when_launch_is_on_another_thread(tmp_path):
    ev = [
        s.op("aten::mm", 10, 20, ext=3, dims=[[4, 4], [4, 4]], tid=1),
        s.op("aten::add", 40, 20, ext=4, dims=[[4], [4]], tid=1),
        s.launch(45, corr=900, ext=4, tid=1),
        s.launch(300, corr=901, ext=3, tid=2),  # no op on thread 2
        s.kernel("add", 400, 2, corr=900, ext=4),
        s.kernel("mm", 410, 5, corr=901, ext=3),
    ]
    tr = load_trace(s.write(tmp_path, s.trace(ev)))
    links = link(tr)
    assert _names(tr, links) == ["aten::add", "aten::mm"]
    assert links.by_external_id == 1


def test_unattributed_events_are_kept_with_a_cause(tmp_path):
    ev = [
        s.op("aten::relu", 10, 20, ext=1),  # no Input Dims: record_shapes off
        s.launch(12, corr=1, ext=1),
        s.kernel("relu_kernel", 50, 4, corr=1),
        s.kernel("early_kernel", 60, 6, corr=2),  # launched before the window
        s.launch(100, corr=3, name="cudaGraphLaunch"),
        s.kernel("graph_k1", 120, 10, corr=3),
        s.kernel("graph_k2", 131, 11, corr=3),
    ]
    tr = load_trace(s.write(tmp_path, s.trace(ev)))
    links = link(tr)
    causes = [CAUSE_KEYS[c] for c in links.gpu_cause.tolist()]
    assert causes == ["no_shapes", "no_launch", "graph_replay", "graph_replay"]
    assert tr.gpu.dur.sum() == 31.0  # 4 + 6 + 10 + 11: nothing dropped


def test_legacy_2021_format(tmp_path):
    ev = [
        {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 5, "tid": "5", "ts": 100, "dur": 50,
         "args": {"External id": 2, "Input Dims": [[1, 3, 8, 8], [4, 3, 3, 3]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": "5", "ts": 110, "dur": 4,
         "args": {"correlation": 40, "external id": 2}},
        {"ph": "X", "cat": "Kernel", "name": "implicit_gemm", "pid": 0, "tid": "stream 7", "ts": 200, "dur": 9,
         "args": {"device": 0, "stream": 7, "correlation": 40, "external id": 2}},
    ]
    tr = load_trace(s.write(tmp_path, s.trace(ev)))
    assert tr.format == "kineto-2021"
    assert tr.gpu.stream.tolist() == [7]
    links = link(tr)
    assert _names(tr, links) == ["aten::conv2d"]


@pytest.mark.parametrize("flavour", ["int", "float", "relative"])
def test_three_timestamp_flavours_link_the_same(tmp_path, flavour):
    base = {"int": 1683564901550101, "float": 1419247333291.708, "relative": 1234.567}[flavour]
    top = {"baseTimeNanoseconds": 1700000000000000000} if flavour == "relative" else {}
    conv = int if flavour == "int" else float
    ev = [
        s.op("aten::mul", conv(base), 20, ext=1, dims=[[4], [4]]),
        s.launch(conv(base + 5), corr=9, ext=1),
        s.kernel("k", conv(base + 30), 3, corr=9, ext=1),
    ]
    tr = load_trace(s.write(tmp_path, s.trace(ev, **top)))
    assert _names(tr, link(tr)) == ["aten::mul"]


def test_old_trace_rank0_links_by_nesting():
    tr = load_trace(shared_trace("hta/rank0.json.gz"))
    links = link(tr)
    assert not links.external_ids_reliable  # launch External id == correlation here
    assert links.by_external_id == 0
    share = tr.gpu.dur[links.gpu_op >= 0].sum() / tr.gpu.dur.sum()
    # 79.6% of GPU time has an enclosing op, less the 23.4% replayed by cudaGraphLaunch inside
    # CompiledFunction regions (a replay, not the region's kernels): 56.2%; the rest has no launch / no op
    assert 0.55 < share < 0.57
    replay = (links.gpu_cause == CAUSE_KEYS.index("graph_replay"))
    assert round(tr.gpu.dur[replay].sum() / tr.gpu.dur.sum() * 100, 1) == 23.4


def test_modern_trace_bert_links_everything():
    tr = load_trace(shared_trace("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"))
    links = link(tr)
    assert links.external_ids_reliable
    assert (links.gpu_op >= 0).all()
    # nesting and External id agree on every launch that has both
    la = tr.launches
    both = (links.launch_op >= 0) & (la.ext >= 0)
    assert (tr.ops.ext[links.launch_op[both]] == la.ext[both]).all()


def test_rocm_trace_links():
    tr = load_trace(shared_trace("tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz"))
    links = link(tr)
    assert (links.gpu_op >= 0).all()


def test_graph_replay_trace():
    tr = load_trace(shared_trace("tracelens/vllm_piecewise/graph_execution.json.gz"))
    links = link(tr)
    graph = tr.gpu.dur[links.gpu_cause == CAUSE_KEYS.index("graph_replay")].sum() / tr.gpu.dur.sum()
    assert 0.95 < graph < 0.97  # 96.0% of kernel time runs under hipGraphLaunch
