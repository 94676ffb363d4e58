"""The Python API (traceana/api.py): DataFrames equal to the JSON report, diff, lazy imports."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys

import pytest

pd = pytest.importorskip("pandas")

import traceana  # noqa: E402
from tests.conftest import REPO, SAMPLES, TRACES, all_shared_traces  # noqa: E402
from traceana.api import OP_AS_IS, OP_COLUMNS, OP_NESTED, Analysis, diff_frame  # noqa: E402
from traceana.cli import main  # noqa: E402
from traceana.errors import BadInput  # noqa: E402

T4 = str(SAMPLES / "t4_seed_pow_mul.json")
CPU = str(SAMPLES / "cpu_mlp_train.json.gz")
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _same(cell, value) -> bool:
    """A DataFrame cell against the JSON report's value: null is NaN/None, lists are tuples."""
    if value is None:
        return cell is None or (isinstance(cell, float) and math.isnan(cell))
    if isinstance(value, list):
        return cell == _tuples(value)
    if isinstance(value, bool):
        return bool(cell) is value
    if isinstance(value, (int, float)):
        return float(cell) == float(value)
    return cell == value


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _report_json(path: str, tmp_path) -> tuple[str, dict]:
    out = tmp_path / "r.json"
    assert main(["report", path, "-o", str(out), "-q", "--no-meta"]) == 0
    text = out.read_text(encoding="utf-8")
    return text, json.loads(text)


def check_against_report(a: Analysis, report: dict) -> None:
    """Every field of every op row, kernel, finding and by-bound entry of the JSON report is in
    the frames with the same value."""
    ops = a.ops
    assert list(ops.index) == [o["id"] for o in report["ops"]]
    for o in report["ops"]:
        row = ops.loc[o["id"]]
        for key, value in o.items():
            if key in ("id", "kernels"):
                continue
            if key in OP_NESTED or (isinstance(value, dict) and key not in OP_AS_IS):
                for k in {*OP_NESTED.get(key, ()), *(value or {})}:  # flattened to key_k columns
                    assert _same(row[f"{key}_{k}"], (value or {}).get(k)), (o["id"], key, k)
            else:
                col = OP_COLUMNS.get(key, key)
                assert _same(row[col], value), (o["id"], key, row[col], value)
    kernels = [(o["id"], o["name"], k["name"], k["count"], k["time_us"]) for o in report["ops"] for k in o["kernels"]]
    assert list(a.kernels.itertuples(index=False, name=None)) == kernels
    assert len(a.findings) == len(report["findings"])
    for (_, row), f in zip(a.findings.iterrows(), report["findings"]):
        for key, value in f.items():
            assert _same(row[key], value), (key, row[key], value)
    bd = report["breakdown"]
    for cat, us in bd["by_bound"].items():
        assert _same(a.breakdown.loc[cat, "kernel_time_us"], us)
    for cat in bd.get("categories", []) if bd.get("devices") else []:
        summed = sum(d["by_category"].get(cat, 0.0) for d in bd["devices"])
        assert a.breakdown.loc[cat, "timeline_us"] == pytest.approx(summed, rel=1e-12, abs=0)
    led = report.get("ledger")
    assert list(a.ledger.index) == [t["key"] for t in (led or {}).get("terms", [])]
    for t in (led or {}).get("terms", []):  # the ledger frame holds the report's numbers, term by term
        assert a.ledger.loc[t["key"], "us"] == t["us"] and a.ledger.loc[t["key"], "share"] == t["share"]
    if led:
        assert a.ledger["us"].sum() == pytest.approx(led["span_us"])


@pytest.mark.parametrize("rel", all_shared_traces() or ["(no shared traces)"])
def test_frames_equal_json_report_on_every_shared_trace(rel, tmp_path):
    path = TRACES / rel
    if not path.exists():
        pytest.skip(f"{path} not present")
    text, report = _report_json(str(path), tmp_path)
    a = traceana.analyze(path)
    assert a.to_json() == text  # the same bytes as `traceana report -o x.json`
    check_against_report(a, report)


def test_t4_sample_numbers(tmp_path):
    a = traceana.analyze(T4)
    text, report = _report_json(T4, tmp_path)
    assert a.to_json() == text
    check_against_report(a, report)
    mm = a.ops.loc["op1"]
    assert mm["name"] == "aten::mm" and mm["calls"] == 1
    assert mm["input_dims"] == ((8192, 8192), (8192, 8192), (8192, 8192))
    assert mm["flops"] == 1099511627776  # 2*M*N*K = 2*8192*8192*8192
    assert mm["bytes"] == 805306368  # 3 * 8192*8192*4 B
    assert mm["device_time_us"] == 230208.0
    # 1.0995e12 FLOPs / 230208 µs = 4.776 TFLOP/s
    assert mm["tflops_per_s"] == pytest.approx(1099511627776 / 230208e-6 / 1e12)
    # roof: 1.0995e12 / 8.1 TFLOP/s = 135742.18 µs; / 230208 µs = 58.97%
    assert mm["roofline_time_us"] == pytest.approx(1099511627776 / 8.1e12 * 1e6)
    assert mm["pct_of_roof"] == pytest.approx(1099511627776 / 8.1e12 * 1e6 / 230208 * 100)
    assert mm["peak_tflops_per_s"] == 8.1 and mm["bound"] == "compute" and mm["roof_kind"] == "compute"
    assert math.isnan(mm["over_roof_pct"]) and mm["comm_algorithm"] is None  # flattened, absent here
    k = a.kernels[a.kernels["op_id"] == "op1"].iloc[0]
    assert (k["kernel"], k["calls"], k["time_us"]) == ("volta_sgemm_128x64_nn", 1, 230208.0)
    assert list(a.findings["kind"]) == [f["kind"] for f in report["findings"]]
    assert a.findings.iloc[0]["ops"] == ("op1",)
    # kernel time by bound: compute = mm 230208; memory = 2184 + 2167 + 1141 + 991.583 = 6483.583
    assert a.breakdown.loc["compute", "kernel_time_us"] == 230208.0
    assert a.breakdown.loc["memory", "kernel_time_us"] == pytest.approx(6483.583)
    span = report["breakdown"]["devices"][0]["span_us"]
    assert a.breakdown.loc["compute", "pct_of_span"] == pytest.approx(230208.0 / span * 100)
    assert a.ops["device_time_us"].dtype == "float64" and a.ops["calls"].dtype == "int64"


def test_renderers_give_the_report_bytes(tmp_path):
    a = traceana.analyze(T4)
    for ext in ("html", "md"):
        out = tmp_path / f"r.{ext}"
        assert main(["report", T4, "-o", str(out), "-q", "--no-meta"]) == 0
        expected = out.read_text(encoding="utf-8")
        got = a.to_markdown() if ext == "md" else a.to_html(tmp_path / "api.html")
        assert got == expected
    assert (tmp_path / "api.html").read_text(encoding="utf-8") == a.to_html()


def test_saved_analysis_loads_to_the_same_frames(tmp_path):
    a = traceana.analyze(T4)
    saved = tmp_path / "t4.json"
    saved.write_text(a.to_json(), encoding="utf-8")
    b = traceana.analyze(saved)
    assert b.raw == a.raw
    pd.testing.assert_frame_equal(b.ops, a.ops)
    with pytest.raises(BadInput, match="saved analysis"):
        traceana.analyze(saved, device="a100_sxm4_40gb")


def test_device_override_and_options():
    a = traceana.analyze(T4, device="a100_sxm4_40gb", peak_tflops="fp32=10")
    assert a.device["key"] == "a100_sxm4_40gb"
    mm = a.ops.loc["op1"]
    # fp32 peak overridden to 10 TFLOP/s: roof 1.0995e12 / 10e12 s = 109951.16 µs
    assert mm["peak_tflops_per_s"] == 10.0
    assert mm["roofline_time_us"] == pytest.approx(1099511627776 / 10e12 * 1e6)


def test_profile_argument(tmp_path):
    """profile= takes a `traceana calibrate` file: the rows gain achievable_pct, as `report --profile`."""
    from tests.test_profile_roofs import _doc

    path = tmp_path / "t4.json"
    path.write_text(json.dumps(_doc()))
    a = traceana.analyze(T4, profile=str(path))
    pow_row = a.raw["ops"][[r["name"] for r in a.raw["ops"]].index("aten::pow")]
    # measured DRAM 256 GB/s vs the datasheet's 320: achievable % = datasheet % x 320/256 = x1.25
    assert pow_row["achievable_pct"] == pytest.approx(pow_row["datasheet_pct"] * 1.25)
    assert a.profile == str(path)
    with pytest.raises(BadInput, match="no such file|cannot read|profile"):
        traceana.analyze(T4, profile=str(tmp_path / "missing.json"))


def test_bad_arguments(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        traceana.analyze(tmp_path / "missing.json")
    with pytest.raises(TypeError, match="unknown option"):
        traceana.analyze(T4, peak=3)
    with pytest.raises(TypeError, match="diff"):
        traceana.diff(1, 2)


def test_cpu_only_trace_frames(tmp_path):
    a = traceana.analyze(CPU)
    text, report = _report_json(CPU, tmp_path)
    assert a.to_json() == text
    check_against_report(a, report)
    assert a.breakdown["timeline_us"].isna().all()  # no GPU: no timeline


def test_diff_frame_equals_the_diff_document():
    from traceana.compare.runs import diff_analyses

    a = traceana.analyze(T4)
    head = copy.deepcopy(a.raw)
    head["ops"][0]["device_time_us"] *= 2  # aten::mm 230208 -> 460416 µs
    head["ops"][0]["roof_pct"] /= 2  # and its % of roof with it
    vanished = head["ops"].pop()  # aten::sum only in base
    d = traceana.diff(a, head)
    doc = diff_analyses(a.raw, head, base_label="t4_seed_pow_mul.json", head_label="t4_seed_pow_mul.json")
    assert list(d["match"]) == ["exact"] * 4 + ["vanished"]
    mm = d.iloc[0]
    assert (mm["name"], mm["base_time_us"], mm["head_time_us"], mm["delta_us"], mm["delta_pct"]) == \
        ("aten::mm", 230208.0, 460416.0, 230208.0, 100.0)  # +230208 µs = +100%
    # roof % halves: 58.97% -> 29.48%, -29.48 points
    assert mm["roof_delta_pp"] == pytest.approx(-1099511627776 / 8.1e12 * 1e6 / 460416 * 100)
    assert bool(mm["roof_changed"]) is True
    gone = d.iloc[-1]
    assert gone["name"] == vanished["name"] == "aten::sum"
    assert gone["base_time_us"] == 991.583 and math.isnan(gone["head_time_us"]) and gone["delta_us"] == -991.583
    for (_, row), r in zip(d.iterrows(), doc["ops"]):
        for side in ("base", "head"):
            for key, col in (("count", "calls"), ("time_us", "time_us"), ("share_pct", "share_pct"),
                             ("roof_pct", "pct_of_roof"), ("bound", "bound"), ("flops", "flops")):
                assert _same(row[f"{side}_{col}"], r[side][key])
        for key in ("delta_us", "delta_pct", "roof_delta_pp", "roof_changed"):
            assert _same(row[key], r[key])
    assert d.attrs["per"] == "run"
    assert diff_frame(doc).equals(d)


def test_diff_of_paths(tmp_path):
    saved = tmp_path / "t4.json"
    saved.write_text(traceana.analyze(T4).to_json(), encoding="utf-8")
    d = traceana.diff(T4, saved)
    assert len(d) == 5 and (d["delta_us"] == 0).all() and d.attrs["base"] == "t4_seed_pow_mul.json"


def test_submodules_do_not_shadow_the_api():
    import traceana.compare.runs  # noqa: F401  (the comparison module: named apart from the API's diff)
    import traceana.measure.record  # noqa: F401
    from traceana.compare.runs import diff_analyses

    assert callable(diff_analyses)
    assert traceana.diff is traceana.api.diff and traceana.analyze is traceana.api.analyze
    assert traceana.profile is traceana.measure.record.profile
    assert "analyze" in dir(traceana)


def test_import_and_cli_do_not_import_pandas_or_torch(tmp_path):
    code = ("import sys, traceana, traceana.cli\n"
            "from traceana.cli import main\n"
            f"rc = main(['report', {T4!r}, '-o', {str(tmp_path / 'r.html')!r}, '-q'])\n"
            "print(rc, sorted(m for m in ('pandas', 'torch') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=REPO)
    assert out.stdout.strip() == "0 []", out.stderr
    assert (tmp_path / "r.html").exists()


def test_worked_example_runs(tmp_path):
    script = REPO / "docs" / "examples" / "api_example.py"
    out = subprocess.run([sys.executable, str(script), T4, str(tmp_path)], capture_output=True, text=True,
                         env=ENV, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    # 1.0995e12 FLOPs / 230208 µs = 4.776 TFLOP/s, 135742 µs of roof = 59.0%
    assert "aten::mm: 1.100e+12 FLOPs in 230208 us = 4.776 TFLOP/s" in out.stdout
    assert "= 59.0% of roof (8.1 TFLOP/s fp32)" in out.stdout
    assert "aten::fill_ 73.5%, aten::mul_ 76.8%" in out.stdout
    assert "-115104.0" in out.stdout  # the what-if: matmul 230208 -> 115104 µs
    assert (tmp_path / "api_example.report.html").stat().st_size > 10_000
    assert (tmp_path / "api_example.report.md").read_text(encoding="utf-8").startswith("#")
