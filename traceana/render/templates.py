"""Where the HTML report's template and static assets live, and the jinja2 environment.

The files live in the repository's top-level `templates/` folder; the wheel ships them as
`traceana/templates` (pyproject force-include). An installed package finds them with
importlib.resources; an editable or source checkout finds them next to the package.

Compiling report.html.j2 takes about 0.1 s, a tenth of a whole report: the compiled template is
kept between runs in the user's cache folder ($TRACEANA_CACHE_DIR, else $XDG_CACHE_HOME/traceana
or ~/.cache/traceana; TRACEANA_CACHE_DIR=off disables it). jinja2 checks each entry against the
template's source checksum, so an edited template is compiled again; a folder that cannot be
written only means compiling every time.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jinja2
import msgspec
from markupsafe import Markup

from traceana import __version__
from traceana.errors import TraceanaError

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; annotations only
    from importlib.resources.abc import Traversable

#: Static assets include_file may paste; anything else is refused.
ASSETS: tuple[str, ...] = ("report.css", "report.js", "timeline.css", "timeline.js")


#: the traceana package's folder (links resolved)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _folder() -> str | None:
    """The template folder next to the package (an installed wheel's traceana/templates, or a checkout's
    templates/), as a path; None when the package does not live in a folder."""
    for folder in (os.path.join(_PACKAGE, "templates"), os.path.join(os.path.dirname(_PACKAGE), "templates")):
        if os.path.isfile(os.path.join(folder, "report.html.j2")):
            return folder
    return None


def template_dir() -> Traversable:
    """The folder holding report.html.j2 and its assets (wheel first, then checkout; importlib.resources,
    ~6 ms to import with what it pulls in, only when the package does not live in a folder)."""
    folder = _folder()
    if folder is not None:
        from pathlib import Path

        return Path(folder)
    try:
        from importlib import resources

        packaged = resources.files("traceana") / "templates"
        if packaged.is_dir():
            return packaged
    except (ModuleNotFoundError, NotADirectoryError, FileNotFoundError):
        pass
    checkout = os.path.join(os.path.dirname(_PACKAGE), "templates")
    raise TraceanaError(
        "traceana's report templates are missing: expected traceana/templates in the "
        f"installed package or {checkout} in a source checkout; reinstall traceana"
    )


def _read(name: str) -> str:
    """The text of one file in the template folder (names are ours, never user input)."""
    if "/" in name or "\\" in name or name.startswith("."):
        raise TraceanaError(f"bad template name {name!r}")
    folder = _folder()
    if folder is not None:  # (plain files: no pathlib on the report's path)
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            raise TraceanaError(f"traceana's report template {name!r} is missing; reinstall traceana") from None
    path = template_dir() / name
    if not path.is_file():
        raise TraceanaError(f"traceana's report template {name!r} is missing; reinstall traceana")
    return path.read_text(encoding="utf-8")


def include_file(name: str) -> Markup:
    """Paste a static asset (CSS or JS) into the page verbatim."""
    if name not in ASSETS:
        raise TraceanaError(f"{name!r} is not a report asset")
    return Markup(_read(name))


def _load(name: str) -> tuple[str, None, None]:
    # No filename and no uptodate check: templates are read once per environment.
    return _read(name), None, None


class _QuietCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs; any failure to read or write one means compiling."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, ValueError, EOFError, TypeError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def cache_dir(env: os._Environ | dict = os.environ) -> str | None:
    """The folder for compiled templates (None: caching off, or no home to put it in)."""
    root = env.get("TRACEANA_CACHE_DIR")
    if root is not None and root.strip().lower() in ("", "0", "off", "no", "none"):
        return None
    if not root:
        base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        if base.startswith("~") or not os.path.isabs(base):
            return None
        root = os.path.join(base, "traceana")
    return os.path.join(root, f"templates-{__version__}-jinja2-{jinja2.__version__}")


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    path = cache_dir()
    if path is None:
        return None
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return _QuietCache(path)


_DICT_ATTRIBUTES = frozenset(dir(dict))


class _Environment(jinja2.Environment):
    """`x.y` on one of the view's dicts looks the key up first: jinja's own order (the attribute, then the
    key) raises and catches an AttributeError for every cell of every table first. A name that is an
    attribute of dict (items, get, ...) keeps jinja's order, so the result is the same either way."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                pass
        return super().getattr(obj, attribute)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The jinja2 environment for the reports: autoescaped, strict JSON, sorted keys."""
    env = _Environment(
        bytecode_cache=_bytecode_cache(),
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
    env.filters["tojson"] = tojson
    env.globals["include_file"] = include_file
    return env


#: bytes that could end a <script> element or an attribute, as JSON escapes (str.translate with a mapping
#: costs ~30 ms on the ops table's ~1 MB of JSON; four bytes.replace are memchr scans, ~1 ms)
_HTML_SAFE = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"), (b"'", b"\\u0027"))


@jinja2.pass_eval_context  # jinja2's own |tojson takes the context too: templates compiled for it stay valid
def tojson(eval_ctx: Any, value: Any) -> Markup:
    """|tojson in C: the same document as jinja2's filter with the policy above (sorted keys, compact,
    UTF-8 kept, <, >, & and ' escaped so the text cannot end a <script> element), encoded by msgspec
    (the ops table's rows and the chart data: 34 ms of json.dumps per OWLv2 report, 4 ms here). A NaN
    or an infinity, which the analysis never holds, becomes null instead of an error."""
    text = msgspec.json.encode(value, order="sorted")
    for raw, escaped in _HTML_SAFE:
        if raw in text:
            text = text.replace(raw, escaped)
    return Markup(text.decode("utf-8"))
