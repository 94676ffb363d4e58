"""Options and checks shared by the commands: output paths, peak overrides."""

from __future__ import annotations

import os
import re

from traceana.devices import DTYPES as PEAK_KEYS
from traceana.errors import BadInput



def parse_peaks(text: str | None) -> dict[str, float] | None:
    """'65' (every dtype) or 'fp32=8.1,fp16_tc=65' -> {dtype: TFLOP/s}."""
    if not text:
        return None
    out: dict[str, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        if not sep:
            key, val = "all", key
        key = key.strip()
        if key != "all" and key not in PEAK_KEYS:
            raise BadInput(f"--peak-tflops: unknown dtype '{key}' (use one of: all, {', '.join(PEAK_KEYS)})")
        try:
            v = float(val)
        except ValueError:
            raise BadInput(f"--peak-tflops: '{val.strip()}' is not a number") from None
        if not v > 0 or v == float("inf"):
            raise BadInput(f"--peak-tflops: {key} must be a positive number")
        out[key] = v
    return out or None


_SURROGATE = re.compile("[\ud800-\udfff]")
_OUR_MARKERS = (b"traceana", b"# traceana")


def check_output(out: str, inputs: list[str], force: bool) -> None:
    """Refuse to overwrite an input, or a file traceana did not write, unless --force."""
    if out == "-":
        return
    real_out = os.path.realpath(out)
    for path in inputs:
        if os.path.exists(path) and (os.path.realpath(path) == real_out or _same_file(path, out)):
            raise BadInput(f"{out}: is the input trace; refusing to overwrite it")
    if os.path.isdir(out):
        raise BadInput(f"{out}: is a directory")
    if os.path.exists(out) and not os.path.isfile(out):  # reading a FIFO blocks; replacing /dev/null breaks the system
        raise BadInput(f"{out}: is not a regular file (a FIFO, device or socket); use -o - to write to stdout")
    if os.path.exists(out) and not force:
        try:
            with open(out, "rb") as fh:
                head = fh.read(4096)
                ours = not head.strip() or any(m in head for m in _OUR_MARKERS) or _json_report(fh, head)
        except OSError as exc:
            raise BadInput(f"{out}: cannot read existing file: {exc.strerror}") from None
        if not ours:
            raise BadInput(f"{out}: exists and was not written by traceana; pass --force to overwrite it")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise BadInput(f"{out}: directory {parent} does not exist")


def _json_report(fh, head: bytes) -> bool:
    """A JSON report has sorted keys: its `"schema": "traceana.analysis/..."` comes after the ops."""
    if not head.lstrip().startswith(b"{"):
        return False
    marker = b'"schema": "traceana.'
    tail = head
    while chunk := fh.read(1 << 20):
        tail = tail[-len(marker):] + chunk
        if marker in tail:
            return True
    return False


def _same_file(a: str, b: str) -> bool:
    """Hard links and other aliases realpath cannot see (same device and inode)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def write_text(out: str, text: str) -> None:
    # A lone surrogate (a non-UTF-8 file name from argv) cannot be written as UTF-8: show U+FFFD.
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    if out == "-":
        import sys

        sys.stdout.write(text)
        return
    write_bytes(out, text.encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
    """Write through a temporary file renamed into place: a failed write never leaves half a file."""
    tmp = path + ".tmp-traceana"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise BadInput(f"{path}: cannot write: {exc.strerror or exc}") from None
