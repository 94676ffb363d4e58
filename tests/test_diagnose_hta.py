"""HTA's timeline views fed from traceana's parse equal HTA's own result on the same trace.

Skipped when Holistic Trace Analysis is not installed (pip install 'traceana[hta]')."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, SAMPLES, shared_trace
from traceana.diagnose.hta_views import available

needs_hta = pytest.mark.skipif(not available(), reason="holistictraceanalysis not installed")


def _both(path):
    import logging

    from hta.common.trace import Trace as HtaTrace

    from traceana.diagnose import hta_views as hv
    from traceana.link.attribute import link
    from traceana.load import load_trace

    logging.disable(logging.WARNING)
    tr = load_trace(path)
    rank = hv._rank(tr)
    ours = hv.views_from_hta(hv.hta_trace(tr, link(tr)), rank)
    theirs_t = HtaTrace(trace_files={rank: os.path.abspath(path)}, trace_dir="/")
    theirs_t.load_traces(use_multiprocessing=False, use_memory_profiling=False)
    theirs = hv.views_from_hta(theirs_t, rank)
    logging.disable(logging.NOTSET)
    return ours, theirs


@needs_hta
@pytest.mark.parametrize("rel", ["tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
                                 "hta/rank0.json.gz"])
def test_views_equal_htas_own_parse(rel):
    # bert: ns timestamps (HTA rounds them), one profiler step; rank0: 5 steps (HTA drops the
    # last one's kernels), 6 streams, NCCL kernels overlapping compute
    ours, theirs = _both(shared_trace(rel))
    assert ours == theirs
    assert "error" not in str(ours["temporal"])


@needs_hta
def test_seed_trace_views():
    ours, theirs = _both(str(SAMPLES / "t4_seed_pow_mul.json"))
    assert ours == theirs
    # HTA rounds ns timestamps: each kernel's start up, end down; 236,695 µs from first start to last end
    assert ours["temporal"]["kernel_us"] == 236_695.0
    assert ours["comm_overlap_pct"] is None  # no collectives


def test_default_report_path_does_not_import_pandas():
    code = ("import sys; from traceana.analysis import analyze; "
            f"analyze({str(SAMPLES / 't4_seed_pow_mul.json')!r}); "
            "print('pandas' in sys.modules, 'hta' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.skipif(available(), reason="HTA is installed")
def test_hta_flag_without_hta_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "traceana", "report", str(SAMPLES / "t4_seed_pow_mul.json"),
                          "--hta", "-o", str(tmp_path / "r.json")], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2
    assert "pip install 'traceana[hta]'" in out.stderr
