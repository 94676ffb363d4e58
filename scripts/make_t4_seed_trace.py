#!/usr/bin/env python3
"""Write sample_traces/t4_seed_pow_mul.json: a Kineto trace rebuilt from a published profile table.

Source (the project's seed 001): the "Tracking Flops" notes of jovsa/scalify,
  https://github.com/jovsa/scalify/blob/main/docs/tracking_flops.md
which print a torch.profiler ``key_averages().table(sort_by="cpu_time_total", row_limit=10)``
of this program on a Tesla T4 (code: https://github.com/jovsa/scalify/blob/main/scalify/flops.py):

    ones = torch.ones((8192, 8192), device="cuda:0")   # aten::ones -> aten::empty + aten::fill_
    torch.matmul(ones, ones, out=ones)                 # aten::matmul -> aten::mm (out= variant)
    ones.mul_(0.5)                                     # aten::mul_
    result_mul = ones.mul(0.5)                         # aten::mul      (not in the table)
    total = ones + result_mul                          # aten::add      (not in the table)
    result_sum = torch.sum(ones)                       # aten::sum
    torch.sqrt / sin / sigmoid / log10 (ones)          # 4 ops          (not in the table)
    result = torch.pow(ones, 3.14159)                  # aten::pow

What is published (and used here exactly):
  * self CUDA time of the five ops that launch kernels: aten::fill_ 1.141 ms, aten::mm 230.208 ms,
    aten::sum 991.583 us, aten::pow 2.167 ms, aten::mul_ 2.184 ms -> each op's single kernel
    has exactly that duration (1141.0, 230208.0, 991.583, 2167.0, 2184.0 us);
  * CPU totals of the host ops (ones 2.117 ms, empty 2.040 ms, fill_ 54.570 us, matmul 95.100 us,
    mm 89.134 us, sum 65.381 us, pow 35.959 us, mul_ 35.701 us) and their self CPU times; each
    cudaLaunchKernel's duration is the op's CPU total minus its self CPU time;
  * the device (Tesla T4) and the tensor size (8192 x 8192 fp32, from the code).

Everything else is synthesised: timestamps and the gaps between host events, External / correlation
ids, pid/tid, kernel names (those PyTorch 2.x + cuBLAS would use on sm_75; T4 has no TF32, so the
mm is an fp32 SIMT sgemm), grid/block/register/occupancy figures, CUDA versions, and the shape
arguments themselves (the published run did not set record_shapes; Input Dims / types / strides /
Concrete Inputs are written the way torch 2.x records these calls, derived from the code above:
mul_ by the Python float 0.5 is recorded as a 0-dim ``double`` operand, pow's exponent as the
Scalar "3.1415899999999999", matmul/mm carry the ``out`` tensor as a third input).

Left out on purpose: the six ops the 10-row table does not show (mul, add, sqrt, sin, sigmoid,
log10; together 251.008 - 236.692 = 14.316 ms of self CUDA time, 6 of the 11 cudaLaunchKernel
calls), so this trace holds 5 launches; the semaphore memset a large global sum reduction does;
the profile_memory / with_stack events of the original run.  The five kernels run back-to-back on
stream 7 in program order (1.088 us apart), and cudaDeviceSynchronize ends just after the last one
(the published 250.445 ms also waited for the six omitted kernels).

Output is deterministic (no clock, no randomness): re-running gives byte-identical JSON.

Usage: python scripts/make_t4_seed_trace.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os

SEED_DOC_URL = "https://github.com/jovsa/scalify/blob/main/docs/tracking_flops.md"
SEED_CODE_URL = "https://github.com/jovsa/scalify/blob/main/scalify/flops.py"
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "sample_traces", "t4_seed_pow_mul.json")

NOTE = (
    "Rebuilt from the published torch.profiler table of the traceana seed 001: the 'Tracking Flops' "
    "notes of jovsa/scalify (" + SEED_DOC_URL + ", code " + SEED_CODE_URL + "), a Tesla T4 running "
    "ones/matmul/mul_/sum/pow on 8192x8192 fp32 tensors. Kernel durations are the published self-CUDA "
    "times (fill_ 1141.0, mm 230208.0, mul_ 2184.0, sum 991.583, pow 2167.0 us); host op durations are "
    "the published CPU totals (launch = total - self CPU). Everything else (timestamps, gaps, ids, "
    "kernel names, grid/block/occupancy, versions, and the recorded shapes/types/Concrete Inputs, "
    "derived from the published code) is synthesised. The 6 ops missing from the 10-row table (mul, "
    "add, sqrt, sin, sigmoid, log10: 14.316 ms of GPU time, 6 of the 11 launches) are left out; the "
    "five kernels run back-to-back on one stream. Made by scripts/make_t4_seed_trace.py."
)

# --- synthesised identities -------------------------------------------------------------------
HOST_PID = 2318            # host process == its main thread
DEVICE = 0
STREAM = 7
BASE_TIME_NS = 1697068800000000000          # trace base (torch >= 2.4: ts are relative to it)
T0_NS = 3816204119482000                    # profiler start, ns after baseTimeNanoseconds
CORR_BASE = 4010                            # CUPTI correlation ids of the 11 launches: 4011..4021

N = 8192
MAT = [N, N]
STRIDES = [N, 1]

# --- kernels (names as PyTorch 2.x / cuBLAS emit them on sm_75; figures synthesised) -----------
ELEMENTWISE_GRID = [N * N // 512, 1, 1]      # 128 threads x 4 elements per block

K_FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
          "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
K_SGEMM = "volta_sgemm_128x64_nn"
_MUL_F = ("at::native::AUnaryFunctor<float, float, float, "
          "at::native::binary_internal::MulFunctor<float> >")
K_MUL = (f"void at::native::vectorized_elementwise_kernel<4, {_MUL_F}, std::array<char*, 2ul> >"
         f"(int, {_MUL_F}, std::array<char*, 2ul>)")
_SUM_OP = ("at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
           "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)"
           "::{lambda(float, float)#1}>, unsigned int, float, 4>")
K_SUM = f"void at::native::reduce_kernel<512, 1, {_SUM_OP} >({_SUM_OP})"
# pow_tensor_scalar_kernel_impl: lambda #1 is exp==2, #2 exp==3, #3 exp==-2, #4 the general pow_
_POW_F = ("at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>"
          "(at::TensorIteratorBase&, float)::{lambda(float)#4}")
K_POW = (f"void at::native::vectorized_elementwise_kernel<4, {_POW_F}, std::array<char*, 2ul> >"
         f"(int, {_POW_F}, std::array<char*, 2ul>)")

# name, grid, block, registers per thread, shared memory, est. achieved occupancy %
KERNEL_INFO = {
    "fill": (K_FILL, ELEMENTWISE_GRID, [128, 1, 1], 16, 0, 100),
    "mm": (K_SGEMM, [N // 128, N // 64, 1], [128, 1, 1], 122, 12544, 48),
    "mul_": (K_MUL, ELEMENTWISE_GRID, [128, 1, 1], 22, 0, 100),
    "sum": (K_SUM, [1, 80, 1], [32, 16, 1], 32, 2064, 97),
    "pow": (K_POW, ELEMENTWISE_GRID, [128, 1, 1], 17, 0, 100),
}
T4_SMS = 40

# published numbers, in ns (self CUDA = kernel duration; CPU total / self CPU of the host ops)
PUBLISHED_SELF_CUDA_NS = {"fill": 1141000, "mm": 230208000, "mul_": 2184000, "sum": 991583,
                          "pow": 2167000}
KERNEL_OP = {"fill": "aten::fill_", "mm": "aten::mm", "mul_": "aten::mul_", "sum": "aten::sum",
             "pow": "aten::pow"}


def us(ns: int) -> float:
    """Microseconds with 3 decimals (ns resolution), as Kineto writes them."""
    return round(ns / 1000, 3)


def cpu_op(name, ext, ev_idx, ts, dur, dims, types, strides, concrete, autograd):
    args = {"External id": ext}
    if autograd:                       # ops with an autograd formula carry these (0: no grad here)
        args["Sequence number"] = 0
        args["Fwd thread id"] = 0
    args.update({"Record function id": 0, "Concrete Inputs": concrete, "Input type": types,
                 "Input Strides": strides, "Input Dims": dims, "Ev Idx": ev_idx})
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": HOST_PID, "tid": HOST_PID,
            "ts": us(ts), "dur": us(dur), "args": args}


def build() -> dict:
    ops: list[dict] = []
    launches: list[tuple[int, int, int, int, str]] = []   # (ts, dur, ext, corr, kernel key)

    t = T0_NS + 41272

    # aten::ones (total 2116.786 = self 22.216 + empty 2040.000 + fill_ 54.570), ext 1..3
    ones_ts = t
    empty_ts = ones_ts + 8913
    fill_ts = empty_ts + 2040000 + 4104
    fill_dur = 54570                                  # self 24.671 + launch 29.899
    ones_dur = 8913 + 2040000 + 4104 + fill_dur + 9199
    assert ones_dur == 2116786
    ops.append(cpu_op("aten::ones", 1, 0, ones_ts, ones_dur, [[], [], [], [], []],
                      ["ScalarList", "", "", "", "Scalar"], [[], [], [], [], []],
                      [f"[{N}, {N}]", "", "", "", "False"], False))
    ops.append(cpu_op("aten::empty", 2, 1, empty_ts, 2040000, [[], [], [], [], [], []],
                      ["ScalarList", "Scalar", "", "", "Scalar", ""], [[], [], [], [], [], []],
                      [f"[{N}, {N}]", "6", "", "", "False", ""], False))
    ops.append(cpu_op("aten::fill_", 3, 2, fill_ts, fill_dur, [MAT, []], ["float", "Scalar"],
                      [STRIDES, []], ["", "1."], False))
    launches.append((fill_ts + 18302, 54570 - 24671, 3, CORR_BASE + 1, "fill"))
    t = ones_ts + ones_dur

    # aten::matmul(ones, ones, out=ones) -> aten::mm (out variant), ext 4, 5
    mat_ts = t + 27514
    mm_ts = mat_ts + 3412
    mm_dur = 89134                                    # self 72.594 + launch 16.540
    mat_dur = 3412 + mm_dur + 2554                    # self 5.966
    assert mat_dur == 95100
    three = dict(dims=[MAT, MAT, MAT], types=["float", "float", "float"],
                 strides=[STRIDES, STRIDES, STRIDES], concrete=["", "", ""])
    ops.append(cpu_op("aten::matmul", 4, 3, mat_ts, mat_dur, autograd=True, **three))
    ops.append(cpu_op("aten::mm", 5, 4, mm_ts, mm_dur, autograd=True, **three))
    launches.append((mm_ts + 61023, 89134 - 72594, 5, CORR_BASE + 2, "mm"))
    t = mat_ts + mat_dur

    # aten::mul_(0.5): Python float -> 0-dim double operand, ext 6
    mul_ts = t + 21306
    mul_dur = 35701                                   # self 26.698 + launch 9.003
    ops.append(cpu_op("aten::mul_", 6, 5, mul_ts, mul_dur, [MAT, []], ["float", "double"],
                      [STRIDES, []], ["", ""], True))
    launches.append((mul_ts + 19846, 35701 - 26698, 6, CORR_BASE + 3, "mul_"))
    t = mul_ts + mul_dur

    # (omitted: aten::mul ext 7, aten::add ext 8; their launches took correlation 4014, 4015)
    # aten::sum(ones), dtype None, ext 9
    sum_ts = t + 96417
    sum_dur = 65381                                   # self 41.065 + launch 24.316
    ops.append(cpu_op("aten::sum", 9, 8, sum_ts, sum_dur, [MAT, []], ["float", ""],
                      [STRIDES, []], ["", ""], True))
    launches.append((sum_ts + 29587, 65381 - 41065, 9, CORR_BASE + 6, "sum"))
    t = sum_ts + sum_dur

    # (omitted: sqrt, sin, sigmoid, log10, ext 10..13, correlation 4017..4020)
    # aten::pow(ones, 3.14159), ext 14
    pow_ts = t + 143862
    pow_dur = 35959                                   # self 26.403 + launch 9.556
    ops.append(cpu_op("aten::pow", 14, 13, pow_ts, pow_dur, [MAT, []], ["float", "Scalar"],
                      [STRIDES, []], ["", "3.1415899999999999"], True))
    launches.append((pow_ts + 18771, 35959 - 26403, 14, CORR_BASE + 11, "pow"))
    t = pow_ts + pow_dur

    # device side: one kernel per launch, back-to-back on stream 7 in program order
    runtime: list[dict] = []
    device: list[dict] = []
    prev_end = 0
    for ts, dur, ext, corr, key in launches:
        name, grid, block, regs, smem, occ = KERNEL_INFO[key]
        k_dur = PUBLISHED_SELF_CUDA_NS[key]
        k_ts = max(ts + dur + 2144, prev_end + 1088)
        prev_end = k_ts + k_dur
        blocks = grid[0] * grid[1] * grid[2]
        warps = blocks * ((block[0] * block[1] * block[2] + 31) // 32)
        runtime.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                        "pid": HOST_PID, "tid": HOST_PID, "ts": us(ts), "dur": us(dur),
                        "args": {"External id": ext, "cbid": 211, "correlation": corr}})
        runtime.append({"ph": "s", "id": corr, "pid": HOST_PID, "tid": HOST_PID, "ts": us(ts),
                        "cat": "ac2g", "name": "ac2g"})
        device.append({"ph": "X", "cat": "kernel", "name": name, "pid": DEVICE, "tid": STREAM,
                       "ts": us(k_ts), "dur": us(k_dur),
                       "args": {"External id": ext, "queued": 0, "device": DEVICE, "context": 1,
                                "stream": STREAM, "correlation": corr,
                                "registers per thread": regs, "shared memory": smem,
                                "blocks per SM": round(blocks / T4_SMS, 6),
                                "warps per SM": round(warps / T4_SMS, 6),
                                "grid": grid, "block": block,
                                "est. achieved occupancy %": occ}})
        device.append({"ph": "f", "id": corr, "pid": DEVICE, "tid": STREAM, "ts": us(k_ts),
                       "cat": "ac2g", "name": "ac2g", "bp": "e"})

    # the host waits for the stream: cudaDeviceSynchronize ends just after the last kernel
    sync_ts = t + 12046
    sync_end = prev_end + 3117
    runtime.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                    "pid": HOST_PID, "tid": HOST_PID, "ts": us(sync_ts),
                    "dur": us(sync_end - sync_ts),
                    "args": {"cbid": 165, "correlation": CORR_BASE + 12}})

    meta_ts = us(T0_NS + 88413)
    meta = []
    for pid, label, sort in ((HOST_PID, "CPU", HOST_PID), (DEVICE, "GPU 0", 5000000 + DEVICE)):
        meta.append({"name": "process_name", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0,
                     "args": {"name": "python3"}})
        meta.append({"name": "process_labels", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0,
                     "args": {"labels": label}})
        meta.append({"name": "process_sort_index", "ph": "M", "ts": meta_ts, "pid": pid,
                     "tid": 0, "args": {"sort_index": sort}})
    for pid, tid, tname in ((DEVICE, STREAM, f"stream {STREAM} "),
                            (HOST_PID, HOST_PID, f"thread {HOST_PID} (python3)")):
        meta.append({"name": "thread_name", "ph": "M", "ts": meta_ts, "pid": pid, "tid": tid,
                     "args": {"name": tname}})
        meta.append({"name": "thread_sort_index", "ph": "M", "ts": meta_ts, "pid": pid,
                     "tid": tid, "args": {"sort_index": tid}})
    end_ns = sync_end + 61250
    meta += [
        {"ph": "X", "cat": "Trace", "ts": us(T0_NS), "dur": us(end_ns - T0_NS), "pid": "Spans",
         "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
        {"name": "process_sort_index", "ph": "M", "ts": us(T0_NS), "pid": "Spans", "tid": 0,
         "args": {"sort_index": 536870912}},
        {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": us(T0_NS)},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
         "ts": us(end_ns + 1873)},
    ]

    return {
        "schemaVersion": 1,
        "deviceProperties": [{
            "id": 0, "name": "Tesla T4", "totalGlobalMem": 15843721216,
            "computeMajor": 7, "computeMinor": 5, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 1024, "regsPerBlock": 65536, "warpSize": 32,
            "sharedMemPerBlock": 49152, "numSms": T4_SMS, "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 65536, "sharedMemPerMultiprocessor": 65536,
        }],
        "cupti_version": 22,
        "cuda_runtime_version": 12040,
        "cuda_driver_version": 12020,
        "record_shapes": 1,
        "trace_id": "5EED0001A7E4A25C8D3F6B1C0E9D2F47",
        "traceName": "t4_seed_pow_mul.json",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_TIME_NS,
        "traceana_note": NOTE,
        "traceana_source": {
            "seed": "001",
            "published_table": SEED_DOC_URL,
            "published_code": SEED_CODE_URL,
            "device": "Tesla T4",
            "published_self_cuda_us": {KERNEL_OP[k]: us(v) for k, v in PUBLISHED_SELF_CUDA_NS.items()},
            "published_self_cuda_total_us": 251008.0,
            "published_cuda_launch_kernel_calls": 11,
            "launches_in_this_trace": len(launches),
            "omitted_ops": ["aten::mul", "aten::add", "aten::sqrt", "aten::sin", "aten::sigmoid",
                            "aten::log10"],
        },
        "traceEvents": ops + runtime + device + meta,
    }


def dumps(doc: dict) -> str:
    """Minimal indentation: one top-level key per line, one trace event per line."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key == "traceEvents":
            lines.append(f"  {json.dumps(key)}: [")
            for j, ev in enumerate(value):
                lines.append("    " + json.dumps(ev) + ("," if j < len(value) - 1 else ""))
            lines.append("  ]" + comma)
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output path (default: %(default)s)")
    args = ap.parse_args(argv)
    text = dumps(build())
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    print(f"wrote {args.out} ({len(text.encode())} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
