"""Debug annotation values for the Python decoder (pydecode.py): a top-level annotation becomes a
typed arg row (int, uint, double, bool, string, or JSON text for a dict, an array, a legacy
NestedValue or legacy JSON), and nested values become JSON text written the way the C decoder writes
it (", " and ": " separators, Kineto's; doubles in the fewest of 15-17 digits; an array element with
no value is [] (an empty list in array_values), any other missing value null)."""

from __future__ import annotations

import math

from traceana.load.pftrace import wire as w
from traceana.load.pftrace.wire import WireError, as_double, fields, signed

# argument value types (the table's ar_type)
NULL, INT, UINT, DOUBLE, BOOL, STRING, JSON = range(7)
MAX_DEPTH = 100  # dicts and arrays nested in one debug annotation
_I63 = 1 << 63


def fmt_double(x: float) -> str:
    """A double as JSON text: the fewest of 15, 16, 17 significant digits that read back the same,
    ".0" added to an integral value; NaN and infinities are null (JSON has no such numbers)."""
    if not math.isfinite(x):
        return "null"
    for p in (15, 16, 17):
        s = "%.*g" % (p, x)
        if float(s) == x:
            break
    if not any(c in s for c in ".en"):
        s += ".0"
    return s


def json_str(b: bytes) -> str:
    """A JSON string literal of `b` (UTF-8; bytes that are not are U+FFFD): `"` and `\\` escaped,
    control characters as \\u00XX, the rest as it is."""
    s = b.decode("utf-8", "replace")
    out = ['"']
    for c in s:
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif c < " ":
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


class Values:
    """The annotation methods of pydecode.Decoder (which holds the strings, tables and columns)."""

    def annotation(self, buf, pos, end, sq, row: int) -> None:
        """A top-level debug annotation of event `row`: its name and its value (a scalar, or the
        JSON text of a nested one)."""
        name = -1
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Annotation.NAME_IID and wt == w.VARINT:
                name = sq.tables.get(w.Interned.DEBUG_ANNOTATION_NAMES, {}).get(v, -1)
            elif f == w.Annotation.NAME and wt == w.LEN:
                name = self.code(buf[s:e])
        if name < 0:
            return
        if self.wanted is not None and self.strings[name].encode("utf-8", "surrogatepass") not in self.wanted:
            return
        kind, value = self.value(buf, pos, end, sq, 0)
        if kind == INT or kind == BOOL:
            self._arg(row, name, kind, value, 0.0, -1)
        elif kind == UINT:
            if value < _I63:
                self._arg(row, name, UINT, value, 0.0, -1)
            else:
                self._arg(row, name, JSON, 0, 0.0, self.code(str(value).encode()))
        elif kind == DOUBLE:
            self._arg(row, name, DOUBLE, 0, value, -1)
        elif kind == STRING:
            self._arg(row, name, STRING, 0, 0.0, self.code(value))
        elif kind == JSON:
            self._arg(row, name, JSON, 0, 0.0, self.code(value.encode("utf-8")))
        elif kind == NULL:
            self._arg(row, name, NULL, 0, 0.0, -1)

    def value(self, buf, pos, end, sq, depth: int):
        """(type, value) of a DebugAnnotation's value: INT/UINT/BOOL -> int, DOUBLE -> float, STRING
        -> bytes, JSON -> text (dicts, arrays, nested and legacy JSON values), NULL -> None."""
        kind, value = NULL, None
        entries: list[tuple[int, int]] = []
        items: list[tuple[int, int]] = []
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Annotation.BOOL and wt == w.VARINT:
                kind, value = BOOL, int(bool(v))
            elif f == w.Annotation.UINT and wt == w.VARINT:
                kind, value = UINT, v
            elif f == w.Annotation.POINTER and wt == w.VARINT:
                kind, value = UINT, v
            elif f == w.Annotation.INT and wt == w.VARINT:
                kind, value = INT, signed(v)
            elif f == w.Annotation.DOUBLE and wt == w.FIXED64:
                kind, value = DOUBLE, as_double(v)
            elif f == w.Annotation.STRING and wt == w.LEN:
                kind, value = STRING, bytes(buf[s:e])
            elif f == w.Annotation.STRING_IID and wt == w.VARINT:
                code = sq.tables.get(w.Interned.DEBUG_ANNOTATION_STRING_VALUES, {}).get(v, -1)
                kind, value = (STRING, self.strings[code].encode("utf-8", "surrogatepass")) if code >= 0 else (NULL, None)
            elif f == w.Annotation.LEGACY_JSON and wt == w.LEN:
                kind, value = JSON, bytes(buf[s:e]).decode("utf-8", "replace")
            elif f == w.Annotation.NESTED and wt == w.LEN:
                kind, value = JSON, self.nested(buf, s, e, depth)
            elif f == w.Annotation.DICT_ENTRIES and wt == w.LEN:
                entries.append((s, e))
            elif f == w.Annotation.ARRAY_VALUES and wt == w.LEN:
                items.append((s, e))
        if (entries or items) and depth + 1 > MAX_DEPTH:
            raise WireError(f"debug annotation nested more than {MAX_DEPTH} deep")
        if entries:
            parts = []
            for s, e in entries:
                key = b""
                for f, wt, v, s2, e2 in fields(buf, s, e):
                    if f == w.Annotation.NAME and wt == w.LEN:
                        key = bytes(buf[s2:e2])
                    elif f == w.Annotation.NAME_IID and wt == w.VARINT:
                        code = sq.tables.get(w.Interned.DEBUG_ANNOTATION_NAMES, {}).get(v, -1)
                        key = self.strings[code].encode("utf-8", "surrogatepass") if code >= 0 else b""
                parts.append(json_str(key) + ": " + self.json(buf, s, e, sq, False, depth + 1))
            return JSON, "{" + ", ".join(parts) + "}"
        if items:
            return JSON, "[" + ", ".join(self.json(buf, s, e, sq, True, depth + 1) for s, e in items) + "]"
        return kind, value

    def json(self, buf, pos, end, sq, element: bool, depth: int) -> str:
        """A nested annotation's value as JSON text; an array element with no value is [] (how an
        empty list comes out of array_values), any other missing value null."""
        kind, value = self.value(buf, pos, end, sq, depth)
        if kind == NULL:
            return "[]" if element else "null"
        if kind in (INT, UINT):
            return str(value)
        if kind == BOOL:
            return "true" if value else "false"
        if kind == DOUBLE:
            return fmt_double(value)
        if kind == STRING:
            return json_str(value)
        return value

    def nested(self, buf, pos, end, depth: int) -> str:
        """A legacy NestedValue as JSON text."""
        typ = 0
        keys: list[bytes] = []
        vals: list[str] = []
        arr: list[str] = []
        scalar = "null"
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Nested.TYPE and wt == w.VARINT:
                typ = v
            elif f == w.Nested.DICT_KEYS and wt == w.LEN:
                keys.append(bytes(buf[s:e]))
            elif f == w.Nested.DICT_VALUES and wt == w.LEN:
                vals.append((s, e))
            elif f == w.Nested.ARRAY_VALUES and wt == w.LEN:
                arr.append((s, e))
            elif f == w.Nested.INT and wt == w.VARINT:
                scalar = str(signed(v))
            elif f == w.Nested.DOUBLE and wt == w.FIXED64:
                scalar = fmt_double(as_double(v))
            elif f == w.Nested.BOOL and wt == w.VARINT:
                scalar = "true" if v else "false"
            elif f == w.Nested.STRING and wt == w.LEN:
                scalar = json_str(bytes(buf[s:e]))
        if typ in (1, 2) and depth + 1 > MAX_DEPTH:
            raise WireError(f"debug annotation nested more than {MAX_DEPTH} deep")
        if typ == 1:
            return "{" + ", ".join(json_str(k) + ": " + self.nested(buf, s, e, depth + 1)
                                   for k, (s, e) in zip(keys, vals)) + "}"
        if typ == 2:
            return "[" + ", ".join(self.nested(buf, s, e, depth + 1) for s, e in arr) + "]"
        return scalar

