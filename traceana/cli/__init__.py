"""Command line: `traceana report|diff|render|devices|calibrate|record ...`.

entry.py holds the command group, `main` (one line on stderr and the error's exit code for any
user-facing error) and `run` (the console script: main, then a report's fast exit); each command lives in a module of its own, named for it.
Around them: common.py (output checks, peak overrides), ci.py (--fail-on, --svg, --png, --long),
ranks.py (the cross-rank report), progress.py (the progress bar on stderr).
"""

from traceana.cli.entry import cli, main, run

__all__ = ["cli", "main", "run"]
