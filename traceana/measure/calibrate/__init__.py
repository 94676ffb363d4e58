"""`traceana calibrate`: measure what this machine can really do, as a device profile.

Every roof traceana uses by default is a datasheet peak no real kernel reaches. This package
measures the achievable roofs with torch (imported only here and only when calibrating):

    timing.py    clocks (host perf_counter on CPU, CUDA events on a GPU) and the repeat loop
    stats.py     samples -> one figure: median, spread, size, repeats (pure)
    machine.py   the device's facts: name, kind, driver, threads, cache sizes, datasheet row
    gemm.py      GEMM throughput per dtype (BLAS on CPU; CUDA cores, TF32/bf16/fp16/fp8 on GPU)
    memory.py    DRAM copy and triad bandwidth, cache bandwidth
    launch.py    per-op dispatch overhead (CPU), kernel launch latency (GPU)
    transfer.py  host<->device (pinned, pageable, both directions) and peer bandwidth (GPU)
    run.py       the plan: which figures for this device, measured in order, with progress
    table.py     the printed table: measured vs datasheet, % of spec

The profile's JSON schema is `traceana.profile/1` (docs/profile-schema.md); traceana/roofline/device_profile.py
reads it back for `traceana report --profile`.
"""

from __future__ import annotations

SCHEMA = "traceana.profile/1"
