"""Memory (diagnose/memory.py): peaks per device and step, the curve, the ops live at the peak, the allocator's
calls in the step's one account, and the report's memory line / section / frames.

Shared traces with [memory] events: the peak must equal the largest "Total Allocated" the trace records for
that device (recomputed here from the raw JSON, independently of the loader). A trace recorded here: a tiny
GPT-2 language model (built from its config) trained for two profiler steps on CPU with profile_memory=True.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tests import synth
from tests.conftest import shared_trace
from traceana.analysis import analyze
from traceana.diagnose import memory as mem
from traceana.diagnose.ledger import SYNC_CALLS
from traceana.link.attribute import ALLOC_HELPERS, link
from traceana.load import load_trace
from traceana.render import render

WITH_MEMORY = [
    "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/perf_model/normalization_layer_test.json.gz",
    "hta/df_index_resolver.json.gz",
]
GIB = 1 << 30


def _raw_memory(path: str) -> list[dict]:
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e["args"] for e in events if e.get("name") == "[memory]" and e.get("ph") == "i"]


def _max_total(raw: list[dict], dtype: int, dev: int) -> float:
    return max(a["Total Allocated"] for a in raw if a["Device Type"] == dtype and a["Device Id"] == dev)


@pytest.mark.parametrize("rel", WITH_MEMORY)
def test_peak_is_the_largest_total_allocated(rel):
    path = shared_trace(rel)
    raw = _raw_memory(path)
    sec = mem.memory_section(load_trace(path))
    assert sec["recorded"] is True
    seen = {(a["Device Type"], a["Device Id"]) for a in raw}
    assert {(d["device_type"], d["index"]) for d in sec["devices"]} == seen
    for d in sec["devices"]:
        assert d["totals"] == "recorded"
        assert d["peak_allocated_bytes"] == _max_total(raw, d["device_type"], d["index"])
        assert d["events"] == sum(1 for a in raw if (a["Device Type"], a["Device Id"]) == (d["device_type"], d["index"]))
        # the curve is bounded and holds the peak exactly, at the peak's time
        c = d["curve"]
        assert c["points"] == len(c["t_us"]) <= mem.MAX_POINTS
        k = int(np.argmax(c["allocated"]))
        assert c["allocated"][k] == d["peak_allocated_bytes"]
        assert c["t_us"][k] == pytest.approx(d["peak_at_us"], abs=0.01)
        # live at the peak: what the recorded allocations hold + what was there before the recording = the peak
        live = d["live_at_peak"]
        assert live["bytes"] + live["before_recording_bytes"] == d["peak_allocated_bytes"]
        assert sum(r["bytes"] for r in d["top_at_peak"]) <= live["bytes"]
        assert all(r["op"] not in ALLOC_HELPERS for r in d["top_at_peak"] + d["top_allocating"])
        res = [a["Total Reserved"] for a in raw if (a["Device Type"], a["Device Id"]) == (d["device_type"], d["index"])]
        assert d["peak_reserved_bytes"] == max(res)


def test_df_index_resolver_numbers():
    """A DDP rank on a V100 (cuda:1), 5 ProfilerSteps, 26,770 GPU memory events."""
    path = shared_trace("hta/df_index_resolver.json.gz")
    a = analyze(path)
    m = a["memory"]
    gpu = m["devices"][0]
    assert gpu["device"] == "cuda:1" and m["devices"][1]["device"] == "cpu"
    assert gpu["peak_allocated_bytes"] == 6_629_508_096
    assert gpu["reserved_at_peak_bytes"] == gpu["peak_reserved_bytes"] == 12_782_141_440
    # every allocation is freed: 13,385 of each, and the step ends where it began
    assert gpu["allocations"] == gpu["frees"] == 13_385
    assert gpu["start_allocated_bytes"] == gpu["end_allocated_bytes"] == 4_096_614_400
    # held at the peak: 6,629,508,096 - 4,096,614,400 (there before the recording) = 2,532,893,696
    assert gpu["live_at_peak"] == {"bytes": 2_532_893_696, "allocations": 725, "before_recording_bytes": 4_096_614_400}
    assert gpu["top_at_peak"][0] == {"op": "aten::mm", "bytes": 1_037_459_456, "allocations": 143}
    # per step: every step's peak is at most the trace's, and the step holding the peak reaches it
    steps = gpu["steps"]
    assert [s["step"] for s in steps] == [2, 3, 4, 5, 6]
    assert max(s["peak_allocated_bytes"] for s in steps) == gpu["peak_allocated_bytes"]
    assert all(s["start_allocated_bytes"] == 4_096_614_400 for s in steps)
    # reserved above allocated at the peak: 12,782,141,440 - 6,629,508,096 = 6,152,633,344 B = 5.73 GiB
    # (>= 1 GiB and 48% >= 25% of reserved): a fragmentation note that saves no time
    frag = [f for f in a["findings"] if f["kind"] == "memory_fragmentation"]
    assert len(frag) == 1
    assert frag[0]["gap_bytes"] == 6_152_633_344 and "5.73 GiB" in frag[0]["title"]
    assert frag[0]["saving_us"] == 0.0 and frag[0]["lever"] is False
    assert "expandable_segments:True" in frag[0]["text"]
    # the curve: at most 400 of 26,770 events
    assert gpu["curve"]["points"] <= 400
    # the frames hold the JSON's values
    import traceana
    from traceana.api import MEMORY_COLUMNS

    an = traceana.Analysis(a)
    row = an.memory.loc["cuda:1"]
    assert all(row[k] == gpu[k] for k in MEMORY_COLUMNS if k != "device")
    assert row["live_at_peak_bytes"] == 2_532_893_696 and row["before_recording_bytes"] == 4_096_614_400
    st = an.memory_steps[an.memory_steps.device == "cuda:1"]
    assert st["step"].tolist() == [2, 3, 4, 5, 6] and st["peak_allocated_bytes"].max() == 6_629_508_096
    # markdown: one line; the short report stays within its budget
    md = render(a, "md")
    line = next(x for x in md.splitlines() if x.startswith("**Memory:**"))
    assert "cuda:1 peak 6.17 GiB allocated (11.9 GiB reserved)" in line and "aten::mm (989 MiB)" in line
    assert len(md) <= 8000
    # the long form: a memory table, the ops holding most at the peak
    long = render(a, "md", long=True)
    assert "| cuda:1 | 6.17 GiB | 11.9 GiB | 11.9 GiB |" in long and "aten::mm 989 MiB, aten::add 564 MiB" in long


def test_qwen_no_fragmentation_below_the_threshold():
    """Reserved above allocated at the peak: 2,629,828,608 - 2,088,508,416 = 541,320,192 B (516 MiB) < 1 GiB."""
    path = shared_trace("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    sec = mem.memory_section(load_trace(path))
    d = sec["devices"][0]
    assert (d["reserved_at_peak_bytes"] - d["peak_allocated_bytes"]) == 541_320_192
    assert mem.fragmentation_findings(sec) == []


def test_hip_device_and_allocator_calls_without_steps():
    """MI300 normalization tests: [memory] events with Device Type 6 (HIP), and 7 hipMalloc calls and no steps."""
    path = shared_trace("tracelens/perf_model/normalization_layer_test.json.gz")
    t = load_trace(path)
    sec = mem.memory_section(t)
    assert [d["device"] for d in sec["devices"]] == ["hip:0", "cpu"]
    calls = sec["allocator"]
    assert calls["count"] == 7 and calls["frees"] == 0
    assert [c["call"] for c in calls["calls"]] == ["hipMalloc"]
    la = t.launches
    durs = [float(la.end[i] - la.ts[i]) for i in range(len(la)) if t.names[la.name[i]] == "hipMalloc"]
    assert len(durs) == 7 and calls["host_us"] == pytest.approx(sum(durs))  # 64.8 + 26.6 + ... = 421.0 µs
    assert calls["host_us"] == pytest.approx(421.02, abs=0.01)
    # no steps, no frees, no idle charged: the cache growing is no churn finding
    assert mem.churn_finding(t, calls, None, 0, 1.0) is None


def test_old_trace_without_totals_is_summed():
    """kineto's 2021 worker trace: [memory] events carry Bytes only; allocated is the running sum of the bytes."""
    path = shared_trace("kineto/worker0.1623143089861.pt.trace.json.gz")
    raw = _raw_memory(path)
    sec = mem.memory_section(load_trace(path))
    gpu = next(d for d in sec["devices"] if d["device"] == "cuda:0")
    assert gpu["totals"] == "reconstructed" and gpu["live_at_peak"] is None
    t = load_trace(path)
    m = t.memory
    sel = np.flatnonzero((m.device_type == 1) & (m.device == 0))
    sel = sel[np.argsort(m.ts[sel], kind="stable")]
    assert gpu["peak_allocated_bytes"] == float(np.cumsum(m.nbytes[sel]).max()) == 2_791_636_480
    assert len(sel) == sum(1 for a in raw if a["Device Type"] == 1)


def test_curve_keeps_the_peak_and_bounds():
    n = 10_000
    ts = np.arange(n, dtype=float)
    tot = np.sin(ts / 50.0) * 1e6 + 2e6
    tot[7777] = 9e6  # a one-event spike
    c = mem._curve(ts, tot, None, 7777, 0.0, 100)
    assert c["points"] <= 100 + 3
    assert max(c["allocated"]) == 9_000_000 and c["t_us"][c["allocated"].index(9_000_000)] == 7777
    assert c["t_us"][0] == 0 and c["t_us"][-1] == n - 1


# ---------------------------------------------------------------------------- allocator churn in the ledger


def _churn_trace():
    """Two ProfilerSteps; in each, a kernel runs 100 µs, then cudaFree blocks the CPU until 200 µs after the kernel
    ended, and the next kernel is launched after it: the GPU idles in between; a cudaMalloc precedes each free."""
    ev = []
    corr = 1
    for s, base in enumerate((0.0, 1000.0)):
        ev.append(synth.annotation(f"ProfilerStep#{s + 1}", base, 900))
        ev.append(synth.op("aten::mm", base + 10, 20, corr, [[64, 64], [64, 64]]))
        ev.append(synth.launch(base + 15, corr, corr))
        ev.append(synth.kernel("ampere_sgemm_64x64_nn", base + 100, 100, corr, corr))
        corr += 1
        ev.append(synth.launch(base + 120, 900 + corr, name="cudaMalloc", dur=20))
        ev.append(synth.launch(base + 150, 900 + corr + 1, name="cudaFree", dur=250))  # returns at base + 400
        ev.append(synth.op("aten::mm", base + 400, 20, corr, [[64, 64], [64, 64]]))
        ev.append(synth.launch(base + 405, corr, corr))
        ev.append(synth.kernel("ampere_sgemm_64x64_nn", base + 410, 90, corr, corr))
        corr += 1
    return synth.trace(ev)


def test_allocator_churn_counted_once(tmp_path):
    assert "cudaFree" in SYNC_CALLS and "hipFree" in SYNC_CALLS
    a = analyze(synth.write(tmp_path, _churn_trace()))
    calls = a["memory"]["allocator"]
    assert calls["count"] == 4 and calls["frees"] == 2 and calls["in_steps"] == 4 and calls["steps_with_calls"] == 2
    # host time: 2 x (20 + 250) = 540 µs
    assert calls["host_us"] == 540.0
    churn = [f for f in a["findings"] if f["kind"] == "allocator_churn"]
    assert len(churn) == 1
    # per step the GPU is idle from the first kernel's end (base + 200) to the next one's start (base + 410):
    # 210 µs, all while cudaFree (until base + 400, plus one 30 µs launch gap) held the CPU: 2 x 210 = 420 µs
    assert churn[0]["saving_us"] == pytest.approx(420.0) and churn[0]["idle_us"] == pytest.approx(420.0)
    assert a["ledger"]["idle"]["by_cause"]["sync"] == pytest.approx(420.0)
    # ... and no sync-stall finding names the same idle again
    assert not [f for f in a["findings"] if f["kind"] == "sync_stall"]
    assert "expandable_segments:True" in churn[0]["text"] and "empty_cache" in churn[0]["text"]
    assert a["memory"]["recorded"] is False


def test_no_memory_events_says_how_to_record(tmp_path):
    a = analyze(synth.write(tmp_path, _churn_trace()))
    assert a["memory"]["recorded"] is False and "profile_memory=True" in a["memory"]["note"]
    md = render(a, "md")
    assert "**Memory:** not recorded — record with torch.profiler.profile(profile\\_memory=True)" in md
    html = render(a, "html")
    assert '<section id="memory">' in html and "profile_memory=True" in html


# ---------------------------------------------------------------------------- a recorded training run


def _record_two_steps(path: Path) -> str:
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                  attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (2, 32), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    step()  # warm-up: AdamW's state exists before the recording
    # a schedule makes the profiler annotate its steps (ProfilerStep#N): one warm-up step, two recorded
    sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                profile_memory=True, schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as p:
        for _ in range(3):
            step()
            p.step()
    return str(path)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    pytest.importorskip("torch")
    return _record_two_steps(tmp_path_factory.mktemp("memory") / "gpt2_train.pt.trace.json")


def test_recorded_training_steps(recorded):
    raw = _raw_memory(recorded)
    assert raw and all(x["Device Type"] == 0 for x in raw)  # on CPU every allocation is host memory
    a = analyze(recorded)
    m = a["memory"]
    assert m["recorded"] is True and m["steps"] == 2
    (d,) = m["devices"]
    assert d["device"] == "cpu" and d["type"] == "cpu"
    assert d["peak_allocated_bytes"] == _max_total(raw, 0, -1)
    assert d["events"] == len(raw)
    live = d["live_at_peak"]
    assert live["bytes"] + live["before_recording_bytes"] == d["peak_allocated_bytes"]
    assert live["bytes"] > 0
    # the ops named are those that asked for memory, never the allocation helpers below them
    names = [r["op"] for r in d["top_allocating"]]
    assert names and not set(names) & ALLOC_HELPERS
    # per step: both steps are there, their peaks bound the trace's
    assert [s["step"] for s in d["steps"]] == [1, 2]
    assert all(s["peak_allocated_bytes"] <= d["peak_allocated_bytes"] for s in d["steps"])
    assert all(s["allocations"] > 0 for s in d["steps"])
    # allocated at a step's end = at its start + the Bytes of its events (allocations +, frees -)
    t = load_trace(recorded)
    t0 = m["t0_us"]
    for s in d["steps"]:
        inside = (t.memory.ts >= t0 + s["start_us"]) & (t.memory.ts < t0 + s["start_us"] + s["dur_us"])
        assert s["events"] == int(inside.sum())
        assert s["end_allocated_bytes"] - s["start_allocated_bytes"] == int(t.memory.nbytes[inside].sum())
        assert s["allocated_bytes"] == int(t.memory.nbytes[inside & (t.memory.nbytes > 0)].sum())
    # reports: the frame, the markdown line, the HTML section with its chart
    import traceana
    fr = traceana.Analysis(a).memory
    assert fr.loc["cpu", "peak_allocated_bytes"] == _max_total(raw, 0, -1)
    assert len(traceana.Analysis(a).memory_steps) == 2
    md = render(a, "md")
    assert "**Memory:** cpu peak" in md and len(md) <= 8000
    html = render(a, "html")
    assert '<svg class="memchart"' in html and "Held at the peak, by op" in html


def test_recorded_with_stack_and_memory(recorded_trace):
    """The events helper's recorded step (BertForMaskedLM forward + backward + AdamW, with_stack, profile_memory)."""
    path = recorded_trace.train_step()
    raw = _raw_memory(path)
    sec = mem.memory_section(load_trace(path))
    (d,) = sec["devices"]
    assert d["peak_allocated_bytes"] == _max_total(raw, 0, -1)
    # owner_ops hands each event its op: one per memory event, inside the trace's ops
    t = load_trace(path)
    own = mem.owner_ops(t)
    assert len(own) == len(t.memory) and (own < len(t.ops)).all() and (own >= 0).mean() > 0.5


def test_html_escapes_the_memory_section():
    bad = "<script>alert(1)</script>"
    a = {"schema": "traceana.analysis/1", "trace": {"file": "x"}, "ops": [], "findings": [],
         "memory": {"recorded": True, "t0_us": 0.0, "allocator": {"count": 1, "calls": [{"call": bad}], "host_us": 5},
                    "devices": [{"device": bad, "type": "cuda", "peak_allocated_bytes": 100.0, "peak_at_us": 5.0,
                                 "reserved_at_peak_bytes": 200.0, "peak_reserved_bytes": 200.0,
                                 "live_at_peak": {"bytes": 50, "allocations": 1, "before_recording_bytes": 50},
                                 "top_at_peak": [{"op": bad, "bytes": 50, "allocations": 1}],
                                 "top_allocating": [{"op": bad, "bytes": 50, "allocations": 1}],
                                 "steps": [{"step": bad, "start_us": 0, "dur_us": 10, "peak_allocated_bytes": 100}],
                                 "curve": {"t_us": [0, 5, "x", 9], "allocated": [10, 100, 5, float("nan")],
                                           "reserved": [200, 200, 200]}}]}}
    html = render(a, "html")
    assert bad not in html and "&lt;script&gt;" in html
    assert '<svg class="memchart"' in html
    md = render(a, "md")
    assert "<script>" not in md


def test_link_finds_each_allocations_op():
    """links.memory_op (found with the launches' ops, one sort) = the innermost op of the event's thread
    running at its time that is not an allocation helper, checked one by one on every 50th event."""
    t = load_trace(shared_trace("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"))
    own = link(t).memory_op
    assert np.array_equal(own, mem.owner_ops(t))  # the same without the link stage's pass
    ops, m = t.ops, t.memory
    helper = np.array([n in ALLOC_HELPERS for n in t.names])[ops.name]
    for i in range(0, len(m), 50):
        c = np.flatnonzero((ops.thread == m.thread[i]) & (ops.ts <= m.ts[i]) & (ops.end >= m.ts[i]) & ~helper)
        ref = c[np.lexsort((-ops.end[c], ops.ts[c]))][-1] if len(c) else -1  # the latest start, then the shortest
        assert own[i] == ref


def test_modules_holding_memory_at_the_peak():
    """Qwen1.5 on H100 recorded python_function events (nn.Module entries): the live allocations at the peak
    grouped by the module of the op that made them add up to what the recorded allocations hold."""
    from traceana.modules.attribute import places

    t = load_trace(shared_trace("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    links = link(t)
    sec = mem.memory_section(t, links, places(t, links, len(t.ops)), top=10_000)
    d = sec["devices"][0]
    mods = d["modules_at_peak"]
    # 1,103,766,016 B in 58 allocations, every one in exactly one module row
    assert sum(r["bytes"] for r in mods) == d["live_at_peak"]["bytes"] == 1_103_766_016
    assert sum(r["allocations"] for r in mods) == d["live_at_peak"]["allocations"] == 58
    assert any(r["module"].startswith("Qwen2Model") for r in mods)
    # without modules recorded (no places given), no such list
    assert "modules_at_peak" not in mem.memory_section(t, links)["devices"][0]


# ---------------------------------------------------------------------------- impossible byte counts

def _mem_event(ts, nbytes, tot, res, addr):
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
            "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": nbytes, "Total Allocated": tot,
                     "Total Reserved": res}}


@pytest.mark.parametrize("pure", [False, True], ids=["scanner", "python"])
def test_impossible_byte_counts_are_left_out_with_a_warning(tmp_path, monkeypatch, pure):
    """Six [memory] events on cuda:0, three impossible: Total Allocated 1e30 (and Bytes 1e30), a negative Total
    Allocated, Bytes 2**60 (over 1 PiB). Before: accepted, the peak was 1e30 bytes, no warning. Now the peak is
    the largest plausible total, 6144 bytes, from the three plausible events."""
    if pure:
        monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    ev = [synth.op("aten::mm", 10, 50, 1, [[64, 64], [64, 64]]), synth.launch(20, 1, 1),
          synth.kernel("ampere_sgemm_64x64_nn", 30, 20, 1, 1),
          _mem_event(12, 1024, 1024, 2 << 20, 1000), _mem_event(13, 4096, 5120, 2 << 20, 2000),
          _mem_event(14, 1e30, 1e30, 2 << 20, 3000), _mem_event(15, -1024, -3000, 2 << 20, 1000),
          _mem_event(16, 1024, 6144, 2 << 20, 4000), _mem_event(17, 2**60, 6144 + 2**60, 2 << 20, 5000)]
    a = analyze(synth.write(tmp_path, synth.trace(ev)))
    d = a["memory"]["devices"][0]
    # plausible totals 1024, 5120, 6144 (the events at 12, 13 and 16 µs): the peak 6144, 4 µs after the first
    assert d["peak_allocated_bytes"] == 6144.0 and d["peak_at_us"] == 4.0 and d["events"] == 3 and d["allocations"] == 3
    assert d["allocated_bytes"] == 1024 + 4096 + 1024
    warn = [w for w in a["warnings"] if "[memory] event" in w]
    assert warn == ["3 of 6 [memory] events with impossible byte counts (a negative total, or more than 1 PiB; "
                    "first: Total Allocated = 1e+30 at 14.000 µs) left out of the memory peaks and curve"]
    assert max(d["curve"]["allocated"]) == 6144
