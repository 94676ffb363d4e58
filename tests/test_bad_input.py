"""Hostile and broken input: every case is either one clear line on stderr with exit code 2,
or a complete report whose warnings (analysis["warnings"], shown in the HTML and markdown)
say what was wrong. Never a traceback, never a silent guess, never a modified input file.

Most cases run in-process through `traceana.cli.main` (fast); a few run the real process.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import html
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import synth as s
from tests.conftest import REPO, SAMPLES
from traceana.cli import main

T4 = SAMPLES / "t4_seed_pow_mul.json"


def good_events() -> list[dict]:
    """One op that launches one kernel (costed), plus a second op/kernel pair."""
    return [
        s.op("aten::mm", 0, 100, ext=1, dims=[[256, 256], [256, 256]]),
        s.launch(10, 1, ext=1),
        s.kernel("sgemm_kernel", 20, 50, 1, ext=1),
        s.op("aten::add", 200, 100, ext=2, dims=[[1024], [1024], []], types=["float", "float", "Scalar"]),
        s.launch(210, 2, ext=2),
        s.kernel("add_kernel", 220, 5, 2, ext=2),
    ]


def good_doc() -> dict:
    return s.trace(good_events())


def sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write(tmp_path: Path, content, name: str = "t.json") -> str:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif isinstance(content, str):
        p.write_text(content, encoding="utf-8")
    else:
        p.write_text(json.dumps(content))
    return str(p)


def run(capsys, path: str, out: str) -> tuple[int, str]:
    rc = main(["report", path, "-o", out, "-q"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def expect_error(capsys, tmp_path: Path, path: str, *phrases: str) -> str:
    """Exit 2, exactly one stderr line 'traceana: PATH: ...', no output file, input unchanged."""
    before = sha(path) if os.path.isfile(path) else None
    out = tmp_path / "report.json"
    rc, err = run(capsys, path, str(out))
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("traceana: "), err
    assert path in lines[0]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert not out.exists()
    if before is not None:
        assert sha(path) == before
    return lines[0]


def expect_report(capsys, tmp_path: Path, path: str, *warnings: str) -> dict:
    """Exit 0 for every format; each expected phrase is in analysis["warnings"] and shown in
    the HTML and the markdown; the input file is unchanged."""
    before = sha(path)
    outs = {fmt: tmp_path / f"report.{fmt}" for fmt in ("json", "md", "html")}
    for fmt, out in outs.items():
        rc, err = run(capsys, path, str(out))
        assert rc == 0, err
        assert err == ""
    analysis = json.loads(outs["json"].read_text(encoding="utf-8"))
    page = html.unescape(outs["html"].read_text(encoding="utf-8"))
    md = outs["md"].read_text(encoding="utf-8").replace("\\", "")
    for phrase in warnings:
        assert any(phrase in w for w in analysis["warnings"]), (phrase, analysis["warnings"])
        assert phrase in page, phrase
        assert phrase in md, phrase
    assert sha(path) == before
    return analysis


def op_named(a: dict, name: str) -> dict:
    return next(o for o in a["ops"] if o["name"] == name)


# ------------------------------------------------------------------ files that are not traces


@pytest.mark.parametrize("content, phrase", [
    (b"", "file is empty"),
    (b" \n\t ", "file is empty"),
    (b"not json at all", "not valid JSON"),
    (b"\x00\x01\x02\xff\xfe binary", "not valid JSON"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel"', "not valid JSON"),
    (b'{"traceEvents": []} trailing', "not valid JSON"),
    (b"42", "not a trace"),
    (b'"a string"', "not a trace"),
    (b"null", "not a trace"),
    (b'{"foo": 1}', "not a trace"),
    (b'{"traceEvents": null}', "not a trace"),
    (b'{"traceEvents": 5}', "not a trace"),
    (b'{"traceEvents": "events"}', "not a trace"),
    (b'{"traceEvents": {"0": {}}}', "not a trace"),
    (b"[1, 2, 3]", "not a trace"),
    (b'{"traceEvents": [1, "two", null, []]}', "not a trace"),
    (b'[{"name": "a"}, {"b": 2}]', "not a trace"),
    (b"[" * 50000 + b"]" * 50000, "nested too deeply"),
    ('{"traceEvents": []}'.encode("utf-16"), "not valid JSON"),
])
def test_not_a_trace_is_one_clear_line(capsys, tmp_path, content, phrase):
    expect_error(capsys, tmp_path, write(tmp_path, content), phrase)


def test_truncated_json_of_a_real_trace(capsys, tmp_path):
    data = T4.read_bytes()
    for cut in (1, len(data) // 3, len(data) // 2, len(data) - 2):
        expect_error(capsys, tmp_path, write(tmp_path, data[:cut]), "not valid JSON")


def test_corrupt_and_truncated_gzip(capsys, tmp_path):
    gz = gzip.compress(T4.read_bytes())
    expect_error(capsys, tmp_path, write(tmp_path, gz[: len(gz) // 2], "cut.json.gz"), "gzip")
    expect_error(capsys, tmp_path, write(tmp_path, gz[:12], "head.json.gz"), "gzip")
    flipped = bytearray(gz)
    flipped[len(gz) // 2] ^= 0xFF
    expect_error(capsys, tmp_path, write(tmp_path, bytes(flipped), "flip.json.gz"), "gzip")
    expect_error(capsys, tmp_path, write(tmp_path, b"\x1f\x8b" + b"\x00" * 40, "zero.json.gz"), "gzip")
    # a gzip of something that is not JSON is a JSON error, named as such
    expect_error(capsys, tmp_path, write(tmp_path, gzip.compress(b"hello"), "hello.json.gz"), "not valid JSON")


def test_json_gz_that_is_not_gzip_says_not_gzip(capsys, tmp_path):
    # neither gzip (no 1f 8b magic) nor JSON: the name promised gzip, so that is what is said
    line = expect_error(capsys, tmp_path, write(tmp_path, b"this is not a trace", "plain.json.gz"), "not gzip")
    assert "not valid JSON" not in line
    # a .json that is not JSON is still a JSON error, not a gzip one
    line = expect_error(capsys, tmp_path, write(tmp_path, b"this is not a trace", "plain.json"), "not valid JSON")
    assert "not gzip" not in line


def test_json_gz_holding_plain_json_is_read(capsys, tmp_path):
    """A trace saved as plain JSON under a .json.gz name is read as the JSON it is."""
    a = expect_report(capsys, tmp_path, write(tmp_path, good_doc(), "renamed.json.gz"))
    assert sorted(o["name"] for o in a["ops"]) == ["aten::add", "aten::mm"]


def test_top_level_event_array_is_a_trace(capsys, tmp_path):
    """The Chrome trace format's array form, [event, ...], reads as {"traceEvents": [...]}."""
    as_object = expect_report(capsys, tmp_path, write(tmp_path, good_doc(), "object.json"))
    events = good_doc()["traceEvents"]
    as_array = expect_report(capsys, tmp_path, write(tmp_path, events, "array.json"))
    # aten::mm: 2*M*N*K = 2*256*256*256 = 33,554,432 FLOPs, the same either way
    assert op_named(as_array, "aten::mm")["flops"] == 33_554_432 == op_named(as_object, "aten::mm")["flops"]
    assert [o["device_time_us"] for o in as_array["ops"]] == [o["device_time_us"] for o in as_object["ops"]]
    # gzip'd too
    as_gz = expect_report(capsys, tmp_path, write(tmp_path, gzip.compress(json.dumps(events).encode()), "a.json.gz"))
    assert op_named(as_gz, "aten::mm")["flops"] == 33_554_432


def test_missing_unreadable_and_odd_paths(capsys, tmp_path):
    expect_error(capsys, tmp_path, str(tmp_path / "nope.json"), "no such file")
    expect_error(capsys, tmp_path, str(tmp_path / "no-dir" / "t.json"), "no such file")
    f = write(tmp_path, good_doc())
    expect_error(capsys, tmp_path, f + "/inside.json", "cannot read")  # a file used as a directory


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can read chmod 000 files")
def test_unreadable_file(capsys, tmp_path):
    p = write(tmp_path, good_doc())
    os.chmod(p, 0)
    try:
        expect_error(capsys, tmp_path, p, "cannot read")
    finally:
        os.chmod(p, 0o644)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_and_device_are_refused_without_blocking(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes, /dev/zero never ends: both must
    be refused before anything opens them. Run as a process with a timeout, so a regression
    fails this test instead of hanging the suite."""
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    cases = [str(fifo)] + (["/dev/zero"] if os.path.exists("/dev/zero") else [])
    for path in cases:
        try:
            proc = cli("report", path, "-o", str(tmp_path / "out.json"), timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"traceana blocked reading {path}: something opens the input before the loader's checks")
        line = one_line_error(proc)
        assert path in line and "not a regular file" in line, line


def test_directory_says_it_has_no_trace_files(capsys, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    (d / "metrics.csv").write_text("a,b\n")
    line = expect_error(capsys, tmp_path, str(d) + "/", "is a directory with no trace files")
    assert "*.json" in line
    (d / "trace.json").mkdir()  # a directory named like a trace is not a trace file either
    expect_error(capsys, tmp_path, str(d), "is a directory with no trace files")


# ------------------------------------------------------------------ the output must never be the input


def test_output_never_overwrites_the_input(capsys, tmp_path):
    p = write(tmp_path, good_doc(), "trace.json")
    before = sha(p)
    sub = tmp_path / "sub"
    sub.mkdir()
    link = tmp_path / "link.json"
    link.symlink_to(p)
    hard = tmp_path / "hard.json"
    os.link(p, hard)
    for out in (p, str(link), str(sub / ".." / "trace.json"), str(hard)):
        for extra in ([], ["--force"]):
            rc = main(["report", p, "-o", out, "-q", *extra])
            err = capsys.readouterr().err
            assert rc == 2 and "refusing to overwrite" in err, (out, err)
    # the symlink as the input and the real file as the output
    assert main(["report", str(link), "-o", p, "-q", "--force"]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert sha(p) == before
    # a normal report leaves the input untouched too
    assert main(["report", p, "-o", str(tmp_path / "r.html"), "-q"]) == 0
    assert sha(p) == before


def test_a_json_report_is_rewritten_without_force(capsys, tmp_path):
    """Sorted keys put a JSON report's "schema" after its ops: still recognised as ours."""
    doc = good_doc()
    doc["traceEvents"] += [s.kernel(f"orphan_{i}", 1000 + i * 10, 1, 500 + i) for i in range(100)]
    p = write(tmp_path, doc)
    out = tmp_path / "r.json"
    assert main(["report", p, "-o", str(out), "-q"]) == 0
    assert b"traceana" not in out.read_bytes()[:4096]
    assert main(["report", p, "-o", str(out), "-q"]) == 0, capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_output_to_a_fifo_is_refused_without_blocking(tmp_path):
    p = write(tmp_path, good_doc())
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    line = one_line_error(cli("report", p, "-o", str(fifo)))
    assert "not a regular file" in line
    assert fifo.exists() and not fifo.is_file()


# ------------------------------------------------------------------ fields of the wrong type


def with_event(i: int, **changes) -> dict:
    doc = good_doc()
    ev = doc["traceEvents"][i]
    for k, v in changes.items():
        if k.startswith("args."):
            ev["args"][k[5:]] = v
        else:
            ev[k] = v
    return doc


def test_ts_as_string_drops_only_that_event(capsys, tmp_path):
    a = expect_report(capsys, tmp_path, write(tmp_path, with_event(5, ts="220")),
                      "fields of unexpected types", "missing, negative or non-finite ts/dur")
    assert a["trace"]["gpu_events"] == 1  # the kernel without a usable ts; the other one stays
    assert op_named(a, "aten::mm")["flops"] == 2 * 256**3


def test_args_as_list_keeps_the_event_without_args(capsys, tmp_path):
    a = expect_report(capsys, tmp_path, write(tmp_path, with_event(2, args=[1, 2, 3])),
                      "fields that could not be read")
    assert a["trace"]["gpu_events"] == 2  # kept: its device time still counts
    assert a["coverage"]["opaque_by_cause"].get("no_launch") == 50.0


def test_wrong_types_in_ids_keep_the_event(capsys, tmp_path):
    doc = with_event(2, **{"args.correlation": [1], "args.External id": {"x": 1}, "pid": 1.5})
    a = expect_report(capsys, tmp_path, write(tmp_path, doc), "fields that could not be read")
    assert a["trace"]["gpu_events"] == 2


@pytest.mark.parametrize("dims, types", [
    ("[[256, 256], [256, 256]]", ["float", "float"]),  # dims as a string
    ([[-256, 256], [256, -256]], ["float", "float"]),  # negative
    ([[256.5, 256], [256, 256]], ["float", "float"]),  # float
    ([[10**30, 256], [256, 10**30]], ["float", "float"]),  # beyond int64
    ([[2**40, 2**40], [2**40, 2**40]], ["float", "float"]),  # numel beyond int64
    ([[[[[256]]]], [256, 256]], ["float", "float"]),  # nested too deep
    ([{"a": 1}, [256, 256]], ["float", "float"]),  # an object
    ([[True, 256], [256, 256]], ["float", "float"]),  # booleans
    ([[256, 256], [256, 256]], [6, 6]),  # Input type as numbers
    ([[256, 256], [256, 256]], "float"),  # Input type as a string
])
def test_impossible_shapes_are_opaque_and_said(capsys, tmp_path, dims, types):
    doc = with_event(0, **{"args.Input Dims": dims, "args.Input type": types})
    a = expect_report(capsys, tmp_path, write(tmp_path, doc), "malformed or impossible")
    mm = op_named(a, "aten::mm")
    assert mm["bound"] == "opaque" and mm["cause"] == "bad_shapes" and mm["flops"] is None
    assert "corrupt" in mm["reason"]
    assert op_named(a, "aten::add")["bound"] != "opaque"  # the rest of the trace is still analysed


def test_huge_but_possible_shapes_are_costed(capsys, tmp_path):
    doc = with_event(0, **{"args.Input Dims": [[2**20, 2**10], [2**10, 2**10]]})
    a = expect_report(capsys, tmp_path, write(tmp_path, doc))
    assert op_named(a, "aten::mm")["flops"] == 2 * 2**20 * 2**10 * 2**10


def test_flops_beyond_int64_are_reported(capsys, tmp_path):
    """Legal shapes (numel <= 2^63) whose FLOPs x calls exceed int64: still a report."""
    doc = with_event(0, **{"args.Input Dims": [[2**31, 2**31], [2**31, 2**31]]})
    a = expect_report(capsys, tmp_path, write(tmp_path, doc))
    assert op_named(a, "aten::mm")["flops"] == 2 * 2**93


def test_unknown_dtype_and_unknown_op(capsys, tmp_path):
    doc = with_event(0, **{"args.Input type": ["c10::Float42", "c10::Float42"]})
    doc["traceEvents"][3]["name"] = "mylib::frobnicate"
    a = expect_report(capsys, tmp_path, write(tmp_path, doc), "dtypes traceana does not know", "c10::Float42")
    assert op_named(a, "aten::mm")["bound"] == "unmodelled"
    frob = op_named(a, "mylib::frobnicate")
    assert frob["bound"] == "unmodelled" and "no formula" in frob["reason"]
    assert "mylib::frobnicate" in a["coverage"]["unmodeled_by_op"]


@pytest.mark.parametrize("field, value", [
    ("dur", -50), ("dur", 1e300), ("dur", 10**400), ("ts", 1e300), ("ts", -(10**30)), ("dur", None), ("ts", None),
])
def test_negative_huge_or_missing_times_are_skipped_and_said(capsys, tmp_path, field, value):
    doc = with_event(2, **{field: value})
    a = expect_report(capsys, tmp_path, write(tmp_path, doc), "missing, negative or non-finite ts/dur")
    assert a["trace"]["gpu_events"] == 1
    assert a["coverage"]["device_time_us"] == 5.0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_literals_are_read_as_missing(capsys, tmp_path, literal):
    """Decision: Python's json.dump writes NaN/Infinity (not JSON). Rather than refuse a whole
    trace for one such value, read it as missing and say so."""
    text = json.dumps(good_doc()).replace('"dur": 50', f'"dur": {literal}', 1)
    assert literal in text
    a = expect_report(capsys, tmp_path, write(tmp_path, text), "NaN, Infinity or out-of-range numbers",
                      "missing, negative or non-finite ts/dur")
    assert a["trace"]["gpu_events"] == 1
    # NaN in an arg the report does not use: still one warning, and a full analysis
    text = json.dumps(good_doc()).replace('"stream": 7', '"stream": 7, "occupancy": NaN', 1)
    a = expect_report(capsys, tmp_path, write(tmp_path, text), "NaN, Infinity or out-of-range numbers")
    assert a["trace"]["gpu_events"] == 2


def test_not_utf8_lone_surrogates_and_bom(capsys, tmp_path):
    raw = json.dumps(good_doc()).encode()
    bad = raw.replace(b"sgemm_kernel", b"sgemm_\xff\xfe_kernel")
    a = expect_report(capsys, tmp_path, write(tmp_path, bad), "not UTF-8")
    assert any("\ufffd" in o["name"] or "\ufffd" in str(o["kernels"]) for o in a["ops"])
    lone = raw.replace(b"sgemm_kernel", b"sgemm_\\ud800_kernel")
    expect_report(capsys, tmp_path, write(tmp_path, lone), "lone UTF-16 surrogates")
    a = expect_report(capsys, tmp_path, write(tmp_path, b"\xef\xbb\xbf" + raw))
    assert a["warnings"] == [] and len(a["ops"]) == 2


def test_top_level_fields_of_the_wrong_type(capsys, tmp_path):
    doc = good_doc()
    doc["deviceProperties"] = "Tesla T4"
    doc["distributedInfo"] = [0, 1]
    a = expect_report(capsys, tmp_path, write(tmp_path, doc), "deviceProperties, distributedInfo has an unexpected type")
    assert a["device"]["key"] is None


def test_device_properties_out_of_range(capsys, tmp_path):
    """Found by the long fuzz run: numSms = 1e400 written as an integer crashed the renderer."""
    text = json.dumps(good_doc()).replace('"numSms": 40', '"numSms": 1' + "0" * 400)
    a = expect_report(capsys, tmp_path, write(tmp_path, text), "numSms out of range; ignored")
    assert a["device"]["sms"] is None or a["device"]["sms"] < 2**63


def test_non_object_events_are_skipped_and_said(capsys, tmp_path):
    doc = good_doc()
    doc["traceEvents"] += [1, "x", None, [1]]
    a = expect_report(capsys, tmp_path, write(tmp_path, doc), "4 could not be read at all")
    assert len(a["ops"]) == 2


# ------------------------------------------------------------------ linking problems


def test_events_out_of_order_give_the_same_analysis(capsys, tmp_path):
    a = expect_report(capsys, tmp_path, write(tmp_path, good_doc(), "a.json"))
    doc = good_doc()
    doc["traceEvents"].reverse()
    b = expect_report(capsys, tmp_path, write(tmp_path, doc, "a.json"))
    assert a == b


def test_missing_correlation_ids_are_opaque_and_said(capsys, tmp_path):
    doc = good_doc()
    for ev in doc["traceEvents"]:
        ev["args"].pop("correlation", None)
        ev["args"].pop("External id", None)
    a = expect_report(capsys, tmp_path, write(tmp_path, doc), "cannot be costed from what the trace recorded (no launch 100.0%)")
    assert {o["cause"] for o in a["ops"]} == {"no_launch"}


def test_missing_external_ids_still_link_by_nesting(capsys, tmp_path):
    doc = good_doc()
    for ev in doc["traceEvents"]:
        ev["args"].pop("External id", None)
    a = expect_report(capsys, tmp_path, write(tmp_path, doc))
    assert a["warnings"] == []
    assert op_named(a, "aten::mm")["flops"] == 2 * 256**3


def test_duplicated_correlation_ids_are_said(capsys, tmp_path):
    doc = good_doc()
    doc["traceEvents"][4]["args"]["correlation"] = 1  # the add's launch reuses the mm launch's id
    doc["traceEvents"][5]["args"]["correlation"] = 1
    expect_report(capsys, tmp_path, write(tmp_path, doc), "reuse another launch's correlation id")


def test_duplicated_external_ids_are_said_when_used(capsys, tmp_path):
    doc = good_doc()
    for ev in doc["traceEvents"]:
        ev["args"]["External id"] = 7
    # the launches on another thread: only External ids can link them
    for i in (1, 4):
        doc["traceEvents"][i]["tid"] = 99
    doc["traceEvents"].append(s.launch(5000, 3, ext=7, tid=99))
    expect_report(capsys, tmp_path, write(tmp_path, doc), "reuse another op's External id")


def test_huge_ids_do_not_overflow(capsys, tmp_path):
    doc = with_event(2, **{"args.correlation": 10**30, "args.External id": -(10**30), "args.device": 2**70})
    a = expect_report(capsys, tmp_path, write(tmp_path, doc), "cannot be costed from what the trace recorded")
    assert a["trace"]["gpu_events"] == 2


# ------------------------------------------------------------------ traces with nothing to explain


def test_cpu_only_trace_says_so(capsys, tmp_path):
    doc = s.trace([e for e in good_events() if e["cat"] == "cpu_op"], props=())
    path = write(tmp_path, doc)
    a = expect_report(capsys, tmp_path, path)
    assert any("no GPU activity" in w for w in a["warnings"])
    assert a["ops"] == [] and a["coverage"]["device_time_us"] == 0
    # said once: no second warning about the unknown device of a run that used none
    assert len([w for w in a["warnings"] if "GPU" in w or "device" in w]) == 1
    assert a["cpu"]["op_calls"] > 0 and a["cpu"]["by_self_time"]
    # and said once in every report: the verdict says it, the warnings list does not repeat it
    page = html.unescape((tmp_path / "report.html").read_text(encoding="utf-8"))
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    for shown in (page, md):
        assert shown.lower().count("no gpu activity") == 1, shown
    assert main(["report", path, "-o", str(tmp_path / "again.md")]) == 0
    terminal = capsys.readouterr().out
    assert terminal.lower().count("no gpu activity") == 1, terminal
    # 2 CPU ops (aten::mm, aten::add): "2 CPU op calls"; the device line is not printed
    assert "2 CPU op calls" in terminal and "unknown device" not in terminal


def test_cpu_only_sample_trace_says_so(capsys, tmp_path):
    p = SAMPLES / "cpu_mlp_train.json.gz"
    if not p.exists():
        pytest.skip("no CPU sample trace")
    a = expect_report(capsys, tmp_path, str(p))
    assert a["warnings"][0].startswith("no GPU activity")
    # 2 ProfilerStep annotations; the matmuls take the most CPU self time
    assert a["cpu"]["steps"] == 2 and a["cpu"]["by_self_time"][0]["name"] == "aten::mm"
    assert len(a["warnings"]) == 1


def test_empty_event_list_says_nothing_to_analyse(capsys, tmp_path):
    a = expect_report(capsys, tmp_path, write(tmp_path, {"traceEvents": []}), "nothing to analyse")
    assert a["ops"] == []


# ------------------------------------------------------------------ the real process


def cli(*args: str, cwd: Path = REPO, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("TRACEANA_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "traceana", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceana: "), proc.stderr
    return lines[0]


def test_end_to_end_errors_are_one_line(tmp_path):
    gz = gzip.compress(T4.read_bytes())
    empty_dir = tmp_path / "no-traces"
    empty_dir.mkdir()
    (empty_dir / "notes.txt").write_text("x")
    cases = {
        write(tmp_path, b"", "empty.json"): "file is empty",
        write(tmp_path, gz[: len(gz) // 2], "cut.json.gz"): "gzip",
        write(tmp_path, T4.read_bytes()[:5000], "cut.json"): "not valid JSON",
        str(empty_dir): "is a directory with no trace files",
    }
    for path, phrase in cases.items():
        line = one_line_error(cli("report", path, "-o", str(tmp_path / "out.html")))
        assert path in line and phrase in line


def test_end_to_end_control_characters_in_a_path_stay_on_one_line(tmp_path):
    odd = tmp_path / "bad\nname\x1b[2J\u2028.json"
    odd.write_bytes(b"{")
    line = one_line_error(cli("report", str(odd), "-o", str(tmp_path / "out.html")))
    assert "\\x0a" in line and "\\x1b" in line and "\x1b" not in line


def test_end_to_end_warning_report(tmp_path):
    p = write(tmp_path, json.dumps(good_doc()).replace('"dur": 50', '"dur": NaN', 1))
    before = sha(p)
    proc = cli("report", p, "-o", str(tmp_path / "r.md"))
    assert proc.returncode == 0 and proc.stderr == "" and "Traceback" not in proc.stdout
    assert "warning: the trace has 1 NaN" in proc.stdout
    assert "NaN, Infinity" in (tmp_path / "r.md").read_text()
    assert sha(p) == before


def test_end_to_end_non_utf8_file_name(tmp_path):
    if sys.platform == "darwin":
        pytest.skip("macOS file names must be UTF-8")
    name = os.fsencode(str(tmp_path)) + b"/trace-\xff.json"
    with open(name, "wb") as fh:
        fh.write(json.dumps(good_doc()).encode())
    for ext in ("json", "html", "md"):
        proc = cli("report", os.fsdecode(name), "-o", str(tmp_path / f"r.{ext}"), "-q")
        assert proc.returncode == 0, proc.stderr
        assert "\ufffd" in (tmp_path / f"r.{ext}").read_text(encoding="utf-8")


def test_deep_copy_of_doc_is_independent():
    """Guard for the helpers above: mutating one case never leaks into another."""
    a = good_doc()
    b = copy.deepcopy(a)
    with_event(0, ts=5)
    assert a == b == good_doc()


def test_a_gz_name_without_gzip(capsys, tmp_path):
    """A .json.gz that is not gzip says so; one that is plain JSON despite its name is read as JSON."""
    expect_error(capsys, tmp_path, write(tmp_path, b"plain text, not gzip", "t.json.gz"), "not gzip")
    plain = write(tmp_path, T4.read_bytes(), "plain.json.gz")
    a = expect_report(capsys, tmp_path, plain)
    assert a["coverage"]["device_time_us"] > 0  # the T4 sample, read despite its name
