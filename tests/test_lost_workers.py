"""A local rank worker that dies (kill -9: what the out-of-memory killer does) is not a silent
partial result: the ranks it took down are analysed again, once, each in a process of its own;
what still cannot be analysed is named and the run exits non-zero (after writing the report).

Before: one SIGKILLed worker broke the process pool, every rank still queued was reported
failed, the run exited 0 and compared the few that had finished.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.rank_traces import make_rank_dir
from traceana.ranks import executor as parallel
from traceana.cli import main
from traceana.ranks.executor import find_rank_files, map_ranks

_real = parallel.analyze_rank


def killing_analyze_rank(path, options=None, drop=()):
    """analyze_rank, except that the worker given KILL_VICTIM dies of SIGKILL: every time, or only
    the first time when KILL_ONCE names a flag file (created on the first death)."""
    victim, once = os.environ.get("KILL_VICTIM", ""), os.environ.get("KILL_ONCE", "")
    if victim and os.path.basename(path) == victim and os.getpid() != int(os.environ["KILL_PARENT"]):
        if not once or not os.path.exists(once):
            if once:
                open(once, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    return _real(path, options, drop)


@pytest.fixture
def killer(monkeypatch, tmp_path):
    monkeypatch.setattr(parallel, "analyze_rank", killing_analyze_rank)
    monkeypatch.setenv("KILL_PARENT", str(os.getpid()))
    return monkeypatch


def test_a_worker_killed_once_is_retried_and_every_rank_is_analysed(tmp_path, killer, capsys):
    d = tmp_path / "ranks"
    make_rank_dir(d, n=8)
    killer.setenv("KILL_VICTIM", "rank1.json.gz")
    killer.setenv("KILL_ONCE", str(tmp_path / "died"))
    out = tmp_path / "r.json"
    rc = main(["report", str(d), "-o", str(out), "--jobs", "2", "-q"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert (tmp_path / "died").exists()  # the worker really died once
    doc = json.loads(out.read_text())
    assert doc["summary"]["ranks"] == 8 and doc["failed"] == []


def test_a_rank_whose_worker_dies_twice_is_named_and_the_run_fails(tmp_path, killer, capsys):
    d = tmp_path / "ranks"
    make_rank_dir(d, n=8)
    killer.setenv("KILL_VICTIM", "rank1.json.gz")
    out = tmp_path / "r.json"
    rc = main(["report", str(d), "-o", str(out), "--jobs", "2"])
    err = capsys.readouterr().err
    assert rc == 3, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("traceana: ") and "rank1.json.gz" in last and "not analysed" in last
    assert "SIGKILL" in last
    # the report is written, holds the 7 others, and lists the lost one
    doc = json.loads(out.read_text())
    assert doc["summary"]["ranks"] == 7
    assert [f["file"] for f in doc["failed"]] == ["rank1.json.gz"]
    assert "SIGKILL" in doc["failed"][0]["error"]


def test_map_ranks_retries_each_lost_rank_once_in_its_own_process(tmp_path, killer):
    make_rank_dir(tmp_path, n=6)
    files, _ = find_rank_files([str(tmp_path)])
    killer.setenv("KILL_VICTIM", "rank4.json.gz")
    results, where = map_ranks(files, jobs=2)
    assert [os.path.basename(r["path"]) for r in results] == [f"rank{i}.json.gz" for i in range(6)]
    lost = [r for r in results if "analysis" not in r]
    assert [os.path.basename(r["path"]) for r in lost] == ["rank4.json.gz"] and "died twice, killed by SIGKILL" in lost[0]["lost"]
    assert "again" in where  # the line says ranks were analysed again
