"""Cross-rank reports: 8 synthetic ranks with a known straggler, and the 2 sampled HTA ranks."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys

import pytest

from tests.conftest import REPO, shared_trace
from tests.rank_traces import COLL_BASE, POW_FACTOR, make_rank_dir, scale
from traceana.analysis import analyze
from traceana.ranks import collective_kind, cross_rank, rank_facts

POW_US = 2167.0  # the T4 sample's pow kernel (8192x8192 fp32): 2.167 ms


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "traceana", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=120)


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks") / "run"
    compute = make_rank_dir(d, n=8, straggler=5)
    out = d.parent / "ranks.json"
    proc = cli("report", str(d), "-o", str(out), "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    return compute, json.loads(out.read_text()), proc


def test_eight_ranks_find_the_straggler_and_why(eight):
    compute, doc, proc = eight
    s = doc["summary"]
    assert s["ranks"] == 8 and s["per_step"] and s["failed"] == 0
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))  # rank0..rank7, natural order
    st = doc["straggler"]
    assert st["rank"] == 5 and st["lead_class"] == "memory"
    pow_row = st["ops"][0]
    assert pow_row["name"] == "aten::pow"
    # rank 5's pow: 2167 µs x 1.005 x 1.6 = 3484.536 µs
    assert pow_row["rank_us"] == pytest.approx(POW_US * scale(5) * POW_FACTOR)
    # median of the 8 ranks' pow: the 4th and 5th of 2167 x (1.000, 1.001, 1.002, 1.003, 1.004,
    # 1.006, 1.007) and 3484.5 -> (2173.501 + 2175.668) / 2 = 2174.5845 µs; extra 1309.95 µs
    assert pow_row["median_us"] == pytest.approx((POW_US * scale(3) + POW_US * scale(4)) / 2)
    assert pow_row["delta_us"] == pytest.approx(1309.9515, abs=1e-3)
    assert "rank 5 is the straggler" in st["text"][0]
    assert any("waited for it" in t for t in st["text"])
    assert "rank 5 is the straggler" in proc.stdout


def test_eight_ranks_collective_wait_is_time_beyond_the_quickest(eight):
    compute, doc, _ = eight
    slowest = max(compute.values())
    for r in doc["ranks"]:
        # collective = 1000 + (slowest compute - own compute); the least is rank 5's 1000 µs,
        # so wait = slowest - own compute (rank 0: 239181.74 - 236691.58 = 2490.16 µs)
        assert r["collective_us"] == pytest.approx(COLL_BASE + slowest - compute[r["rank"]], abs=1e-3)
        assert r["collective_wait_us"] == pytest.approx(slowest - compute[r["rank"]], abs=1e-3)
        assert r["collective_by_kind_us"] == {"AllReduce": pytest.approx(r["collective_us"])}
    # every rank waits for rank 5, so their step times are equal (a synchronous step)
    steps = [r["step_us"] for r in doc["ranks"]]
    assert max(steps) - min(steps) < 1e-2  # ts ~3.8e12 µs: doubles keep ~5e-4 µs
    total = sum(slowest - c for c in compute.values())
    assert doc["summary"]["collective_wait_us_total"] == pytest.approx(total, abs=1e-2)


def test_eight_ranks_html_and_markdown(eight, tmp_path):
    d = tmp_path / "run"
    make_rank_dir(d, n=8, straggler=5)
    (d / "notes.txt").write_text("not a trace")
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    p = cli("report", str(d), "-o", str(html), "--jobs", "1")
    assert p.returncode == 0, p.stderr
    assert "skipped 1 non-trace entry" in p.stderr
    page = html.read_text()
    assert page.count('class="rank-section"') == 8 and "Straggler: rank 5" in page
    assert "aten::pow" in page and "<script" not in page
    p = cli("report", str(d / "rank0.json.gz"), str(d / "rank5.json.gz"), "-o", str(md), "-q")
    assert p.returncode == 0, p.stderr
    text = md.read_text()
    assert "| rank 5 **straggler** |" in text and "### rank 0" in text


def test_saved_cross_rank_report_renders_without_the_traces(eight, tmp_path):
    _, doc, _ = eight
    saved = tmp_path / "ranks.json"
    saved.write_text(json.dumps(doc))
    html = tmp_path / "again.html"
    p = cli("render", str(saved), "-o", str(html), "-q")
    assert p.returncode == 0, p.stderr
    page = html.read_text()
    assert page.count('class="rank-section"') == 8 and "Straggler: rank 5" in page
    p = cli("render", str(saved), "-o", str(tmp_path / "x.html"), "--svg", str(tmp_path / "x.svg"))
    assert p.returncode == 2 and "cross-rank" in p.stderr and "Traceback" not in p.stderr
    # each rank's pow runs at ~77% of the memory roof (< 90%): the gate fails on every rank, exit 1
    p = cli("render", str(saved), "-o", str(tmp_path / "y.md"), "--fail-on", "roof<90%:aten::pow")
    assert p.returncode == 1 and "--fail-on" in p.stderr


def test_two_sampled_hta_ranks(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    for n in ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz"):
        shutil.copy(shared_trace(f"hta/{n}"), d / n)
    out = tmp_path / "r.json"
    p = cli("report", str(d), "-o", str(out), "-q")
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    r0, r1 = doc["ranks"]
    assert (r0["rank"], r1["rank"]) == (0, 1)  # from the file names: no distributedInfo
    assert doc["summary"]["per_step"]
    # NCCL time per step: rank 0 198.1 ms, rank 1 189.5 ms -> rank 0 waits 8.6 ms longer
    assert r0["collective_us"] > r1["collective_us"]
    assert r0["collective_wait_us"] == pytest.approx(r0["collective_us"] - r1["collective_us"])
    assert r1["collective_wait_us"] == 0
    assert doc["straggler"]["rank"] == 1
    assert len(doc["analyses"]) == 2 and doc["analyses"][0]["schema"] == "traceana.analysis/1"
    p = cli("report", str(d), "-o", str(tmp_path / "r.html"), "-q")
    assert p.returncode == 0 and "Straggler: rank 1" in (tmp_path / "r.html").read_text()


def test_cross_rank_is_pure_and_handles_no_steps():
    a = analyze(str(REPO / "sample_traces" / "t4_seed_pow_mul.json"))
    assert a["trace"]["steps"] == 0
    b = json.loads(json.dumps(a))  # a reloaded analysis: lists, not tuples; no rank_facts
    doc = cross_rank([a, b])
    assert not doc["summary"]["per_step"] and doc["summary"]["unit"].startswith("per trace")
    r0, r1 = doc["ranks"]
    assert r0["step_us"] == a["trace"]["span_us"] and r0["collective_us"] == 0
    assert (r0["rank"], r1["rank"]) == (0, 1)  # no distributedInfo, no rank in the name: order
    assert doc["straggler"]["extra_us"] == 0 and "No rank stands out" in doc["straggler"]["text"][0]
    one = cross_rank([a])
    assert one["straggler"] is None and one["summary"]["ranks"] == 1


def test_rank_facts_steps_and_collectives(tmp_path):
    from traceana.load import load_trace

    make_rank_dir(tmp_path, n=2, straggler=1)
    f = rank_facts(load_trace(str(tmp_path / "rank0.json.gz")))
    assert f["rank"] == 0 and f["world_size"] == 2 and f["step_numbers"] == [1]
    assert f["collective_kernels"] == 1 and list(f["collective_by_kind"]) == ["AllReduce"]
    assert statistics.mean(f["steps"]) > f["collective_us"] > 0


@pytest.mark.parametrize("name,kind", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "AllReduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "AllGather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "ReduceScatter"),
    ("ncclDevKernel_SendRecv(ncclDevComm*)", "SendRecv"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "Broadcast"),
    ("rcclGenericKernel", "other"),
])
def test_collective_kind(name, kind):
    assert collective_kind(name) == kind
