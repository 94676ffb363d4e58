"""Convert a Chrome JSON trace (torch.profiler / Kineto, .json or .json.gz) to a Perfetto trace.

    python scripts/json_to_pftrace.py trace.json.gz out.pftrace [--inline] [--no-categories] [--complete]

Writes what torch.profiler's Perfetto export writes for the same events (traceana.annotate.to_pftrace):
for trying `traceana report out.pftrace` on a trace you have as JSON; gzip when OUT ends in .gz.
"""

from __future__ import annotations

import argparse
import gzip
import sys

import msgspec

from traceana.annotate.to_pftrace import Style, convert


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--inline", action="store_true", help="names inline, not interned")
    ap.add_argument("--no-categories", action="store_true", help="leave the categories out")
    ap.add_argument("--complete", action="store_true", help="complete (legacy 'X') slices: µs durations")
    a = ap.parse_args(argv)
    with open(a.trace, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = msgspec.json.decode(data)
    style = Style(interned=not a.inline, categories=not a.no_categories, slices="complete" if a.complete else "pairs")
    opener = gzip.open if a.out.endswith(".gz") else open
    with opener(a.out, "wb") as fh:
        convert(doc if isinstance(doc, dict) else {"traceEvents": doc}, fh.write, style)
    return 0


if __name__ == "__main__":
    sys.exit(main())
