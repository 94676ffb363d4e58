"""The calibration plan: which figures this device gets, measured in order, into one profile.

`plan` is pure given the Machine (which keys, in what order, with which sizes); `calibrate`
imports torch, measures every step and assembles the profile dict (schema traceana.profile/1,
docs/profile-schema.md). A step that fails (a dtype the build lacks, out of memory) is listed
under "skipped" with the reason; the others still run.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from traceana import __version__
from traceana.measure.calibrate import SCHEMA, gemm, launch, memory, transfer
from traceana.measure.calibrate.checks import contradictions
from traceana.measure.calibrate.machine import Machine, detect, mem_available
from traceana.measure.calibrate.timing import Clock, CudaClock, HostClock

# seconds one repeat lasts at least, per mode
MIN_S = {"quick": 0.08, "full": 0.25}
REPEATS = {"quick": 3, "full": 5}
GPU_ONLY = ("tf32/bf16/fp16/fp8 tensor-core GEMMs, L2 bandwidth, host<->device bandwidth (pinned and pageable, "
            "both directions), kernel launch latency and peer bandwidth need a GPU")
CPU_NO_SHEET = ("a CPU has no datasheet row in traceana's device table: % of spec is unknown; the measured "
                "figures are the roofs")


@dataclass(frozen=True)
class Step:
    key: str  # the figure's key in the profile
    label: str  # what the progress bar shows
    run: Callable[[], dict]


def plan(torch: Any, m: Machine, clock: Clock, mode: str, repeats: int) -> list[Step]:
    dev = "cpu" if m.kind == "cpu" else f"cuda:{m.index or 0}"
    min_s = MIN_S[mode]
    sheet = m.datasheet
    steps: list[Step] = []
    if m.kind == "cpu":
        keys = list(gemm.CPU_KEYS)
    else:
        keys = gemm.gpu_keys(m.kind, m.capability, hasattr(torch, "_scaled_mm"))
    for k in keys:
        steps.append(Step(f"gemm.{k}", f"GEMM {k}", lambda k=k: gemm.measure(
            torch, clock, k, kind=m.kind, device=dev, mode=mode, repeats=repeats, min_s=min_s,
            datasheet=sheet.get(f"gemm.{k}"), threads=m.threads)))
    dram = memory.dram_working_set(m.llc_bytes, mode, mem_available() if m.kind == "cpu" else
                                   (m.memory_bytes // 4 if m.memory_bytes else None))
    short = (f"working set below {memory.LLC_TIMES}x the {m.llc_bytes / 2**20:,.0f} MiB last-level cache "
             "(capped by the mode or free memory): part may be served from cache"
             if m.llc_bytes and dram < memory.LLC_TIMES * m.llc_bytes else None)
    for which in ("copy", "triad"):
        steps.append(Step(f"dram.{which}", f"DRAM {which}", lambda w=which: memory.measure(
            torch, clock, w, dram, device=dev, repeats=repeats, min_s=min_s, level="DRAM",
            datasheet=sheet.get(f"dram.{w}"), note=short)))
    cache = memory.cache_working_set(m.kind, m.l2_bytes)
    level = "L2, one core" if m.kind == "cpu" else "L2"
    steps.append(Step("cache.copy", "cache copy", lambda: memory.measure(
        torch, clock, "copy", cache, device=dev, repeats=repeats, min_s=min_s, level=level,
        threads=1 if m.kind == "cpu" else None, note="one CPU thread" if m.kind == "cpu" else None)))
    if m.kind == "cpu":
        steps.append(Step("dispatch.overhead", "dispatch overhead", lambda: launch.measure(
            torch, clock, kind="cpu", device=dev, repeats=repeats, min_s=min_s)))
        return steps
    steps.append(Step("launch.latency", "launch latency", lambda: launch.measure(
        torch, clock, kind=m.kind, device=dev, repeats=repeats, min_s=min_s)))
    for key in transfer.KEYS:
        steps.append(Step(key, key, lambda key=key: transfer.measure_host(
            torch, clock, key, transfer.SIZE[mode], device=dev, repeats=repeats, min_s=min_s,
            datasheet=sheet.get(key))))
    if m.gpus > 1:
        steps.append(Step("peer.copy", "peer copy", lambda: transfer.measure_peer(
            torch, clock, transfer.SIZE[mode], repeats=repeats, min_s=min_s, datasheet=sheet.get("peer.copy"))))
    return steps


def device_dict(m: Machine) -> dict:
    return {"name": m.name, "kind": m.kind, "driver": m.driver, "torch": m.torch, "threads": m.threads,
            "index": m.index, "gpus": m.gpus,
            "capability": f"{m.capability[0]}.{m.capability[1]}" if m.capability else None,
            "l2_bytes": m.l2_bytes, "llc_bytes": m.llc_bytes, "table_key": m.table_key}


def assemble(m: Machine, mode: str, figures: dict[str, dict], skipped: dict[str, str], seconds: float,
             now: _dt.datetime) -> dict:
    """The profile document (pure)."""
    notes = []
    if m.kind == "cpu":
        notes += [CPU_NO_SHEET, f"not measured: {GPU_ONLY} (run `traceana calibrate` on the GPU machine)"]
    elif not m.table_key:
        notes.append(f"{m.name!r} has no row in the device table: % of spec is unknown")
    return {
        "schema": SCHEMA,
        "tool": {"name": "traceana", "version": __version__},
        "date": now.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": mode,
        "duration_s": round(seconds, 3),
        "device": device_dict(m),
        "figures": dict(sorted(figures.items())),
        "skipped": dict(sorted(skipped.items())),
        "notes": notes,
    }


@dataclass(frozen=True)
class Prepared:
    machine: Machine
    steps: list[Step]
    mode: str
    started: float  # perf_counter when preparation began (torch's import counts)


def prepare(device: str | None = None, mode: str = "quick", repeats: int | None = None) -> Prepared:
    """Import torch, find the device and plan its steps (nothing measured yet)."""
    t0 = time.perf_counter()
    import torch

    m = detect(torch, device)
    clock: Clock = HostClock() if m.kind == "cpu" else CudaClock(torch.cuda)
    return Prepared(m, plan(torch, m, clock, mode, repeats or REPEATS[mode]), mode, t0)


_FAILURES = (RuntimeError, TypeError, AttributeError, ValueError, MemoryError)


def run(p: Prepared, stage: Callable[[str], None] | None = None) -> dict:
    """Measure every step (`stage(label)` is told as each starts), check the figures against each
    other (calibrate/checks.py: a contradictory one is measured again, at most RETRIES times), mark
    what stays unstable or contradictory unusable, and return the profile."""
    figures: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for s in p.steps:
        if stage:
            stage(s.label)
        try:
            figures[s.key] = _steady(s.run)
        except _FAILURES as exc:
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            skipped[s.key] = f"{type(exc).__name__}: {first}"
    _reconcile(figures, {s.key: s for s in p.steps}, p.machine.kind, stage)
    return assemble(p.machine, p.mode, figures, skipped, time.perf_counter() - p.started,
                    _dt.datetime.now(_dt.timezone.utc))


def _reconcile(figures: dict[str, dict], steps: dict[str, Step], kind: str,
               stage: Callable[[str], None] | None) -> None:
    """Measure each contradictory figure again (the suspect of a pair: the lower one) until the
    figures agree or RETRIES rounds are spent, keeping a new measurement when it is the better one
    (load only ever slows a throughput down, or stretches a latency); then mark what still
    contradicts, or stayed unstable, "unusable" with the reason: report --profile leaves it out."""
    for _ in range(RETRIES):
        suspects = contradictions(figures, kind)
        if not suspects:
            break
        for key in suspects:
            if stage:
                stage(f"{steps[key].label} again")
            try:
                again = _steady(steps[key].run)
            except _FAILURES:
                continue
            old = figures[key]
            better = again["value"] < old["value"] if old["unit"] == "us" else again["value"] > old["value"]
            figures[key] = {**(again if better else old), "remeasured": old.get("remeasured", 0) + 1}
    for key, why in contradictions(figures, kind).items():
        figures[key] = {**figures[key], "unusable": why}
    for key, f in figures.items():
        if f.get("unstable") and "unusable" not in f:
            figures[key] = {**f, "unusable": f"unstable: repeats disagree by {f['spread_pct']:.0f}% after "
                                             f"{f.get('retries', 0)} retries (a busy machine?)"}


# A figure whose repeats disagree by more than this (spread, % of the median) is measured again, up
# to RETRIES times, keeping the steadiest; one still above it is marked unstable (other jobs on
# the machine, frequency scaling), so a report does not silently take it as a roof.
UNSTABLE_PCT = 25.0
RETRIES = 2


def _steady(measure: Callable[[], dict]) -> dict:
    best = measure()
    tries = 0
    while best["spread_pct"] > UNSTABLE_PCT and tries < RETRIES:
        tries += 1
        again = measure()
        if again["spread_pct"] < best["spread_pct"]:
            best = again
    if tries:
        best = {**best, "retries": tries}
    if best["spread_pct"] > UNSTABLE_PCT:
        best = {**best, "unstable": True,
                "note": ((best.get("note") + "; ") if best.get("note") else "")
                + f"unstable: repeats disagree by {best['spread_pct']:.0f}% after {tries} retries (a busy machine?)"}
    return best


def calibrate(device: str | None = None, mode: str = "quick", repeats: int | None = None,
              stage: Callable[[str], None] | None = None) -> dict:
    """Measure this machine and return its profile (traceana.profile/1)."""
    return run(prepare(device, mode, repeats), stage)
