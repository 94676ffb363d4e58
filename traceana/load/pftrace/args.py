"""The decoded table's args, found by name and converted column-wise as the JSON loader converts
each value (load.decode's _as_int / _finite, the typed schema's refusals), and the document's other
keys from the metadata rows."""

from __future__ import annotations

import math

import msgspec
import numpy as np

from traceana.load.decode import _as_int, _finite
from traceana.load.pftrace.values import BOOL, DOUBLE, INT, JSON, NULL, STRING, UINT, fmt_double, json_str
from traceana.load.schema import DOC_DECODER, TraceDoc

_EMPTY = b""


class Args:
    """The events' args, found by name: per key, the rows that have it (the last value of a key an
    event repeats) and typed values."""

    def __init__(self, t: dict, strings: list[str]) -> None:
        self.strings = strings
        ev, key = t["ar_event"], t["ar_key"]
        self.meta = np.flatnonzero(ev < 0)
        # the args sorted by name, each name's in table order (an event's rows ascending): one sort
        self._order = np.argsort(key, kind="stable")
        sorted_keys = key[self._order]
        codes, starts = np.unique(sorted_keys, return_index=True)
        ends = np.r_[starts[1:], len(sorted_keys)]
        by_name: dict[str, list[tuple[int, int]]] = {}
        for code, a, b in zip(codes.tolist(), starts.tolist(), ends.tolist()):
            if code >= 0:
                by_name.setdefault(strings[code], []).append((a, b))
        self.codes = by_name
        self.t = t
        self._cache: dict[str, tuple] = {}

    def get(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(event rows, arg rows) of the events that carry arg `name`, rows ascending."""
        hit = self._cache.get(name)
        if hit is None:
            codes = self.codes.get(name)
            if not codes:
                hit = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            else:
                ev = self.t["ar_event"]
                idx = np.concatenate([self._order[a:b] for a, b in codes]) if len(codes) > 1 else \
                    self._order[codes[0][0]:codes[0][1]]
                idx = idx[ev[idx] >= 0]
                rows = ev[idx].astype(np.int64)
                if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():
                    # args an END added, or a key an event repeats: sort, and keep the last of each event
                    order = np.lexsort((idx, rows))
                    rows, idx = rows[order], idx[order]
                    last = np.r_[rows[1:] != rows[:-1], True]
                    rows, idx = rows[last], idx[last]
                hit = (rows, idx)
            self._cache[name] = hit
        return hit

    def keys(self, name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
        """(positions in `rows`, index of each one's distinct value, the distinct values as Python
        values): a rare arg's values, each distinct one converted once."""
        pos, j = self._where(name, rows)
        t = self.t
        typ = t["ar_type"][j].astype(np.int64)
        val = np.where((typ == STRING) | (typ == JSON), t["ar_str"][j], t["ar_int"][j])
        dbl = typ == DOUBLE
        if dbl.any():
            val = val.copy()
            val[dbl] = t["ar_dbl"][j[dbl]].view(np.int64)
        k = np.stack((typ, val)) if len(j) else np.zeros((2, 0), np.int64)
        if not len(j):
            return pos, np.zeros(0, np.int64), []
        _, first, inv = np.unique(k, axis=1, return_index=True, return_inverse=True)
        return pos, inv.reshape(-1), [self.python(int(j[f])) for f in first.tolist()]

    def has(self, name: str, n: int) -> np.ndarray:
        out = np.zeros(n, bool)
        out[self.get(name)[0]] = True
        return out

    def python(self, j: int):
        """The arg at row j as the JSON loader would hold its value (decoded JSON for nested ones)."""
        t = self.t
        typ = int(t["ar_type"][j])
        if typ in (INT, UINT):
            return int(t["ar_int"][j])
        if typ == DOUBLE:
            return float(t["ar_dbl"][j])
        if typ == BOOL:
            return bool(t["ar_int"][j])
        if typ == STRING:
            return self.strings[t["ar_str"][j]]
        if typ == JSON:
            try:
                return msgspec.json.decode(self.strings[t["ar_str"][j]])
            except (msgspec.DecodeError, RecursionError):
                return _BAD
        return None

    def raw(self, j: int) -> bytes:
        """The arg's value as JSON text (what the JSON loader keeps of a shape arg)."""
        t = self.t
        typ = int(t["ar_type"][j])
        if typ in (INT, UINT):
            return str(int(t["ar_int"][j])).encode()
        if typ == DOUBLE:
            return fmt_double(float(t["ar_dbl"][j])).encode()
        if typ == BOOL:
            return b"true" if t["ar_int"][j] else b"false"
        if typ == STRING:
            return json_str(self.strings[t["ar_str"][j]].encode("utf-8", "surrogatepass")).encode()
        if typ == JSON:
            return self.strings[t["ar_str"][j]].encode("utf-8", "surrogatepass")
        return b"null"

    # -------------------------------------------------------------- columns for a set of rows

    def _where(self, name: str, rows: np.ndarray):
        """(positions in `rows`, arg rows) of those of `rows` (ascending) that carry `name`."""
        ev, idx = self.get(name)
        if not len(rows) or not len(ev):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pos = np.searchsorted(rows, ev)
        ok = pos < len(rows)
        ok[ok] = rows[pos[ok]] == ev[ok]
        return pos[ok], idx[ok]

    def ids(self, name: str, rows: np.ndarray, missing: int = -1, fallback: str | None = None,
            strict: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(int64 column, present mask): `_as_int` of the arg for each row, `missing` when absent.
        strict: the schema's Id type (int or text; any other type is as if absent, as msgspec refuses
        it); else Any (a float, bool or nested value converts as _as_int converts it).
        fallback: a second arg read where the first is absent (External id, then "external id")."""
        out = np.full(len(rows), missing, np.int64)
        have = np.zeros(len(rows), bool)
        pos, j = self._where(name, rows)
        typ = self.t["ar_type"][j]
        ints = (typ == INT) | (typ == UINT)
        out[pos[ints]] = self.t["ar_int"][j[ints]]
        have[pos[ints]] = True
        for p, jj, ty in zip(pos[~ints].tolist(), j[~ints].tolist(), typ[~ints].tolist()):
            if ty == NULL:
                continue
            v = self.python(jj)
            if strict and not (ty == STRING or (ty == JSON and type(v) in (int, str))):
                continue
            have[p] = True
            out[p] = _as_int(v, missing)
        if fallback is not None and not have.all():
            rest = np.flatnonzero(~have)
            v2, h2 = self.ids(fallback, rows[rest], missing, None, strict)
            out[rest] = v2
            have[rest] = h2
        return out, have

    def floats(self, name: str, rows: np.ndarray, strict: bool = True) -> np.ndarray:
        """float64 column: `_finite` of the arg, NaN when absent. strict: the schema's number type
        (int, float or text); else Any."""
        out = np.full(len(rows), math.nan)
        pos, j = self._where(name, rows)
        typ = self.t["ar_type"][j]
        ints = (typ == INT) | (typ == UINT)
        out[pos[ints]] = self.t["ar_int"][j[ints]].astype(np.float64)
        dbl = typ == DOUBLE
        d = self.t["ar_dbl"][j[dbl]]
        out[pos[dbl]] = np.where(np.isfinite(d), d, math.nan)
        rest = ~(ints | dbl)
        for p, jj, ty in zip(pos[rest].tolist(), j[rest].tolist(), typ[rest].tolist()):
            if ty == NULL:
                continue
            v = self.python(jj)
            if strict and not (ty == STRING or (ty == JSON and type(v) in (int, float, str))):
                continue
            f = _finite(v)
            out[p] = math.nan if f is None else f
        return out

    def values(self, name: str, rows: np.ndarray) -> list:
        """The arg's value per row as Python values (None when absent): for the few rows of a rare arg."""
        out: list = [None] * len(rows)
        pos, j = self._where(name, rows)
        for p, jj in zip(pos.tolist(), j.tolist()):
            out[p] = self.python(jj)
        return out

    def raws(self, name: str, rows: np.ndarray) -> list[bytes]:
        """The arg's JSON text per row, b"" when absent (the JSON loader's raw shape args); each
        distinct value encoded once."""
        pos, j = self._where(name, rows)
        if not len(pos):
            return [_EMPTY] * len(rows)
        t = self.t
        typ = t["ar_type"][j]
        # one key per distinct text (a string and a JSON text of the same code apart); other values each their own
        key = np.where((typ == STRING) | (typ == JSON), t["ar_str"][j].astype(np.int64) * 2 + (typ == JSON),
                       -1 - np.arange(len(j)))
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        lut = np.empty(len(first), dtype=object)
        lut[:] = [self.raw(int(j[f])) for f in first.tolist()]
        out = np.empty(len(rows), dtype=object)
        out[:] = _EMPTY
        out[pos] = lut[inv.reshape(-1)]
        return out.tolist()

    def texts(self, name: str, rows: np.ndarray) -> dict[int, object]:
        """{position: value} of the rows whose arg is truthy (the JSON loader keeps "Call stack" so)."""
        out = {}
        pos, j = self._where(name, rows)
        for p, jj in zip(pos.tolist(), j.tolist()):
            v = self.python(jj)
            if v and v is not _BAD:
                out[p] = v
        return out


_BAD = object()  # legacy JSON text that is not JSON: as if absent


# ------------------------------------------------------------------ the document


def document(args: Args, warnings: list[str]) -> TraceDoc:
    """The document's other keys, from the metadata rows, read by the JSON loader's typed decoder
    (a key whose value the schema refuses is left out, with a warning)."""
    t, strings = args.t, args.strings
    parts = []
    for j in args.meta.tolist():
        key = strings[t["ar_key"][j]]
        parts.append((key, args.raw(int(j))))
    if not parts:
        return TraceDoc(traceEvents=[])
    enc = msgspec.json.encode

    def doc_of(items):
        return DOC_DECODER.decode(b"{" + b",".join(enc(k) + b":" + v for k, v in items) + b"}")

    try:
        return doc_of(parts)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        kept, dropped = [], []
        for kv in parts:
            try:
                doc_of([kv])
                kept.append(kv)
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                dropped.append(kv[0])
        warnings.append(f"the trace's metadata {', '.join(dropped[:5])} has an unexpected type and was ignored")
        return doc_of(kept) if kept else TraceDoc(traceEvents=[])
