"""The device table (table.csv, generated) and the alias list (aliases.csv, hand-written).

Both ship inside the package and are read once per process with the stdlib csv module;
`load_rows()` / `load_aliases()` are cached and return immutable objects, so nothing here is
module-level mutable state. table.csv is built by scripts/build_device_table.py from the shared
reference CSVs: edit those (or aliases.csv), never table.csv by hand.
"""

from __future__ import annotations

import csv
import functools
import io
import os
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import msgspec

def data_text(filename: str) -> str:
    """A data file shipped in traceana/roofline/devices: read beside this module, through importlib.resources
    (~6 ms to import) only when the package does not live in a folder (a zip)."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), filename), encoding="utf-8") as f:
            return f.read()
    except OSError:
        from importlib import resources

        return resources.files("traceana.roofline.devices").joinpath(filename).read_text(encoding="utf-8")


# Peak columns, in table order: dense TFLOP/s (int8_tc in TOPS). `*_tc` = tensor / matrix cores;
# fp16 / bf16 without suffix are the non-tensor (CUDA-core / vector) rates.
DTYPES: tuple[str, ...] = (
    "fp64", "fp64_tc", "fp32", "tf32_tc", "bf16_tc", "fp16_tc", "fp8_tc", "int8_tc", "fp16", "bf16",
    "fp6_tc", "fp4_tc",  # from lowp.csv (hand-written, sourced): the generated table has no such columns
)
LOWP = ("fp6_tc", "fp4_tc")
UNKNOWN_TARGET = "unknown"


class DeviceRow(msgspec.Struct, frozen=True):
    """One row of table.csv. Blank cells are None (not confirmed), never 0."""

    key: str
    name_regex: str
    vendor: str
    arch: str
    cc: tuple[int, int] | None
    sms: int | None
    mem_gb: float | None
    dram_gbps: float | None
    peak_tflops: Mapping[str, float]
    source: str
    boost_mhz: float | None = None  # the clock the peaks were computed at (None: not in the sources)

    @property
    def pattern(self) -> re.Pattern[str]:
        """name_regex compiled on first use: a device is matched against the rows before its own, not all 102."""
        return _compile(self.name_regex)

    @property
    def cc_text(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}" if self.cc else ""

    @property
    def label(self) -> str:
        """The product name the row stands for, read off its name pattern ('NVIDIA RTX A5000',
        'A100-SXM4-80GB'): anchors and optional groups dropped, the first of each alternative kept."""
        return product_name(self.name_regex) or self.key

    @property
    def consumer(self) -> bool:
        """A GeForce / Radeon RX part: on NVIDIA, its tensor cores accumulate FP16 in FP32 at half rate."""
        return is_consumer(self.label)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: every column, peaks as {dtype: TFLOP/s} with only known values."""
        return {
            "key": self.key,
            "name_regex": self.name_regex,
            "vendor": self.vendor,
            "arch": self.arch,
            "cc": self.cc_text or None,
            "sms": self.sms,
            "boost_mhz": self.boost_mhz,
            "mem_gb": self.mem_gb,
            "dram_gbps": self.dram_gbps,
            "peak_tflops": dict(self.peak_tflops),
            "source": self.source,
        }


class Alias(msgspec.Struct, frozen=True):
    """One line of aliases.csv: a name without a row, its conditions and its decision."""

    name_regex: str
    sms: int | None
    min_mem_gb: float | None
    max_mem_gb: float | None
    target: str  # a table key or UNKNOWN_TARGET
    blank: tuple[str, ...]
    note: str

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.name_regex)

    def conditions(self) -> str:
        """The conditions as text ('' when there are none), for the source sentence."""
        parts = []
        if self.sms is not None:
            parts.append(f"numSms {self.sms}")
        if self.min_mem_gb is not None:
            parts.append(f"memory >= {self.min_mem_gb:g} GiB")
        if self.max_mem_gb is not None:
            parts.append(f"memory < {self.max_mem_gb:g} GiB")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name_regex": self.name_regex,
            "conditions": self.conditions() or None,
            "target": self.target,
            "blank": list(self.blank),
            "note": self.note,
        }


def product_name(regex: str) -> str:
    """A readable name from a row's name pattern: '^(Tesla |NVIDIA )?V100-SXM2-16GB$' -> 'V100-SXM2-16GB',
    '^AMD Instinct MI300X( HF| VF)?$' -> 'AMD Instinct MI300X', 'PCI[Ee]' -> 'PCIE'."""
    text = regex.strip("^$")
    text = re.sub(r"\([^()]*\)\?", "", text)  # optional groups
    text = re.sub(r"\(([^()|]*)(\|[^()]*)?\)", r"\1", text)  # (A|B) -> A
    text = re.sub(r"\[(.)[^\]]*\]", r"\1", text)  # [Ee] -> E
    text = re.sub(r"(\w)\?", r"\1", text)  # 4? -> 4
    text = text.replace("\\b", "").replace(".*", "").replace("\\", "")
    return " ".join(text.split())


#: NVIDIA parts built without tensor cores: every GeForce GTX (Pascal and older have none; Turing's GTX 16xx
#: are TU116 / TU117, the Turing SM without them), GeForce MX450 / MX550 (TU117) and NVIDIA T400 to T2000, the
#: Quadro T-series included (TU117)
_NO_TENSOR_CORES = re.compile(r"\bGTX\b|\bMX ?\d{3}\b|\bT(?:400|500|550|600|1000|1200|2000)\b", re.IGNORECASE)


def has_no_tensor_cores(name: str) -> bool:
    """Whether the product `name` has no tensor cores (see _NO_TENSOR_CORES): a row borrowed for it
    lends no tensor-core peaks."""
    return bool(_NO_TENSOR_CORES.search(name))


def is_consumer(name: str) -> bool:
    """GeForce or Radeon RX (gaming) parts, by the product line in the name."""
    lowered = name.lower()
    return "geforce" in lowered or "radeon rx" in lowered


def _read_csv(filename: str) -> list[dict[str, str]]:
    text = data_text(filename)
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    return [{k: (v or "").strip() for k, v in row.items()} for row in reader]


def _num(text: str) -> float | None:
    return float(text) if text else None


def _int(text: str) -> int | None:
    return int(text) if text else None


def _cc(text: str) -> tuple[int, int] | None:
    if not text:
        return None
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


@functools.lru_cache(maxsize=None)
def _compile(regex: str) -> re.Pattern[str]:
    return re.compile(regex, re.IGNORECASE)


@functools.cache
def load_rows() -> tuple[DeviceRow, ...]:
    """table.csv as DeviceRows, in file order."""
    rows = []
    lowp = {r["key"]: r for r in _read_csv("lowp.csv")}
    for raw in _read_csv("table.csv"):
        peaks = {d: float(raw[d]) for d in DTYPES if raw.get(d)}
        low = lowp.get(raw["key"], {})
        peaks.update({d: float(low[d]) for d in LOWP if low.get(d)})
        if low.get("source"):
            raw = {**raw, "source": f"{raw['source']}; fp6/fp4: {low['source']}"}
        rows.append(
            DeviceRow(
                key=raw["key"],
                name_regex=raw["name_regex"],
                vendor=raw["vendor"],
                arch=raw["arch"],
                cc=_cc(raw["cc"]),
                sms=_int(raw["sms"]),
                mem_gb=_num(raw["mem_gb"]),
                dram_gbps=_num(raw["dram_gbps"]),
                peak_tflops=MappingProxyType(peaks),
                source=raw["source"],
                boost_mhz=_num(raw.get("boost_mhz", "")),
            )
        )
    return tuple(rows)


@functools.cache
def rows_by_key() -> Mapping[str, DeviceRow]:
    return MappingProxyType({row.key: row for row in load_rows()})


@functools.cache
def load_aliases() -> tuple[Alias, ...]:
    """aliases.csv as Alias objects, in file order (first match wins)."""
    return tuple(
        Alias(
            name_regex=raw["name_regex"],
            sms=_int(raw["sms"]),
            min_mem_gb=_num(raw["min_mem_gb"]),
            max_mem_gb=_num(raw["max_mem_gb"]),
            target=raw["target"],
            blank=tuple(b.strip() for b in raw["blank"].split(";") if b.strip()),
            note=raw["note"],
        )
        for raw in _read_csv("aliases.csv")
    )
