#!/usr/bin/env python3
"""Make a large trace from a real one: its events replicated N times, as if the profiler had
recorded N times as many steps. For the scaling benchmark (bench/bench_scaling.py). The rules
(time shift, id offsets, step numbers) are bench/replicate.py's.

    python bench/make_large_trace.py SRC.json.gz --copies 20 -o /tmp/big.json.gz
    python bench/make_large_trace.py SRC.json.gz --target-mb 1100 -o /tmp/big.json.gz

The output is written streaming (one copy at a time), indented by 2 like the profiler's own
files (so MB of JSON per event stay realistic), and gzipped (level 1); the uncompressed size in MB
is printed. Needs orjson (bench/setup_bench_env.sh installs it).
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

try:
    import orjson
except ImportError:  # pragma: no cover - the bench venv has it
    sys.exit("make_large_trace.py needs orjson: pip install orjson (or bash bench/setup_bench_env.sh)")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from replicate import copy_event, plan  # noqa: E402  (the replication rules, shared with the tests)


def _load(src: Path) -> dict:
    data = src.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


def make_large(src: Path, out: Path, copies: int) -> int:
    """Write `copies` copies of src's events to out (gzip); return the uncompressed bytes."""
    doc = _load(src)
    events = doc.pop("traceEvents") or []
    shift, offs, n_steps = plan(events)
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    written = 0
    with gzip.open(out, "wb", compresslevel=1) as fh:
        def w(b: bytes) -> None:
            nonlocal written
            fh.write(b)
            written += len(b)

        w(b'{"traceEvents":[')
        first = True
        for k in range(copies):
            chunk = meta + body if k == 0 else [copy_event(e, k, shift, offs, n_steps) for e in body]
            if not chunk:
                continue
            text = orjson.dumps(chunk, option=orjson.OPT_INDENT_2)[1:-1]  # the items, no brackets
            if not first:
                w(b",")
            w(text)
            first = False
            del chunk, text
        w(b"]")
        for key, val in doc.items():
            w(b"," + orjson.dumps(key) + b":" + orjson.dumps(val))
        w(b"}")
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--copies", type=int)
    g.add_argument("--target-mb", type=float, help="uncompressed JSON size to reach (approximately)")
    args = ap.parse_args()
    copies = args.copies
    if copies is None:
        one = make_large(args.src, args.output, 1)
        copies = max(1, round(args.target_mb * 1e6 / one))
    n = make_large(args.src, args.output, copies)
    print(f"{args.output}: {copies} copies, {n / 1e6:.1f} MB of JSON, "
          f"{args.output.stat().st_size / 1e6:.1f} MB gzipped")


if __name__ == "__main__":
    main()
