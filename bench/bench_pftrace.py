#!/usr/bin/env python3
"""Reading a Perfetto trace vs reading the same trace as Chrome JSON: load_trace (file -> Trace) on the
OWLv2 trace (tracelens h100, 132k events) and on its .pftrace conversion, gzip and plain, alternated in
one process, best of N each; the ratio is what counts (the machine's load moves both).

    python bench/bench_pftrace.py [--trace REL] [--repeat 5] [--python]

--python also times the pure-Python decoder (TRACEANA_PURE_PYTHON=1: no C decoder, no C scanner).
The conversion is tests/pftrace_files.converted's (cached under the temp folder).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

OWL = "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=OWL, help="a trace under the shared traces folder")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--python", action="store_true", help="also the pure-Python decoder")
    a = ap.parse_args(argv)
    from tests.conftest import TRACES
    from tests.pftrace_files import converted
    from traceana.load.reader import load_trace

    src = TRACES / a.trace
    if not src.exists():
        print(f"{src}: not there (set TRACEANA_SHARED)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-pftrace-"))
    try:
        pf = Path(converted(src))
        pf_gz = tmp / "t.pftrace.gz"
        pf_gz.write_bytes(gzip.compress(pf.read_bytes(), 6))
        js_plain = tmp / "t.json"
        js_plain.write_bytes(gzip.decompress(src.read_bytes()))
        cases = {"json.gz": src, "pftrace.gz": pf_gz, "json": js_plain, "pftrace": pf}
        for p in cases.values():  # warm the page cache and the imports
            load_trace(str(p))
        rows = {name: best(lambda p=p: load_trace(str(p)), a.repeat) for name, p in cases.items()}
        if a.python:
            os.environ["TRACEANA_PURE_PYTHON"] = "1"
            rows["pftrace (Python decoder)"] = best(lambda: load_trace(str(pf)), 1)
            rows["json (Python loader)"] = best(lambda: load_trace(str(js_plain)), 1)
            del os.environ["TRACEANA_PURE_PYTHON"]
        sizes = {"json.gz": src.stat().st_size, "pftrace.gz": pf_gz.stat().st_size, "json": js_plain.stat().st_size,
                 "pftrace": pf.stat().st_size}
        print(f"{a.trace}: best of {a.repeat}")
        for name, t in rows.items():
            size = sizes.get(name.split(" ")[0])
            print(f"  {name:28s} {t * 1000:8.1f} ms" + (f"  {size / 1e6:7.1f} MB" if size else ""))
        print(f"  pftrace.gz / json.gz: {rows['pftrace.gz'] / rows['json.gz']:.2f}x the time; "
              f"pftrace / json: {rows['pftrace'] / rows['json']:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
