"""The report path imports what its output format needs and no more: `traceana report` in a fresh process,
its sys.modules read at the end.

  every format   only the report command's own CLI module (the other commands load when asked for); no torch,
                 no pandas, nothing cross-rank (traceana.ranks, render.ranks_html), no comparison (compare/,
                 --fail-on's gates included when none is given)
  html           no markdown renderer
  json           no template engine (jinja2, render.templates, render.html) and no markdown
  md             no jinja2, no HTML renderer

and the number of traceana modules each format imports stays under a bound (what it imports today plus a
few): a module pulled onto the report path by accident shows here first. The whole interpreter's count
(the dependencies' modules too) has a looser bound, as the dependencies' versions move it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

TRACE = REPO / "sample_traces" / "t4_seed_pow_mul.json"

#: runs the CLI's report in this process, then prints its exit code and every module imported
_CHILD = """
import sys
sys.argv = ["traceana", "report", sys.argv[1], "-o", sys.argv[2], "-q", "--force"]
from traceana.cli import main
rc = main()
print(rc)
print("\\n".join(sorted(sys.modules)))
"""

#: traceana modules imported per format for a GPU trace that replays no graph (measured: html 161, json 148,
#: md 159 with traceana.lazy_re; 157, 144, 155 once the CPU-only modules and the graph-replay alignment became
#: imports of the traces that need them), and all modules (447, 400, 415 with numpy 2.4, click 8, jinja2 3,
#: msgspec 0.22)
BOUND_OWN = {"html": 164, "json": 151, "md": 162}
BOUND_ALL = {"html": 460, "json": 410, "md": 425}

NEVER = ("torch", "pandas", "traceana.ranks", "traceana.render.ranks_html", "traceana.render.diff_html",
         "traceana.render.diff_markdown", "traceana.compare", "traceana.measure", "traceana.annotate",
         "traceana.cli.annotate", "traceana.cli.calibrate", "traceana.cli.devices", "traceana.cli.diff",
         "traceana.cli.record", "traceana.cli.render", "traceana.cli.ranks")
#: what a GPU trace without graph replays does not need: the CPU-only diagnosis and views, the replay alignment
GPU_TRACE_NEVER = ("traceana.diagnose.cpu_levers", "traceana.diagnose.cpu_roofline", "traceana.diagnose.cpu_account",
                   "traceana.diagnose.cpu_plan", "traceana.diagnose.cpu_chains", "traceana.modules.cpu_table",
                   "traceana.render.cpu_view", "traceana.link.replay.align", "traceana.link.replay.graphs",
                   "traceana.link.replay.inject")
NOT_FOR = {
    "html": ("traceana.render.markdown", "traceana.render.markdown_long", "traceana.render.md"),
    "json": ("jinja2", "traceana.render.templates", "traceana.render.html", "traceana.render.markdown",
             "traceana.render.svg"),
    "md": ("jinja2", "traceana.render.templates", "traceana.render.html"),
}


def _modules(fmt: str, tmp_path) -> list[str]:
    out = tmp_path / f"report.{fmt}"
    p = subprocess.run([sys.executable, "-c", _CHILD, str(TRACE), str(out)], capture_output=True, text=True,
                       cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300)
    lines = p.stdout.split()
    assert p.returncode == 0 and lines and lines[0] == "0", p.stderr[-2000:]
    assert out.stat().st_size > 0
    return lines[1:]


@pytest.mark.parametrize("fmt", ["html", "json", "md"])
def test_report_imports_what_its_format_needs(fmt, tmp_path):
    mods = _modules(fmt, tmp_path)
    unwanted = [m for m in mods for bad in NEVER + GPU_TRACE_NEVER + NOT_FOR[fmt] if m == bad or m.startswith(bad + ".")]
    assert not unwanted, f"the {fmt} report imported {unwanted}"
    own = [m for m in mods if m == "traceana" or m.startswith("traceana.")]
    assert len(own) <= BOUND_OWN[fmt], f"{len(own)} traceana modules on the {fmt} report path (bound {BOUND_OWN[fmt]})"
    assert len(mods) <= BOUND_ALL[fmt], f"{len(mods)} modules in all on the {fmt} report path (bound {BOUND_ALL[fmt]})"
    assert "traceana.cli.report" in mods and "traceana.analysis" in mods
