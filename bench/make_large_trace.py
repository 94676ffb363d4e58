#!/usr/bin/env python3
"""Make a large trace from a real one: its events replicated N times, as if the profiler had
recorded N times as many steps. For the scaling benchmark (bench/bench_scaling.py).

Copy k of every event is shifted by k spans in time (so copies follow each other and nesting
is kept), and the ids that link events are offset by k times (the largest id + 1), per id kind,
so that no copy's ids collide with another's and every kernel -> launch -> op link of copy k
is the link of copy 0, moved:
    args.correlation and the flow events' id (ph s/t/f, which Kineto sets to the correlation)
    args["External id"] / args["external id"], args["Ev Idx"], args["Record function id"],
    args["Python id"] / args["Python parent id"]
Only non-negative ids are offset (-1 and 0 mean "none" in some vintages). ProfilerStep#N names
are renumbered N + k * (number of steps). Metadata events (ph M) are written once.

    python bench/make_large_trace.py SRC.json.gz --copies 20 -o /tmp/big.json.gz
    python bench/make_large_trace.py SRC.json.gz --target-mb 1100 -o /tmp/big.json.gz

The output is written streaming (one copy at a time), indented by 2 like the profiler's own
files (so MB of JSON per event stay realistic), and gzipped (level 1); the uncompressed size in MB
is printed. Needs orjson (bench/setup_bench_env.sh installs it).
"""

from __future__ import annotations

import argparse
import gzip
import math
import re
import sys
from pathlib import Path

try:
    import orjson
except ImportError:  # pragma: no cover - the bench venv has it
    sys.exit("make_large_trace.py needs orjson: pip install orjson (or bash bench/setup_bench_env.sh)")

ID_KEYS = ("correlation", "External id", "external id", "Ev Idx", "Record function id",
           "Python id", "Python parent id")
FLOW_PHASES = frozenset({"s", "t", "f"})
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(src: Path) -> dict:
    data = src.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


def _plan(events: list[dict]) -> tuple[float, dict[str, int], int]:
    """Time shift per copy, id offset per key (correlation also covers flow ids), steps per copy."""
    t0, t1 = math.inf, -math.inf
    top: dict[str, int] = {k: 0 for k in ID_KEYS}
    steps: list[int] = []
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, float)) and e.get("ph") != "M":
            dur = e.get("dur")
            t0 = min(t0, ts)
            t1 = max(t1, ts + (dur if isinstance(dur, (int, float)) else 0))
        a = e.get("args")
        if isinstance(a, dict):
            for k in ID_KEYS:
                v = a.get(k)
                if type(v) is int and v > top[k]:
                    top[k] = v
        if e.get("ph") in FLOW_PHASES and type(e.get("id")) is int and e["id"] > top["correlation"]:
            top["correlation"] = e["id"]
        m = STEP.match(e.get("name") or "") if isinstance(e.get("name"), str) else None
        if m:
            steps.append(int(m.group(1)))
    span = (t1 - t0) if t1 > t0 else 0.0
    shift = span + max(span * 1e-3, 1.0)  # a small gap between copies
    n_steps = (max(steps) - min(steps) + 1) if steps else 0
    return shift, {k: v + 1 for k, v in top.items()}, n_steps


def _copy(e: dict, k: int, shift: float, offs: dict[str, int], n_steps: int) -> dict:
    e = dict(e)
    ts = e.get("ts")
    if isinstance(ts, (int, float)):
        e["ts"] = ts + k * shift
    if e.get("ph") in FLOW_PHASES and type(e.get("id")) is int and e["id"] >= 0:
        e["id"] = e["id"] + k * offs["correlation"]
    a = e.get("args")
    if isinstance(a, dict):
        a = dict(a)
        for key in ID_KEYS:
            v = a.get(key)
            if type(v) is int and v >= 0:
                a[key] = v + k * offs[key]
        e["args"] = a
    name = e.get("name")
    if n_steps and isinstance(name, str):
        m = STEP.match(name)
        if m:
            e["name"] = f"ProfilerStep#{int(m.group(1)) + k * n_steps}"
    return e


def make_large(src: Path, out: Path, copies: int) -> int:
    """Write `copies` copies of src's events to out (gzip); return the uncompressed bytes."""
    doc = _load(src)
    events = doc.pop("traceEvents") or []
    shift, offs, n_steps = _plan(events)
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
            chunk = meta + body if k == 0 else [_copy(e, k, shift, offs, n_steps) for e in body]
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
