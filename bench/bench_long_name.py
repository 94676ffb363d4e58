#!/usr/bin/env python3
"""One kernel with a very long name (a template list of N MB): the analysis after loading, against decoding
the same file's JSON (msgspec) in the same run (issue 28: a name's classification reads its first few KB
once, so the analysis stays flat as the name grows; a scan of the whole name per rule took 80 s at 200 MB).

    python bench/bench_long_name.py [--sizes 4,16,64]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec  # noqa: E402

from traceana.analysis import analyze_trace  # noqa: E402
from traceana.load import load_trace  # noqa: E402

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "numSms": 108,
        "totalGlobalMem": 85899345920}


def trace(mb: int) -> dict:
    name = "void my_kernel<" + ", ".join(["at::native::Foo<float>"] * ((mb << 20) // 24)) + ">(int)"
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
           "args": {"External id": 1}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12, "dur": 3,
           "args": {"correlation": 5, "External id": 1}},
          {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 16, "dur": 5,
           "args": {"device": 0, "stream": 7, "correlation": 5}}]
    return {"traceEvents": ev, "deviceProperties": [A100]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,16,64", help="the kernel name's size in MB")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for mb in [int(x) for x in args.sizes.split(",")]:
            path = Path(d) / f"name{mb}.json"
            path.write_text(json.dumps(trace(mb)))
            t0 = time.perf_counter()
            msgspec.json.decode(path.read_bytes())
            t1 = time.perf_counter()
            tr = load_trace(str(path))
            t2 = time.perf_counter()
            analyze_trace(tr)
            t3 = time.perf_counter()
            print(f"{mb:>4} MB name: JSON decode {t1 - t0:6.3f} s, load {t2 - t1:6.3f} s, analysis {t3 - t2:6.3f} s "
                  f"({(t3 - t2) / (t1 - t0):.2f}x the decode)")
            del tr
            path.unlink()


if __name__ == "__main__":
    main()
