"""The per-rank analysis on a Dask distributed cluster (a LocalCluster of 2 worker processes):
the same numbers as the local worker processes and as each rank file reported alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_trace
from tests.rank_traces import make_rank_dir, stretched_ranks
from traceana.render.json_out import to_json_safe

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as c:
        yield c


def test_map_ranks_on_a_dask_cluster_matches_local(cluster, tmp_path):
    from traceana.ranks.executor import find_rank_files, map_ranks

    make_rank_dir(tmp_path, n=4, straggler=1)
    files, _ = find_rank_files([str(tmp_path)])
    addr = cluster.scheduler_address.replace("tcp://", "dask://")
    done = []
    remote, where = map_ranks(files, executor=addr, on_done=done.append)
    assert "Dask cluster" in where and "(2 workers)" in where and len(done) == 4
    local, _ = map_ranks(files, jobs=1)
    # the same numbers (each rank's call summary holds numpy columns: compared as saved)
    assert [to_json_safe(r["analysis"]) for r in remote] == [to_json_safe(r["analysis"]) for r in local]


def test_cli_executor_dask(cluster, tmp_path):
    d = tmp_path / "run"
    make_rank_dir(d, n=4, straggler=3)
    out = tmp_path / "r.json"
    addr = cluster.scheduler_address.replace("tcp://", "dask://")
    p = subprocess.run([sys.executable, "-m", "traceana", "report", str(d), "-o", str(out), "--executor", addr],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["straggler"]["rank"] == 3 and doc["ran"].startswith("on the Dask cluster")


def test_unreachable_scheduler_is_one_clear_error(tmp_path):
    make_rank_dir(tmp_path / "run", n=2, straggler=1)
    p = subprocess.run([sys.executable, "-m", "traceana", "report", str(tmp_path / "run"), "-o",
                        str(tmp_path / "r.html"), "--executor", "dask://127.0.0.1:9"],
                       capture_output=True, text=True, cwd=REPO, timeout=120,
                       env={**os.environ, "TRACEANA_DASK_TIMEOUT": "2s"})
    assert p.returncode == 2 and "cannot reach the Dask scheduler" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


STRETCH = 0.01  # rank r: every time of the source trace x (1 + 0.01 r)


def _report(target, out, *extra) -> dict:
    p = subprocess.run([sys.executable, "-m", "traceana", "report", str(target), "-o", str(out), "-q", *extra],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(Path(out).read_text())


def test_eight_real_ranks_local_equals_dask_equals_each_file(cluster, tmp_path):
    """8 ranks of one job, made from HTA's sampled TorchRec rank (2 ProfilerSteps of 607,312
    and 622,928 µs, 10 NCCL collectives): rank r is it with every time x (1 + 0.01 r)."""
    run = tmp_path / "run"
    stretched_ranks(Path(shared_trace("hta/sampled_rank-0.json.gz")), run, 8, STRETCH)
    addr = cluster.scheduler_address.replace("tcp://", "dask://")
    local = _report(run, tmp_path / "local.json", "--jobs", "2")
    remote = _report(run, tmp_path / "dask.json", "--executor", addr)
    assert local.pop("ran").startswith("in 2 worker processes")
    assert remote.pop("ran").startswith("on the Dask cluster")
    assert local == remote  # every number, every rank's full Analysis
    rows = local["ranks"]
    assert [r["rank"] for r in rows] == list(range(8)) and {r["steps"] for r in rows} == {2}
    # rank 0's step: (607,312 + 622,928) / 2 = 615,120 µs; its collectives 198,099.5 µs a step
    assert rows[0]["step_us"] == pytest.approx(615_120.0)
    coll0 = rows[0]["collective_us"]
    assert coll0 == pytest.approx(198_099.5)
    for r in rows:
        s = 1 + STRETCH * r["rank"]
        assert r["step_us"] == pytest.approx(615_120.0 * s, rel=1e-6)  # times rounded to the ns
        assert r["collective_us"] == pytest.approx(coll0 * s, rel=1e-6)
    # every rank's timeline runs 1% slower than the one before, so rank 7 arrives last at most matched collectives
    # and caused most of the waiting (a stretched copy is no real run: its collectives' ends drift apart, so most
    # are matched by time, and few; the real waits are tested on recorded runs: tests/test_ranks_recorded.py)
    caused = {r["rank"]: r["wait_caused_us"] for r in rows}
    assert max(caused, key=caused.get) == 7 and local["first"][0]["rank"] == "rank 7"
    assert sum(caused.values()) == pytest.approx(sum(r["collective_wait_us"] for r in rows), rel=1e-9)
    assert local["straggler"]["rank"] == 7
    # each rank file reported alone: the same Analysis as the rank's in the cross-rank report
    for k in (0, 5):
        alone = _report(run / f"rank{k}.json.gz", tmp_path / f"rank{k}.json")
        a = dict(local["analyses"][k])
        assert a.pop("rank_facts")["rank"] == k
        assert alone == a
