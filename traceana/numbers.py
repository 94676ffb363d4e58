"""Numbers from untrusted text: a trace's values, file names, options.

Python's `str.isdigit()` is true for '²' and '٣', and `int()` takes '٣', '1_000' and ' 12 ' but
raises on '²' and on more than 4,300 digits; `float()` of a 400-digit int raises OverflowError.
No trace, file name or option means any of those, so every such conversion goes through here:
ASCII digits only, and a value no float holds is unknown (None), never an exception.
"""

from __future__ import annotations

import math
import re
from typing import Any

_DIGITS = re.compile(r"[0-9]{1,4000}")
_SIGNED = re.compile(r"-?[0-9]{1,4000}")


def ascii_int(text: Any, signed: bool = False) -> int | None:
    """`text` as an int when it is all ASCII digits (a leading '-' with `signed`), else None."""
    if not isinstance(text, str) or not (_SIGNED if signed else _DIGITS).fullmatch(text):
        return None
    return int(text)


def finite(value: Any) -> float | None:
    """`value` (a number or numeric text) as a finite float, else None (bool, NaN, ±inf, beyond
    float's range, not a number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None
