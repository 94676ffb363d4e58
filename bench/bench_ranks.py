#!/usr/bin/env python3
"""Cross-rank scaling: 8 rank files of ~50 MB of JSON each against one of them alone.

The rank files are made from one real distributed trace (default: HTA's df_index_resolver, a
DDP rank with 5 ProfilerSteps and NCCL all-reduces, 53.7 MB of JSON): rank r gets
distributedInfo {rank: r, world_size: N} and its timeline stretched by 1 + 0.002 r around the
trace's first timestamp (ts' = t0 + (ts - t0) s, dur' = dur s: nesting and order kept, every
rank a little slower than the one before, so they are distinct ranks). They are written
gzipped (level 1) to --dir, and reused when already there.

Each round runs, as whole processes, alternately:
    one   = `traceana report DIR/rank0.json.gz -o one.html`
    ranks = `traceana report DIR -o ranks.html`                     (local worker processes)
    dask  = `traceana report DIR -o dask.html --executor dask://…`  (with --dask: a LocalCluster
            of one single-threaded worker process per core, started once by this script)
    base one / base ranks = the same two with another checkout's traceana (with --against)
and prints medians, the spread (min-max) over --runs rounds, the ratio ranks / one against the
goal 1.2 x N / cores (cores = the CPUs this process may run on), and memory: each process's
peak RSS from wait4 (the largest of the process and its reaped children, i.e. the largest
single worker) and the peak of the whole process tree's summed RSS, sampled every 20 ms; and
CPU seconds, which other load on a shared machine disturbs less than wall time.

    /work/venv/bin/python bench/bench_ranks.py [--runs 5] [--ranks 8] [--dir /tmp/ranks8] [--dask]
                                               [--against OTHER_CHECKOUT]

The files are edited as text (the profiler's layout and size kept); --dask needs distributed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "traces"
SOURCE = SHARED / "hta/df_index_resolver.json.gz"
GOAL = 1.2  # ranks time <= GOAL x (N / cores) x one rank's time
STRETCH = 0.002  # rank r's timeline is 1 + STRETCH r times as long
QUIET = 0.25  # a round is quiet when everything else kept less than this many cores busy
sys.path.insert(0, str(REPO))
from tests.rank_traces import stretched_ranks  # noqa: E402  (the tests build their rank files alike)


CLUSTER = ("import sys\n"
           "from distributed import LocalCluster\n"
           "if __name__ == '__main__':\n"
           "    with LocalCluster(n_workers=int(sys.argv[1]), threads_per_worker=1, processes=True,\n"
           "                      dashboard_address=':0') as c:\n"
           "        print(c.scheduler_address, flush=True)\n"
           "        sys.stdin.read()\n")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ----------------------------------------------------------------------------- the rank files


def make_ranks(src: Path, dst: Path, n: int) -> list[Path]:
    """dst/rank0.json.gz ... rank{n-1}.json.gz from src (reused when all are there)."""
    files = [dst / f"rank{r}.json.gz" for r in range(n)]
    stamp = dst.with_name(dst.name + ".made-from")  # beside it: the directory holds rank files only
    want = f"{src.resolve()} {n} {STRETCH}"
    if all(f.exists() for f in files) and stamp.exists() and stamp.read_text() == want:
        return files
    k = n
    while (dst / f"rank{k}.json.gz").exists():  # a previous run's extra ranks (it made more)
        (dst / f"rank{k}.json.gz").unlink()
        k += 1
    for f, size in zip(files, stretched_ranks(src, dst, n, STRETCH)):
        print(f"  wrote {f} ({size / 1e6:.1f} MB of JSON)", flush=True)
    stamp.write_text(want)
    return files


# ----------------------------------------------------------------------------- timing


def _tree_rss(pid: int) -> int:
    """Summed RSS (bytes) of pid and its descendants, from /proc."""
    kids: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            kids.setdefault(int(fields[1]), []).append(int(d))  # fields[1] is the ppid
            rss[int(d)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # field 24: rss in pages
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += kids.get(p, [])
    return total


def _busy() -> float:
    """CPU seconds the whole machine has spent busy (user, nice, system, irq, softirq, steal)."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return float("nan")
    return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    """CPU seconds of this process and its live descendants (the Dask cluster's processes)."""
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    kids: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            kids.setdefault(int(f[1]), []).append(int(d))
            cpu[int(d)] = (int(f[11]) + int(f[12])) / tick  # utime, stime (fields 14, 15)
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0.0, [me]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo += kids.get(p, [])
    return total


def run(cmd: list[str], env: dict) -> tuple[float, float, float, float, float]:
    """Wall seconds, peak RSS of the largest single process (MB, wait4), the peak of the
    process tree's summed RSS (MB, sampled), CPU seconds (user + system, the process and its
    reaped children: what other load on the machine disturbs least) and the other load: how
    many cores everything else on the machine kept busy meanwhile, on average (not this script,
    not its Dask cluster)."""
    b0, own0 = _busy(), _own_cpu()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], _tree_rss(proc.pid))

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    busy = _busy() - b0 - (_own_cpu() - own0)  # less this script's sampler and the Dask cluster
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(cmd)} failed ({code}): {err.strip()[-800:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return wall, usage.ru_maxrss / 1024, peak[0] / 1e6, cpu, max(0.0, busy - cpu) / wall


def _fmt(name: str, ts: list[float], rss: list[float], tree: list[float], cpu: list[float]) -> str:
    return (f"  {name[:40]:<40}: median {statistics.median(ts):6.2f} s (spread {min(ts):.2f}-{max(ts):.2f} s, "
            f"CPU {statistics.median(cpu):.2f} s)  peak RSS {max(rss):4.0f} MB per process, "
            f"{max(tree):4.0f} MB all processes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=SOURCE, help="the real trace the ranks are made from")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "traceana-bench-ranks",
                    help="where the rank files are written (reused)")
    ap.add_argument("--dask", action="store_true", help="also time the job on a local Dask cluster")
    ap.add_argument("--jobs", type=int, default=None, help="--jobs for the local 8-rank job")
    ap.add_argument("--against", type=Path, default=None, metavar="CHECKOUT",
                    help="also time another checkout's traceana (e.g. the main branch), alternately")
    ap.add_argument("--make-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.source.exists():
        sys.exit(f"{args.source}: not found (give --source, or put ../shared/traces beside the checkout)")
    if args.make_only:
        make_ranks(args.source, args.dir, args.ranks)
        return
    if args.runs < 1:
        sys.exit("--runs: at least 1")
    n_cores = cores()
    print(f"making {args.ranks} rank files from {args.source.name} in {args.dir}", flush=True)
    # in a child process: a child forked from this one would otherwise report this process's
    # high-water RSS (Linux keeps ru_maxrss across fork and exec)
    subprocess.run([sys.executable, __file__, "--make-only", "--source", str(args.source), "--ranks",
                    str(args.ranks), "--dir", str(args.dir)], check=True)
    files = [args.dir / f"rank{r}.json.gz" for r in range(args.ranks)]
    from traceana.ranks.executor import uncompressed_size

    sizes = [uncompressed_size(str(f)) / 1e6 for f in files]
    out = Path(tempfile.mkdtemp(prefix="traceana-bench-ranks-out-"))

    def env_for(checkout: Path, tag: str) -> dict:
        """traceana from `checkout`, with its bytecode cached (as an installed copy has it)."""
        e = {**os.environ, "PYTHONPATH": str(checkout) + os.pathsep + os.environ.get("PYTHONPATH", ""),
             "PYTHONPYCACHEPREFIX": str(out / f"pycache-{tag}")}
        e.pop("PYTHONDONTWRITEBYTECODE", None)
        return e

    base = [sys.executable, "-m", "traceana", "report"]
    jobs = ["--jobs", str(args.jobs)] if args.jobs else []
    one = base + [str(files[0]), "-o", str(out / "one.html"), "-q", "--force"]
    many = base + [str(args.dir), "-o", str(out / "ranks.html"), "-q", "--force"] + jobs
    env = env_for(REPO, "this")
    cmds = {"one": (one, env), "ranks": (many, env)}
    if args.against:
        benv = env_for(args.against.resolve(), "base")
        cmds.update({"base one": (one, benv), "base ranks": (many, benv)})
    cluster = None
    if args.dask:
        # in a child process, so this one stays small (see make_ranks) and the cluster's CPU
        # is told apart from other jobs'; it runs until its stdin closes
        cluster = subprocess.Popen([sys.executable, "-c", CLUSTER, str(n_cores)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = cluster.stdout.readline().strip() if cluster.stdout else ""
        if not line.startswith("tcp://"):
            cluster.kill()
            sys.exit("--dask: could not start a LocalCluster (is distributed installed? pip install 'traceana[dask]')")
        addr = line.replace("tcp://", "dask://")
        cmds["dask"] = (base + [str(args.dir), "-o", str(out / "dask.html"), "-q", "--force", "--executor", addr], env)
    t: dict[str, list[float]] = {k: [] for k in cmds}
    m: dict[str, list[float]] = {k: [] for k in cmds}
    tree: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    other: dict[str, list[float]] = {k: [] for k in cmds}
    try:
        for cmd, e in cmds.values():  # warm the page cache, the bytecode caches and the Dask workers
            run(cmd, e)
        for i in range(args.runs):
            for k, (cmd, e) in cmds.items():
                w, r, s, c, o = run(cmd, e)
                t[k].append(w)
                m[k].append(r)
                tree[k].append(s)
                cpu[k].append(c)
                other[k].append(o)
            print(f"  round {i + 1}: " + ", ".join(f"{k} {t[k][-1]:.2f} s (other load {other[k][-1]:.1f} cores)"
                                                  for k in cmds), flush=True)
    finally:
        if cluster is not None and cluster.stdin:
            cluster.stdin.close()
            cluster.wait(timeout=60)
        shutil.rmtree(out, ignore_errors=True)
    print(f"{args.ranks} rank files of {min(sizes):.1f}-{max(sizes):.1f} MB of JSON; {args.runs} alternating "
          f"rounds; {n_cores} cores")
    names = {"one": "one rank (report rank0 -> html)", "ranks": f"{args.ranks} ranks (report DIR, local)",
             "base one": f"one rank, {args.against}", "base ranks": f"{args.ranks} ranks, {args.against}",
             "dask": f"{args.ranks} ranks (report DIR, Dask)"}
    for k in cmds:
        print(_fmt(names[k], t[k], m[k], tree[k], cpu[k]) +
              ("  (the client only; the workers run under the cluster)" if k == "dask" else ""))
    goal = GOAL * args.ranks / n_cores
    for tag, a, b in (("", "one", "ranks"), ("base: ", "base one", "base ranks"), ("Dask: ", "one", "dask")):
        if b not in t:
            continue
        ratios = [y / x for x, y in zip(t[a], t[b])]
        ratio = statistics.median(t[b]) / statistics.median(t[a])
        print(f"  {tag}{args.ranks} ranks / one rank: {ratio:.2f}x (per round {min(ratios):.2f}-{max(ratios):.2f}x) "
              f"{'OK' if ratio <= goal else 'MISSED'} (goal <= {GOAL} x {args.ranks} / {n_cores} = {goal:.2f}x)")
        # other jobs on the machine take cores from the 8-rank job (which wants them all) far
        # more than from one rank (which uses about one): rounds where both ran alone are the
        # fair comparison
        rounds = [i for i, (x, y) in enumerate(zip(other[a], other[b])) if x < QUIET and y < QUIET]
        if rounds:
            quiet = [ratios[i] for i in rounds]
            q = statistics.median(quiet)
            ta, tb = [t[a][i] for i in rounds], [t[b][i] for i in rounds]
            print(f"    in the {len(quiet)} round(s) where other load stayed under {QUIET} cores: median "
                  f"{q:.2f}x (spread {min(quiet):.2f}-{max(quiet):.2f}x) {'OK' if q <= goal else 'MISSED'}; "
                  f"one rank {statistics.median(ta):.2f} s ({min(ta):.2f}-{max(ta):.2f}), {args.ranks} ranks "
                  f"{statistics.median(tb):.2f} s ({min(tb):.2f}-{max(tb):.2f})")
        else:
            print(f"    no round ran with other load under {QUIET} cores: the ratio is the machine's, not traceana's")
        if b != "dask":  # the Dask workers' CPU is the cluster's, not the command's
            print(f"    CPU seconds: {statistics.median(cpu[b]) / statistics.median(cpu[a]):.2f}x one rank's "
                  f"(ideal: {args.ranks}x less the start-up the ranks share)")


if __name__ == "__main__":
    main()
