#!/usr/bin/env python3
"""Where `traceana report` spends its time: each stage's share, so a regression shows where it landed.

Each run is a fresh process doing what `traceana report TRACE -o out.html` does, in the same order
(the trace starts loading in a thread while the rest of traceana imports), with a traceana.meter.Meter
handed to the analysis: every stage times itself (wall and CPU) and counts the events it visits.
Printed per stage: the median wall time over the runs, its share of the whole report, the CPU time
(what other load on the machine disturbs least; a loading thread's CPU counts where it ran) and the
events visited, for

    import     traceana, numpy, msgspec and the report path's modules (the load runs meanwhile)
    load       waiting for the trace's columns (the rest of the load overlapped the imports)
    link, cost, context, modules.places, memory, timeline, modules.table, coverage, cpu, explain
    diagnose.* each part of the diagnosis (ledger, stalls, gaps, memory, fusion, layout, recompute,
               findings)
    saved      the analysis as saved (json_out.as_saved), what html and md are rendered from
    render     the report text;  write: the file

    bench/.venv/bin/python bench/bench_stages.py [TRACE ...] [--runs 5] [--format html|md|json]
        [--copies N]  (the first trace replicated N times first: bench/make_large_trace.py)
        [--baseline CHECKOUT]  (another checkout, e.g. `git archive` of an older commit with its scanner
                                built, run alternately with this one: each stage's CPU before / after)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = Path(os.environ.get("TRACEANA_SHARED") or REPO.parent / "shared") / "traces"
DEFAULT = [SHARED / "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"]

#: the child: the report as the CLI runs it, every stage timed; prints the Meter as JSON
CHILD = r"""
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
path, out, fmt = sys.argv[1], sys.argv[2], sys.argv[3]
import os
from traceana.cli.entry import tune_for_reading  # as the console script does, before numpy
tune_for_reading(["report"], os.environ)
from traceana.load import prefetch
prefetch.start(path)
from traceana.meter import Meter
from traceana.analysis import analyze
from traceana.cli.ci import Extras
from traceana.output.safe_write import write_text
from traceana.render import render
if fmt == "html":
    import traceana.render.html, traceana.render.templates  # noqa: F401  (what render imports for html)
m = Meter()
m.add_time("import", time.perf_counter() - t0, time.process_time() - c0)
a = analyze(path, meter=m)
with m.timed("saved"):
    a = Extras.saved(a, fmt)
with m.timed("render"):
    text = render(a, fmt)
with m.timed("write"):
    write_text(out, text)
print(json.dumps({"seconds": m.seconds, "cpu": m.cpu, "visits": m.visits,
                  "total": time.perf_counter() - t0, "total_cpu": time.process_time() - c0}))
"""

ORDER = ("import", "load", "link", "cost", "context", "modules.places", "memory", "diagnose", "diagnose.ledger",
         "diagnose.stalls", "diagnose.gaps", "diagnose.memory", "diagnose.fusion", "diagnose.layout",
         "diagnose.recompute", "diagnose.findings", "timeline", "modules.table", "coverage", "cpu", "explain",
         "saved", "render", "write")


def run_once(trace: Path, fmt: str, checkout: Path = REPO) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "traceana-bench-pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed package has it
    with tempfile.TemporaryDirectory(prefix="traceana-stages-") as tmp:
        out = Path(tmp) / f"report.{fmt}"
        p = subprocess.run([sys.executable, "-c", CHILD, str(trace), str(out), fmt], env=env, capture_output=True,
                           text=True, cwd=tmp)  # not a checkout's folder: that would shadow PYTHONPATH
    if p.returncode != 0:
        sys.exit(f"the report failed on {trace}: {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def table(trace: Path, runs: list[dict]) -> list[tuple[str, float, float, float, int]]:
    """(stage, median wall s, share of the report's wall %, median CPU s, events visited) per stage."""
    total = statistics.median(r["total"] for r in runs)
    names = [n for n in ORDER if any(n in r["seconds"] for r in runs)]
    names += sorted({n for r in runs for n in r["seconds"]} - set(names))
    rows = []
    for n in names:
        wall = statistics.median(r["seconds"].get(n, 0.0) for r in runs)
        cpu = statistics.median(r["cpu"].get(n, 0.0) for r in runs)
        rows.append((n, wall, 100 * wall / total if total else 0.0, cpu, runs[0]["visits"].get(n, 0)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--format", default="html", choices=("html", "md", "json"))
    ap.add_argument("--copies", type=int, default=1, help="replicate the (first) trace this many times first")
    ap.add_argument("--baseline", type=Path, help="another checkout timed in the same rounds, alternately")
    args = ap.parse_args()
    traces = args.traces or [p for p in DEFAULT if p.exists()]
    if not traces:
        sys.exit("no trace given and the shared traces are absent (set TRACEANA_SHARED)")
    tmp = None
    if args.copies > 1:
        tmp = tempfile.TemporaryDirectory(prefix="traceana-stages-")
        big = Path(tmp.name) / f"x{args.copies}.json.gz"
        subprocess.run([sys.executable, str(HERE / "make_large_trace.py"), str(traces[0]), "--copies",
                        str(args.copies), "-o", str(big)], check=True, stdout=subprocess.DEVNULL)
        traces = [big]
    for trace in traces:
        runs, before = [], []
        for _ in range(args.runs):  # with a baseline, its run and this checkout's alternate
            if args.baseline is not None:
                before.append(run_once(trace, args.format, args.baseline))
            runs.append(run_once(trace, args.format))
        wall = statistics.median(r["total"] for r in runs)
        cpu = statistics.median(r["total_cpu"] for r in runs)
        print(f"{trace.name}: report -> {args.format}, {args.runs} runs, median {wall:.2f} s wall, {cpu:.2f} s CPU "
              f"(in-process; the interpreter's own start-up not counted)")
        print(f"  {'stage':20s} {'wall s':>8s} {'share':>7s} {'CPU s':>8s} {'events visited':>15s}")
        for n, w, share, c, v in table(trace, runs):
            indent = "  " if "." in n and n.split(".")[0] == "diagnose" else ""
            print(f"  {indent + n:20s} {w:8.3f} {share:6.1f}% {c:8.3f} {v:15,d}")
        print("  (diagnose.* are parts of diagnose; a loading thread's CPU counts in the stage it overlapped)")
        if before:
            was = {n: c for n, _, _, c, _ in table(trace, before)}
            print(f"  against {args.baseline} (median CPU s of the same rounds):")
            print(f"  {'stage':20s} {'before':>8s} {'after':>8s} {'after/before':>13s}")
            for n, _, _, c, _ in table(trace, runs):
                b = was.get(n, 0.0)
                print(f"  {n:20s} {b:8.3f} {c:8.3f} {c / b if b > 0 else float('nan'):13.2f}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
