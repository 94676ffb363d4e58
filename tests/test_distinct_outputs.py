"""No output written twice (issue 28): any two of -o, --svg, --png, --annotate naming the same file (the
same path once symlinks are resolved, or a hard link to it) are refused, one line and exit 2, before any
work. Before: `report --annotate X.json --svg X.json` exited 0 and the chart replaced the annotated trace
(-o was checked against each, not these two against each other)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import SAMPLES
from traceana.cli import main

T4 = str(SAMPLES / "t4_seed_pow_mul.json")


@pytest.mark.parametrize("args, said", [
    (["-o", "x.json", "--annotate", "x.json"], "--annotate x.json: is also the -o output"),
    (["-o", "r.md", "--annotate", "X.json", "--svg", "X.json"], "--svg X.json: is also the --annotate output"),
    (["-o", "r.md", "--svg", "a.svg", "--png", "a.svg"], "--png a.svg: is also the --svg output"),
    (["-o", "r.md", "--png", "r.md"], "--png r.md: is also the -o output"),
    (["-o", "r.md", "--svg", "./sub/../r.md"], "--svg ./sub/../r.md: is also the -o output (r.md)"),
    (["-o", "r.md", "--annotate", "a.json.gz", "--png", "a.json.gz"], "--png a.json.gz: is also the --annotate"),
])
def test_two_outputs_on_one_path_are_refused(tmp_path, monkeypatch, capsys, args, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert main(["report", T4, "-q", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "give each output a file of its own" in err
    assert sorted(os.listdir(tmp_path)) == ["sub"]  # nothing written, nothing read first


def test_symlinks_and_hard_links_are_the_same_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.md").write_text("")
    os.symlink("r.md", tmp_path / "link.svg")
    os.link(tmp_path / "r.md", tmp_path / "hard.png")
    assert main(["report", T4, "-q", "-o", "r.md", "--svg", "link.svg"]) == 2
    assert "--svg link.svg: is also the -o output (r.md)" in capsys.readouterr().err
    assert main(["report", T4, "-q", "-o", "r.md", "--png", "hard.png"]) == 2
    assert "--png hard.png: is also the -o output (r.md)" in capsys.readouterr().err
    assert (tmp_path / "r.md").read_text() == ""


def test_render_refuses_the_same_file_too(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["report", T4, "-q", "-o", "a.json"]) == 0
    assert main(["render", "a.json", "-q", "-o", "r.html", "--svg", "c.svg", "--png", "c.svg"]) == 2
    assert "--png c.svg: is also the --svg output" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["a.json"]


def test_distinct_outputs_are_all_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report", T4, "-q", "-o", "r.md", "--svg", "c.svg", "--annotate", "a.json"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["a.json", "c.svg", "r.md"]
