"""analysis["timeline"]: one representative step drawn lane by lane (traceana/diagnose/timeline.py)."""

from __future__ import annotations

import json

import pytest

from tests import synth
from tests.analyses import analysis as shared_analysis
from traceana.analysis import analyze
from traceana.diagnose import timeline as tl
from traceana.render.json_out import render_json

MM = ([[64, 128], [128, 32]], ["float", "float"])


def _step(events, n, t, dur, kernels, stream=7, corr0=0, ext0=0):
    """A ProfilerStep#n at t lasting dur; each kernel (name, start offset, µs) launched by its own aten::mm."""
    events.append(synth.annotation(f"ProfilerStep#{n}", t, dur))
    for i, (name, off, kdur) in enumerate(kernels):
        corr, ext = corr0 + i, ext0 + i
        events.append(synth.op("aten::mm", t + 1 + i, 0.5, ext, dims=MM[0], types=MM[1]))
        events.append(synth.launch(t + 1 + i, corr, ext=ext, dur=0.5))
        events.append(synth.kernel(name, t + off, kdur, corr, ext=ext, stream=stream))


def _analyze(tmp_path, events):
    return json.loads(render_json(analyze(synth.write(tmp_path, synth.trace(events)))))


def test_the_median_step_is_drawn_from_its_first_kernel_start(tmp_path):
    ev = []
    _step(ev, 1, 0, 100, [("gemm_a", 10, 20)], corr0=100, ext0=100)        # 100 µs
    _step(ev, 2, 200, 300, [("gemm_a", 10, 20), ("gemm_a", 50, 30)], corr0=200, ext0=200)  # 300 µs
    _step(ev, 3, 600, 200, [("gemm_a", 20, 10), ("gemm_a", 40, 5)], corr0=300, ext0=300)   # 200 µs
    ev.append(synth.kernel("ncclKernel_AllReduce_RING", 700, 15, 999, stream=9))  # no launch recorded
    a = _analyze(tmp_path, ev)
    t = a["timeline"]
    # steps of 100, 300, 200 µs: sorted 100, 200, 300, the (3 - 1) // 2 = 1st is step 3 (200 µs)
    assert t["window"]["kind"] == "step" and t["window"]["name"] == "ProfilerStep#3"
    assert t["window"]["steps"] == {"count": 3, "median_us": 200.0, "min_us": 100.0, "max_us": 300.0}
    # its kernels were launched at 601 and 602 and run [620, 630) and [640, 645); the collective has no
    # launch, so its own start (700, inside the step's 600 .. 800) places it: the window is 620 .. 715
    assert t["start_us"] == 620.0 and t["dur_us"] == 95.0  # 715 - 620
    assert t["window"]["cpu_start_us"] == -20.0  # the step began at 600 = 620 - 20
    assert t["window"]["events_launched"] == 3
    lanes = {lane["stream"]: lane for lane in t["lanes"]}
    assert sorted(lanes) == [7, 9]
    assert lanes[7]["start"] == [0, 20] and lanes[7]["dur"] == [10, 5] and lanes[7]["n"] == [1, 1]
    assert lanes[9]["start"] == [80] and lanes[9]["dur"] == [15]  # 700 - 620 = 80
    cats = t["categories"]
    assert cats[lanes[9]["cat"][0]] == "communication"
    op = a["ops"][lanes[7]["op"][0]]
    assert op["name"] == "aten::mm" and cats[lanes[7]["cat"][0]] == op["bound"]
    # idle gaps in the window: [630, 640) (10 µs <= 30: a launch gap) and [645, 700) (55 µs, ended by a
    # kernel with no launch: no-launch)
    g = t["gaps"]
    assert (g["start"], g["dur"]) == ([10, 25], [10, 55])
    assert [t["gap_causes"][c] for c in g["cause"]] == ["launch_gaps", "no_work"]
    assert g["idle_us"] == 65  # 10 + 55
    assert t["aggregated"] is False and t["events"] == t["intervals"] == 3


def test_over_the_cap_short_kernels_of_one_category_become_buckets(tmp_path, monkeypatch):
    monkeypatch.setattr(tl, "CAP", 10)
    ev = []
    # 40 kernels of 2 µs, 1 µs apart: [0, 2), [3, 5), ... ; one long kernel of 50 µs at the end
    kernels = [("gemm_a", 10 + 3 * i, 2) for i in range(40)] + [("gemm_a", 10 + 120, 50)]
    _step(ev, 1, 0, 400, kernels)
    t = _analyze(tmp_path, ev)["timeline"]
    (lane,) = t["lanes"]
    assert t["aggregated"] is True and t["events"] == 41 and t["intervals"] == len(lane["start"]) <= 10
    assert sum(lane["n"]) == 41
    assert sum(lane["busy"]) == pytest.approx(40 * 2 + 50)  # busy time is kept whatever the buckets
    assert lane["dur"][-1] == 50 and lane["n"][-1] == 1  # the long kernel stays itself
    # the threshold is the smallest (to 1%) that fits: a bucket of 40 is not needed, > 1 µs apart merges
    assert 2 < t["bucket_us"] < 3.1 and t["mixed"] is False
    assert "drawn as one bucket" in t["aggregation"]


def test_alternating_categories_fall_back_to_mixed_buckets():
    import numpy as np

    from traceana.diagnose import buckets as bk

    n = 20
    stream = np.zeros(n, dtype=np.int64)
    s = np.arange(n) * 3.0
    e = s + 2
    c = np.arange(n) % 2  # compute, memory, compute, ...
    assert bk._count(stream, s, e, c, np.inf, same_cat=True) == 20  # no neighbours share a category
    q = bk._threshold(stream, s, e, c, same_cat=False, cap=4)
    assert bk._count(stream, s, e, c, q, same_cat=False) <= 4
    assert bk._count(stream, s, e, c, q / 1.02, same_cat=False) > 4  # the smallest such threshold
    b = bk.buckets(stream, s, e, c, 4)
    assert b.mixed and b.aggregated and len(b.first) <= 4 and int(b.n.sum()) == 20


def test_without_steps_the_busiest_stretch_is_drawn(tmp_path, monkeypatch):
    monkeypatch.setattr(tl, "CAP", 10)
    ev = []
    # sparse: one 5 µs kernel every 100 µs over [0, 2000); dense: 20 back-to-back 5 µs kernels from 3000
    for i in range(20):
        ev.append(synth.kernel("k_sparse", 100 * i, 5, 10 + i))
    for i in range(20):
        ev.append(synth.kernel("k_dense", 3000 + 5 * i, 5, 100 + i))
    t = _analyze(tmp_path, ev)["timeline"]
    # 40 events over a 3100 µs span: a stretch of 3100 * 10 / 40 = 775 µs, where the GPU is busiest
    assert t["window"]["kind"] == "busiest"
    assert t["dur_us"] == pytest.approx(775.0)
    assert 2325 <= t["start_us"] <= 3000  # it holds all of the dense 100 µs (3000 .. 3100)
    assert t["window"]["busy_us"] == pytest.approx(100.0)


def test_idle_by_device_and_the_primary_matches_the_ledger():
    a = shared_analysis("hta/rank0.json.gz")
    t = a["timeline"]
    (dev,) = t["idle_by_device"]
    assert dev["idle_by_cause"] == pytest.approx(a["ledger"]["idle"]["by_cause"])
    assert sum(dev["idle_by_cause"].values()) == pytest.approx(a["ledger"]["idle_us"], rel=1e-6)
    # five ProfilerSteps (209.7 .. 216.5 ms): the median one, ProfilerStep#552, 216.119 ms
    assert t["window"]["name"] == "ProfilerStep#552" and t["window"]["cpu_dur_us"] == 216119.0
    assert len(t["lanes"]) == 6 and sum(len(lane["start"]) for lane in t["lanes"]) == t["intervals"]
    for lane in t["lanes"]:
        assert lane["start"] == sorted(lane["start"])
        assert all(0 <= s <= t["dur_us"] for s in lane["start"])
        assert all(-1 <= o < len(a["ops"]) for o in lane["op"])


def test_json_keeps_number_lists_on_one_line(tmp_path):
    ev = []
    _step(ev, 1, 0, 100, [("gemm_a", 10, 20), ("gemm_a", 40, 20)])
    out = render_json(analyze(synth.write(tmp_path, synth.trace(ev))))
    assert '"start": [0,30]' in out and '"dur": [20,20]' in out
    assert json.loads(out)["timeline"]["lanes"][0]["n"] == [1, 1]


def test_kernels_carry_their_name_correlation_and_launch_and_the_launching_threads_are_drawn(tmp_path):
    ev = [synth.annotation("ProfilerStep#1", 0, 200, tid=1),
          synth.annotation("## forward ##", 2, 60, tid=1),
          synth.annotation("## nested ##", 3, 10, tid=1),  # inside ## forward ##: not outermost
          # thread 1: aten::linear [5, 25) holding aten::mm [6, 20) which launches gemm_a at 10 (corr 1)
          synth.op("aten::linear", 5, 20, 1, dims=MM[0], types=MM[1], tid=1),
          synth.op("aten::mm", 6, 14, 2, dims=MM[0], types=MM[1], tid=1),
          synth.launch(10, 1, ext=2, tid=1),
          synth.kernel("void gemm_a<float, 128>(float*)", 40, 20, 1, ext=2),
          # thread 2 (the backward thread): aten::add [30, 40) launches add_k at 32 (corr 2)
          synth.op("aten::add", 30, 10, 3, dims=[[64], [64]], types=["float", "float"], tid=2),
          synth.launch(32, 2, ext=3, tid=2),
          synth.kernel("add_k", 70, 5, 2, ext=3),
          # a memset with no launch recorded
          synth.kernel("Memset (Device)", 90, 1, 99, cat="gpu_memset")]
    a = _analyze(tmp_path, ev)
    t = a["timeline"]
    # the GPU window: the first kernel's start 40 to the last one's end 91; the CPU step 0 .. 200 is -40 .. 160
    assert t["start_us"] == 40.0 and t["dur_us"] == 51.0 and t["cpu_range"] == [-40, 160]
    (lane,) = t["lanes"]
    assert [t["kernels"][k] for k in lane["kernel"]] == ["void gemm_a<float, 128>(float*)", "add_k", "Memset (Device)"]
    assert lane["corr"] == [1, 2, 99]
    # launches at 10 and 32 on the clock, 10 - 40 = -30 and 32 - 40 = -8 from the window start; none for the memset
    assert lane["launch"] == [-30, -8, 0]
    assert [t["calls"][c] for c in lane["call"][:2]] == ["cudaLaunchKernel"] * 2 and lane["call"][2] == -1
    threads = [th["thread"] for th in t["threads"]]
    assert threads == ["1/1", "1/2"]  # the step's thread first, then the other launching thread
    assert lane["thread"] == [0, 1, -1]
    assert [th["launched"] for th in t["threads"]] == [1, 1]
    first, second = t["threads"]
    # outermost ops only: aten::linear (aten::mm is inside it), clipped to nothing; times from the window start
    assert [t["cpu_names"][i] for i in first["ops"]["name"]] == ["aten::linear"]
    assert first["ops"]["start"] == [-35] and first["ops"]["dur"] == [20]  # 5 - 40, 25 - 5
    assert [t["cpu_names"][i] for i in first["annotations"]["name"]] == ["## forward ##"]  # not ProfilerStep, not nested
    assert [t["cpu_names"][i] for i in second["ops"]["name"]] == ["aten::add"] and "annotations" not in second
    assert t["cpu_events"] == t["cpu_intervals"] == 3 and t["threads_omitted"] == 0


def test_cpu_intervals_over_their_cap_merge_into_named_buckets(tmp_path, monkeypatch):
    from traceana.diagnose import timeline_cpu

    monkeypatch.setattr(timeline_cpu, "CPU_CAP", 5)
    ev = [synth.annotation("ProfilerStep#1", 0, 400)]
    # 20 outermost 1 µs ops, 2 µs apart, then one 30 µs op that launches the only kernel
    ev += [synth.op("aten::view", 10 + 3 * i, 1, 100 + i) for i in range(20)]
    ev += [synth.op("aten::mm", 100, 30, 1, dims=MM[0], types=MM[1]), synth.launch(105, 1, ext=1),
           synth.kernel("gemm_a", 150, 10, 1, ext=1)]
    t = _analyze(tmp_path, ev)["timeline"]
    (th,) = t["threads"]
    ops = th["ops"]
    assert t["cpu_events"] == 21 and t["cpu_intervals"] == len(ops["start"]) <= 5
    assert sum(ops["n"]) == 21 and sum(ops["busy"]) == pytest.approx(20 * 1 + 30)
    assert t["cpu_names"][ops["name"][-1]] == "aten::mm" and ops["n"][-1] == 1 and ops["dur"][-1] == 30
    assert "aten::view" in [t["cpu_names"][i] for i in ops["name"]]  # a bucket named after its longest op
    assert "named after its longest" in t["cpu_aggregation"]


def test_without_steps_the_cpu_side_starts_at_the_first_launch(tmp_path):
    ev = [synth.op("aten::mm", 5, 10, 1, dims=MM[0], types=MM[1]), synth.launch(8, 1, ext=1),
          synth.kernel("gemm_a", 100, 20, 1, ext=1),
          synth.op("aten::mm", 20, 10, 2, dims=MM[0], types=MM[1]), synth.launch(22, 2, ext=2),
          synth.kernel("gemm_a", 130, 20, 2, ext=2)]
    t = _analyze(tmp_path, ev)["timeline"]
    # the whole span, 100 .. 150 (50 µs); the first launch at 8 is 92 µs before it, over one window length
    # (50 µs): the CPU side starts at 100 - 50 = 50, i.e. -50 from the window start
    assert t["window"]["kind"] == "span" and t["start_us"] == 100.0 and t["dur_us"] == 50.0
    assert t["cpu_range"] == [-50, 50]
    (th,) = t["threads"]
    assert th["thread"] == "1/1" and th["launched"] == 2 and t["lanes"][0]["thread"] == [0, 0]
    assert t["lanes"][0]["launch"] == [-92, -78]  # 8 - 100, 22 - 100: the link reaches past the drawn CPU range
    assert th["ops"] == {"start": [], "dur": [], "name": [], "n": []}  # both ops ended before -50


def test_the_step_thread_comes_first_even_when_another_thread_launched_more(tmp_path):
    # the step is annotated on thread 1, which launches one kernel; thread 2 launches two
    t0 = 1_428_625_731_896.179  # a wall-clock µs timestamp, as real traces have
    ev = [synth.annotation("ProfilerStep#3", t0, 500, tid=1),
          synth.op("aten::mm", t0 + 1, 10, 1, dims=MM[0], types=MM[1], tid=1), synth.launch(t0 + 2, 1, ext=1, tid=1),
          synth.kernel("gemm_a", t0 + 50, 10, 1, ext=1)]
    for i in (2, 3):
        ev += [synth.op("aten::mm", t0 + 10 * i, 5, i, dims=MM[0], types=MM[1], tid=2),
               synth.launch(t0 + 10 * i + 1, i, ext=i, tid=2), synth.kernel("gemm_a", t0 + 50 + 20 * i, 10, i, ext=i)]
    t = _analyze(tmp_path, ev)["timeline"]
    assert [(th["thread"], th["launched"]) for th in t["threads"]] == [("1/1", 1), ("1/2", 2)]
