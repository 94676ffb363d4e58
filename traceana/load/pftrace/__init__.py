"""Perfetto traces (.pftrace, plain or gzip): torch.profiler's Perfetto-native export read into the
same Trace the Chrome JSON loader builds for the same events.

wire.py: the protobuf field numbers and primitives; _decode.c (built with the package) and
pydecode.py (its twin, used when the C one is not built; with track_events.py, descriptors.py and
values.py for the events, tracks and annotation values): packets -> a table; tracks.py and
infer.py: what a track and an event without a category are; table.py: the table -> Trace.
docs/perfetto.md says which profilers write the format and how each field is read.
"""

from __future__ import annotations

from traceana.load.pftrace.sniff import SUFFIXES, named_perfetto, sniff  # noqa: F401


def __getattr__(name: str):
    """load / decode import the decoder on first use: the report path of a JSON trace only sniffs."""
    if name in ("load", "decode"):
        from traceana.load.pftrace import read

        return getattr(read, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
