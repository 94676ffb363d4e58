"""Traces like the ones users bring from other projects, made from real model code recorded on CPU.

tests/recorded.py turns a CPU trace of real model code into the Kineto trace an A100 run of it would
leave (its module doc says exactly which events are recorded and which are synthetic). This module
takes that trace further, to runs the shared traces do not cover, each change synthetic and stated here:

  device     `on_device`: the time model runs at another device's row of
             traceana/roofline/devices/table.csv, deviceProperties are that device's (what
             cudaGetDeviceProperties reports for it: name, compute capability, SMs, memory), and the
             cuBLAS kernels carry the names that device's library runs: fp32 GEMMs on Volta and Turing
             run cuBLAS's `volta_sgemm_*` SIMT kernels (cuBLAS ships no Turing SGEMM; Turing has no
             TF32), on Ampere and Ada `ampere_sgemm_*`. cuDNN's generic kernels
             (implicit_convolve_sgemm, dgrad_engine, wgrad_alg0_engine) keep their names on every arch.
  no shapes  `without_shapes`: what torch.profiler writes with record_shapes off (its default): no
             "Input Dims", "Input type", "Input Strides", "Concrete Inputs" on any event, no
             record_shapes flag. Shapes are removed after the time model has used them.
  NCCL       `nccl_cpu` drops the ops gloo ran inside each c10d collective op (its copies: NCCL runs none),
             then `with_nccl`: each c10d collective op (c10d::_allgather_base_, c10d::_reduce_scatter_base_,
             c10d::allreduce_, ...) recorded on CPU with gloo gets what a NCCL run adds: a
             `record_param_comms` op inside it (collective name, group size, dtype; no message sizes:
             "without sizes"), a cudaLaunchKernelExC in that, and an `ncclDevKernel_<Coll>_..._RING_LL` kernel
             on NCCL's own stream (STREAM_NCCL). Its time: NCCL_LATENCY_US + the ring's bytes per rank
             over the link's bus bandwidth: all-gather / reduce-scatter move (n-1)/n of the full tensor,
             all-reduce twice that. The step's GPU work is then re-timed in launch order, one piece after
             another (tensor parallelism: each collective consumes the matmul before it and feeds the one
             after).
  outside op `with_outside_kernel`: a kernel launched where the recorded code ran a function that is no
             torch op (a marker range `MARK` around it, recorded and then removed): a `cuLaunchKernel`
             (the driver API call Triton's launcher makes) on the Python thread with no cpu_op around it,
             the kernel named and gridded as given, its time given; the GPU work is re-timed after it.
  step       `in_step`: a ProfilerStep#N range over the recorded CPU events.
"""

from __future__ import annotations

import copy
import math

from tests.recorded import ITEMSIZE, LAUNCH_LATENCY_US, STREAM, gpu_shaped, record

STREAM_NCCL = 21
NCCL_LATENCY_US = 12.0  # a ring LL collective's fixed cost between two GPUs on one host
MARK = "__outside_op__"

# what cudaGetDeviceProperties reports (name, cc, SMs, memory), for the devices the tests run on
PROPS = {
    "t4": {"id": 0, "name": "Tesla T4", "computeMajor": 7, "computeMinor": 5, "numSms": 40,
           "totalGlobalMem": 15843721216, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 1024,
           "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152},
    "a10g": {"id": 0, "name": "NVIDIA A10G", "computeMajor": 8, "computeMinor": 6, "numSms": 80,
             "totalGlobalMem": 23836033024, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 1536,
             "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152},
    "l4": {"id": 0, "name": "NVIDIA L4", "computeMajor": 8, "computeMinor": 9, "numSms": 58,
           "totalGlobalMem": 23580639232, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 1536,
           "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152},
    "rtx4090": {"id": 0, "name": "NVIDIA GeForce RTX 4090", "computeMajor": 8, "computeMinor": 9, "numSms": 128,
                "totalGlobalMem": 25393692672, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 1536,
                "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152},
}
#: NCCL kernel names per c10d op (NCCL >= 2.19's ncclDevKernel_<Coll>[_<RedOp>_<type>]_<ALGO>_<PROTO>)
NCCL = {"_allgather_base_": ("ncclDevKernel_AllGather_RING_LL", "_allgather_base", 1.0),
        "allgather_": ("ncclDevKernel_AllGather_RING_LL", "allgather", 1.0),
        "_reduce_scatter_base_": ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "_reduce_scatter_base", 1.0),
        "reduce_scatter_": ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter", 1.0),
        "allreduce_": ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 2.0)}
NCCL_ARGS = "(ncclDevComm*, unsigned long, ncclWork*)"


def _arch_names(name: str, cc: float) -> str:
    if cc < 8.0:
        return name.replace("ampere_sgemm_", "volta_sgemm_")
    return name


def on_device(cpu_doc: dict, key: str, host_speedup: float = 1.0) -> dict:
    """gpu_shaped at device `key`'s row, with its deviceProperties and its cuBLAS kernel names."""
    doc = gpu_shaped(cpu_doc, device_key=key, host_speedup=host_speedup)
    props = PROPS[key]
    cc = props["computeMajor"] + props["computeMinor"] / 10
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = _arch_names(e["name"], cc)
    doc["deviceProperties"] = [dict(props)]
    return doc


def without_shapes(doc: dict) -> dict:
    out = copy.deepcopy(doc)
    out.pop("record_shapes", None)
    for e in out["traceEvents"]:
        a = e.get("args")
        if isinstance(a, dict):
            for k in ("Input Dims", "Input type", "Input Strides", "Concrete Inputs"):
                a.pop(k, None)
    return out


def _bytes(e: dict) -> tuple[float, str]:
    """Bytes of a c10d op's largest tensor argument (its recorded dims and type), and that type."""
    a = e.get("args") or {}
    best = (0.0, "float")
    for d, t in zip(a.get("Input Dims") or [], a.get("Input type") or []):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and t in ITEMSIZE:
            best = max(best, (float(math.prod(d) * ITEMSIZE[t]), t))
    return best


def _retime(events: list[dict]) -> None:
    """GPU work one piece after another in launch order: start = max(launch + latency, previous end)."""
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    gpu.sort(key=lambda e: launch.get(e["args"]["correlation"], e["ts"]))
    free = -math.inf
    for e in gpu:
        e["ts"] = max(launch.get(e["args"]["correlation"], e["ts"]) + LAUNCH_LATENCY_US, free)
        free = e["ts"] + e["dur"]


def nccl_cpu(cpu_doc: dict) -> dict:
    """The CPU trace without the ops gloo ran inside each c10d collective (its copies and clones: a NCCL run's
    collective op launches its kernel and nothing else), before gpu_shaped turns ops into kernels."""
    out = copy.deepcopy(cpu_doc)
    ev = out["traceEvents"]
    spans = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("c10d::")]

    def inside(e: dict) -> bool:
        return (e.get("cat") == "cpu_op" and not e["name"].startswith("c10d::")
                and any(t == e["tid"] and a <= e["ts"] and e["ts"] + e["dur"] <= b for t, a, b in spans))

    out["traceEvents"] = [e for e in ev if not inside(e)]
    return out


NCCL_TYPE = {"float": ("f32", "Float"), "c10::BFloat16": ("bf16", "BFloat16"), "c10::Half": ("f16", "Half")}


def with_nccl(doc: dict, bus_gbps: float, world: int = 2) -> dict:
    """NCCL launches and kernels for the c10d collectives (module doc); `doc` must still carry its shapes
    (the message sizes set the kernels' time; strip them after). gloo's own ranges (`gloo:*` annotations on
    its worker threads) are dropped: a NCCL run has none."""
    out = copy.deepcopy(doc)
    ev = [e for e in out["traceEvents"] if not str(e.get("name", "")).startswith("gloo:")]
    out["traceEvents"] = ev
    corr = 1 + max((e.get("args") or {}).get("correlation", 0) for e in ev)
    ext = 1 + max((e.get("args") or {}).get("External id", 0) for e in ev)
    add = []
    for e in ev:
        if e.get("cat") != "cpu_op" or not e["name"].startswith("c10d::"):
            continue
        kind = NCCL.get(e["name"].split("::", 1)[1])
        if kind is None:
            continue
        kname, coll, factor = kind
        nbytes, t = _bytes(e)
        short, torch_name = NCCL_TYPE.get(t, ("f32", "Float"))
        kname = kname.replace("_f32_", f"_{short}_")
        dur = NCCL_LATENCY_US + factor * (world - 1) / world * nbytes / (bus_gbps * 1e3)
        t = e["ts"] + 0.2 * e["dur"]
        rpc = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": e["pid"], "tid": e["tid"], "ts": t,
               "dur": 0.6 * e["dur"], "args": {"External id": ext, "Collective name": coll, "Group size": world,
                                               "dtype": torch_name, "Process Group Name": "0",
                                               "Process Group Description": "default_pg"}}
        lt = t + 0.3 * e["dur"]
        add += [rpc, {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "pid": e["pid"], "tid": e["tid"],
                      "ts": lt, "dur": 0.1 * e["dur"], "args": {"External id": ext, "correlation": corr, "cbid": 430}},
                {"ph": "X", "cat": "kernel", "name": kname + NCCL_ARGS, "pid": 0, "tid": STREAM_NCCL, "ts": lt,
                 "dur": dur, "args": {"External id": ext, "device": 0, "context": 1, "stream": STREAM_NCCL,
                                      "correlation": corr, "grid": [2, 1, 1], "block": [512, 1, 1],
                                      "registers per thread": 96, "shared memory": 0}}]
        corr += 1
        ext += 1
    ev.extend(add)
    ev.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": STREAM_NCCL,
               "args": {"name": f"stream {STREAM_NCCL}"}})
    _retime(ev)
    out["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": world}
    return out


def with_outside_kernel(doc: dict, name: str, dur_us: float, grid: list[int], block: list[int]) -> dict:
    """A kernel launched outside any op where the recorded code ran the MARK range (module doc)."""
    out = copy.deepcopy(doc)
    ev = out["traceEvents"]
    marks = [e for e in ev if e.get("name") == MARK]
    corr = 1 + max((e.get("args") or {}).get("correlation", 0) for e in ev)
    for m in marks:
        ev.remove(m)
        t = m["ts"] + 0.5 * m["dur"]
        ev.append({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": m["pid"], "tid": m["tid"], "ts": t,
                   "dur": min(6.0, 0.2 * m["dur"]), "args": {"correlation": corr, "cbid": 307}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": STREAM, "ts": t, "dur": dur_us,
                   "args": {"device": 0, "context": 1, "stream": STREAM, "correlation": corr, "grid": list(grid),
                            "block": list(block), "registers per thread": 168, "shared memory": 49152,
                            "blocks per SM": 0.0, "warps per SM": 0.0, "est. achieved occupancy %": 0}})
        corr += 1
    _retime(ev)
    return out


def in_step(doc: dict, n: int = 1) -> dict:
    """The recorded CPU events inside one ProfilerStep#n range (what torch.profiler's schedule writes)."""
    out = copy.deepcopy(doc)
    ev = out["traceEvents"]
    cpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function")]
    t0 = min(e["ts"] for e in cpu)
    t1 = max(e["ts"] + e["dur"] for e in cpu)
    tid = cpu[0]["tid"]
    ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": cpu[0]["pid"], "tid": tid,
               "ts": t0 - 1.0, "dur": t1 - t0 + 2.0, "args": {"External id": 0}})
    return out




# ----------------------------------------------------------------------------- the recorded runs


def conv_training_cpu() -> dict:
    """A training step of a ResNet (Hugging Face transformers, built from a config, no weights: stem 64,
    stages 64 / 128 / 256, one basic block each) on 16 images of 96 x 96 with SGD + momentum, fp32: the CPU
    trace (record_shapes on: the time model needs them; strip them after)."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256], depths=[1, 1, 1],
                                    layer_type="basic", num_labels=10)
    model = transformers.ResNetForImageClassification(cfg)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 3, 96, 96, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)

    def run():
        opt.zero_grad(set_to_none=True)
        model(pixel_values=x, labels=y).loss.backward()
        opt.step()

    run()
    return record(run)


def gelu_chain_cpu() -> dict:
    """transformers' NewGELUActivation (GPT-2's tanh GELU, written out as element-wise ops) on the output of a
    Linear, 64 x 256 x 256 fp32, inference: the CPU trace."""
    import torch
    from transformers.activations import NewGELUActivation

    torch.manual_seed(0)
    lin, act = torch.nn.Linear(256, 256), NewGELUActivation()
    x = torch.randn(64, 256, 256)

    def run():
        with torch.no_grad():
            return act(lin(x))

    run()
    return record(run)


def custom_matmul_cpu(with_stack: bool = False) -> dict:
    """An MLP (Linear, GELU, LayerNorm) whose output goes through the user's own matmul kernel (a Triton
    kernel in the GPU run, launched from Python with no torch op around it; numpy stands in on CPU, inside
    the MARK range), then ReLU: the CPU trace."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.LayerNorm(512))
    x = torch.randn(256, 512)
    w = np.random.default_rng(0).standard_normal((512, 2048)).astype(np.float32)

    def triton_matmul(a):
        with torch.profiler.record_function(MARK):
            return torch.from_numpy(a.numpy() @ w)

    def run():
        with torch.no_grad():
            return triton_matmul(mlp(x)).relu()

    run()
    return record(run, with_stack=with_stack)


def _tp_worker(rank: int, world: int, port: int, out: str, layers: int, seq: int, hidden: int) -> None:
    """Megatron-style sequence-parallel transformer MLP blocks in bf16, forward under no_grad: each rank holds
    a shard of the sequence; LayerNorm on the shard, all-gather of the sequence, column-parallel fc1, GELU,
    row-parallel fc2, reduce-scatter back to the shard, residual add."""
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(hidden)
            self.fc1 = torch.nn.Linear(hidden, 4 * hidden // world)
            self.fc2 = torch.nn.Linear(4 * hidden // world, hidden, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.norm(x)
            full = h.new_empty((world * h.shape[0],) + tuple(h.shape[1:]))
            dist.all_gather_into_tensor(full, h)
            y = self.fc2(F.gelu(self.fc1(full)))
            part = torch.empty_like(x)
            dist.reduce_scatter_tensor(part, y)
            return x + part

    model = torch.nn.Sequential(*[Block() for _ in range(layers)]).to(torch.bfloat16).eval()
    x = torch.randn(seq // world, 1, hidden, dtype=torch.bfloat16)
    with torch.no_grad():
        model(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as p:
            model(x)
    if rank == 0:
        p.export_chrome_trace(out)
    dist.destroy_process_group()


def record_tp(out: str, layers: int = 2, seq: int = 512, hidden: int = 512) -> None:
    """Rank 0's CPU trace of _tp_worker on 2 ranks (gloo), written to `out` (run it in a subprocess, so the
    test process never imports torch.distributed's workers: `python -m tests.recorded_unseen tp OUT.json`)."""
    import socket

    import torch.multiprocessing as mp

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(_tp_worker, args=(2, port, out, layers, seq, hidden), nprocs=2)


if __name__ == "__main__":
    import sys

    if sys.argv[1] == "tp":
        record_tp(sys.argv[2])
