"""Which module and which line of the user's code issued each op, and in which phase it ran.

From what the trace recorded, best first:
  python_function events (with_stack=True, torch >= 2.0): the Python call tree, "nn.Module: Class_k" entries
      included. An op's innermost enclosing frame on its own thread (by time nesting) leads, through the
      frames' parent ids, to its chain of module entries (the module path) and to the innermost frame whose
      file is the user's own code (frames.is_user_file).
  "Call stack" op args (with_stack=True in older torch): the user frame only (the stack names functions,
      not modules).
  "Module Hierarchy" op args (TorchScript, with_modules=True): the module path, with attribute names.

Backward ops run on autograd's thread, where no Python frame of the model is recorded: each backward op
sits inside an "autograd::engine::evaluate_function: XBackward0" op whose "Sequence number" is that of
the forward op that created the node; the backward op takes that forward op's module and user frame.
Frames recorded inside the node itself (activation checkpointing recomputes the forward there; a custom
autograd.Function's backward is Python) come first.

All passes are numpy over the whole trace: no Python loop runs per frame or per op. Every walk up the
call tree is bounded: a frame that is its own ancestor (its parent ids loop back to it) is cut there,
with a warning; module paths are parent pointers (modules/paths.py), cut at paths.MAX_DEPTH modules.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from traceana.load.model import Trace
from traceana.modules.frames import Frame, call_stack_frames, hierarchy_path, module_name, parse_frame
from traceana.modules.paths import MAX_DEPTH, Paths
from traceana.modules.frame_tree import ancestor, cut_cycles, depths, nearest, nearest_at, parent_index

PHASES = ("forward", "backward", "optimizer")
FORWARD, BACKWARD, OPTIMIZER = 0, 1, 2
NODE_PREFIX = "autograd::engine::evaluate_function: "
# traces before torch 1.10 name the node op itself ("AddmmBackward", "CudnnConvolutionBackward"), no wrapper
_OLD_NODE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*Backward\d*$")
OPTIM_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
OPTIM_FILES = ("torch/optim/",)


class Places(msgspec.Struct, frozen=True):
    """Per op instance (index into trace.ops): its module path, user frame and phase."""

    source: str | None  # "python_function" | "call_stack" | "module_hierarchy" | None (nothing recorded)
    module: np.ndarray  # int64 index into paths, -1 unknown
    frame: np.ndarray  # int64 index into frames, -1 unknown
    phase: np.ndarray  # int8 index into PHASES
    via_forward: np.ndarray  # bool: a backward op placed through its forward op's sequence number
    paths: Paths = msgspec.field(default_factory=Paths)  # module instance names from the top (paths[i]: a tuple)
    frames: list[Frame] = msgspec.field(default_factory=list)
    seq_recorded: bool = False  # the trace has sequence numbers (backward ops can be placed)
    # bool per op: inside autograd's AccumulateGrad node (gradients summed into .grad, DDP's reducer hooks):
    # backward work of no module
    accumulate: np.ndarray | None = None
    warnings: list[str] = msgspec.field(default_factory=list)  # call trees cut (cycles, modules nested too deep)


def places(trace: Trace, links=None, first_replayed: int | None = None) -> Places:
    """`first_replayed`: ops from this index on are the synthetic ops replay.inject appended for graph
    replays (timed by their replayed kernels, on the GPU's clock); with `links`, each is placed where its
    graph was launched (the launch call's time on its thread), not at its kernels' times."""
    ops = trace.ops
    q_ts, q_end = _query_times(trace, links, first_replayed)
    n = len(ops)
    module = np.full(n, -1, dtype=np.int64)
    frame = np.full(n, -1, dtype=np.int64)
    phase = np.zeros(n, dtype=np.int8)
    via = np.zeros(n, dtype=bool)
    paths = Paths()
    frames: list[Frame] = []
    warnings: list[str] = []
    py = getattr(trace, "python", None)
    source = None
    # when the op's module / user frame started (a Call stack or Module Hierarchy has no times: never inside
    # an autograd node, so a backward op takes its forward op's)
    m_start = f_start = np.full(n, -np.inf)
    opt = np.zeros(n, dtype=bool)
    if py is not None and len(py) and n:
        source = "python_function"
        module, frame, m_start, f_start, opt = _from_python(trace, paths, frames, q_ts, q_end, warnings)
        mh = getattr(ops, "module_hierarchy", None) or {}
        if mh:  # a TorchScript model called from Python: its ops have no module entry, their hierarchy says it
            scripted = np.full(n, -1, dtype=np.int64)
            _from_text(mh, scripted, paths, hierarchy_path)
            take = (module < 0) & (scripted >= 0)
            module[take] = scripted[take]
    else:
        cs = getattr(ops, "call_stack", None) or {}
        mh = getattr(ops, "module_hierarchy", None) or {}
        if mh:
            source = "module_hierarchy"
            _from_text(mh, module, paths, hierarchy_path)
        if cs:
            source = source or "call_stack"
            _frames_from_stacks(cs, frame, frames, None if mh else (module, paths))
    if paths.cut:
        warnings.append(f"{paths.cut:,} recorded module path{'s' if paths.cut != 1 else ''} deeper than {MAX_DEPTH} "
                        f"modules: what ran deeper counts in the module at depth {MAX_DEPTH}")
    if not n:
        return Places(source, module, frame, phase, via, paths, frames, warnings=warnings)
    phase[opt | _inside_named(trace, OPTIM_PREFIXES, q_ts, q_end, ops.thread)] = OPTIMIZER
    node = _enclosing_node(trace, q_ts, q_end)
    back = node >= 0
    acc_codes = [i for i, nm in enumerate(trace.names) if nm.endswith("AccumulateGrad")]
    accumulate = back & np.isin(ops.name[np.maximum(node, 0)], acc_codes)
    phase[back] = BACKWARD
    seq = getattr(ops, "seq", None)
    seq_ok = seq is not None and bool((seq >= 0).any())
    if back.any():
        # a backward op's own frames count only when they started inside its autograd node
        node_ts = np.where(back, ops.ts[np.maximum(node, 0)], np.inf)
        module[back & (m_start < node_ts)] = -1
        frame[back & (f_start < node_ts)] = -1
        if seq_ok:
            fwd = _forward_of(ops, seq, node, back)
            take = back & (fwd >= 0)
            need_m = take.copy()
            need_m[take] = module[take] < 0
            module[need_m] = module[fwd[need_m]]
            need_f = take.copy()
            need_f[take] = frame[take] < 0
            frame[need_f] = frame[fwd[need_f]]
            via[need_m | need_f] = True
    return Places(source, module, frame, phase, via, paths, frames, seq_ok, accumulate, warnings)


def _query_times(trace: Trace, links, first: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Each op's interval for finding what encloses it: its own, but a replayed op's is its graph launch's."""
    ops = trace.ops
    q_ts, q_end = ops.ts, ops.end
    if links is None or first is None or first >= len(ops):
        return q_ts, q_end
    ev = np.flatnonzero((links.gpu_op >= first) & (links.gpu_launch >= 0))
    if not len(ev):
        return q_ts, q_end
    op, at = np.unique(links.gpu_op[ev], return_index=True)  # each replayed op's first event
    la = links.gpu_launch[ev[at]]
    q_ts, q_end = q_ts.copy(), q_end.copy()
    q_ts[op] = trace.launches.ts[la]
    q_end[op] = trace.launches.end[la]
    return q_ts, q_end


# --- python_function events -------------------------------------------------------------------------------

def _from_python(trace: Trace, paths: Paths, frames: list, q_ts: np.ndarray, q_end: np.ndarray,
                 warnings: list[str]):
    """module, frame, module start, frame start, optimizer flag per op, from the Python call tree."""
    py, ops, names = trace.python, trace.ops, trace.names
    parent, cut = cut_cycles(parent_index(py))
    if len(cut):
        f = int(cut[0])
        pid = int(py.py_id[f])
        warnings.append(f"{len(cut):,} Python call{'s' if len(cut) != 1 else ''} recorded as {'their' if len(cut) != 1 else 'its'} own "
                        f"ancestor (parent ids that loop back), cut there: e.g. {names[py.name[f]][:120]!r} "
                        f"(Python id {pid}) is read as a top-level call")
    if not (py.parent >= 0).any():  # no parent ids recorded: the call tree from time nesting instead
        parent = _nesting_parents(py.thread, py.ts, py.end)
    codes = np.flatnonzero(np.bincount(py.name, minlength=len(names)))  # the frame names present
    inv = py.name  # the tables below are indexed by name code
    is_mod_c = np.zeros(len(names), dtype=bool)
    frame_c = np.full(len(names), -1, dtype=np.int64)  # index into frames for user-code frames
    opt_c = np.zeros(len(names), dtype=bool)
    lib_c = np.zeros(len(names), dtype=bool)  # kernel libraries' frames
    for i in codes.tolist():  # per distinct frame name, not per frame
        nm = names[i]
        if module_name(nm) is not None:
            is_mod_c[i] = True
            continue
        f = parse_frame(nm)
        if f is None:
            continue
        lib_c[i] = f.kernel_lib
        if f.user:
            frame_c[i] = len(frames)
            frames.append(f)
        elif f.file.startswith(OPTIM_FILES):
            opt_c[i] = True
    is_mod = is_mod_c[inv]
    inner = _innermost(py.thread, py.ts, py.end, parent, ops.thread, q_ts, q_end)
    n = len(ops)
    # everything below is a function of the op's innermost frame: found once per distinct frame (ops
    # issued from the same call share it), then given to each op
    seen = np.zeros(len(parent), dtype=bool)
    seen[inner[inner >= 0]] = True
    at = np.flatnonzero(seen)  # the distinct innermost frames
    slot = np.full(len(parent) + 1, len(at), dtype=np.int64)  # frame -> its place in `at`; -1 -> past the end
    slot[at] = np.arange(len(at))
    of_op = slot[inner]
    # the nearest module frames: around each op, and around each module frame (its enclosing module)
    m_fr = nearest_at(parent, is_mod, at)
    mods = np.flatnonzero(is_mod)
    p = parent[mods]
    above = p >= 0
    up = np.full(len(mods), -1, dtype=np.int64)
    p_at, p_of = np.unique(p[above], return_inverse=True)
    up[above] = nearest_at(parent, is_mod, p_at)[p_of.reshape(-1)]
    mine = _module_paths(mods, up, py.name, names, paths, warnings)
    # the user's frame is above every kernel library frame on the way: what called into the library
    is_user = (frame_c >= 0)[inv]
    if lib_c.any():
        lib_anc = nearest(parent, lib_c[inv])
        start = at.copy()
        b = lib_anc[at]
        for _ in range(64):
            live = np.flatnonzero(b >= 0)
            if not len(live):
                break
            start[live] = parent[b[live]]
            b[live] = np.where(start[live] >= 0, lib_anc[np.maximum(start[live], 0)], -1)
        ok = start >= 0
        u_fr = np.full(len(at), -1, dtype=np.int64)
        s_at, s_of = np.unique(start[ok], return_inverse=True)  # callers of a library are shared
        u_fr[ok] = nearest_at(parent, is_user, s_at)[s_of.reshape(-1)]
    else:
        u_fr = nearest_at(parent, is_user, at)
    # per distinct frame, then per op (an op with no enclosing frame takes the last slot: unknown)
    in_mod = m_fr >= 0
    module = np.full(len(at) + 1, -1, dtype=np.int64)
    module[:-1][in_mod] = mine[np.searchsorted(mods, m_fr[in_mod])]
    module = module[of_op]
    frame = np.append(np.where(u_fr >= 0, frame_c[inv[np.maximum(u_fr, 0)]], -1), -1)[of_op]
    m_start = np.append(np.where(m_fr >= 0, py.ts[np.maximum(m_fr, 0)], -np.inf), -np.inf)[of_op]
    f_start = np.append(np.where(u_fr >= 0, py.ts[np.maximum(u_fr, 0)], -np.inf), -np.inf)[of_op]
    if opt_c.any():
        opt = np.append(nearest_at(parent, opt_c[inv], at) >= 0, False)[of_op]
    else:
        opt = np.zeros(n, dtype=bool)
    return module, frame, m_start, f_start, opt


def _module_paths(mods: np.ndarray, anc: np.ndarray, name: np.ndarray, names: list[str], paths: Paths,
                  warnings: list[str]) -> np.ndarray:
    """Path index per module frame (`mods`: their frame indices, ascending; `anc`: each one's enclosing
    module frame, -1 for none): the names of its module ancestors from the top. Paths are numbered level
    by level (a vectorised pass per nesting level of modules, at most MAX_DEPTH); a module frame nested
    deeper takes the path of its ancestor at that depth (found by pointer jumps)."""
    m = len(mods)
    if not m:
        return np.zeros(0, dtype=np.int64)
    # each module frame's enclosing one (its place among mods)
    up = np.where(anc >= 0, np.searchsorted(mods, anc), -1)
    depth = depths(up)
    deep = np.flatnonzero(depth >= MAX_DEPTH)
    mine = np.full(m, -1, dtype=np.int64)  # path per module frame
    label: dict[int, str] = {}
    span = len(names) + 1
    for d in range(min(int(depth.max()), MAX_DEPTH - 1) + 1):
        at = np.flatnonzero(depth == d)
        par = np.where(up[at] >= 0, mine[np.maximum(up[at], 0)], -1)
        uniq, inv = np.unique((par + 1) * span + name[mods[at]].astype(np.int64), return_inverse=True)
        ids = np.empty(len(uniq), dtype=np.int64)
        for u, key in enumerate(uniq.tolist()):  # per distinct path, not per frame
            code = key % span
            nm = label.get(code)
            if nm is None:
                nm = label[code] = module_name(names[code]) or names[code]
            ids[u] = paths.child(key // span - 1, nm)
        mine[at] = ids[inv.reshape(-1)]
    if len(deep):
        mine[deep] = mine[ancestor(up, deep, depth[deep] - (MAX_DEPTH - 1))]
        first = int(mods[deep[np.argmin(depth[deep])]])
        warnings.append(f"{len(deep):,} module call{'s' if len(deep) != 1 else ''} nested deeper than {MAX_DEPTH} modules "
                        f"(from {names[name[first]][:120]!r} down) count in their ancestor at depth {MAX_DEPTH}")
    return mine


def _innermost(iv_thread, iv_ts, iv_end, iv_parent, q_thread, q_ts, q_end) -> np.ndarray:
    """Index of the innermost interval (by parent links) that encloses each query [q_ts, q_end] on the same
    thread, -1 when none: the last interval starting at or before the query, climbed up its parents while
    it ended before the query did."""
    cand = np.full(len(q_ts), -1, dtype=np.int64)
    if not len(iv_ts) or not len(q_ts):
        return cand
    for idx, sel in _threads(iv_thread, q_thread):
        idx = _by_start(idx, iv_ts, iv_end)
        ts = iv_ts if idx is None else iv_ts[idx]
        c = np.searchsorted(ts, q_ts if sel is None else q_ts[sel], side="right") - 1
        found = c if idx is None else idx[np.maximum(c, 0)]
        found[c < 0] = -1
        if sel is None:
            cand = found
        else:
            cand[sel] = found
    for _ in range(1024):  # climb while the candidate ended before the query did
        live = np.flatnonzero(cand >= 0)
        miss = live[iv_end[cand[live]] < q_end[live]]
        if not len(miss):
            break
        cand[miss] = iv_parent[cand[miss]]
    return cand


def _threads(iv_thread, q_thread):
    """(interval indices, query indices) per thread that has both, each in recorded order; None for all of
    them. One thread on either side (a model's Python runs on one) costs a comparison per event; a few
    threads on both, one per event and thread; more, one sort by thread of each side."""
    t_iv, t_q = int(iv_thread[0]), int(q_thread[0])
    one_iv, one_q = bool((iv_thread == t_iv).all()), bool((q_thread == t_q).all())
    if one_iv or one_q:
        if one_iv and one_q:
            return [(None, None)] if t_iv == t_q else []
        if one_iv:
            sel = np.flatnonzero(q_thread == t_iv)
            return [(None, sel)] if len(sel) else []
        idx = np.flatnonzero(iv_thread == t_q)
        return [(idx, None)] if len(idx) else []
    top = max(int(iv_thread.max()), int(q_thread.max())) + 1
    if min(int(iv_thread.min()), int(q_thread.min())) >= 0 and top <= 1 << 20:
        both = np.flatnonzero((np.bincount(iv_thread, minlength=top) > 0) & (np.bincount(q_thread, minlength=top) > 0))
        if len(both) <= 4:
            return [(np.flatnonzero(iv_thread == t), np.flatnonzero(q_thread == t)) for t in both.tolist()]
    order, by_q = np.argsort(iv_thread, kind="stable"), np.argsort(q_thread, kind="stable")
    s_thread, qt = iv_thread[order], q_thread[by_q]
    cuts = np.flatnonzero(s_thread[1:] != s_thread[:-1]) + 1
    out = []
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(order)].tolist()):  # per thread
        t = s_thread[lo]
        a, b = np.searchsorted(qt, t, "left"), np.searchsorted(qt, t, "right")
        if a < b:
            out.append((order[lo:hi], by_q[a:b]))
    return out


def _by_start(idx, ts, end):
    """One thread's intervals (indices `idx`, None for all) by start, then longest first. Python calls are
    recorded in the order they start (parents before children), so that is usually their order already
    (checked: None back for all in recorded order); else the sort."""
    t = ts if idx is None else ts[idx]
    later = t[1:] >= t[:-1]
    if later.all():
        tie = np.flatnonzero(t[1:] == t[:-1])  # equal starts: the longer first
        if not len(tie):
            return idx
        i0, i1 = (tie, tie + 1) if idx is None else (idx[tie], idx[tie + 1])
        if (end[i1] <= end[i0]).all():
            return idx
    o = np.lexsort((-(end if idx is None else end[idx]), t))
    return o if idx is None else idx[o]


# --- autograd nodes, optimizer ranges ------------------------------------------------------------------

def _enclosing_node(trace: Trace, q_ts: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """Per op, the innermost autograd node op enclosing it (itself included), -1: "autograd::engine::
    evaluate_function: XBackward0", or in traces that have no such wrapper, the "XBackward" op itself."""
    ops = trace.ops
    codes = [i for i, nm in enumerate(trace.names) if nm.startswith(NODE_PREFIX)]
    if not codes or not np.isin(ops.name, codes).any():
        codes = [i for i, nm in enumerate(trace.names) if _OLD_NODE.match(nm)]
    out = np.full(len(ops), -1, dtype=np.int64)
    if not codes:
        return out
    nodes = np.flatnonzero(np.isin(ops.name, codes))
    if not len(nodes):
        return out
    parent = _nesting_parents(ops.thread[nodes], ops.ts[nodes], ops.end[nodes])
    inner = _innermost(ops.thread[nodes], ops.ts[nodes], ops.end[nodes], parent, ops.thread, q_ts, q_end)
    has = inner >= 0
    out[has] = nodes[inner[has]]
    return out


def _nesting_parents(thread, ts, end) -> np.ndarray:
    """Parent of each interval by time nesting on its thread (few intervals: autograd nodes)."""
    order = np.lexsort((-end, ts, thread))
    parent = np.full(len(ts), -1, dtype=np.int64)
    stack: list[int] = []
    prev = None
    for i in order.tolist():  # autograd nodes only: thousands, not the trace's events
        if thread[i] != prev:
            stack, prev = [], thread[i]
        while stack and end[stack[-1]] <= ts[i]:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent


def _inside_named(trace: Trace, prefixes: tuple[str, ...], ts, end, thread) -> np.ndarray:
    """Whether each interval lies inside an op or user annotation whose name starts with one of `prefixes`
    (on the same thread)."""
    out = np.zeros(len(ts), dtype=bool)
    codes = [i for i, nm in enumerate(trace.names) if nm.startswith(prefixes)]
    if not codes:
        return out
    for col in (trace.ops, trace.annotations):
        sel = np.flatnonzero(np.isin(col.name, codes))
        if not len(sel):
            continue
        parent = _nesting_parents(col.thread[sel], col.ts[sel], col.end[sel])
        out |= _innermost(col.thread[sel], col.ts[sel], col.end[sel], parent, thread, ts, end) >= 0
    return out


def _forward_of(ops, seq: np.ndarray, node: np.ndarray, back: np.ndarray) -> np.ndarray:
    """Per op, the forward op whose autograd node its enclosing evaluate_function op runs: the latest forward
    op with the node's sequence number that started before the node; -1 when none."""
    out = np.full(len(ops), -1, dtype=np.int64)
    # forward ops: numbered ops other than autograd's own node ops (those repeat their node's number); inside
    # a backward node, the forward a checkpoint recomputes (numbered anew) counts too
    own = np.zeros(len(ops), dtype=bool)
    own[back] = seq[node[back]] == seq[back]
    fwd = np.flatnonzero((seq >= 0) & ~own)
    if not len(fwd):
        return out
    b = np.flatnonzero(back)
    n_seq = seq[node[b]]
    n_ts = ops.ts[node[b]]
    # forwards and nodes in one order by (number, start, forwards first): each node's latest forward of its
    # number that started by then is the last forward at or before it (one sort, no per-node search; a
    # number that recurs — several forward threads, or a process that restarted its count — costs nothing)
    nf = len(fwd)
    all_seq = np.concatenate((seq[fwd], n_seq))
    kind = np.concatenate((np.zeros(nf, dtype=np.int8), np.ones(len(b), dtype=np.int8)))
    o = np.lexsort((kind, np.concatenate((ops.ts[fwd], n_ts)), all_seq))
    is_f = kind[o] == 0
    last = np.maximum.accumulate(np.where(is_f, np.arange(len(o)), -1))
    q = np.flatnonzero(~is_f)
    lf = last[q]
    node_i = o[q] - nf  # which node (index into b)
    hit = (lf >= 0) & (n_seq[node_i] >= 0)
    hit[hit] = all_seq[o[lf[hit]]] == n_seq[node_i[hit]]
    cand = np.full(len(b), -1, dtype=np.int64)
    cand[node_i[hit]] = fwd[o[lf[hit]]]
    out[b] = cand
    return out


# --- Call stack / Module Hierarchy args ------------------------------------------------------------------

def _frames_from_stacks(stacks: dict[int, str], frame: np.ndarray, frames: list, calls: tuple | None) -> None:
    """Each op's innermost user frame from its "Call stack" (one parse per distinct stack text). With
    `calls` = (module, paths), also its call path: the user's frames from the outermost in ("train.py:54
    <module>" / "resnet.py:249 forward" / ...), the stand-in for a module path, which a Call stack does not
    name."""
    seen: dict[str, tuple[int, int]] = {}
    where: dict[tuple, int] = {}
    path_ids: dict[tuple, int] = {}
    for i, text in stacks.items():
        k = seen.get(text)
        if k is None:
            user = [f for f in call_stack_frames(text) if f.user]
            fr = pa = -1
            if user:
                f = user[0]
                key = (f.file, f.line, f.function)
                fr = where.get(key, -1)
                if fr < 0:
                    fr = where[key] = len(frames)
                    frames.append(f)
                if calls is not None:
                    p = tuple(f"{u.file.rsplit('/', 1)[-1]}:{u.line} {u.function}" for u in reversed(user))
                    pa = path_ids.get(p, -1)
                    if pa < 0:
                        pa = path_ids[p] = calls[1].add(p)
            k = seen[text] = (fr, pa)
        frame[i] = k[0]
        if calls is not None:
            calls[0][i] = k[1]


def _from_text(texts: dict[int, str], module: np.ndarray, paths: Paths, parse) -> None:
    """Each op's module path from its "Module Hierarchy" (one parse per distinct text). TorchScript's
    profiling executor inlines submodules into a top written "TOP()" (no class): named by the top class the
    trace records elsewhere, when it records one."""
    parsed: dict[str, tuple] = {}
    for text in texts.values():
        if text not in parsed:
            parsed[text] = parse(text) or ()
    tops = {p[0] for p in parsed.values() if p and p[0] != "TOP"}
    top = tops.pop() if len(tops) == 1 else None
    ids: dict[str, int] = {}
    for text, p in parsed.items():
        if top is not None and p and p[0] == "TOP":
            p = (top,) + p[1:]
        ids[text] = paths.add(p)
    for i, text in texts.items():
        module[i] = ids[text]
