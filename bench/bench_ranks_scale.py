#!/usr/bin/env python3
"""Cross-rank reports at scale: 32, 64, 128 and 256 rank files through the local executor (and the
largest through a local Dask cluster with --dask), timed, with the parent process's peak memory.

The rank files are made from one real distributed trace (default: HTA's df_index_resolver, a DDP rank
with 5 ProfilerSteps and 2,020 NCCL all-reduces, 53.7 MB of JSON): rank r is the trace with every
timestamp 1 s x (r // 8) later (tests/rank_traces.shifted_ranks: 8 ranks a host, the hosts' clocks 1 s
apart, which the pass estimates from the collectives' ends and takes out, so every collective is matched on
every rank) and distributedInfo {rank: r, world_size: N}; written gzipped to --dir once and reused. A run of n ranks reads the first n
(symlinked into their own folder).

Per n, as a whole process (`traceana report DIR_n -o ranks.html -q`):
  wall       seconds, and per rank
  CPU        seconds of the process and its workers (what other load disturbs least)
  parent     the parent process's own peak RSS (VmHWM at its exit; its worker processes are not in it):
             the cross-rank pass holds every rank's summary (collective arrivals), never a trace
  pass       CPU seconds of the cross-rank pass alone (match, waits, first screen: traceana.ranks.cross_rank)
and the ratio of each n's wall and CPU time to n/2's: linear growth is 2.0.

    /work/venv/bin/python bench/bench_ranks_scale.py [--ranks 32,64,128,256] [--dir /tmp/ranks-scale] [--dask]
                                                     [--pass-only]
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SOURCE = Path(os.environ.get("TRACEANA_SHARED") or REPO.parent / "shared") / "traces" / "hta/df_index_resolver.json.gz"
sys.path.insert(0, str(REPO))

CLUSTER = ("import sys\n"
           "from distributed import LocalCluster\n"
           "if __name__ == '__main__':\n"
           "    with LocalCluster(n_workers=int(sys.argv[1]), threads_per_worker=1, processes=True,\n"
           "                      dashboard_address=':0') as c:\n"
           "        print(c.scheduler_address, flush=True)\n"
           "        sys.stdin.read()\n")

# run inside the measured process: the CLI, the cross-rank pass timed, VmHWM written at exit
CHILD = ("import atexit, json, sys, time\n"
         "import traceana.ranks.cross_rank as cr\n"
         "out = sys.argv[1]\n"
         "spent = [0.0]\n"
         "orig = cr.cross_rank\n"
         "def timed(*a, **k):\n"
         "    t = time.process_time()\n"
         "    try:\n"
         "        return orig(*a, **k)\n"
         "    finally:\n"
         "        spent[0] += time.process_time() - t\n"
         "cr.cross_rank = timed\n"
         "def done():\n"
         "    hwm = [int(x.split()[1]) * 1024 for x in open('/proc/self/status') if x.startswith('VmHWM:')][0]\n"
         "    json.dump({'hwm': hwm, 'pass': spent[0]}, open(out, 'w'))\n"
         "atexit.register(done)\n"
         "from traceana.cli.entry import main\n"
         "sys.argv = ['traceana'] + sys.argv[2:]\n"
         "sys.exit(main())\n")


def make(src: Path, dst: Path, n: int) -> None:
    from tests.rank_traces import shifted_ranks

    stamp = dst.with_name(dst.name + ".made-from")
    want = f"{src.resolve()} {n} shifted by host, 0 µs a rank"
    if stamp.exists() and stamp.read_text() == want and all((dst / f"rank{r}.json.gz").exists() for r in range(n)):
        return
    t = time.perf_counter()
    sizes = shifted_ranks(src, dst, n, step_us=0.0)
    stamp.write_text(want)
    print(f"  wrote {n} rank files of {sizes[0] / 1e6:.1f} MB of JSON in {time.perf_counter() - t:.0f} s", flush=True)


def subset(all_dir: Path, n: int, root: Path) -> Path:
    d = root / f"ranks{n}"
    d.mkdir(exist_ok=True)
    for r in range(n):
        link = d / f"rank{r}.json.gz"
        if not link.exists():
            link.symlink_to(all_dir / f"rank{r}.json.gz")
    return d


def measure(d: Path, out: Path, extra: list[str]) -> dict:
    stats = out.with_suffix(".stats.json")
    cmd = [sys.executable, "-c", CHILD, str(stats), "report", str(d), "-o", str(out), "-q", "--force", *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(cmd[3:])} failed ({code}): {err.strip()[-800:]}")
    s = json.loads(stats.read_text())
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "parent_mb": s["hwm"] / 1e6, "pass": s["pass"]}


def pass_only(all_dir: Path, ns: list[int]) -> None:
    """The cross-rank pass alone, in this process: 8 rank files analysed once, their results repeated (each
    copy another rank id) to n ranks; CPU seconds of traceana.ranks.cross_rank.cross_rank per n."""
    import copy

    from traceana.ranks.cross_rank import cross_rank
    from traceana.ranks.executor import analyze_rank

    base = [analyze_rank(str(all_dir / f"rank{r}.json.gz"), drop=("timeline",))["analysis"] for r in range(8)]
    prev = None
    for n in ns:
        analyses = []
        for r in range(n):
            a = copy.copy(base[r % 8])
            a["rank_facts"] = {**a["rank_facts"], "rank": r, "world_size": n}
            analyses.append(a)
        t = time.process_time()
        doc = cross_rank(analyses)
        spent = time.process_time() - t
        c = doc["collectives"]
        print(f"  {n:4d} ranks: cross-rank pass {spent:6.2f} s CPU ({spent / n * 1e3:.1f} ms a rank; "
              f"{c['matched']} collectives matched, {c['calls']} calls)"
              + (f", {spent / prev:.2f}x the {n // 2}'s" if prev else ""), flush=True)
        prev = spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--ranks", default="32,64,128,256")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "traceana-bench-ranks-scale")
    ap.add_argument("--dask", action="store_true", help="also the largest run on a local Dask cluster")
    ap.add_argument("--pass-only", action="store_true",
                    help="time the cross-rank pass alone, in this process (8 ranks' results repeated to n)")
    args = ap.parse_args()
    ns = sorted(int(x) for x in args.ranks.split(","))
    if not args.source.exists():
        sys.exit(f"{args.source}: not found (give --source)")
    all_dir = args.dir / "all"
    print(f"making {ns[-1]} rank files from {args.source.name} in {all_dir}", flush=True)
    make(args.source, all_dir, ns[-1])
    if args.pass_only:
        pass_only(all_dir, ns)
        return
    rows = []
    for n in ns:
        r = measure(subset(all_dir, n, args.dir), args.dir / f"out{n}.html", [])
        rows.append((n, "local", r))
        print(f"  {n:4d} ranks, local: {r['wall']:7.1f} s wall ({r['wall'] / n:.2f} s a rank), CPU {r['cpu']:7.1f} s, "
              f"parent peak {r['parent_mb']:6.0f} MB, cross-rank pass {r['pass']:.2f} s", flush=True)
    if args.dask:
        cores = len(os.sched_getaffinity(0))
        cluster = subprocess.Popen([sys.executable, "-c", CLUSTER, str(cores)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = cluster.stdout.readline().strip() if cluster.stdout else ""
        try:
            if not line.startswith("tcp://"):
                sys.exit("--dask: no LocalCluster (pip install 'traceana[dask]')")
            n = ns[-1]
            r = measure(subset(all_dir, n, args.dir), args.dir / f"dask{n}.html",
                        ["--executor", line.replace("tcp://", "dask://")])
            rows.append((n, "dask", r))
            print(f"  {n:4d} ranks, Dask:  {r['wall']:7.1f} s wall ({r['wall'] / n:.2f} s a rank), parent peak "
                  f"{r['parent_mb']:6.0f} MB (the client; the workers are the cluster's), cross-rank pass "
                  f"{r['pass']:.2f} s", flush=True)
        finally:
            if cluster.stdin:
                cluster.stdin.close()
            cluster.wait(timeout=120)
    local = [(n, r) for n, k, r in rows if k == "local"]
    for (n0, a), (n1, b) in zip(local, local[1:]):
        print(f"  {n1} / {n0} ranks: wall {b['wall'] / a['wall']:.2f}x, CPU {b['cpu'] / a['cpu']:.2f}x, "
              f"cross-rank pass {b['pass'] / max(a['pass'], 1e-9):.2f}x (linear: {n1 / n0:.1f}x)")
    worst = max(r["parent_mb"] for _, _, r in rows)
    print(f"  parent peak over all runs: {worst:.0f} MB ({'OK' if worst < 1000 else 'MISSED'}: goal < 1,000 MB)")


if __name__ == "__main__":
    main()
