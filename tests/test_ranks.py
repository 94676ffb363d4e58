"""Cross-rank reports: synthetic ranks with known stragglers, near-ties, phases and shapes;
the real HTA rank traces (one job's two ranks; two different runs; a rank given twice).

Synthetic ranks (tests/rank_traces.py): the T4 sample's kernels, rank r scaled by
1 + 0.001 r; their sum on rank 0 is C = 236691.583 µs. The first kernel starts 2103.362 µs
after the step's first op, and every rank's all-reduce lasts 1000 µs + (slowest compute - its
compute), so every step ends together: step = 2103.362 + slowest + 1000, and a rank's own
time (step less its wait) = 3103.362 + its compute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, shared_trace
from tests.rank_traces import COLL_BASE, make_rank_dir, scale
from traceana.analysis import analyze
from traceana.ranks.executor import analyze_rank
from traceana.link.steps import PHASES
from traceana.ranks.calls import KINDS
from traceana.ranks.cross_rank import NEAR_TIE_PCT, collective_kind, cross_rank, rank_facts

C = 236691.583  # the T4 sample's kernels, µs: 1141 + 230208 + 2184 + 991.583 + 2167
POW = 2167.0
MM = 230208.0
HEAD = 2103.362  # first op (aten::ones) 119523.272 -> first kernel 121626.634


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "traceana", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=120)


def ranks_doc(tmp_path, n=8, **kw):
    """Synthetic ranks analysed in this process (no CLI) -> (compute by rank, cross-rank dict)."""
    compute = make_rank_dir(tmp_path, n=n, **kw)
    analyses = [analyze_rank(str(tmp_path / f"rank{r}.json.gz"))["analysis"] for r in range(n)]
    return compute, cross_rank(analyses)


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks") / "run"
    compute = make_rank_dir(d, n=8, straggler=5)  # rank 5's pow kernel 4x longer
    out = d.parent / "ranks.json"
    proc = cli("report", str(d), "-o", str(out), "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    return compute, json.loads(out.read_text()), proc


def test_eight_ranks_find_the_straggler_and_why(eight):
    compute, doc, proc = eight
    s = doc["summary"]
    assert s["ranks"] == 8 and s["per_step"] and s["failed"] == 0 and s["consistent"] and s["warning"] is None
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))  # rank0..rank7, natural order
    # rank 5: C x 1.005 + 3 x 2167 x 1.005 = 237875.041 + 6533.505 = 244408.546 µs of compute
    assert compute[5] == pytest.approx(C * scale(5) + 3 * POW * scale(5))
    st = doc["straggler"]
    assert st["rank"] == 5 and st["lead_class"] == "memory" and not st["near_tie"] and st["ties"] == []
    # own time = 3103.362 + compute: rank 5 247511.908; the median is ranks 3 and 4's
    # (240505.019 + 240741.711) / 2 = 240623.365, so the extra is 6888.543 µs (2.86%)
    assert st["own_us"] == pytest.approx(HEAD + COLL_BASE + compute[5], abs=1e-3)
    assert st["median_own_us"] == pytest.approx(HEAD + COLL_BASE + (compute[3] + compute[4]) / 2, abs=1e-3)
    assert st["extra_us"] == pytest.approx(6888.543, abs=1e-2)
    # the nearest, rank 7 (3103.362 + C x 1.007 = 241451.786), is 2.45% below rank 5: > 2%, no tie
    assert (st["own_us"] - doc["ranks"][7]["own_us"]) / st["own_us"] * 100 == pytest.approx(2.448, abs=1e-3)
    pow_row = st["ops"][0]
    assert pow_row["name"] == "aten::pow"
    assert pow_row["rank_us"] == pytest.approx(POW * scale(5) * 4)  # 2167 x 1.005 x 4 = 8711.34
    # median pow: ranks 3 and 4: 2167 x (1.003 + 1.004) / 2 = 2174.5845; extra 6536.7555
    assert pow_row["median_us"] == pytest.approx(POW * (scale(3) + scale(4)) / 2)
    assert pow_row["delta_us"] == pytest.approx(6536.7555, abs=1e-3)
    assert st["shapes_differ"] == []  # every rank ran the same shapes
    assert "rank 5 is the straggler" in st["text"][0]
    assert any("waited for it" in t for t in st["text"])
    assert "rank 5 is the straggler" in proc.stdout and proc.stderr == ""


def test_eight_ranks_collective_wait_and_gpu_busy(eight):
    compute, doc, _ = eight
    slowest = max(compute.values())
    for r in doc["ranks"]:
        # one all-reduce per step, matched across ranks; the least is rank 5's 1000 µs,
        # so wait = collective - 1000 = slowest - own compute (rank 0: 244408.546 - 236691.583 = 7716.963)
        assert r["collective_us"] == pytest.approx(COLL_BASE + slowest - compute[r["rank"]], abs=1e-3)
        assert r["collective_wait_us"] == pytest.approx(slowest - compute[r["rank"]], abs=1e-3)
        assert r["collective_transfer_us"] == pytest.approx(COLL_BASE, abs=1e-3)
        assert r["collective_by_kind_us"] == {"AllReduce": pytest.approx(r["collective_us"])}
        # GPU busy: kernels back to back from the first kernel to the end of the step:
        # (slowest + 1000) / (2103.362 + slowest + 1000) = 245408.546 / 247511.908 = 99.150%
        assert r["busy_pct"] == pytest.approx((slowest + COLL_BASE) / (HEAD + slowest + COLL_BASE) * 100, abs=1e-6)
        assert r["busy_pct"] <= 100
    assert doc["ranks"][0]["collective_wait_us"] == pytest.approx(7716.963, abs=1e-3)
    steps = [r["step_us"] for r in doc["ranks"]]
    assert max(steps) - min(steps) < 1e-2  # a synchronous step; ts ~3.8e12 µs: doubles keep ~5e-4 µs
    total = sum(slowest - c for c in compute.values())
    assert doc["summary"]["collective_wait_us_total"] == pytest.approx(total, abs=1e-2)
    assert doc["summary"]["collectives_unmatched"] == 0


def test_per_phase_stragglers_from_annotations(eight):
    _, doc, _ = eight
    ph = {p["phase"]: p for p in doc["straggler"]["phases"]}
    assert list(ph) == ["forward", "backward", "optimizer"]
    assert ph["optimizer"]["source"] == "## optimizer ## annotations"
    # optimizer = the pow kernel: rank 5 2167 x 1.005 x 4 = 8711.34 µs; median 2174.5845 (ranks 3, 4)
    opt = ph["optimizer"]
    assert (opt["rank"], opt["work_us"], opt["median_us"]) == (5, pytest.approx(8711.34), pytest.approx(2174.5845))
    assert opt["ties"] == [] and "rank 5 does the most GPU work" in opt["text"]
    # forward = fill + mm = 231349 x scale(r): rank 7 is the most, but rank 0 is only
    # 1 - 1/1.007 = 0.70% below it: all 8 ranks within 2%, no single straggler
    fwd = ph["forward"]
    assert fwd["work_us"] == pytest.approx((1141 + MM) * scale(7)) and len(fwd["ties"]) == 7
    # the headline names the tied ranks, slowest first, with their forward work: rank 7 (1141 + MM) x 1.007
    # = 232,968.4 µs, ..., rank 0 x 1.000 = 231,349 µs
    assert fwd["text"].startswith("forward: No single straggler: all 8 ranks are within 2% in forward GPU work: "
                                  "rank 7 (233.0 ms), rank 6 (232.7 ms), rank 5 (232.5 ms)")
    assert fwd["text"].endswith("rank 1 (231.6 ms) and rank 0 (231.3 ms).")
    # backward = mul_ + sum: 3175.583 x scale(r); the all-reduce is launched in it, and its
    # wait (rank 0: 7716.963) is counted in the backward phase
    assert ph["backward"]["work_us"] == pytest.approx((2184 + 991.583) * scale(7))
    r0 = doc["ranks"][0]["phases"]
    assert r0["backward"]["wait_us"] == pytest.approx(7716.963, abs=1e-3)
    assert r0["backward"]["collective_us"] == pytest.approx(8716.963, abs=1e-3)
    assert r0["forward"]["wait_us"] == 0


def test_near_tie_names_both_ranks(tmp_path):
    # ranks 3 and 5 both have a slow pow (x4.0 and x3.9): own times
    # 3103.362 + 1.003 C + 3 x 2167 x 1.003 = 247025.522 and 3103.362 + 1.005 C + 2.9 x 2167 x 1.005 = 247294.125:
    # 0.11% apart, within 2%
    compute, doc = ranks_doc(tmp_path, slow={3: {"pow": 4.0}, 5: {"pow": 3.9}})
    st = doc["straggler"]
    assert st["rank"] == 5 and st["near_tie"] and st["ties"] == ["rank 3"]
    assert st["own_us"] - doc["ranks"][3]["own_us"] == pytest.approx(247294.125 - 247025.522, abs=1e-2)
    assert st["text"][0] == ("No single straggler: rank 5 (247.3 ms) and rank 3 (247.0 ms) are within 2% in own "
                             "time (step time less collective wait).")
    assert st["tied"] == ["rank 5", "rank 3"]  # slowest first
    assert NEAR_TIE_PCT == 2.0
    from traceana.render.ranks_html import build_view

    v = build_view(doc)
    assert v["straggler"]["title"] == "No single straggler: the slowest ranks are rank 5 and rank 3, within 2% of each other"
    assert not any(r["straggler"] for r in v["rows"])  # nobody is marked the straggler


def test_phases_from_torch_names_and_shapes_that_differ(tmp_path):
    # rank 2: mm x1.08 (forward); rank 5: pow x5 (optimizer); rank 3 records aten::sum with other dims.
    # No ## marks: backward from the autograd engine op, optimizer from Optimizer.step#, forward derived.
    compute, doc = ranks_doc(tmp_path, slow={2: {"mm": 1.08}, 5: {"pow": 5.0}}, phases="torch", reshape=(3,))
    st = doc["straggler"]
    # rank 2's compute: C x 1.002 + 0.08 x 230208 x 1.002 = 237164.966 + 18453.473; own 258721.801
    assert st["rank"] == 2 and not st["near_tie"]
    assert st["own_us"] == pytest.approx(HEAD + COLL_BASE + compute[2], abs=1e-3)
    assert st["own_us"] == pytest.approx(258721.801, abs=1e-2)
    ph = {p["phase"]: p for p in st["phases"]}
    assert ph["forward"]["source"].startswith("derived")
    assert ph["backward"]["source"].startswith("autograd engine ops")
    assert ph["optimizer"]["source"] == "Optimizer.step# ranges"
    # forward: rank 2 (1141 + 1.08 x 230208) x 1.002 = 250265.171; the median: ranks 4 and 5
    # (231349 x 1.004 + 231349 x 1.005) / 2 = 232390.0705; extra 17875.10
    assert (ph["forward"]["rank"], ph["forward"]["ties"]) == (2, [])
    assert ph["forward"]["work_us"] == pytest.approx((1141 + 1.08 * MM) * scale(2))
    assert ph["forward"]["extra_us"] == pytest.approx(17875.1005, abs=1e-3)
    # optimizer: rank 5's pow 2167 x 1.005 x 5 = 10889.175
    assert (ph["optimizer"]["rank"], ph["optimizer"]["work_us"]) == (5, pytest.approx(10889.175))
    assert ph["backward"]["ties"] and "No single straggler" in ph["backward"]["text"]
    # aten::sum: rank 3's signature is its own, so it is named, not compared
    assert [d["name"] for d in st["shapes_differ"]] == ["aten::sum"] and st["shapes_differ"][0]["signatures"] == 2
    assert all(o["name"] != "aten::sum" for o in st["ops"])
    assert any("Shapes differ between ranks for aten::sum" in t for t in st["text"])


def test_extra_time_in_ops_whose_shapes_differ_is_called_more_work(tmp_path):
    # rank 3 records aten::sum with other dims and its sum kernel runs 10x longer:
    # compute C x 1.003 + 9 x 991.583 x 1.003 = 237401.658 + 8951.020 = 246352.678; own 249456.040;
    # the median own time is ranks 4 and 5's (240741.711 + 240978.403) / 2 = 240860.057
    compute, doc = ranks_doc(tmp_path, slow={3: {"sum": 10.0}}, reshape=(3,))
    st = doc["straggler"]
    # the slow reduction is memory-bound (or, with the launch-floor time model, underutilised)
    assert st["rank"] == 3 and not st["near_tie"] and st["lead_class"] in ("memory", "underutilised")
    assert st["extra_us"] == pytest.approx(249456.040 - 240860.057, abs=1e-2)
    (d,) = st["shapes_differ"]
    # aten::sum: rank 3's 991.583 x 1.003 x 10 = 9945.578 µs, not compared with the others' ~995
    assert d["name"] == "aten::sum" and d["rank_us"] == pytest.approx(991.583 * scale(3) * 10)
    lead = next(t for t in st["text"] if t.startswith("The largest difference"))
    assert "Most of it is in ops whose input shapes differ between ranks (aten::sum)" in lead


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
    assert "aten::pow" in page and "<script" not in page and "By phase" in page
    p = cli("report", str(d / "rank0.json.gz"), str(d / "rank5.json.gz"), "-o", str(md), "-q")
    assert p.returncode == 0, p.stderr
    text = md.read_text()
    assert "| rank 5 **straggler** |" in text and "**rank 0** — rank0.json.gz" in text
    assert "| optimizer | rank 5 |" in text and "99.2%" in text  # GPU busy, 99.150%


def test_many_ranks_markdown_fits_a_pr_comment(tmp_path):
    # 40 ranks: uncut, the rank table (40 rows of ~100 chars) and 40 per-rank sections of top
    # ops (~700 chars each) come to ~35 KB; GitHub's comment limit wants <= 8,000 characters
    d = tmp_path / "run"
    make_rank_dir(d, n=40, straggler=5)
    md = tmp_path / "r.md"
    p = cli("report", str(d), "-o", str(md), "-q", "--jobs", "1")
    assert p.returncode == 0, p.stderr
    text = md.read_text()
    assert len(text) <= 8_000
    # each rank's kernels are 1 + 0.001 r slower, so 40 ranks span ~4%: ranks 39 down to ~17 are
    # within NEAR_TIE_PCT = 2% of the slowest; the headline names them slowest first, as the text does
    assert "## No single straggler: the slowest ranks are rank 39, rank 38, rank 37" in text  # never folded
    assert "<details><summary>All 40 ranks</summary>" in text  # > FOLD_RANKS = 16 rows: folded
    assert "| rank 0 | rank0.json.gz |" in text  # the first rows fit in half the budget
    assert "more ranks in the JSON or HTML form" in text  # the per-rank sections that did not fit


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


# ----------------------------------------------------------------------------- real traces


def _hta_dir(tmp_path, *names):
    d = tmp_path / "ranks"
    d.mkdir()
    for n in names:
        shutil.copy(shared_trace(f"hta/{n}"), d / n)
    return d


def test_two_sampled_hta_ranks(tmp_path):
    d = _hta_dir(tmp_path, "sampled_rank-0.json.gz", "sampled_rank-1.json.gz")
    out = tmp_path / "r.json"
    p = cli("report", str(d), "-o", str(out), "-q")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert s["consistent"] and s["problems"] == [] and s["per_step"]  # one job: world size 128, steps 551-552
    r0, r1 = doc["ranks"]
    assert (r0["rank"], r1["rank"]) == (0, 1) and r0["rank_source"] == "distributedInfo"
    # steps 551, 552: rank 0 (607312 + 622928) / 2 = 615120 µs; rank 1 (607904 + 630639) / 2 = 619271.5
    assert (r0["step_us"], r1["step_us"]) == (615120.0, 619271.5)
    # GPU busy (union inside the steps): rank 0 547656 / 1230240 = 44.52%, rank 1 580050 / 1238543 = 46.83%
    # (a sum of durations would say 607844 / 1230240 = 49.4% and 667530 / 1238543 = 53.9%)
    assert r0["busy_pct"] == pytest.approx(547656 / 1230240 * 100)
    assert r1["busy_pct"] == pytest.approx(580050 / 1238543 * 100)
    # NCCL per step: rank 0 396199 / 2 = 198099.5 µs, rank 1 379053 / 2 = 189526.5
    assert (r0["collective_us"], r1["collective_us"]) == (198099.5, 189526.5)
    # The traces are sampled (HTA's trace_filter data): each rank lacks some of the other's calls, so on stream 84
    # their order does not line up (rank 0's first all_to_all ends 62.8 ms before rank 1's first, which would have
    # rank 0 leave before rank 1 arrived) and the calls are matched by time: 5 collectives both ranks recorded,
    # their ends within 332 µs. Rank 1 arrived last at all 5 (kernel starts, µs after 1682725898000000):
    #   all_to_all  s551 fwd   129911 - 125052 =  4859     all_reduce s551 bwd  298964 - 295662 =  3302
    #   all_gather  s551 opt   585405 - 585321 =    84     all_reduce s552 bwd 1168655 - 1146327 = 22328
    #   all_gather  s552 opt  1187182 - 1185890 = 1292     sum 31865, per step 15932.5
    c = doc["collectives"]
    assert (c["matched"], c["calls"], c["unmatched_calls"]) == (5, 20, 10)
    assert c["methods"] == {"stream:84": "time", "stream:203": "order"} and not c["clock"]["applied"]
    assert (r0["collective_wait_us"], r1["collective_wait_us"]) == (15932.5, 0.0)
    assert (r0["wait_caused_us"], r1["wait_caused_us"]) == (0.0, 15932.5)
    # by phase: forward 4859 / 2 = 2429.5, backward (3302 + 22328) / 2 = 12815, optimizer (84 + 1292) / 2 = 688
    assert r1["caused_by_phase_us"] == {"forward": 2429.5, "backward": 12815.0, "optimizer": 688.0}
    assert r0["phases"]["backward"]["wait_us"] == 12815.0 and r1["last_arrivals"] == 5
    top = c["top"][0]
    assert (top["kind"], top["step"], top["phase"], top["late"], top["wait_us"]) == \
        ("all_reduce", 552, "backward", "rank 1", 22328.0)
    # before it, rank 1's GPU ran the embedding backward 37.5 ms while rank 0's interval was 3.1 ms long
    assert top["ops"][0]["name"] == "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>"
    assert (top["interval_us"], top["others_interval_us"]) == (39339.0, 3142.0)
    # the first screen: rank 1, in the backward, with the figure and its cause (more GPU work)
    lever = doc["first"][0]
    assert (lever["kind"], lever["rank"], lever["phase"], lever["cause"], lever["us"]) == \
        ("late_rank", "rank 1", "backward", "work", 15932.5)
    assert lever["title"] == "rank 1 makes the other ranks wait: 15.93 ms per step, most in the backward"
    # own = step - wait: rank 0 615120 - 15932.5 = 599187.5, rank 1 619271.5: rank 1 is
    # (619271.5 - 599187.5) / 619271.5 = 3.24% longer, beyond the 2% tie margin
    assert (r0["own_us"], r1["own_us"]) == (599187.5, 619271.5)
    # rank 0's own levers would bring its step under rank 1's own time, which it still waits for
    assert r0["projected_bound_by"] == "rank 1" and r0["projected_bound_us"] == 619271.5
    assert r0["projected_step_us"] < 619271.5
    st = doc["straggler"]
    assert st["rank"] == 1 and not st["near_tie"]
    # recsys: embedding lookups and all_to_all have data-dependent shapes, not compared per op
    differ = {d["name"] for d in st["shapes_differ"]}
    assert "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>" in differ
    assert "record_param_comms" in differ and st["shapes_differ_count"] == 35
    # an op name can have both: aten::mm's shared shapes are compared, its other shapes are not
    assert "aten::mm" in differ and "aten::mm" in {o["name"] for o in st["ops"]}
    assert not any(o["name"].startswith("torch::autograd::CppNode<SplitLookup") for o in st["ops"])
    ph = {p["phase"]: p for p in st["phases"]}
    assert list(ph) == ["forward", "backward", "optimizer"]
    assert all(ph[p]["source"] == f"## {p} ## annotations" for p in ph)
    # backward GPU work per step: rank 1 182144 / 2 = 91072 µs against rank 0's 138262 / 2 = 69131
    assert (ph["backward"]["rank"], ph["backward"]["work_us"]) == (1, 91072.0)
    assert len(doc["analyses"]) == 2 and doc["analyses"][0]["schema"] == "traceana.analysis/1"
    p = cli("report", str(d), "-o", str(tmp_path / "r.html"), "-q")
    page = (tmp_path / "r.html").read_text()
    assert p.returncode == 0 and "Straggler: rank 1" in page and "Do this first" in page
    assert "rank 1 makes the other ranks wait: 15.93 ms per step, most in the backward" in page


def test_files_from_different_runs_warn_once(tmp_path):
    control, test = shared_trace("hta/control.json.gz"), shared_trace("hta/test.json.gz")
    out = tmp_path / "r.json"
    p = cli("report", control, test, "-o", str(out))
    assert p.returncode == 0, p.stderr
    warn = [line for line in p.stderr.splitlines() if "do not look like one run" in line]
    assert len(warn) == 1 and "world sizes differ (2 on rank 1; 8 on rank 3)" in warn[0]
    assert "devices differ (NVIDIA A100-PG509-200 on rank 3; Tesla V100-SXM2-16GB on rank 1)" in warn[0]
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert not s["consistent"] and len(s["problems"]) == 2 and s["warning"] in warn[0]
    assert "spread_pct" not in s and doc["straggler"] is None and s["collective_wait_us_total"] is None
    for r in doc["ranks"]:
        assert r["vs_median_pct"] is None and r["own_us"] is None and r["collective_wait_us"] is None
    # GPU busy is a union: control 388539 / 464945 = 83.57%, test 717122 / 744401 = 96.34%
    # (it was 107.9% and 129.5%: device time summed over overlapping streams)
    assert doc["ranks"][0]["busy_pct"] == pytest.approx(388539 / 464945 * 100)
    assert doc["ranks"][1]["busy_pct"] == pytest.approx(717122 / 744401 * 100)
    md = tmp_path / "r.md"
    assert cli("render", str(out), "-o", str(md), "-q").returncode == 0
    assert "> **Warning:** these 2 rank files do not look like one run" in md.read_text()
    p = cli("report", control, test, "-o", str(tmp_path / "s.html"), "--strict")
    assert p.returncode == 2 and not (tmp_path / "s.html").exists()
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("traceana: --strict: these 2 rank files do not look")


def test_the_same_rank_twice(tmp_path):
    src = shared_trace("hta/sampled_rank-0.json.gz")
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(src, d / "a.json.gz")
    shutil.copy(src, d / "copy.json.gz")  # a copy: the same rank id 0 in two files
    p = cli("report", str(d), "-o", str(tmp_path / "r.json"))
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["summary"]["problems"] == ["rank 0 appears in 2 files (a.json.gz, copy.json.gz; rank from the "
                                          "distributedInfo)"]
    assert doc["straggler"] is None and p.stderr.count("do not look like one run") == 1
    assert cli("report", str(d), "-o", str(tmp_path / "s.json"), "--strict").returncode == 2
    # one file by two paths (a symlink, and a/../a): analysed once, said so; nothing to compare
    os.symlink(d / "a.json.gz", tmp_path / "link.json.gz")
    again = str(d / ".." / "run" / "a.json.gz")
    p = cli("report", str(d / "a.json.gz"), str(tmp_path / "link.json.gz"), again, "-o", str(tmp_path / "t.json"))
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("is the same file as") == 2 and "analysed once" in p.stderr
    one = json.loads((tmp_path / "t.json").read_text())
    assert one["summary"]["ranks"] == 1 and one["straggler"] is None and one["summary"]["consistent"]


def test_single_trace_lead_uses_the_same_union_as_the_timeline():
    from traceana.document import by_bound, gpu_busy
    from traceana.render.views import verdict

    a = analyze(shared_trace("hta/control.json.gz"))
    b = gpu_busy(a)
    dev = a["breakdown"]["devices"][0]
    # one device (3): busy 388587 µs of a 464594 µs span = 83.64%; the sum of durations is 501567
    assert (b["busy_us"], b["span_us"], b["devices"]) == (388587.0, 464594.0, 1)
    assert b["busy_pct"] == pytest.approx(388587 / 464594 * 100) and a["breakdown"]["total_us"] == 501567.0
    assert b["busy_us"] == dev["busy_us"] and b["primary"]["device"] == 3
    assert sum(b["by_category"].values()) == pytest.approx(b["busy_us"])
    parts, total = by_bound(a)
    assert total == 388587.0 and sum(parts.values()) <= total
    # the lead states the ledger's span (464.59 ms, busy 388.6 ms in its terms), never the 501.6 ms sum
    v = verdict(a)
    assert v.startswith("Of the 464.59 ms span") and "501.6 ms" not in v
    assert a["ledger"]["busy_us"] == pytest.approx(388587.0)
    import html

    from traceana.render.first import sentence
    from traceana.render.html import render_html

    page = render_html(a)  # the ledger's sentence heads the page; no second busy figure beside it
    assert html.escape(sentence(a), quote=False) in page and 'id="time"' not in page and "501.6 ms" not in page


def test_cross_rank_is_pure_and_handles_no_steps():
    a = analyze(str(REPO / "sample_traces" / "t4_seed_pow_mul.json"))
    assert a["trace"]["steps"] == 0
    b = json.loads(json.dumps(a))  # a reloaded analysis: lists, not tuples; no rank_facts
    doc = cross_rank([a, b])
    assert not doc["summary"]["per_step"] and doc["summary"]["unit"].startswith("per trace")
    r0, r1 = doc["ranks"]
    assert r0["step_us"] == a["trace"]["span_us"] and r0["collective_us"] == 0
    # no distributedInfo, no rank in the file name: the order
    assert (r0["rank"], r1["rank"]) == (0, 1) and r0["rank_source"] == "order"
    # no rank_facts: GPU busy from the timeline's union over the device's span
    assert r0["busy_pct"] == pytest.approx(gpu_busy_pct(a))
    assert doc["straggler"]["extra_us"] == 0 and "No rank stands out" in doc["straggler"]["text"][0]
    one = cross_rank([a])
    assert one["straggler"] is None and one["summary"]["ranks"] == 1


def gpu_busy_pct(a):
    d = a["breakdown"]["devices"][0]
    return d["busy_us"] / d["span_us"] * 100


def test_rank_facts_steps_phases_and_collectives(tmp_path):
    from traceana.load import load_trace

    make_rank_dir(tmp_path, n=2, straggler=1)
    f = rank_facts(load_trace(str(tmp_path / "rank0.json.gz")))
    assert f["rank"] == 0 and f["world_size"] == 2 and f["step_numbers"] == [1] and f["device"] == 0
    assert f["collective_kernels"] == 1 and list(f["collective_by_kind"]) == ["AllReduce"]
    # rank 1 computes C x 1.001 + 3 x 2167 x 1.001 = 236928.275 + 6507.501 = 243435.776;
    # rank 0's all-reduce: 1000 + 243435.776 - 236691.583 = 1000 + 6744.193
    assert f["collective_by_kind"]["AllReduce"] == pytest.approx(COLL_BASE + 6744.193, abs=1e-3)
    # the call as the cross-rank matching reads it (ranks/summary.py): it arrives when its kernel starts,
    # right after the compute kernels (back to back from 2103.362 µs into the step), in the backward
    c = analyze_rank(str(tmp_path / "rank0.json.gz"))["analysis"]["rank_facts"]["calls"]
    assert c["n"] == 1 and c["backend"] == "gpu" and c["groups"] == ["stream:7"] and c["step"].tolist() == [1]
    assert KINDS[c["kind"][0]] == "all_reduce" and PHASES[c["phase"][0]] == "backward"
    assert c["t"][0] - c["step_starts"][0] == pytest.approx(HEAD + C, abs=1e-3)
    assert c["end"][0] - c["t"][0] == pytest.approx(COLL_BASE + 6744.193, abs=1e-3)
    # what the rank did before it: the interval from the step's start, C µs of it GPU work, led by the mm
    assert c["t"][0] - c["w0"][0] == pytest.approx(HEAD + C, abs=1e-3)
    assert float(c["work_us"][0]) == pytest.approx(C, rel=1e-6)
    assert c["names"][c["top"][0][0]] == "aten::mm" and float(c["top_us"][0][0]) == pytest.approx(MM, rel=1e-6)
    assert f["phase_source"]["forward"] == "## forward ## annotations"
    assert f["phases"]["optimizer"]["work_us"] == pytest.approx(POW)  # rank 0's pow, unscaled
    # busy: every kernel, back to back, inside the step: C + 7741.388 of 2103.362 + C + 7741.388
    assert f["busy_us"] == pytest.approx(C + COLL_BASE + 6744.193, abs=1e-3)
    assert f["window_us"] == pytest.approx(HEAD + C + COLL_BASE + 6744.193, abs=1e-3)


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
