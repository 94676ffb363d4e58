"""Many distinct op names (issue 24): the unmodelled finding ranks names in one pass (it summed
over every unmodelled row per name: 100,000 names took 517 s), and a trace of more names than
any model has is refused in one clear line rather than analysed for minutes."""

from __future__ import annotations

import json

import pytest

from tests import synth as s
from traceana import analysis
from traceana.analysis import analyze
from traceana.errors import BadInput


def _trace(tmp_path, names_times):
    ev = []
    t = 0.0
    for i, (name, dur) in enumerate(names_times, 1):
        ev += [s.op(name, t, dur + 4, ext=i, dims=[[8, 8]]), s.launch(t + 1, corr=i, ext=i),
               s.kernel(f"k_{name.replace(':', '_')}", t + 2, dur, corr=i)]
        t += dur + 10
    return s.write(tmp_path, s.trace(ev))


def test_unmodelled_names_ranked_by_their_summed_time(tmp_path):
    """custom::b runs 3 x 30 = 90 us in all, more than custom::a's one 80 us call: b is named
    first among the largest, then a (80), then c (2 x 10 = 20)."""
    path = _trace(tmp_path, [("custom::a", 80.0), ("custom::b", 30.0), ("custom::c", 10.0), ("custom::b", 30.0),
                             ("custom::b", 30.0), ("custom::c", 10.0)])
    a = analyze(path)
    f = next(f for f in a["findings"] if f["kind"] == "unmodelled")
    largest = f["text"].split("Why, for the largest: ")[1]
    assert largest.index("custom::b") < largest.index("custom::a") < largest.index("custom::c")


def test_more_names_than_a_model_has_are_refused(tmp_path, monkeypatch):
    """Over analysis.MAX_NAMES distinct names (lowered here to 100): BadInput naming the count and
    the usual cause. 40 ops + 40 kernels + cudaLaunchKernel = 81 names pass; 60 + 60 + 1 = 121 do not."""
    monkeypatch.setattr(analysis, "MAX_NAMES", 100)
    assert analyze(_trace(tmp_path, [(f"custom::op{i}", 5.0) for i in range(40)]))["ops"]
    with pytest.raises(BadInput, match=r"121 distinct op and kernel names \(more than 100\).*unique per call"):
        analyze(_trace(tmp_path, [(f"custom::op{i}", 5.0) for i in range(60)]))


def test_the_analysis_as_saved_is_what_json_gives_back(tmp_path):
    """html and md are rendered from the analysis as saved (json_out.as_saved): the same
    document, key order included, as writing the JSON and reading it back, with NaN, tuples,
    numpy numbers and non-string keys in it; without the text (100,000 rows: seconds faster)."""
    import numpy as np

    from traceana.render.json_out import as_saved, render_json

    a = analyze(_trace(tmp_path, [("custom::a", 80.0), ("aten::mm", 30.0)]))
    a["extra"] = {"z": (1, 2.5), 3: float("nan"), "b": [np.float64(1.5), np.int64(7), {"y": 1, "x": (None,)}],
                  "a": {float("inf"), 2}, "deep": [[[1, 2], (3,)]]}
    back = json.loads(render_json(a))
    assert as_saved(a) == back
    assert json.dumps(as_saved(a)) == json.dumps(back)  # key order too
