"""The command group and the entry point: every command registered, every error one line on stderr."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys

import click

from traceana import __version__
from traceana.errors import TraceanaError

def _one_line(message: str) -> str:
    """A path or a trace string inside an error message must not break the one-line promise or
    drive the terminal: the terminal's one escaping function (render/terminal.py)."""
    from traceana.render.terminal import term_text

    return term_text(message)


#: the commands, each in the module of traceana/cli/ named for it
COMMANDS = ("annotate", "calibrate", "devices", "diff", "record", "render", "report")


class _Commands(click.Group):
    """Each command imported when it is asked for: `traceana report` imports report.py and what it needs,
    not the other commands' modules (the help listing imports them all)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands or name not in COMMANDS:
            return self.commands.get(name)
        return getattr(importlib.import_module(f"traceana.cli.{name}"), name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceana")
def cli() -> None:
    """Explain every op of a PyTorch profiler trace against the GPU roofline."""


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line on stderr and the error's exit code for any user-facing error."""
    try:
        cli.main(args=argv, prog_name="traceana", standalone_mode=False)
    except TraceanaError as exc:
        click.echo(_one_line(f"traceana: {exc}"), err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("traceana: aborted", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(_one_line(f"traceana: {exc.format_message()}"), err=True)
        return 2
    except BrokenPipeError:
        return 0
    except MemoryError:
        click.echo("traceana: out of memory while analysing the trace", err=True)
        return 3
    except Exception as exc:  # the promise: one line, never a traceback (TRACEANA_DEBUG=1 shows it)
        if os.environ.get("TRACEANA_DEBUG"):
            raise
        click.echo(_one_line(f"traceana: internal error ({type(exc).__name__}: {str(exc)[:300]}); "
                             "rerun with TRACEANA_DEBUG=1 and report it"), err=True)
        return 3
    finally:
        _stop_threads()
    return 0


def run() -> None:
    """The console script (and `python -m traceana`): main(), then, after a single-trace `report` or a
    `render`, the exit-time functions (atexit) and out of the process at once (os._exit, after flushing
    stdout and stderr): everything is written and every thread joined by then, and the interpreter's
    teardown, freeing the analysis and every module one object at a time, took ~0.15 s of a 1.1 s
    report. Other commands (process pools, Dask clients) leave the usual way."""
    argv = sys.argv[1:]
    tune_for_reading(argv, os.environ)
    code = main(argv)
    if _exits_fast(argv):
        atexit._run_exitfuncs()  # what was registered to run at exit still runs (finalizers, caches)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it anyway
                pass
        os._exit(code)
    sys.exit(code)


#: the commands that only read traces and write reports: numpy's BLAS does none of their work
READ_ONLY = ("report", "render", "diff", "annotate", "devices")


#: the cyclic garbage collector's first threshold for those commands (Python's default: 700)
GC_GEN0 = 100_000


def tune_for_reading(argv: list[str], environ) -> None:
    """The process set up for a command that only reads traces (`record` and `calibrate` run the user's
    model and time BLAS: they keep the defaults). Called before anything imports numpy.

    - OPENBLAS_NUM_THREADS=1, unless the user set it: OpenBLAS starts its worker threads when numpy is
      imported and they spin a while, ~0.17 s of CPU on the second core (an `import numpy` costs 0.13 s
      of CPU with one thread, 0.31 s with the default), the core the trace is read and scanned on.
    - The cyclic garbage collector runs after 100,000 new container objects instead of 700: a report
      makes few reference cycles, and with the default it collected 113 + 11 + 1 times per OWLv2 report,
      50-80 ms, the full collection walking the whole analysis (peak RSS unchanged: 84-94 MB both ways)."""
    if argv and argv[0] in READ_ONLY:
        environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        gc.set_threshold(GC_GEN0, *gc.get_threshold()[1:])


def _exits_fast(argv: list[str]) -> bool:
    """A `report` of one trace file (not a folder of ranks, no executor) or a `render`."""
    if not argv or argv[0] not in ("report", "render"):
        return False
    return not any(a.startswith("--executor") or os.path.isdir(a) for a in argv[1:])


def _stop_threads() -> None:
    """Stop and join the reading started ahead of the load (traceana.load.prefetch), whatever
    the command did: finished, failed before it loaded, or was interrupted. No thread of a
    command outlives it (a process that runs many commands, like the test suite, kept each
    failed command's scan thread blocked on its queue)."""
    prefetch = sys.modules.get("traceana.load.prefetch")
    if prefetch is not None:
        prefetch.discard()


if __name__ == "__main__":
    run()
