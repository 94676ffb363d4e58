"""`traceana annotate TRACE -o OUT.json.gz`: the trace with each kernel's and op's verdict added, for
Perfetto UI and chrome://tracing."""

from __future__ import annotations

import os

import click

from traceana.cli.common import check_output, parse_peaks
from traceana.output import names


def default_output(trace: str) -> str:
    """TRACE-NAME.annotated.json.gz, or .annotated.pftrace for a Perfetto trace (the format it came in)."""
    from traceana.load.pftrace import sniff

    perfetto = os.path.isfile(trace) and sniff(trace)
    return names.default_output(trace, ".annotated.pftrace" if perfetto else ".annotated.json.gz")


def check_annotate_output(out: str, trace: str, force: bool) -> None:
    """The annotated trace's path: a .json, .json.gz, .pftrace or .pftrace.gz file, never the input, never a
    file traceana did not write unless --force."""
    from traceana.errors import BadInput

    if out == "-":
        raise BadInput("annotate writes a file (the annotated trace can be larger than the trace); give -o OUT.json.gz")
    if not out.endswith((".json", ".json.gz", ".pftrace", ".pftrace.gz")):
        raise BadInput(f"{out}: the annotated trace is a .json or .json.gz file, or a Perfetto .pftrace "
                       "(gzip when the name ends in .gz)")
    check_output(out, [trace], force)
    from traceana.output.ownership import annotated

    if annotated(trace):  # before any work (the rewrite would refuse it too, after the analysis)
        raise BadInput(f"{trace}: already annotated by traceana; annotate the original trace")


def annotate_file(trace: str, out: str, prep, st: os.stat_result):
    """Write the annotated trace (prep: traceana.annotate.write.prepare's; the caller has released the
    trace's columns by then, so they are not in memory while the text is read again)."""
    from traceana.annotate.perfetto import write_any

    return write_any(trace, st, out, prep)


def annotate_line(w, out: str) -> str:
    return (f"annotated trace written to {out}: {w.annotated:,} of {w.events:,} events carry a verdict, "
            f"{w.counters:,} counter samples added (open it in https://ui.perfetto.dev or chrome://tracing)")


@click.command()
@click.argument("trace", type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--output", "output", default=None, metavar="OUT.json.gz",
              help="The annotated trace: Chrome JSON (.json, .json.gz) or Perfetto (.pftrace, .pftrace.gz); gzip "
                   "when the name ends in .gz; default TRACE-NAME.annotated.json.gz in the current directory "
                   "(.annotated.pftrace for a Perfetto trace).")
@click.option("--device", "device_key", default=None, metavar="KEY",
              help="Use this row of the device table (see `traceana devices`) instead of the trace's device.")
@click.option("--peak-tflops", default=None, metavar="SPEC",
              help="Override peaks: '65' for every dtype, or 'fp32=8.1,fp16_tc=65,bf16_tc=…'.")
@click.option("--bandwidth-gbps", type=float, default=None, metavar="GB/S", help="Override DRAM bandwidth.")
@click.option("--profile", "profile_path", default=None, metavar="PROFILE.json", envvar="TRACEANA_PROFILE",
              help="A device profile from `traceana calibrate` (env TRACEANA_PROFILE).")
@click.option("--capture", "capture", default=None, metavar="PATH",
              help="The trace recorded while the CUDA/HIP graphs were captured (as for `traceana report`).")
@click.option("--force", is_flag=True, help="Overwrite an existing output file traceana did not write.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def annotate(trace: str, output: str | None, device_key: str | None, peak_tflops: str | None,
             bandwidth_gbps: float | None, profile_path: str | None, capture: str | None, force: bool,
             quiet: bool) -> None:
    """Write TRACE (Chrome JSON or Perfetto) again with traceana's verdicts on the timeline.

    Every kernel, memcpy and memset, and every op that launched them, gets args.traceana: its op
    signature's bound, % of roof, FLOPs and bytes per call, the roof used, achieved rates, and the
    ids and titles of the findings about it (the ids of `traceana report`'s JSON; in a .pftrace, a
    `traceana` debug annotation). Each GPU gets counter tracks: achieved TFLOP/s, DRAM GB/s and the
    cause of each idle gap. In a CPU-only trace
    each op of a signature the report judged carries its CPU verdict. Every original event is kept
    as it was; the file is read twice, streaming, so memory stays bounded whatever its size."""
    from traceana.load import prefetch

    prefetch.start(trace)
    from traceana.analysis import Options, analyze_parts
    from traceana.errors import BadInput
    from traceana.load.reader import _regular_file

    if bandwidth_gbps is not None and not bandwidth_gbps > 0:
        raise BadInput("--bandwidth-gbps must be a positive number")
    out = output or default_output(trace)
    st = _regular_file(trace)
    check_annotate_output(out, trace, force)
    prof = None
    if profile_path:
        from traceana.roofline.device_profile import load_profile

        prof = load_profile(profile_path)
    if capture is not None:
        from traceana.link.replay.index import capture_files

        capture_files(capture)
    opts = Options(device_key=device_key, peak_tflops=parse_peaks(peak_tflops), bandwidth_gbps=bandwidth_gbps,
                   capture=capture, profile=prof)
    from traceana.cli.report import _bar_delay
    from traceana.cli.progress import STAGES, enabled, progress

    delay = _bar_delay(trace) if enabled(quiet) else 1.0
    with progress(len(STAGES), os.path.basename(trace), quiet=quiet, delay=delay) as bar:
        analysis, parts = analyze_parts(trace, opts, bar.stage, bar.fraction)
        bar.stage("annotate")
        from traceana.annotate.write import prepare

        prep = prepare(analysis, parts)
        del analysis, parts
        written = annotate_file(trace, out, prep, st)
    if not quiet:
        click.echo(annotate_line(written, out))
