"""The first screen on traces like the ones users bring from other projects: torch.profiler's defaults (no
shapes, no stacks), custom kernels outside any op, GPUs the shared traces do not cover (T4, L4, A10G,
RTX 4090). Each trace is real model code recorded on CPU and re-shaped as a CUDA run (tests/recorded.py,
tests/recorded_unseen.py say which events are synthetic), then stripped of its shapes; the tests assert the
first levers and their savings with the arithmetic, each saving within the ledger term it comes from.

Then the shared traces: the no-shape dtype lever (from kernel names) against the shaped one (from costed ops)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import recorded_unseen as ru
from tests.analyses import analysis
from tests.recorded import write
from traceana.analysis import analyze
from traceana.link.kernel_names import parse

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("torch")
pytest.importorskip("transformers")


def _kernels(path: str) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return sorted((e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def _entry(a: dict, kind: str, group: str | None = None) -> tuple[dict, dict]:
    """The plan entry of a kind (and group), and its first finding."""
    for p in a["plan"]:
        f = a["findings"][p["finding"]]
        if p["kind"] == kind and (group is None or f.get("group") == group):
            return p, f
    raise AssertionError(f"no {kind} lever in {[p['title'] for p in a['plan']]}")


def _within_source(a: dict) -> None:
    """Every lever's saving within what its ledger term lets it claim."""
    for f in a["findings"]:
        src = f.get("source_term")
        if f.get("lever") and src:
            assert f["saving_us"] <= src["us"] + 1e-6 and src["us"] <= src["term_us"] + 1e-6, f["title"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (stripped path, shaped path), each recorded once."""
    folder = tmp_path_factory.mktemp("unseen")
    made: dict[str, tuple[str, str]] = {}

    def get(name: str) -> tuple[str, str]:
        if name not in made:
            if name == "t4_conv_training":
                doc = ru.in_step(ru.on_device(ru.conv_training_cpu(), "t4", host_speedup=5000.0))
            elif name == "a10g_gelu":
                doc = ru.in_step(ru.on_device(ru.gelu_chain_cpu(), "a10g", host_speedup=1000.0))
            elif name.startswith("rtx4090_custom"):
                doc = ru.in_step(ru.on_device(ru.custom_matmul_cpu(with_stack=name.endswith("stack")), "rtx4090",
                                              host_speedup=1000.0))
                total = sum(e["dur"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
                # the custom kernel takes 9x the rest: 90% of device time; 128 blocks of 128 threads
                doc = ru.with_outside_kernel(doc, "matmul_kernel", 9.0 * total, grid=[128, 1, 1], block=[128, 1, 1])
            elif name == "l4_tp":
                cpu = folder / "tp_cpu.json"
                subprocess.run([sys.executable, "-m", "tests.recorded_unseen", "tp", str(cpu)], cwd=REPO, check=True,
                               capture_output=True, timeout=600)
                shaped = ru.on_device(ru.nccl_cpu(json.loads(cpu.read_text())), "l4", host_speedup=20000.0)
                doc = ru.in_step(ru.with_nccl(shaped, bus_gbps=12.0))
            else:
                raise KeyError(name)
            made[name] = (write(ru.without_shapes(doc), folder / f"{name}.json.gz"),
                          write(doc, folder / f"{name}.shaped.json.gz"))
        return made[name]
    return get


def test_t4_fp32_conv_training_without_shapes_gets_fp16_autocast(runs):
    path, shaped_path = runs("t4_conv_training")
    a = analyze(path)
    assert a["trace"]["record_shapes"] is False and a["device"]["key"] == "t4"
    # the device line's roof: the one the conv kernels ran on (fp32 CUDA cores), not the T4's int8 peak
    from traceana.render.first import device_line
    assert "fp32 vector 8.10 TFLOP/s" in device_line(a)
    p, f = _entry(a, "tensor_core_dtype")
    assert a["plan"][0] is p  # the first lever
    ks = [e for e in _kernels(path) if (k := parse(e["name"])).cls in ("gemm", "convolution") and k.a == "fp32"
          and k.tensor_cores is False]
    assert {parse(e["name"]).library for e in ks} == {"cuDNN", "cuBLAS"}  # cuDNN convs, volta_sgemm for the head
    durs = [e["dur"] for e in ks]
    floor = a["device"]["launch_floor_us"]
    # T4: fp32 8.1 TFLOP/s on CUDA cores at 90% today, fp16 tensor cores 65 TFLOP/s at the 80% default (no
    # published figure for Turing): each kernel x (8.1 x 0.9) / (65 x 0.8) = x 0.1402, never below the floor
    r = 8.1 * 0.9 / (65 * 0.8)
    assert r == pytest.approx(0.14019, abs=1e-5)
    after = sum(max(d * r, min(d, floor)) for d in durs)
    assert f["saving_us"] == pytest.approx(sum(durs) - after, rel=1e-9)
    # at least the bytes halve (were every conv memory-bound): sum - sum / 2
    assert f["saving_if_memory_bound_us"] == pytest.approx(sum(durs) - sum(max(d * 0.5, min(d, floor)) for d in durs))
    assert f["saving_if_memory_bound_us"] < f["saving_us"] < sum(durs)
    assert "no TF32 tensor cores" in f["text"] and "fp16 is its tensor-core type" in f["text"]
    assert "GradScaler" in f["fix"] and "GradScaler" in p["fix"]  # training in fp16 needs loss scaling
    _, fu = _entry(a, "fusion", "fusion")  # batch norm + ReLU + residual add chains
    assert "batch_norm" in fu["text"] and "threshold_backward" in fu["text"]
    _within_source(a)
    # with shapes, the costed ops' own dtype lever (each conv at the share of the fp16 roof it reaches now)
    shaped = analyze(shaped_path)
    sp, _ = _entry(shaped, "tensor_core_dtype")
    assert 0.8 <= f["saving_us"] / sp["saving_us"] <= 1.25, (f["saving_us"], sp["saving_us"])


def test_tensor_parallel_nccl_without_sizes_gets_a_communication_lever(runs):
    path, _ = runs("l4_tp")
    a = analyze(path)
    assert a["device"]["key"] == "l4" and a["context"]["parallelism"] == ["TP"] and a["context"]["world_size"] == 2
    p, f = _entry(a, "comm_unsized")
    assert a["plan"][0] is p
    nccl = [e for e in _kernels(path) if e["name"].startswith("ncclDevKernel_")]
    # 2 layers x (all-gather + reduce-scatter); each moves half the gathered [512, 1, 512] bf16 sequence over the
    # 12 GB/s PCIe ring: 12 + 0.5 x 512 x 512 x 2 B / 12e3 B/µs = 12 + 21.845 = 33.845 µs
    assert len(nccl) == 4
    assert all(e["dur"] == pytest.approx(12.0 + 0.5 * 512 * 512 * 2 / 12e3) for e in nccl)
    # the GPU runs them with nothing beside them (tensor parallelism waits for each): all of it is exposed
    assert f["saving_us"] == pytest.approx(sum(e["dur"] for e in nccl), rel=1e-6)
    assert f["saving_us"] / a["ledger"]["span_us"] > 0.5  # the largest part of the step
    assert "all-gather 50%, reduce-scatter 50%" in f["text"] and "parallelism TP, 2 ranks" in f["text"]
    assert "column-parallel GEMM" in f["text"] and "record_shapes=True" in f["fix"]
    # two L4s have no NVLink: every tensor-parallel collective crosses PCIe 4.0 x16 (31.5 GB/s each way)
    assert "NVIDIA L4 has no GPU-to-GPU link" in f["text"] and "31.5 GB/s each way" in f["text"]
    assert "fewer tensor-parallel ranks" in f["text"]
    _within_source(a)


def test_fp32_element_wise_chain_without_shapes_gets_fusion_naming_the_kernels(runs):
    path, _ = runs("a10g_gelu")
    a = analyze(path)
    assert a["device"]["key"] == "a10g"
    p, f = _entry(a, "fusion", "fusion")
    assert a["plan"][0] is p
    ks = _kernels(path)
    chain = [e for e in ks if parse(e["name"]).cls == "elementwise"]
    assert [parse(e["name"]).op for e in chain] == ["mul", "pow", "mul", "add", "mul", "tanh", "add", "mul"]
    # one chain of the 8 kernels of transformers' NewGELUActivation: fused, it keeps its longest kernel's time
    t = sum(e["dur"] for e in chain)
    assert t / sum(e["dur"] for e in ks) > 0.8
    assert f["saving_us"] == pytest.approx(t - max(e["dur"] for e in chain), rel=1e-9)
    assert "mul → pow → mul → add → mul → tanh → add → mul" in f["text"] and "1 chain" in f["title"]
    for op in ("mul", "add", "pow", "tanh"):  # the kernels, by name
        assert f"CUDAFunctor_{op.capitalize()}<float>" in f["text"]
    # the Linear's fp32 GEMM: A10G's TF32 runs at its fp32 rate (35 TFLOP/s each), so bf16 (70): x (35 x 0.9) /
    # (70 x 0.8)
    _, d = _entry(a, "tensor_core_dtype")
    g = [e["dur"] for e in ks if parse(e["name"]).cls == "gemm"]
    floor = a["device"]["launch_floor_us"]
    assert d["saving_us"] == pytest.approx(sum(x - max(x * 35 * 0.9 / (70 * 0.8), min(x, floor)) for x in g))
    assert "bfloat16" in d["text"] and "GradScaler" not in d["text"]  # inference, and bf16 needs no scaling
    _within_source(a)


@pytest.mark.parametrize("variant", ["rtx4090_custom", "rtx4090_custom_stack"])
def test_custom_kernel_outside_any_op_is_named_first(runs, variant):
    path, _ = runs(variant)
    a = analyze(path)
    assert a["device"]["key"] == "rtx4090"
    p = a["plan"][0]
    f = a["findings"][p["finding"]]
    assert p["kind"] == "outside_op_kernel" and p["saving_us"] == 0.0  # first, and claims nothing
    assert "torch.matmul" in p["fix"]
    # 9 x the rest of the kernels' time: 9 / 10 = 90% of device time; 128 blocks on the RTX 4090's 128 SMs
    head = "matmul_kernel (gemm), launched outside any op, takes 90% of device time ("
    s = a["kernels"]["sentence"]
    assert s.startswith(head) and "grid of 128 blocks (1.0 per SM of 128)" in s
    assert "in kernels whose names do not say" in s  # a Triton kernel's name does not tell its tensor-core use
    if variant.endswith("stack"):  # with_stack=True: the Python frame that launched it
        assert "(triton_matmul)" in f["text"] and "(triton_matmul)" in s
    else:
        assert "profile with with_stack=True" in f["text"]
    from traceana.render.first import plan
    assert plan(a)[0]["saving"] == "" and plan(a)[0]["after"] == ""  # the first screen claims no saving for it


def _dtype_saving(a: dict) -> float:
    """The dtype lever's saving (fp32 / TF32 -> faster tensor cores; not fp8): its findings together."""
    return sum(f["saving_us"] for f in a["findings"] if f["kind"] == "tensor_core_dtype" and f.get("lever")
               and f.get("group") != "fp8")


@pytest.mark.parametrize("rel", ["kineto/worker0.1623143089861.pt.trace.json.gz", "hta/test.json.gz",
                                 "hta/rank0.json.gz"])
def test_no_shape_dtype_lever_against_the_shaped_one(rel, tmp_path):
    """The dtype lever read from kernel names alone (shapes stripped) against the one the shaped trace gives
    (costed ops' own findings, plus the kernel names' for what they leave uncovered): within 1.5x either way,
    and never above the kernels' own time. kineto: ResNet-50 fp32 on a V100 (fp16 autocast); hta/test:
    recsys fp32 GEMMs on a V100; hta/rank0: TF32 GEMMs on an A100 (bf16 autocast)."""
    from tests.conftest import shared_trace
    from tests.test_stripped_shapes import strip

    shaped = analysis(rel)
    a = analyze(strip(shared_trace(rel), tmp_path / "noshape.json.gz"))
    got, want = _dtype_saving(a), _dtype_saving(shaped)
    assert want > 0 and 1 / 1.5 <= got / want <= 1.5, (got, want)
    for f in a["findings"]:
        if f["kind"] == "tensor_core_dtype" and f.get("lever"):
            # its kernels' own time is its source; the memory-bound reading is the low end of its range
            assert f["saving_us"] < f["source_term"]["us"] and f["saving_if_memory_bound_us"] <= f["saving_us"]


def test_an_fp32_matmul_beside_autocast_ones_is_told_to_join_the_region(tmp_path):
    """A model run under torch.autocast(bfloat16) whose head is applied outside the region (fp32), recorded on CPU
    and shaped as an A10G run with its shapes: the head's fp32 matmul is compute-bound, and its dtype lever says the
    run already multiplies bf16, not "start using autocast"."""
    import torch

    from tests.recorded import record

    torch.manual_seed(0)
    body = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024))
    head = torch.nn.Linear(1024, 4096)
    x = torch.randn(2048, 1024)

    def run():
        with torch.no_grad():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = body(x)
            return head(h.float())

    run()
    doc = ru.in_step(ru.on_device(record(run), "a10g", host_speedup=5000.0))
    a = analyze(write(doc, tmp_path / "mixed.json.gz"))
    f = next(f for f in a["findings"] if f["kind"] == "tensor_core_dtype" and "aten::addmm" in f["title"]
             and "fp32" in f["title"])
    assert "the run already multiplies bf16 on tensor cores" in f["fix"] and "autocast region" in f["fix"]
