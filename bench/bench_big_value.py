#!/usr/bin/env python3
"""One JSON value longer than the scanner's piece (8 MB): the scan's time and the bytes handed to
the scanner for a 16 MB and a 64 MB value (issue 24: linear in the value's size, not quadratic).

    python bench/bench_big_value.py [--sizes 16,64]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from traceana.load import feed  # noqa: E402
from traceana.load.prefetch import PIECE  # noqa: E402

OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 9, "dur": 5,
      "args": {"External id": 3}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,64", help="the value's size in MB")
    args = ap.parse_args()
    base = None
    for mb in [int(x) for x in args.sizes.split(",")]:
        events = [dict(OP, ts=i) for i in range(1000)]
        events.insert(500, dict(OP, args={"blob": "x" * (mb << 20)}))
        data = json.dumps({"traceEvents": events}).encode()
        pieces = [data[i:i + PIECE] for i in range(0, len(data), PIECE)]
        stats: dict = {}
        t0 = time.perf_counter()
        feed.scan(pieces, stats=stats)
        dt = time.perf_counter() - t0
        base = base or (mb, dt)
        print(f"{mb:>4} MB value: {dt:6.3f} s, scanned {stats['fed'] / len(data):.2f}x the text"
              f"{'' if base[0] == mb else f', time x{dt / base[1]:.1f} for size x{mb / base[0]:.0f}'}")


if __name__ == "__main__":
    main()
