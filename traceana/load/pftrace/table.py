"""The decoded Perfetto table -> Trace, by the JSON loader's rules, column-wise.

The decoder (pydecode.py / _decode.c) leaves a table: one row per slice, instant and counter sample
(`ev_*`), one per top-level debug annotation (`ar_*`: the event's arg, typed), one per flow id
(`fl_*`), one per track descriptor (`tr_*`), one per builtin clock of each clock snapshot (`sn_*`).
This module gives the rows the meaning a Chrome JSON event has (`cat` -> role, `pid`/`tid` from the
track, `ts`/`dur` in µs, `args`) and fills the columns load.columns.assemble takes, exactly as
load.columns.build_trace fills them from the same events written as JSON: the same name and thread
codes in the same order, the same conversions of each arg (an id given as text is read as the JSON
loader reads it, a value of a type the JSON schema refuses is missing).

What JSON says and Perfetto says differently:
- a slice is a SLICE_BEGIN closed by its track's next SLICE_END (or a legacy complete event);
- the launch -> kernel link, when the `correlation` arg is absent, is TrackEvent.correlation_id or
  the id of the flow that reaches the GPU stream's slice (and starts at the launch);
- an event without a category is told from its track and args (infer.py);
- the document's other keys (deviceProperties, ...) are a ChromeEventBundle's metadata.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from traceana.load.columns import GPU_KIND, LEGACY_CATS, MEMORY_NAME, _ROLE, _blocks, _groups, _small_codes, assemble
from traceana.load.comm_args import comm_extra, comm_ids
from traceana.load.decode import _finite
from traceana.load.model import Trace
from traceana.load.pftrace import infer
from traceana.load.pftrace.args import _BAD, Args, document
from traceana.load.pftrace.track_events import OPEN, SLICE
from traceana.load.pftrace.values import STRING
from traceana.load.pftrace.tracks import Tracks
from traceana.load.pftrace.wire import BOOTTIME
from traceana.arrays import distinct

DTYPES = {"ev_kind": np.int8, "ev_track": np.uint64, "ev_name": np.int32, "ev_cat": np.int32, "ev_ts": np.int64,
          "ev_end": np.int64, "ev_clock": np.uint8, "ev_value": np.float64, "ev_corr": np.int64, "ev_pkt": np.int64,
          "ar_event": np.int32, "ar_key": np.int32, "ar_type": np.int8, "ar_int": np.int64, "ar_dbl": np.float64,
          "ar_str": np.int32, "fl_event": np.int32, "fl_id": np.uint64, "fl_term": np.int8, "tr_uuid": np.uint64,
          "tr_parent": np.uint64, "tr_kind": np.int8, "tr_pid": np.int64, "tr_tid": np.int64, "tr_name": np.int32,
          "tr_labels": np.int32, "sn_id": np.int32, "sn_clock": np.uint32, "sn_ns": np.int64}
_I63 = (1 << 63) - 1
_EMPTY = b""
_COMM_KEYS = {"in_msg_nelems": "In msg nelems", "out_msg_nelems": "Out msg nelems", "group_size": "Group size",
              "comm_dtype": "dtype", "collective_name": "Collective name", "pg_ranks": "Process Group Ranks",
              # which call of which group (load.comm_args.comm_ids: the cross-rank matching's keys)
              "comm_seq": "Seq", "pg_name": "Process Group Name", "in_split": "In split size",
              "out_split": "Out split size", "src_rank": "Src Rank", "dst_rank": "Dst Rank"}
#: the args the Trace is built from (the decoder keeps only these; the rest are not read)
WANTED = frozenset(k.encode() for k in (
    "External id", "external id", "correlation", "Input Dims", "Input type", "Input Strides", "Concrete Inputs",
    "device", "stream", "bytes", "grid", "block", "kernel_flop", "kernel_num_gb", "kernel", "graph node id",
    "Call stack", "Module Hierarchy", "Sequence number", "Python id", "Python parent id", "Python module id",
    "Addr", "Bytes", "Total Allocated", "Total Reserved", "Device Type", "Device Id", *_COMM_KEYS.values(),
    *infer.WANTED))


def columns(result: dict) -> dict:
    """The decoder's result with its columns as numpy arrays."""
    out = dict(result)
    for k, t in DTYPES.items():
        out[k] = np.frombuffer(result[k], dtype=t)
    return out


# ------------------------------------------------------------------ times


def us(ns: np.ndarray) -> np.ndarray:
    """int64 ns -> float64 µs, each the double nearest to ns / 1000 (as the JSON loader reads the
    decimal µs text a profiler writes, e.g. 1419116104994.671): exact division where ns fits a double
    (|ns| < 2**53), else the nearest of three neighbouring candidates, found with exact arithmetic."""
    ns = np.asarray(ns, dtype=np.int64)
    out = ns.astype(np.float64) / 1000.0
    big = np.abs(ns) >= (1 << 53)
    if big.any():
        n = ns[big]
        q, r = np.divmod(n, 1000)  # floor: 0 <= r < 1000
        qf = q.astype(np.float64)  # exact: |q| < 2**54 / 1000
        c0 = qf + r / 1000.0
        cands = np.stack((np.nextafter(c0, -np.inf), c0, np.nextafter(c0, np.inf)))
        err = np.abs((cands - qf) * 1000.0 - r)  # exact: (c - q) is a few ulps of a double near q
        best = err.min(axis=0)
        tie = (err == best).sum(axis=0) > 1
        pick = err.argmin(axis=0)
        if tie.any():  # exactly half way: the even one, as IEEE rounding does
            even = (cands.view(np.int64) & 1) == 0
            pick = np.where(tie, np.argmax((err == best) & even, axis=0), pick)
        out[big] = cands[pick, np.arange(len(n))]
    return out


def _clock_offsets(t: dict, warnings: list[str]) -> np.ndarray:
    """ns to add to each row's time to bring it to the trace's clock (boot time, or the one most
    rows use), from the clock snapshots that pair the clocks."""
    clock = t["ev_clock"]
    used = distinct(clock)
    if len(used) <= 1:
        return np.zeros(len(clock), np.int64)
    target = BOOTTIME if BOOTTIME in used else int(np.bincount(clock).argmax())
    off = np.zeros(len(clock), np.int64)
    sid, sclock, sns = t["sn_id"], t["sn_clock"], t["sn_ns"]
    for c in used.tolist():
        if c == target:
            continue
        pair = None
        for s in distinct(sid).tolist():
            m = sid == s
            have = dict(zip(sclock[m].tolist(), sns[m].tolist()))
            if c in have and target in have:
                pair = have[target] - have[c]
                break
        if pair is None:
            warnings.append(f"events on clock {c} cannot be placed on clock {target} (no clock snapshot pairs "
                            "them); their times were read as they are")
        else:
            off[clock == c] = pair
    return off


# ------------------------------------------------------------------ the Trace


def _first_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys in order of first appearance, each key's code: its place in that order)."""
    if not len(keys):
        return keys, np.zeros(0, np.int64)
    u, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(u), np.int64)
    rank[order] = np.arange(len(u))
    return u[order], rank[inv]


def build(path: str, result: dict) -> Trace:
    """The Trace of a decoded Perfetto trace (see the module doc)."""
    t = columns(result)
    strings: list[str] = list(result["strings"])
    warnings: list[str] = []
    kind = t["ev_kind"]
    n = len(kind)
    args = Args(t, strings)
    doc = document(args, warnings)
    tracks = Tracks(t, strings)
    track = tracks.index(t["ev_track"])  # each row's track, as an index into tracks' tables
    gpu_track = tracks.gpu[track]

    # the launch -> kernel links the flows draw: a flow that reaches a GPU stream's row (its launch may
    # be outside the trace), and the CPU rows on such a flow
    flow_corr = np.full(n, -1, np.int64)
    fe, fid = t["fl_event"].astype(np.int64), t["fl_id"]
    if len(fe):
        u, inv = np.unique(fid, return_inverse=True)
        on_gpu = gpu_track[fe]
        link = (np.bincount(inv, weights=on_gpu, minlength=len(u)) > 0)[inv]
        flow_corr[fe[link]] = (fid[link] & np.uint64(_I63)).astype(np.int64)
    corr_field = np.where(t["ev_corr"] >= 0, t["ev_corr"], flow_corr)

    # categories, and what an event without one is
    cat_code = t["ev_cat"]
    uniq_cats = distinct(cat_code)
    cat_name = {int(c): (strings[c] if c >= 0 else None) for c in uniq_cats.tolist()}
    role = np.full(n, -1, np.int8)
    gkind = np.zeros(n, np.int8)
    legacy = np.zeros(n, bool)
    for c, name in cat_name.items():
        r = _ROLE.get(name) if name is not None else None
        m = cat_code == c
        if r is not None:
            role[m] = r
            if r == 0:
                gkind[m] = GPU_KIND[name]
        legacy[m] = name in LEGACY_CATS
    slices = kind == SLICE
    role[~slices] = -1
    nocat = slices & (cat_code < 0)
    if nocat.any():
        r, k = infer.roles(np.flatnonzero(nocat), strings, t["ev_name"], gpu_track, tracks.has_pid[track], args,
                           corr_field)
        role[nocat] = r
        gkind[nocat] = k

    # times
    off = _clock_offsets(t, warnings)
    ts_ns = t["ev_ts"] + off
    ts = us(ts_ns)
    dur = us(t["ev_end"] - t["ev_ts"])
    bad = (dur < 0) | (np.abs(ts) > 1e17) | (dur > 1e13)
    timed = slices & (role >= 0)
    bad_time = int((timed & bad).sum())
    keep = timed & ~bad
    main = keep & (role <= 3)  # ops, launches, GPU events, annotations
    pyr = np.flatnonzero(keep & (role == 4))
    names_col = t["ev_name"]
    is_memory = (kind == 1) & np.isin(names_col, [i for i, s in enumerate(strings) if s == MEMORY_NAME])
    mem_bad = is_memory & (np.abs(ts) > 1e17)
    bad_time += int(mem_bad.sum())
    mer = np.flatnonzero(is_memory & ~mem_bad)

    rows = np.flatnonzero(main)
    end = ts + dur
    counts = {"n_events": n, "no_ph": 0, "bad_time": bad_time, "legacy": int((main & legacy).sum()),
              "t_min": float(ts[rows].min()) if len(rows) else math.inf,
              "t_max": float(end[rows].max()) if len(rows) else -math.inf}

    # names: role 0-3 rows in order, each launch's kernel arg right after its own name; then Python calls'
    ext_strings = strings + [""]
    blank = len(strings)
    name_key = np.where(names_col >= 0, names_col, blank).astype(np.int64)
    canon = _canonical(ext_strings)
    name_key = canon[name_key]
    launch_rows = rows[role[rows] == 2]
    kpos, kj = args._where("kernel", launch_rows)
    ktyp = t["ar_type"][kj]
    kstr = t["ar_str"][kj]
    ok = (ktyp == STRING) & np.array([bool(strings[s]) if s >= 0 else False for s in kstr.tolist()], bool)
    kernel_rows, kernel_key = launch_rows[kpos[ok]], canon[kstr[ok].astype(np.int64)]
    seq_pos = np.concatenate((rows * 2, kernel_rows * 2 + 1, (n * 2 + np.arange(len(pyr))) if len(pyr) else
                              np.zeros(0, np.int64)))
    seq_key = np.concatenate((name_key[rows], kernel_key, name_key[pyr]))
    o = np.argsort(seq_pos, kind="stable")
    order_keys, codes = _first_codes(seq_key[o])
    code_of_pos = np.empty(len(seq_pos), np.int64)
    code_of_pos[o] = codes
    names = [ext_strings[k] for k in order_keys.tolist()]
    row_name = np.full(n, -1, np.int64)
    row_name[rows] = code_of_pos[:len(rows)]
    kernel_code = np.full(n, -1, np.int64)
    kernel_code[kernel_rows] = code_of_pos[len(rows):len(rows) + len(kernel_rows)]
    row_name[pyr] = code_of_pos[len(rows) + len(kernel_rows):]

    # threads: rows of roles 1-3 in order, then Python calls', then [memory] events'
    thread_key = tracks.thread_key[track]
    trows = rows[role[rows] != 0]
    tseq = np.concatenate((trows, pyr, mer))
    tkeys, tcodes = _first_codes(thread_key[tseq])
    threads = [tracks.thread_keys[k] for k in tkeys.tolist()]
    row_thread = np.full(n, -1, np.int64)
    row_thread[tseq] = tcodes

    cols = _role_columns(t, args, role, gkind, rows, pyr, mer, row_name, row_thread, kernel_code, ts, dur, end,
                         tracks, track, corr_field, strings)
    comm, comm_id = cols.pop("comm"), cols.pop("comm_ids")
    _drop_warnings(result, int((kind == OPEN).sum()), warnings)
    trace = assemble(path, doc, warnings, names, threads, cols, counts)
    trace.ops.extra.update(comm)
    trace.ops.comm_ids.update(comm_id)
    return trace


def _canonical(strings: list[str]) -> np.ndarray:
    """Per string code, the first code of an equal string (codes differ for the same text only when
    bytes that are not UTF-8 were read as U+FFFD)."""
    seen: dict[str, int] = {}
    return np.array([seen.setdefault(s, i) for i, s in enumerate(strings)], np.int64)


def _drop_warnings(result: dict, open_slices: int, warnings: list[str]) -> None:
    if open_slices:
        warnings.append(f"{open_slices} slices began but never ended (no SLICE_END on their track); they were skipped")
    if result["unmatched_end"]:
        warnings.append(f"{result['unmatched_end']} SLICE_END events had no open slice on their track; they were "
                        "ignored")
    if result["dropped"]:
        warnings.append(f"{result['dropped']} events came before their sequence's interned names were set "
                        "(SEQ_NEEDS_INCREMENTAL_STATE); they were skipped")
    if result["unknown_clock"]:
        warnings.append(f"{result['unknown_clock']} events are timed by a clock the trace never defines; they were "
                        "skipped")


def _role_columns(t, args: Args, role, gkind, rows, pyr, mer, row_name, row_thread, kernel_code, ts, dur, end,
                  tracks: Tracks, track, corr_field, strings) -> dict:
    i32 = np.int32
    r = role[rows]
    gp = rows[r == 0]
    la = rows[r == 2]
    op1 = rows[r == 1]
    is_step = np.isin(t["ev_name"][op1], [i for i, x in enumerate(strings) if x.startswith("ProfilerStep#")])
    op = op1[~is_step]
    an = np.sort(np.concatenate((rows[r == 3], op1[is_step])))
    cols: dict = {}

    # GPU events
    dev, _ = args.ids("device", gp)
    stream, have_stream = args.ids("stream", gp)
    tid = tracks.tid_int[track[gp]]
    stream = np.where(have_stream, stream, tid)
    corr, have_corr = args.ids("correlation", gp)
    corr = np.where(have_corr, corr, corr_field[gp])
    ext, _ = args.ids("External id", gp, fallback="external id")
    blocks, groups = _grid_columns(args, gp)
    cols.update({"gp_name": row_name[gp].astype(i32), "gp_kind": gkind[gp].astype(np.int8), "gp_device": dev,
                 "gp_pid": tracks.pid_int[track[gp]], "gp_stream": stream, "gp_ts": ts[gp], "gp_dur": dur[gp],
                 "gp_corr": corr, "gp_ext": ext, "gp_bytes": args.floats("bytes", gp),
                 "gp_gnode": args.ids("graph node id", gp)[0], "gp_blocks": blocks,
                 "gp_groups": groups, "gp_ord": gp.astype(np.int64)})

    # cpu ops
    comm: dict[int, tuple] = {}
    comm_id: dict[int, tuple] = {}
    cols.update({"op_name": row_name[op].astype(i32), "op_thread": row_thread[op].astype(i32), "op_ts": ts[op],
                 "op_end": end[op], "op_ext": args.ids("External id", op, fallback="external id")[0],
                 "op_seq": args.ids("Sequence number", op)[0],
                 "op_dims": args.raws("Input Dims", op), "op_types": args.raws("Input type", op),
                 "op_strides": args.raws("Input Strides", op), "op_concrete": args.raws("Concrete Inputs", op),
                 "op_kflop": args.floats("kernel_flop", op), "op_kgb": args.floats("kernel_num_gb", op),
                 "op_ord": op.astype(np.int64), "op_stack": args.texts("Call stack", op),
                 "op_hierarchy": args.texts("Module Hierarchy", op)})
    comm_rows = np.flatnonzero(np.isin(t["ev_name"][op], [i for i, s in enumerate(strings) if s == "record_param_comms"]))
    if len(comm_rows):
        with_args = np.isin(op[comm_rows], t["ar_event"])
        sel = op[comm_rows[with_args]]
        fields = {attr: args.values(key, sel) for attr, key in _COMM_KEYS.items()}
        for i, p in enumerate(comm_rows[with_args].tolist()):
            ns = SimpleNamespace(**{k: (None if v[i] is _BAD else v[i]) for k, v in fields.items()})
            ex, ids = comm_extra(ns), comm_ids(ns)
            if ex:
                comm[p] = ex
            if ids:
                comm_id[p] = ids
    cols["comm"] = comm
    cols["comm_ids"] = comm_id

    # launches
    lcorr, lhave = args.ids("correlation", la)
    cols.update({"la_name": row_name[la].astype(i32), "la_thread": row_thread[la].astype(i32), "la_ts": ts[la],
                 "la_end": end[la], "la_corr": np.where(lhave, lcorr, corr_field[la]),
                 "la_ext": args.ids("External id", la, fallback="external id")[0],
                 "la_kernel": kernel_code[la].astype(i32)})
    # annotations
    cols.update({"an_name": row_name[an].astype(i32), "an_thread": row_thread[an].astype(i32), "an_ts": ts[an],
                 "an_end": end[an]})
    # Python calls
    cols.update({"py_name": row_name[pyr].astype(i32), "py_thread": row_thread[pyr].astype(i32), "py_ts": ts[pyr],
                 "py_end": end[pyr], "py_id": args.ids("Python id", pyr, strict=False)[0],
                 "py_parent": args.ids("Python parent id", pyr, strict=False)[0],
                 "py_module": args.ids("Python module id", pyr, strict=False)[0]})
    # [memory] events
    cols.update({"me_ts": ts[mer], "me_thread": row_thread[mer].astype(i32),
                 "me_addr": args.ids("Addr", mer, 0, strict=False)[0],
                 "me_nbytes": args.ids("Bytes", mer, 0, strict=False)[0],
                 "me_alloc": args.floats("Total Allocated", mer, strict=False),
                 "me_reserved": args.floats("Total Reserved", mer, strict=False),
                 "me_dtype": _small_codes(args.ids("Device Type", mer, strict=False)[0]),
                 "me_device": args.ids("Device Id", mer, strict=False)[0]})
    return cols




def _grid_columns(args: Args, gp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GPU events' thread blocks: the grid's product, and grid / block per dimension (work-item grids),
    as the JSON loader computes them, once per distinct (grid, block)."""
    blocks = np.full(len(gp), math.nan)
    groups = np.full(len(gp), math.nan)
    gpos, ginv, gvals = args.keys("grid", gp)
    if not len(gpos):
        return blocks, groups
    bpos, binv, bvals = args.keys("block", gp)
    bcode = np.full(len(gp), -1, np.int64)
    bcode[bpos] = binv
    pair = np.stack((ginv, bcode[gpos]))
    u, inv = np.unique(pair, axis=1, return_inverse=True)
    bl, gr = np.full(u.shape[1], math.nan), np.full(u.shape[1], math.nan)
    for i, (g, b) in enumerate(zip(u[0].tolist(), u[1].tolist())):
        grid = gvals[g]
        if grid is None or grid is _BAD:
            continue
        block = bvals[b] if b >= 0 else None
        x, y = _finite(_blocks(grid)), _finite(_groups(grid, None if block is _BAD else block))
        bl[i] = math.nan if x is None else x
        gr[i] = math.nan if y is None else y
    inv = inv.reshape(-1)
    blocks[gpos] = bl[inv]
    groups[gpos] = gr[inv]
    return blocks, groups
