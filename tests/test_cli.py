"""CLI behaviour: exit codes, one-line errors, never overwriting what the user gave."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import synth as s
from tests.conftest import SAMPLES
from traceana.cli import main
from traceana.cli.common import parse_peaks
from traceana.errors import BadInput

T4 = str(SAMPLES / "t4_seed_pow_mul.json")


def test_report_json_and_exit_code(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["report", T4, "-o", str(out)]) == 0
    a = json.loads(out.read_text())
    assert a["device"]["key"] == "t4"
    assert "report written to" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"", b"{", b"[]x", b"\x1f\x8bnot gzip"])
def test_bad_input_exit_2_one_line_no_traceback(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "traceana", "report", str(bad), "-o", str(tmp_path / "o.html")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceana: ") and str(bad) in lines[0]
    assert "Traceback" not in proc.stderr


def test_output_pointing_at_input_is_refused(tmp_path, capsys):
    p = s.write(tmp_path, s.trace([s.kernel("k", 1, 2, 3)]))
    before = open(p, "rb").read()
    assert main(["report", p, "-o", p]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert open(p, "rb").read() == before


def test_foreign_file_not_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "notes.md"
    out.write_text("my notes\n")
    assert main(["report", T4, "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert out.read_text() == "my notes\n"
    assert main(["report", T4, "-o", str(out), "--force", "-q"]) == 0
    # a report traceana wrote itself may be rewritten without --force
    assert main(["report", T4, "-o", str(out), "-q"]) == 0


def test_unknown_extension_and_missing_dir(tmp_path, capsys):
    assert main(["report", T4, "-o", str(tmp_path / "r.txt")]) == 2
    assert main(["report", T4, "-o", str(tmp_path / "nodir" / "r.html")]) == 2


def test_peak_override_changes_roofs(tmp_path):
    out = tmp_path / "r.json"
    assert main(["report", T4, "-o", str(out), "-q", "--peak-tflops", "fp32=16.2", "--bandwidth-gbps", "640"]) == 0
    a = json.loads(out.read_text())
    assert a["device"]["peak_tflops"]["fp32"] == 16.2
    assert a["device"]["dram_gbps"] == 640.0
    mm = next(o for o in a["ops"] if o["name"] == "aten::mm")
    # 2*8192^3 / 16.2e12 s = 67,872.3 µs; / 230,208 µs measured = 29.48%
    assert mm["roof_pct"] == pytest.approx(29.48, abs=0.01)


def test_parse_peaks():
    assert parse_peaks("65") == {"all": 65.0}
    assert parse_peaks("fp32=8.1, fp16_tc=65") == {"fp32": 8.1, "fp16_tc": 65.0}
    for bad in ("fp33=1", "fp32=abc", "fp32=-1", "fp32=inf"):
        with pytest.raises(BadInput):
            parse_peaks(bad)


def test_unknown_device_key(tmp_path, capsys):
    assert main(["report", T4, "-o", str(tmp_path / "r.json"), "--device", "nope"]) == 2
    assert "traceana devices" in capsys.readouterr().err


def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert main(["report", "--help"]) == 0
    assert "--peak-tflops" in capsys.readouterr().out


def test_read_only_commands_tune_the_process_others_do_not(monkeypatch):
    """report / render / diff / annotate / devices: one BLAS thread (unless the user chose) and a first GC
    threshold of 100,000 (default 700); record and calibrate, which run the user's model and time BLAS,
    keep both defaults."""
    import gc

    from traceana.cli.entry import GC_GEN0, tune_for_reading

    before = gc.get_threshold()
    try:
        env: dict = {}
        tune_for_reading(["record", "train.py"], env)
        assert env == {} and gc.get_threshold() == before
        tune_for_reading(["calibrate"], env)
        assert env == {} and gc.get_threshold() == before
        tune_for_reading(["report", "t.json"], env)
        assert env == {"OPENBLAS_NUM_THREADS": "1"}
        assert gc.get_threshold() == (GC_GEN0, *before[1:]) == (100_000, *before[1:])
        mine = {"OPENBLAS_NUM_THREADS": "4"}
        tune_for_reading(["diff", "a.json", "b.json"], mine)
        assert mine == {"OPENBLAS_NUM_THREADS": "4"}  # the user's own setting stays
    finally:
        gc.set_threshold(*before)
