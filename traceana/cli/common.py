"""Options and checks shared by the commands: output paths, peak overrides."""

from __future__ import annotations

import os

from traceana.roofline.devices import DTYPES as PEAK_KEYS
from traceana.output.ownership import written_by_traceana
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


def check_output(out: str, inputs: list[str], force: bool) -> None:
    """Refuse to overwrite an input, or a non-empty file traceana did not write (traceana/output/ownership.py),
    unless --force. A symlink is judged by the file it names: that file is what gets written."""
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
    if os.path.exists(out) and not force and os.path.getsize(out) > 0:
        # a file with no bytes holds nothing to lose (`out=$(mktemp --suffix=.html)` in a CI script): written
        # over; any content not marked as traceana's is the user's and needs --force
        try:
            ours = written_by_traceana(out)
        except OSError as exc:
            raise BadInput(f"{out}: cannot read existing file: {exc.strerror}") from None
        if not ours:
            raise BadInput(f"{out}: exists and was not written by traceana; pass --force to overwrite it")
    parent = os.path.dirname(real_out)
    if not os.path.isdir(parent):
        raise BadInput(f"{out}: directory {parent} does not exist")


def distinct_outputs(named) -> None:
    """BadInput when two outputs, (flag, path) pairs, name the same file: the same path once symlinks are
    resolved, or the same existing file by device and inode (a hard link). Checked before any work, so a
    second output never replaces the first (`--annotate X.json --svg X.json` wrote the chart over the
    annotated trace). "-" (stdout) and None (not asked) are no files."""
    seen: list[tuple[str, str, str]] = []
    for flag, path in named:
        if path is None or path == "-":
            continue
        real = os.path.realpath(path)
        for flag0, path0, real0 in seen:
            if real == real0 or _same_file(path, path0):
                same = "" if path == path0 else f" ({path0})"
                raise BadInput(f"{flag} {path}: is also the {flag0} output{same}; give each output a file of its own")
        seen.append((flag, path, real))


def _same_file(a: str, b: str) -> bool:
    """Hard links and other aliases realpath cannot see (same device and inode)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False
