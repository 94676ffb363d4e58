"""Numbers that are not what they look like never crash traceana (exit 3), on either loader.

`'²'.isdigit()` is True and `int('²')` raises; Python's int() also takes '٣' and '1_000', which no
trace or option means. A 400-digit integer is a valid JSON number that no float holds. Every place
that turns trace text, a file name or an option into a number reads ASCII digits only
(traceana/numbers.py) and treats an out-of-range value as unknown.

Before: a rank file `rank1²2.json`, `deviceProperties.numSms: "²"`, a MoE top-k Concrete Input
"²", `devices --cc 9.²` all exited 3 (internal error); a GPU event with a 400-digit grid exited 3
on the C scanner's path only.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests import synth as s
from traceana.cli import main
from traceana.numbers import ascii_int, finite

LOADERS = pytest.mark.parametrize("pure", ["0", "1"], ids=["scanner", "python"])

BIG = 10 ** 400


def test_ascii_int_and_finite():
    assert "²".isdigit() and ascii_int("²") is None
    assert ascii_int("٣") is None and ascii_int("1_000") is None and ascii_int(" 12 ") is None
    assert ascii_int("12") == 12 and ascii_int("007") == 7 and ascii_int("") is None and ascii_int(None) is None
    assert ascii_int("-3") is None and ascii_int("-3", signed=True) == -3
    assert ascii_int("9" * 5000) is None  # beyond int()'s 4,300-digit limit: not a real count
    assert finite(BIG) is None and finite(-BIG) is None and finite("1e400") is None
    assert finite(float("nan")) is None and finite(True) is None and finite("2.5") == 2.5 and finite(3) == 3.0


def _run(args, capsys):
    rc = main(args)
    err = capsys.readouterr().err
    assert rc != 3 and "internal error" not in err, err
    return rc, err


@LOADERS
def test_a_400_digit_grid(tmp_path, capsys, monkeypatch, pure):
    monkeypatch.setenv("TRACEANA_PURE_PYTHON", pure)
    ev = [s.op("aten::add", 0, 100, ext=1, dims=[[1024], [1024], []], types=["float", "float", "Scalar"]),
          s.launch(10, 1, ext=1),
          s.kernel("add_kernel", 20, 5, 1, ext=1, extra={"grid": [BIG, 1, 1], "block": [128, 1, 1]})]
    p = s.write(tmp_path, s.trace(ev))
    rc, _ = _run(["report", p, "-o", str(tmp_path / "r.json"), "-q"], capsys)
    assert rc == 0
    k = json.loads((tmp_path / "r.json").read_text())
    # the grid is not a block count anyone could launch: unknown, as on the Python loader
    assert k["ops"][0]["name"] == "aten::add"


@LOADERS
def test_num_sms_superscript(tmp_path, capsys, monkeypatch, pure):
    monkeypatch.setenv("TRACEANA_PURE_PYTHON", pure)
    props = dict(s.T4, numSms="²")
    ev = [s.op("aten::add", 0, 100, ext=1, dims=[[1024], [1024], []], types=["float", "float", "Scalar"]),
          s.launch(10, 1, ext=1), s.kernel("add_kernel", 20, 5, 1, ext=1)]
    p = s.write(tmp_path, s.trace(ev, props=(props,)))
    rc, _ = _run(["report", p, "-o", str(tmp_path / "r.json"), "-q"], capsys)
    assert rc == 0
    assert json.loads((tmp_path / "r.json").read_text())["device"]["key"] == "t4"  # matched by name, numSms unknown


def _moe_trace(k: str) -> dict:
    """vllm::moe_forward over T=4 tokens, H=256, E=8 experts; the expert weights are recorded as
    [E, ., .] views inside it and top-k as a topk op's Concrete Input `k`."""
    t, h, e, i = 4, 256, 8, 128
    ev = [s.op("vllm::moe_forward", 0, 100, ext=1, dims=[[t, h], [t, e], [], []],
               types=["c10::BFloat16", "c10::BFloat16", "", ""]),
          s.op("aten::topk", 5, 5, ext=2, dims=[[t, e], [], [], [], []],
               types=["c10::BFloat16", "Scalar", "Scalar", "Scalar", "Scalar"], concrete=["", k, "-1", "True", "True"]),
          s.op("aten::view", 20, 1, ext=3, dims=[[e, 2 * i, h], []], types=["c10::BFloat16", ""]),
          s.op("aten::view", 30, 1, ext=4, dims=[[e, h, i], []], types=["c10::BFloat16", ""]),
          s.launch(40, 1, ext=1), s.kernel("fused_moe_kernel", 50, 20, 1, ext=1)]
    return s.trace(ev)


@LOADERS
def test_moe_top_k_superscript(tmp_path, capsys, monkeypatch, pure):
    monkeypatch.setenv("TRACEANA_PURE_PYTHON", pure)
    good = s.write(tmp_path, _moe_trace("2"), "good.json")
    _run(["report", good, "-o", str(tmp_path / "g.json"), "-q"], capsys)
    moe = next(o for o in json.loads((tmp_path / "g.json").read_text())["ops"] if o["name"] == "vllm::moe_forward")
    p = s.write(tmp_path, _moe_trace("²"))
    rc, _ = _run(["report", p, "-o", str(tmp_path / "r.json"), "-q"], capsys)
    assert rc == 0
    bad = next(o for o in json.loads((tmp_path / "r.json").read_text())["ops"] if o["name"] == "vllm::moe_forward")
    # FLOPs = 2*T*k*H*N1 + 2*T*k*I*H = 2*4*2*256*256 + 2*4*2*128*256 = 1,048,576 + 524,288 = 1,572,864 (k = 2)
    assert moe["flops"] == 1572864
    # k = '²' is no number: not read, so k = 1 is assumed and said (a lower bound): half the FLOPs
    assert bad["flops"] == 786432 and any(n.startswith("top-k not recorded inside the op") for n in bad["notes"])


def test_rank_file_name_with_a_superscript(tmp_path, capsys):
    from tests.rank_traces import make_rank_dir

    d = tmp_path / "ranks"
    make_rank_dir(d, n=2)
    (d / "rank1.json.gz").rename(d / "rank1²2.json.gz")
    rc, _ = _run(["report", str(d), "-o", str(tmp_path / "r.json"), "-q", "--jobs", "1"], capsys)
    assert rc == 0
    assert [r["file"] for r in json.loads((tmp_path / "r.json").read_text())["ranks"]] == \
        ["rank0.json.gz", "rank1²2.json.gz"]


@pytest.mark.parametrize("cc", ["9.²", "²", "٩.0", "9.0_0"])
def test_devices_cc_not_ascii_digits(capsys, cc):
    rc, err = _run(["devices", "--match", "NVIDIA H100", "--cc", cc], capsys)
    assert rc == 2 and "MAJOR.MINOR" in err


def test_calibrate_device_not_ascii_digits(tmp_path, capsys):
    rc, err = _run(["calibrate", "--device", "cuda:²", "-o", str(tmp_path / "p.json")], capsys)
    assert rc == 2 and "cuda:N" in err


# ------------------------------------------------------------------ every number of a trace, out of range

def _rich_trace() -> dict:
    """One event of each role with every numeric field traceana reads: ops with shapes and
    concrete inputs, a launch, kernels with grid/blocks, a memcpy with bytes, an NCCL collective
    with its record_param_comms arguments, a ProfilerStep, distributedInfo and deviceProperties."""
    comm_args = {"Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576,
                 "Group size": 2, "dtype": "Float", "Process Group Ranks": "[0, 1]", "Rank": 0}
    ev = [s.annotation("ProfilerStep#3", 0, 1000),
          s.op("aten::mm", 10, 100, ext=1, dims=[[256, 256], [256, 256]]),
          s.launch(20, 1, ext=1),
          s.kernel("volta_sgemm_128x64_nn", 30, 50, 1, ext=1, extra={"grid": [16, 4, 1], "block": [256, 1, 1],
                                                                     "registers per thread": 128,
                                                                     "shared memory": 16384,
                                                                     "est. achieved occupancy %": 25}),
          s.op("aten::add", 200, 50, ext=2, dims=[[1024], [1024], []], types=["float", "float", "Scalar"],
               concrete=["", "", "1"]),
          s.launch(210, 2, ext=2),
          s.kernel("add_kernel", 220, 5, 2, ext=2),
          s.op("aten::copy_", 300, 50, ext=3, dims=[[4096], [4096], []], types=["float", "float", "Scalar"]),
          s.launch(310, 3, ext=3, name="cudaMemcpyAsync"),
          s.kernel("Memcpy HtoD (Pinned -> Device)", 320, 10, 3, ext=3, cat="gpu_memcpy",
                   extra={"bytes": 16384, "memory bandwidth (GB/s)": 1.6}),
          s.op("record_param_comms", 400, 50, ext=4, dims=[[1048576]], types=["float"]),
          s.launch(410, 4, ext=4),
          s.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 420, 100, 4, ext=4)]
    ev[-3]["args"].update(comm_args)
    return s.trace(ev, distributedInfo={"rank": 0, "world_size": 2, "backend": "nccl"})


def _leaves(doc, path=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))
    else:
        yield path, doc


def _set(doc, path, value):
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


@LOADERS
def test_every_number_out_of_range_or_a_superscript(tmp_path, monkeypatch, pure):
    """Each numeric leaf of the trace (and each digit string) in turn becomes a 400-digit integer,
    its negative, 1e400 written out, and '²': the analysis finishes or says BadInput, never crashes."""
    from traceana.analysis import analyze
    from traceana.errors import BadInput

    monkeypatch.setenv("TRACEANA_PURE_PYTHON", pure)
    base = _rich_trace()
    sites = [(p, v) for p, v in _leaves(base)
             if (isinstance(v, (int, float)) and not isinstance(v, bool)) or (isinstance(v, str) and v.isdigit())]
    assert len(sites) > 60
    crashes = []
    for path, _ in sites:
        for value in (BIG, -BIG, "1e400", "²"):
            doc = copy.deepcopy(base)
            _set(doc, path, value)
            text = json.dumps(doc)
            if value == "1e400":
                text = text.replace('"1e400"', "1e400")
            f = tmp_path / "t.json"
            f.write_text(text)
            try:
                analyze(str(f))
            except BadInput:
                pass
            except Exception as exc:  # noqa: BLE001 - the finding
                crashes.append((path, value if value != BIG else "10**400", f"{type(exc).__name__}: {exc}"[:200]))
    assert not crashes, crashes[:10]


@LOADERS
def test_numbers_inside_names(tmp_path, capsys, monkeypatch, pure):
    """Digits a name carries (ProfilerStep#N, a graph batch size, OpaqueType<N>, rankN in a file name)
    are read as ASCII runs of a sane length: '٣', '²' or 5,000 digits are no number."""
    monkeypatch.setenv("TRACEANA_PURE_PYTHON", pure)
    long = "9" * 5000
    ev = [s.annotation("ProfilerStep#" + long, 0, 500), s.annotation("ProfilerStep#٣", 0, 400),
          s.annotation("execute_" + long + "_decode", 0, 300),
          s.op("aten::add", 10, 100, ext=1, dims=[[1024], [1024], []], types=["float", "float", "Scalar"]),
          s.launch(20, 1, ext=1),
          s.kernel(f"void at::native::elementwise_kernel<OpaqueType<{'9' * 400}u>>", 30, 5, 1, ext=1)]
    p = s.write(tmp_path, s.trace(ev), f"rank{long[:200]}.json")
    rc, _ = _run(["report", p, "-o", str(tmp_path / "r.json"), "-q"], capsys)
    assert rc == 0
    from tests.rank_traces import make_rank_dir

    d = tmp_path / "ranks"
    make_rank_dir(d, n=2)
    (d / "rank1.json.gz").rename(d / f"rank{long[:200]}.json.gz")
    (d / "rank0.json.gz").rename(d / "rank٣.json.gz")
    rc, _ = _run(["report", str(d), "-o", str(tmp_path / "k.json"), "-q", "--jobs", "1"], capsys)
    assert rc == 0
