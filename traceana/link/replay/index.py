"""Which capture traces belong to a replay trace: the file or folder given with --capture, or a
`capture_traces/` folder beside the trace holding `execution_details.json`, the index vLLM-style
capture tooling writes: a JSON list of {"file": NAME, "batch_size": N, "mode": "FULL" | ...},
one entry per captured batch size and mode, NAME relative to the folder."""

from __future__ import annotations

import json
import os

import msgspec

from traceana.errors import BadInput

INDEX = "execution_details.json"
FOLDER = "capture_traces"
_MAX_INDEX_BYTES = 1 << 20


class CaptureFile(msgspec.Struct, frozen=True):
    path: str
    batch_size: int | None
    mode: str | None


def beside(trace_path: str) -> str | None:
    """The capture folder next to the trace, when it holds an index."""
    folder = os.path.join(os.path.dirname(os.path.abspath(trace_path)), FOLDER)
    return folder if os.path.isfile(os.path.join(folder, INDEX)) else None


def capture_files(path: str) -> tuple[list[CaptureFile], list[str]]:
    """The capture traces PATH names (itself when it is a file, the entries of its index when it
    is a folder) and the index entries whose file is missing. BadInput (one line) when it names
    none."""
    if os.path.isfile(path):
        return [CaptureFile(path, None, None)], []
    if not os.path.isdir(path):
        raise BadInput(f"--capture {path}: no such file or folder")
    index = os.path.join(path, INDEX)
    if not os.path.isfile(index):
        raise BadInput(f"--capture {path}: the folder has no {INDEX}; give a capture trace file, or the folder "
                       f"with its {INDEX}")
    try:
        with open(index, "rb") as fh:
            text = fh.read(_MAX_INDEX_BYTES + 1)
    except OSError as exc:
        raise BadInput(f"{index}: cannot read: {exc.strerror or exc}") from None
    if len(text) > _MAX_INDEX_BYTES:
        raise BadInput(f"{index}: larger than 1 MB; not a capture index")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{index}: not JSON ({str(exc)[:80]})") from None
    entries = doc if isinstance(doc, list) else [doc] if isinstance(doc, dict) else None
    if not entries or not all(isinstance(e, dict) for e in entries):
        raise BadInput(f"{index}: expected a list of {{\"file\", \"batch_size\", \"mode\"}} entries")
    out: list[CaptureFile] = []
    missing: list[str] = []
    root = os.path.realpath(path)
    for e in entries:
        name = e.get("file")
        if not isinstance(name, str) or not name or "\x00" in name:
            raise BadInput(f"{index}: an entry has no \"file\" name")
        full = os.path.realpath(os.path.join(path, name))
        if os.path.commonpath([root, full]) != root:
            raise BadInput(f"{index}: entry {name[:80]!r} points outside the folder")
        if not os.path.isfile(full):
            missing.append(name[:80])
            continue
        bs = e.get("batch_size")
        mode = e.get("mode")
        out.append(CaptureFile(full, bs if type(bs) is int and bs >= 0 else None,
                               mode[:40] if isinstance(mode, str) and mode else None))
    if not out:
        raise BadInput(f"{index}: none of its {len(entries)} capture files exists ({', '.join(missing[:3])})")
    return out, missing
