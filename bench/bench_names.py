#!/usr/bin/env python3
"""Distinct op names: `traceana report` on traces of N distinct unmodelled ops (each op launches
one kernel), as whole processes; wall time and peak RSS per N (issue 24: 100,000 names in
<= 30 s and <= 1 GB; time should grow about linearly with N).

    python bench/bench_names.py [--names 25000,50000,100000] [--format json]
    python bench/bench_names.py --names 1000000   # refused in seconds (analysis.MAX_NAMES)
    python bench/bench_names.py --names 200000 --long --format md   # peak RSS against the JSON's size
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


#: a CUTLASS-like templated kernel name (~700 bytes), made distinct by the numbers put in it (--long)
LONG_KERNEL = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_{i}x128_32x3_nn_align8>"
               "(cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::threadblock::MmaMultistage<cutlass::gemm::"
               "GemmShape<128, 128, 32>, cutlass::transform::threadblock::PredicatedTileAccessIterator<cutlass::"
               "MatrixShape<128, 32>, cutlass::bfloat16_t, cutlass::layout::RowMajor, 1, cutlass::transform::"
               "PitchLinearWarpRakedThreadMap<cutlass::PitchLinearShape<32, 128>, 128, cutlass::PitchLinearShape<4, "
               "8>, 8>, cutlass::AlignedArray<cutlass::bfloat16_t, 8, 16>, false>, cutlass::epilogue::thread::"
               "LinearCombinationRelu<cutlass::bfloat16_t, 8, float, float, (cutlass::epilogue::thread::ScaleType::"
               "Kind)0, (cutlass::FloatRoundStyle)2>, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<"
               "{j}>>::Params)")


def names_trace(n: int, long: bool = False) -> dict:
    """A trace of n cpu ops with distinct names no cost formula knows, each launching one kernel
    of its own name: n unmodelled rows in the report. `long`: the kernels' names ~700 bytes each."""
    events = []
    for i in range(n):
        t = 10.0 * i
        events.append({"ph": "X", "cat": "cpu_op", "name": f"custom::op_{i}", "pid": 1, "tid": 1, "ts": t,
                       "dur": 8.0, "args": {"External id": i + 1, "Input Dims": [[64, 64 + i % 5]],
                                                     "Input type": ["float"]}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 1, "dur": 2.0, "args": {"correlation": i + 1, "External id": i + 1}})
        kernel = LONG_KERNEL.format(i=i, j=i % 7) if long else f"custom_kernel_{i}"
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
                       "ts": t + 4, "dur": 5.0 + i % 7,
                       "args": {"device": 0, "stream": 7, "correlation": i + 1}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9,
                                                       "computeMinor": 0, "numSms": 132, "warpSize": 32,
                                                       "totalGlobalMem": 85520809984}],
            "traceEvents": events}


def run(path: Path, fmt: str, env: dict | None = None) -> tuple[float, float, int, str, float]:
    """(seconds, peak RSS MB, exit code, stderr, CPU seconds) of one `traceana report` process."""
    out = path.with_suffix(f".report.{fmt}")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "traceana", "report", str(path), "-o", str(out), "--force"],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    err = proc.stderr.read()
    return seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), err, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", default="25000,50000,100000")
    ap.add_argument("--format", default="html", choices=("html", "md", "json"))
    ap.add_argument("--long", action="store_true", help="kernel names of ~700 bytes (templated C++), not ~20")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="traceana-bench-names-") as tmp:
        rows = []
        for n in [int(x) for x in args.names.split(",")]:
            path = Path(tmp) / f"names_{n}.json"
            path.write_text(json.dumps(names_trace(n, args.long)))
            size = path.stat().st_size / 1e6
            seconds, rss, code, err, cpu = run(path, args.format)
            rows.append((n, seconds, rss, code))
            last = err.strip().splitlines()[-1:] if code else []
            print(f"{n:>9,} names: {seconds:7.2f} s ({cpu:.2f} s CPU)  {rss:7.0f} MB = {rss / size:.1f}x the "
                  f"{size:.0f} MB of JSON  exit {code}  {' '.join(last)[:160]}", flush=True)
        if len(rows) > 1 and rows[0][1] > 0:
            n0, t0 = rows[0][0], rows[0][1]
            for n, t, _, _ in rows[1:]:
                print(f"time x{t / t0:.2f} for names x{n / n0:.1f}")


if __name__ == "__main__":
    main()
