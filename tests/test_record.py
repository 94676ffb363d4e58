"""`traceana record -- python train.py` and `with traceana.profile(...)`: end to end on CPU."""

from __future__ import annotations

import gc
import gzip
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")

import traceana  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from traceana.cli import main  # noqa: E402
from traceana.measure.record import TRACE_NAME, activities, parse_command, trace_name  # noqa: E402
from traceana.errors import BadInput  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(REPO)}

# Linear(64, 128) -> ReLU -> Linear(128, 10) on a batch of 32, SGD; steps from argv[1]
TRAIN = textwrap.dedent("""\
    import sys
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for _ in range(int(sys.argv[1])):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print("trained", sys.argv[1])
""")


def _script(tmp_path, text: str = TRAIN, name: str = "train.py") -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def _events(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def _one_trace(folder) -> str:
    traces = [n for n in os.listdir(folder) if n.endswith(".pt.trace.json.gz")]
    assert len(traces) == 1, traces
    return os.path.join(folder, traces[0])


def test_record_cli_end_to_end(tmp_path):
    script = _script(tmp_path)
    out = tmp_path / "traces"
    t0 = time.time_ns() // 1_000_000
    proc = subprocess.run([sys.executable, "-m", "traceana", "record", "--steps", "2", "--wait", "1", "--warmup", "1",
                           "-o", str(out), "--", "python", script, "8"],
                          capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "trained 8" in proc.stdout  # the program ran, with its arguments
    assert "USDT:" not in proc.stderr + proc.stdout  # kineto's tracepoint log stays out of the terminal
    trace = _one_trace(out)
    m = TRACE_NAME.match(os.path.basename(trace))
    assert m and m["host"] == socket.gethostname() and int(m["pid"]) > 0
    assert t0 <= int(m["ms"]) <= time.time_ns() // 1_000_000
    # step 1 never recorded, wait 1, warm up 1, record 2: iterations 1+1+1+1 = 4 and 5 of 8
    assert "(iterations 4-5 of 8)" in proc.stdout
    ev = _events(trace)
    steps = sorted(e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    dims = {(e["name"], json.dumps(e["args"]["Input Dims"])) for e in ev
            if e.get("name") in ("aten::addmm", "aten::mm") and "Input Dims" in e.get("args", {})}
    # forward: addmm(bias [128], x [32, 64], W1^T [64, 128]) and addmm(bias [10], h [32, 128], W2^T [128, 10])
    assert ("aten::addmm", json.dumps([[128], [32, 64], [64, 128], [], []])) in dims
    assert ("aten::addmm", json.dumps([[10], [32, 128], [128, 10], [], []])) in dims
    # backward: grad of h = grad_out [32, 10] @ W2 [10, 128]
    assert ("aten::mm", json.dumps([[32, 10], [10, 128]])) in dims
    # 2 recorded iterations x 2 Linear layers = 4 forward addmm calls
    assert sum(e.get("name") == "aten::addmm" for e in ev) == 4
    html, md = trace[: -len(".json.gz")] + ".report.html", trace[: -len(".json.gz")] + ".report.md"
    assert os.path.isfile(html) and os.path.isfile(md)
    report = open(md, encoding="utf-8").read()
    assert "aten::addmm" in report and "aten::mm" in report and "(2 profiler steps)" in report
    assert "aten::addmm" in open(html, encoding="utf-8").read()
    assert f"report written to {html}, {md}" in proc.stdout
    assert not (out / "capture_traces").exists()  # nothing compiled or captured: no capture trace


def test_no_optimizer_step_records_the_whole_run(tmp_path):
    script = _script(tmp_path, "import torch\nfor _ in range(3):\n    torch.mm(torch.ones(8, 4), torch.ones(4, 2))\n",
                     "infer.py")
    out = tmp_path / "o"
    assert main(["record", "-q", "-o", str(out), "--no-report", "--", "python", script]) == 0
    ev = _events(_one_trace(out))
    mm = [e for e in ev if e.get("name") == "aten::mm"]
    assert len(mm) == 3 and mm[0]["args"]["Input Dims"] == [[8, 4], [4, 2]]  # all 3 calls: the whole run
    assert not os.path.exists(_one_trace(out)[: -len(".json.gz")] + ".report.html")  # --no-report


def test_too_few_steps_keeps_the_run_up_to_the_first_step(tmp_path):
    out = tmp_path / "o"
    with traceana.profile(out, steps=3, wait=1, warmup=1, report=False, quiet=True) as p:
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            model(torch.ones(3, 4)).sum().backward()
            opt.step()
    assert p.steps_seen == 2
    assert p.window.startswith("the run up to its first step: the program made 2 steps")
    assert "a full window needs 6" in p.window  # 1 + wait 1 + warmup 1 + steps 3
    ev = _events(p.trace)
    # the first iteration only: one forward addmm on [3, 4] x [4, 2]
    addmm = [e for e in ev if e.get("name") == "aten::addmm"]
    assert len(addmm) == 1 and addmm[0]["args"]["Input Dims"][1:3] == [[3, 4], [4, 2]]


def test_profile_in_code_manual_steps_and_report(tmp_path):
    with traceana.profile(tmp_path, steps=2, wait=0, warmup=1, step_on="manual", quiet=True) as p:
        a = torch.ones(16, 32)
        for i in range(6):
            torch.mm(a, torch.ones(32, 8 + i))  # the width tells the iterations apart
            p.step()
    # iteration 1 never recorded, warm-up on 2, record 3 and 4: widths 8+2 and 8+3
    assert p.window == "iterations 3-4 of 6"
    widths = sorted(e["args"]["Input Dims"][1][1] for e in _events(p.trace) if e.get("name") == "aten::mm")
    assert widths == [10, 11]
    assert [os.path.basename(r) for r in p.reports] == [
        os.path.basename(p.trace)[: -len(".json.gz")] + ext for ext in (".report.html", ".report.md")]
    assert p.analysis["cpu"]["steps"] == 2 and p.analysis["trace"]["steps"] == 2
    with pytest.raises(ValueError, match="manual"):
        traceana.profile(tmp_path).step()


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_second_optimizer_does_not_count_steps(tmp_path):
    with traceana.profile(tmp_path, steps=1, wait=0, warmup=0, report=False, quiet=True) as p:
        m1, m2 = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
        o1, o2 = torch.optim.SGD(m1.parameters(), lr=0.1), torch.optim.SGD(m2.parameters(), lr=0.1)
        for _ in range(4):
            (m1(torch.ones(1, 2)).sum() + m2(torch.ones(1, 2)).sum()).backward()
            o1.step()
            o2.step()
    assert p.steps_seen == 4  # o1's steps only, not 8


@pytest.mark.parametrize("body, code, words", [
    ("raise ValueError('boom')\n", 1, "prog.py raised ValueError: boom (prog.py:3)"),
    ("import sys\nsys.exit(3)\n", 3, "prog.py exited with status 3"),
])
def test_failing_program_one_line_and_its_status(tmp_path, body, code, words):
    script = _script(tmp_path, "import torch\ntorch.mm(torch.ones(2, 2), torch.ones(2, 2))\n" + body, "prog.py")
    proc = subprocess.run([sys.executable, "-m", "traceana", "record", "-o", str(tmp_path / "o"), "--", "python",
                           script], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert proc.returncode == code
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("traceana:")]
    assert len(ours) == 1 and words in ours[0] and "Traceback" not in proc.stderr
    assert "the trace recorded so far" in ours[0]  # kept, but no report for a failed run
    assert not [n for n in os.listdir(tmp_path / "o") if n.endswith(".report.html")]


@pytest.mark.parametrize("body, line", [
    # the program's own profiler around its work, while traceana records the whole run
    ("from torch.profiler import profile\nwith profile() as p:\n    torch.mm(torch.ones(2, 2), torch.ones(2, 2))\n", 4),
    # the old autograd profiler, started after two optimizer steps (traceana's schedule is waiting)
    ("w = torch.ones(2, requires_grad=True)\nopt = torch.optim.SGD([w], lr=0.1)\nfor _ in range(2):\n"
     "    w.sum().backward(); opt.step()\nwith torch.autograd.profiler.profile():\n    w * 2\n", 7),
])
def test_a_program_that_runs_torch_profiler_itself_is_refused(tmp_path, body, line):
    """torch cannot run two profilers at once. Before: the run died of a segfault (exit 139), with
    no message and no trace. Now: one line naming where the program starts its profiler, exit 2."""
    script = _script(tmp_path, "import torch\ntorch.mm(torch.ones(2, 2), torch.ones(2, 2))\n" + body, "prog.py")
    proc = subprocess.run([sys.executable, "-m", "traceana", "record", "-o", str(tmp_path / "o"), "--", "python",
                           script], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("traceana:")]
    assert len(ours) == 1 and "Traceback" not in proc.stderr and "USDT:" not in proc.stderr, proc.stderr
    assert f"prog.py starts torch.profiler itself (prog.py:{line})" in ours[0], ours[0]
    assert not [n for n in os.listdir(tmp_path / "o") if n.endswith(".report.html")]


@pytest.mark.parametrize("argv, words", [
    ([], "no command after --"),
    (["python"], "no script after python"),
    (["python", "missing.py"], "missing.py: no such file"),
    (["ls", "-l"], "'ls' is not a Python program"),
    (["python", "-c", "1"], "python option -c is not supported"),
    (["python", "-m", "no_such_module_here"], "no module named 'no_such_module_here'"),
])
def test_bad_command_exit_2_one_line(tmp_path, capsys, argv, words):
    assert main(["record", "-o", str(tmp_path), "--", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_command_forms(tmp_path):
    script = _script(tmp_path)
    assert parse_command(["python3", script, "--lr", "3"]) == ("path", script, ["--lr", "3"])
    assert parse_command([sys.executable, script]) == ("path", script, [])
    assert parse_command([script, "4"]) == ("path", script, ["4"])
    assert parse_command(["python", "-m", "json.tool", "x"]) == ("module", "json.tool", ["x"])
    with pytest.raises(BadInput):
        parse_command(["python", str(tmp_path)])


def test_trace_name_and_activities(monkeypatch):
    from torch.profiler import ProfilerActivity

    name = trace_name("host_42", 1700000000123)
    assert name == "host_42.1700000000123.pt.trace.json.gz" and TRACE_NAME.match(name)["pid"] == "42"
    assert activities(cuda=False) == [ProfilerActivity.CPU]
    # CUDA activity is added when a GPU is there (recording it needs one; the choice is tested here)
    assert activities(cuda=True) == [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert activities() == [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def test_profile_in_code_refuses_a_nested_profiler(tmp_path):
    """In code, the block's own profiler start is a RuntimeError naming where, and the recording stops."""
    import torch.autograd.profiler as ap

    real = ap._enable_profiler
    with pytest.raises(RuntimeError, match=r"starts torch.profiler itself \(test_record.py:\d+\)"):
        with traceana.profile(tmp_path / "o", step_on="manual", report=False, quiet=True):
            torch.mm(torch.ones(2, 2), torch.ones(2, 2))
            with torch.profiler.profile():
                torch.ones(2) * 2
    assert ap._enable_profiler is real  # the guard is gone
    with torch.profiler.profile() as p:  # and torch's profiler works again
        torch.ones(2) * 2
    assert any(e.name == "aten::mul" for e in p.events())


# torch.compile'd pointwise function (Inductor's CPU backend: one C++ kernel) times a parameter, SGD; the compiled
# part takes no grad-requiring input, so no backward graph is compiled (kept small: compile time on 2 cores)
COMPILED = textwrap.dedent("""\
    import sys
    import torch
    import torch._inductor.config
    torch._inductor.config.compile_threads = 1  # no compile worker pool: one more process importing torch
    torch.manual_seed(0)
    f = torch.compile(lambda x: (x.sin() + 1.0).relu())
    w = torch.nn.Parameter(torch.ones(64))
    opt = torch.optim.SGD([w], lr=0.1)
    x = torch.randn(64)
    for _ in range(int(sys.argv[1])):
        opt.zero_grad()
        (f(x) * w).sum().backward()
        opt.step()
    print("trained", sys.argv[1])
""")


def test_record_keeps_the_compile_steps_as_the_capture_trace(tmp_path, capsys):
    script = _script(tmp_path, COMPILED, "compiled.py")
    out = tmp_path / "o"
    # step 1 compiles; the capture steps are 1 and the wait step 2; warm up on 3, record 4
    assert main(["record", "--steps", "1", "--wait", "1", "--warmup", "1", "-o", str(out), "--",
                 "python", script, "4"]) == 0
    printed = capsys.readouterr().out
    assert "(iterations 4-4 of 4)" in printed  # the same window as without the capture steps
    capture = out / "capture_traces"
    (entry,) = json.loads((capture / "execution_details.json").read_text())
    assert entry["steps"] == "1-2" and entry["compiled"] is True and entry["graph_captures"] == 0
    assert entry["recorded_by"] == "traceana record" and entry["batch_size"] is None
    assert f"capture trace written to {capture / entry['file']} (steps 1-2: torch.compile's compilation" in printed
    cap_names = {e.get("name") for e in _events(str(capture / entry["file"]))}
    steady = {e.get("name") for e in _events(_one_trace(out))}
    # the capture trace holds the compilation (TorchDynamo's frame compile) and the first compiled runs
    assert "Torch-Compiled Region: 0/0" in cap_names
    assert "entire_frame_compile" in cap_names and "entire_frame_compile" not in steady
    assert "Torch-Compiled Region: 0/0" in steady
    assert sorted(n for n in steady if n and n.startswith("ProfilerStep#")) == ["ProfilerStep#1"]  # one iteration
    # the report found it beside the trace; on a CPU no graph is replayed, so it says it was not needed
    html = open(_one_trace(out)[: -len(".json.gz")] + ".report.html", encoding="utf-8").read()
    assert f"{entry['file']}) found but not needed: this trace replays no CUDA/HIP graph" in html


def test_graph_capture_is_counted_through_torch_api_without_a_gpu(monkeypatch):
    """The CUDA path: captures are seen through torch.cuda.CUDAGraph.capture_begin (recording them needs a GPU;
    here the wrapper is installed on torch's class, called with a stand-in capture, and removed)."""
    from traceana.measure.record_capture import GraphCapture

    import torch.cuda.graphs as graphs

    real = graphs.CUDAGraph.capture_begin
    seen = []
    monkeypatch.setattr(graphs.CUDAGraph, "capture_begin", lambda self, *a, **k: seen.append((a, k)))
    stand_in = graphs.CUDAGraph.capture_begin
    cap = GraphCapture("auto")
    cap.start()
    assert graphs.CUDAGraph.capture_begin is not stand_in  # wrapped on torch's own class
    assert not cap.used()  # nothing compiled or captured yet
    graphs.CUDAGraph.capture_begin(object(), pool=None)  # what torch.cuda.graph(...) calls on entering
    assert cap.captures == 1 and seen == [((), {"pool": None})] and cap.used()
    # the capture steps: the first step, then the wait steps (at least one: cudagraph trees capture on the 2nd run)
    assert cap.holds(1, 2) and cap.holds(2, 2) and not cap.holds(3, 2)
    assert (cap.held, cap.wait(2), cap.wait_left(2)) == (2, 2, 0)
    assert cap.describe() == "steps 1-3: 1 CUDA graph capture"
    cap.stop()
    assert graphs.CUDAGraph.capture_begin is stand_in  # put back
    monkeypatch.undo()
    assert graphs.CUDAGraph.capture_begin is real
    off = GraphCapture("off")
    off.start()
    assert not off.holds(1, 1) and off.wait(1) == 1  # --capture off: the schedule as before
    with pytest.raises(ValueError):
        GraphCapture("sometimes")


# A tiny BERT masked-LM trained with AdamW for argv[1] steps. BY_HAND=1: under torch.profiler set by hand with
# the options `traceana record --with-stack` uses (record_shapes, with_stack, CPU activity; the schedule
# wait 1, warmup 1, active 2 from the end of the first step), the trace exported to $OUT.
STACK_TRAIN = textwrap.dedent("""\
    import os, sys
    import torch, transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=1000, max_position_embeddings=64, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128)
    model = transformers.BertForMaskedLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(0))
    prof = None
    if os.environ.get("BY_HAND") == "1":
        from torch.profiler import ProfilerActivity, profile, schedule
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                       schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                       on_trace_ready=lambda p: p.export_chrome_trace(os.environ["OUT"]))
    for i in range(int(sys.argv[1])):
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        if prof is not None:
            if i == 0:
                prof.start()  # as traceana counts: the schedule starts at the end of the first step
            else:
                prof.step()
    if prof is not None:
        prof.stop()
""")

#: runs a Python program in the child and prints its peak RSS (VmHWM: its own, from exec on; ru_maxrss
#: of a child forked from the large pytest process would start at pytest's) as the last line
_PEAK = textwrap.dedent("""\
    import atexit, runpy, sys
    atexit.register(lambda: print("VmHWM", [int(x.split()[1]) for x in open("/proc/self/status")
                                           if x.startswith("VmHWM:")][0]))
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__") if sys.argv[0] == "traceana" else \\
        runpy.run_path(sys.argv[0], run_name="__main__")
""")


def _peak_kb(args: list[str], env: dict, cwd) -> int:
    proc = subprocess.run([sys.executable, "-c", _PEAK, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout.strip().splitlines()[-1].split()[1])


def test_with_stack_costs_what_the_profiler_set_by_hand_costs(tmp_path):
    """`record --with-stack` keeps the program's setup (importing transformers, building the model) out of the
    Python tracer, so its peak memory is that of the same profiler options set by hand around the loop (it once
    held the setup's millions of Python calls: 4.9 GB against 0.44 GB for a GPT-2 + BERT script)."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc: the peak is read from /proc/self/status")
    pytest.importorskip("transformers")
    script = _script(tmp_path, STACK_TRAIN, "bert_train.py")
    out = tmp_path / "rec"
    rec = _peak_kb(["traceana", "record", "--with-stack", "--steps", "2", "--no-report", "-q", "-o", str(out), "--",
                    "python", script, "6"], ENV, tmp_path)
    hand = _peak_kb([script, "6"], {**ENV, "BY_HAND": "1", "OUT": str(tmp_path / "hand.json")}, tmp_path)
    assert rec <= 1.5 * hand, (rec, hand)
    # the same recording: the two steps of the window, with the model's modules as Python frames in both
    ev, by_hand = _events(_one_trace(out)), json.loads((tmp_path / "hand.json").read_text())["traceEvents"]
    for events in (ev, by_hand):
        steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
        assert len(steps) == 2, steps
        assert any(e.get("cat") == "python_function" and e.get("name", "").startswith("nn.Module: BertForMaskedLM")
                   for e in events)
    count = {k: sum(e.get("cat") == "python_function" for e in events) for k, events in (("rec", ev), ("hand", by_hand))}
    assert abs(count["rec"] - count["hand"]) <= 0.05 * count["hand"], count


def test_with_stack_a_program_that_never_steps_has_stacks_from_its_first_module_call(tmp_path):
    script = _script(tmp_path, "import torch\nm = torch.nn.Linear(4, 2)\nfor _ in range(3):\n    m(torch.ones(8, 4))\n",
                     "infer.py")
    out = tmp_path / "o"
    assert main(["record", "-q", "--with-stack", "-o", str(out), "--no-report", "--", "python", script]) == 0
    ev = _events(_one_trace(out))
    assert sum(e.get("name") == "aten::addmm" for e in ev) == 3  # every call: the whole run from the first one
    assert sum(e.get("cat") == "python_function" and e.get("name") == "nn.Module: Linear_0" for e in ev) == 3


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_step_boundaries_are_taken_after_the_optimizers_record_function(tmp_path):
    """The crash this suite had (a segfault or an abort now and then, in a later garbage collection or
    record function): the profiler was stopped and the next one started from torch's step post-hook,
    inside the step's record_function("Optimizer.step#…"), which then closed under the new profiler
    with the old one's freed context. The boundary is now taken after the step has returned: the
    callback sees no step running, and many recordings in a row stay sound."""
    from traceana.measure.optimizer_steps import AfterStep

    m = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)  # its class wrapped by torch before the install
    seen = []
    hook = AfterStep(lambda o: seen.append((o is opt, torch.autograd.profiler._is_profiler_enabled)))
    real = type(opt).step
    hook.install()
    try:
        m(torch.ones(1, 2)).sum().backward()
        opt.step()
        adam = torch.optim.Adam(m.parameters())  # a class torch wraps while installed
        adam.step()
    finally:
        hook.remove()
    assert [s[0] for s in seen] == [True, False]
    assert type(opt).step is real and real.hooked  # torch's own wrapper back, still marked
    assert getattr(torch.optim.Adam.step, "hooked", False) and not hasattr(torch.optim.Adam.step, "_traceana_inner")
    for i in range(12):  # stop / start at every step boundary, a dozen recordings in one process
        with traceana.profile(tmp_path / str(i), steps=1, wait=0, warmup=0, report=False, quiet=True) as p:
            for _ in range(3):
                m(torch.ones(1, 2)).sum().backward()
                opt.step()
        gc.collect()
        assert p.steps_seen == 3 and p.trace
        # the window is taken between two steps: the recorded step's Optimizer.step event ends inside its
        # ProfilerStep (with the stop inside the record function it ran past the step's end, cut there)
        ev = _events(p.trace)
        (step,) = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
        (update,) = [e for e in ev if e.get("name") == "Optimizer.step#SGD.step"]
        assert step["ts"] <= update["ts"] and update["ts"] + update["dur"] <= step["ts"] + step["dur"]
    with torch.profiler.profile() as prof:  # after them, one Optimizer.step event per step, not two
        opt.step()
    assert sum(e.name == "Optimizer.step#SGD.step" for e in prof.events()) == 1
