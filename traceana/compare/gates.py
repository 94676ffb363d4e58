"""`--fail-on` gates for CI: parse a spec into a Gate, evaluate it against a document.

Pure: `parse(spec)` -> Gate (BadInput, exit 2, for a malformed spec); `evaluate(doc, gates)`
-> one message per tripped condition; `enforce` raises GateFailed (exit 1) with them. The
document is an analysis (`traceana.analysis/1`) or a diff (`traceana.diff/1`); for a diff,
the single-run gates (coverage, unmodelled, roof) look at the head side.

    time-regression=5%     diff: total device time (per step when both sides have steps) grew > 5%
    op-regression=10%      diff: a matched op signature with >= 1% of device time (base or head)
                           grew > 10%
    coverage<95%           modelled share of device time below 95%
    unmodelled>2%          unmodelled share of device time above 2%
    roof<40%:aten::mm      named ops (fnmatch globs, comma-separated) below 40% of roof,
                           time-weighted over their signatures: sum(roof time) / sum(device time)

A gate that cannot be checked trips rather than passes (no device time for coverage<, no
modelled op matching a roof< glob): a CI gate that silently checks nothing is worse than a
red build that says why.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from traceana.errors import BadInput, GateFailed
from traceana.units import pct as fmt_pct
from traceana.units import us as fmt_time_us
from traceana.document import mapping, seq
from traceana.units import num, text

#: op-regression ignores op signatures with less than this share (%) of device time.
OP_MIN_SHARE = 1.0
#: At most this many op lines per tripped op-regression / roof gate.
MAX_LINES = 10

DIFF_ONLY = ("time-regression", "op-regression")
EXAMPLES = "time-regression=5%, op-regression=10%, coverage<95%, unmodelled>2%, roof<40%:aten::mm"

_SPEC = re.compile(
    r"^(?P<kind>time-regression|op-regression|coverage|unmodell?ed|roof)\s*"
    r"(?P<op>[=<>])\s*(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%?\s*(?::\s*(?P<ops>.*))?$",
    re.IGNORECASE,
)
_OPERATORS = {"time-regression": "=>", "op-regression": "=>", "coverage": "<", "unmodelled": ">", "roof": "<"}


class Gate(msgspec.Struct, frozen=True):
    spec: str  # as written, for messages
    kind: str  # time-regression | op-regression | coverage | unmodelled | roof
    threshold: float  # percent
    patterns: tuple[str, ...] = ()  # roof only


def parse(spec: str) -> Gate:
    """One --fail-on spec -> Gate; BadInput naming the spec and the accepted forms otherwise."""
    raw = spec.strip()
    m = _SPEC.match(raw)
    if not m:
        raise BadInput(f"--fail-on {spec!r}: not a gate; expected one of: {EXAMPLES}")
    kind = m.group("kind").lower().replace("unmodeled", "unmodelled")
    if m.group("op") not in _OPERATORS[kind]:
        want = " or ".join(_OPERATORS[kind])
        raise BadInput(f"--fail-on {spec!r}: {kind} takes {want!r}, e.g. {_example(kind)}")
    threshold = float(m.group("num"))
    patterns = tuple(p.strip() for p in (m.group("ops") or "").split(",") if p.strip())
    if kind == "roof" and not patterns:
        raise BadInput(f"--fail-on {spec!r}: name the ops after a colon, e.g. roof<40%:aten::mm")
    if kind != "roof" and m.group("ops") is not None:
        raise BadInput(f"--fail-on {spec!r}: only roof< takes op names")
    if kind in ("coverage", "unmodelled", "roof") and threshold > 100:
        raise BadInput(f"--fail-on {spec!r}: a share cannot exceed 100%")
    return Gate(spec=raw, kind=kind, threshold=threshold, patterns=patterns)


def _example(kind: str) -> str:
    return next(e for e in EXAMPLES.split(", ") if e.startswith(kind))


def parse_all(specs: Iterable[str], diff: bool) -> list[Gate]:
    """Parse every spec; for `report`/`render` (diff=False) refuse the two-run gates."""
    gates = [parse(s) for s in specs]
    if not diff:
        for g in gates:
            if g.kind in DIFF_ONLY:
                raise BadInput(f"--fail-on {g.spec!r}: {g.kind} compares two runs; use it with `traceana diff`")
    return gates


# ---------------------------------------------------------------- evaluation


def evaluate(doc: Mapping[str, Any], gates: Iterable[Gate]) -> list[str]:
    """One message per tripped condition (empty: every gate passed)."""
    return [m for g in gates for m in check(doc, g)]


def check(doc: Mapping[str, Any], g: Gate) -> list[str]:
    """The messages of one gate (empty: it passed); each is one line."""
    return [m.translate(_CONTROL) for m in _check(doc, g)]


#: Control characters in op names (a newline in a kernel name) must not split a message.
_CONTROL = {c: " " for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)}


def _check(doc: Mapping[str, Any], g: Gate) -> list[str]:
    doc = mapping(doc)
    is_diff = text(doc.get("schema")).startswith("traceana.diff/")
    if g.kind in DIFF_ONLY and not is_diff:
        return [f"{g.spec}: needs a diff (traceana diff BASE HEAD)"]
    if g.kind == "time-regression":
        return _time_regression(doc, g)
    if g.kind == "op-regression":
        return _op_regression(doc, g)
    if g.kind in ("coverage", "unmodelled"):
        cov = mapping(mapping(doc.get("head")).get("coverage")) if is_diff else mapping(doc.get("coverage"))
        return _share(cov, g)
    return _roof(_head_ops(doc) if is_diff else seq(doc.get("ops")), g)


def results(doc: Mapping[str, Any], gates: Iterable[Gate]) -> list[dict[str, Any]]:
    """Every gate's outcome, for the report itself: [{spec, ok, messages}]."""
    out = []
    for g in gates:
        msgs = check(doc, g)
        out.append({"spec": g.spec, "ok": not msgs, "messages": msgs})
    return out


def enforce(doc: Mapping[str, Any], gates: Iterable[Gate]) -> None:
    """Raise GateFailed naming every tripped condition (one line, '; '-separated).

    The CLI prints one stderr line per condition instead (cli/ci.py enforce_gates)."""
    failures = evaluate(doc, gates)
    if failures:
        raise GateFailed("; ".join(f"--fail-on {f}" for f in failures))


def _grew(before: float, after: float) -> float | None:
    """Growth in percent; inf when something appeared from nothing, None for 0 -> 0."""
    if before > 0:
        return 100.0 * (after - before) / before
    return float("inf") if after > 0 else None


def _fmt_growth(p: float) -> str:
    return "appeared (was 0)" if p == float("inf") else f"grew {p:.1f}%"


def _time_regression(doc: Mapping[str, Any], g: Gate) -> list[str]:
    tot = mapping(doc.get("total"))
    before, after = num(tot.get("base_us")) or 0.0, num(tot.get("head_us")) or 0.0
    p = _grew(before, after)
    if p is None or p <= g.threshold:
        return []
    per = "per step" if mapping(doc.get("normalisation")).get("per") == "step" else "in total"
    return [f"{g.spec}: device time {per} {_fmt_growth(p)} "
            f"({fmt_time_us(before)} -> {fmt_time_us(after)}; limit {g.threshold:g}%)"]


def _op_label(r: Mapping[str, Any]) -> str:
    dims = text(r.get("input_dims"), 80)
    return f"{text(r.get('name'), 100)} {dims}" if seq(r.get("input_dims")) else text(r.get("name"), 100)


def _op_regression(doc: Mapping[str, Any], g: Gate) -> list[str]:
    hits = []
    for r in seq(doc.get("ops")):
        b, h = mapping(mapping(r).get("base")), mapping(mapping(r).get("head"))
        share = max(num(b.get("share_pct")) or 0.0, num(h.get("share_pct")) or 0.0)
        before, after = num(b.get("time_us")) or 0.0, num(h.get("time_us")) or 0.0
        p = _grew(before, after)
        if share >= OP_MIN_SHARE and p is not None and p > g.threshold:
            hits.append((after - before, p, r, before, after, share))
    hits.sort(key=lambda x: -x[0])
    out = [f"{g.spec}: {_op_label(r)} {_fmt_growth(p)} ({fmt_time_us(b)} -> {fmt_time_us(a)}, "
           f"{share:.1f}% of device time; limit {g.threshold:g}%)"
           for _, p, r, b, a, share in hits[:MAX_LINES]]
    if len(hits) > MAX_LINES:
        out.append(f"{g.spec}: and {len(hits) - MAX_LINES} more op signatures")
    return out


def _share(cov: Mapping[str, Any], g: Gate) -> list[str]:
    total = num(cov.get("device_time_us"))
    key = "modeled_time_us" if g.kind == "coverage" else "unmodeled_time_us"
    part = num(cov.get(key))
    if total is None or total <= 0 or part is None:
        if g.kind == "unmodelled" and total is not None and total <= 0:
            return []  # nothing ran, so nothing is unmodelled
        return [f"{g.spec}: the analysis has no device time or coverage figures to check"]
    pct = 100.0 * part / total
    if g.kind == "coverage" and pct < g.threshold:
        return [f"{g.spec}: modelled share of device time is {fmt_pct(pct)} "
                f"({fmt_time_us(part)} of {fmt_time_us(total)}; limit {g.threshold:g}%)"]
    if g.kind == "unmodelled" and pct > g.threshold:
        return [f"{g.spec}: unmodelled share of device time is {fmt_pct(pct)} "
                f"({fmt_time_us(part)} of {fmt_time_us(total)}; limit {g.threshold:g}%)"]
    return []


def _head_ops(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A diff's head side as op rows (name, device time, roof time of all calls)."""
    rows = []
    for r in [*seq(doc.get("ops")), *seq(doc.get("new"))]:
        h = mapping(mapping(r).get("head"))
        rows.append({"name": mapping(r).get("name"), "device_time_us": h.get("device_time_us"),
                     "roofline_total_us": h.get("roofline_total_us")})
    return rows


def _roof(ops: list[Any], g: Gate) -> list[str]:
    per: dict[str, list[float]] = {}  # name -> [roof time, device time, signatures]
    matched_unmodelled = 0
    for op in ops:
        op = mapping(op)
        name = text(op.get("name"))
        if not any(fnmatch.fnmatchcase(name, p) for p in g.patterns):
            continue
        t = num(op.get("device_time_us"))
        roof = num(op.get("roofline_total_us"))
        if roof is None and num(op.get("roofline_time_us")) is not None:
            roof = num(op.get("roofline_time_us")) * (num(op.get("count")) or 0.0)  # type: ignore[operator]
        if t is None or t <= 0 or roof is None:
            matched_unmodelled += 1
            continue
        acc = per.setdefault(name, [0.0, 0.0, 0.0])
        acc[0] += roof
        acc[1] += t
        acc[2] += 1
    if not per:
        why = (f" ({matched_unmodelled} matching op signatures have no roof)" if matched_unmodelled
               else "")
        return [f"{g.spec}: no modelled op matches {', '.join(g.patterns)}{why}"]
    out = []
    for name in sorted(per, key=lambda n: -per[n][1]):
        roof, t, n = per[name]
        pct = 100.0 * roof / t
        if pct < g.threshold:
            out.append(f"{g.spec}: {text(name, 100)} runs at {fmt_pct(pct)} of roof, time-weighted over "
                       f"{n:.0f} signature{'s' if n != 1 else ''} ({fmt_time_us(roof)} roof / "
                       f"{fmt_time_us(t)} measured; limit {g.threshold:g}%)")
    if len(out) > MAX_LINES:
        out = out[:MAX_LINES] + [f"{g.spec}: and {len(out) - MAX_LINES} more ops"]
    return out
