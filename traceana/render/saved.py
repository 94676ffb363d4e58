"""Saved documents read back: `report -o x.json` (traceana.analysis/1), `diff -o x.json`
(traceana.diff/1), the cross-rank `report DIR/ -o x.json` (traceana.ranks/1). Checked on the way in, so a renderer never meets a document of the
wrong kind; every problem is one BadInput line naming the file and what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from traceana.errors import BadInput
from traceana.load.reader import read_bytes

ANALYSIS_SCHEMA = "traceana.analysis/1"
DIFF_SCHEMA = "traceana.diff/1"
RANKS_SCHEMA = "traceana.ranks/1"

#: The sections a saved document must have, and their JSON types.
REQUIRED: dict[str, dict[str, type]] = {
    ANALYSIS_SCHEMA: {"trace": dict, "device": dict, "coverage": dict, "breakdown": dict,
                      "ops": list, "findings": list},
    DIFF_SCHEMA: {"base": dict, "head": dict, "total": dict, "ops": list, "new": list, "vanished": list},
    RANKS_SCHEMA: {"summary": dict, "ranks": list, "failed": list, "analyses": list},
}
_JSON_TYPE = {dict: "an object", list: "a list"}


class _Sniff(msgspec.Struct, forbid_unknown_fields=False):
    schema: Any = None


def sniff(path: str) -> tuple[str | None, bytes]:
    """(the document's `schema` string or None, the file's bytes, gunzipped).

    A profiler trace has no top-level `schema`; msgspec skips everything else without
    building it, so sniffing a large trace costs one fast scan.
    """
    data = read_bytes(path)
    try:
        doc = msgspec.json.decode(data, type=_Sniff)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # (nested past msgspec's limit)
        return None, data
    return (doc.schema if isinstance(doc.schema, str) else None), data


def load_document(path: str) -> dict[str, Any]:
    """A saved analysis or diff, validated; BadInput for anything else (a trace included)."""
    schema, data = sniff(path)
    try:
        if schema is None:
            try:
                msgspec.json.decode(data)
            except msgspec.DecodeError as exc:
                raise BadInput(f"{path}: not valid JSON ({str(exc).splitlines()[0][:200]})") from None
            raise BadInput(f"{path}: not a saved traceana analysis (no 'schema' field); for a profiler "
                           "trace use `traceana report`")
        doc = decode(data, schema)
    except RecursionError:  # nested deeper than any document traceana writes (it nests a dozen levels)
        raise BadInput(f"{path}: not a saved traceana document (JSON nested too deeply)") from None
    return validate(doc, path)


#: op ids kept per finding of a saved analysis: the analysis writes at most 50, the renderers
#: show at most 20; a document with more (hand-made: 1,000 findings x 100,000 ids, 1 MB gzip'd)
#: would otherwise decode to ~10^8 strings, each expanded again by the renderer
MAX_FINDING_OPS = 200
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_FINDINGS = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])


def decode(data: bytes, schema: str | None) -> Any:
    """The saved document's JSON as Python objects, bounded by what traceana writes: an
    analysis' findings keep their first MAX_FINDING_OPS op ids (each finding's list decoded
    alone, then cut). Anything unexpected is decoded as it is, for `validate` to judge."""
    if schema != ANALYSIS_SCHEMA:
        return msgspec.json.decode(data)
    try:
        top = _TOP.decode(data)
        findings = _FINDINGS.decode(top["findings"]) if "findings" in top else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return msgspec.json.decode(data)
    doc = {}
    for key, raw in top.items():
        if key != "findings":
            doc[key] = msgspec.json.decode(raw)
            continue
        doc[key] = [{k: _ops(v) if k == "ops" else msgspec.json.decode(v) for k, v in f.items()}
                    for f in findings]
    return doc


def _ops(raw: msgspec.Raw) -> Any:
    ops = msgspec.json.decode(raw)
    return ops[:MAX_FINDING_OPS] if isinstance(ops, list) else ops


def validate(doc: Any, path: str) -> dict[str, Any]:
    """`doc` if it is a supported traceana document with every required section."""
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: not a saved traceana analysis (top level is not an object)")
    schema = doc.get("schema")
    if schema not in REQUIRED:
        kind = str(schema).rpartition("/")[0] if isinstance(schema, str) else ""
        if kind in ("traceana.analysis", "traceana.diff", "traceana.ranks"):
            raise BadInput(f"{path}: schema {schema!r} is not supported by this traceana "
                           f"(it reads {', '.join(REQUIRED)}); upgrade traceana")
        raise BadInput(f"{path}: schema {str(schema)[:80]!r} is not a traceana document "
                       f"(expected {ANALYSIS_SCHEMA!r})")
    for key, typ in REQUIRED[schema].items():
        if key not in doc:
            raise BadInput(f"{path}: saved {schema} document has no {key!r} section")
        if not isinstance(doc[key], typ):
            raise BadInput(f"{path}: {key!r} must be {_JSON_TYPE[typ]}")
    for key in ("ops", "ranks", "analyses"):
        for i, item in enumerate(doc.get(key) or ()):
            if not isinstance(item, Mapping):
                raise BadInput(f"{path}: {key}[{i}] must be an object")
    return doc
