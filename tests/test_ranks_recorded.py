"""Cross-rank waits on real distributed runs: 4 gloo processes recorded on CPU under torch.profiler
(tests/recorded_ranks.py: an MoE block with uneven all_to_all splits, an all_gather, an all_reduce of the
gradients, a send / recv; rank 2 sleeps 200 ms in the forward of step #1, rank 1 runs extra matmuls for
150 ms in the backward of step #2). The report must find both, each in its phase, with the wait it caused.

Recorded once per session (a subprocess: the test process never imports torch). The machine is shared,
so timings carry scheduling jitter: the bounds below leave JITTER_US for it, never more than the delay.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

JITTER_US = 50_000.0  # scheduling noise on a loaded 2-core machine (4 processes)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "traceana", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


@pytest.fixture(scope="session")
def gloo_run(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("recorded_ranks")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "tests.recorded_ranks", str(out)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0 or not (out / "plan.txt").exists():
        pytest.skip(f"recording failed: {r.stderr[-400:]}")
    return out


@pytest.fixture(scope="session")
def plan(gloo_run) -> dict:
    return json.loads((gloo_run / "plan.txt").read_text())


@pytest.fixture(scope="session")
def report(gloo_run, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("gloo_report") / "ranks.json"
    p = cli("report", str(gloo_run), "-o", str(out), "-q")
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())


def _top(doc: dict, late: str) -> dict:
    return max((t for t in doc["collectives"]["top"] if t["late"] == late), key=lambda t: t["wait_us"])


def test_every_collective_is_matched(report, plan):
    s, c = report["summary"], report["collectives"]
    assert s["ranks"] == 4 and s["per_step"] and s["consistent"] and s["failed"] == 0
    # per step: 2 all_to_all + all_gather + all_reduce on all 4 ranks, and rank 0's send to rank 1:
    # 5 collectives x 3 steps = 15; calls: 4 x 4 x 3 + 2 x 3 = 54, none left over
    assert (c["matched"], c["calls"], c["unmatched_calls"]) == (15, 54, 0)
    assert c["methods"] == {"default": "order"} and c["mismatch_count"] == 0
    assert not c["clock"]["applied"]  # one machine, one clock


def test_the_sleeping_rank_is_found_in_the_forward(report, plan):
    sleep = plan["sleep_s"] * 1e6  # 200,000 µs
    t = _top(report, f"rank {plan['late_fwd']}")
    assert (t["kind"], t["step"], t["phase"]) == ("all_to_all", 1, "forward")
    # every other rank waited about the sleep: 200 ms, less whatever it did meanwhile, plus jitter
    assert sleep - JITTER_US <= t["median_wait_us"] <= t["max_wait_us"] <= 2 * sleep
    # 3 other ranks: the total is three such waits
    assert 3 * (sleep - JITTER_US) <= t["wait_us"] <= 3 * 2 * sleep
    assert t["lead_us"] >= sleep - JITTER_US  # it arrived that much after the next-latest rank
    # its interval before the call: the sleep, host time with no op on its thread, that the others did not have
    assert t["extra"]["untracked"] >= sleep - JITTER_US
    assert t["interval_us"] - t["others_interval_us"] >= sleep - JITTER_US


def test_the_rank_with_extra_matmuls_is_found_in_the_backward(report, plan):
    t = _top(report, f"rank {plan['late_bwd']}")
    assert (t["kind"], t["step"], t["phase"]) == ("all_reduce", 2, "backward")
    mm = next(o["us"] for o in t["ops"] if o["name"] == "aten::mm")
    # 150 ms of extra 256x256 matmuls: most of its interval, and the others waited for it:
    # each wait = its interval - the other's interval (they left the all_gather together), within jitter
    assert plan["extra_s"] * 1e6 - JITTER_US <= mm <= t["interval_us"]
    assert mm >= 0.8 * t["interval_us"] - JITTER_US
    assert mm - t["others_interval_us"] - JITTER_US <= t["median_wait_us"] <= t["interval_us"] + JITTER_US
    assert t["extra"]["work"] >= mm - t["others_interval_us"] - JITTER_US


def test_first_screen_names_both_late_ranks_and_the_uneven_all_to_all(report, plan):
    first = report["first"]
    late = {(lv["rank"], lv["phase"], lv["cause"]) for lv in first if lv["kind"] == "late_rank"}
    assert late == {(f"rank {plan['late_fwd']}", "forward", "untracked"), (f"rank {plan['late_bwd']}", "backward", "work")}
    by = {b["label"]: b for b in report["collectives"]["by_rank"]}
    sleeper = by[f"rank {plan['late_fwd']}"]
    # per step (3 steps): the sleep's wait, ~3 x 200 ms, over 3 steps: at least 3 x 150 / 3 = 150 ms
    assert sleeper["by_phase_us"]["forward"] >= 3 * (plan["sleep_s"] * 1e6 - JITTER_US) / plan["steps"]
    assert max(sleeper["by_cause_us"], key=sleeper["by_cause_us"].get) == "untracked"
    worker = by[f"rank {plan['late_bwd']}"]
    assert worker["ops"][0]["name"] == "aten::mm"
    # the all_to_all splits: rank r sends SPLIT[j] tokens to rank j and gets them back, 64 floats a token, per step
    # received: dispatch SPLIT[r] x 4 ranks x 64 + combine 24 x 64 = rank 0 2,048 ... rank 3 12 x 256 + 1,536 = 4,608;
    # the mean (2,048 + 2,560 + 3,072 + 4,608) / 4 = 3,072: rank 3 receives 4,608 / 3,072 = 1.5x
    imb = next(lv for lv in first if lv["kind"] == "imbalance")
    assert imb["rank"] == "rank 3" and imb["title"] == "all_to_all sizes are uneven: rank 3 receives 1.50x the mean"
    a2a = report["collectives"]["all_to_all"]
    assert a2a["received_elements"] == {"rank 0": 2048.0, "rank 1": 2560.0, "rank 2": 3072.0, "rank 3": 4608.0}


def test_rank_table_waits_and_bytes(report, plan):
    rows = {r["label"]: r for r in report["ranks"]}
    caused = sum(r["wait_caused_us"] for r in rows.values())
    suffered = sum(r["collective_wait_us"] for r in rows.values())
    assert caused == pytest.approx(suffered, rel=1e-9)  # every µs waited was caused by someone
    # gloo's collectives are CPU ranges: their own time is the collective time, the wait a part of it
    for r in rows.values():
        assert 0 <= r["collective_wait_us"] <= r["collective_us"] and r["busy_pct"] is None
    # bytes a step, the larger of a call's input and output: the all_to_all pair (the all_reduce, all_gather
    # and send pass TensorLists, whose dtype the trace does not record: not counted). Rank 0 sends 24 tokens and
    # receives 4 x 2 = 8: 24 x 64 floats x 4 B = 6,144 B each way, twice; rank 3 receives 4 x 12 = 48 tokens:
    # 48 x 64 x 4 = 12,288 B, twice
    assert (rows["rank 0"]["comm_bytes"], rows["rank 3"]["comm_bytes"]) == (2 * 6_144, 2 * 12_288)


def _shifted(src: Path, dst: Path, ranks: dict[int, tuple[float, str | None]]) -> None:
    """dst: src's rank files, rank r's times + shift µs and its host_name set (as if recorded elsewhere)."""
    dst.mkdir()
    for f in src.glob("rank*.json"):
        doc = json.loads(f.read_text())
        r = doc["distributedInfo"]["rank"]
        if r in ranks:
            shift, host = ranks[r]
            for e in doc["traceEvents"]:
                if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
                    e["ts"] += shift
            if host:
                doc["host_name"] = host
        (dst / f.name).write_text(json.dumps(doc))


def test_ranks_on_other_clocks_are_put_on_one(gloo_run, report, tmp_path):
    # rank 2 on another host whose clock is 7 s ahead; rank 3 on a host with the same name and a clock 3 s behind
    d = tmp_path / "hosts"
    _shifted(gloo_run, d, {2: (7e6, "node-b"), 3: (-3e6, None)})
    out = tmp_path / "r.json"
    p = cli("report", str(d), "-o", str(out), "-q")
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    clock = doc["collectives"]["clock"]
    assert clock["applied"] and clock["hosts_differ"] and clock["reference"] == "rank 0"
    # each offset: the median of its collectives' end differences against rank 0, the shift itself give or
    # take how much later than rank 0 it leaves a collective on one clock (< 5 ms here)
    offs = clock["offsets_us"]
    assert set(offs) == {"rank 2", "rank 3"}
    assert offs["rank 2"] == pytest.approx(7e6, abs=5e3) and offs["rank 3"] == pytest.approx(-3e6, abs=5e3)
    # corrected, the run reads as recorded on one clock: the same collectives, the same late ranks, the waits
    # within the offsets' error (each rank's times shift by at most that median's distance from its true offset)
    assert doc["collectives"]["matched"] == report["collectives"]["matched"]
    mine = {r["label"]: r for r in doc["ranks"]}
    for r in report["ranks"]:
        assert mine[r["label"]]["wait_caused_us"] == pytest.approx(r["wait_caused_us"], abs=4 * 5e3)
    assert {lv["rank"] for lv in doc["first"] if lv["kind"] == "late_rank"} == \
        {lv["rank"] for lv in report["first"] if lv["kind"] == "late_rank"}


def test_a_collective_of_another_size_is_a_warning_naming_the_rank(gloo_run, tmp_path):
    d = tmp_path / "odd"
    d.mkdir()
    for f in gloo_run.glob("rank*.json"):
        shutil.copy(f, d / f.name)
    doc = json.loads((d / "rank3.json").read_text())
    for e in doc["traceEvents"]:  # rank 3 all-reduces a gradient of another size: a bug in the program
        if e.get("name") == "c10d::allreduce_":
            e["args"]["Input Dims"] = [[[4000]], [], [], [], [], []]
    (d / "rank3.json").write_text(json.dumps(doc))
    out = tmp_path / "r.md"
    p = cli("report", str(d), "-o", str(out), "-q")
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    # 3 steps: 3 all_reduce collectives, each with rank 3 at 4,000 elements against the others' 4,485
    assert "**Mismatch:** collective #" in text and "size differs — most ranks 4,485 elements; rank 3 4,000 elements" in text
    js = tmp_path / "r.json"
    p = cli("report", str(d), "-o", str(js), "-q")
    assert p.returncode == 0, p.stderr
    c = json.loads(js.read_text())["collectives"]
    assert c["mismatch_count"] == 3 and all(m["odd"] == [{"rank": 3, "value": "4,000 elements"}] for m in c["mismatches"])
