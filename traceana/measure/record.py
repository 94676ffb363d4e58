"""Record a PyTorch profiler trace and write its report beside it.

`traceana record -- python train.py ARGS` (traceana/cli/record.py) and, in code,

    with traceana.profile("traces", steps=3) as p:
        train()
    p.trace, p.reports   # the .pt.trace.json.gz and its .report.html / .report.md

The program runs in this process (runpy), under torch.profiler with record_shapes=True (with_stack
and profile_memory off unless asked), CPU activity, and CUDA activity when torch.cuda.is_available().

Steps. A step ends when the program's optimizer finishes `step()`: a wrapper around each optimizer class's step
(measure/optimizer_steps.py: after the step's record function has closed) steps the profiler, counting the first
optimizer that steps only (a second optimizer in the same loop would count each iteration twice).
In code, `step_on="manual"` counts `p.step()` calls instead. The schedule is torch's
schedule(wait=W, warmup=U, active=N, repeat=1), counted from the end of the first step: the
first step (the program's setup and its first iteration: compilation, allocator growth, autotuning)
is never in the window. A program that never steps gets one window over the whole run instead:
recording starts at once and, at the first step, that whole-run recording is stopped and kept aside
while the schedule takes over; it is written only when the schedule records nothing (the program
made too few steps), and then covers the run up to its first step. A program that stops inside the
active window gets the part of it that ran.

Python stacks (with_stack=True). The recording from the start does not trace Python until the program
first calls an nn.Module (a global forward pre-hook then restarts it with stacks): before that the program
imports its libraries and builds its model, millions of Python calls that no report shows (recorded with
stacks, a small GPT-2 + BERT training script's setup held 4.5 GB and took 25 s more to stop than the whole
scheduled window). A program that never calls a module is recorded without stacks; the scheduled window
always has them.

torch.compile and CUDA graphs (record_capture.py). When the program has compiled something or
captured a CUDA graph by the end of its first step, the recording from the start goes on through
the wait steps (at least one: torch.compile's CUDA graphs are captured on their second run) and is
written as the capture trace, DIR/capture_traces/ with its execution_details.json, where
`traceana report` finds it and aligns the graph replays of the steady-state trace with it.

Trace files are named as torch's tensorboard_trace_handler names them,
`<host>_<pid>.<ms since the epoch>.pt.trace.json.gz`: the profiler's chrome trace, gzipped.
The report is the one `traceana report TRACE` writes (default options), as .report.html and
.report.md beside the trace.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from traceana.errors import BadInput, TraceanaError
from traceana.measure.record_capture import GraphCapture

TRACE_SUFFIX = ".pt.trace.json.gz"
#: <host>_<pid>.<ms>.pt.trace.json.gz
TRACE_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.(?P<ms>\d{13,})\.pt\.trace\.json\.gz$")


class ProfilerConflict(BaseException):
    """The recorded program started a torch profiler of its own. torch cannot run two at once (the
    process dies of a segfault when the second stops), so the program's attempt is stopped here.
    A BaseException, so the program's own `except Exception` does not swallow it."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


class ProgramFailed(TraceanaError):
    """The recorded program raised or exited non-zero; its exit status is traceana's."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def trace_name(worker: str | None = None, ms: int | None = None) -> str:
    """tensorboard_trace_handler's file name: `<host>_<pid>.<ms timestamp>.pt.trace.json.gz`."""
    worker = worker or f"{socket.gethostname()}_{os.getpid()}"
    return f"{worker}.{time.time_ns() // 1_000_000 if ms is None else ms}{TRACE_SUFFIX}"


def export_trace(prof: Any, out_dir: str) -> str:
    """The profiler's chrome trace, gzipped into out_dir under a new trace_name(); its path."""
    from traceana.output.safe_write import replace_file

    path = os.path.join(out_dir, trace_name())
    fd, tmp = tempfile.mkstemp(suffix=".json", prefix=".traceana-", dir=out_dir)
    os.close(fd)

    def gzipped(out_fd: int) -> None:
        with open(tmp, "rb") as src, open(out_fd, "wb", closefd=False) as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)

    try:
        prof.export_chrome_trace(tmp)
        replace_file(path, gzipped)  # a file or link planted at the new name is replaced, never written through
    finally:
        os.unlink(tmp)
    return path


def activities(cuda: bool | None = None) -> list[Any]:
    """CPU, plus CUDA when asked or (cuda=None) when torch.cuda.is_available()."""
    import torch
    from torch.profiler import ProfilerActivity

    use_cuda = torch.cuda.is_available() if cuda is None else cuda
    return [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if use_cuda else [])]


def write_reports(trace: str) -> tuple[dict, list[str]]:
    """The analysis of `trace` and the HTML and markdown reports written beside it."""
    import json

    from traceana.analysis import analyze
    from traceana.output.safe_write import write_text
    from traceana.output.names import default_output
    from traceana.render import render
    from traceana.render.json_out import render_json

    analysis = analyze(trace)
    doc = json.loads(render_json(analysis))  # rendered as saved, like `traceana report`
    base = os.path.join(os.path.dirname(trace), default_output(trace)[: -len(".html")])
    paths = []
    for fmt, ext in (("html", ".html"), ("md", ".md")):
        write_text(base + ext, render(doc, fmt))
        paths.append(base + ext)
    return analysis, paths


class profile:  # noqa: N801  (used as `with traceana.profile(...)`, like torch.profiler.profile)
    """Record the code in the `with` block; see the module docstring for the steps and the schedule.

    out_dir: folder for the trace and reports (created). steps / wait / warmup: the schedule.
    step_on: "optimizer" (default) or "manual" (call p.step()). report: write the reports.
    cuda: add CUDA activity (None: when available). with_stack, profile_memory: torch.profiler's.
    quiet: print nothing (else one line on stderr naming the files). capture: "auto" | "on" | "off", keep
    the torch.compile / CUDA graph capture steps as a capture trace (record_capture.py).
    After the block: p.trace (path or None), p.reports [paths], p.analysis (dict or None),
    p.steps_seen, p.window (what the trace covers), p.capture_trace (path or None), p.capture_window.
    """

    def __init__(self, out_dir: str | os.PathLike[str] = ".", *, steps: int = 3, wait: int = 1, warmup: int = 1,
                 step_on: str = "optimizer", report: bool = True, cuda: bool | None = None,
                 with_stack: bool = False, profile_memory: bool = False, quiet: bool = False,
                 capture: str = "auto") -> None:
        if step_on not in ("optimizer", "manual"):
            raise ValueError(f"step_on must be 'optimizer' or 'manual', not {step_on!r}")
        if steps < 1 or wait < 0 or warmup < 0:
            raise ValueError("steps must be at least 1, wait and warmup at least 0")
        self.out_dir = os.fspath(out_dir)
        self.steps, self.wait, self.warmup = steps, wait, warmup
        self.step_on, self.report, self.cuda, self.quiet = step_on, report, cuda, quiet
        self.with_stack, self.profile_memory = with_stack, profile_memory
        self.trace: str | None = None
        self.reports: list[str] = []
        self.analysis: dict | None = None
        self.steps_seen = 0
        self.window = ""
        self._whole: Any = None  # the recording from the start, until the first step
        self._stacks_at_forward: Any = None  # the hook that turns stacks on at the first module call
        self._sched: Any = None  # the scheduled profiler, from the first step
        self._hook: Any = None
        self._optimizer: int | None = None
        self._ours = 0  # > 0 while this recorder itself calls into torch's profiler
        self._guarded: dict[str, Any] = {}
        self._capture = GraphCapture(capture)  # torch.compile / CUDA graph capture steps (record_capture.py)
        self.capture_trace: str | None = None
        self.capture_window = ""

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop(failed=exc_type is not None)
        if isinstance(exc, ProfilerConflict):
            raise RuntimeError(f"traceana.profile: the code in the block starts torch.profiler itself ({exc.where}); "
                               "torch cannot run two profilers at once") from None

    @contextmanager
    def _own(self) -> Iterator[None]:
        """Our own profiler calls: the guard lets them through."""
        self._ours += 1
        try:
            yield
        finally:
            self._ours -= 1

    def _guard(self) -> None:
        """Wrap torch's two profiler entry points (every torch.profiler / autograd profiler start goes
        through them) so that a start not made by this recorder raises ProfilerConflict."""
        import torch.autograd.profiler as ap

        def guarded(real: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                if not self._ours:
                    raise ProfilerConflict(_caller())
                return real(*args, **kwargs)

            call.__wrapped__ = real
            return call

        self._guarded = {name: getattr(ap, name) for name in ("_prepare_profiler", "_enable_profiler")
                         if hasattr(ap, name)}
        for name, real in self._guarded.items():
            setattr(ap, name, guarded(real))

    def _unguard(self) -> None:
        import torch.autograd.profiler as ap

        for name, real in self._guarded.items():
            if getattr(getattr(ap, name, None), "__wrapped__", None) is real:
                setattr(ap, name, real)
        self._guarded = {}

    def _profiler(self, with_stack: bool | None = None, **kw: Any) -> Any:
        import torch.profiler

        return torch.profiler.profile(activities=activities(self.cuda), record_shapes=True,
                                      with_stack=self.with_stack if with_stack is None else with_stack,
                                      profile_memory=self.profile_memory, **kw)

    def _first_forward(self, module: Any, args: Any) -> None:
        """The program's first nn.Module call: the recording from the start, so far without Python stacks (its
        imports and model building), starts again with them."""
        self._drop_forward_hook()
        if self._whole is None or self._sched is not None:
            return
        with self._own():
            self._whole.stop()  # the setup's ops: discarded
            self._whole = self._profiler()
            self._whole.start()

    def _drop_forward_hook(self) -> None:
        if self._stacks_at_forward is not None:
            self._stacks_at_forward.remove()
            self._stacks_at_forward = None

    def start(self) -> None:
        try:
            os.makedirs(self.out_dir, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"{self.out_dir}: cannot create the output folder: {exc.strerror or exc}") from None
        if not os.access(self.out_dir, os.W_OK):
            raise BadInput(f"{self.out_dir}: the output folder is not writable")
        quiet_kineto = "KINETO_LOG_LEVEL" not in os.environ
        if quiet_kineto:  # kineto prints `USDT: ... profiler_start` lines at a level no lower setting hides;
            os.environ["KINETO_LOG_LEVEL"] = "6"  # it reads this once, when the first profiler starts
        try:
            self._whole = self._profiler(with_stack=False)  # stacks from the first module call (module doc)
            with self._own():
                self._whole.start()
            if self.with_stack:
                from torch.nn.modules.module import register_module_forward_pre_hook

                self._stacks_at_forward = register_module_forward_pre_hook(self._first_forward)
        finally:
            if quiet_kineto:
                os.environ.pop("KINETO_LOG_LEVEL", None)
        self._guard()
        self._capture.start()
        if self.step_on == "optimizer":
            from traceana.measure.optimizer_steps import AfterStep

            self._hook = AfterStep(self._optimizer_stepped)  # after the step's record function: its module doc
            self._hook.install()

    def _optimizer_stepped(self, optimizer: Any) -> None:
        if self._optimizer is None:
            self._optimizer = id(optimizer)
        if id(optimizer) == self._optimizer:
            self._advance()

    def step(self) -> None:
        """Mark the end of a step (step_on="manual" only: otherwise the optimizer does)."""
        if self.step_on != "manual":
            raise ValueError("p.step() is for step_on='manual'; with step_on='optimizer' optimizer.step() counts steps")
        self._advance()

    def _advance(self) -> None:
        self.steps_seen += 1
        if self._sched is not None:
            with self._own():
                self._sched.step()
            return
        if self._capture.holds(self.steps_seen, self.wait):  # compile / graph capture steps: one more recorded
            return
        import torch.profiler

        self._drop_forward_hook()
        self._whole.stop()  # kept aside: the capture trace, or written only if the schedule records nothing
        self._sched = self._profiler(
            schedule=torch.profiler.schedule(wait=self._capture.wait_left(self.wait), warmup=self.warmup,
                                             active=self.steps, repeat=1),
            on_trace_ready=self._ready)
        with self._own():
            self._sched.start()

    def _ready(self, prof: Any) -> None:
        self.trace = export_trace(prof, self.out_dir)

    def stop(self, failed: bool = False) -> None:
        """Stop recording, write the trace (and, unless the block failed, the reports)."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._drop_forward_hook()
        self._unguard()
        self._capture.stop()
        wait = self._capture.wait(self.wait)  # the wait steps, or the capture steps when they are more
        full = wait + self.warmup + self.steps
        if self._sched is None:
            if self._whole is not None:
                self._whole.stop()
                self.trace = export_trace(self._whole, self.out_dir)
                self.window = ("the whole run: the program made no optimizer step" if self.step_on == "optimizer"
                               else "the whole run: p.step() was never called")
        else:
            complete = self.trace is not None
            self._sched.stop()  # inside the active window: torch hands over what was recorded
            scheduled = self.trace is not None
            if complete:  # the window after step k holds iteration k+1 and ends with its step
                self.window = f"iterations {2 + wait + self.warmup}-{1 + full} of {self.steps_seen}"
            elif self.trace is not None:
                got = self.steps_seen - 1 - wait - self.warmup
                self.window = (f"{got} of {self.steps} iterations and what ran after them: the program stopped "
                               f"after {self.steps_seen} steps (a full window needs {1 + full})")
            elif self._whole is not None:
                self.trace = export_trace(self._whole, self.out_dir)
                self.window = (f"the run up to its first step: the program made {self.steps_seen} steps, too few "
                               f"for --wait {self.wait} --warmup {self.warmup} (a full window needs {1 + full})")
            if scheduled and self._whole is not None and self._capture.held:  # the capture steps, apart
                self.capture_trace = export_trace(self._whole, self._capture.folder(self.out_dir))
                self._capture.index(self.capture_trace)  # beside the trace, where the report finds it
                self.capture_window = self._capture.describe()
        self._whole = self._sched = None
        if self.trace and self.report and not failed:
            self.analysis, self.reports = write_reports(self.trace)
        if not self.quiet and self.trace:
            kept = f"; capture trace {self.capture_trace} ({self.capture_window})" if self.capture_trace else ""
            print(f"traceana: trace {self.trace} ({self.window}){kept}"
                  + (f"; report {self.reports[0]}" if self.reports else ""), file=sys.stderr)


# ---------------------------------------------------------------------- `traceana record -- python ...`

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?(\.exe)?$")


def parse_command(cmd: list[str]) -> tuple[str, str, list[str]]:
    """`python SCRIPT.py ARGS`, `python -m MODULE ARGS` or `SCRIPT.py ARGS` ->
    ("path" | "module", script or module, args)."""
    if not cmd:
        raise BadInput("record: no command after --; e.g. traceana record -- python train.py ARGS")
    rest = list(cmd)
    if _PYTHON.match(os.path.basename(rest[0])):
        rest = rest[1:]
    elif not rest[0].endswith(".py"):
        raise BadInput(f"record: {rest[0]!r} is not a Python program; record runs `-- python SCRIPT.py ARGS` "
                       "or `-- python -m MODULE ARGS` inside traceana's process")
    if not rest:
        raise BadInput("record: no script after python; e.g. traceana record -- python train.py ARGS")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise BadInput("record: -m needs a module name")
        import importlib.util

        try:
            found = importlib.util.find_spec(rest[1]) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise BadInput(f"record: no module named {rest[1]!r}")
        return "module", rest[1], rest[2:]
    if rest[0].startswith("-"):
        raise BadInput(f"record: python option {rest[0]} is not supported (only -m MODULE)")
    if not os.path.isfile(rest[0]):
        raise BadInput(f"{rest[0]}: no such file" if not os.path.exists(rest[0]) else f"{rest[0]}: not a file")
    return "path", rest[0], rest[1:]


def _caller() -> str:
    """file:line of the innermost frame outside torch and traceana: where the program called."""
    import traceback

    skip = tuple(os.path.dirname(m.__file__) + os.sep for m in (sys.modules.get("torch"), sys.modules["traceana"])
                 if m is not None and getattr(m, "__file__", None))
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(skip) and not frame.filename.startswith("<frozen"):
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "its code"


def _where(tb: Any, script: str) -> str:
    """file:line of the innermost frame of the traceback (the program's own code)."""
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return script
    return f"{os.path.basename(last.tb_frame.f_code.co_filename)}:{last.tb_lineno}"


def run_program(kind: str, target: str, args: list[str], recorder: profile) -> None:
    """Run the program in this process under `recorder`, as `python` would (sys.argv, sys.path[0],
    __name__ == "__main__"). ProgramFailed when it raises or exits non-zero (the trace recorded so
    far is still written; no report)."""
    import runpy

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    name = os.path.basename(target)
    failure: ProgramFailed | None = None
    recorder.start()
    try:
        if kind == "path":
            sys.argv = [target, *args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.argv = [target, *args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        if code not in (None, 0):
            status = code if isinstance(code, int) else 1
            failure = ProgramFailed(f"{name} exited with status {code}" if isinstance(code, int)
                                    else f"{name} exited: {code}", status)
    except KeyboardInterrupt:
        failure = ProgramFailed(f"{name} was interrupted", 130)
    except ProfilerConflict as exc:
        failure = ProgramFailed(f"record: {name} starts torch.profiler itself ({exc.where}), and torch cannot run "
                                "two profilers at once: remove the program's profiler (traceana record profiles it), "
                                "or run the program on its own and `traceana report` the trace it writes", 2)
    except BaseException as exc:  # the program's own error: one line, its exit status 1 as python gives
        msg = " ".join(str(exc).split())[:300]
        failure = ProgramFailed(f"{name} raised {type(exc).__name__}{': ' + msg if msg else ''} "
                                f"({_where(exc.__traceback__, name)})")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    recorder.stop(failed=failure is not None)
    if failure is not None:
        if recorder.trace:
            failure.args = (f"{failure.args[0]}; the trace recorded so far: {recorder.trace}",)
        raise failure
