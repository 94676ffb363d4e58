"""One number per thing in the report: a lever and its card say the same saving ("X alone; Y after the
levers above" in both places when the levers above take part of it), names are never cut to ambiguity,
one module-path notation, no trivial rows (a host's 16 B beside a GPU's GiB, 0 B, sub-µs gaps), memory
that could not be charged to an op says why, and the PR markdown fits 8,000 characters with its marker
line. The browser side (label / point overlaps, heading spacing) is in test_browser.py."""

from __future__ import annotations

import pytest

from tests.analyses import analysis
from tests.conftest import SAMPLES
from tests.mdlint import problems
from traceana.analysis import analyze
from traceana.render import first, render
from traceana.render.markdown import SHORT_CHARS
from traceana.render.memory import memory_line, memory_view
from traceana.render.utilisation import utilisation_view
from traceana.units import kernel_names

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
VLLM = "tracelens/vllm_decode_full/graph_execution.json.gz"
RESNET = "kineto/worker0.1623143089861.pt.trace.json.gz"


def test_saving_text_says_both_numbers_only_when_they_differ():
    assert first.saving_text(504.3, 336.2, 2) == "saves up to 504.3 µs alone; 336.2 µs after the levers above"
    assert first.saving_text(54_593.9, 48_025.0, 0) == "saves up to 54.59 ms alone; 48.02 ms off the span"
    # within 1% they are one number: 1,000 vs 995 µs
    assert first.saving_text(1000.0, 995.0, 1) == "saves up to 1.000 ms"
    assert first.saving_text(0.0, None, 0) == ""


def test_t4_sample_lever_and_card_agree():
    a = analyze(str(SAMPLES / "t4_seed_pow_mul.json"))
    levers, cards = first.plan(a), first.cards(a)
    p2, p3 = a["plan"][1], a["plan"][2]
    then = p2["span_after_us"] - p3["span_after_us"]  # what lever 3 takes off the span after levers 1 and 2
    assert levers[2]["then_us"] == pytest.approx(then)
    assert levers[2]["saving_text"] == first.saving_text(p3["saving_us"], then, 2)
    assert "alone;" in levers[2]["saving_text"]  # aten::mul_'s 504.3 µs, of which the fusion above takes some
    for p in levers:
        card = next(c for c in cards if p["finding"] in {m["index"] for m in c["members"]})
        assert (card["title"], card["saving_text"]) == (p["title"], p["saving_text"])
        assert card["lever"] == levers.index(p)
    page = render(a, "html")
    plan_html, cards_html = page.split('id="plan"')[1].split("</section>")[0], page.split('id="findings"')[1]
    for p in levers:
        said = p["saving_text"].replace("µ", "µ")
        assert said in plan_html and said in cards_html


@pytest.mark.parametrize("rel", [QWEN, VLLM, "hta/rank0.json.gz", RESNET])
def test_shared_levers_and_cards_agree(rel):
    a = analysis(rel)
    cards = first.cards(a)
    for p in first.plan(a):
        card = next(c for c in cards if p["finding"] in {m["index"] for m in c["members"]})
        assert (card["title"], card["saving_text"]) == (p["title"], p["saving_text"])
        # a card of a lever holds that lever's findings and nothing else
        assert sorted(m["index"] for m in card["members"]) == sorted(p["findings"])


@pytest.mark.parametrize("rel", ["tracelens/mi210/gpu_only_trace.json.gz",
                                 "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
                                 "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", QWEN])
def test_pr_markdown_fits_with_its_marker_line(rel):
    md = render(analysis(rel), "md")  # what `report -o x.md` writes, the marker line included
    assert md.endswith("<!-- written by traceana; the next run replaces this file -->\n")
    assert len(md) <= SHORT_CHARS and problems(md) == []


def test_long_kernel_names_are_told_apart_by_the_tokens_that_differ():
    common = "_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA8_GRVWB8_GSUAMB_IU1_K1_LBSPPA512"
    a = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64" + common
    b = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x224x64" + common
    short = kernel_names([a, b, "aten::mm"], 48)
    assert short == ["Cijk_Alik…MT256x128x64…", "Cijk_Alik…MT128x224x64…", "aten::mm"]
    assert all(len(s) <= 48 for s in short)


def test_markdown_top_ops_table_names_fit():
    md = render(analysis("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"), "md")
    table = md.split("### Top ")[1].split("\n\n")[1]
    names = [row.split(" | ")[0].lstrip("| ") for row in table.splitlines()[2:]]
    assert names and max(len(n.replace("\\", "")) for n in names) <= 48  # (escapes are not characters shown)


def test_memory_charged_through_thread_names_and_what_cannot_be_told():
    # the 2021 trace writes a thread id as a number on [memory] events and as a string on its ops: one thread
    a = analysis(RESNET)
    gpu = next(d for d in a["memory"]["devices"] if d["device"] == "cuda:0")
    top = gpu["top_allocating"][0]
    assert top["op"].startswith("aten::cudnn_convolution") and top["bytes"] > 1e10
    assert sum(x["bytes"] for x in gpu["top_allocating"] if x["op"] == "(outside any recorded op)") == 0
    # no addresses: the allocations cannot be paired with their frees, so the peak's holders are unknown: said
    assert "no addresses" in gpu["unattributed"]["at_peak"]
    view = memory_view(a)
    facts = dict(view["devices"][0]["facts"])
    assert "no addresses" in facts["held at the peak"]


def test_trivial_host_memory_and_zero_rows_left_out():
    a = analysis(QWEN)
    host = [d for d in a["memory"]["devices"] if d["type"] == "cpu"]
    assert host and host[0]["peak_allocated_bytes"] < 1 << 20  # a few bytes on the host beside the GPU's GiB
    assert "host " not in memory_line(a)
    view = memory_view(a)
    assert all(d["device"] != "cpu" for d in view["devices"])
    for d in view["devices"]:
        assert all(label != "allocated before the recording and still held" or value != "0 B"
                   for label, value in d["facts"])
        for table in ("at_peak", "modules", "allocating"):
            assert all(b != "0 B" for _, b, _ in d[table])


def test_memory_module_paths_use_the_module_tables_notation():
    a = analysis(QWEN)
    mods = [m["module"] for d in a["memory"]["devices"] for m in d.get("modules_at_peak") or ()
            if m["module"] != "(no module)"]
    if not mods:
        pytest.skip("no module recorded at the peak")
    assert all("/" in m or "_" in m for m in mods) and not any("." in m.split("/")[0] for m in mods)


def test_sub_microsecond_gaps_are_not_among_the_largest():
    a = {"ledger": {"span_us": 100.0, "idle": {"largest": [
        {"length_us": 0.00195, "start_us": 1.0, "cause": "launch_gaps", "next": "k1"},
        {"length_us": 5.0, "start_us": 9.0, "cause": "host_dispatch", "next": "k2"}]}}}
    gaps = utilisation_view(a)["gaps"]
    assert [g["length"] for g in gaps] == ["5.00 µs"]


def test_shapes_are_said_per_op():
    from traceana.render.html import build_view

    a = analysis("hta/test.json.gz")
    facts = dict(build_view(a)["trace_facts"])
    held = sum(o["device_time_us"] for o in a["ops"] if any(o["input_dims"]))
    total = sum(o["device_time_us"] for o in a["ops"])
    assert facts["shapes"] == f"recorded for ops holding {held / total * 100:.1f}% of device time"
