"""The README fits on a page and its links resolve; docs/cli.md is the commands' own reference."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

README = REPO / "README.md"


def test_readme_fits_on_a_page():
    text = README.read_text(encoding="utf-8")
    assert len(text) <= 12_000, len(text)
    assert "## Quickstart" in text and "Contents:" in text


def test_quickstart_has_exactly_two_commands():
    text = README.read_text(encoding="utf-8")
    block = text.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2, commands
    assert "traceana report sample_traces/" in commands[0]
    assert "pytest" in commands[1]


def test_every_relative_link_resolves():
    for page in [README, *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_cli_reference_is_current():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "cli_reference.py"), "--check"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_help_texts_have_no_printf_escapes():
    # click prints help strings verbatim: a '%%' meant for printf-style formatting shows as '%%'
    for mod in sorted((REPO / "traceana" / "cli").glob("*.py")):
        assert "%%" not in mod.read_text(encoding="utf-8"), mod.name
