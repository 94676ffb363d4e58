"""Build small synthetic Kineto traces for tests (every field written out explicitly)."""

from __future__ import annotations

import json


def op(name, ts, dur, ext, dims=None, types=None, strides=None, concrete=None, tid=1, cat="cpu_op"):
    args = {"External id": ext}
    if dims is not None:
        args["Input Dims"] = dims
        args["Input type"] = types if types is not None else ["float"] * len(dims)
    if strides is not None:
        args["Input Strides"] = strides
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(ts, corr, ext=None, name="cudaLaunchKernel", tid=1, dur=2):
    args = {"correlation": corr}
    if ext is not None:
        args["External id"] = ext
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def kernel(name, ts, dur, corr, ext=None, stream=7, device=0, cat="kernel", extra=None):
    args = {"device": device, "stream": stream, "correlation": corr}
    if ext is not None:
        args["External id"] = ext
    if extra:
        args.update(extra)
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": args}


T4 = {"id": 0, "name": "Tesla T4", "computeMajor": 7, "computeMinor": 5, "numSms": 40,
      "totalGlobalMem": 15843721216, "warpSize": 32}


def trace(events, props=(T4,), **top):
    doc = {"schemaVersion": 1, "deviceProperties": list(props), "traceEvents": list(events)}
    doc.update(top)
    return doc


def write(tmp_path, doc, name="t.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)
