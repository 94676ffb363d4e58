"""Reports against achievable roofs: a device profile (`traceana calibrate`) read back and
applied to the shipped T4 trace, with the arithmetic of every pinned number."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SAMPLES
from traceana.analysis import Options, analyze
from traceana.cli import main
from traceana.errors import BadInput
from traceana.roofline.device_profile import SCHEMA, load_profile, parse_profile

T4 = str(SAMPLES / "t4_seed_pow_mul.json")


def _doc(kind: str = "cuda", name: str = "Tesla T4") -> dict:
    fig = lambda v, unit: {"value": v, "unit": unit, "spread_pct": 1.5, "size": "s", "repeats": 5}  # noqa: E731
    return {"schema": SCHEMA, "date": "2025-01-02T03:04:05Z", "mode": "full",
            "device": {"name": name, "kind": kind, "driver": "CUDA runtime 12.8", "torch": "2.13.0", "threads": 4},
            "figures": {"gemm.fp32": fig(4.05, "TFLOP/s"), "gemm.fp16_tc": fig(40.0, "TFLOP/s"),
                        "dram.copy": fig(240.0, "GB/s"), "dram.triad": fig(256.0, "GB/s"),
                        "launch.latency": fig(2.5, "us")}}


@pytest.fixture
def t4_profile(tmp_path):
    p = tmp_path / "t4.json"
    p.write_text(json.dumps(_doc()))
    return str(p)


def test_load_profile(t4_profile):
    p = load_profile(t4_profile)
    assert (p.name, p.kind, p.threads, p.date) == ("Tesla T4", "cuda", 4, "2025-01-02T03:04:05Z")
    assert p.peaks() == {"fp16_tc": 40.0, "fp32": 4.05}
    assert p.dram_gbps() == 256.0  # the better of copy 240 and triad 256
    assert p.value("launch.latency") == 2.5 and p.value("absent") is None
    assert p.label() == "t4.json (Tesla T4, cuda, measured 2025-01-02)"


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema="traceana.profile/9"), "schema is 'traceana.profile/9'"),
    (lambda d: d.update(figures={}), "it has no figures"),
    (lambda d: d["figures"]["gemm.fp32"].update(value=-1), "'gemm.fp32' has no positive value"),
    (lambda d: d["figures"]["gemm.fp32"].update(unit="flops"), "has unit 'flops'"),
    (lambda d: d["device"].update(kind="tpu"), "device.kind is 'tpu'"),
    (lambda d: d["figures"]["dram.copy"].update(repeats=0), "bad repeats count"),
    (lambda d: d.pop("device"), "device.name is missing"),
])
def test_bad_profiles_name_the_problem(mutate, message):
    d = _doc()
    mutate(d)
    with pytest.raises(BadInput, match="x.json: not a usable traceana profile: .*" + message.replace("(", r"\(")):
        parse_profile(d, "x.json")


def test_bad_profile_files(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(BadInput, match="invalid JSON"):
        load_profile(str(tmp_path / "bad.json"))
    with pytest.raises(BadInput, match="profile not found"):
        load_profile(str(tmp_path / "none.json"))
    with pytest.raises(BadInput, match="is a directory"):
        load_profile(str(tmp_path))


def _rows(a: dict) -> dict:
    return {r["name"]: r for r in a["ops"]}


def test_achievable_pct_against_measured_roofs(t4_profile):
    base = analyze(T4)
    a = analyze(T4, Options(profile=load_profile(t4_profile)))
    rows, rows0 = _rows(a), _rows(base)
    pow_ = rows["aten::pow"]
    # bytes per call 536,870,912 (read + write 8192x8192 fp32); datasheet 320 GB/s -> 1,677.72 µs,
    # achievable max(240, 256) = 256 GB/s -> 536,870,912 / 256e3 = 2,097.152 µs
    assert pow_["bytes"] == 536870912
    assert pow_["achievable"]["memory_time_us"] == pytest.approx(2097.152)
    assert pow_["achievable"]["dram_gbps"] == 256.0 and pow_["achievable"]["measured"] is True
    assert pow_["achievable_pct"] == pytest.approx(2097.152 / pow_["mean_time_us"] * 100)
    assert pow_["datasheet_pct"] == pow_["roof_pct"] == pytest.approx(536870912 / 320e3 / pow_["mean_time_us"] * 100)
    assert pow_["achievable_pct"] / pow_["roof_pct"] == pytest.approx(320 / 256)  # 1.25: the roof is 80% as high
    mm = rows["aten::mm"]
    # fp32 GEMM on CUDA cores: datasheet 8.1 TFLOP/s, measured 4.05: the achievable % is twice the datasheet %
    assert mm["achievable"]["peak_dtype"] == "fp32" and mm["achievable"]["peak_tflops"] == 4.05
    assert mm["achievable_pct"] == pytest.approx(2 * mm["roof_pct"])
    # every existing key keeps its value: the profile only adds
    for name, r0 in rows0.items():
        for k, v in r0.items():
            assert rows[name][k] == v, (name, k)
    assert "achievable_pct" not in rows0["aten::pow"] and "profile" not in base["device"]
    prof = a["device"]["profile"]
    assert prof["applied"] is True and prof["file"] == "t4.json" and prof["dram_gbps"] == 256.0


def test_savings_are_measured_against_achievable(t4_profile):
    a = analyze(T4, Options(profile=load_profile(t4_profile)))
    mul = _rows(a)["aten::mul_"]
    f = next(f for f in a["findings"] if f["kind"] == "memory_bound" and mul["id"] in f["ops"])
    # saving = measured - calls x (launch floor + roofline time at 256 GB/s) = 2,184 - (2 + 2,097.152) µs
    expected = mul["device_time_us"] - mul["count"] * (2.0 + 2097.152)
    assert mul["achievable"]["model_time_us"] == pytest.approx(2099.152)
    assert f["saving_us"] == pytest.approx(expected)
    assert "achievable" in f["text"]
    base = {x["title"]: x for x in analyze(T4)["findings"]}
    # against the datasheet: 2,184 - (2 + 1,677.72) µs, more than against the lower achievable roof
    assert base[f["title"]]["saving_us"] == pytest.approx(mul["device_time_us"] - 2.0 - 536870912 / 320e3)
    assert base[f["title"]]["saving_us"] > f["saving_us"]


def test_cpu_profile_does_not_change_gpu_roofs(tmp_path):
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps(_doc("cpu", "Intel(R) Xeon(R) Processor")))
    a = analyze(T4, Options(profile=load_profile(str(p))))
    assert a["device"]["profile"]["applied"] is False
    assert not any("achievable_pct" in r for r in a["ops"])
    assert any("measured a CPU" in w for w in a["warnings"])


def test_other_device_profile_warns(tmp_path):
    p = tmp_path / "a100.json"
    p.write_text(json.dumps(_doc("cuda", "NVIDIA A100-SXM4-80GB")))
    a = analyze(T4, Options(profile=load_profile(str(p))))
    assert any("was measured on 'NVIDIA A100-SXM4-80GB', the trace ran on 'Tesla T4'" in w for w in a["warnings"])


def test_report_cli_profile_and_env(t4_profile, tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.md"
    monkeypatch.setenv("TRACEANA_PROFILE", t4_profile)
    assert main(["report", T4, "-o", str(out)]) == 0
    md = out.read_text()
    assert "**Profile:** device profile t4.json (Tesla T4, cuda, measured 2025-01-02)" in md
    assert "| % of achievable |" in md
    term = capsys.readouterr().out
    assert "roofs: device profile t4.json" in term and "ach." in term
    html = tmp_path / "r.html"
    assert main(["report", T4, "-o", str(html), "-q"]) == 0
    assert "Device profile" in html.read_text() and "ach." in html.read_text()
    monkeypatch.setenv("TRACEANA_PROFILE", str(tmp_path / "missing.json"))
    assert main(["report", T4, "-o", str(out)]) == 2
    assert "missing.json: profile not found" in capsys.readouterr().err
    monkeypatch.delenv("TRACEANA_PROFILE")
    assert main(["report", T4, "-o", str(out), "-q"]) == 0
    assert "achievable" not in out.read_text()


def test_devices_lists_profiles(t4_profile, tmp_path, capsys):
    assert main(["devices", "--profile", t4_profile]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("t4 "))
    assert lines[i + 1].startswith("  measured: t4.json (Tesla T4, cuda, measured 2025-01-02): dram.copy 240 GB/s")
    assert main(["devices", "--json", "--profile", t4_profile]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profiles"][0]["table_key"] == "t4" and doc["profiles"][0]["peak_tflops"]["fp32"] == 4.05


def test_unsteady_profile_figures_are_warned(tmp_path):
    d = _doc()
    d["figures"]["dram.triad"]["spread_pct"] = 40.0  # over the 25% calibrate retries at
    p = tmp_path / "shaky.json"
    p.write_text(json.dumps(d))
    a = analyze(T4, Options(profile=load_profile(str(p))))
    (w,) = [w for w in a["warnings"] if "spread between repeats" in w]
    assert "dram.triad 40%" in w and "calibrate again" in w
