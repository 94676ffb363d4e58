"""Launch grids in thread blocks, whatever the launch API counted them in.

hipExtModuleLaunchKernel (and hipHccModuleLaunchKernel) take the grid as a global work size in
work-items, and Kineto records those arguments as the kernel's `grid`; every other launch API takes
thread blocks. GpuEvents.blocks divides the former by the block size, per dimension, on both load
paths (the Python loader and the C scanner), and roofline's "grid too small" limiter reads it.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.analyses import analysis
from tests.conftest import shared_trace
from traceana.load import reader, stream


def _event(cat, name, ts, corr, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 2, "ts": ts, "dur": 1,
            "args": {"correlation": corr, **args}}


def _trace(tmp_path):
    """Three launches of one grid shape through three HIP APIs, plus a Tensile-style 1-D grid."""
    events = []
    launches = [("hipExtModuleLaunchKernel", [784, 1, 64], [256, 1, 1]),
                ("hipLaunchKernel", [784, 1, 64], [256, 1, 1]),
                ("hipModuleLaunchKernel", [8, 558, 1], [256, 1, 1]),
                ("hipExtModuleLaunchKernel", [73728, 1, 1], [256, 1, 1]),
                ("hipHccModuleLaunchKernel", [100, 3], [64, 2]),
                ("hipExtModuleLaunchKernel", [512, 1, 1], None)]  # no block recorded: unknown
    for i, (api, grid, block) in enumerate(launches):
        events.append(_event("cuda_runtime", api, 10 * i, 100 + i))
        kargs = {"device": 0, "stream": 0, "grid": grid}
        if block is not None:
            kargs["block"] = block
        events.append(_event("kernel", f"k{i}", 10 * i + 5, 100 + i, **kargs))
    p = tmp_path / "grids.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _blocks(trace):
    names = [trace.names[c] for c in trace.gpu.name]
    return dict(zip(names, trace.gpu.blocks.tolist()))


def _expected():
    return {
        "k0": 256.0,  # work-items: ceil(784/256) * 1 * 64 = 4 * 64 = 256 (a partial block at the edge runs)
        "k1": 50176.0,  # blocks already: 784 * 1 * 64 = 50176
        "k2": 4464.0,  # hipModuleLaunchKernel's gridDimX/Y/Z are blocks: 8 * 558 = 4464
        "k3": 288.0,  # 73728 / 256 = 288
        "k4": 4.0,  # hipHccModuleLaunchKernel, global work size too: ceil(100/64) * ceil(3/2) = 2 * 2 = 4
    }


def test_python_loader_divides_work_item_grids(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    got = _blocks(reader.load_trace(str(_trace(tmp_path))))
    assert {k: got[k] for k in _expected()} == _expected()
    assert np.isnan(got["k5"])  # no block size recorded: the grid's blocks are unknown, not 512


@pytest.mark.skipif(not stream.available(), reason="the C scanner is not built")
def test_c_scanner_agrees(tmp_path):
    p = _trace(tmp_path)
    fast = stream.load(str(p), os.stat(p))
    assert fast is not None
    got = _blocks(fast)
    assert {k: got[k] for k in _expected()} == _expected()
    assert np.isnan(got["k5"])


def test_tensile_gemm_grid_on_mi300():
    """bert-small on MI300X: hipBLASLt's Tensile GEMMs go through hipExtModuleLaunchKernel with
    grid [73728, 1, 1] and block [256, 1, 1]: 73728 / 256 = 288 workgroups, fewer than the 304 CUs."""
    trace = reader.load_trace(shared_trace("tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz"))
    names = np.array([trace.names[c] for c in trace.gpu.name])
    tensile = np.char.startswith(names, "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128")
    assert set(trace.gpu.blocks[tensile].tolist()) >= {288.0}  # 73728 / 256
    assert 73728.0 not in set(trace.gpu.blocks[tensile].tolist())


def test_grid_too_small_named_on_mi300_qwen():
    """Qwen1.5-0.5B on MI300X: a batched GEMM (aten::bmm, fp32 Tensile kernel, grid [17920,1,1] work-items,
    block [256,1,1]) runs 17920 / 256 = 70 workgroups on 304 CUs: the limiter says the grid is too small
    (it used to read 17,920 "blocks" and say they filled the GPU)."""
    a = analysis("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    row = next(r for r in a["ops"] if r["name"] == "aten::bmm" and r["bound"] == "underutilised"
               and r["kernels"][0]["name"].startswith("Cijk_Ailk_Bljk_S_B_"))
    assert row["grid_blocks"] == 70.0  # 17920 / 256
    assert row["limiter"].startswith("grid too small: its kernels launch 70 thread block(s) for 304 SMs")
