"""Where the HTML report's template and static assets live, and the jinja2 environment.

The files live in the repository's top-level `templates/` folder; the wheel ships them as
`traceana/templates` (pyproject force-include). An installed package finds them with
importlib.resources; an editable or source checkout finds them next to the package.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup

from traceana.errors import TraceanaError

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; annotations only
    from importlib.resources.abc import Traversable

#: Static assets include_file may paste; anything else is refused.
ASSETS: tuple[str, ...] = ("report.css", "report.js")


def template_dir() -> Traversable:
    """The folder holding report.html.j2 and its assets (wheel first, then checkout)."""
    try:
        packaged = resources.files("traceana") / "templates"
        if packaged.is_dir():
            return packaged
    except (ModuleNotFoundError, NotADirectoryError, FileNotFoundError):
        pass
    checkout = Path(__file__).resolve().parents[2] / "templates"
    if checkout.is_dir():
        return checkout
    raise TraceanaError(
        "traceana's report templates are missing: expected traceana/templates in the "
        f"installed package or {checkout} in a source checkout; reinstall traceana"
    )


def _read(name: str) -> str:
    """The text of one file in the template folder (names are ours, never user input)."""
    if "/" in name or "\\" in name or name.startswith("."):
        raise TraceanaError(f"bad template name {name!r}")
    path = template_dir() / name
    if not path.is_file():
        raise TraceanaError(f"traceana's report template {name!r} is missing; reinstall traceana")
    return path.read_text(encoding="utf-8")


def include_file(name: str) -> Markup:
    """Paste a static asset (CSS or JS) into the page verbatim, as memray's reporters do."""
    if name not in ASSETS:
        raise TraceanaError(f"{name!r} is not a report asset")
    return Markup(_read(name))


def _load(name: str) -> tuple[str, None, None]:
    # No filename and no uptodate check: templates are read once per environment.
    return _read(name), None, None


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The jinja2 environment for the reports: autoescaped, strict JSON, sorted keys."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    # |tojson: sorted keys for stable bytes; allow_nan=False so a NaN that slipped past
    # the sanitiser fails loudly instead of producing JSON that JSON.parse rejects.
    env.policies["json.dumps_kwargs"] = {
        "sort_keys": True,
        "allow_nan": False,
        "ensure_ascii": False,
        "separators": (",", ":"),
    }
    env.globals["include_file"] = include_file
    return env
