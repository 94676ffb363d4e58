"""The per-rank analysis on a Dask distributed cluster (a LocalCluster of 2 worker processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.rank_traces import make_rank_dir

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c:
        yield c


def test_map_ranks_on_a_dask_cluster_matches_local(cluster, tmp_path):
    from traceana.parallel import find_rank_files, map_ranks

    make_rank_dir(tmp_path, n=4, straggler=1)
    files, _ = find_rank_files([str(tmp_path)])
    addr = cluster.scheduler_address.replace("tcp://", "dask://")
    done = []
    remote, where = map_ranks(files, executor=addr, on_done=done.append)
    assert "Dask cluster" in where and "(2 workers)" in where and len(done) == 4
    local, _ = map_ranks(files, jobs=1)
    assert [r["analysis"] for r in remote] == [r["analysis"] for r in local]


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
