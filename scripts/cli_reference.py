"""Write docs/cli.md, the command-line reference, from the click commands themselves.

    python scripts/cli_reference.py            # rewrite docs/cli.md
    python scripts/cli_reference.py --check    # exit 1 if docs/cli.md is stale (tests/test_cli_reference.py)

Every command's usage line, its help text and one row per option (flags, value, default, help) come
from the commands' own declarations, so the reference cannot drift from `traceana COMMAND --help`.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "cli.md"

HEAD = """# Command-line reference

Generated from the commands' own declarations by `python scripts/cli_reference.py` (a test fails
when this page and `traceana COMMAND --help` disagree). The guide to what each command is for:
[README](../README.md); exit codes and output files: [usage.md](usage.md).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option_row(ctx: click.Context, p: click.Parameter) -> str:
    names = ", ".join(f"`{n}`" for n in [*p.opts, *p.secondary_opts])
    value = ""
    if isinstance(p, click.Option) and not p.is_flag and not p.count:
        value = p.make_metavar(ctx) if hasattr(p, "make_metavar") else ""
        if isinstance(p.type, click.Choice):
            value = "|".join(map(str, p.type.choices))
    help_text = _cell(getattr(p, "help", None) or "")
    default = getattr(p, "default", None)
    if isinstance(p, click.Option) and p.show_default and default not in (None, False, ()):
        help_text += f" (default: {default})"
    if isinstance(p, click.Option) and p.envvar:
        env = p.envvar if isinstance(p.envvar, str) else ", ".join(p.envvar)
        if env not in help_text:
            help_text += f" (env {env})"
    return f"| {names} | {_cell(value)} | {help_text} |"


def command_page(name: str, cmd: click.Command, parent: click.Context) -> str:
    ctx = click.Context(cmd, info_name=name, parent=parent)
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    lines = [f"## traceana {name}", "", f"    traceana {name} {usage}", ""]
    doc = inspect.cleandoc(cmd.help or "")
    if doc:
        lines += [click.unstyle(doc.replace("\b\n", "")), ""]
    opts = [p for p in cmd.get_params(ctx) if isinstance(p, click.Option)]
    if opts:
        lines += ["| option | value | meaning |", "|---|---|---|"]
        lines += [_option_row(ctx, p) for p in opts]
        lines.append("")
    return "\n".join(lines)


def reference() -> str:
    from traceana.cli.entry import cli

    root = click.Context(cli, info_name="traceana")
    parts = [HEAD]
    names = sorted(cli.list_commands(root), key=lambda n: (n != "report", n))
    parts.append("Commands: " + ", ".join(f"[{n}](#traceana-{n})" for n in names) + ".\n")
    for name in names:
        parts.append(command_page(name, cli.get_command(root, name), root))
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = reference()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is stale: run python scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
