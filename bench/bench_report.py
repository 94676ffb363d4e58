#!/usr/bin/env python3
"""Time `traceana report` against the JSON-parse floor and against HTA's trace load, as whole
processes, alternately.

floor  = a Python process that gunzips the trace and orjson.loads it (nothing else);
report = `traceana report TRACE -o out.html` (load, link, cost, roofline, diagnose, render);
hta    = a Python process that imports Holistic Trace Analysis and constructs
         `TraceAnalysis(trace_dir=DIR)` on a directory holding only this trace (HTA's load
         alone: parse + its dataframes; no analysis). Its own construction time is printed too.
Each round runs floor, report, hta once (alternating, so machine noise hits all three); the
medians, the ratios and each process's peak RSS (wait4: the process and its reaped children)
are printed with their spread ((max - min) / median over the runs), and the goals checked:
    report time <= 0.8 x floor;  report peak RSS <= 0.5 x floor's;  HTA load >= 8 x report time.
pylo   = the same report with the Python loader (TRACEANA_PURE_PYTHON=1: no C scanner), to show
         what the scanner buys in the same session (--no-pylo skips it).
before = with --baseline DIR: the same report from another traceana checkout (an older commit),
         timed in the same rounds, for a before / after comparison on one machine at one time.
Wall times are what the goals are stated in; each process's CPU time (user + system) is printed too:
on a busy machine it is what other load disturbs least, and the ratios are given both ways.
Traces default to the shared ones ($TRACEANA_SHARED/traces, else ../shared/traces).

Set up the benchmark's own venv first (orjson, holistictraceanalysis, traceana editable):

    bash bench/setup_bench_env.sh
    bench/.venv/bin/python bench/bench_report.py [TRACE ...] [--runs 5] [--no-hta]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRACEANA_SHARED") or REPO.parent / "shared") / "traces"
DEFAULT = [SHARED / "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
           SHARED / "hta/df_index_resolver.json.gz"]
GOAL_FLOOR = 0.8  # report time <= 0.8 x floor
GOAL_RSS = 0.5  # report peak RSS <= 0.5 x floor's
GOAL_HTA = 8.0  # HTA load time >= 8 x report time

FLOOR = ("import gzip, sys, orjson\n"
         "data = open(sys.argv[1], 'rb').read()\n"
         "data = gzip.decompress(data) if data[:2] == b'\\x1f\\x8b' else data\n"
         "orjson.loads(data)\n")

HTA = ("import sys, time, logging\n"
       "logging.disable(logging.CRITICAL)\n"
       "from hta.trace_analysis import TraceAnalysis\n"
       "t0 = time.perf_counter()\n"
       "TraceAnalysis(trace_dir=sys.argv[1])\n"
       "open(sys.argv[2], 'w').write(repr(time.perf_counter() - t0))\n")


def run(cmd: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MB) and CPU seconds (user + system) of one child process (and
    its reaped children). CPU time is what other load on the machine disturbs least."""
    t0 = time.perf_counter()
    # run outside any checkout: `python -m traceana` puts the working directory first on sys.path, which
    # would shadow PYTHONPATH's traceana (the --baseline checkout's)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tempfile.gettempdir())
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-800:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def have(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def spread(values: list[float]) -> float:
    """(max - min) / median, in %."""
    med = statistics.median(values)
    return 100.0 * (max(values) - min(values)) / med if med else 0.0


def bench(trace: Path, runs: int, with_hta: bool, with_pylo: bool = True, baseline: Path | None = None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="traceana-bench-"))
    out = tmp / "report.html"
    # traceana runs from this checkout: give it compiled bytecode like an installed package has (pip
    # byte-compiles wheels, HTA's included), in a private pycache even where PYTHONDONTWRITEBYTECODE
    # is set; the warm-up run below fills it, so no timed run compiles source.
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmds = {
        "floor": ([sys.executable, "-c", FLOOR, str(trace)], None),
        "report": ([sys.executable, "-m", "traceana", "report", str(trace), "-o", str(out), "-q", "--force"], env),
    }
    if with_pylo:
        cmds["pylo"] = (cmds["report"][0], {**env, "TRACEANA_PURE_PYTHON": "1"})
    if baseline is not None:
        cmds["before"] = ([sys.executable, "-m", "traceana", "report", str(trace), "-o", str(tmp / "before.html"), "-q",
                           "--force"], {**env, "PYTHONPATH": str(baseline) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                                        "PYTHONPYCACHEPREFIX": str(tmp / "pycache-before")})
        run(*cmds["before"])  # its bytecode cache
    hta_dir = tmp / "hta"
    if with_hta:
        hta_dir.mkdir()
        os.symlink(trace.resolve(), hta_dir / trace.name)
        cmds["hta"] = ([sys.executable, "-c", HTA, str(hta_dir), str(tmp / "hta_load_s")], None)
    run(cmds["floor"][0])  # warm the page cache
    run(*cmds["report"])  # and traceana's bytecode cache
    t: dict[str, list[float]] = {k: [] for k in cmds}
    m: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    construct: list[float] = []
    for _ in range(runs):
        for k, (cmd, e) in cmds.items():
            w, r, c = run(cmd, e)
            t[k].append(w)
            m[k].append(r)
            cpu[k].append(c)
            if k == "hta":
                construct.append(float((tmp / "hta_load_s").read_text()))
    shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in t.items()}
    rss = {k: max(v) for k, v in m.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    size = trace.stat().st_size / 1e6
    from traceana.ranks.executor import uncompressed_size

    print(f"{trace.name} ({size:.1f} MB gzip, {uncompressed_size(str(trace)) / 1e6:.1f} MB JSON), "
          f"{runs} alternating runs, {os.cpu_count()} cores")
    sp = {k: spread(v) for k, v in t.items()}

    def line(label: str, k: str, extra: str = "") -> None:
        print(f"  {label:33s}: median {med[k]:6.2f} s (spread {sp[k]:4.0f}%) CPU {cpu_med[k]:6.2f} s   "
              f"peak RSS {rss[k]:7.0f} MB{extra}")

    line("floor  (gunzip + orjson.loads)", "floor")
    line("traceana report -> html", "report")
    res = {"trace": trace.name, "floor_s": med["floor"], "report_s": med["report"], "floor_mb": rss["floor"],
           "report_mb": rss["report"], "spread_pct": sp, "cpu": cpu_med}
    if baseline is not None:
        line(f"  before ({baseline.name})", "before")
        res.update(before_s=med["before"], before_mb=rss["before"])
    if with_pylo:
        line("  the same, Python loader", "pylo", f"   (C scanner: {med['pylo'] / med['report']:.2f}x faster)")
        res.update(pylo_s=med["pylo"], pylo_mb=rss["pylo"])
    if with_hta:
        c = statistics.median(construct)
        line("HTA TraceAnalysis load (process)", "hta", f"   (construction alone {c:.2f} s)")
        res.update(hta_s=med["hta"], hta_mb=rss["hta"], hta_construct_s=c)
    r_floor = med["report"] / med["floor"]
    r_rss = rss["report"] / rss["floor"]
    print(f"  report / floor: time {r_floor:.2f}x {'OK' if r_floor <= GOAL_FLOOR else 'MISSED'} (goal <= {GOAL_FLOOR}x; "
          f"CPU time {cpu_med['report'] / cpu_med['floor']:.2f}x)"
          f"   peak RSS {r_rss:.2f}x {'OK' if r_rss <= GOAL_RSS else 'MISSED'} (goal <= {GOAL_RSS}x)")
    if baseline is not None:
        print(f"  before / floor: time {med['before'] / med['floor']:.2f}x (CPU {cpu_med['before'] / cpu_med['floor']:.2f}x)"
              f"   peak RSS {rss['before'] / rss['floor']:.2f}x")
    if with_hta:
        r_hta = med["hta"] / med["report"]
        r_c = res["hta_construct_s"] / med["report"]
        print(f"  HTA load / report: {r_hta:.1f}x as whole processes {'OK' if r_hta >= GOAL_HTA else 'MISSED'} "
              f"(goal >= {GOAL_HTA}x; CPU time {cpu_med['hta'] / cpu_med['report']:.1f}x); {r_c:.1f}x counting only "
              f"HTA's TraceAnalysis construction (its imports excluded, traceana's not); HTA RSS / report RSS "
              f"{rss['hta'] / rss['report']:.1f}x")
        if baseline is not None:
            print(f"  HTA load / before: {med['hta'] / med['before']:.1f}x (CPU {cpu_med['hta'] / cpu_med['before']:.1f}x)")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-hta", action="store_true", help="skip HTA (it takes ~10 s a run)")
    ap.add_argument("--no-pylo", action="store_true", help="skip the Python-loader run")
    ap.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                    help="another traceana checkout (e.g. `git worktree add /tmp/old <commit>`) timed alongside")
    args = ap.parse_args()
    traces = args.traces or [p for p in DEFAULT if p.exists()]
    if not traces:
        sys.exit("no trace given and ../shared/traces is absent")
    if not have("orjson"):
        sys.exit("the floor needs orjson: bash bench/setup_bench_env.sh, then run this with bench/.venv/bin/python")
    with_hta = not args.no_hta
    if with_hta and not have("hta.trace_analysis"):
        print("HTA is not installed in this Python (bash bench/setup_bench_env.sh); timing without it\n")
        with_hta = False
    sys.path.insert(0, str(REPO))
    for t in traces:
        bench(t, args.runs, with_hta, not args.no_pylo, args.baseline)


if __name__ == "__main__":
    main()
