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


def launch(ts, corr, ext=None, name="cudaLaunchKernel", tid=1, dur=2, extra=None):
    args = {"correlation": corr}
    if ext is not None:
        args["External id"] = ext
    if extra:
        args.update(extra)
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


# FBGEMM's table-batched embedding lookup as hta/control.json.gz records it (29 arguments)
TBE_FWD = "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function"
TBE_BWD = "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>"
TBE_TYPES = ("float", "float", "float", "float", "int", "long", "int", "Scalar", "Scalar", "long", "Scalar",
             "long", "long", "Scalar", "float", "", "int", "Scalar", "Scalar", "Scalar", "float", "float", "int",
             "long", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar")


def tbe_lookup_args(weights=96000, tables=1, lookups=61072, bags=8192, rows=1000, weighted=True):
    """(dims, types) of a lookup: W weights of T tables, L indices, bags + 1 offsets, R momentum rows."""
    dims = ((0,), (weights,), (0,), (0, 0), (tables,), (tables,), (tables + 1,), (), (), (tables + 1,), (),
            (lookups,), (bags + 1,), (), (lookups,) if weighted else (), (), (0,), (), (), (), (rows,), (0,),
            (tables,), (tables,), (), (), (), (), ())
    types = TBE_TYPES if weighted else TBE_TYPES[:14] + ("",) + TBE_TYPES[15:]
    return dims, types


def annotation(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {}}


def capture_trace(ops, t0=100.0, begin="hipStreamBeginCapture", end="hipStreamEndCapture",
                  launch_name="hipLaunchKernel", named=True):
    """A graph capture as roctracer records it: BeginCapture, then per (op name, dims, types,
    kernel name) one op with the launch of its kernel inside (the launch names the kernel in its
    `kernel` arg when `named`; CUPTI's launches do not), then EndCapture. Captured kernels do not
    run: no kernel events."""
    events = [launch(t0, 1, name=begin)]
    t = t0 + 10
    for i, (name, dims, types, kname) in enumerate(ops):
        events.append(op(name, t, 8, 1000 + i, dims=dims, types=types))
        events.append(launch(t + 2, 10 + i, ext=1000 + i, name=launch_name,
                             extra={"kernel": kname} if named else None))
        t += 10
    events.append(launch(t, 9, name=end))
    return events


def graph_replay(kernels, corr, t0, name="hipGraphLaunch", gap=1.0):
    """One graph launch and the kernels it ran ((kernel name, µs) each, back to back)."""
    events = [launch(t0, corr, name=name, dur=5)]
    t = t0 + 10
    for kname, dur in kernels:
        events.append(kernel(kname, t, dur, corr))
        t += dur + gap
    return events


#: Op names of many_signatures(), with the kernel each launches.
WIDE_OPS = (("aten::mm", "ampere_sgemm_128x64_nn"), ("aten::add", "vectorized_elementwise_kernel"),
            ("aten::mul", "vectorized_elementwise_kernel"), ("aten::sum", "reduce_kernel"),
            ("aten::copy_", "elementwise_kernel"))


def many_signatures(n, hostile_every=0):
    """A trace whose ops table has n rows: n one-call ops, each with shapes no other op has.

    Op i is WIDE_OPS[i % 5] on a (rows, cols) input that grows with i (aten::mm gets
    [[r, c], [c, 64]]), launching one kernel of 1 + (i % 97) µs on stream 7; ops start
    100 µs apart (no two kernels overlap). With hostile_every > 0, every hostile_every-th op's name carries markup
    ("</script><img src=x onerror=alert(1)>") to check that the lazy table escapes what it draws.
    """
    events = []
    for i in range(n):
        name, kname = WIDE_OPS[i % len(WIDE_OPS)]
        if hostile_every and i % hostile_every == 0:
            name = f"{name}</script><img src=x onerror=alert({i})>"
        r, c = 16 + i // 7, 32 + (i % 7) * 8
        dims = [[r, c], [c, 64]] if name.startswith("aten::mm") else [[r, c], [r, c]]
        ts = 100 + 100 * i
        events.append(op(name, ts, 10, ext=i + 1, dims=dims))
        events.append(launch(ts + 2, corr=i + 1, ext=i + 1))
        events.append(kernel(kname, ts + 5, 1 + (i % 97), corr=i + 1, ext=i + 1))
    return trace(events)
