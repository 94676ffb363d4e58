"""The package reads as its pipeline, and no import runs against it.

Every module of traceana/ belongs to one layer below (a stage package, or the helpers every stage
shares); a module may import its own layer and the layers before it, never a later one. Lazy
imports inside functions count too: an import run late is still an import against the flow.
The imports are read with ast, nothing is imported.
"""
# rewrite_imports: skip  (the layers below name the new packages; the old-path rewriter must leave them)

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "traceana"

#: In pipeline order. A module belongs to the first entry that is its path or a prefix of it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the helpers every stage shares, and the files traceana writes
    ("traceana", "traceana.errors", "traceana.numbers", "traceana.arrays", "traceana.lazy_re", "traceana.cxx_names",
     "traceana.units", "traceana.meter", "traceana.output"),
    ("traceana.load",),
    ("traceana.cost",),  # the formula library: OpCall -> Cost; knows nothing of traces
    ("traceana.link",),
    ("traceana.roofline",),
    ("traceana.diagnose",),
    ("traceana.modules",),  # which module and line issued each op (after link; the analysis calls it last)
    ("traceana.analysis",),
    ("traceana.document",),  # reading an Analysis dict, for everything after the pipeline
    ("traceana.ranks",),
    ("traceana.compare",),
    ("traceana.render",),
    ("traceana.annotate",),  # the trace rewritten with the Analysis' verdicts (after the analysis; no render)
    ("traceana.measure",),
    ("traceana.cli", "traceana.api", "traceana.__main__"),
)

#: What may sit at the top of traceana/: the pipeline, the API and the shared helpers.
TOP_LEVEL = {"__init__.py", "__main__.py", "analysis.py", "api.py", "arrays.py", "cxx_names.py", "document.py",
             "errors.py", "lazy_re.py", "meter.py", "numbers.py", "units.py"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def layer(mod: str) -> int:
    """The layer of `mod`: the entry that is its path or its package's ("traceana" itself only as
    the package face: a new package has to be placed in LAYERS)."""
    best, best_len = None, -1
    for i, names in enumerate(LAYERS):
        for n in names:
            if (mod == n or (n != "traceana" and mod.startswith(n + "."))) and len(n) > best_len:
                best, best_len = i, len(n)
    assert best is not None, (f"{mod}: in no layer of tests/test_import_flow.py (add its package to LAYERS, "
                              "after the stages it imports and before those that import it)")
    return best


def imports(mod: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every traceana import in `path`, lazy ones included; `from a import b`
    names module a.b when that is a module, else a."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "traceana"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            if src.split(".")[0] != "traceana":
                continue
            for a in node.names:
                sub = f"{src}.{a.name}"
                out.append((node.lineno, sub if sub in known else src))
    return out


def test_every_module_is_in_a_layer():
    for mod in modules():
        layer(mod)


def test_no_import_runs_against_the_flow():
    mods = modules()
    known = set(mods)
    bad = []
    for mod, path in mods.items():
        mine = layer(mod)
        for line, target in imports(mod, path, known):
            if layer(target) > mine:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} {mod} imports {target} (a later stage)")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("early, late", [
    (("traceana.load", "traceana.cost", "traceana.link", "traceana.roofline", "traceana.diagnose", "traceana.analysis",
      "traceana.ranks", "traceana.compare"), ("traceana.render", "traceana.cli")),
    (("traceana.measure",), ("traceana.cli",)),
])
def test_named_stages_never_import_the_presentation(early, late):
    """The issue's cases by name (the layer test implies them; this one says them): the analysis
    never imports render or cli, and the commands that run torch never reach into cli."""
    mods = modules()
    known = set(mods)
    bad = [f"{mod} imports {t}" for mod, path in mods.items() if mod.startswith(early)
           for _, t in imports(mod, path, known) if t.startswith(late)]
    assert not bad, "\n".join(bad)


def test_the_top_level_holds_only_the_pipeline_the_api_and_shared_helpers():
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name not in TOP_LEVEL)
    assert not loose, f"modules loose at the top of traceana/ (give them their stage package): {loose}"


def logic_lines(path: Path) -> int:
    """Lines of code: not blank, not a comment, not a docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                doc_lines.update(range(first.lineno, first.end_lineno + 1))
    n = 0
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#") and i not in doc_lines:
            n += 1
    return n


def test_package_faces_stay_thin():
    fat = {str(p.relative_to(PKG.parent)): n for p in PKG.rglob("__init__.py") if (n := logic_lines(p)) > 40}
    assert not fat, f"package __init__.py over 40 lines of logic (move the code to a module named for it): {fat}"


def test_a_new_package_must_be_placed():
    with pytest.raises(AssertionError, match="in no layer"):
        layer("traceana.newstage.thing")


def test_the_layer_check_sees_a_lazy_upward_import(tmp_path):
    """The checker itself: an import inside a function, to a later stage, is found."""
    src = tmp_path / "mod.py"
    src.write_text("def f():\n    from traceana.render.views import verdict\n    return verdict\n")
    found = imports("traceana.ranks.cross_rank.fake", src, {"traceana.render.views"})
    assert found == [(2, "traceana.render.views")]
    assert layer("traceana.render.views") > layer("traceana.ranks.cross_rank.fake")
