"""Rank-file discovery, worker sizing, the per-rank worker, local executors, the progress bar."""

from __future__ import annotations

import gzip
import io
import os

import pytest

from tests.conftest import REPO, shared_trace
from tests.rank_traces import make_rank_dir
from traceana.errors import BadInput
from traceana.ranks.executor import (
    MEM_BASE,
    MEM_FACTOR,
    _run,
    analyze_rank,
    dask_address,
    find_rank_files,
    largest_first,
    map_ranks,
    plan_workers,
    split,
    uncompressed_size,
)
from traceana.cli.progress import Progress, enabled, progress
from traceana.render.json_out import to_json_safe

T4 = REPO / "sample_traces" / "t4_seed_pow_mul.json"


def test_find_rank_files_takes_traces_only_in_natural_order(tmp_path):
    for n in ("rank10.json.gz", "rank2.json", "rank1.pt.trace.json.gz", "notes.txt", ".hidden.json"):
        (tmp_path / n).write_bytes(b"{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "rank3.json").write_bytes(b"{}")  # not recursive
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.json")  # would block a reader: skipped
    files, skipped = find_rank_files([str(tmp_path)])
    assert [os.path.basename(f) for f in files] == ["rank1.pt.trace.json.gz", "rank2.json", "rank10.json.gz"]
    assert {os.path.basename(s) for s in skipped} >= {"notes.txt", "sub", ".hidden.json"}
    # files named directly, and the same file twice, count once
    files, _ = find_rank_files([str(tmp_path / "rank2.json"), str(tmp_path / "rank2.json")])
    assert len(files) == 1


def test_find_rank_files_says_when_there_is_none(tmp_path):
    (tmp_path / "a.csv").write_text("x")
    with pytest.raises(BadInput, match=r"is a directory with no trace files \(\*\.json, \*\.json\.gz\)"):
        find_rank_files([str(tmp_path)])
    with pytest.raises(BadInput, match="no such file"):
        find_rank_files([str(tmp_path / "missing.json")])


def test_uncompressed_size_reads_the_gzip_trailer(tmp_path):
    text = b"[" + b"1," * 50_000 + b"1]"  # 1 + 100,000 + 2 = 100,003 bytes
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(text))
    assert uncompressed_size(str(gz)) == len(text) == 100_003
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    assert uncompressed_size(str(plain)) == 100_003


def test_plan_workers_by_cores_jobs_and_memory():
    gb = 10**9
    # 8 files of 1 GB JSON each: estimated peak 2 x 1 GB + 0.15 GB = 2.15 GB per worker
    sizes = [gb] * 8
    assert MEM_FACTOR * gb + MEM_BASE == pytest.approx(2.15 * gb)
    # 12 GB free: 0.85 x 12 = 10.2 GB fits 4 workers (4 x 2.15 = 8.6; 5 x 2.15 = 10.75 > 10.2)
    p = plan_workers(["f"] * 8, cores=16, available=12 * gb, sizes=sizes)
    assert (p.workers, p.limited_by) == (4, "memory")
    # 2 cores: 2 workers, whatever the memory
    p = plan_workers(["f"] * 8, cores=2, available=240 * gb, sizes=sizes)
    assert (p.workers, p.limited_by) == (2, "cores")
    p = plan_workers(["f"] * 8, jobs=3, cores=16, available=240 * gb, sizes=sizes)
    assert (p.workers, p.limited_by) == (3, "--jobs")
    p = plan_workers(["f"] * 2, cores=16, available=240 * gb, sizes=sizes[:2])
    assert (p.workers, p.limited_by) == (2, "files")
    # one file larger than memory still gets one worker
    p = plan_workers(["f"], cores=4, available=1 * gb, sizes=[10 * gb])
    assert p.workers == 1
    # the largest files count first: 10 GB -> 20.15 GB, 100 MB -> 0.2 + 0.15 = 0.35 GB each;
    # 24 GB free, 0.85 x 24 = 20.4 usable: 20.15 fits, + 0.35 = 20.5 does not
    p = plan_workers(["f"] * 3, cores=8, available=24 * gb, sizes=[10 * gb, 100 * 10**6, 100 * 10**6])
    assert (p.workers, p.limited_by) == (1, "memory") and p.est_peak == pytest.approx(20.15 * gb)
    # 25 GB free, 0.85 x 25 = 21.25 usable: 20.15 + 0.35 = 20.5 fits, + 0.35 = 20.85 fits too
    p = plan_workers(["f"] * 3, cores=8, available=25 * gb, sizes=[10 * gb, 100 * 10**6, 100 * 10**6])
    assert (p.workers, p.limited_by) == (3, "files")
    # 24.2 GB free, 0.85 x 24.2 = 20.57 usable: 20.5 fits, 20.85 does not -> 2 workers
    p = plan_workers(["f"] * 3, cores=8, available=int(24.2 * gb), sizes=[10 * gb, 100 * 10**6, 100 * 10**6])
    assert (p.workers, p.limited_by) == (2, "memory")


def test_the_memory_estimate_covers_a_measured_worker():
    """A worker's peak RSS (a fresh process: the interpreter, numpy, traceana, the load and the
    analysis) stays under the estimate plan_workers sizes by, for a real 53.7 MB rank."""
    import subprocess
    import sys

    f = shared_trace("hta/df_index_resolver.json.gz")
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc: the peak is read from /proc/self/status")
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork and exec, so a child of a large
    # pytest process would report pytest's own peak
    code = ("import sys\n"
            "from traceana.ranks.executor import analyze_rank\n"
            "r = analyze_rank(sys.argv[1])\n"
            "assert 'analysis' in r, r\n"
            "print([int(x.split()[1]) * 1024 for x in open('/proc/self/status') if x.startswith('VmHWM:')][0])\n")
    p = subprocess.run([sys.executable, "-c", code, f], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    peak = int(p.stdout.split()[-1])
    # estimate: 2 x 53,733,385 B + 150 MB = 257.5 MB; measured ~141 MB
    est = MEM_FACTOR * uncompressed_size(f) + MEM_BASE
    assert est == pytest.approx(257.47e6, rel=1e-3)
    assert 60e6 < peak < est, (peak, est)


def test_analyze_rank_returns_errors_instead_of_raising(tmp_path):
    bad = tmp_path / "rank0.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:20])
    r = analyze_rank(str(bad))
    assert "analysis" not in r and "gzip" in r["error"] and r["file"] == "rank0.json.gz"
    ok = analyze_rank(str(T4))
    assert ok["analysis"]["schema"] == "traceana.analysis/1" and "rank_facts" in ok["analysis"]
    analyses, failed = split([ok, r])
    assert len(analyses) == 1 and failed[0]["file"] == "rank0.json.gz"


def test_process_pool_gives_the_same_analyses_as_one_process(tmp_path):
    make_rank_dir(tmp_path, n=3, straggler=2)
    files, _ = find_rank_files([str(tmp_path)])
    done = []
    pooled, where = map_ranks(files, jobs=2, on_done=done.append)
    assert where.startswith("in 2 worker processes") and len(done) == 3
    single, where1 = map_ranks(files, jobs=1)
    assert where1.startswith("in this process")
    strip = [dict(r["analysis"]) for r in pooled]
    assert [r["path"] for r in pooled] == files  # results keep the input order
    assert to_json_safe(strip) == to_json_safe([r["analysis"] for r in single])  # numpy call columns: as saved


def test_workers_take_the_largest_files_first_and_results_keep_the_input_order(tmp_path):
    from concurrent.futures import Executor, Future

    # sizes 5, 10, 10, 1: the two 10s first (in the given order), then 5, then 1
    assert largest_first(["a", "b", "c", "d"], [5, 10, 10, 1]) == [1, 2, 0, 3]

    class InOrder(Executor):  # runs each task at submit, recording the order
        def __init__(self):
            self.order = []

        def submit(self, fn, *args, **kwargs):
            self.order.append(os.path.basename(args[0]))
            f = Future()
            f.set_result(fn(*args, **kwargs))
            return f

    for name, copies in (("small.json", 1), ("large.json", 3), ("mid.json", 2)):
        text = T4.read_text()
        (tmp_path / name).write_text(text + " " * (len(text) * (copies - 1)))  # padding: same trace, larger file
    files = [str(tmp_path / n) for n in ("small.json", "large.json", "mid.json")]
    ex = InOrder()
    done = []
    results = _run(ex, files, None, done.append, drop=("timeline",))
    assert ex.order == ["large.json", "mid.json", "small.json"]
    assert [os.path.basename(r["path"]) for r in results] == ["small.json", "large.json", "mid.json"]
    assert sorted(os.path.basename(r["path"]) for r in done) == sorted(ex.order)  # each once, as it finishes
    assert all("timeline" not in r["analysis"] and "rank_facts" in r["analysis"] for r in results)


def test_html_and_md_reports_read_nothing_the_workers_leave_out(tmp_path):
    """The workers drop NOT_READ (the timeline) for an html or md report: the pages and the
    gates' verdicts are the same as from the full analyses, and less is sent back."""
    import pickle

    from traceana.compare.gates import evaluate, parse_all
    from traceana.ranks.cross_rank import cross_rank
    from traceana.render.ranks_html import NOT_READ, ranks_document, render_ranks

    make_rank_dir(tmp_path, n=3, straggler=2)
    files, _ = find_rank_files([str(tmp_path)])
    full, _ = map_ranks(files, jobs=2)
    lean, _ = map_ranks(files, jobs=2, drop=NOT_READ)
    assert NOT_READ == ("timeline",)
    assert all("timeline" in r["analysis"] for r in full) and not any("timeline" in r["analysis"] for r in lean)
    assert to_json_safe([{k: v for k, v in r["analysis"].items() if k != "timeline"} for r in full]) == \
        to_json_safe([r["analysis"] for r in lean])
    docs = []
    for res in (full, lean):
        analyses, failed = split(res)
        docs.append(ranks_document(cross_rank(analyses, failed), analyses, "here"))
    for fmt in ("html", "md"):
        assert render_ranks(docs[0], fmt) == render_ranks(docs[1], fmt)
    gates = parse_all(["coverage<95%", "roof<40%:aten::mm", "unmodelled>2%"], diff=False)
    assert [evaluate(r["analysis"], gates) for r in full] == [evaluate(r["analysis"], gates) for r in lean]
    assert len(pickle.dumps(lean)) < len(pickle.dumps(full))


def test_dask_address():
    assert dask_address("local") is None
    assert dask_address("dask://10.0.0.5:8786") == "tcp://10.0.0.5:8786"
    assert dask_address("tcp://h:1") == "tcp://h:1"
    with pytest.raises(BadInput, match="dask://HOST:PORT"):
        dask_address("ray://x")


def test_progress_is_silent_off_a_terminal():
    assert not enabled(False, io.StringIO())
    assert not enabled(True, io.StringIO())
    bar = progress(5, "x", quiet=False)  # pytest's stderr is not a terminal
    assert isinstance(bar, Progress) and bar._bar is None
    bar.stage("read")
    bar.advance("f")
    bar.close()


def test_progress_counts_stages_when_shown():
    class Fake:
        def __init__(self):
            self.n, self.closed, self.post = 0, False, []

        def update(self, k):
            self.n += k

        def set_postfix_str(self, s, refresh=True):
            self.post.append(s)

        def close(self):
            self.closed = True

    f = Fake()
    with Progress(f) as p:
        for s in ("read", "decode", "columns"):
            p.stage(s)
    assert f.n == 3 and f.post == ["read", "decode", "columns"] and f.closed
