"""Options shared by `report` and `render` for CI: --fail-on gates and the chart images.

`ci_options` adds the options to a command; `prepare` checks them before any work (a bad
gate spec or an output that may not be overwritten is exit 2 before a trace is read);
`Extras.render` writes the report text, `Extras.finish` writes the images and then
enforces the gates, so a failing build still has its report.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

import click

from traceana.cli.common import check_output, distinct_outputs
from traceana.output.safe_write import write_bytes
from traceana.errors import BadInput, GateFailed

if TYPE_CHECKING:
    from traceana.compare.gates import Gate

FAIL_ON_HELP = ("Exit 1 when a condition trips (repeatable): time-regression=5%, op-regression=10% "
                "(diff only), coverage<95%, unmodelled>2%, roof<40%:aten::mm (globs allowed).")


def fail_on_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--fail-on", "fail_on", multiple=True, metavar="SPEC", help=FAIL_ON_HELP)(f)


LONG_HELP = ("Markdown output: the long form (up to 65,000 characters: every finding, explanation and op "
             "signature that fits) instead of the PR comment of at most 8,000.")


def ci_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--fail-on, --svg, --png, --md-image, --long."""
    f = click.option("--long", "long_md", is_flag=True, help=LONG_HELP)(f)
    f = click.option("--md-image", default=None, metavar="URL",
                     help="Markdown output: show this image (e.g. the --svg chart's URL) under the device line.")(f)
    f = click.option("--png", default=None, metavar="PATH",
                     help="Also write the roofline chart as PNG (needs cairosvg; skipped with a message if absent).")(f)
    f = click.option("--svg", default=None, metavar="PATH", help="Also write the roofline chart as SVG.")(f)
    return fail_on_option(f)


class Extras(msgspec.Struct):
    gates: list[Gate] = msgspec.field(default_factory=list)
    svg: str | None = None
    png: str | None = None
    md_image: str | None = None
    long_md: bool = False

    @staticmethod
    def saved(analysis: Mapping[str, Any], fmt: str) -> Mapping[str, Any]:
        """The analysis as `render` reads it back from its saved JSON (sorted keys, NaN as null)
        for html and md, so `report -o a.html` and `render a.json -o a.html` give the same
        bytes; for json the analysis itself. The caller keeps only this, not both."""
        if fmt == "json":
            return analysis
        from traceana.render.json_out import as_saved

        return as_saved(analysis)  # = json.loads(render_json(analysis)), without the text

    def render(self, analysis: Mapping[str, Any], fmt: str, saved: bool = False) -> str:
        """The report text, from the analysis as saved (`saved`: it already is, self.saved)."""
        if not saved:
            analysis = self.saved(analysis, fmt)
        from traceana.render import render

        return render(analysis, fmt, image=self.md_image, long=self.long_md)

    def finish(self, analysis: Mapping[str, Any], quiet: bool) -> None:
        """Write the images, then raise GateFailed if a gate trips."""
        if self.svg or self.png:
            from traceana.render.svg import roofline_svg

            svg = roofline_svg(analysis)
            if self.svg:
                write_bytes(self.svg, svg.encode("utf-8"))
                if not quiet:
                    click.echo(f"chart written to {self.svg}")
            if self.png:
                png = svg_to_png(svg)
                if png is None:
                    click.echo(f"traceana: --png {self.png}: skipped, no SVG-to-PNG renderer "
                               "(pip install cairosvg)", err=True)
                else:
                    write_bytes(self.png, png)
                    if not quiet:
                        click.echo(f"chart written to {self.png}")
        enforce_gates(analysis, self.gates)


def enforce_gates(doc: Mapping[str, Any], gates: list[Gate]) -> None:
    """One stderr line per tripped condition, then GateFailed (exit 1) carrying the last one
    (main() prints it as the last line)."""
    if not gates:  # no --fail-on: the gates' module is not even imported
        return
    from traceana.compare.gates import evaluate

    failures = evaluate(doc, gates)
    if not failures:
        return
    from traceana.render.terminal import term_text

    for f in failures[:-1]:
        click.echo(term_text(f"traceana: --fail-on {f}"), err=True)
    raise GateFailed(f"--fail-on {failures[-1]}")


def prepare(opts: Mapping[str, Any], inputs: list[str], force: bool, *, outputs: tuple[str, ...] = (),
            others: tuple[tuple[str, str | None], ...] = ()) -> Extras:
    """Parse the gates and check the image paths before any work is done: no two outputs (-o, --svg,
    --png and `others`, e.g. ("--annotate", path)) name the same file."""
    specs = opts.get("fail_on") or ()
    if specs:
        from traceana.compare.gates import parse_all

        gates = parse_all(specs, diff=False)
    else:
        gates = []
    ex = Extras(gates=gates, svg=opts.get("svg"),
                png=opts.get("png"), md_image=opts.get("md_image"), long_md=bool(opts.get("long_md")))
    for flag, path in (("--svg", ex.svg), ("--png", ex.png)):
        if path == "-":
            raise BadInput(f"{flag} {path}: needs a file of its own")
    distinct_outputs([*(("-o", o) for o in outputs), *others, ("--svg", ex.svg), ("--png", ex.png)])
    for path in (ex.svg, ex.png):
        if path is not None:
            check_output(path, inputs, force)
    return ex


def svg_to_png(svg: str) -> bytes | None:
    """PNG bytes from cairosvg when it can be imported (it needs the cairo library), else None."""
    try:
        import cairosvg  # type: ignore[import-not-found]
    except Exception:  # ImportError, or OSError when libcairo itself is missing
        return None
    return tag_png(cairosvg.svg2png(bytestring=svg.encode("utf-8")))


def tag_png(png: bytes) -> bytes:
    """Add a tEXt chunk "Software: traceana" after IHDR, so a later run recognises its own file."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        return png
    end = 8 + 8 + struct.unpack(">I", png[8:12])[0] + 4
    data = b"Software\x00traceana"
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", zlib.crc32(b"tEXt" + data))
    return png[:end] + chunk + png[end:]
