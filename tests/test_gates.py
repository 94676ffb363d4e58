"""--fail-on gates: parsing (exit 2 when malformed), each condition's arithmetic, exit 1 with one
stderr line per tripped condition after the report is written."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SAMPLES
from tests.test_diff import doc, op
from traceana.cli import main
from traceana.compare.runs import diff_analyses
from traceana.errors import BadInput, GateFailed
from traceana.compare.gates import Gate, enforce, evaluate, parse, parse_all, results

T4 = str(SAMPLES / "t4_seed_pow_mul.json")


# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize("spec, gate", [
    ("time-regression=5%", Gate("time-regression=5%", "time-regression", 5.0)),
    ("time-regression>2.5", Gate("time-regression>2.5", "time-regression", 2.5)),
    ("op-regression=10%", Gate("op-regression=10%", "op-regression", 10.0)),
    ("coverage<95%", Gate("coverage<95%", "coverage", 95.0)),
    (" Unmodeled>2% ", Gate("Unmodeled>2%", "unmodelled", 2.0)),
    ("roof<40%:aten::mm", Gate("roof<40%:aten::mm", "roof", 40.0, ("aten::mm",))),
    ("roof<40:aten::*mm, aten::conv*", Gate("roof<40:aten::*mm, aten::conv*", "roof", 40.0,
                                            ("aten::*mm", "aten::conv*"))),
])
def test_parse(spec, gate):
    assert parse(spec) == gate


@pytest.mark.parametrize("spec", ["", "speed=5%", "coverage>95%", "coverage=95%", "time-regression<5%",
                                  "roof<40%", "roof<40%:", "coverage<95%:aten::mm", "coverage<abc",
                                  "coverage<120%", "time-regression=-5%"])
def test_parse_errors(spec):
    with pytest.raises(BadInput, match="--fail-on"):
        parse(spec)


def test_two_run_gates_are_refused_for_a_single_run():
    with pytest.raises(BadInput, match="use it with `traceana diff`"):
        parse_all(["coverage<95%", "time-regression=5%"], diff=False)
    assert len(parse_all(["coverage<95%", "time-regression=5%"], diff=True)) == 2


@pytest.mark.parametrize("spec", ["coverage>95%", "nonsense", "time-regression=5%", "roof<40%"])
def test_malformed_spec_exits_2_before_any_work(tmp_path, capsys, spec):
    out = tmp_path / "r.md"
    assert main(["report", T4, "-o", str(out), "--fail-on", spec]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fail-on" in err[0]
    assert not out.exists()


def test_malformed_spec_in_diff_exits_2(tmp_path, capsys):
    assert main(["diff", T4, T4, "-o", str(tmp_path / "d.md"), "--fail-on", "op-regression<5%"]) == 2
    assert "--fail-on 'op-regression<5%'" in capsys.readouterr().err


# ------------------------------------------------------------------ single-run gates


def _cov(device, modeled, unmodeled):
    return {"device_time_us": device, "modeled_time_us": modeled, "unmodeled_time_us": unmodeled}


def test_coverage_and_unmodelled():
    a = doc([op("aten::mm", 1000.0)], cov=_cov(1000.0, 940.0, 30.0))
    # modelled 940 / 1000 = 94.0% < 95%; unmodelled 30 / 1000 = 3.0% > 2%
    msgs = evaluate(a, [parse("coverage<95%"), parse("unmodelled>2%"), parse("coverage<94%"),
                        parse("unmodelled>3%")])
    assert msgs == [
        "coverage<95%: modelled share of device time is 94.0% (940.0 µs of 1.000 ms; limit 95%)",
        "unmodelled>2%: unmodelled share of device time is 3.0% (30.0 µs of 1.000 ms; limit 2%)",
    ]
    nothing = doc([], cov=_cov(0.0, 0.0, 0.0))
    assert evaluate(nothing, [parse("unmodelled>2%")]) == []  # nothing ran, nothing unmodelled
    assert "no device time" in evaluate(nothing, [parse("coverage<95%")])[0]  # cannot check: trips


def test_roof_is_time_weighted_per_op_name():
    a = doc([op("aten::mm", 100.0, dims=((1, 1),), roof=30.0),
             op("aten::mm", 100.0, dims=((2, 2),), roof=50.0),
             op("aten::addmm", 100.0, roof=90.0),
             op("aten::pow", 100.0, roof=None, bound="unmodelled")])
    # aten::mm: (30 + 50) / (100 + 100) = 40% -> not below 40, below 41
    assert evaluate(a, [parse("roof<40%:aten::mm")]) == []
    (msg,) = evaluate(a, [parse("roof<41%:aten::mm")])
    assert msg.startswith("roof<41%:aten::mm: aten::mm runs at 40.0% of roof, time-weighted over 2 signatures")
    # glob: aten::*mm covers mm (40%) and addmm (90 / 100 = 90%)
    # (most device time first: mm 200 µs, addmm 100 µs)
    msgs = evaluate(a, [parse("roof<95%:aten::*mm")])
    assert [m.split(": ")[1].split(" ")[0] for m in msgs] == ["aten::mm", "aten::addmm"]
    # a name with no modelled signature trips (a typo must not switch the gate off)
    assert "no modelled op matches aten::mmm" in evaluate(a, [parse("roof<40%:aten::mmm")])[0]
    assert "1 matching op signatures have no roof" in evaluate(a, [parse("roof<40%:aten::pow")])[0]


def test_control_characters_in_names_stay_on_one_line():
    a = doc([op("aten::mm\nevil\r", 100.0, roof=10.0)])
    (msg,) = evaluate(a, [parse("roof<50%:aten::mm*")])
    assert "\n" not in msg and "\r" not in msg


# ------------------------------------------------------------------ two-run gates


def test_time_and_op_regression():
    base = doc([op("aten::mm", 2000.0), op("aten::add", 100.0), op("aten::tiny", 10.0)], steps=1)
    head = doc([op("aten::mm", 2200.0), op("aten::add", 100.0), op("aten::tiny", 30.0)], steps=1)
    d = diff_analyses(base, head)
    # total (2110 -> 2330): (2330 - 2110) / 2110 = 10.43%
    assert evaluate(d, [parse("time-regression=10.5%")]) == []
    (msg,) = evaluate(d, [parse("time-regression=10%")])
    assert msg.startswith("time-regression=10%: device time per step grew 10.4%")
    # mm: (2200 - 2000) / 2000 = 10% -> not more than 10, more than 9.9;
    # tiny grew (30 - 10) / 10 = 200% but holds 10 / 2110 = 0.47% and 30 / 2330 = 1.29% -> counts (>= 1%)
    msgs = evaluate(d, [parse("op-regression=10%")])
    assert len(msgs) == 1 and "aten::tiny" in msgs[0] and "grew 200.0%" in msgs[0]
    msgs = evaluate(d, [parse("op-regression=9.9%")])
    assert [m.split(": ")[1].split(" ")[0] for m in msgs] == ["aten::mm", "aten::tiny"]  # by time gained
    # single-run gates on a diff look at head
    assert evaluate(d, [parse("roof<50%:aten::nothing")])[0].startswith("roof<50%:aten::nothing: no modelled op")


def test_op_regression_ignores_ops_under_one_percent():
    base = doc([op("aten::mm", 10000.0), op("aten::tiny", 50.0)])
    head = doc([op("aten::mm", 10000.0), op("aten::tiny", 90.0)])
    # tiny: 50 / 10050 = 0.50% and 90 / 10090 = 0.89%: under 1%, its +80% does not count
    assert evaluate(diff_analyses(base, head), [parse("op-regression=10%")]) == []


def test_results_and_enforce():
    a = doc([op("aten::mm", 1000.0)], cov=_cov(1000.0, 500.0, 0.0))
    gates = [parse("coverage<95%"), parse("unmodelled>2%")]
    r = results(a, gates)
    assert [x["ok"] for x in r] == [False, True]
    with pytest.raises(GateFailed, match="--fail-on coverage<95%: modelled share of device time is 50.0%"):
        enforce(a, gates)


# ------------------------------------------------------------------ CLI


def test_report_gate_trips_after_writing(tmp_path, capsys):
    out = tmp_path / "r.json"
    # aten::mm on the T4: 135.7 ms roof / 230.2 ms measured = 59.0% of roof
    rc = main(["report", T4, "-o", str(out), "-q", "--fail-on", "roof<70%:aten::mm",
               "--fail-on", "roof<50%:aten::mm", "--fail-on", "roof<99%:aten::mm"])
    assert rc == 1
    assert json.loads(out.read_text())["schema"] == "traceana.analysis/1"  # written first
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert err[0].startswith("traceana: --fail-on roof<70%:aten::mm: aten::mm runs at 59.0% of roof")
    assert err[1].startswith("traceana: --fail-on roof<99%:aten::mm: aten::mm runs at 59.0% of roof")
    assert main(["report", T4, "-o", str(out), "-q", "--fail-on", "roof<50%:aten::mm"]) == 0
