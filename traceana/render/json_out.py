"""The analysis as a JSON document: sorted keys, strict JSON (no NaN), stable bytes.

The analysis is plain data (docs/analysis-schema.md): mappings with string keys, lists, strings, numbers,
booleans, None, and here and there a numpy number or a tuple. msgspec encodes that in C (keys sorted, NaN
and infinities as null, numpy values through their tolist()), which to_json_safe's rules give too; a value
msgspec would encode otherwise (a non-string key, a lone surrogate) takes the Python walk instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec


_AS_IS = frozenset({str, int, bool, type(None)})  # exact types: to_json_safe keeps such values unchanged
_NUMBERS = frozenset({int, float})


def _finite(xs: list | tuple) -> bool:
    """Every number is finite (an int beyond float's range counts as not, and takes the slow path)."""
    try:
        return all(map(math.isfinite, xs))
    except OverflowError:
        return False


def to_json_safe(value: Any, _depth: int = 0) -> Any:
    """A copy of `value` that strict JSON can hold.

    NaN and ±inf become null (JSON has no spelling for them; `allow_nan=False` would
    otherwise refuse the whole document), tuples and sets become lists, mapping keys
    become strings, and anything else unknown becomes its str(). The HTML renderer
    uses this too, so a NaN can never reach `JSON.parse` in the page.
    """
    if _depth > 64:
        return None
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_json_safe(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        kinds = set(map(type, value))  # a column of plain numbers or strings (the timeline's): as it is
        if kinds <= _AS_IS or (kinds <= _NUMBERS and _finite(value)):
            return list(value)
        return [to_json_safe(v, _depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_json_safe(v, _depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        try:
            return to_json_safe(tolist(), _depth + 1)
        except (TypeError, ValueError):
            pass
    return str(value)


def _hook(value: Any) -> Any:
    """What msgspec cannot encode itself, as to_json_safe has it: numpy values as their tolist(), else str()."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return tolist()
        except (TypeError, ValueError):
            pass
    return str(value)


_ENCODER = msgspec.json.Encoder(enc_hook=_hook, order="sorted")


def _encode(value: Any) -> bytes | None:
    """Compact JSON of value with sorted keys (NaN and infinities null), or None when msgspec refuses it
    (a key that is not a string, a string no UTF-8 holds): the caller then takes the Python walk."""
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError, UnicodeEncodeError, OverflowError, RecursionError):
        return None


def as_saved(value: Any, _depth: int = 0) -> Any:
    """json.loads(render_json(value)) without the text: to_json_safe's copy with every mapping's
    keys in sorted order (what the saved document holds and `render` reads back): encoded once by
    msgspec and decoded again (both in C), or, for what msgspec refuses, one Python pass."""
    if _depth == 0:
        raw = _encode(value)
        if raw is not None:
            return msgspec.json.decode(raw)
    return _walk(value, _depth)


def _walk(value: Any, _depth: int = 0) -> Any:
    """as_saved by a Python pass over the value."""
    if _depth > 64:
        return None
    if isinstance(value, Mapping):
        items = sorted(((str(k), v) for k, v in value.items()), key=lambda kv: kv[0])
        return {k: _walk(v, _depth + 1) for k, v in items}
    if isinstance(value, (list, tuple)):
        kinds = set(map(type, value))
        if kinds <= _AS_IS or (kinds <= _NUMBERS and _finite(value)):
            return list(value)
        return [_walk(v, _depth + 1) for v in value]
    return to_json_safe(value, _depth)


#: A list of numbers as json.dumps(indent=1) writes it, one number a line (strings are quoted and
#: newlines inside them escaped, so only the indentation's newlines can match).
_NUMBER_LIST = re.compile(r"\[\n *-?[0-9][0-9.eE+-]*(?:,\n *-?[0-9][0-9.eE+-]*)*\n *\]")


def _one_line(m: re.Match) -> str:
    return "[" + ",".join(x.strip() for x in m.group(0)[1:-1].split(",")) + "]"


def render_json(analysis: Mapping[str, Any]) -> str:
    """The analysis dict as JSON text (sorted keys, one-space indent, trailing newline); lists of
    numbers (the timeline's columns, dims) on one line each. Encoded a part at a time (each
    top-level value, each op row): json.dumps(indent=...) builds one small string per token
    before joining them, ~5x the text in transient objects for the whole document at once."""
    return "".join(json_pieces(analysis))


def json_pieces(analysis: Mapping[str, Any]) -> Iterator[str]:
    """render_json's text in pieces, for a writer that writes them as they come (safe_write.write_pieces):
    the text of 200,000 op rows is ~250 MB, which then never exists whole."""
    yield from _parts(analysis, 0)
    yield "\n"


def saved_bytes(value: Any) -> bytes | None:
    """as_saved's first half: the compact JSON msgspec encodes (None when it refuses the value). A caller
    holding the only reference to a large analysis can drop it before decoding (saved_from), so the
    analysis and its saved copy are never both in memory."""
    return _encode(value)


def saved_from(raw: bytes) -> Any:
    """as_saved's second half: the saved copy decoded from saved_bytes' JSON."""
    return msgspec.json.decode(raw)


_SPLIT_ITEMS = 64  # a list of dicts or lists this long is encoded an item at a time


def _parts(value: Any, level: int):
    """The pieces of json.dumps(to_json_safe(value), sort_keys=True, indent=1) at indent `level`,
    number lists on one line, split at the top two levels so no piece is the whole document."""
    pad = " " * (level + 1)
    if level < 2 and isinstance(value, Mapping) and value:
        items = sorted(((str(k), v) for k, v in value.items()), key=lambda kv: kv[0])
        yield "{"
        for i, (k, v) in enumerate(items):
            yield ("\n" if i == 0 else ",\n") + pad + json.dumps(k, ensure_ascii=False) + ": "
            yield from _parts(v, level + 1)
        yield "\n" + " " * level + "}"
        return
    if (level < 2 and isinstance(value, (list, tuple)) and len(value) >= _SPLIT_ITEMS
            and all(isinstance(v, (Mapping, list, tuple)) for v in value)):
        yield "["
        for i, v in enumerate(value):
            yield ("\n" if i == 0 else ",\n") + pad
            yield from _parts(v, level + 1)
        yield "\n" + " " * level + "]"
        return
    raw = _encode(value)
    if raw is not None:  # msgspec writes floats in their shortest form without an exponent where it can
        text = msgspec.json.format(raw, indent=1).decode("utf-8")
    else:
        text = json.dumps(to_json_safe(value, level), sort_keys=True, indent=1, allow_nan=False, ensure_ascii=False)
    if level:
        text = text.replace("\n", "\n" + " " * level)  # strings escape their newlines: only the indent's match
    yield _NUMBER_LIST.sub(_one_line, text)
