#!/usr/bin/env python3
"""Time `traceana report` against the JSON-parse floor, as whole processes, alternately.

floor  = a Python process that gunzips the trace and orjson.loads it (nothing else);
report = `traceana report TRACE -o out.html` (load, link, cost, roofline, render).
Each pair runs --runs times, alternating so that machine noise hits both; the medians, their
ratio and each process's peak RSS (from wait4) are printed. Needs orjson (pip install orjson).

    python bench/bench_report.py [TRACE ...] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEFAULT = [SHARED / "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
           SHARED / "hta/df_index_resolver.json.gz"]

FLOOR = ("import gzip, sys, orjson\n"
         "data = open(sys.argv[1], 'rb').read()\n"
         "data = gzip.decompress(data) if data[:2] == b'\\x1f\\x8b' else data\n"
         "orjson.loads(data)\n")


def run(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[:500]}")
    return wall, usage.ru_maxrss / 1024


def bench(trace: Path, runs: int) -> None:
    out = Path(tempfile.mkdtemp()) / "report.html"
    floor_cmd = [sys.executable, "-c", FLOOR, str(trace)]
    report_cmd = [sys.executable, "-m", "traceana", "report", str(trace), "-o", str(out), "-q", "--force"]
    run(floor_cmd)  # warm the page cache
    f_t, f_m, r_t, r_m = [], [], [], []
    for _ in range(runs):
        t, m = run(floor_cmd)
        f_t.append(t)
        f_m.append(m)
        t, m = run(report_cmd)
        r_t.append(t)
        r_m.append(m)
    ft, rt = statistics.median(f_t), statistics.median(r_t)
    fm, rm = max(f_m), max(r_m)
    size = trace.stat().st_size / 1e6
    print(f"{trace.name} ({size:.1f} MB on disk), {runs} alternating runs, {os.cpu_count()} cores")
    print(f"  floor  (gunzip + orjson.loads): median {ft:6.2f} s   peak RSS {fm:7.0f} MB")
    print(f"  traceana report -> html       : median {rt:6.2f} s   peak RSS {rm:7.0f} MB")
    print(f"  ratio report/floor: time {rt / ft:.2f}x   RSS {rm / fm:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    traces = args.traces or [p for p in DEFAULT if p.exists()]
    if not traces:
        sys.exit("no trace given and ../shared/traces is absent")
    for t in traces:
        bench(t, args.runs)


if __name__ == "__main__":
    main()
