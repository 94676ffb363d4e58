"""Idle gaps: host-wait (launched after the GPU went idle), kernel-wait (launched early, started
late), other (no launch); per device, per stream, and the idle_gap / launch_bound findings."""

from __future__ import annotations

import pytest

from tests import synth
from traceana.diagnose.findings import launch_findings
from traceana.diagnose.idle import LAUNCH_GAP_US, idle_finding, idle_summary
from traceana.link import link
from traceana.load import load_trace


def _events(second_stream=False):
    ev = [
        synth.launch(1, 1), synth.kernel("k1", 10, 10, 1),      # K1 [10, 20)
        synth.launch(60, 2), synth.kernel("k2", 70, 10, 2),     # launched at 60 > 20: host-wait [20, 70)
        synth.launch(61, 3), synth.kernel("k3", 100, 10, 3),    # launched at 61 <= 80: kernel-wait [80, 100)
        synth.kernel("k4", 150, 10, 4),                          # no launch: other [110, 150)
    ]
    if second_stream:
        ev += [synth.launch(25, 5), synth.kernel("k5", 30, 35, 5, stream=8)]  # [30, 65) on stream 8
    return ev


def _summary(tmp_path, **kw):
    tr = load_trace(synth.write(tmp_path, synth.trace(_events(**kw))))
    return idle_summary(tr, link(tr), 0, [-1] * len(tr.gpu), [])


def test_gaps_split_by_cause(tmp_path):
    s = _summary(tmp_path)
    assert s["by_cause"] == pytest.approx({"host_wait": 50.0, "kernel_wait": 20.0, "other": 40.0})
    assert s["idle_us"] == pytest.approx(110.0)  # 50 + 20 + 40
    assert s["gaps"] == 3
    # 30 µs and shorter are launch overhead: the 20 µs kernel-wait gap
    assert s["short"] == {"gaps": 1, "idle_us": 20.0, "median_us": 20.0}
    assert s["long"] == pytest.approx({"host_wait": 50.0, "kernel_wait": 0.0, "other": 40.0})
    top = s["largest"][0]
    assert (top["length_us"], top["cause"], top["next"], top["start_us"]) == (50.0, "host_wait", "k2", 10.0)


def test_device_idle_needs_every_stream_idle(tmp_path):
    s = _summary(tmp_path, second_stream=True)
    # stream 8 runs [30, 65): the device is idle only in [20, 30) (k5 launched at 25 > 20: host-wait)
    # and [65, 70) (k2 launched at 60 <= 65: kernel-wait), then [80, 100) and [110, 150) as before
    assert s["by_cause"] == pytest.approx({"host_wait": 10.0, "kernel_wait": 25.0, "other": 40.0})
    per_stream = {r["stream"]: r for r in s["streams"]}
    assert per_stream[7]["host_wait"] == pytest.approx(50.0)  # stream 7 alone still waits [20, 70)
    assert per_stream[8]["idle_us"] == 0.0


def test_idle_finding_counts_long_host_wait(tmp_path):
    s = _summary(tmp_path)
    f = idle_finding(s, 150.0)  # span 10 .. 160
    assert f["kind"] == "idle_gap"
    assert f["saving_us"] == pytest.approx(50.0)  # the long host-wait gap only
    assert "73.3%" in f["text"]  # 110 / 150 µs idle
    assert f"longer than {LAUNCH_GAP_US:g} µs" in f["text"]


def test_launch_finding_adds_short_gaps_and_time_above_roofs():
    rows = [{"id": "op1", "name": "aten::add", "bound": "latency", "count": 100, "kernel_count": 1,
             "device_time_us": 300.0, "roofline_time_us": 0.5}]
    facts = {"kernels": 150, "kernel_us": 900.0, "launches": 150, "launch_us": 1200.0, "lat_launches": 100,
             "lat_launch_us": 800.0, "short_gaps": 120, "short_us": 240.0, "short_median_us": 2.0,
             "short_limit_us": 30.0}
    (f,) = launch_findings(rows, 10_000.0, facts)
    # above the roofs: 300 - 100 x 0.5 = 250 µs; plus 240 µs of short gaps = 490 µs
    assert f["saving_us"] == pytest.approx(490.0)
    assert "8.00 µs per launch" in f["text"] and "6.00 µs per kernel" in f["text"]  # 1200/150, 900/150
    assert "CPU sets the pace" in f["text"]
    assert launch_findings([], 1e9, facts) == []  # 240 µs of 1e9 µs: under 0.5%
