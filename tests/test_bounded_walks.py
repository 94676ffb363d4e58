"""Walks over trace-controlled depth are bounded (issue 28): module frames in a parent cycle, 100,000
nested module frames, deeply nested argument values and saved documents. Before: a frame whose parent
id is its own looped forever (both loaders, a 2-event trace); ~1,000 nested module frames died of
RecursionError (exit 3) and 5,000 took 445 MB (a tuple of names per path, a prefix tuple per tree
node); an argument nested 900 deep died of RecursionError in the signature grouping."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from traceana.analysis import analyze
from traceana.cli import main
from traceana.modules.frame_tree import ancestor as _ancestor, cut_cycles as _cut_cycles, depths as _depths
from traceana.modules.paths import MAX_DEPTH, Paths


@pytest.fixture(params=["c", "python"])
def loader(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    return request.param


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _mm_with_kernel(ts):
    """aten::mm [64x32] @ [32x16] fp32 at ts launching a 10 µs kernel."""
    return [_x("cpu_op", "aten::mm", ts, 20, **{"External id": 1, "Input Dims": [[64, 32], [32, 16]],
                                                "Input type": ["float", "float"]}),
            _x("cuda_runtime", "cudaLaunchKernel", ts + 2, 1, correlation=1),
            {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x32_nn", "pid": 0, "tid": 7, "ts": ts + 10,
             "dur": 10, "args": {"device": 0, "stream": 7, "correlation": 1, "grid": [1, 1, 1],
                                 "block": [128, 1, 1]}}]


def _doc(events):
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "numSms": 108,
                                                          "computeMajor": 8, "computeMinor": 0}]}


def _write(tmp_path, doc, name="t.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


# ---------------------------------------------------------------- parent cycles

def test_cut_cycles_by_hand():
    # 0 -> 1 -> 2 -> 0 a cycle, 3 -> 2 leads into it, 4 a root, 5 its own parent, 6 -> 4 fine
    parent = np.array([1, 2, 0, 2, -1, 5, 4])
    par, cut = _cut_cycles(parent)
    assert cut.tolist() == [0, 5]  # each cycle cut at its first-recorded frame
    assert par.tolist() == [-1, 2, 0, 2, -1, -1, 4]
    same, none = _cut_cycles(np.array([-1, 0, 1, 1]))
    assert same.tolist() == [-1, 0, 1, 1] and not len(none)


def test_depths_and_ancestors_by_pointer_jumps():
    up = np.array([-1, 0, 1, 2, 3, 0, 5])  # a chain 0-1-2-3-4 and a branch 0-5-6
    assert _depths(up).tolist() == [0, 1, 2, 3, 4, 1, 2]
    # node 4's 3rd ancestor is 1, node 6's 2nd is 0, node 3's 0th is itself
    assert _ancestor(up, np.array([4, 6, 3]), np.array([3, 2, 0])).tolist() == [1, 0, 3]


@pytest.mark.parametrize("kind", ["self", "pair"])
def test_a_module_frame_that_is_its_own_ancestor_ends(tmp_path, loader, kind):
    """`nn.Module: Loop_0` whose "Python parent id" is its own (or two module frames with equal starts naming
    each other): before, `_module_paths` looped forever. Now the cycle is cut at its first-recorded frame,
    with a warning naming it, and the op inside it is placed in its module."""
    if kind == "self":
        frames = [_x("python_function", "nn.Module: Loop_0", 0, 100,
                     **{"Python id": 5, "Python parent id": 5, "Python module id": 0})]
        first, path = "nn.Module: Loop_0", "Loop_0"
    else:
        frames = [_x("python_function", "nn.Module: A_0", 0, 100,
                     **{"Python id": 5, "Python parent id": 6, "Python module id": 0}),
                  _x("python_function", "nn.Module: B_0", 0, 100,
                     **{"Python id": 6, "Python parent id": 5, "Python module id": 1})]
        first, path = "nn.Module: A_0", "A_0/B_0"  # A_0 (recorded first) becomes the root, B_0 its child
    src = _write(tmp_path, _doc(frames + _mm_with_kernel(10)))
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "traceana", "report", src, "-o", str(out), "-q"],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    a = json.loads(out.read_text())
    cut = [w for w in a["warnings"] if "own ancestor" in w]
    assert len(cut) == 1 and repr(first) in cut[0] and "(Python id 5)" in cut[0]
    assert a["ops"][0]["module"] == path


# ---------------------------------------------------------------- 100,000 nested module frames

def _nested(n: int) -> dict:
    """n module frames, each the parent of the next (Block_0 outermost), the op in the innermost."""
    span = 10 * n + 1000
    frames = [_x("python_function", f"nn.Module: Block_{i}", i, span - 2 * i,
                 **{"Python id": i + 1, "Python parent id": i if i else None, "Python module id": i})
              for i in range(n)]
    return _doc(frames + _mm_with_kernel(n + 10))


#: runs traceana in the child and writes its peak RSS (VmHWM: this process's own, from exec on) at exit
_PEAK = """
import atexit, runpy, sys
def peak(out=sys.argv[1]):
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(out, "w").write(line.split()[1])
atexit.register(peak)
sys.argv = ["traceana", *sys.argv[2:]]
runpy.run_module("traceana", run_name="__main__")
"""


@pytest.mark.parametrize("pure", [False, True], ids=["scanner", "python"])
def test_100000_nested_module_frames(tmp_path, pure):
    """Before: 1,100 nested frames exit 3 (RecursionError), 5,000 took 445 MB, 25,000 ran out of 8 GiB.
    Now 100,000: exit 0 in its own process, peak RSS under 400 MB (measured: ~90 MB with the scanner,
    ~120 MB with the Python loader, for 20 MB of JSON); the module path stops at MAX_DEPTH = 64 names, the
    rest counted there with a warning."""
    n = 100_000
    src = _write(tmp_path, _nested(n))
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACEANA_PURE_PYTHON", None)
    if pure:
        env["TRACEANA_PURE_PYTHON"] = "1"
    peak = tmp_path / "peak.txt"
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(peak), "report", src, "-o", str(out), "-q"],
                          env=env, timeout=900, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert int(peak.read_text()) / 1024 < 400
    a = json.loads(out.read_text())
    mm = a["ops"][0]
    assert mm["module"].split("/") == [f"Block_{i}" for i in range(MAX_DEPTH)]
    tree = a["modules"]["tree"]
    assert len(tree) == MAX_DEPTH and max(t["depth"] for t in tree) == MAX_DEPTH - 1
    assert tree[-1]["time_us"] == 10.0  # the kernel's 10 µs, in Block_63 (its own and everything below)
    deep = [w for w in a["warnings"] if "nested deeper than 64 modules" in w]
    assert len(deep) == 1 and deep[0].startswith(f"{n - MAX_DEPTH:,} module calls")  # 100,000 - 64 = 99,936


def test_html_and_markdown_of_deep_modules(tmp_path):
    """2,000 nested modules, the kernel in the innermost: the HTML tree and the markdown list (made with a
    stack now, not recursion). The markdown shows the chain of 64 modules holding all the time as one item,
    its first and last 8 names."""
    n = 2000
    doc = _nested(n)
    src = _write(tmp_path, doc)
    for ext in ("html", "md"):
        assert main(["report", src, "-o", str(tmp_path / f"r.{ext}"), "-q"]) == 0
    md = (tmp_path / "r.md").read_text()
    assert "- Block\\_0/Block\\_1/Block\\_2/Block\\_3/Block\\_4/Block\\_5/Block\\_6/Block\\_7/…/Block\\_56/" in md
    assert (tmp_path / "r.html").read_text().count('<details class="mnode"') == 63  # 64 levels, the last a leaf


def test_paths_table_cuts_deep_text_paths():
    paths = Paths()
    deep = tuple(f"m{i}" for i in range(100))
    i = paths.add(deep)
    assert paths[i] == deep[:MAX_DEPTH] and paths.cut == 1
    j = paths.add(("m0", "m1", "x"))
    assert paths[j] == ("m0", "m1", "x") and paths.parent[j] == paths.add(("m0", "m1"))
    assert paths.depth[i] == MAX_DEPTH and paths.depth[j] == 3
    assert len(paths) == MAX_DEPTH + 1  # m0..m63, then m0/m1/x: m0 and m0/m1 are shared


def test_a_deep_module_hierarchy_is_cut(tmp_path, loader):
    """A TorchScript "Module Hierarchy" 100 levels deep: the path keeps 64, with a warning."""
    ev = _mm_with_kernel(10)
    ev[0]["args"]["Module Hierarchy"] = "TOP(Net)::forward." + "".join(f"m{i}(Mod{i})::forward." for i in range(99))
    a = analyze(_write(tmp_path, _doc(ev)))
    assert len(a["ops"][0]["module"].split("/")) == MAX_DEPTH
    assert any("1 recorded module path deeper than 64 modules" in w for w in a["warnings"])


# ---------------------------------------------------------------- nested values and documents

@pytest.mark.parametrize("arg", ["Input Dims", "Concrete Inputs"])
def test_deeply_nested_argument_values(tmp_path, loader, arg, capsys):
    """An argument nested 900 levels deep (msgspec reads up to about 1,000): before, RecursionError in the
    signature grouping (exit 3). Now the value is read as not recorded; report and annotate exit 0."""
    ev = _mm_with_kernel(10)
    ev[0]["args"][arg] = "@DEEP@"
    src = tmp_path / "deep.json"
    src.write_text(json.dumps(_doc(ev)).replace('"@DEEP@"', "[" * 900 + "1" + "]" * 900))
    assert main(["report", str(src), "-o", str(tmp_path / "r.json"), "-q"]) == 0
    a = json.loads((tmp_path / "r.json").read_text())
    assert a["ops"][0]["name"] == "aten::mm"
    assert main(["annotate", str(src), "-o", str(tmp_path / "a.json"), "-q"]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["traceEvents"][2]["name"] == "ampere_sgemm_64x32_nn"


def test_a_saved_document_with_a_deep_tree_renders(tmp_path):
    """A hand-made saved analysis whose module tree is a chain of 5,000 nodes: the HTML draws 64 levels,
    the markdown one chain item (its first and last names); no RecursionError."""
    src = _write(tmp_path, _nested(3))
    saved = tmp_path / "a.json"
    assert main(["report", src, "-o", str(saved), "-q"]) == 0
    a = json.loads(saved.read_text())
    node = a["modules"]["tree"][0]
    a["modules"]["tree"] = [{**node, "name": f"M{i}", "path": f"M{i}", "depth": i, "parent": i - 1}
                            for i in range(5000)]
    saved.write_text(json.dumps(a))
    assert main(["render", str(saved), "-o", str(tmp_path / "r.html"), "-q"]) == 0
    assert (tmp_path / "r.html").read_text().count('<details class="mnode"') == 63  # 64 levels, the last a leaf
    assert main(["render", str(saved), "-o", str(tmp_path / "r.md"), "-q"]) == 0
    assert "M0/M1/M2/M3/M4/M5/M6/M7/…/M4992/" in (tmp_path / "r.md").read_text()


def test_a_saved_document_nested_too_deeply_is_one_line(tmp_path, capsys):
    p = tmp_path / "deep.json"
    p.write_text('{"schema": "traceana.analysis/1", "x": ' + "[" * 5000 + "]" * 5000 + "}")
    assert main(["render", str(p), "-o", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested too deeply" in err
