"""A run most of whose device time nothing can cost says so in "Do this first", where levers leave a place."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import shared_trace


def test_uncosted_graph_replay_is_named_in_the_plan(tmp_path):
    from traceana.analysis import analyze

    src = shared_trace("tracelens/vllm_decode_full/graph_execution.json.gz")
    alone = tmp_path / "graph_execution.json.gz"  # copied away from its capture_traces/ folder
    shutil.copyfile(src, alone)
    a = analyze(str(alone))
    plan = a["plan"]
    notes = [p for p in plan if p["kind"] == "opaque_time"]
    assert len(notes) == 1 and plan[-1] is notes[0]  # after the levers, in a place they left
    f = a["findings"][notes[0]["finding"]]
    total = sum(r["device_time_us"] for r in a["ops"])
    replay = sum(r["device_time_us"] for r in a["ops"] if r.get("cause") == "graph_replay")
    # 10.39 ms of the 10.72 ms of GPU time ran in graph replays with no capture: 96.9% >= the 30% threshold
    assert f["holds_us"] == pytest.approx(replay) and replay / total == pytest.approx(0.969, abs=0.002)
    assert notes[0]["saving_us"] == 0.0 and "--capture" in notes[0]["fix"]
    assert len(plan) <= 3


def test_costed_replay_needs_no_note():
    from traceana.analysis import analyze

    a = analyze(shared_trace("tracelens/vllm_decode_full/graph_execution.json.gz"))  # its capture beside it
    assert not [p for p in a["plan"] if p["kind"] == "opaque_time"]
