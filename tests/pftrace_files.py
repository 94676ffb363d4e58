"""Chrome JSON traces converted to Perfetto (.pftrace) for the tests, cached across sessions.

The conversion (traceana.annotate.to_pftrace) is Python, a few seconds per large shared trace, so each
(trace, style) is converted once and kept in a cache folder (TRACEANA_PFTRACE_CACHE, default under the
system temp folder), keyed by the trace file's path, size and mtime, the style and the converter's own
source: a change to the converter converts again.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from pathlib import Path

import msgspec
import numpy as np

from traceana.annotate import to_pftrace
from traceana.annotate.to_pftrace import Style
from traceana.load.pftrace import wire

CACHE = Path(os.environ.get("TRACEANA_PFTRACE_CACHE") or Path(tempfile.gettempdir()) / f"traceana-pftrace-{os.getuid()}")
_SOURCES = (Path(to_pftrace.__file__), Path(wire.__file__))


def read_doc(path: str | Path) -> dict:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = msgspec.json.decode(data)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def converted(path: str | Path, style: Style = Style(), gz: bool = False) -> str:
    """The .pftrace (.pftrace.gz with gz) of the JSON trace at `path` in `style`, converted once."""
    p = Path(path)
    st = p.stat()
    h = hashlib.sha1()
    for src in _SOURCES:
        h.update(src.read_bytes())
    h.update(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}|{style!r}|{gz}".encode())
    out = CACHE / f"{p.name.split('.')[0][:40]}-{h.hexdigest()[:16]}.pftrace{'.gz' if gz else ''}"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
        opener = gzip.open if gz else open
        with opener(tmp, "wb") as fh:
            to_pftrace.convert(read_doc(p), fh.write, style)
        os.replace(tmp, out)
    return str(out)


def write(doc: dict, path: Path, style: Style = Style(), gz: bool = False) -> str:
    opener = gzip.open if gz else open
    with opener(path, "wb") as fh:
        to_pftrace.convert(doc, fh.write, style)
    return str(path)


_RAW_SHAPES = ("dims", "types", "strides", "concrete")


def same_trace(a, b, where: str = "trace") -> None:
    """The two Traces hold the same events: every column equal (NaN = NaN) but the file name, the
    event count and the events' places in their files (a JSON file counts its metadata and flow
    events, a Perfetto trace has none); shape args (raw JSON text) compared as the values they hold."""
    if isinstance(a, msgspec.Struct):
        assert type(a) is type(b), where
        for f in msgspec.structs.fields(a):
            if f.name in ("path", "n_events", "ordinal"):
                continue
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name in _RAW_SHAPES:
                assert len(x) == len(y), f"{where}.{f.name}"
                for i, (u, v) in enumerate(zip(x, y)):
                    if u != v:
                        assert msgspec.json.decode(u) == msgspec.json.decode(v), f"{where}.{f.name}[{i}]: {u!r} {v!r}"
                continue
            same_trace(x, y, f"{where}.{f.name}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        ok = np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        if not ok:
            bad = np.flatnonzero(~((a == b) | ((a != a) & (b != b))) if a.dtype.kind == "f" else a != b)
            raise AssertionError(f"{where}: {len(bad)} differ, first at {bad[0]}: {a[bad[0]]!r} vs {b[bad[0]]!r}")
    else:
        assert a == b, f"{where}: {str(a)[:300]} vs {str(b)[:300]}"
