"""`traceana calibrate [-o PROFILE.json]`: measure this machine's achievable roofs."""

from __future__ import annotations

import json
import os

import click

from traceana.errors import BadInput


def default_output() -> str:
    return "traceana-profile.json"


@click.command()
@click.option("-o", "--output", "output", default=None, metavar="PROFILE.json",
              help="Where to write the profile (JSON; default traceana-profile.json; '-' for stdout).")
@click.option("--quick", is_flag=True, help="Smaller sizes, shorter repeats (about 5-15 s on a CPU).")
@click.option("--repeats", type=click.IntRange(1, 50), default=None, metavar="N",
              help="Repeats per figure (default 3 with --quick, else 5); the spread is over these.")
@click.option("--device", "device", default=None, metavar="cpu|cuda|cuda:N",
              help="What to calibrate (default: the GPU when torch sees one, else the CPU).")
@click.option("--force", is_flag=True, help="Overwrite an existing file traceana did not write.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def calibrate(output: str | None, quick: bool, repeats: int | None, device: str | None, force: bool,
              quiet: bool) -> None:
    """Measure GEMM throughput per dtype, memory and cache bandwidth and per-op overhead with
    torch, print them against the datasheet and write a device profile for `report --profile`."""
    from traceana.cli.common import check_output
    from traceana.output.safe_write import write_text
    from traceana.numbers import ascii_int

    out = output or default_output()
    if device is not None and device != "cpu" and not (device == "cuda" or (
            device.startswith("cuda:") and ascii_int(device[5:]) is not None)):
        raise BadInput(f"--device: {device!r} is not cpu, cuda or cuda:N")
    check_output(out, [], force)
    if out != "-":
        _check_writable(out)
    try:
        from traceana.measure.calibrate import run as calib
    except ImportError as exc:  # pragma: no cover - torch missing
        raise BadInput(f"calibrate needs torch: {exc}") from None
    try:
        prepared = calib.prepare(device, "quick" if quick else "full", repeats)
    except ImportError:
        raise BadInput("calibrate needs torch (pip install torch)") from None
    if device and device.startswith("cuda") and prepared.machine.kind == "cpu":
        raise BadInput(f"--device {device}: torch sees no GPU on this machine")
    from traceana.cli.progress import progress

    with progress(len(prepared.steps), "calibrate", quiet=quiet, unit="figure", delay=0.0) as bar:
        profile = calib.run(prepared, bar.stage)
    if not profile["figures"]:
        raise BadInput("calibrate: no figure could be measured (" + "; ".join(profile["skipped"].values())[:300] + ")")
    write_text(out, json.dumps(profile, indent=2, sort_keys=True) + "\n")
    if not quiet:
        from traceana.measure.calibrate.table import lines

        click.echo("\n".join(lines(profile)), err=out == "-")
        if out != "-":
            click.echo(f"profile written to {out} (use it with: traceana report TRACE --profile {out})")


def _check_writable(out: str) -> None:
    """Fail before measuring, not after: the folder must accept a new file."""
    parent = os.path.dirname(os.path.abspath(out))
    if not os.access(parent, os.W_OK):
        raise BadInput(f"{out}: cannot write to {parent}")
