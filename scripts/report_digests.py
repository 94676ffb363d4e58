"""sha256 of every report traceana writes for the shared traces, to prove a change left them byte-identical.

    PYTHONPATH=$PWD python scripts/report_digests.py [--traces DIR] [--max-mb 200] [-o digests.txt]

One line per (trace, format): `<sha256>  <trace relative to DIR>  <format>`. Run it before and after
a change and compare the two files (`diff`): every line must match.

What runs, in this process, through the CLI exactly as a user calls it (`traceana.cli.main`, fixed
options, one worker):
- every trace (*.json, *.json.gz under DIR, but not tracelens/reference/ nor a capture folder's
  execution_details.json, which are not traces): `report TRACE -o OUT.{html,md,json}`, the long
  markdown (`--long`), the roofline chart (`--svg`) and the lines printed on the terminal (`text`);
- a cross-rank report of hta/sampled_rank-0 and -1 (html, md, json, text; `--jobs 1`, so the line
  saying where the ranks ran is always "in this process");
- a diff of hta/control against hta/test (html, md, md --long, json, text).

Normalised: the terminal lines name the output file, whose folder is a fresh temporary one; that
folder is replaced by `<out>`. Nothing else is: the reports hold no date or clock time, and the
version they name is the package's own.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import sys
import tempfile

TRACES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "traces")
RANKS = ("hta/sampled_rank-0.json.gz", "hta/sampled_rank-1.json.gz")
DIFF = ("hta/control.json.gz", "hta/test.json.gz")


def trace_files(root: str, max_bytes: float) -> tuple[list[str], list[str]]:
    """The traces under `root` (relative paths, sorted) and those skipped for size."""
    found, big = [], []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        rel_d = os.path.relpath(d, root)
        if rel_d.split(os.sep)[:2] == ["tracelens", "reference"]:
            dirs[:] = []
            continue
        for f in sorted(files):
            if not f.endswith((".json", ".json.gz")) or f == "execution_details.json":
                continue
            rel = os.path.normpath(os.path.join(rel_d, f))
            (big if os.path.getsize(os.path.join(root, rel)) > max_bytes else found).append(rel)
    return sorted(found), sorted(big)


def run_cli(argv: list[str], out_dir: str) -> str:
    """`traceana ARGV` in this process; its stdout with `out_dir` replaced by <out>. Exit 0 or 1 (a gate)."""
    from traceana.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    if code not in (0, 1):
        raise SystemExit(f"traceana {' '.join(argv)}: exit {code}")
    return buf.getvalue().replace(out_dir, "<out>")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def one_trace(root: str, rel: str, out: str) -> list[tuple[str, str]]:
    path = os.path.join(root, rel)
    rows = []
    for fmt in ("html", "md", "json"):
        target = os.path.join(out, f"report.{fmt}")
        extra = ["--svg", os.path.join(out, "chart.svg")] if fmt == "html" else []
        text = run_cli(["report", path, "-o", target, "--force", *extra], out)
        rows.append((fmt, digest(read(target))))
        if fmt == "html":
            rows.append(("text", digest(text.encode("utf-8"))))
            rows.append(("svg", digest(read(os.path.join(out, "chart.svg")))))
    target = os.path.join(out, "long.md")
    run_cli(["report", path, "-o", target, "--force", "--long", "-q"], out)
    rows.append(("md-long", digest(read(target))))
    return rows


def ranks(root: str, out: str) -> list[tuple[str, str]]:
    paths = [os.path.join(root, r) for r in RANKS]
    rows = []
    for fmt in ("html", "md", "json"):
        target = os.path.join(out, f"ranks.{fmt}")
        text = run_cli(["report", *paths, "-o", target, "--force", "--jobs", "1"], out)
        rows.append((fmt, digest(read(target))))
        if fmt == "html":
            rows.append(("text", digest(text.encode("utf-8"))))
    return rows


def diff(root: str, out: str) -> list[tuple[str, str]]:
    base, head = (os.path.join(root, r) for r in DIFF)
    rows = []
    for fmt, extra in (("html", []), ("md", []), ("md-long", ["--long"]), ("json", [])):
        target = os.path.join(out, f"diff.{fmt.split('-')[0]}")
        text = run_cli(["diff", base, head, "-o", target, "--force", *extra], out)
        rows.append((fmt, digest(read(target))))
        if fmt == "html":
            rows.append(("text", digest(text.encode("utf-8"))))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default=os.environ.get("TRACEANA_SHARED") and
                    os.path.join(os.environ["TRACEANA_SHARED"], "traces") or TRACES)
    ap.add_argument("--max-mb", type=float, default=200.0, help="skip trace files larger than this (MB on disk)")
    ap.add_argument("-o", "--output", default=None, help="also write the lines to this file")
    args = ap.parse_args()
    root = os.path.abspath(args.traces)
    if not os.path.isdir(root):
        print(f"report_digests: {root}: no such directory", file=sys.stderr)
        return 2
    os.environ.setdefault("TRACEANA_PROGRESS_DELAY", "1000")
    traces, big = trace_files(root, args.max_mb * 1e6)
    lines = []

    def emit(name: str, rows: list[tuple[str, str]]) -> None:
        for fmt, h in rows:
            lines.append(f"{h}  {name}  {fmt}")
            print(lines[-1], flush=True)

    with tempfile.TemporaryDirectory(prefix="traceana-digests-") as out:
        for rel in traces:
            emit(rel, one_trace(root, rel, out))
        emit("+".join(RANKS), ranks(root, out))
        emit(" vs ".join(DIFF), diff(root, out))
    for rel in big:
        print(f"# skipped (over {args.max_mb:g} MB): {rel}", file=sys.stderr)
    if args.output:
        with open(args.output, "w") as f:
            f.write("\n".join(lines) + "\n")
    print(f"# {len(lines)} digests, {len(traces)} traces", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
