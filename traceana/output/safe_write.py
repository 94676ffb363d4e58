"""Replace a file without ever writing through someone else's link or leaving half a file.

The new content goes to a temporary file of our own in the target's directory: a random name,
created with O_CREAT|O_EXCL|O_NOFOLLOW (a file or link planted at that name makes the open fail,
and another name is tried), then renamed over the target (rename replaces the directory entry and
follows no link). `path` itself may be a symlink the user made: its target is what gets written,
and the link stays. SIGTERM, SIGHUP and SIGINT during the write remove the temporary file and then
take their usual course; an error removes it too, and the old file is left as it was.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from traceana.errors import BadInput

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, n))
_TRIES = 100
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Signalled(BaseException):
    """A catchable stand-in for a terminating signal, so the temporary file can be removed first."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def target_of(path: str) -> str:
    """The file a write to `path` should replace: `path`, or what it names when it is a symlink."""
    return os.path.realpath(path) if os.path.islink(path) else path


def replace_file(path: str, fill: Callable[[int], None]) -> None:
    """Create a temporary file beside `path`'s target, let `fill(fd)` write it, rename it into place.
    OSError becomes BadInput naming `path` (one line, exit 2)."""
    target = target_of(path)
    try:
        with _removing_on_signals():
            tmp = None
            try:
                fd, tmp = _create_temp(target)
                try:
                    fill(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, target)
            except BaseException:
                if tmp is not None:
                    _unlink(tmp)
                raise
    except OSError as exc:
        raise BadInput(f"{path}: cannot write: {exc.strerror or exc}") from None


def _create_temp(target: str) -> tuple[int, str]:
    """A new file `.NAME.RANDOM.tmp-traceana` in target's directory, opened exclusively."""
    folder, name = os.path.split(target)
    for _ in range(_TRIES):
        tmp = os.path.join(folder, f".{name[:200]}.{os.urandom(6).hex()}.tmp-traceana")
        try:
            return os.open(tmp, _FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(17, f"no free temporary name in {folder or '.'}")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@contextmanager
def _removing_on_signals() -> Iterator[None]:
    """Turn the terminating signals into an exception inside the block (so `finally` clauses run),
    then, outside it, restore the handlers and deliver the signal again. Signals the process
    ignores stay ignored; off the main thread handlers cannot be set and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for sig in _SIGNALS:
        previous = signal.getsignal(sig)
        if previous is signal.SIG_IGN or previous is None:
            continue
        old[sig] = previous
        signal.signal(sig, _raise)
    caught = None
    try:
        yield
    except _Signalled as exc:
        caught = exc.signum
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
    if caught is not None:
        signal.raise_signal(caught)  # the process's own handling: default (die of it), or its handler
        raise InterruptedError(4, f"interrupted by signal {caught}")  # a handler returned: not written


def _raise(signum: int, _frame: object) -> None:
    raise _Signalled(signum)


def _utf8(text: str) -> tuple[str, bytes]:
    """The text and its UTF-8 bytes, a lone surrogate (a non-UTF-8 file name from argv) shown as U+FFFD:
    found by the encoding itself failing (a regular-expression search of every report was ~10 ms)."""
    try:
        return text, text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
        return text, text.encode("utf-8")


def write_text(out: str, text: str) -> None:
    text, data = _utf8(text)
    if out == "-":
        import sys

        sys.stdout.write(text)
        return
    write_bytes(out, data)


def write_pieces(out: str, pieces: Iterable[str], chunk: int = 1 << 20) -> None:
    """write_text for a text made piece by piece (a JSON report of 100,000 op rows is hundreds of MB):
    the pieces are encoded and written as they come, about `chunk` characters at a time, so the
    whole text never exists at once. The same guarantees as write_text (a temporary file renamed into
    place; an error while the pieces are made leaves the old file as it was)."""

    def batches() -> Iterator[str]:
        buf: list[str] = []
        size = 0
        for piece in pieces:
            buf.append(piece)
            size += len(piece)
            if size >= chunk:
                yield "".join(buf)
                buf, size = [], 0
        if buf:
            yield "".join(buf)

    if out == "-":
        import sys

        for text in batches():
            sys.stdout.write(_utf8(text)[0])
        return

    def fill(fd: int) -> None:
        for text in batches():
            _write_all(fd, _utf8(text)[1])

    replace_file(out, fill)


def write_bytes(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temporary file renamed into place (replace_file below):
    a failed or interrupted write never leaves half a file, and no link is followed but `path` itself."""
    replace_file(path, lambda fd: _write_all(fd, data))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[: 1 << 30]):]
