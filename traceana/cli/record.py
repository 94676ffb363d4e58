"""`traceana record [--steps N] [--wait W --warmup U] [-o DIR] -- python train.py ARGS`.

Runs the program in this process under torch.profiler (traceana/measure/record.py: how steps are counted,
the schedule, the file names), then writes the report beside the trace; for a program that uses
torch.compile or CUDA graphs, the compile / capture steps too (traceana/measure/record_capture.py).
"""

from __future__ import annotations

import click


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--steps", type=click.IntRange(1, None), default=3, show_default=True, metavar="N",
              help="Steps (optimizer.step() calls) to record.")
@click.option("--wait", type=click.IntRange(0, None), default=1, show_default=True, metavar="W",
              help="Steps to skip first (after the first step, which is never recorded).")
@click.option("--warmup", type=click.IntRange(0, None), default=1, show_default=True, metavar="U",
              help="Steps the profiler warms up on before recording.")
@click.option("-o", "--output-dir", "out_dir", default=".", show_default=True, metavar="DIR",
              help="Folder for the trace (<host>_<pid>.<ms>.pt.trace.json.gz) and its report (created).")
@click.option("--with-stack", is_flag=True, help="Record Python stacks (torch.profiler with_stack; slower).")
@click.option("--profile-memory", is_flag=True, help="Record allocations (torch.profiler profile_memory).")
@click.option("--capture", "capture", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Keep the steps where torch.compile compiles and CUDA graphs are captured (the first step and "
                   "the wait steps, at least one) as a capture trace in DIR/capture_traces/, which `traceana report` "
                   "aligns graph replays with: auto = when the program compiles or captures by the end of its first "
                   "step; on = always; off = never. Capturing CUDA graphs needs a GPU.")
@click.option("--no-report", is_flag=True, help="Write the trace only.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- python SCRIPT.py [ARGS]...")
def record(steps: int, wait: int, warmup: int, out_dir: str, with_stack: bool, profile_memory: bool,
           no_report: bool, quiet: bool, command: tuple[str, ...], capture: str = "auto") -> None:
    """Run a PyTorch program under the profiler and write the trace and its report.

    The program runs in this process; a step ends at each optimizer.step() (a program that never
    steps an optimizer is recorded whole). Needs torch."""
    from traceana.errors import BadInput
    from traceana.measure.record import parse_command

    kind, target, args = parse_command(list(command))
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BadInput("record needs torch: pip install torch") from None
    from traceana.measure.record import profile, run_program

    rec = profile(out_dir, steps=steps, wait=wait, warmup=warmup, report=not no_report,
                  with_stack=with_stack, profile_memory=profile_memory, quiet=True, capture=capture)
    run_program(kind, target, args, rec)
    if quiet:
        return
    if rec.trace is None:
        click.echo("traceana: no trace was recorded", err=True)
        return
    from traceana.render.terminal import term_text

    click.echo(term_text(f"trace written to {rec.trace} ({rec.window})"))
    if rec.capture_trace:
        click.echo(term_text(f"capture trace written to {rec.capture_trace} ({rec.capture_window})"))
    if rec.analysis is not None:
        from traceana.cli.report import summary

        click.echo(summary(rec.analysis, ", ".join(rec.reports)))
