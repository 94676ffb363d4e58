"""Mutation fuzzing of real traces through the whole pipeline (load -> analyse -> html/md/json).

The promise checked: for any bytes, `analyze` either raises BadInput (one clear line) or
returns a complete analysis that every renderer turns into a report; never any other
exception. Seeds are small real traces (../shared/traces when present, the T4 sample always).

Budget: CI runs ~60 cases (deterministic). A long run reads TRACEANA_FUZZ_EXAMPLES:

    TRACEANA_FUZZ_EXAMPLES=10000 python -m pytest -q tests/test_fuzz.py   # or scripts/fuzz_long.py

Every failing input is also saved under $TRACEANA_FUZZ_FAILURES (default
/tmp/traceana-fuzz-failures) so it can be replayed with `traceana report FILE`.
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, TRACES
from traceana.analysis import analyze
from traceana.errors import BadInput
from traceana.render import render

SEEDS = (
    "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "hta/triton_example.json.gz",
    "tracelens/torch_compile_triton/trace.json.gz",
)
EXAMPLES = int(os.environ.get("TRACEANA_FUZZ_EXAMPLES", "0") or 0)
LONG = EXAMPLES > 0
FAILURES = Path(os.environ.get("TRACEANA_FUZZ_FAILURES", os.path.join(tempfile.gettempdir(),
                                                                        "traceana-fuzz-failures")))
ANALYSIS_KEYS = {"schema", "tool", "trace", "device", "coverage", "breakdown", "ops", "explanations",
                 "findings", "warnings"}


def seed_paths() -> list[Path]:
    paths = [TRACES / rel for rel in SEEDS if (TRACES / rel).exists()]
    return paths + [SAMPLES / "t4_seed_pow_mul.json", _recsys_seed()]


@functools.lru_cache(maxsize=None)
def _recsys_seed() -> Path:
    """A tiny recommender step built here: an FBGEMM lookup and its autograd node (paired by the
    cost pre-pass) and an all_to_all whose size comes from the op that issued it."""
    from tests import synth as s

    dims, types = s.tbe_lookup_args()
    ev = [s.op(s.TBE_FWD, 10, 50, ext=1, dims=[list(d) for d in dims], types=list(types)),
          s.launch(20, corr=1, ext=1), s.kernel("split_embedding_codegen_forward_kernel", 100, 30, corr=1),
          s.op("All2All_Pooled_Req", 70, 40, ext=2, dims=[[8192, 96]]),
          s.op("record_param_comms", 75, 20, ext=3), s.launch(80, corr=2, ext=3),
          s.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", 140, 300, corr=2, stream=20),
          s.op(s.TBE_BWD, 500, 60, ext=4, dims=[[8192, 96]]), s.launch(510, corr=3, ext=4),
          s.kernel("split_embedding_backward_codegen_rowwise_adagrad_kernel", 600, 80, corr=3)]
    path = Path(tempfile.mkdtemp(prefix="traceana-fuzz-seed-")) / "recsys_step.json"
    path.write_text(json.dumps(s.trace(ev, distributedInfo={"backend": "nccl", "rank": 0, "world_size": 8})))
    return path


@functools.lru_cache(maxsize=None)
def seed_text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")


# ------------------------------------------------------------------ values a hostile trace may hold

# Placeholders replaced in the serialised text: things json.dumps cannot write itself.
DEEP, HUGE_INT, HUGE_FLOAT, LONE = "\x00DEEP\x00", "\x00HUGEINT\x00", "\x00HUGEFLOAT\x00", "\x00LONE\x00"
RAW = {
    json.dumps(DEEP): "[" * 3000 + "]" * 3000,
    json.dumps(HUGE_INT): "1" + "0" * 400,
    json.dumps(HUGE_FLOAT): "-1e999",
    json.dumps(LONE): '"a\\ud800b\\udc00"',
}

EVIL_TEXT = st.sampled_from([
    "", "<script>alert(1)</script>", "</script><!--", "a|b`c\nd", "\u202eevil", "\u200b", "\x00",
    "{{ 7*7 }}", "NaN", "-1", "1e400", "float", "c10::Half", "aten::mm", "cudaLaunchKernel", "kernel",
    "cpu_op", "X", "TensorList", "ProfilerStep#1",
])
LEAF = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.sampled_from([-1, 0, 1, 2**63, -(2**63) - 1])
        | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12) | EVIL_TEXT
        | st.sampled_from([DEEP, HUGE_INT, HUGE_FLOAT, LONE]))
JSON_VALUE = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)
# Edge values a hostile trace puts where an id, a time or a size belongs.
EDGE = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), -1, 0, 1.5, -0.0, float("nan"),
                        float("inf"), float("-inf"), 1e308, "", "12", "abc", [], {}, [1], [[1]], True, None,
                        HUGE_INT, HUGE_FLOAT, DEEP, LONE]).map(copy.deepcopy)  # never share a mutable list
VALUE = EDGE | JSON_VALUE
# Shape-like values: lists of ints, some impossible.
DIMS = st.lists(st.lists(st.integers(-4, 2**64) | st.sampled_from([0, 1, 64, 4096]), max_size=4)
                | JSON_VALUE, max_size=5)
CONCRETE = st.lists(st.sampled_from(["", "0", "1", "-1", "2", "nan", "inf", "-inf", "1e400", "[1, 1]", "[]",
                                      "[-1]", "True", "False", "abc", "99999999999999999999", "6", "15"]),
                    max_size=8)
PROP_KEYS = ("id", "name", "numSms", "totalGlobalMem", "computeMajor", "computeMinor", "warpSize")
ARG_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs", "External id", "external id",
            "correlation", "device", "stream", "bytes", "kernel_flop", "kernel_num_gb", "grid", "block")
EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id")
HOT_CATS = {"cpu_op", "Operator", "cuda_runtime", "cuda_driver", "Runtime", "kernel", "Kernel", "gpu_memcpy",
            "gpu_memset", "Memcpy", "Memset", "user_annotation"}
TOP_KEYS = ("traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "record_shapes",
            "schemaVersion")


# ------------------------------------------------------------------ mutations


def mutate_doc(draw, doc) -> object:
    """Event- and field-level mutations of a parsed trace (in place where possible)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return doc
    if events and draw(st.booleans()):  # a window of the trace (also keeps cases fast)
        start = draw(st.integers(0, len(events) - 1))
        events = doc["traceEvents"] = events[start:start + draw(st.integers(1, 600))]
    # most mutations hit the events traceana reads (ops, launches, kernels, annotations)
    hot = [i for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in HOT_CATS]
    for _ in range(draw(st.integers(0, 16))):
        kind = draw(st.sampled_from(["drop", "dup", "swap", "reverse", "field", "arg", "dims", "delete",
                                     "event", "top", "time", "perturb", "concrete", "props"]))
        n = len(events)
        if kind == "props":
            props = doc.get("deviceProperties")
            dicts = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
            if dicts:
                dicts[draw(st.integers(0, len(dicts) - 1))][draw(st.sampled_from(PROP_KEYS))] = draw(VALUE)
            continue
        if kind == "top":
            doc[draw(st.sampled_from(TOP_KEYS))] = draw(VALUE)
            events = doc.get("traceEvents")
            if not isinstance(events, list):
                return doc
            continue
        if kind == "event":
            events.insert(draw(st.integers(0, n)), draw(JSON_VALUE))
            continue
        if n == 0:
            continue
        i = draw(st.integers(0, n - 1))
        if hot and draw(st.integers(0, 4)):
            i = min(hot[draw(st.integers(0, len(hot) - 1))], n - 1)
        ev = events[i]
        if kind == "drop":
            del events[i]
        elif kind == "dup":
            events.insert(draw(st.integers(0, n)), json.loads(json.dumps(ev)))
        elif kind == "swap":
            j = draw(st.integers(0, n - 1))
            events[i], events[j] = events[j], events[i]
        elif kind == "reverse":
            events.reverse()
        elif not isinstance(ev, dict):
            continue
        elif kind == "field":
            ev[draw(st.sampled_from(EVENT_KEYS))] = draw(VALUE)
        elif kind == "delete":
            ev.pop(draw(st.sampled_from(EVENT_KEYS)), None)
        elif kind == "time":
            ev[draw(st.sampled_from(("ts", "dur")))] = draw(
                st.sampled_from([-1, -1e9, 0, 1e17, 1e30, HUGE_INT, HUGE_FLOAT]) | st.floats())
        elif kind == "perturb":  # one number of a recorded shape, keeping the structure
            dims = ev.get("args", {}).get("Input Dims") if isinstance(ev.get("args"), dict) else None
            slots = [(a, j) for a in (dims if isinstance(dims, list) else []) if isinstance(a, list)
                     for j, x in enumerate(a) if isinstance(x, int)]
            if slots:
                a, j = slots[draw(st.integers(0, len(slots) - 1))]
                a[j] = draw(st.sampled_from([0, 1, 3, -1, 2**31, 2**40, 2**62]))
        else:
            args = ev.get("args")
            if not isinstance(args, dict):
                args = ev["args"] = {}
            if kind == "concrete":
                args["Concrete Inputs"] = draw(CONCRETE)
            else:
                args[draw(st.sampled_from(ARG_KEYS))] = draw(DIMS if kind == "dims" else VALUE)
    return doc


def serialise(doc) -> bytes:
    text = json.dumps(doc, allow_nan=True)  # NaN / Infinity literals on purpose
    for placeholder, raw in RAW.items():
        if placeholder in text:
            text = text.replace(placeholder, raw)
    return text.encode("utf-8", "surrogatepass")


def mutate_bytes(draw, data: bytes) -> bytes:
    """Byte-level damage: truncation, flipped or inserted bytes, gzip (whole or cut)."""
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "gzip", "gzip_cut"]))
        if kind == "truncate":
            data = data[:draw(st.integers(0, len(data)))]
        elif kind == "flip" and data:
            buf = bytearray(data)
            for _ in range(draw(st.integers(1, 8))):
                buf[draw(st.integers(0, len(buf) - 1))] ^= draw(st.integers(1, 255))
            data = bytes(buf)
        elif kind == "insert":
            at = draw(st.integers(0, len(data)))
            data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
        elif kind == "gzip":
            data = gzip.compress(data, compresslevel=1, mtime=0)
        elif kind == "gzip_cut":
            z = gzip.compress(data, compresslevel=1, mtime=0)
            data = z[:draw(st.integers(0, len(z)))]
    return data


@st.composite
def hostile_traces(draw) -> bytes:
    seed = draw(st.sampled_from(seed_paths()))
    doc = mutate_doc(draw, json.loads(seed_text(seed)))
    data = serialise(doc)
    if draw(st.integers(0, 3)) == 0:
        data = mutate_bytes(draw, data)
    return data


# ------------------------------------------------------------------ the property


def check_pipeline(data: bytes, workdir: Path) -> str:
    """Run the whole pipeline on `data`: 'bad-input' or 'report'. Any other exception is a bug."""
    path = workdir / "fuzz.json"
    path.write_bytes(data)
    try:
        try:
            analysis = analyze(str(path))
        except BadInput as exc:
            msg = str(exc)
            assert msg and "\n" not in msg and str(path) in msg, msg
            return "bad-input: " + msg.split(": ", 2)[1].split(" (")[0][:40]
        assert ANALYSIS_KEYS <= set(analysis), sorted(analysis)
        assert isinstance(analysis["ops"], list) and isinstance(analysis["warnings"], list)
        for op in analysis["ops"]:  # numbers are finite or None: never a NaN hidden as null later
            for key, v in op.items():
                if isinstance(v, float):
                    assert math.isfinite(v), (key, op)
            assert op["device_time_us"] >= 0
        # nothing dropped silently: every µs of device time is in exactly one row
        total = analysis["coverage"]["device_time_us"]
        rows = sum(op["device_time_us"] for op in analysis["ops"])
        assert math.isclose(rows, total, rel_tol=1e-9, abs_tol=1e-6), (rows, total)
        page = render(analysis, "html")
        assert page.rstrip().endswith("</html>") and page.count("<script") == 2
        md = render(analysis, "md")
        assert md.startswith("# traceana")
        doc = json.loads(render(analysis, "json"))
        assert doc["schema"] == analysis["schema"]
        for text in (page, md):
            text.encode("utf-8")  # no lone surrogates: the report can be written
        return "report with warnings" if analysis["warnings"] else "report"
    except BaseException:
        FAILURES.mkdir(parents=True, exist_ok=True)
        (FAILURES / f"{hashlib.sha256(data).hexdigest()[:16]}.json").write_bytes(data)
        raise


def test_seeds_give_complete_reports(tmp_path):
    for seed in seed_paths():
        assert check_pipeline(seed_text(seed).encode(), tmp_path).startswith("report")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=EXAMPLES or 60, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=hostile_traces())
def test_pipeline_never_crashes_on_mutated_traces(data, workdir):
    event(check_pipeline(data, workdir))


@pytest.mark.parametrize("cut", [0, 1, 2, 10, 100, 1000])
def test_every_truncation_of_a_gzip_seed(cut, tmp_path):
    z = gzip.compress(seed_text(SAMPLES / "t4_seed_pow_mul.json").encode(), mtime=0)
    assert check_pipeline(z[: max(len(z) - cut, 0)], tmp_path).startswith(("bad-input", "report"))
