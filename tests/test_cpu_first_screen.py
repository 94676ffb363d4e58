"""A CPU-only trace gets the GPU's first screen (diagnose/cpu_levers.py, modules/cpu_table.py,
render/cpu_view.py): the CPU's device line, the busiest thread's account and its one sentence,
"Do this first" from the CPU verdicts, modules and source lines from CPU self time, memory; and no
GPU-only section. Real transformers training and inference steps recorded here on CPU with stacks and
memory events; small synthetic traces for the levers' arithmetic."""

from __future__ import annotations

import html as html_mod
import re
from pathlib import Path

import numpy as np
import pytest

from tests import synth
from tests.mdlint import problems
from traceana import units as u
from traceana.analysis import analyze
from traceana.cli import main
from traceana.render import first, render
from traceana.render.markdown import SHORT_CHARS


# ----------------------------------------------------------------------------- the levers' arithmetic


def _cpu_trace(events) -> dict:
    return synth.trace(events, props=())  # no deviceProperties, no GPU events: a CPU-only run


def test_element_wise_chain_is_one_lever(tmp_path):
    # mul -> add -> relu on one 1024x1024 fp32 tensor, each reading the one before's output
    big = [1024, 1024]
    events = [synth.op("aten::mul", 0, 1000, 1, [big, big]), synth.op("aten::add", 1000, 1000, 2, [big, big, []],
                                                                         ["float", "float", "Scalar"]),
              synth.op("aten::relu", 2000, 600, 3, [big])]
    a = analyze(synth.write(tmp_path, _cpu_trace(events)))
    fuse = next(f for f in a["findings"] if f["kind"] == "cpu_fusion")
    assert fuse["title"].startswith("Fuse mul → add → relu")
    # fused, the chain costs about its longest op: 1000 + 1000 + 600 - 1000 = 1600 µs
    assert fuse["saving_us"] == pytest.approx(1600.0)
    # the first lever's span after: the 2,600 µs span less its saving, each µs once
    lever = next(p for p in a["plan"] if p["kind"] == "cpu_fusion")
    assert lever["span_now_us"] == pytest.approx(2600.0)
    if lever is a["plan"][0]:
        assert lever["span_after_us"] == pytest.approx(2600.0 - 1600.0)


def test_an_op_between_breaks_the_chain(tmp_path):
    big = [1024, 1024]
    events = [synth.op("aten::mul", 0, 1000, 1, [big, big]), synth.op("aten::mm", 1000, 5000, 2, [big, big]),
              synth.op("aten::relu", 6000, 600, 3, [big])]
    a = analyze(synth.write(tmp_path, _cpu_trace(events)))
    assert not any(f["kind"] == "cpu_fusion" for f in a["findings"])


def test_dispatch_bound_ops_and_the_account(tmp_path):
    # 100 aten::view calls of 2 µs: no work (a view), so all of their 200 µs is per-op cost; 1,000 µs between
    # the first and the last with no op running: the account's "outside any op"
    events = [synth.op("aten::view", i * 12, 2, i + 1, [[4], [1]], ["float", "int"]) for i in range(100)]
    a = analyze(synth.write(tmp_path, _cpu_trace(events)))
    disp = next(f for f in a["findings"] if f["kind"] == "cpu_dispatch")
    assert disp["saving_us"] == pytest.approx(100 * 2.0)  # 100 calls x 2 µs, nothing of it work
    assert disp["title"].startswith("100 calls of tiny ops (aten::view)")
    acc = a["cpu"]["account"]
    span = 99 * 12 + 2  # first start 0, last end 99 x 12 + 2 = 1,190 µs
    assert acc["span_us"] == pytest.approx(span) and acc["busy_us"] == pytest.approx(200.0)
    assert acc["outside_us"] == pytest.approx(span - 200.0)  # 990 µs with no op on the thread
    assert sum(t["us"] for t in acc["terms"]) == pytest.approx(span)  # each µs once
    assert first.terms(a)[-1]["key"] == "outside_ops"
    # 990 / 1,190 = 83.2% of the span runs no op: over PYTHON_SHARE (20%), a lever of its own
    py = next(f for f in a["findings"] if f["kind"] == "cpu_python")
    assert py["saving_us"] == pytest.approx(span - 200.0) and py["title"].startswith("83.2% of the span runs no op")


def test_a_lever_and_its_card_say_the_same_saving(tmp_path):
    events = [synth.op("aten::view", i * 12, 2, i + 1, [[4], [1]], ["float", "int"]) for i in range(100)]
    a = analyze(synth.write(tmp_path, _cpu_trace(events)))
    levers, cards = first.plan(a), first.cards(a)
    assert levers
    for p in levers:
        card = next(c for c in cards if p["finding"] in {m["index"] for m in c["members"]})
        assert (card["title"], card["saving_text"]) == (p["title"], p["saving_text"])


# ----------------------------------------------------------------------------- real models, recorded here


def _record_cpu(key: str, train: bool, folder: Path) -> str:
    """A transformers model's step recorded on CPU as torch.profiler writes it (stacks and memory on)."""
    pytest.importorskip("transformers")
    import torch

    from tests.recorded import record, write
    from tests.recorded_models import MODELS

    torch.manual_seed(0)
    model, fwd = MODELS[key]("eager")
    if train:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def run():
            opt.zero_grad(set_to_none=True)
            fwd().float().pow(2).mean().backward()
            opt.step()
    else:
        model.eval()

        def run():
            with torch.no_grad():
                fwd()
    run()  # warm-up
    return write(record(run, with_stack=True, profile_memory=True), folder / f"{key}_{'train' if train else 'eval'}.json.gz")


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    """A BERT masked-LM training step (forward, loss, backward, AdamW) and a ViT inference step, CPU only."""
    from tests.recorded import train_step_doc, write

    folder = tmp_path_factory.mktemp("cpu_runs")
    return {"train": write(train_step_doc(), folder / "bert_mlm_train.json.gz"),
            "vit": _record_cpu("vit", False, folder)}


@pytest.mark.parametrize("run", ["train", "vit"])
def test_recorded_step_first_screen(cpu_runs, run, tmp_path, capsys):
    path = cpu_runs[run]
    a = analyze(path)
    cpu = a["cpu"]
    # the device line: the CPU (the trace names no model: the line says how to), its roofs, the span
    line = first.device_line(a)
    assert line.startswith("CPU (model and cores not recorded in the trace") and "BLAS fp32 0.36 TFLOP/s" in line
    assert f"span {u.us(cpu['account']['span_us'])}" in line
    # the account: every µs of the busiest thread's span once, and its sentence
    acc = cpu["account"]
    assert sum(t["us"] for t in acc["terms"]) == pytest.approx(acc["span_us"])
    assert first.sentence(a).startswith(f"Of the {u.us(acc['span_us'])} span: CPU ops {u.us(acc['busy_us'])}")
    # Do this first: 1 to 3 levers from the CPU verdicts; the first one's span after is the span less its
    # saving (nothing above it to overlap)
    levers = a["plan"]
    assert 1 <= len(levers) <= 3
    assert levers[0]["span_after_us"] == pytest.approx(acc["span_us"] - levers[0]["saving_us"], rel=1e-9)
    assert all(p["span_after_us"] <= q["span_after_us"] for q, p in zip(levers, levers[1:]))
    # modules and source lines from CPU self time (with_stack=True)
    mods = a["modules"]
    assert mods["source"] == "python_function" and mods["time"] == "cpu_self" and mods["tree"]
    assert mods["total"]["time_us"] == pytest.approx(cpu["roofline"]["self_us"])  # the verdicts' self time, shared out
    top = cpu["roofline"]["verdicts"][:10]
    placed = [v for v in top if v.get("module_class") and v.get("source")]
    assert len(placed) >= 5, [(v["name"], v.get("module_class"), v.get("source")) for v in top]
    assert all(re.search(r"\.py:\d+$", v["source"]) for v in placed)
    assert all("." not in v["module_class"].split("/")[0] for v in placed)  # one notation: '/' between modules
    # the HTML: the first screen, and no GPU-only section
    page = render(a, "html")
    head = page.split("<main>")[0]
    assert 'class="devline">CPU' in head and 'id="plan"' in head
    assert html_mod.escape(first.sentence(a), quote=False) in head
    for gpu_only in ("unknown device", 'id="time"', "Time by bound", "GPU events", "dense peak", "Utilisation and idle"):
        assert gpu_only not in page, gpu_only
    plotted = sum(1 for v in cpu["roofline"]["verdicts"] if (v.get("flops") or 0) > 0 and (v.get("achieved_gflops") or 0) > 0
                  and (v.get("bytes") or 0) > 0)
    assert page.count('class="pt b-') == plotted > 0  # one circle per costed signature
    assert f'<h2>Op signatures <span class="count">{len(cpu["roofline"]["verdicts"]):,}</span>' in page
    assert "CPU self time" in page.split('id="coverage"')[1]
    if a["memory"]["recorded"]:
        assert 'id="memory"' in page
    # each lever and its card: one title, one saving
    for p in first.plan(a):
        card = next(c for c in first.cards(a) if p["finding"] in {m["index"] for m in c["members"]})
        assert card["saving_text"] == p["saving_text"]
        assert html_mod.escape(p["saving_text"], quote=False) in page.split('id="findings"')[1]
    # markdown: the same first screen in at most 8,000 characters with its marker line
    md = render(a, "md")
    assert len(md) <= SHORT_CHARS and problems(md) == []
    assert "**Device:** CPU" in md and "### Do this first" in md and "by CPU self time" in md
    # the terminal: the device line first
    out = tmp_path / "r.md"
    assert main(["report", path, "-o", str(out)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith(f"{Path(path).name}: CPU (") and said[1].strip().startswith("Of the ")


def test_training_step_levers_name_the_optimizer(cpu_runs):
    a = analyze(cpu_runs["train"])
    opt = next(f for f in a["findings"] if f["kind"] == "cpu_optimizer")
    assert opt["title"].startswith("The AdamW step runs one parameter at a time")
    assert "fused=True" in opt["fix"]
    # its Python part: the step annotation's time less the top-level ops inside it
    from traceana.diagnose.cpu_roofline import judge_ops
    from traceana.load import load_trace

    trace = load_trace(cpu_runs["train"])
    ann = trace.annotations
    k = next(i for i, c in enumerate(ann.name.tolist()) if trace.names[c].startswith("Optimizer.step#AdamW"))
    j = judge_ops(trace, None)
    ops = trace.ops
    inside = j.top_level & (ops.ts >= ann.ts[k]) & (ops.ts < ann.end[k])
    python = (ann.end[k] - ann.ts[k]) - float((ops.end - ops.ts)[inside].sum())
    assert f"and {u.us(python)} of Python between them" in opt["text"]
    assert np.isfinite(python) and python > 0
