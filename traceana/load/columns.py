"""Events -> columns: split decoded events by role (cpu ops, launches, GPU events, annotations)
into numpy arrays and name tables, chunk by chunk (the collective args of record_param_comms:
comm_args.py)."""

from __future__ import annotations

import math
from math import prod
from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np

from traceana.errors import BadInput
from traceana.load.model import Annotations, CpuOps, GpuEvents, Launches, MemoryEvents, PyFrames, Trace
from traceana.load.comm_args import comm_extra, comm_ids
from traceana.load.schema import Event, TraceDoc
from traceana.load.decode import BIDI_WARNING, _as_int, _clean_strings, _finite, _sane_props, clean_text

OP_CATS = frozenset({"cpu_op", "Operator", "operator"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
GPU_KIND = {"kernel": 0, "Kernel": 0, "gpu_memcpy": 1, "Memcpy": 1, "gpu_memset": 2, "Memset": 2}
ANNOTATION_CATS = frozenset({"user_annotation"})
LEGACY_CATS = frozenset({"Operator", "Runtime", "Kernel"})
PYTHON_CAT = "python_function"  # with_stack=True: one X event per Python call
MEMORY_NAME = "[memory]"  # profile_memory=True: one "i" (instant) event per allocation / free, any cat

_ROLE = {**{c: 1 for c in OP_CATS}, **{c: 2 for c in LAUNCH_CATS}, **{c: 3 for c in ANNOTATION_CATS},
         **{c: 0 for c in GPU_KIND}, PYTHON_CAT: 4}
_NAN = math.nan
_BIG = 1 << 1000  # ints below this convert to float without OverflowError


def build_trace(path: str, doc: TraceDoc, warnings: list[str], chunks: Iterable[list[Event]] | None = None) -> Trace:
    """Split the decoded events into columns by role. The loop is the hot path of a load (one
    pass over every event): it does only what must be done per event (role, time checks, name
    and thread codes) and appends raw id / number fields, which `_ints` / `_floats` convert
    column-wise afterwards, exactly as `_as_int` / `_finite` would one by one. `chunks`: the
    events as successive lists, instead of doc.traceEvents (the chunked decode)."""
    names: dict[str, int] = {}
    threads: dict[tuple, int] = {}
    # times go straight into C doubles (no float object per value); ids stay raw (see _ints)
    op = {k: array("d") if k in ("ts", "end") else [] for k in
          ("name", "thread", "ts", "end", "ext", "seq", "dims", "types", "strides", "concrete", "kflop", "kgb",
           "ord")}
    la = {k: array("d") if k in ("ts", "end") else [] for k in ("name", "thread", "ts", "end", "corr", "ext", "kernel")}
    gp = {k: array("d") if k in ("ts", "dur") else [] for k in
          ("name", "kind", "device", "pid", "stream", "ts", "dur", "corr", "ext", "bytes", "blocks", "groups",
           "gnode", "ord")}
    an = {k: array("d") if k in ("ts", "end") else [] for k in ("name", "thread", "ts", "end")}
    comm: dict[int, tuple] = {}  # op row -> its collective args (record_param_comms)
    comm_id: dict[int, tuple] = {}  # op row -> which call of which group it is (record_param_comms)
    # python_function and [memory] events: their names and threads are coded after the loop (after
    # every other event's), so the codes of ops, launches, kernels and annotations stay what they
    # are in a trace without them
    py = {k: array("d") if k in ("ts", "end") else [] for k in ("name", "thread", "ts", "end", "id", "parent",
                                                              "module")}
    me = {k: array("d") if k == "ts" else [] for k in ("thread", "ts", "addr", "bytes", "alloc", "reserved",
                                                      "dtype", "device")}
    stacks: dict[int, Any] = {}
    hierarchy: dict[int, Any] = {}
    # shape args repeat (ops repeat): one bytes object per distinct value, not one per op
    shapes: dict[bytes, bytes] = {}
    same = shapes.setdefault
    legacy = 0
    bad_time = 0
    no_ph = 0
    t_min = math.inf
    t_max = -math.inf
    role_of, kind_of, legacy_cats = _ROLE.get, GPU_KIND.get, LEGACY_CATS
    names_get, threads_get = names.get, threads.get
    g_name, g_kind, g_dev, g_pid, g_stream = (gp[k].append for k in ("name", "kind", "device", "pid", "stream"))
    g_ts, g_dur, g_corr, g_ext, g_bytes, g_blocks, g_groups, g_node = (
        gp[k].append for k in ("ts", "dur", "corr", "ext", "bytes", "blocks", "groups", "gnode"))
    o_name, o_thread, o_ts, o_end, o_ext, o_seq = (
        op[k].append for k in ("name", "thread", "ts", "end", "ext", "seq"))
    o_dims, o_types, o_strides, o_conc, o_kflop, o_kgb, o_ord = (
        op[k].append for k in ("dims", "types", "strides", "concrete", "kflop", "kgb", "ord"))
    g_ord = gp["ord"].append
    l_name, l_thread, l_ts, l_end, l_corr, l_ext, l_kernel = (
        la[k].append for k in ("name", "thread", "ts", "end", "corr", "ext", "kernel"))
    a_name, a_thread, a_ts, a_end = (an[k].append for k in ("name", "thread", "ts", "end"))
    p_name, p_thread, p_ts, p_end, p_id, p_parent, p_module = (
        py[k].append for k in ("name", "thread", "ts", "end", "id", "parent", "module"))
    m_thread, m_ts, m_addr, m_bytes, m_alloc, m_reserved, m_dtype, m_device = (
        me[k].append for k in ("thread", "ts", "addr", "bytes", "alloc", "reserved", "dtype", "device"))
    finite = _finite
    empty = b""

    n_events = 0
    for events in (chunks if chunks is not None else (doc.traceEvents,)):
        # k: the event's place in traceEvents (Trace ops / gpu .ordinal: traceana.annotate finds it again)
        for k, ev in enumerate(events, n_events):
            if ev.ph != "X":
                if ev.ph == "i" and ev.name == MEMORY_NAME:
                    ts = ev.ts
                    if type(ts) is not float:
                        ts = float(ts) if type(ts) is int and -_BIG < ts < _BIG else finite(ts)
                    if ts is None or ts != ts or abs(ts) > 1e17:
                        bad_time += 1
                        continue
                    m_ts(ts)
                    m_thread((ev.pid, ev.tid))
                    a = ev.args
                    if a is None:
                        m_addr(None)
                        m_bytes(None)
                        m_alloc(None)
                        m_reserved(None)
                        m_dtype(None)
                        m_device(None)
                    else:
                        m_addr(a.addr)
                        m_bytes(a.mem_bytes)
                        m_alloc(a.total_allocated)
                        m_reserved(a.total_reserved)
                        m_dtype(a.device_type)
                        m_device(a.device_id)
                else:
                    no_ph += not ev.ph
                continue
            cat = ev.cat
            role = role_of(cat)  # None for a missing or uninteresting category
            if role is None:
                continue
            ts = ev.ts
            if type(ts) is not float:  # ints (older traces) convert exactly as _finite would
                ts = float(ts) if type(ts) is int and -_BIG < ts < _BIG else finite(ts)
            dur = ev.dur
            if type(dur) is not float:
                dur = float(dur) if type(dur) is int and -_BIG < dur < _BIG else finite(dur)
            # NaN fails every comparison (ts != ts); +-inf fails the magnitude checks
            if ts is None or dur is None or ts != ts or dur != dur or dur < 0 or abs(ts) > 1e17 or dur > 1e13:
                bad_time += 1
                continue
            if role == 4:  # a Python call: not an op, nor part of the trace's span
                p_name(ev.name)
                p_thread((ev.pid, ev.tid))
                p_ts(ts)
                p_end(ts + dur)
                a = ev.args
                if a is None:
                    p_id(None)
                    p_parent(None)
                    p_module(None)
                else:
                    p_id(a.py_id)
                    p_parent(a.py_parent)
                    p_module(a.py_module)
                continue
            if cat in legacy_cats:
                legacy += 1
            name = ev.name
            if type(name) is not str:
                name = name if isinstance(name, str) else ""
            code = names_get(name)
            if code is None:
                code = names[name] = len(names)
            end = ts + dur
            if ts < t_min:
                t_min = ts
            if end > t_max:
                t_max = end
            a = ev.args
            if role == 0:
                g_name(code)
                g_kind(kind_of(cat))
                g_ts(ts)
                g_dur(dur)
                g_ord(k)
                g_pid(ev.pid)
                if a is None:
                    g_dev(None)
                    g_stream(ev.tid)
                    g_corr(None)
                    g_ext(None)
                    g_bytes(None)
                    g_blocks(None)
                    g_groups(None)
                    g_node(None)
                else:
                    g_dev(a.device)
                    s = a.stream
                    g_stream(s if s is not None else ev.tid)
                    g_corr(a.correlation)
                    x = a.external_id
                    g_ext(x if x is not None else a.external_id_2021)
                    g_bytes(a.bytes)
                    grid = a.grid
                    if grid is None:
                        g_blocks(None)
                        g_groups(None)
                    else:
                        g_blocks(_blocks(grid))
                        g_groups(_groups(grid, a.block))
                    g_node(a.graph_node_id)
                continue
            tkey = (ev.pid, ev.tid)
            thread = threads_get(tkey)
            if thread is None:
                thread = threads[tkey] = len(threads)
            if role == 1:
                if name.startswith("ProfilerStep#"):
                    a_name(code)
                    a_thread(thread)
                    a_ts(ts)
                    a_end(end)
                    continue
                o_name(code)
                o_thread(thread)
                o_ts(ts)
                o_end(end)
                o_ord(k)
                if a is None:
                    o_ext(None)
                    o_seq(None)
                    o_dims(empty)
                    o_types(empty)
                    o_strides(empty)
                    o_conc(empty)
                    o_kflop(None)
                    o_kgb(None)
                else:
                    if name == "record_param_comms":  # the collective's args, from this very event
                        ex, ids = comm_extra(a), comm_ids(a)
                        if ex:
                            comm[len(op["name"]) - 1] = ex
                        if ids:
                            comm_id[len(op["name"]) - 1] = ids
                    x = a.external_id
                    o_ext(x if x is not None else a.external_id_2021)
                    o_seq(a.seq)
                    x = a.call_stack
                    if x:  # ("" when not recorded: most ops of a with_modules trace)
                        stacks[len(op["ts"]) - 1] = x
                    x = a.module_hierarchy
                    if x:
                        hierarchy[len(op["ts"]) - 1] = x
                    b = bytes(a.input_dims)
                    o_dims(same(b, b))
                    b = bytes(a.input_types)
                    o_types(same(b, b))
                    b = bytes(a.input_strides)
                    o_strides(same(b, b))
                    b = bytes(a.concrete)
                    o_conc(same(b, b))
                    o_kflop(a.kernel_flop)
                    o_kgb(a.kernel_num_gb)
            elif role == 2:
                l_name(code)
                l_thread(thread)
                l_ts(ts)
                l_end(end)
                if a is None:
                    l_corr(None)
                    l_ext(None)
                    l_kernel(-1)
                else:
                    l_corr(a.correlation)
                    x = a.external_id
                    l_ext(x if x is not None else a.external_id_2021)
                    k = a.kernel
                    if type(k) is str and k:
                        kc = names_get(k)
                        if kc is None:
                            kc = names[k] = len(names)
                        l_kernel(kc)
                    else:
                        l_kernel(-1)
            else:
                a_name(code)
                a_thread(thread)
                a_ts(ts)
                a_end(end)
        n_events += len(events)
        events = None  # free this chunk before the next one is decoded

    i32, f64 = np.int32, np.float64
    cols = {"op_name": np.array(op["name"], i32), "op_thread": np.array(op["thread"], i32),
            "op_ts": np.array(op["ts"], f64), "op_end": np.array(op["end"], f64), "op_ext": _ints(op["ext"]),
            "op_seq": _ints(op["seq"]),
            "op_dims": op["dims"], "op_types": op["types"], "op_strides": op["strides"], "op_concrete": op["concrete"],
            "op_kflop": _floats(op["kflop"]), "op_kgb": _floats(op["kgb"]),
            "op_ord": np.array(op["ord"], np.int64),
            "la_name": np.array(la["name"], i32), "la_thread": np.array(la["thread"], i32),
            "la_ts": np.array(la["ts"], f64), "la_end": np.array(la["end"], f64), "la_corr": _ints(la["corr"]),
            "la_ext": _ints(la["ext"]), "la_kernel": np.array(la["kernel"], i32),
            "gp_name": np.array(gp["name"], i32), "gp_kind": np.array(gp["kind"], np.int8),
            "gp_device": _ints(gp["device"]), "gp_pid": _ints(gp["pid"]), "gp_stream": _ints(gp["stream"]),
            "gp_ts": np.array(gp["ts"], f64), "gp_dur": np.array(gp["dur"], f64), "gp_corr": _ints(gp["corr"]),
            "gp_ext": _ints(gp["ext"]), "gp_bytes": _floats(gp["bytes"]), "gp_gnode": _ints(gp["gnode"]),
            "gp_blocks": _floats(gp["blocks"]), "gp_groups": _floats(gp["groups"]),
            "gp_ord": np.array(gp["ord"], np.int64),
            "an_name": np.array(an["name"], i32), "an_thread": np.array(an["thread"], i32),
            "an_ts": np.array(an["ts"], f64), "an_end": np.array(an["end"], f64),
            "op_stack": stacks, "op_hierarchy": hierarchy}
    # the late codes: Python calls' names, then their threads, then the [memory] events' threads
    py_names = [n if type(n) is str else "" for n in py["name"]]
    cols["py_name"] = np.array([names.setdefault(n, len(names)) for n in py_names], i32)
    cols["py_thread"] = np.array([threads.setdefault(k, len(threads)) for k in py["thread"]], i32)
    cols["me_thread"] = np.array([threads.setdefault(k, len(threads)) for k in me["thread"]], i32)
    cols.update({"py_ts": np.array(py["ts"], f64), "py_end": np.array(py["end"], f64), "py_id": _ints(py["id"]),
                 "py_parent": _ints(py["parent"]), "py_module": _ints(py["module"]),
                 "me_ts": np.array(me["ts"], f64), "me_addr": _ints(me["addr"], 0), "me_nbytes": _ints(me["bytes"], 0),
                 "me_alloc": _floats(me["alloc"]), "me_reserved": _floats(me["reserved"]),
                 "me_dtype": _int8s(me["dtype"]), "me_device": _ints(me["device"])})
    counts = {"n_events": n_events, "no_ph": no_ph, "bad_time": bad_time, "legacy": legacy,
              "t_min": t_min, "t_max": t_max}
    trace = assemble(path, doc, warnings, list(names), list(threads), cols, counts)
    trace.ops.extra.update(comm)
    trace.ops.comm_ids.update(comm_id)
    return trace


def assemble(path: str, doc: TraceDoc, warnings: list[str], names: list[str], threads: list[tuple],
             cols: dict[str, Any], counts: dict[str, Any]) -> Trace:
    """The Trace from its columns (numpy arrays by role, shape args as lists of bytes), its name
    and thread tables in code order and the load's counts; shared by build_trace and the C scan."""
    n_events, no_ph, bad_time = counts["n_events"], counts["no_ph"], counts["bad_time"]
    n_events -= _added_events(doc, n_events)
    t_min, t_max = counts["t_min"], counts["t_max"]
    if n_events and no_ph == n_events:
        raise BadInput(f"{path}: not a trace (none of its {no_ph} events has a 'ph' field)")
    if bad_time:
        warnings.append(f"{bad_time} events had missing, negative or non-finite ts/dur and were skipped")
    c = cols
    ops = CpuOps(c["op_name"], c["op_thread"], c["op_ts"], c["op_end"], c["op_ext"], c["op_dims"], c["op_types"],
                 c["op_strides"], c["op_concrete"], c["op_kflop"], c["op_kgb"],
                 call_stack=_texts(c["op_stack"]), module_hierarchy=_texts(c["op_hierarchy"]), seq=c["op_seq"],
                 ordinal=c["op_ord"])
    python = PyFrames(c["py_name"], c["py_thread"], c["py_ts"], c["py_end"], c["py_id"], c["py_parent"],
                      c["py_module"])
    memory = MemoryEvents(c["me_ts"], c["me_thread"], c["me_addr"], c["me_nbytes"], c["me_alloc"], c["me_reserved"],
                          c["me_dtype"], c["me_device"])
    launches = Launches(c["la_name"], c["la_thread"], c["la_ts"], c["la_end"], c["la_corr"], c["la_ext"],
                        c["la_kernel"])
    device = c["gp_device"]
    device = np.where(device >= 0, device, c["gp_pid"])
    blocks = _launch_blocks(names, c["la_name"], c["la_corr"], c["gp_corr"], c["gp_blocks"], c["gp_groups"])
    gpu = GpuEvents(c["gp_name"], c["gp_kind"], device, c["gp_stream"], c["gp_ts"], c["gp_dur"], c["gp_corr"],
                    c["gp_ext"], c["gp_bytes"], c["gp_gnode"], blocks, ordinal=c["gp_ord"])
    anns = Annotations(c["an_name"], c["an_thread"], c["an_ts"], c["an_end"])
    props = [p for p in (doc.deviceProperties or []) if isinstance(p, dict)]
    distributed = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None
    name_list, props, distributed, cleaned = _clean_strings(names, props, distributed)
    if cleaned:
        warnings.append(BIDI_WARNING)
    props = _sane_props(props, warnings)
    dims = c["op_dims"]
    record_shapes = bool(doc.record_shapes) or any(dims[i] for i in range(min(len(dims), 2000)))
    span = (t_max - t_min) if t_max > t_min else 0.0
    fmt = "kineto-2021" if counts["legacy"] else "kineto"
    # Trace.path is only displayed (the report's file name): no control or bidi characters.
    return Trace(path=clean_text(path), format=fmt, names=name_list, threads=[f"{p}/{t}" for p, t in threads],
                 ops=ops, launches=launches, gpu=gpu, annotations=anns, device_properties=props,
                 distributed=distributed,
                 record_shapes=record_shapes, n_events=n_events, span_us=span,
                 warnings=warnings, python=python, memory=memory, host=_host(doc))


def _host(doc: TraceDoc) -> str | None:
    """The trace's top-level host_name: a short printable name, else None."""
    h = doc.host_name
    return clean_text(h[:200]) if isinstance(h, str) and h.strip() else None


def _texts(values: dict[int, Any]) -> dict[int, str]:
    """op index -> text of an op's "Call stack" / "Module Hierarchy" arg: only non-empty strings,
    control and bidi characters replaced (each distinct text cleaned once: ops repeat stacks)."""
    out: dict[int, str] = {}
    seen: dict[str, str] = {}
    for i, v in values.items():
        if type(v) is str and v:
            t = seen.get(v)
            if t is None:
                t = seen[v] = clean_text(v)
            out[i] = t
    return out


def _added_events(doc: TraceDoc, n_events: int) -> int:
    """How many events `traceana annotate` added to this trace (its counter tracks), by the header it
    puts first in the document: they are counted out of the trace's events."""
    head = getattr(doc, "traceana", None)
    if not isinstance(head, dict) or not str(head.get("schema", "")).startswith("traceana.annotated/"):
        return 0
    n = head.get("counter_events")
    return n if type(n) is int and 0 <= n <= n_events else 0


_INT_TYPES = frozenset({int})
_INT_OR_NONE = frozenset({int, type(None)})
_FLOAT_TYPES = frozenset({int, float, type(None)})


def _ints(values: list, missing: int = -1) -> np.ndarray:
    """int64 column equal to [_as_int(v, missing) for v in values], vectorised when the values
    are ints (and None): the common case of every real trace."""
    types = set(map(type, values))
    if types <= _INT_OR_NONE:
        vals = values if types <= _INT_TYPES else [missing if v is None else v for v in values]
        try:
            return np.array(vals, dtype=np.int64)
        except OverflowError:  # an id beyond int64: _as_int makes it `missing`
            pass
    return np.array([_as_int(v, missing) for v in values], dtype=np.int64)


def _int8s(values: list) -> np.ndarray:
    """int8 column of small codes ([memory] "Device Type"): -1 when absent, not an int or out of range."""
    return _small_codes(_ints(values))


def _small_codes(codes: np.ndarray) -> np.ndarray:
    """The int64 codes as int8, -1 for those out of its range."""
    return np.where((codes < -128) | (codes > 127), -1, codes).astype(np.int8)


def _dims(v) -> list[int] | None:
    """A launch's grid or block dims: a list of 1-3 positive ints, else None."""
    if type(v) is not list or not 1 <= len(v) <= 3:
        return None
    for g in v:
        if type(g) is not int or g <= 0:
            return None
    return v


def _blocks(grid) -> int | None:
    """Thread blocks in a kernel's launch grid ([x, y, z] in CUDA and ROCm traces), None if odd."""
    dims = _dims(grid)
    return None if dims is None else prod(dims)


def _groups(grid, block) -> int | None:
    """Thread blocks of a grid recorded in work-items (threads): per dimension ceil(grid / block),
    multiplied (a partial block at the edge still runs). None unless both are 1-3 positive ints
    of the same length."""
    g, b = _dims(grid), _dims(block)
    if g is None or b is None or len(g) != len(b):
        return None
    return prod(-(-x // y) for x, y in zip(g, b))


# Launch APIs whose grid argument counts work-items (threads), not thread blocks: HIP's
# hipExtModuleLaunchKernel(f, globalWorkSizeX/Y/Z, localWorkSizeX/Y/Z, ...) and the older
# hipHccModuleLaunchKernel take the OpenCL-style global size, and Kineto (roctracer and
# rocprofiler-sdk alike) records those arguments as the kernel's `grid`. hipLaunchKernel,
# hipExtLaunchKernel and hipModuleLaunchKernel take blocks (numBlocks / gridDimX).
WORK_ITEM_GRID_APIS = ("hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel")


def _launch_blocks(names: list[str], la_name: np.ndarray, la_corr: np.ndarray, gp_corr: np.ndarray,
                   blocks: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """GpuEvents.blocks: the grid's product, except for kernels launched by an API whose grid is in
    work-items (matched to their launch by correlation id), which take grid / block per dimension."""
    codes = [names.index(n) for n in WORK_ITEM_GRID_APIS if n in names]
    if not codes or not len(gp_corr):
        return blocks
    corr = la_corr[np.isin(la_name, codes) & (la_corr >= 0)]
    if not len(corr):
        return blocks
    in_items = np.isin(gp_corr, corr) & (gp_corr >= 0)
    return np.where(in_items, groups, blocks) if in_items.any() else blocks


def _floats(values: list) -> np.ndarray:
    """float64 column equal to [_finite(v) or nan for v in values], vectorised for numbers / None."""
    if set(map(type, values)) <= _FLOAT_TYPES:
        try:
            arr = np.array(values, dtype=np.float64)  # None -> nan
        except OverflowError:
            pass
        else:
            arr[~np.isfinite(arr)] = _NAN
            return arr
    out = []
    for v in values:
        f = _finite(v)
        out.append(f if f is not None else _NAN)
    return np.array(out, dtype=np.float64)
