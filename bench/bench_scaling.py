#!/usr/bin/env python3
"""How `traceana report` scales with trace size: time and peak RSS from ~55 MB to ~1.1 GB of JSON.

The traces are a real one replicated N times (bench/make_large_trace.py: time-shifted copies
with consistent ids, so linking stays correct), written gzipped to a temporary directory.
Each size runs `traceana report BIG.json.gz -o out.html` as a whole process (--runs times,
median wall time, max peak RSS from wait4); optionally the floor (gunzip + orjson.loads) at
each size too (--floor; it needs ~5x the JSON size in RAM). Printed: time and RSS per size,
the least-squares slope per MB of JSON (and intercept), R^2, and the linearity check: each
size's time and RSS within 15% of the straight line through them (a superlinear stage,
e.g. a quadratic join, would show as the largest size far above the line).

Goals (issue 31): the ~1.1 GB trace (22 copies) in <= 2.5 s with <= 400 MB peak RSS; a ~5 GB one
(--copies 100) in <= 12 s without swapping (pages swapped out during each run are counted from
/proc/vmstat). 2.5 s was set on a machine where the floor of one copy (gunzip + orjson.loads of the
55.6 MB OWLv2 trace) took 0.61 s: the same goal on this machine, measured in this session, is
2.5 s x (this floor / 0.61 s), i.e. report(22 copies) <= 0.19 x 22 x floor(1 copy) (the floor of the
big trace itself would need ~6 GB of RAM, so one copy's is measured and scaled; the floor is linear
in the JSON). --pylo also times each size with the Python loader (TRACEANA_PURE_PYTHON=1), for the
ratio in the same session; --baseline DIR times another traceana checkout (before / after).

    bench/.venv/bin/python bench/bench_scaling.py [--copies 1,4,11,22] [--runs 1] [--floor] [--pylo]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_report import FLOOR, REPO, SHARED, run  # noqa: E402
sys.path.insert(0, str(REPO))
from traceana.ranks.executor import uncompressed_size  # noqa: E402

SOURCE = SHARED / "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
TOLERANCE = 0.15
GOAL_GB_S = 2.5  # the ~1.1 GB trace: report in <= 2.5 s
GOAL_GB_MB = 400.0  # ... with <= 400 MB peak RSS
GOAL_5GB_S = 12.0  # the ~5 GB trace: <= 12 s, no swapping
REF_FLOOR_S = 0.61  # the floor of one copy on the machine the goals were set on


def swapped_out() -> int | None:
    """Pages swapped out since boot (Linux), None elsewhere."""
    try:
        with open("/proc/vmstat") as fh:
            for line in fh:
                if line.startswith("pswpout "):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x: (a, b, R^2)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, (1 - ss_res / ss_tot) if ss_tot else 1.0


def linear(xs: list[float], ys: list[float], what: str, unit: str) -> bool:
    a, b, r2 = fit(xs, ys)
    worst = max(abs(y - (a + b * x)) / (a + b * x) for x, y in zip(xs, ys))
    ok = worst <= TOLERANCE
    print(f"  {what:5s}: {b * 1000:8.2f} {unit} per GB of JSON + {a:7.2f} {unit}   R^2 {r2:.4f}   "
          f"largest deviation from the line {worst * 100:4.1f}% -> {'linear' if ok else 'NOT linear'}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--copies", default="1,4,11,22", help="copies of the source per size (owlv2: ~50 MB each)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--floor", action="store_true", help="also time the floor at each size")
    ap.add_argument("--keep", type=Path, default=None, help="write/reuse the big traces in this directory")
    ap.add_argument("--pylo", action="store_true", help="also time the Python loader (TRACEANA_PURE_PYTHON=1)")
    ap.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                    help="another traceana checkout timed at each size too (before / after)")
    args = ap.parse_args()
    if not args.source.exists():
        sys.exit(f"{args.source} is absent")
    work = args.keep or Path(tempfile.mkdtemp(prefix="traceana-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = work / "out.html"
    rows = []
    print(f"source {args.source.name}, {os.cpu_count()} cores, {args.runs} run(s) per size")
    floor1 = statistics.median(run([sys.executable, "-c", FLOOR, str(args.source)])[0] for _ in range(5))
    print(f"floor of one copy (gunzip + orjson.loads, median of 5): {floor1:.2f} s "
          f"(the goals' machine: {REF_FLOOR_S:.2f} s)")
    for n in (int(c) for c in args.copies.split(",")):
        big = work / f"x{n}.json.gz"
        size_file = work / f"x{n}.size"
        if big.exists() and size_file.exists():
            mb = float(size_file.read_text())
        else:  # in a child: a child forked from a big parent would report the parent's RSS
            subprocess.run([sys.executable, str(HERE / "make_large_trace.py"), str(args.source), "--copies", str(n),
                            "-o", str(big)], check=True, stdout=subprocess.DEVNULL)
            # gzip's ISIZE is the size mod 4 GiB: lifted to what the copies hold (100 copies: 5.1 GB, not 0.8)
            isize, one = uncompressed_size(str(big)), uncompressed_size(str(args.source))
            while isize < 0.9 * n * one:
                isize += 1 << 32
            mb = isize / 1e6
            size_file.write_text(repr(mb))
        cmd = [sys.executable, "-m", "traceana", "report", str(big), "-o", str(out), "-q", "--force"]
        sw0 = swapped_out()
        res = [run(cmd, env) for _ in range(args.runs)]
        sw1 = swapped_out()
        t, m = statistics.median(r[0] for r in res), max(r[1] for r in res)
        c = statistics.median(r[2] for r in res)
        spread = 100 * (max(r[0] for r in res) - min(r[0] for r in res)) / t
        line = (f"  {mb:7.0f} MB JSON ({n:3d} copies): report {t:6.2f} s wall (spread {spread:3.0f}%) {c:6.2f} s CPU "
                f"{m:6.0f} MB peak RSS ({m / mb:4.2f}x JSON)")
        if sw0 is not None and sw1 is not None:
            line += f"  swapped out: {sw1 - sw0} pages"
        row = {"mb": mb, "s": t, "cpu": c, "rss": m,
               "swapped": sw1 - sw0 if sw0 is not None and sw1 is not None else None}
        if args.pylo:
            pres = [run(cmd, {**env, "TRACEANA_PURE_PYTHON": "1"}) for _ in range(args.runs)]
            pt, pm = statistics.median(r[0] for r in pres), max(r[1] for r in pres)
            line += f"   Python loader {pt:6.2f} s {pm:6.0f} MB ({pt / t:.2f}x the time)"
            row.update(pylo_s=pt, pylo_rss=pm)
        if args.baseline is not None:
            benv = {**env, "PYTHONPATH": str(args.baseline) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            bres = [run(cmd, benv) for _ in range(args.runs)]
            bt, bm = statistics.median(r[0] for r in bres), max(r[1] for r in bres)
            bc = statistics.median(r[2] for r in bres)
            line += f"   before: {bt:6.2f} s wall {bc:6.2f} s CPU {bm:6.0f} MB"
            row.update(before_s=bt, before_cpu=bc, before_rss=bm)
        if args.floor:
            ft, fm, _ = run([sys.executable, "-c", FLOOR, str(big)])
            line += f"   floor {ft:6.2f} s {fm:6.0f} MB   report/floor {t / ft:.2f}x time {m / fm:.2f}x RSS"
            row.update(floor_s=ft, floor_rss=fm)
        print(line, flush=True)
        rows.append(row)
    xs = [r["mb"] for r in rows]
    for r in rows:
        scaled = floor1 * r["mb"] / (uncompressed_size(str(args.source)) / 1e6)  # the floor of this size, scaled
        if 900 <= r["mb"] <= 1500:
            here = GOAL_GB_S * floor1 / REF_FLOOR_S
            ok = r["s"] <= here and r["rss"] <= GOAL_GB_MB
            print(f"goal at {r['mb']:.0f} MB: {r['s']:.2f} s, {r['s'] / scaled:.2f}x the scaled floor "
                  f"(<= {GOAL_GB_S} s there, {here:.2f} s here: {GOAL_GB_S / (REF_FLOOR_S * r['mb'] / 55.6):.2f}x) "
                  f"and {r['rss']:.0f} MB peak RSS (<= {GOAL_GB_MB:.0f} MB): {'OK' if ok else 'MISSED'}")
        if r["mb"] >= 4000:
            here = GOAL_5GB_S * floor1 / REF_FLOOR_S
            swapped = r.get("swapped")
            ok = r["s"] <= here and not swapped
            why = [] if ok else ([f"{r['s'] / here:.2f}x the time"] if r["s"] > here else []) + (
                [f"{swapped} pages swapped out"] if swapped else [])
            print(f"goal at {r['mb']:.0f} MB: {r['s']:.2f} s (<= {GOAL_5GB_S} s there, {here:.2f} s here), "
                  f"{r['rss']:.0f} MB peak RSS, swapped out: {swapped if swapped is not None else 'unknown'}: "
                  f"{'OK' if ok else 'MISSED (' + ', '.join(why) + ')'}")
    if len(rows) >= 3:
        print("fit against MB of JSON:")
        linear(xs, [r["s"] for r in rows], "wall", "s")
        ok_t = linear(xs, [r["cpu"] for r in rows], "CPU", "s")
        ok_m = linear(xs, [r["rss"] for r in rows], "RSS", "MB")
        print(f"time per MB of JSON at the largest size: {rows[-1]['s'] / xs[-1] * 1000:.1f} ms wall, "
              f"{rows[-1]['cpu'] / xs[-1] * 1000:.1f} ms CPU; linear in size (CPU time, which other load "
              f"disturbs least): time {'yes' if ok_t else 'NO'}, memory {'yes' if ok_m else 'NO'}")
    if not args.keep:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()


if __name__ == "__main__":
    main()
