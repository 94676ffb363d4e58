"""Many rank files: find them, size the workers, map the per-rank analysis over an executor.

`analyze_rank(path, options)` is a pure function from a file path to a picklable result (the
Analysis is plain data), so it runs the same in this process, in a local process pool, or on
a Dask distributed cluster (`--executor dask://HOST:PORT`; the workers must see the same
paths, e.g. a shared file system, and have traceana installed).

Local workers are sized to the cores and to memory: one worker analyses a rank in about a ratio
times the trace's uncompressed JSON plus MEM_BASE, and no more files are in flight than their
estimates fit in MEM_SHARE of MemAvailable (/proc/meminfo). The ratio starts at MEM_FACTOR (measured
peaks, the interpreter's 35 MB included: 141 MB for 55 MB of JSON, 337 MB for 202 MB, 1.48 GB for
1.1 GB, i.e. 1.3-1.9x the JSON plus 35 MB) and becomes the largest one the workers measure on the
files they analyse (ranks/sizing.py: each file's peak RSS growth over its JSON bytes), since a trace
of many distinct names can take several times more. The workers start once (forked where that is
safe, so they inherit the imports), are reused for every file, and take the files largest first.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from traceana.errors import BadInput, Incomplete, TraceanaError
from traceana.output.ownership import written_by_traceana
from traceana.ranks.sizing import Measure, MemoryGate

TRACE_SUFFIXES = (".json", ".json.gz")  # covers *.pt.trace.json[.gz]
MEM_FACTOR = 2.0  # peak RSS per worker <= MEM_FACTOR x uncompressed JSON ...
MEM_BASE = 150e6  # ... plus the interpreter, numpy and traceana itself
MEM_SHARE = 0.85  # of MemAvailable, leaving room for the parent and the page cache


def _natural(name: str) -> list[Any]:
    """rank2 before rank10."""
    # odd places hold the ASCII digit runs ('²'.isdigit() is True, int('²') raises: never split on \d)
    return [int(t) if i % 2 else t.lower() for i, t in enumerate(re.split(r"([0-9]+)", name))]


def _file_key(path: str) -> Any:
    """One key per file however it is reached (symlinks, `a/../a`, hard links)."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return os.path.realpath(path)


_HEAD = 1 << 16  # a profiler's trace names its "traceEvents" within this many bytes (after a little metadata)


def traceana_report(path: str) -> bool:
    """A plain .json file traceana wrote as a report (its ownership marker, traceana/output/ownership.py),
    not a trace: no "traceEvents" member in its head. A cross-rank report written into the folder of its
    rank files (-o DIR/ranks.json) is not taken for a rank the next time."""
    if not path.endswith(".json"):
        return False  # .json.gz: traceana writes only annotated traces so, and those are traces
    try:
        with open(path, "rb") as fh:
            if b'"traceEvents"' in fh.read(_HEAD):
                return False
        return written_by_traceana(path)
    except OSError:
        return False


def find_rank_files(inputs: Sequence[str], repeats: list[tuple[str, str]] | None = None,
                    reports: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The trace files named by `inputs` (files, or directories whose regular *.json /
    *.json.gz files are taken, not recursively), in natural order; and what was skipped in
    those directories. A file reached by two paths is taken once: (kept, dropped) path pairs
    are appended to `repeats` when given. In a directory, reports traceana wrote are skipped
    (appended to `reports` too). BadInput when a directory has no trace file or an input is
    missing."""
    files: list[str] = []
    skipped: list[str] = []
    for inp in inputs:
        if os.path.isdir(inp):
            try:
                entries = sorted(os.scandir(inp), key=lambda e: _natural(e.name))
            except OSError as exc:
                raise BadInput(f"{inp}: cannot list the directory: {exc.strerror or exc}") from None
            found = []
            for e in entries:
                try:
                    regular = e.is_file()  # follows symlinks; FIFOs, sockets and devices are not files
                except OSError:
                    regular = False
                path = os.path.join(inp, e.name)
                if regular and e.name.endswith(TRACE_SUFFIXES) and not e.name.startswith("."):
                    if traceana_report(path):
                        skipped.append(path)
                        if reports is not None:
                            reports.append(path)
                    else:
                        found.append(path)
                else:
                    skipped.append(path)
            if not found:
                n = len(entries)
                raise BadInput(f"{inp}: is a directory with no trace files (*.json, *.json.gz) among its "
                               f"{n} entr{'y' if n == 1 else 'ies'}; give a directory of per-rank traces")
            files.extend(found)
        elif os.path.exists(inp):
            files.append(inp)
        else:
            raise BadInput(f"{inp}: no such file")
    seen: dict[Any, str] = {}
    unique = []
    for f in files:
        key = _file_key(f)
        if key not in seen:
            seen[key] = f
            unique.append(f)
        elif repeats is not None and f != seen[key]:
            repeats.append((seen[key], f))
    return unique, skipped


# ----------------------------------------------------------------------------- the worker


def analyze_rank(path: str, options: Any = None, drop: Sequence[str] = ()) -> dict[str, Any]:
    """One rank file -> {"path", "file", "analysis" (with "rank_facts") | "error", "seconds"}.
    Never raises for a bad file: the error is the result, so one corrupt rank does not sink
    a 512-rank report. `drop`: top-level Analysis keys left out of the result (what the
    caller will not read: the timeline, half of a rank's result, for an html or md cross-rank
    report), so less is pickled back and held by the parent."""
    from traceana.analysis import Options, analyze_trace_parts
    from traceana.load import load_trace
    from traceana.link.steps import rank_facts
    from traceana.ranks.summary import rank_summary

    t0 = time.perf_counter()
    out: dict[str, Any] = {"path": path, "file": os.path.basename(path)}
    with Measure() as mem:
        try:
            trace = load_trace(path)
            facts = rank_facts(trace)
            analysis, parts = analyze_trace_parts(trace, options if options is not None else Options())
            facts["calls"] = rank_summary(parts.trace, parts.links, parts.groups, analysis["ops"])
            del trace, parts
            analysis["rank_facts"] = facts
            for key in drop:
                analysis.pop(key, None)
            out["analysis"] = analysis
        except TraceanaError as exc:
            out["error"] = str(exc)
        except MemoryError:
            out["error"] = f"{path}: out of memory while analysing this rank (use fewer --jobs)"
        except Exception as exc:  # a bug on one rank must not lose the others' reports
            out["error"] = f"{path}: internal error ({type(exc).__name__}: {str(exc)[:300]})"
    out["seconds"] = time.perf_counter() - t0
    out["rss_growth"] = mem.growth  # the peak memory this file took (None: an earlier, larger file's peak stands)
    return out


# ----------------------------------------------------------------------------- sizing


def uncompressed_size(path: str) -> int:
    """The file's JSON size: gzip's ISIZE trailer (size mod 2^32, lifted to at least the
    compressed size), or the file size for plain JSON."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # opening a FIFO would block
            return 0
        size = st.st_size
        with open(path, "rb") as fh:
            magic = fh.read(2)
            if magic != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            isize = struct.unpack("<I", fh.read(4))[0]
    except OSError:
        return 0
    while isize < size:  # > 4 GiB wraps: the JSON is at least as large as its gzip
        isize += 1 << 32
    return isize


def mem_available() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where there is no /proc)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Plan:
    workers: int
    cores: int
    mem_available: int | None
    est_peak: int  # bytes, the largest rank file's estimated peak
    limited_by: str  # "files", "cores", "--jobs", "memory"


def plan_workers(paths: Sequence[str], jobs: int | None = None, *, cores: int | None = None,
                 available: int | None = -1, sizes: Sequence[int] | None = None) -> Plan:
    """How many local worker processes: at most one per file, per core (or --jobs), and no
    more than the largest files' estimated peaks (MEM_FACTOR x JSON + MEM_BASE) fit in
    MEM_SHARE of MemAvailable. Always at least 1."""
    cores = cores or cpu_count()
    if available == -1:
        available = mem_available()
    sizes = list(sizes) if sizes is not None else [uncompressed_size(p) for p in paths]
    est = sorted((MEM_FACTOR * s + MEM_BASE for s in sizes), reverse=True)
    n, why = len(paths), "files"
    cap = jobs if jobs else cores
    if cap < n:
        n, why = cap, "--jobs" if jobs else "cores"
    if available is not None and est:
        budget = MEM_SHARE * available
        fit, total = 0, 0.0
        for e in est:
            if total + e > budget:
                break
            total += e
            fit += 1
        if fit < n:
            n, why = max(1, fit), "memory"
    return Plan(max(1, n), cores, available, int(est[0]) if est else 0, why)


# ----------------------------------------------------------------------------- executors


def _local_context():
    """fork where it is safe (POSIX, no other threads: the worker inherits the imports, no
    re-import per worker), else the platform's default."""
    import multiprocessing as mp

    if "fork" in mp.get_all_start_methods() and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context()


def dask_address(spec: str) -> str | None:
    """'dask://HOST:PORT' -> 'tcp://HOST:PORT' (also tcp://, tls://, ucx:// as given); None for 'local'."""
    if spec in ("local", "", None):
        return None
    for scheme in ("dask://", "tcp://", "tls://", "ucx://", "inproc://"):
        if spec.startswith(scheme):
            rest = spec[len(scheme):]
            if not rest:
                break
            return ("tcp://" + rest) if scheme == "dask://" else spec
    raise BadInput(f"--executor {spec!r}: expected 'local' or 'dask://HOST:PORT'")


def map_ranks(paths: Sequence[str], options: Any = None, *, executor: str = "local", jobs: int | None = None,
              on_done: Callable[[dict[str, Any]], None] | None = None,
              drop: Sequence[str] = ()) -> tuple[list[dict[str, Any]], str]:
    """analyze_rank over every path; results in the order of `paths`, and a line saying
    where they ran. `on_done` is called once per finished file (the progress bar); `drop` is
    passed on to analyze_rank. Workers take the largest files first (so no large file starts
    last while the other workers idle), one worker per core reused for every file."""
    addr = dask_address(executor)
    if addr is not None:
        try:
            from distributed import Client
        except ImportError:
            raise BadInput("--executor dask://...: Dask is not installed (pip install 'traceana[dask]')") from None
        try:
            client = Client(addr, timeout=os.environ.get("TRACEANA_DASK_TIMEOUT", "20s"))
        except (OSError, TimeoutError) as exc:
            raise BadInput(f"--executor {executor}: cannot reach the Dask scheduler at {addr} ({exc})") from None
        try:
            n = len(client.scheduler_info().get("workers", {}))
            results = _run(client.get_executor(), paths, options, on_done, drop)
        finally:
            client.close()
        return results, f"on the Dask cluster at {addr} ({n} workers)"
    sizes = [uncompressed_size(p) for p in paths]
    plan = plan_workers(paths, jobs, sizes=sizes)
    if plan.workers == 1:
        results = []
        for p in paths:
            r = analyze_rank(p, options, drop)
            results.append(r)
            if on_done:
                on_done(r)
        return results, f"in this process (1 worker: limited by {plan.limited_by})"
    pool = min(len(paths), jobs or plan.cores)  # memory is the gate's to limit, file by file
    budget = MEM_SHARE * plan.mem_available if plan.mem_available is not None else None
    gate = MemoryGate(sizes, budget, MEM_FACTOR, MEM_BASE)
    with ProcessPoolExecutor(max_workers=pool, mp_context=_local_context()) as ex:
        results = _run(ex, paths, options, on_done, drop, sizes, hold_lost=True, gate=gate)
    lost = [i for i, r in enumerate(results) if r.get("lost")]
    again = ""
    if lost:  # a worker died and took the pool with it: each rank it lost, once more, alone
        order = sorted(lost, key=lambda i: -sizes[i])
        for i, r in zip(order, _run_alone(paths, order, options, drop, plan.workers)):
            results[i] = r
            if on_done:
                on_done(r)
        again = (f"; a worker process died and {len(lost)} rank file{'s' if len(lost) != 1 else ''} "
                 "were analysed again, each in a process of its own")
    why = "memory" if gate.held_back else "--jobs" if jobs and jobs < len(paths) else \
        "cores" if pool < len(paths) else "files"
    ratio = (f"measured {gate.measured:.1f}x its JSON" if gate.measured is not None
             else f"estimated {MEM_FACTOR:g}x its JSON + {MEM_BASE / 1e6:.0f} MB")
    return results, (f"in {pool} worker processes ({plan.cores} cores; limited by {why}; "
                     f"~{gate.estimate(largest_first(paths, sizes)[0]) / 1e9:.1f} GB peak for the largest rank, "
                     f"{ratio}){again}")


def largest_first(paths: Sequence[str], sizes: Sequence[int] | None = None) -> list[int]:
    """Indices of `paths`, the largest uncompressed JSON first (ties in the given order): the
    longest-processing-time-first order, so the run ends with small files filling the gaps."""
    sizes = list(sizes) if sizes is not None else [uncompressed_size(p) for p in paths]
    return sorted(range(len(paths)), key=lambda i: -sizes[i])


def _run(ex: Executor, paths: Sequence[str], options: Any, on_done: Callable[[dict[str, Any]], None] | None,
         drop: Sequence[str] = (), sizes: Sequence[int] | None = None, hold_lost: bool = False,
         gate: MemoryGate | None = None) -> list[dict[str, Any]]:
    """analyze_rank over `paths` on `ex`, the largest files first; with a `gate`, a file is submitted only
    when the gate admits it beside those in flight (ranks/sizing.py), and each result teaches the gate its
    measured memory ratio. A rank whose worker was lost (killed by the OOM killer, lost with its node; a
    local pool then fails every rank still queued too) is marked "lost"; with `hold_lost` on_done is not
    told about it (the caller analyses it again)."""
    pending = deque(largest_first(paths, sizes))
    running: dict[Future, int] = {}
    results: list[dict[str, Any] | None] = [None] * len(paths)

    def lost(i: int, exc: BaseException) -> dict[str, Any]:
        return {"path": paths[i], "file": os.path.basename(paths[i]), "lost": f"its worker failed: {type(exc).__name__}",
                "error": f"{paths[i]}: the worker analysing it failed ({type(exc).__name__}: {str(exc)[:200]})"}

    def finish(i: int, r: dict[str, Any]) -> None:
        results[i] = r
        if gate is not None:
            gate.learn(i, r)
        if on_done and not (hold_lost and r.get("lost")):
            on_done(r)

    def fill() -> None:
        while pending and (gate is None or gate.admits(running.values(), pending[0])):
            i = pending.popleft()
            try:
                running[ex.submit(analyze_rank, paths[i], options, tuple(drop))] = i
            except Exception as exc:  # the pool broke (a worker died): every rank not yet run is lost
                finish(i, lost(i, exc))

    fill()
    while running:
        done, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for fut in done:
            i = running.pop(fut)
            try:
                r = fut.result()
            except Exception as exc:
                r = lost(i, exc)
            finish(i, r)
        fill()
    return [r for r in results if r is not None]


def _run_alone(paths: Sequence[str], order: Sequence[int], options: Any, drop: Sequence[str],
               workers: int) -> list[dict[str, Any]]:
    """analyze_rank for paths[i], i in `order`, each in a new process of its own (at most `workers`
    at a time), so a worker that dies again takes only its own rank with it and says how it died.
    Results in `order`'s order; a rank whose process died is marked "lost"."""
    from multiprocessing.connection import wait

    ctx = _local_context()
    todo, running, out = list(order), {}, {}
    while todo or running:
        while todo and len(running) < workers:
            i = todo.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_analyze_into, args=(send, paths[i], options, tuple(drop)), daemon=True)
            proc.start()
            send.close()  # the child holds the only writer: its death is the reader's EOF
            running[recv] = (i, proc)
        for conn in wait(list(running)):
            i, proc = running.pop(conn)
            try:
                out[i] = conn.recv()
            except (EOFError, OSError):
                proc.join()
                why = f"its worker process died twice, {_death(proc.exitcode)}"
                out[i] = {"path": paths[i], "file": os.path.basename(paths[i]), "lost": why,
                          "error": f"{paths[i]}: not analysed: {why}"}
            conn.close()
            proc.join()
    return [out[i] for i in order]


def _analyze_into(conn: Any, path: str, options: Any, drop: tuple[str, ...]) -> None:
    conn.send(analyze_rank(path, options, drop))
    conn.close()


def _death(exitcode: int | None) -> str:
    """How a worker process ended, in words."""
    import signal

    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}" + (": out of memory?" if name == "SIGKILL" else "")
    return f"exit status {exitcode}"


def check_lost(results: Sequence[dict[str, Any]]) -> None:
    """Incomplete (exit 3) naming the rank files whose worker was lost (locally: died twice), so a
    comparison that lacks them is never taken for the whole run."""
    lost = [r for r in results if r.get("lost")]
    if not lost:
        return
    names = ", ".join(r["file"] for r in lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
    n = len(lost)
    raise Incomplete(f"{n} rank file{'s' if n != 1 else ''} not analysed ({lost[0]['lost']}): {names}; "
                     f"the report compares the other {len(results) - n}")


def check_missing(results: Sequence[dict[str, Any]], allow_missing: bool = False) -> None:
    """After the report is written: Incomplete (exit 3) naming the rank files that were not analysed (a
    worker lost, or a file that is no readable trace), so a comparison of some of the ranks is never
    taken for the whole run — unless `allow_missing` (--allow-missing)."""
    if allow_missing:
        return
    check_lost(results)
    bad = [r for r in results if "error" in r]
    if not bad:
        return
    n = len(bad)
    names = ", ".join(r["file"] for r in bad[:10]) + (f" and {n - 10} more" if n > 10 else "")
    why = str(bad[0]["error"]).replace(str(bad[0].get("path", "")) + ": ", "", 1)[:160]
    raise Incomplete(f"{n} of {len(results)} rank files could not be analysed: {names} (first: {why}); the report "
                     f"compares the other {len(results) - n} (--allow-missing accepts that: exit 0)")


def split(results: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(analyses, failures) from map_ranks results."""
    ok, bad = [], []
    for r in results:
        if "analysis" in r:
            ok.append(r["analysis"])
        else:
            bad.append({"file": r.get("file", ""), "error": r.get("error", "unknown error")})
    return ok, bad
