"""Structure of the committed sample traces, read with plain json/gzip (no traceana code)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
T4 = SAMPLES / "t4_seed_pow_mul.json"
CPU = SAMPLES / "cpu_mlp_train.json.gz"
MAKE_T4 = REPO / "scripts" / "make_t4_seed_trace.py"

# Published self-CUDA time of each kernel-launching op in the seed table (us).
PUBLISHED_US = {
    "aten::fill_": 1141.0,
    "aten::mm": 230208.0,
    "aten::sum": 991.583,
    "aten::pow": 2167.0,
    "aten::mul_": 2184.0,
}
MAT = [8192, 8192]


@pytest.fixture(scope="module")
def t4() -> dict:
    with open(T4, encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def cpu() -> dict:
    with gzip.open(CPU, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _events(doc, cat, ph="X"):
    return [e for e in doc["traceEvents"] if e.get("cat") == cat and e.get("ph") == ph]


def _inside(inner, outer) -> bool:
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


# ---------------------------------------------------------------- T4 seed trace

def test_t4_top_level(t4):
    assert t4["schemaVersion"] == 1
    assert t4["record_shapes"] == 1
    assert "distributedInfo" not in t4
    assert t4["traceName"]
    assert isinstance(t4["baseTimeNanoseconds"], int)
    (dev,) = t4["deviceProperties"]
    assert dev["name"] == "Tesla T4"
    assert (dev["computeMajor"], dev["computeMinor"], dev["numSms"]) == (7, 5, 40)
    assert dev["totalGlobalMem"] == 15843721216
    assert dev["warpSize"] == 32 and dev["maxThreadsPerBlock"] == 1024
    note = t4["traceana_note"]
    assert "jovsa/scalify" in note and "published" in note and "synthesised" in note


def test_t4_no_profiler_steps(t4):
    assert not [e for e in t4["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep")]


def test_t4_kernel_durations_are_the_published_ones(t4):
    ops_by_ext = {e["args"]["External id"]: e for e in _events(t4, "cpu_op")}
    kernels = _events(t4, "kernel")
    got = {ops_by_ext[k["args"]["External id"]]["name"]: k["dur"] for k in kernels}
    assert got == PUBLISHED_US
    assert len(kernels) == 5


def test_t4_every_kernel_has_a_nested_launch(t4):
    ops = _events(t4, "cpu_op")
    ops_by_ext = {e["args"]["External id"]: e for e in ops}
    launches = {e["args"]["correlation"]: e for e in _events(t4, "cuda_runtime")
                if e["name"] == "cudaLaunchKernel"}
    kernels = _events(t4, "kernel")
    assert len(launches) == len(kernels) == 5
    for k in kernels:
        launch = launches[k["args"]["correlation"]]
        ext = k["args"]["External id"]
        assert launch["args"]["External id"] == ext
        op = ops_by_ext[ext]
        assert (launch["pid"], launch["tid"]) == (op["pid"], op["tid"])
        assert _inside(launch, op), (op["name"], launch, op)
        # the op is the innermost cpu_op around the launch
        around = [o for o in ops if o["tid"] == launch["tid"] and _inside(launch, o)]
        assert min(around, key=lambda o: o["dur"]) is op
        # the kernel starts after its launch began, on device 0 / stream 7
        assert k["ts"] >= launch["ts"]
        assert (k["pid"], k["tid"], k["args"]["device"], k["args"]["stream"]) == (0, 7, 0, 7)
        assert len(k["args"]["grid"]) == 3 and len(k["args"]["block"]) == 3


def test_t4_flows_pair_launches_and_kernels(t4):
    starts = {e["id"]: e for e in t4["traceEvents"] if e.get("cat") == "ac2g" and e["ph"] == "s"}
    ends = {e["id"]: e for e in t4["traceEvents"] if e.get("cat") == "ac2g" and e["ph"] == "f"}
    corrs = {k["args"]["correlation"] for k in _events(t4, "kernel")}
    assert set(starts) == set(ends) == corrs


def test_t4_kernels_back_to_back_in_program_order(t4):
    ops_by_ext = {e["args"]["External id"]: e for e in _events(t4, "cpu_op")}
    kernels = sorted(_events(t4, "kernel"), key=lambda k: k["ts"])
    order = [ops_by_ext[k["args"]["External id"]]["name"] for k in kernels]
    assert order == ["aten::fill_", "aten::mm", "aten::mul_", "aten::sum", "aten::pow"]
    for a, b in zip(kernels, kernels[1:]):
        assert 0 <= b["ts"] - (a["ts"] + a["dur"]) < 5
    (sync,) = [e for e in _events(t4, "cuda_runtime") if e["name"] == "cudaDeviceSynchronize"]
    assert sync["ts"] + sync["dur"] >= kernels[-1]["ts"] + kernels[-1]["dur"]
    last_launch = max(e["ts"] for e in _events(t4, "cuda_runtime") if e["name"] != sync["name"])
    assert sync["ts"] > last_launch


def test_t4_op_shapes(t4):
    ops = {e["name"]: e["args"] for e in _events(t4, "cpu_op")}
    assert set(ops) == {"aten::ones", "aten::empty", "aten::fill_", "aten::matmul", "aten::mm",
                        "aten::mul_", "aten::sum", "aten::pow"}
    assert ops["aten::ones"]["Input Dims"] == [[], [], [], [], []]
    assert ops["aten::ones"]["Concrete Inputs"][0] == "[8192, 8192]"
    assert ops["aten::fill_"]["Input Dims"] == [MAT, []]
    assert ops["aten::fill_"]["Input type"] == ["float", "Scalar"]
    assert ops["aten::mm"]["Input Dims"][:2] == [MAT, MAT]
    assert ops["aten::mm"]["Input type"][:2] == ["float", "float"]
    assert ops["aten::sum"]["Input Dims"] == [MAT, []]
    assert ops["aten::sum"]["Input type"] == ["float", ""]
    assert ops["aten::pow"]["Input Dims"] == [MAT, []]
    assert ops["aten::pow"]["Input type"] == ["float", "Scalar"]
    assert ops["aten::mul_"]["Input Dims"] == [MAT, []]
    for args in ops.values():
        n = len(args["Input Dims"])
        assert len(args["Input type"]) == len(args["Input Strides"]) == n
        assert len(args["Concrete Inputs"]) == n


def test_t4_children_nest_in_parents(t4):
    ops = {e["name"]: e for e in _events(t4, "cpu_op")}
    assert _inside(ops["aten::empty"], ops["aten::ones"])
    assert _inside(ops["aten::fill_"], ops["aten::ones"])
    assert _inside(ops["aten::mm"], ops["aten::matmul"])


def test_t4_timestamps_have_at_most_3_decimals(t4):
    for e in t4["traceEvents"]:
        for key in ("ts", "dur"):
            if key in e:
                assert isinstance(e[key], float)
                text = repr(e[key])            # what json wrote: shortest round-trip form
                assert "e" not in text and len(text.split(".")[1]) <= 3, (e["name"], text)


def test_t4_script_is_deterministic(tmp_path):
    out = tmp_path / "t4.json"
    subprocess.run([sys.executable, str(MAKE_T4), "--out", str(out)], check=True,
                   capture_output=True)
    assert out.read_bytes() == T4.read_bytes()


# ---------------------------------------------------------------- CPU training trace

def test_cpu_trace_size():
    assert CPU.stat().st_size < 2 * 1024 * 1024


def test_cpu_trace_top_level(cpu):
    assert cpu["schemaVersion"] == 1
    assert cpu["record_shapes"] == 1
    assert cpu["deviceProperties"] == []
    assert not _events(cpu, "kernel")
    assert not _events(cpu, "cuda_runtime")


def test_cpu_trace_has_shapes_for_gemm_and_layer_norm(cpu):
    ops = _events(cpu, "cpu_op")
    names = {e["name"] for e in ops}
    assert "aten::addmm" in names and "aten::mm" in names
    assert names & {"aten::layer_norm", "aten::native_layer_norm"}
    assert "aten::scaled_dot_product_attention" in names
    assert "aten::gelu" in names

    def dims(name):
        return [e["args"].get("Input Dims") for e in ops if e["name"] == name]

    for name in ("aten::addmm", "aten::mm", "aten::native_layer_norm"):
        found = dims(name)
        assert found and all(d for d in found), name
    for d in dims("aten::addmm"):
        bias, m1, m2 = d[:3]
        assert len(m1) == 2 and len(m2) == 2 and m1[1] == m2[0] and bias[-1] == m2[1]
    for d in dims("aten::native_layer_norm"):
        assert d[0][-1] == d[2][0]


def test_cpu_trace_has_profiler_steps(cpu):
    steps = [e for e in _events(cpu, "user_annotation") if e["name"].startswith("ProfilerStep#")]
    assert 2 <= len(steps) <= 3
    ops = _events(cpu, "cpu_op")
    for step in steps:
        assert any(_inside(o, step) for o in ops if o["name"] == "aten::addmm")
    backward = [e for e in ops if e["name"].endswith("Backward0")]
    assert backward, "no autograd backward ops recorded"
    assert any("AdamW" in e["name"] for e in _events(cpu, "user_annotation"))
