"""A folder of rank files as it is found: bad rank files, traceana's own reports in it, the memory each
rank takes, and how little of each rank the cross-rank pass holds."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np

from tests.conftest import REPO, shared_trace
from tests.rank_traces import make_rank_dir
from traceana.ranks.executor import analyze_rank, find_rank_files
from traceana.ranks.sizing import MARGIN, MIN_JSON, Measure, MemoryGate
from traceana.ranks.summary import COLUMNS


def cli(*args):
    return subprocess.run([sys.executable, "-m", "traceana", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def test_bad_rank_files_are_named_and_the_run_exits_3(tmp_path):
    d = tmp_path / "run"
    make_rank_dir(d, n=3, straggler=1)
    (d / "rank1.json.gz").write_bytes(b"not gzip at all")  # not a trace
    (d / "rank2.json.gz").unlink()
    (d / "rank2.json").write_text('{"traceEvents": [')  # cut short
    out = tmp_path / "r.json"
    p = cli("report", str(d), "-o", str(out), "-q")
    # the report of the one good rank is written, and the run fails naming the two others
    assert p.returncode == 3, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("traceana: 2 of 3 rank files could not be analysed: rank1.json.gz, rank2.json (first: not gzip")
    assert "the report compares the other 1 (--allow-missing accepts that: exit 0)" in last
    doc = json.loads(out.read_text())
    assert doc["summary"]["ranks"] == 1 and [f["file"] for f in doc["failed"]] == ["rank1.json.gz", "rank2.json"]
    # --allow-missing: the same report, exit 0
    p = cli("report", str(d), "-o", str(tmp_path / "s.json"), "-q", "--allow-missing")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert json.loads((tmp_path / "s.json").read_text())["failed"] == doc["failed"]


def test_a_report_written_into_the_rank_folder_is_not_a_rank_the_next_time(tmp_path):
    d = tmp_path / "run"
    make_rank_dir(d, n=2, straggler=1)
    out = d / "ranks.json"
    for attempt in range(2):  # the same command twice
        p = cli("report", str(d), "-o", str(out))
        assert p.returncode == 0, p.stderr
        assert json.loads(out.read_text())["summary"]["ranks"] == 2
    assert "skipped 1 report traceana wrote (e.g. ranks.json): not a rank trace" in p.stderr
    reports: list[str] = []
    files, skipped = find_rank_files([str(d)], reports=reports)
    assert [f.rsplit("/", 1)[1] for f in files] == ["rank0.json.gz", "rank1.json.gz"] and reports == [str(out)]
    # a user's JSON without traceana's marker is still taken (and refused as no trace), never skipped silently
    (d / "notes.json").write_text('{\n  "schema": "mine"\n}\n')
    assert str(d / "notes.json") in find_rank_files([str(d)])[0]


def test_the_memory_gate_learns_the_measured_ratio():
    mb = 1 << 20
    sizes = [100 * mb, 100 * mb, 100 * mb, 10 * mb]
    # before any measure: the prior, 2x + 150 MB: 350 MiB-ish a file, 1,000 MiB budget: two at a time
    gate = MemoryGate(sizes, 1000 * mb, 2.0, 150 * mb)
    assert gate.estimate(0) == 2.0 * 100 * mb + 150 * mb
    assert gate.admits([], 0) and gate.admits([0], 1) and not gate.admits([0, 1], 2) and gate.held_back
    # a worker measured 600 MiB of growth on a 100 MiB file: 6x, with the margin 6 x 1.25 = 7.5x
    gate.learn(0, {"rss_growth": 600 * mb})
    assert gate.measured == 6.0 and gate.ratio == 6.0 * MARGIN
    # now 7.5 x 100 MiB + 150 MiB = 900 MiB a file: one at a time (one is always admitted)
    assert gate.admits([], 1) and not gate.admits([1], 2)
    # small files teach nothing (their fixed costs would read as a huge ratio)
    gate.learn(3, {"rss_growth": 200 * mb})
    assert 10 * mb < MIN_JSON and gate.measured == 6.0
    with Measure() as m:
        block = np.ones(64 * mb // 8)  # 64 MiB touched
    del block
    assert m.growth is None or m.growth >= 60 * mb  # None: an earlier peak of this process stands


def test_the_cross_rank_pass_reads_a_small_summary_per_collective():
    """256 ranks of a DDP run with 2,020 all-reduces each: the parent holds each rank's summary, not its
    trace. Its columns take 136 bytes a call: 4 times (t, end, issue, w0) x 8 + kind 1 + group 2 + seq 8 +
    peer 4 + step 8 + phase 1 + n_in 8 + n_out 8 + bytes 8 + dtype 4 + work, comm, data 3 x 4 + idle 6 x 4 +
    top 2 x 4 + top_us 2 x 4 = 136."""
    r = analyze_rank(shared_trace("hta/df_index_resolver.json.gz"))
    c = r["analysis"]["rank_facts"]["calls"]
    assert c["n"] == 2020 and c["backend"] == "gpu"
    col_bytes = sum(c[k].nbytes for k in COLUMNS)
    assert col_bytes == 2020 * 136
    # pickled to the parent, with its name tables: under 150 bytes a call
    assert len(pickle.dumps(c)) < 150 * 2020
    # 256 such ranks: 256 x 2,020 x 136 B = 70 MB of summaries in the parent
    assert 256 * col_bytes < 75e6


def test_the_worker_says_how_much_memory_its_file_took(tmp_path):
    make_rank_dir(tmp_path, n=1)
    r = analyze_rank(str(tmp_path / "rank0.json.gz"))
    assert "analysis" in r and "rss_growth" in r
    # in this (test) process an earlier, larger peak may stand: then nothing is claimed
    assert r["rss_growth"] is None or 0 < r["rss_growth"] < 2e9


def test_a_folder_of_many_bad_files_still_fits_a_pr_comment(tmp_path):
    d = tmp_path / "run"
    make_rank_dir(d, n=2, straggler=1)
    for k in range(30):  # 30 broken rank files with long names: each named, the comment within 8,000 characters
        (d / (f"rank{k + 2}_" + "x" * 140 + ".json")).write_text('{"traceEvents": [' * 3)
    out = tmp_path / "r.md"
    p = cli("report", str(d), "-o", str(out), "-q", "--jobs", "1")
    assert p.returncode == 3 and "30 of 32 rank files could not be analysed" in p.stderr
    text = out.read_text()
    assert len(text) <= 8_000 and "## Rank files that could not be analysed" in text
    assert "more (the JSON form lists them all)" in text and "## Do this first" in text
