"""A progress bar on stderr for long loads and multi-rank runs, by stage, never per event.

Shown only when stderr is a terminal and --quiet is not given, and only once the run has
taken more than `delay` seconds (tqdm's `delay`), so short runs, pipes and CI logs stay
clean. tqdm is imported only when a bar can be shown.
"""

from __future__ import annotations

import sys
import time
from typing import Any

#: The stages of one report, in order (load_trace and analyze_trace call `stage(name)`).
STAGES = ("read", "decode", "columns", "link", "cost", "diagnose", "render")


class Progress:
    """`stage(name)`: the run has moved on to `name`; `advance(label)`: one more unit done."""

    def __init__(self, bar: Any = None, delay: float = 0.0) -> None:
        self._bar = bar
        self._started = False
        self._name = ""
        self._show_at = time.monotonic() + delay

    def stage(self, name: str) -> None:
        if self._bar is None:
            return
        if self._started:
            self._bar.update(1)
        self._started = True
        self._name = name
        # tqdm's update() honours `delay`; an explicit refresh would not, so only after it
        self._bar.set_postfix_str(name, refresh=time.monotonic() >= self._show_at)

    def fraction(self, done: float) -> None:
        """How far the current stage is (0-1), shown beside its name: a long load's bar moves
        while it reads (called per piece of the file, never per event)."""
        if self._bar is None or not self._started:
            return
        name = self._name.split(" ")[0] if self._name else ""
        self._name = f"{name} {done:.0%}"
        self._bar.set_postfix_str(self._name, refresh=time.monotonic() >= self._show_at)

    def advance(self, label: str = "") -> None:
        if self._bar is None:
            return
        if label:
            from traceana.render.terminal import term_text

            self._bar.set_postfix_str(term_text(label, 40), refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            if self._started:
                self._bar.update(1)
                self._started = False
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def enabled(quiet: bool, stream: Any = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    try:
        return not quiet and bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress(total: int, desc: str, *, quiet: bool, unit: str = "stage", delay: float = 1.0) -> Progress:
    """A Progress that draws a bar (if enabled) or does nothing."""
    if not enabled(quiet):
        return Progress()
    try:
        import tqdm

        tqdm.tqdm.monitor_interval = 0  # no monitor thread: worker processes may be forked
        from traceana.render.terminal import term_text

        bar = tqdm.tqdm(total=total, desc=term_text(desc, 60), unit=unit, delay=delay, leave=False, file=sys.stderr,
                        dynamic_ncols=True, bar_format="{desc}: {bar} {n_fmt}/{total_fmt} {unit}s [{elapsed}]{postfix}")
    except Exception:  # tqdm missing or broken: no bar, never a failure
        return Progress()
    return Progress(bar, delay)
