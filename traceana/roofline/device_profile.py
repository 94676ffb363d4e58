"""Device profiles written by `traceana calibrate`, read back (pure: no torch).

`load_profile(path)` reads and checks one `traceana.profile/1` JSON file (docs/profile-schema.md)
and returns a frozen Profile; anything wrong is one BadInput naming the file and the problem.
The roofline stage takes its achievable roofs from it: `peaks()` (TFLOP/s keyed like the device
table's peaks, from the gemm.* figures) and `dram_gbps()` (the better of DRAM copy and triad).
A figure calibrate marked unusable (it stayed unstable, or contradicted the others: see
calibrate/checks.py), or marked unstable by an older calibrate, is read but never used as a roof:
the datasheet's (or the CPU default) stands in, and `as_dict()["unusable"]` says why.

Figures must make physical sense (devices/sanity.py): one beyond what any device does (1e30 or
1e-300 TFLOP/s or GB/s) refuses the file; one above 2x or below 1/1000 of the trace's device's
datasheet figure is marked unusable by `judged_against` when the profile is applied to a trace.
"""

from __future__ import annotations

import math
import os
from typing import Any

import msgspec

from traceana.errors import BadInput
from traceana.roofline.devices.sanity import against_sheet, out_of_range

SCHEMA = "traceana.profile/1"
KINDS = ("cpu", "cuda", "rocm")
UNITS = ("TFLOP/s", "GB/s", "us")


class Figure(msgspec.Struct, frozen=True):
    value: float
    unit: str
    spread_pct: float
    size: str
    repeats: int
    unusable: str | None = None  # why calibrate judged it no roof (None: usable)


class Profile(msgspec.Struct, frozen=True):
    path: str
    name: str  # the device the profile measured
    kind: str  # cpu | cuda | rocm
    driver: str | None
    torch: str
    threads: int | None
    date: str
    figures: tuple[tuple[str, Figure], ...]  # (key, figure), sorted by key; a tuple so it pickles to workers

    def figure(self, key: str) -> Figure | None:
        return next((f for k, f in self.figures if k == key), None)

    def value(self, key: str) -> float | None:
        """The figure's value, or None when it is absent or unusable."""
        f = self.figure(key)
        return f.value if f and f.unusable is None else None

    def usable(self) -> list[tuple[str, Figure]]:
        return [(k, f) for k, f in self.figures if f.unusable is None]

    def unusable(self) -> dict[str, str]:
        return {k: f.unusable for k, f in self.figures if f.unusable is not None}

    def peaks(self) -> dict[str, float]:
        """Measured GEMM TFLOP/s by the device table's peak keys (fp32, bf16_tc, ...), usable ones only."""
        return {k[5:]: f.value for k, f in self.usable() if k.startswith("gemm.") and f.unit == "TFLOP/s"}

    def dram_gbps(self) -> float | None:
        """The memory roof: the better of DRAM copy and triad (what the machine has shown it does)."""
        vals = [v for v in (self.value("dram.copy"), self.value("dram.triad")) if v]
        return max(vals) if vals else None

    def file(self) -> str:
        return os.path.basename(self.path)

    def label(self) -> str:
        """'cpu.json (Intel Xeon, cpu, measured 2025-01-02)'."""
        return f"{self.file()} ({self.name}, {self.kind}, measured {self.date[:10]})"

    def judged_against(self, sheet: dict[str, float]) -> tuple["Profile", dict[str, str]]:
        """This profile with every usable figure that contradicts the device's datasheet (`sheet`:
        figure key -> datasheet value, as `sheet_figures` makes) marked unusable, and those reasons."""
        found = {}
        for k, f in self.usable():
            why = against_sheet(f.value, sheet.get(k), f.unit, _SHEET_WHAT.get(k.split(".")[0], "figure"))
            if why:
                found[k] = why
        if not found:
            return self, {}
        figs = tuple((k, Figure(f.value, f.unit, f.spread_pct, f.size, f.repeats, found[k]) if k in found else f)
                     for k, f in self.figures)
        return Profile(self.path, self.name, self.kind, self.driver, self.torch, self.threads, self.date, figs), found

    def as_dict(self) -> dict[str, Any]:
        """What an Analysis records of the profile (device.profile)."""
        return {"file": self.file(), "name": self.name, "kind": self.kind, "date": self.date, "torch": self.torch,
                "driver": self.driver, "threads": self.threads, "peak_tflops": self.peaks(),
                "dram_gbps": self.dram_gbps(), "dispatch_us": self.value("dispatch.overhead"),
                "launch_us": self.value("launch.latency"),
                "spread_pct": {k: f.spread_pct for k, f in self.usable()}, "unusable": self.unusable()}


_SHEET_WHAT = {"gemm": "peak", "dram": "DRAM bandwidth", "h2d": "host link", "d2h": "host link",
               "peer": "peer link"}


def sheet_figures(peak_tflops: dict[str, float], dram_gbps: float | None, host_link_gbps: float | None = None,
                  peer_link_gbps: float | None = None) -> dict[str, float]:
    """A device's datasheet figures keyed like a profile's: gemm.<peak key> TFLOP/s, dram.copy /
    dram.triad, h2d.* / d2h.* (the host link per direction) and peer.copy GB/s."""
    out = {f"gemm.{k}": v for k, v in peak_tflops.items()}
    if dram_gbps:
        out["dram.copy"] = out["dram.triad"] = dram_gbps
    if host_link_gbps:
        out.update({f"{d}.{m}": host_link_gbps for d in ("h2d", "d2h") for m in ("pinned", "pageable")})
    if peer_link_gbps:
        out["peer.copy"] = peer_link_gbps
    return out


def _bad(path: str, why: str) -> BadInput:
    return BadInput(f"{path}: not a usable traceana profile: {why}")


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def parse_profile(doc: Any, path: str = "<profile>") -> Profile:
    """Check one decoded profile document and build the Profile."""
    if not isinstance(doc, dict):
        raise _bad(path, "the JSON is not an object")
    if doc.get("schema") != SCHEMA:
        raise _bad(path, f"schema is {doc.get('schema')!r}, expected {SCHEMA!r} (write it with `traceana calibrate`)")
    dev = doc.get("device")
    if not isinstance(dev, dict) or not isinstance(dev.get("name"), str) or not dev["name"]:
        raise _bad(path, "device.name is missing")
    if dev.get("kind") not in KINDS:
        raise _bad(path, f"device.kind is {dev.get('kind')!r}, expected one of {', '.join(KINDS)}")
    figs = doc.get("figures")
    if not isinstance(figs, dict) or not figs:
        raise _bad(path, "it has no figures")
    out: dict[str, Figure] = {}
    for key, f in figs.items():
        if not isinstance(f, dict):
            raise _bad(path, f"figure {key!r} is not an object")
        if not _positive(f.get("value")):
            raise _bad(path, f"figure {key!r} has no positive value")
        if f.get("unit") not in UNITS:
            raise _bad(path, f"figure {key!r} has unit {f.get('unit')!r}, expected one of {', '.join(UNITS)}")
        absurd = out_of_range(float(f["value"]), f["unit"])
        if absurd:
            raise _bad(path, f"figure {key!r}: {absurd}")
        spread = f.get("spread_pct", 0.0)
        reps = f.get("repeats", 1)
        if not isinstance(spread, (int, float)) or isinstance(spread, bool) or not math.isfinite(spread) or spread < 0:
            raise _bad(path, f"figure {key!r} has a bad spread_pct")
        if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
            raise _bad(path, f"figure {key!r} has a bad repeats count")
        out[str(key)] = Figure(float(f["value"]), f["unit"], float(spread), str(f.get("size") or ""), reps,
                               _unusable(f, spread))
    threads = dev.get("threads")
    return Profile(path, dev["name"], dev["kind"], dev.get("driver") if isinstance(dev.get("driver"), str) else None,
                   str(dev.get("torch") or ""), threads if isinstance(threads, int) and threads > 0 else None,
                   str(doc.get("date") or ""), tuple(sorted(out.items())))


def _unusable(f: dict, spread: float) -> str | None:
    """Why a figure is no roof: calibrate's "unusable" reason; an older calibrate's "unstable" mark."""
    why = f.get("unusable")
    if why:
        return str(why)[:300] if isinstance(why, str) else "marked unusable by calibrate"
    if f.get("unstable") is True:
        return f"unstable: repeats disagree by {spread:.0f}%"
    return None


def load_profile(path: str) -> Profile:
    """Read and check a profile file (BadInput with one line on any problem)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(16 << 20)
    except FileNotFoundError:
        raise BadInput(f"{path}: profile not found") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, not a profile") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read profile: {exc.strerror or exc}") from None
    try:
        import json  # (a profile file is read only when --profile names one: not on every report's path)

        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(path, f"invalid JSON ({str(exc)[:80]})") from None
    return parse_profile(doc, path)
