"""`traceana report TRACE -o report.html|md|json`: analyse one trace and write the report."""

from __future__ import annotations

import os
import sys

import click

from traceana.cli.ci import ci_options, prepare
from traceana.cli.common import check_output, distinct_outputs, parse_peaks
from traceana.output.names import default_output
from traceana.output.safe_write import write_pieces, write_text


@click.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACE... | DIR",
                type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--output", "output", default=None,
              help="Report file; the format follows the extension: .html, .md or .json "
                   "(default: TRACE-NAME.report.html in the current directory; '-' for stdout).")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "json"]), default=None,
              help="Format when writing to stdout or when the extension says nothing.")
@click.option("--device", "device_key", default=None, metavar="KEY",
              help="Use this row of the device table (see `traceana devices`) instead of the trace's device.")
@click.option("--peak-tflops", default=None, metavar="SPEC",
              help="Override peaks: '65' for every dtype, or 'fp32=8.1,fp16_tc=65,bf16_tc=…'.")
@click.option("--bandwidth-gbps", type=float, default=None, metavar="GB/S", help="Override DRAM bandwidth.")
@click.option("--host-link-gbps", type=float, default=None, metavar="GB/S",
              help="The host<->device link's bandwidth per direction (default: the device table's PCIe / "
                   "NVLink-C2C figure).")
@click.option("--network-gbps", type=float, default=None, metavar="GB/S",
              help="Each GPU's network bandwidth per direction, for collectives whose group spans hosts (the "
                   "device table holds no network; without it their transfer time is unknown).")
@click.option("--launch-floor-us", type=float, default=None, metavar="US",
              help="Fixed cost of one kernel on this GPU, µs (default per architecture: 1.5 Hopper/Blackwell, "
                   "2 others); the time model adds it per kernel to the roofline time.")
@click.option("--profile", "profile_path", default=None, metavar="PROFILE.json", envvar="TRACEANA_PROFILE",
              help="A device profile from `traceana calibrate`: ops are also judged against its measured "
                   "(achievable) roofs and savings are computed against them; a CPU-only trace gets CPU "
                   "verdicts from it (env TRACEANA_PROFILE).")
@click.option("--top", "top", type=click.IntRange(0, 100), default=8, show_default=True,
              help="How many of the slowest ops get a written explanation.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file traceana did not write.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--meta/--no-meta", "meta", default=None,
              help="Cost ops that have no formula by running them on meta tensors (bytes only, marked "
                   "estimated; imports torch, ~2.6 s). Default: on only when torch is already imported.")
@click.option("--hta", is_flag=True, help="Add Holistic Trace Analysis' timeline views (needs: pip install 'traceana[hta]').")
@click.option("--capture", "capture", default=None, metavar="PATH",
              help="The trace recorded while the CUDA/HIP graphs were captured (a file, or a folder with "
                   "execution_details.json): replayed graph kernels take the shapes of the ops that captured "
                   "them. Default: a capture_traces/ folder with execution_details.json beside TRACE.")
@click.option("--executor", default="local", show_default=True, metavar="local|dask://HOST:PORT",
              help="Several rank files: where to analyse them (local worker processes, or a Dask cluster).")
@click.option("--jobs", "jobs", type=click.IntRange(1, None), default=None, metavar="N",
              help="Several rank files: at most N local worker processes (default: cores, capped by memory).")
@click.option("--strict", is_flag=True,
              help="Several rank files: when they do not look like one run (duplicate rank ids, differing "
                   "world sizes, devices or steps), exit 2 instead of warning.")
@click.option("--allow-missing", is_flag=True,
              help="Several rank files: when some cannot be analysed, exit 0 with the report of the others "
                   "(default: the report is written, the missing ones named, exit 3).")
@click.option("--annotate", "annotate_path", default=None, metavar="OUT.json.gz",
              help="Also write the trace with every kernel's and op's verdict added, for Perfetto UI and "
                   "chrome://tracing (as `traceana annotate`; one trace file only).")
@ci_options
def report(traces: tuple[str, ...], output: str | None, fmt: str | None, device_key: str | None,
           peak_tflops: str | None, bandwidth_gbps: float | None, top: int, force: bool, quiet: bool,
           hta: bool = False, executor: str = "local", jobs: int | None = None, meta: bool | None = None,
           launch_floor_us: float | None = None, host_link_gbps: float | None = None,
           network_gbps: float | None = None, capture: str | None = None, profile_path: str | None = None,
           annotate_path: str | None = None, allow_missing: bool = False,
           **ci: object) -> None:
    """Analyse TRACE (Kineto JSON or .json.gz, or a Perfetto .pftrace) and write an explained roofline report.

    Several traces, or a directory of per-rank traces, give a cross-rank report: every rank
    analysed in parallel, step times compared, the straggler explained."""
    if len(traces) == 1:  # read + gunzip on another core while numpy & co. import
        from traceana.load import prefetch

        prefetch.start(traces[0])
    from traceana.analysis import Options, analyze, analyze_parts
    from traceana.errors import BadInput
    from traceana.render import format_for_path

    if bandwidth_gbps is not None and not bandwidth_gbps > 0:
        raise BadInput("--bandwidth-gbps must be a positive number")
    if host_link_gbps is not None and not 0 < host_link_gbps < 1e6:
        raise BadInput("--host-link-gbps must be a positive number")
    if network_gbps is not None and not 0 < network_gbps < 1e6:
        raise BadInput("--network-gbps must be a positive number")
    if launch_floor_us is not None and not 0 <= launch_floor_us < 1e6:
        raise BadInput("--launch-floor-us must be a number of µs, 0 or more")
    prof = None
    if profile_path:
        from traceana.roofline.device_profile import load_profile

        prof = load_profile(profile_path)  # a bad file fails now, before the trace is read
    if meta is None:  # opt-in: importing torch costs ~2.6 s, unless something already paid for it
        meta = "torch" in sys.modules
    if capture is not None:
        if len(traces) > 1 or os.path.isdir(traces[0]):
            raise BadInput("--capture goes with one trace file (rank files find a capture_traces/ folder beside them)")
        from traceana.link.replay.index import capture_files

        capture_files(capture)  # a bad path fails now, before the trace is read
    if annotate_path is not None and (len(traces) > 1 or os.path.isdir(traces[0])):
        raise BadInput("--annotate goes with one trace file")
    if len(traces) > 1 or os.path.isdir(traces[0]):
        from traceana.cli.ranks import report_ranks

        distinct_outputs((("-o", output), ("--svg", ci.get("svg")), ("--png", ci.get("png"))))

        return report_ranks(traces, output, fmt, force, quiet, executor, jobs, ci,
                            Options(device_key=device_key, peak_tflops=parse_peaks(peak_tflops),
                                    bandwidth_gbps=bandwidth_gbps, explain_top=top, hta=hta, meta=meta,
                                    launch_floor_us=launch_floor_us, host_link_gbps=host_link_gbps,
                                    network_gbps=network_gbps, profile=prof), hta, allow_missing=allow_missing)
    trace = traces[0]
    out = output or default_output(trace)
    outputs = (("-o", out), ("--annotate", annotate_path), ("--svg", ci.get("svg")), ("--png", ci.get("png")))
    distinct_outputs(outputs)  # no output written over another (before any work, before any other check)
    if fmt is None:
        fmt = "html" if out == "-" else format_for_path(out)
    check_output(out, [trace], force)
    st = None
    if annotate_path is not None:
        from traceana.cli.annotate import check_annotate_output
        from traceana.load.reader import _regular_file

        st = _regular_file(trace)
        check_annotate_output(annotate_path, trace, force)
    if hta:
        from traceana.diagnose.hta_views import available

        if not available():
            raise BadInput("--hta needs Holistic Trace Analysis and pandas: pip install 'traceana[hta]'")
    extras = prepare(ci, [trace], force, outputs=(out,), others=(("--annotate", annotate_path),))
    opts = Options(device_key=device_key, peak_tflops=parse_peaks(peak_tflops),
                   bandwidth_gbps=bandwidth_gbps, explain_top=top, hta=hta, meta=meta,
                   launch_floor_us=launch_floor_us, host_link_gbps=host_link_gbps, capture=capture,
                   network_gbps=network_gbps, profile=prof)
    from traceana.cli.progress import STAGES, enabled, progress

    delay = _bar_delay(trace) if enabled(quiet) else 1.0
    with progress(len(STAGES), os.path.basename(trace), quiet=quiet, delay=delay) as bar:
        prep = None
        if annotate_path is None:
            analysis = analyze(trace, opts, bar.stage, bar.fraction)
        else:
            from traceana.annotate.write import prepare as prepare_annotation

            analysis, parts = analyze_parts(trace, opts, bar.stage, bar.fraction)
            prep = prepare_annotation(analysis, parts)
            del parts
        bar.stage("render")
        note = summary(analysis, out) if not quiet and out != "-" else None
        if fmt == "json":  # written as it is encoded: the text of 100,000 op rows never exists whole
            from traceana.render.json_out import json_pieces

            text = None
        else:
            # from here on only the analysis as saved: two copies of 100,000 op rows are GBs, so the
            # analysis is dropped between encoding it and decoding its saved copy
            from traceana.render.json_out import saved_bytes, saved_from

            raw = saved_bytes(analysis)
            if raw is None:  # what msgspec refuses takes the Python walk
                analysis = extras.saved(analysis, fmt)
            else:
                del analysis
                analysis = saved_from(raw)
                del raw
            text = extras.render(analysis, fmt, saved=True)
    if text is None:
        write_pieces(out, json_pieces(analysis))
    else:
        write_text(out, text)
        del text
    if note is not None:
        click.echo(note)
    if annotate_path is not None:
        from traceana.cli.annotate import annotate_file, annotate_line

        written = annotate_file(trace, annotate_path, prep, st)
        if not quiet:
            click.echo(annotate_line(written, annotate_path), err=out == "-")
    extras.finish(analysis, quiet or out == "-")


def _bar_delay(trace: str) -> float:
    """Seconds before the bar shows: TRACEANA_PROGRESS_DELAY when set (0: at once), else at once for
    a large trace (> 200 MB of JSON) and after a second for the rest."""
    env = os.environ.get("TRACEANA_PROGRESS_DELAY")
    if env:
        try:
            return max(0.0, float(env))
        except ValueError:
            pass
    from traceana.ranks.executor import uncompressed_size

    return 0.0 if uncompressed_size(trace) > 200e6 else 1.0


def summary(a: dict, out: str) -> str:
    """The terminal lines after a report (render/terminal.py: every string made inert)."""
    from traceana.render.terminal import report_summary

    return report_summary(a, out)
