#!/usr/bin/env python3
"""Build traceana/roofline/devices/table.csv from the shared GPU reference data.

How the committed table was made:

    python scripts/build_device_table.py            # reads ../shared/reference/*.csv + scripts/gpu_specs_added.csv
    python scripts/build_device_table.py --check    # exit 1 if the committed table is stale

Inputs (paths are arguments; the defaults are the shared folder next to the repo):
  gpu_specs.csv        one row per GPU model: key, name_patterns (regex over the verbatim names
                       CUDA / ROCm report), vendor, arch, cc, sms, mem_gb, dram_gbps, dense peak
                       TFLOP/s per dtype (fp64 ... int8_tc, int8 in TOPS), source.
  gpu_specs_notes.csv  per key: non-tensor fp16 / bf16 peaks and the evidence for each name.
  gpu_specs_added.csv  (in this repo's scripts/) rows for devices the shared reference lacks, in
                       gpu_specs.csv's columns plus fp16_nontensor / bf16_nontensor, each with the
                       sources its figures come from (blank where none was found); appended after
                       the shared rows. A key already in gpu_specs.csv is an error.
  gpu_specs_fills.csv  (in scripts/) key, column, value, source: figures for cells a shared row leaves
                       blank, each group with its source (the first line of a key carries it). A fill
                       never replaces a figure: a non-blank target cell is an error.

What the script does, and nothing more:
  * copies every number verbatim as text (no rounding, no unit changes); a blank stays blank,
    because blank means "not confirmed" and the matcher must never turn it into a number;
  * adds the non-tensor `fp16` / `bf16` columns from the notes file;
  * fills blank cells from gpu_specs_fills.csv and appends "; COLUMNS from SOURCE" to the row's source;
  * shortens `source` to the document the peaks come from (the part before the first ':'
    outside parentheses, first ';' clause of that; ROCm rows drop the shared
    "ROCm docs 'AMD GPU specifications'" clause, which only backs CUs / L2 / gfx version);
  * validates: unique keys, every regex compiles, every number parses as a positive float,
    notes keys are table keys. Any problem stops the build with a message.

Columns dropped on purpose: l2_mb (links.csv holds it), and the fp16-accumulate tensor rates
(PyTorch accumulates fp16 GEMMs in fp32). boost_mhz is kept: a device without a row borrows the
nearest row's peaks scaled by SMs x clock (roofline/devices/identify.py, borrow.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SPECS = REPO.parent / "shared" / "reference" / "gpu_specs.csv"
DEFAULT_NOTES = REPO.parent / "shared" / "reference" / "gpu_specs_notes.csv"
DEFAULT_ADDED = REPO / "scripts" / "gpu_specs_added.csv"
DEFAULT_FILLS = REPO / "scripts" / "gpu_specs_fills.csv"
DEFAULT_OUT = REPO / "traceana" / "roofline" / "devices" / "table.csv"

PEAKS = ("fp64", "fp64_tc", "fp32", "tf32_tc", "bf16_tc", "fp16_tc", "fp8_tc", "int8_tc")
COLUMNS = (
    "key", "name_regex", "vendor", "arch", "cc", "sms", "boost_mhz", "mem_gb", "dram_gbps",
    *PEAKS, "fp16", "bf16", "source",
)
NUMERIC = ("sms", "boost_mhz", "mem_gb", "dram_gbps", *PEAKS, "fp16", "bf16")
# a fill's column name -> the table column it fills (the notes' names for the non-tensor rates)
FILL_COLUMNS = {**{c: c for c in NUMERIC if c not in ("fp16", "bf16")},
                "fp16_nontensor": "fp16", "bf16_nontensor": "bf16"}

# Rows whose long source the generic shortening rule reads badly.
SHORT_SOURCE_OVERRIDES = {
    "mi250x_gcd": "ROCm MI250 page (FLOPs/clock/CU x 110 CUs, per GCD)",
}
ROCM_SPECS_CLAUSE = "ROCm docs 'AMD GPU specifications'"


def _split_top_level(text: str, sep: str) -> list[str]:
    """Split on `sep` where it is not inside parentheses."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def short_source(key: str, text: str) -> str:
    """The document the row's numbers come from, in one short phrase."""
    if key in SHORT_SOURCE_OVERRIDES:
        return SHORT_SOURCE_OVERRIDES[key]
    text = " ".join(text.split())
    head = _split_top_level(text, ":")[0]
    clauses = _split_top_level(head, ";")
    rocm = bool(clauses) and clauses[0].startswith(ROCM_SPECS_CLAUSE)
    if rocm and len(clauses) > 1:
        clauses = clauses[1:]
    short = clauses[0].rstrip(".")
    if rocm:
        short += " (CUs/gfx: ROCm GPU specifications)"
    return short


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return [{k: (v or "").strip() for k, v in row.items()} for row in csv.DictReader(fh)]
    except FileNotFoundError:
        sys.exit(f"build_device_table: {path} not found (pass --specs/--notes)")


def _check_number(path: Path, key: str, column: str, text: str) -> None:
    if text == "":
        return
    try:
        value = float(text)
    except ValueError:
        sys.exit(f"build_device_table: {path}: row {key!r} column {column!r}: {text!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        sys.exit(f"build_device_table: {path}: row {key!r} column {column!r}: {text!r} must be > 0")


def build_rows(specs_path: Path, notes_path: Path, added_path: Path | None = None,
               fills_path: Path | None = None) -> list[dict[str, str]]:
    """The table rows, in the order of gpu_specs.csv, then gpu_specs_added.csv's, with the fills applied."""
    specs = _read(specs_path)
    notes = {row["key"]: row for row in _read(notes_path)}
    if added_path is not None:
        added = _read(added_path)
        for row in added:
            if row["key"] in notes:
                sys.exit(f"build_device_table: {added_path}: key {row['key']!r} is in {notes_path.name} already")
            notes[row["key"]] = row  # its fp16_nontensor / bf16_nontensor columns
        specs = specs + added
    seen: set[str] = set()
    rows = []
    for spec in specs:
        key = spec["key"]
        if not key or key in seen:
            sys.exit(f"build_device_table: {specs_path}: empty or duplicate key {key!r}")
        seen.add(key)
        try:
            re.compile(spec["name_patterns"])
        except re.error as exc:
            sys.exit(f"build_device_table: {specs_path}: row {key!r}: bad regex: {exc}")
        note = notes.get(key, {})
        row = {
            "key": key,
            "name_regex": spec["name_patterns"],
            "vendor": spec["vendor"],
            "arch": spec["arch"],
            "cc": spec["cc"],
            "sms": spec["sms"],
            "boost_mhz": spec.get("boost_mhz", ""),
            "mem_gb": spec["mem_gb"],
            "dram_gbps": spec["dram_gbps"],
            **{p: spec[p] for p in PEAKS},
            "fp16": note.get("fp16_nontensor", ""),
            "bf16": note.get("bf16_nontensor", ""),
            "source": short_source(key, spec["source"]),
        }
        for column in NUMERIC:
            _check_number(specs_path, key, column, row[column])
        rows.append(row)
    stray = sorted(set(notes) - seen)
    if stray:
        sys.exit(f"build_device_table: {notes_path}: keys not in {specs_path.name}: {stray}")
    if fills_path is not None:
        _apply_fills(rows, fills_path)
    return rows


def _apply_fills(rows: list[dict[str, str]], path: Path) -> None:
    """Fill blank cells from gpu_specs_fills.csv; each key's filled columns join its source."""
    by_key = {row["key"]: row for row in rows}
    filled: dict[str, list[str]] = {}
    sources: dict[str, str] = {}
    for fill in _read(path):
        key, column, value = fill["key"], fill["column"], fill["value"]
        row = by_key.get(key)
        if row is None:
            sys.exit(f"build_device_table: {path}: key {key!r} is not a table row")
        target = FILL_COLUMNS.get(column)
        if target is None:
            sys.exit(f"build_device_table: {path}: {key!r}: {column!r} is not a numeric column")
        if row[target] != "":
            sys.exit(f"build_device_table: {path}: {key!r} {column!r} is {row[target]!r} already: a fill "
                     "never replaces a figure")
        _check_number(path, key, column, value)
        if fill["source"]:
            sources[key] = fill["source"]
        if key not in sources:
            sys.exit(f"build_device_table: {path}: {key!r}: the first fill of a key must name its source")
        row[target] = value
        filled.setdefault(key, []).append(target)
    for key, columns in filled.items():
        src = short_source(key, sources[key])
        by_key[key]["source"] += f"; {', '.join(columns)} from {src}"


def render(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS, help="gpu_specs.csv")
    parser.add_argument("--notes", type=Path, default=DEFAULT_NOTES, help="gpu_specs_notes.csv")
    parser.add_argument("--added", type=Path, default=DEFAULT_ADDED, help="gpu_specs_added.csv (rows this repo adds)")
    parser.add_argument("--fills", type=Path, default=DEFAULT_FILLS, help="gpu_specs_fills.csv (blank cells filled)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="table.csv to write")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if --out differs")
    args = parser.parse_args(argv)
    text = render(build_rows(args.specs, args.notes, args.added, args.fills))
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run scripts/build_device_table.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({text.count(chr(10)) - 1} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
