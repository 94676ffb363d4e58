"""The meta-tensor fallback (cost/meta.py): opt-in, bytes only, never raises, off the default path."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from tests.conftest import REPO, SAMPLES
from tests.test_cost_garbage import _garbage
from traceana.cost import Cost, OpCall, Unmodelled, op_cost

# torch.kthvalue has no formula: (self, k, dim, keepdim) -> values [..], int64 indices [..]
KTH = OpCall("aten::kthvalue", ((8, 100), (), (), ()), ("float", "Scalar", "Scalar", "Scalar"),
             None, ("", "5", "-1", "False"))


def test_off_by_default_and_no_formula_stays_unmodelled():
    r = op_cost(KTH)
    assert isinstance(r, Unmodelled) and r.reason == "no formula for aten::kthvalue"


def test_meta_gives_bytes_not_flops():
    pytest.importorskip("torch")
    c = op_cost(KTH, meta=True)
    assert isinstance(c, Cost), c
    assert c.bytes == 8 * 100 * 4 + 8 * 4 + 8 * 8  # read self 3,200, write values (fp32) 32 + indices (int64) 64
    assert c.flops == 0 and c.estimated and any("meta tensors" in n for n in c.notes)


def test_views_cost_nothing_and_in_place_writes_self():
    pytest.importorskip("torch")
    from traceana.cost.meta import run_on_meta

    view = run_on_meta(OpCall("aten::diagonal", ((4, 4), (), (), ()), ("float", "Scalar", "Scalar", "Scalar"),
                              None, ("", "0", "0", "1")))
    assert isinstance(view, Cost) and view.bytes == 0
    add_ = run_on_meta(OpCall("aten::add_", ((4, 5), (4, 5), ()), ("float", "float", "Scalar"), None, ("", "", "1")))
    assert add_.bytes == 3 * 4 * 5 * 4  # read self and other, write self


def test_a_formula_is_never_replaced_by_meta(monkeypatch):
    import traceana.cost.meta as meta

    monkeypatch.setattr(meta, "meta_cost", lambda call: pytest.fail("meta ran for an op with a formula"))
    c = op_cost(OpCall("aten::mm", ((4, 5), (5, 6)), ("float", "float")), meta=True)
    assert isinstance(c, Cost) and c.flops == 2 * 4 * 5 * 6


def test_garbage_never_raises():
    pytest.importorskip("torch")
    from traceana.cost.meta import run_on_meta

    r = random.Random(7)
    names = ["aten::topk", "aten::sort", "aten::diag", "aten::repeat_interleave", "aten::bucketize", "aten::zeros",
             "aten::empty", "aten::nonexistent", "custom::op", "not an op", "aten::add"]
    for _ in range(120):
        res = run_on_meta(_garbage(r.choice(names), r))
        assert isinstance(res, (Cost, Unmodelled))
        if isinstance(res, Cost):
            assert res.bytes >= 0 and res.flops == 0 and res.estimated


def test_budget_and_missing_torch(monkeypatch):
    import traceana.cost.meta as meta

    monkeypatch.setattr(meta, "_spent", {"runs": meta.MAX_SIGNATURES, "seconds": 0.0})
    monkeypatch.setattr(meta, "_cache", {})
    r = meta.meta_cost(OpCall("aten::sort", ((8,),), ("float",)))
    assert isinstance(r, Unmodelled) and ("budget" in r.reason or "not installed" in r.reason)
    monkeypatch.setattr(meta, "_available", [False])
    r = meta.meta_cost(OpCall("aten::sort", ((8,),), ("float",)))
    assert isinstance(r, Unmodelled) and "not installed" in r.reason


def test_default_report_path_never_imports_torch(tmp_path):
    """analyze() and a `traceana report` with every renderer: torch stays out of sys.modules."""
    script = (
        "import sys\n"
        "from traceana.analysis import analyze\n"
        "from traceana.render import render\n"
        f"a = analyze({str(SAMPLES / 't4_seed_pow_mul.json')!r})\n"
        "for fmt in ('html', 'md', 'json'):\n"
        "    render(a, fmt)\n"
        "from traceana.cli import main\n"
        f"args = ['report', {str(SAMPLES / 't4_seed_pow_mul.json')!r}, '-o', {str(tmp_path / 'r.json')!r}, '-q']\n"
        "assert main(args) == 0\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
    cov = json.loads((tmp_path / "r.json").read_text())["coverage"]
    assert cov["meta"]["enabled"] is False and "--meta" in cov["meta"]["note"]


def test_cli_meta_flag_costs_an_op_without_formula(tmp_path):
    pytest.importorskip("torch")
    from tests import synth as s
    from traceana.cli import main

    ev = [s.op("aten::kthvalue", 10, 20, ext=1, dims=[[8, 100], [], [], []],
               types=["float", "Scalar", "Scalar", "Scalar"], concrete=["", "5", "-1", "False"]),
          s.launch(12, corr=100, ext=1),
          s.kernel("void at::native::gatherKthValue<float>(float*)", 100, 5, corr=100)]
    trace = s.write(tmp_path, s.trace(ev))
    for flag, bound in (("--meta", "memory"), ("--no-meta", "unmodelled")):
        out = tmp_path / f"r{flag}.json"
        assert main(["report", trace, "-o", str(out), "-q", flag]) == 0
        a = json.loads(out.read_text())
        op = a["ops"][0]
        assert a["coverage"]["meta"]["enabled"] is (flag == "--meta")
        assert (op["bound"] == "unmodelled") is (flag == "--no-meta"), op
        if flag == "--meta":
            assert op["meta"] and op["estimated"] and op["bytes"] == 8 * 100 * 4 + 8 * 12  # self + values, indices
