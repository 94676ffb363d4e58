"""Graph replays meet their capture (traceana.link.replay): alignment, injection, discovery, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import synth
from tests.conftest import REPO, shared_trace
from traceana.analysis import Options, analyze
from traceana.link.replay.align import UNNAMED, align, tolerance

F32 = ["float", "float"]
MM = ("aten::mm", [[64, 32], [32, 128]], F32, "gemm_k")
ADD = ("aten::add", [[64, 128], [64, 128]], F32, "add_k")
RELU = ("aten::relu", [[64, 128]], ["float"], "relu_k")


# --- the alignment itself ------------------------------------------------------------------


def test_align_identical_and_dropped_event():
    assert align((1, 2, 3, 1), (1, 2, 3, 1), 1) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    # the replay lost its second event: the other three pair with their capture nodes
    assert align((1, 3, 1), (1, 2, 3, 1), 1) == [(0, 0), (1, 2), (2, 3)]


def test_align_refuses_beyond_tolerance_and_never_pairs_different_names():
    assert align((1, 4, 5, 1), (1, 2, 3, 1), 1) is None  # two names differ: 2 unpaired > tol 1
    assert align((1, 2), (1, 2, 3, 4), 1) is None  # two events short: |2 - 4| > 1
    pairs = align((1, 9, 3, 1), (1, 2, 3, 1), 1)  # one differs: tolerated, but left unpaired
    assert pairs == [(0, 0), (2, 2), (3, 3)]


def test_tolerance_is_two_percent_at_least_one():
    assert tolerance(4, 4) == 1
    assert tolerance(544, 544) == 11  # ceil(0.02 * 544) = ceil(10.88)


def test_unnamed_capture_aligns_by_position_only():
    assert align((5, 6, -2), (UNNAMED, UNNAMED, -2), 1) == [(0, 0), (1, 1), (2, 2)]
    assert align((5, -2, 6), (UNNAMED, UNNAMED, -2), 1) is None  # a copy where a kernel was captured
    assert align((5, 6), (UNNAMED, UNNAMED, UNNAMED), 1) is None  # lengths differ: no position to trust


# --- synthetic capture + replay ------------------------------------------------------------


def _write_pair(tmp_path, replay_events, capture_ops=(MM, ADD, RELU, MM), details=True, **cap):
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    (folder / "cap.json").write_text(json.dumps(synth.trace(synth.capture_trace(list(capture_ops), **cap))))
    if details:
        (folder / "execution_details.json").write_text(
            json.dumps([{"file": "cap.json", "batch_size": 64, "mode": "FULL"}]))
    return synth.write(tmp_path, synth.trace(replay_events), "replay.json")


GOOD = [("gemm_k", 10.0), ("add_k", 4.0), ("relu_k", 3.0), ("gemm_k", 10.0)]


def test_synthetic_dropped_kernel_aligns_and_mismatch_stays_opaque(tmp_path):
    events = (synth.graph_replay(GOOD, 100, 1000.0)
              + synth.graph_replay([GOOD[0], GOOD[2], GOOD[3]], 200, 2000.0)  # add_k dropped
              + synth.graph_replay([("softmax_k", 7.0), ("other_k", 2.0), ("gemm_k", 10.0), ("foo_k", 1.0)],
                                   300, 3000.0))
    a = analyze(_write_pair(tmp_path, events))
    cap = a["trace"]["capture"]
    assert cap["source"] == "beside"
    assert cap["files"] == [{"file": "cap.json", "batch_size": 64, "mode": "FULL", "graphs": 1}]
    assert (cap["graph_launches"], cap["aligned_launches"], cap["unaligned_launches"]) == (3, 2, 1)
    assert (cap["replay_events"], cap["aligned_events"]) == (11, 7)  # 4 + 3 of 4 + 3 + 4
    rows = {r["name"]: r for r in a["ops"]}
    mm = rows["aten::mm"]
    assert mm["count"] == 4  # two captured mm ops x two aligned launches
    assert [list(d) for d in mm["input_dims"]] == [[64, 32], [32, 128]]
    assert mm["device_time_us"] == pytest.approx(40.0)  # 4 kernels x 10 µs
    assert mm["flops"] == 2 * 64 * 32 * 128  # 2*M*K*N = 524288 per call
    assert rows["aten::add"]["count"] == 1  # dropped from the second launch
    assert rows["aten::relu"]["count"] == 2
    cov = a["coverage"]
    # the third launch: 7 + 2 + 10 + 1 = 20 µs opaque, of (10+4+3+10) + (10+3+10) + 20 = 27 + 23 + 20 = 70 µs
    assert cov["opaque_by_cause"] == {"graph_unaligned": pytest.approx(20.0)}
    assert cov["device_time_us"] == pytest.approx(70.0)
    assert "graph_unaligned" in cov["opaque_advice"]
    assert cap["unaligned"] == [{"reason": "no captured graph has these kernels in this order", "events": 4,
                                 "time_us": pytest.approx(20.0)}]
    assert any("1 of 3 graph launches did not align" in w for w in a["warnings"])


def test_capture_given_as_file_and_as_folder(tmp_path):
    path = _write_pair(tmp_path, synth.graph_replay(GOOD, 100, 1000.0), details=False)
    # no execution_details.json: not found automatically
    assert "capture" not in analyze(path)["trace"]
    assert analyze(path)["coverage"]["opaque_by_cause"] == {"graph_replay": pytest.approx(27.0)}
    a = analyze(path, Options(capture=str(tmp_path / "capture_traces" / "cap.json")))
    assert a["trace"]["capture"]["source"] == "option"
    assert a["trace"]["capture"]["files"][0]["batch_size"] is None
    assert a["coverage"]["opaque_time_us"] == 0.0


def test_found_but_unusable_capture_is_a_warning(tmp_path):
    path = _write_pair(tmp_path, synth.graph_replay(GOOD, 100, 1000.0), details=False)
    (tmp_path / "capture_traces" / "execution_details.json").write_text(
        json.dumps([{"file": "gone.json", "batch_size": 8, "mode": "FULL"}]))
    a = analyze(path)
    assert a["trace"]["capture"]["error"].startswith(str(tmp_path / "capture_traces" / "execution_details.json"))
    assert any("cannot be used" in w and "gone.json" in w for w in a["warnings"])
    assert a["coverage"]["opaque_by_cause"] == {"graph_replay": pytest.approx(27.0)}


def test_cuda_capture_without_kernel_names_aligns_by_position(tmp_path):
    path = _write_pair(tmp_path, synth.graph_replay(GOOD, 100, 1000.0, name="cudaGraphLaunch"),
                       begin="cudaStreamBeginCapture", end="cudaStreamEndCapture", launch_name="cudaLaunchKernel",
                       named=False)
    cap = analyze(path)["trace"]["capture"]
    assert (cap["aligned_launches"], cap["by_position"], cap["aligned_events"]) == (1, 1, 4)


def test_equal_captures_of_two_batch_sizes(tmp_path):
    """Two batch sizes with the same kernels: the step annotation picks one; without it the
    launch stays opaque rather than take the shapes of the wrong batch size."""
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    for bs in (8, 16):
        ops = [("aten::mm", [[bs, 32], [32, 128]], F32, "gemm_k"), ("aten::relu", [[bs, 128]], ["float"], "relu_k")]
        (folder / f"bs{bs}.json").write_text(json.dumps(synth.trace(synth.capture_trace(ops))))
    (folder / "execution_details.json").write_text(json.dumps(
        [{"file": f"bs{bs}.json", "batch_size": bs, "mode": "FULL"} for bs in (8, 16)]))
    kernels = [("gemm_k", 10.0), ("relu_k", 3.0)]
    named = synth.write(tmp_path, synth.trace([synth.annotation("execute_16_context_0_generation_16", 900, 500)]
                                              + synth.graph_replay(kernels, 100, 1000.0)), "named.json")
    a = analyze(named)
    assert a["trace"]["capture"]["aligned_launches"] == 1
    assert [list(d) for d in {r["name"]: r["input_dims"] for r in a["ops"]}["aten::mm"]] == [[16, 32], [32, 128]]
    bare = synth.write(tmp_path, synth.trace(synth.graph_replay(kernels, 100, 1000.0)), "bare.json")
    a = analyze(bare)
    assert a["trace"]["capture"]["aligned_launches"] == 0
    assert a["coverage"]["opaque_by_cause"] == {"graph_unaligned": pytest.approx(13.0)}


# --- the three shared replay + capture pairs -----------------------------------------------

PAIRS = [
    # trace, graph launches, captured graphs, replayed events (all aligned), opaque % before -> after
    # (before: graph replay 96.9 / 96.0 / 98.9 plus the replayed ops' own causes once aligned)
    ("tracelens/vllm_decode_full/graph_execution.json.gz", 1, 1, 421, 97.0, 0.0),
    ("tracelens/vllm_piecewise/graph_execution.json.gz", 25, 25, 361, 96.1, 0.0),
    # sglang after: 21.8% paged attention whose KV lengths are not recorded (lengths_not_recorded) and
    # 0.2% kernels launched outside any op; none of it graph replay
    ("tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz", 1, 1, 544, 98.9, 21.9),
]


@pytest.mark.parametrize("rel,launches,graphs,events,before,after", PAIRS)
def test_shared_pairs(rel, launches, graphs, events, before, after):
    path = shared_trace(rel)
    without = analyze(path, Options(find_capture=False))
    a = analyze(path)
    pct = lambda x: round(x["coverage"]["opaque_time_us"] / x["coverage"]["device_time_us"] * 100, 1)  # noqa: E731
    assert pct(without) == before
    assert pct(a) == after
    replay = sum(v for k, v in a["coverage"]["opaque_by_cause"].items() if k in ("graph_replay", "graph_unaligned"))
    assert replay == 0.0  # the goal: graph-replay opaque <= 5%
    cap = a["trace"]["capture"]
    assert cap["source"] == "beside" and len(cap["files"]) == 1
    assert (cap["graph_launches"], cap["aligned_launches"], cap["captured_graphs"]) == (launches, launches, graphs)
    assert cap["replay_events"] == cap["aligned_events"] == events
    assert "graph_replay" not in a["coverage"]["opaque_by_cause"]
    assert "graph_unaligned" not in a["coverage"]["opaque_by_cause"]


def test_vllm_decode_full_ops_from_capture():
    a = analyze(shared_trace("tracelens/vllm_decode_full/graph_execution.json.gz"))
    rows = [r for r in a["ops"] if r["name"] == "aten::addmm"]
    # 72 captured addmm launches (24 layers x 3), one graph launch: 72 calls, all costed
    assert sum(r["count"] for r in rows) == 72
    assert all(r["flops"] for r in rows)
    names = {r["name"] for r in a["ops"]}
    assert {"vllm::moe_forward", "vllm::unified_attention_with_output", "_C::rotary_embedding"} <= names


# --- CLI -------------------------------------------------------------------------------------


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACEANA_CACHE_DIR": "off"}
    return subprocess.run([sys.executable, "-m", "traceana", *args], capture_output=True, text=True, env=env,
                           cwd=REPO, timeout=120)


def test_cli_capture_bad_path(tmp_path):
    path = synth.write(tmp_path, synth.trace(synth.graph_replay(GOOD, 100, 1000.0)), "replay.json")
    proc = _cli("report", path, "--capture", str(tmp_path / "nowhere"), "-o", str(tmp_path / "r.json"), "-q")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nowhere: no such file or folder" in lines[0]
    proc = _cli("report", path, "--capture", str(tmp_path), "-o", str(tmp_path / "r.json"), "-q")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "execution_details.json" in proc.stderr


# --- a graph launch inside an op is still a replay -----------------------------------------

NESTED = [("tracelens/vllm_decode_full/graph_execution.json.gz", "Torch-Compiled Region: 0/0"),
          ("tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "CompiledFunction"),
          ("tracelens/vllm_decode_full/graph_execution.json.gz", "my_decode_scope")]


def _wrap_graph_launches(src: str, dst, region: str) -> int:
    """The trace at src with every graph launch enclosed in a cpu_op named `region` (as torch.compile's
    region, AOTAutograd's CompiledFunction or a record_function scope recorded as an op encloses it),
    written to dst; returns how many launches were wrapped."""
    import gzip

    with gzip.open(src) as fh:
        doc = json.load(fh)
    wraps = []
    for e in doc["traceEvents"]:
        if "GraphLaunch" in e.get("name", ""):
            wraps.append({"ph": "X", "cat": "cpu_op", "name": region, "pid": e["pid"], "tid": e["tid"],
                          "ts": e["ts"] - 1.0, "dur": e["dur"] + 2.0,
                          "args": {"External id": 9_000_000 + len(wraps), "Input Dims": [], "Input type": []}})
    doc["traceEvents"].extend(wraps)
    dst.write_text(json.dumps(doc))
    return len(wraps)


@pytest.mark.parametrize("rel,region", NESTED)
def test_graph_launch_inside_an_op_is_a_replay(tmp_path, rel, region):
    src = shared_trace(rel)
    capture = os.path.join(os.path.dirname(src), "capture_traces")
    nested = tmp_path / "nested.json"
    assert _wrap_graph_launches(src, nested, region) == 1  # each trace replays one graph
    bare = analyze(src)
    a = analyze(str(nested), Options(capture=capture))
    assert a["trace"]["capture"]["aligned_launches"] == 1
    assert a["trace"]["capture"]["aligned_events"] == bare["trace"]["capture"]["aligned_events"]
    for key in ("modeled_time_us", "opaque_time_us", "unmodeled_time_us"):
        assert a["coverage"][key] == pytest.approx(bare["coverage"][key])
    assert a["coverage"]["opaque_by_cause"] == pytest.approx(bare["coverage"]["opaque_by_cause"])
    costed = lambda x: sorted((r["name"], r["count"], r["flops"], r["bytes"]) for r in x["ops"]  # noqa: E731
                              if r["flops"] is not None)
    assert costed(a) == costed(bare)
    # without the capture: the replay is opaque as a graph replay, not as the region's kernels
    alone = analyze(str(nested), Options(find_capture=False))
    assert "compiled" not in alone["coverage"]["opaque_by_cause"]
    assert alone["coverage"]["opaque_by_cause"]["graph_replay"] > 0.9 * alone["coverage"]["device_time_us"]


def test_a_trace_recorded_whole_aligns_with_its_own_capture(tmp_path):
    # one recording holding the capture (BeginCapture, mm/add/relu/mm launched, EndCapture) and, later, a replay
    events = synth.capture_trace([MM, ADD, RELU, MM]) + synth.graph_replay(GOOD, 100, 1000.0)
    a = analyze(synth.write(tmp_path, synth.trace(events), "whole.json"))
    cap = a["trace"]["capture"]
    assert cap["source"] == "trace" and cap["files"] == [
        {"file": "whole.json (itself)", "batch_size": None, "mode": None, "graphs": 1}]
    assert (cap["aligned_launches"], cap["aligned_events"]) == (1, 4)
    rows = {r["name"]: r for r in a["ops"]}
    assert rows["aten::mm"]["count"] == 2 and rows["aten::mm"]["flops"] == 2 * 64 * 32 * 128  # 524,288 per call
    assert a["coverage"]["opaque_time_us"] == 0.0


def test_capture_beside_a_trace_without_replays_is_named_not_used(tmp_path):
    # a trace of eagerly launched ops, with a capture folder beside it (traceana record of a compiled CPU program)
    events = [synth.op("aten::mm", 100.0, 20.0, 1, dims=[[64, 32], [32, 128]]), synth.launch(105.0, 1, ext=1),
              synth.kernel("gemm_k", 110.0, 10.0, 1, ext=1)]
    path = _write_pair(tmp_path, events)
    cap = analyze(path)["trace"]["capture"]
    assert cap["source"] == "beside" and cap["graph_launches"] == 0 and cap["files"][0]["file"] == "cap.json"
    assert "not needed: this trace replays no CUDA/HIP graph" in cap["note"]
