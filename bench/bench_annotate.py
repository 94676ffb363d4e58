#!/usr/bin/env python3
"""Time and memory of `traceana annotate` against the plain report, as whole processes, alternately.

report   = `traceana report TRACE -o out.json -q`                (load, analyse, render the JSON)
annotate = `traceana annotate TRACE -o out.annotated.json.gz -q` (load, analyse, then the trace
           read again, streaming, and written with its verdicts and counter tracks, gzipped)
Each round runs both once (alternating, so machine noise hits both); the medians of wall time,
CPU seconds (user + system: what other load disturbs least) and peak RSS (wait4) are printed with
their spread ((max - min) / median), and the ratios annotate / report. The streaming pass must
keep memory bounded: annotate's peak RSS should stay near the report's (the analysis' columns are
released before the text is read again), whatever the size of the trace.

Traces: the given ones, else the largest shared trace (hta/df_index_resolver.json.gz, 54 MB of
JSON) and a synthetic large trace made from it by bench/make_large_trace.py (--target-mb, default
1100: a ~1 GB trace; kept in --dir and reused).

    python bench/bench_annotate.py [TRACE ...] [--runs 3] [--target-mb 1100] [--dir /tmp/bench_annotate]
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = Path(os.environ.get("TRACEANA_SHARED") or REPO.parent / "shared") / "traces"
SOURCE = SHARED / "hta/df_index_resolver.json.gz"


def run(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MB) and CPU seconds of one child process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed: {err.strip()[-800:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def spread(values: list[float]) -> float:
    med = statistics.median(values)
    return 100.0 * (max(values) - min(values)) / med if med else 0.0


def text_mb(path: Path) -> float:
    sys.path.insert(0, str(REPO))
    from traceana.ranks.executor import uncompressed_size

    return uncompressed_size(str(path)) / 1e6


def bench(trace: Path, runs: int) -> None:
    py = sys.executable
    with tempfile.TemporaryDirectory() as d:
        cmds = {
            "report": [py, "-m", "traceana", "report", str(trace), "-o", f"{d}/out.json", "-q", "--force"],
            "annotate": [py, "-m", "traceana", "annotate", str(trace), "-o", f"{d}/out.annotated.json.gz", "-q",
                         "--force"],
        }
        res: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cmds}
        for _ in range(runs):
            for k, cmd in cmds.items():
                res[k].append(run(cmd))
        out_mb = os.path.getsize(f"{d}/out.annotated.json.gz") / 1e6
    print(f"{trace.name}: {text_mb(trace):,.0f} MB of JSON, {trace.stat().st_size / 1e6:,.1f} MB on disk; "
          f"annotated .json.gz {out_mb:,.1f} MB; {runs} run(s)")
    med = {}
    for k, rows in res.items():
        wall, rss, cpu = (list(x) for x in zip(*rows))
        med[k] = (statistics.median(wall), statistics.median(rss), statistics.median(cpu))
        print(f"  {k:9s} wall {med[k][0]:7.2f} s (±{spread(wall):4.0f}%)  cpu {med[k][2]:7.2f} s "
              f"(±{spread(cpu):4.0f}%)  peak RSS {med[k][1]:7.0f} MB (±{spread(rss):3.0f}%)")
    r, a = med["report"], med["annotate"]
    print(f"  annotate / report: wall {a[0] / r[0]:.2f}x, cpu {a[2] / r[2]:.2f}x, peak RSS {a[1] / r[1]:.2f}x; "
          f"the annotation pass alone: {a[2] - r[2]:.2f} cpu s, {max(a[1] - r[1], 0):.0f} MB over the report's peak")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--target-mb", type=float, default=1100.0, help="size of the synthetic large trace (MB of JSON)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "bench_annotate")
    args = ap.parse_args()
    traces = list(args.traces)
    if not traces:
        if not SOURCE.exists():
            sys.exit(f"{SOURCE} not present: give traces, or set TRACEANA_SHARED")
        args.dir.mkdir(parents=True, exist_ok=True)
        big = args.dir / f"large_{int(args.target_mb)}mb.json.gz"
        if not big.exists():
            subprocess.run([sys.executable, str(HERE / "make_large_trace.py"), str(SOURCE), "--target-mb",
                            str(args.target_mb), "-o", str(big)], check=True)
        traces = [SOURCE, big]
    for t in traces:
        bench(t, args.runs)


if __name__ == "__main__":
    main()
