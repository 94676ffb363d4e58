"""Read and gunzip a trace in a background thread while the interpreter imports the rest.

`traceana report TRACE` spends its first ~0.4 s importing numpy, jinja2 and the cost formulas;
reading the file and inflating it (zlib releases the GIL) can run meanwhile on another core.
`start(path)` begins that; `reader.read_bytes` calls `take(path, stat)`, which waits for the
thread and returns the text only if the file is still the one read (same inode, size and
mtime), else None, and read_bytes reads the file itself. Any failure in the thread is
dropped: read_bytes then reads again and reports it its own way, so errors are unchanged.
Only the standard library here, so starting costs nothing.
"""

from __future__ import annotations

import gzip
import os
import stat
import threading
import zlib

_jobs: dict[str, tuple[threading.Thread, list, tuple]] = {}


def gunzip(data: bytes) -> bytes:
    """gzip.decompress, faster and without its transient second copy: zlib inflates straight
    into one buffer of the size the gzip trailer gives (peak = compressed + text, not + 2x
    text), and the text is checked against the trailer's CRC-32 and size. Anything else (a
    small or corrupt file, several gzip members, a trailer that does not match) goes to
    gzip.decompress, so what a file reads as, and its errors, are gzip's own. (Only a file of
    two identical members, `cat a.gz a.gz`, passes the check on its first member alone.)"""
    if len(data) < 18:
        return gzip.decompress(data)
    isize = int.from_bytes(data[-4:], "little")
    size = isize
    while 0 < size < len(data) // 1032:  # ISIZE is the size mod 2^32; deflate shrinks < 1032x
        size += 1 << 32
    try:
        out = zlib.decompress(data, 31, max(size, 1))
    except (zlib.error, MemoryError, OverflowError):
        return gzip.decompress(data)
    if len(out) & 0xFFFFFFFF != isize or zlib.crc32(out) != int.from_bytes(data[-8:-4], "little"):
        return gzip.decompress(data)
    return out


def _key(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def start(path: str) -> None:
    """Begin reading `path` in a daemon thread (regular files only: a FIFO would block)."""
    discard()
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(st.st_mode):
        return
    box: list = []

    def work() -> None:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
            if data[:2] == b"\x1f\x8b":
                data = gunzip(data)
            box.append(data)
        except BaseException:  # noqa: BLE001 - read_bytes reads again and says what is wrong
            pass

    t = threading.Thread(target=work, name="traceana-prefetch", daemon=True)
    t.start()
    _jobs[path] = (t, box, _key(st))


def take(path: str, st: os.stat_result) -> bytes | None:
    """The prefetched text of `path` if it is still the same file, else None."""
    job = _jobs.pop(path, None)
    if job is None:
        return None
    t, box, key = job
    t.join()
    if box and key == _key(st):
        return box[0]
    return None


def discard() -> None:
    """Forget any prefetch (its thread finishes on its own; it is a daemon)."""
    _jobs.clear()
