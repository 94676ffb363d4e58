"""The run's collective calls, as the context rules (context.py) read them.

TraceView holds the trace's columns the rules need, computed once: op names, op nesting (link/attribute.py's
parent sweep), the phase of any time (forward / backward / optimizer, from rank_facts' windows,
with the backward's tail: after the step's backward began and before its optimizer), the GPU events
launched inside any op's window. `collectives` lists every call: each outermost communication op
(a c10d op holding a record_param_comms is one call) with its algorithm, phase, parent ops, input
and output elements and GPU time, and every communication kernel no such op launched (DeepEP,
graph replays, launches outside ops). `on_a_matmul` finds the forward collectives linked to a
matmul by size: tensor parallelism's signature.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import msgspec
import numpy as np

from traceana.link.comm_kernels import comm_event_mask, is_comm_op, kernel_library
from traceana.link.attribute import Links
from traceana.link.nesting import OpNesting, nesting_of
from traceana.link.kernel_names import HEAD
from traceana.load.model import Trace
from traceana.meter import OFF, Meter
from traceana.link.steps import _steps, collective_kind, inside, merge, phase_windows
from traceana.arrays import distinct

_GEMM = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$")
_ALGO_WORDS = (("all_to_all", r"all_?to_?all|alltoall|dispatch|combine"), ("reduce_scatter", r"reduce_?scatter"),
               ("all_gather", r"all_?gather|allgather"), ("all_reduce", r"all_?reduce|allreduce|custom_ar"),
               ("send_recv", r"^c10d::(send|recv)|^c10d::recv_any_source"), ("broadcast", r"broadcast"),
               ("barrier", r"barrier"))
_ALGO_RX = [(a, re.compile(p, re.I)) for a, p in _ALGO_WORDS]
_KIND_ALGO = {"AllReduce": "all_reduce", "ReduceScatter": "reduce_scatter", "AllGather": "all_gather",
              "AllToAll": "all_to_all", "Dispatch": "all_to_all", "Combine": "all_to_all", "Broadcast": "broadcast"}
_P2P_COLLECTIVE = {"send", "recv", "recv_any_source"}


class _Names:
    """names[codes[i]] for an index i, looked up when asked (no list of every op's name up front; the codes
    as a list once something asks for one name at a time)."""

    __slots__ = ("names", "codes", "_codes")

    def __init__(self, names: list[str], codes: np.ndarray) -> None:
        self.names, self.codes = names, codes
        self._codes: list[int] | None = None

    def __getitem__(self, i: int) -> str:
        codes = self._codes
        if codes is None:
            codes = self._codes = self.codes.tolist()
        return self.names[codes[i]]

    def __len__(self) -> int:
        return len(self.codes)

    def of(self, idx: np.ndarray) -> list[str]:
        """The names at these indices, in their order."""
        names = self.names
        return [names[c] for c in self.codes[idx].tolist()]


class TraceView:
    """The trace's columns as the rules read them (each computed once, when a rule first needs it: a trace
    without collectives never sorts its launches or climbs its ops)."""

    def __init__(self, trace: Trace, links: Links, meter: Meter = OFF):
        self.trace, self.links, self.meter = trace, links, meter
        meter.visit("context", len(trace.ops) + len(trace.annotations))  # the phase windows' pass over them
        names = trace.names
        self.names = names
        # what the name rules read: each name's head (a kernel's template list can run to megabytes)
        self.heads = [n[:HEAD] if len(n) > HEAD else n for n in names]
        self._used: dict[str, list[int]] = {}  # "ops" / "anns" / "gpu" -> the name codes it holds (once)
        self._parent_list: list[int] | None = None  # self.parent as a list, for walks a step at a time
        self.op_name = _Names(names, trace.ops.name)
        self.ann_name = [names[c] for c in trace.annotations.name.tolist()]
        nums, st, se = _steps(trace)
        self.steps = (nums, st, se)
        self.windows, self.window_src = phase_windows(trace, st, se)
        self.gpu_launch = links.gpu_launch

    @functools.cached_property
    def launch_ts(self) -> np.ndarray:
        """Per GPU event: the start of the call that launched it (its own start when none)."""
        gpu, la, links = self.trace.gpu, self.trace.launches, self.links
        self.meter.visit("context", len(gpu))
        lt = gpu.ts.astype(float).copy()
        has = links.gpu_launch >= 0
        lt[has] = la.ts[links.gpu_launch[has]]
        return lt

    @functools.cached_property
    def comm_event(self) -> np.ndarray:
        """Per GPU event: a communication kernel."""
        gpu = self.trace.gpu
        self.meter.visit("context", len(gpu))
        return comm_event_mask(self.names, gpu.name) & (gpu.kind == 0) if len(gpu) else np.zeros(0, bool)

    @functools.cached_property
    def _nest(self) -> OpNesting:
        """Op nesting: ops sorted by (thread, start, longest first), each one's parent (the link stage's)."""
        self.meter.visit("context", len(self.trace.ops))
        return nesting_of(self.trace, self.links)

    @functools.cached_property
    def order(self) -> np.ndarray:
        return self._nest.order

    @functools.cached_property
    def sorted_ts(self) -> np.ndarray:
        """The start of the op at each sorted position (searched per call, never copied)."""
        return self._nest.ts

    @functools.cached_property
    def pos(self) -> np.ndarray:
        """Per op: its sorted position."""
        return self._nest.pos()

    @functools.cached_property
    def run_end(self) -> np.ndarray:
        """Per sorted position: the end of its thread's run."""
        nest = self._nest
        return np.repeat(nest.stops, nest.stops - nest.starts)

    @functools.cached_property
    def parent(self) -> np.ndarray:
        """Per op: the op it runs inside, -1 when none."""
        return self._nest.op_parent()

    @functools.cached_property
    def _launch_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Launches by (thread, start): their order, threads and starts."""
        la = self.trace.launches
        self.meter.visit("context", len(la))
        order = np.lexsort((la.ts, la.thread)) if len(la) else np.zeros(0, np.int64)
        return order, la.thread[order], la.ts[order]

    @property
    def la_order(self) -> np.ndarray:
        return self._launch_index[0]

    @property
    def la_thread(self) -> np.ndarray:
        return self._launch_index[1]

    @property
    def la_ts(self) -> np.ndarray:
        return self._launch_index[2]

    @functools.cached_property
    def _events_by_launch(self) -> tuple[np.ndarray, np.ndarray]:
        """The GPU events with a launch, by launch (each launch's in event order), and their launches."""
        gl = self.links.gpu_launch
        self.meter.visit("context", len(gl))
        ev = np.flatnonzero(gl >= 0)
        ev = ev[np.argsort(gl[ev], kind="stable")]
        return ev, gl[ev]

    @property
    def ev_by_launch(self) -> np.ndarray:
        return self._events_by_launch[0]

    @property
    def ev_launch(self) -> np.ndarray:
        return self._events_by_launch[1]

    def ancestors(self, i: int) -> list[int]:
        parent = self._parent_list
        if parent is None:
            parent = self._parent_list = self.parent.tolist()
        out = []
        j = parent[i]
        while j >= 0 and len(out) < 64:
            out.append(j)
            j = parent[j]
        return out[::-1]

    def inner(self, idx: np.ndarray) -> list[np.ndarray]:
        """Per op in idx: the ops nested in it (itself included), on its thread, in (start, longest first)
        order. One search per thread for all of them, then slices."""
        ops = self.trace.ops
        p = self.pos[idx]
        stop = np.empty(len(idx), dtype=np.int64)
        for run in distinct(self.run_end[p]).tolist():  # per thread (its run of sorted positions)
            m = self.run_end[p] == run
            lo = int(np.searchsorted(self.run_end, run, "left"))  # the run's first position
            # ops of the run that start by the op's end (all those before it do: sorted by start)
            stop[m] = lo + np.searchsorted(self.sorted_ts[lo:run], ops.end[idx[m]], side="right")
        cand, which = _slices(self.order, p, stop)
        keep = ops.end[cand] <= ops.end[idx][which]
        return _split(cand[keep], which[keep], len(idx))

    def events_in(self, thread: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
        """Per (thread, lo, hi): the GPU events launched on that thread between lo and hi, by launch (each
        launch's events in their order). One search per thread for all of them, then slices."""
        n = len(thread)
        if not len(self.la_order) or not n:
            return [np.zeros(0, np.int64) for _ in range(n)]
        x, y = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for th in distinct(thread).tolist():
            m = thread == th
            key = self.la_thread.dtype.type(th)  # a Python int would make numpy cast the whole array
            a = int(np.searchsorted(self.la_thread, key, side="left"))
            b = int(np.searchsorted(self.la_thread, key, side="right"))
            x[m] = a + np.searchsorted(self.la_ts[a:b], lo[m], side="left")
            y[m] = a + np.searchsorted(self.la_ts[a:b], hi[m], side="right")
        lids, which = _slices(self.la_order, x, y)
        o = np.lexsort((lids, which))  # each call's launches in launch order
        lids, which = lids[o], which[o]
        u = np.searchsorted(self.ev_launch, lids, side="left")
        v = np.searchsorted(self.ev_launch, lids, side="right")
        ev, k = _slices(self.ev_by_launch, u, v)
        return _split(ev, which[k], n)

    def phase(self, t: np.ndarray) -> np.ndarray:
        """'forward' / 'backward' / 'optimizer' per time: in an optimizer window, optimizer; in a
        backward window, or after its step's backward began and before its optimizer (the backward's
        tail: DDP's last bucket, FSDP's post-backward callback), backward; else forward."""
        t = np.asarray(t, dtype=float)
        out = np.full(len(t), "forward", dtype=object)
        if "backward" in self.windows:
            bs, be = self.windows["backward"]
            out[inside(t, bs, be) >= 0] = "backward"
            # the step each time is in (without steps: one step, the whole trace)
            st, se = (self.steps[1], self.steps[2]) if len(self.steps[0]) else (np.array([-np.inf]), np.array([np.inf]))
            k = inside(t, st, se)
            first_b = np.full(len(st), np.inf)
            first_o = np.full(len(st), np.inf)
            kb = inside(bs, st, se)
            np.minimum.at(first_b, kb[kb >= 0], bs[kb >= 0])
            if "optimizer" in self.windows:
                os_ = self.windows["optimizer"][0]
                ko = inside(os_, st, se)
                np.minimum.at(first_o, ko[ko >= 0], os_[ko >= 0])
            ok = k >= 0
            tail = np.zeros(len(t), dtype=bool)
            tail[ok] = (t[ok] >= first_b[k[ok]]) & (t[ok] < first_o[k[ok]])
            out[tail] = "backward"
        if "optimizer" in self.windows:
            out[inside(t, *self.windows["optimizer"]) >= 0] = "optimizer"
        return out

    def _codes_where(self, rx: re.Pattern, which: str, column: np.ndarray) -> np.ndarray:
        """Per name code, whether rx finds the name's head; only the codes the column holds are searched
        (kernel names are most of the table and an op rule never reads them)."""
        hit = np.zeros(len(self.heads), dtype=bool)
        if len(column):
            heads = self.heads
            used = self._used.get(which)
            if used is None:
                used = self._used[which] = _codes(column)
            hit[[c for c in used if rx.search(heads[c])]] = True
        return hit

    def ops_where(self, rx: re.Pattern) -> np.ndarray:
        names = self.trace.ops.name
        hit = self._codes_where(rx, "ops", names)
        return np.flatnonzero(hit[names]) if hit.any() else np.zeros(0, np.int64)

    def anns_where(self, rx: re.Pattern) -> np.ndarray:
        names = self.trace.annotations.name
        hit = self._codes_where(rx, "anns", names)
        return np.flatnonzero(hit[names]) if hit.any() else np.zeros(0, np.int64)

    def kernels_where(self, rx: re.Pattern) -> np.ndarray:
        g = self.trace.gpu
        hit = self._codes_where(rx, "gpu", g.name)
        return np.flatnonzero(hit[g.name] & (g.kind == 0)) if hit.any() else np.zeros(0, np.int64)

    def cpu_us(self, idx: np.ndarray, ann: bool = False) -> float:
        src = self.trace.annotations if ann else self.trace.ops
        if not len(idx):
            return 0.0
        s, e = merge(src.ts[idx], src.end[idx])
        return float((e - s).sum())

    def gpu_under(self, idx: np.ndarray, ann: bool = False) -> float:
        """Device time of the GPU events launched inside these ops' windows, on their threads; for
        annotations (user ranges such as `## backward ##`, whose work another thread may launch: the
        autograd engine's), on any thread."""
        src = self.trace.annotations if ann else self.trace.ops
        la, gpu = self.trace.launches, self.trace.gpu
        if not len(idx) or not len(gpu) or not len(la):
            return 0.0
        hit = np.zeros(len(la), dtype=bool)
        if ann:
            hit[inside(la.ts, *merge(src.ts[idx], src.end[idx])) >= 0] = True
        for th in ([] if ann else distinct(src.thread[idx]).tolist()):
            sel = idx[src.thread[idx] == th]
            s, e = merge(src.ts[sel], src.end[sel])
            on = np.flatnonzero(la.thread == th)
            self.meter.visit("context", len(la))
            hit[on[inside(la.ts[on], s, e) >= 0]] = True
        ev = (self.gpu_launch >= 0) & hit[np.maximum(self.gpu_launch, 0)]
        return float(gpu.dur[ev].sum())

    def kernel_us(self, idx: np.ndarray) -> float:
        return float(self.trace.gpu.dur[idx].sum()) if len(idx) else 0.0


def _codes(column: np.ndarray) -> list[int]:
    """The distinct name codes of a column, ascending: one count per code of the table (codes are small)."""
    if len(column) and column.min() >= 0:
        return np.flatnonzero(np.bincount(column)).tolist()
    return np.unique(column).tolist()


def _slices(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """values[lo[0]:hi[0]], values[lo[1]:hi[1]], ... concatenated, and which slice each item came from."""
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    which = np.repeat(np.arange(len(lo), dtype=np.int64), n)
    if not total:
        return values[:0], which
    first = np.concatenate(([0], np.cumsum(n)[:-1]))
    return values[np.arange(total, dtype=np.int64) - first[which] + lo[which]], which


def _sums(x: np.ndarray, parts: list[np.ndarray]) -> list[float]:
    """sum(x[p]) for each index array p: one gather and one prefix sum for all of them."""
    if not parts:
        return []
    n = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    flat = np.concatenate(parts).astype(np.int64, copy=False) if n.sum() else np.zeros(0, np.int64)
    c = np.concatenate(([0.0], np.cumsum(x[flat], dtype=float)))
    ends = np.cumsum(n)
    return (c[ends] - c[ends - n]).tolist()


def _split(items: np.ndarray, which: np.ndarray, n: int) -> list[np.ndarray]:
    """items (grouped by which, in order) as n arrays, one per slice."""
    ends = np.cumsum(np.bincount(which, minlength=n)).tolist()
    return [items[a:z] for a, z in zip([0] + ends[:-1], ends)]


def _algorithm(name: str, extra: dict) -> str | None:
    coll = extra.get("collective")
    return _algorithm_of(name, coll if isinstance(coll, str) else None)


@functools.lru_cache(maxsize=1 << 12)
def _algorithm_of(name: str, coll: str | None) -> str | None:
    """The collective a call is (by its recorded collective name, else its op name): once per distinct pair,
    the same few names recur for every call of a run (4,040 calls, 7 patterns each: 37 ms on df_index)."""
    if coll is not None:
        if coll in _P2P_COLLECTIVE:
            return "send_recv"
        name = coll
    for algo, rx in _ALGO_RX:
        if rx.search(name):
            return algo
    return None


def _decode(b: bytes) -> list:
    try:
        v = msgspec.json.decode(b) if b else []
    except msgspec.DecodeError:
        return []
    return v if isinstance(v, list) else []


def _numel(shape: Any) -> int | None:
    if not isinstance(shape, list) or not shape or not all(type(d) is int and d >= 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def _elements(name: str, dims: bytes, concrete: bytes, extra: dict, algo: str | None) -> tuple[int | None, int | None]:
    """(input, output) elements of one collective call, from what it recorded."""
    i, o = extra.get("in_nelems"), extra.get("out_nelems")
    if type(i) is int and type(o) is int:
        return i, o
    d = _decode(dims)
    short = name.split("::", 1)[-1]
    if short in ("_allgather_base_", "_reduce_scatter_base_", "alltoall_base_") and len(d) >= 2:
        return _numel(d[1]), _numel(d[0])  # (output, input)
    if short in ("allgather_into_tensor_coalesced_", "reduce_scatter_tensor_coalesced_") and len(d) >= 2:
        outs, ins = d[0], d[1]
        if isinstance(outs, list) and isinstance(ins, list) and outs and ins:
            so, si = [_numel(x) for x in outs], [_numel(x) for x in ins]
            if None not in so and None not in si:
                return sum(si), sum(so)
        return None, None
    if d:
        first = _numel(d[0])
        if first is None and isinstance(d[0], list) and d[0] and isinstance(d[0][0], list):
            first = _numel(d[0][0])  # a TensorList of one tensor (c10d::allreduce_)
        if algo == "all_gather" and short.startswith("all_gather_into_tensor"):
            c = _decode(concrete)
            g = int(c[1]) if len(c) > 1 and isinstance(c[1], str) and c[1].isdigit() else None
            return first, first * g if first is not None and g else None
        return first, first
    return None, None


class Call(msgspec.Struct):
    """One communication call: an outermost c10d op, or a communication kernel no such op launched."""

    name: str
    algo: str | None
    ts: float
    end: float
    thread: int
    phase: str
    parents: list[str]
    gpu_us: float
    n_in: int | None
    n_out: int | None
    op: int
    library: str | None


def collectives(r: TraceView) -> list[Call]:
    """Every outermost communication op (a c10d op holding a record_param_comms is one call), and
    every communication kernel no such op launched (DeepEP, graph replays, launches outside ops)."""
    trace, ops = r.trace, r.trace.ops
    out: list[Call] = []
    comm = np.array([is_comm_op(n) for n in r.names], dtype=bool)
    idx = np.flatnonzero(comm[ops.name]) if len(ops) else np.zeros(0, np.int64)
    covered = np.zeros(len(trace.gpu), dtype=bool)
    if len(idx):
        order = idx[np.lexsort((-ops.end[idx], ops.ts[idx], ops.thread[idx]))]
        outer: list[int] = []
        last: dict[int, float] = {}
        for i, th, ts, end in zip(order.tolist(), ops.thread[order].tolist(), ops.ts[order].tolist(),
                                  ops.end[order].tolist()):
            if ts < last.get(th, -np.inf):
                continue  # nested in an outer communication op
            outer.append(i)
            last[th] = end
        outer_a = np.array(outer, dtype=np.int64)
        phases = r.phase(ops.ts[outer_a])
        inners = r.inner(outer_a)
        evs = r.events_in(ops.thread[outer_a], ops.ts[outer_a], ops.end[outer_a])
        gpu_us = _sums(trace.gpu.dur, evs)
        phases = phases.tolist()
        visits = 0
        for k, (i, th, ts, end) in enumerate(zip(outer, ops.thread[outer_a].tolist(), ops.ts[outer_a].tolist(),
                                                  ops.end[outer_a].tolist())):
            parents = [r.op_name[j] for j in r.ancestors(i)]
            inner = inners[k].tolist()
            extra: dict = {}
            for j in inner:
                if j in ops.extra:
                    extra.update(dict(ops.extra[j]))
            algo = _algorithm(r.op_name[i], extra)
            if algo is None:
                for j in inner:
                    algo = _algorithm(r.op_name[j], extra)
                    if algo:
                        break
            n_in, n_out = _elements(r.op_name[i], ops.dims[i], ops.concrete[i], extra, algo)
            if n_in is None and extra:
                n_in, n_out = _elements("", b"", b"", extra, algo)
            ev = evs[k]
            if algo is None and len(ev):
                kinds = [collective_kind(r.names[c]) for c in trace.gpu.name[ev].tolist()]
                algo = next((_KIND_ALGO[x] for x in kinds if x in _KIND_ALGO), None)
            visits += len(inner) + len(ev) + len(parents)
            out.append(Call(name=r.op_name[i], algo=algo, ts=ts, end=end, thread=th, phase=phases[k], parents=parents,
                            gpu_us=gpu_us[k], n_in=n_in, n_out=n_out, op=i, library=None))
        if evs:
            covered[np.concatenate(evs)] = True
        r.meter.visit("context", visits)
    lone = np.flatnonzero(r.comm_event & ~covered) if len(trace.gpu) else np.zeros(0, np.int64)
    if len(lone):
        phases = r.phase(r.launch_ts[lone])
        for k, e in enumerate(lone.tolist()):
            name = r.names[int(trace.gpu.name[e])]
            kind = collective_kind(name)
            out.append(Call(name=name, algo=_KIND_ALGO.get(kind), ts=float(r.launch_ts[e]),
                             end=float(r.launch_ts[e]), thread=-1, phase=phases[k], parents=[],
                             gpu_us=float(trace.gpu.dur[e]), n_in=None, n_out=None, op=-1,
                             library=kernel_library(name)))
    return out


def _gemm_io(r: TraceView, i: int) -> tuple[int | None, int | None]:
    """(elements of the activation input, elements of the output) of a matmul op, from its shapes."""
    d = _decode(r.trace.ops.dims[i])
    short = r.op_name[i].split("::", 1)[-1]
    shapes = [x if isinstance(x, list) and all(type(v) is int for v in x) else None for x in d]
    try:
        if short in ("mm", "bmm", "matmul", "_scaled_mm"):
            a, b = shapes[0], shapes[1]
            if not a or not b:
                return None, None
            lead = a[:-1]
            return _numel(a), _numel(lead + [b[-1]]) if len(b) >= 2 else None
        if short in ("addmm", "baddbmm"):
            a, b = shapes[1], shapes[2]
            return _numel(a), _numel(a[:-1] + [b[-1]]) if a and b else None
        if short == "linear":
            a, w = shapes[0], shapes[1]
            return _numel(a), _numel(a[:-1] + [w[0]]) if a and w else None
    except (IndexError, TypeError):
        return None, None
    return None, None


def on_a_matmul(r: TraceView, calls: list[Call]) -> list[Call]:
    """Forward collectives linked to a matmul by size: an all-reduce / reduce-scatter of as many
    elements as the matmul right before it wrote, or an all-gather whose output has as many elements
    as the next matmul's input (no other collective between them, same thread)."""
    ops = r.trace.ops
    if not any(c.op >= 0 and c.phase == "forward" and c.algo in ("all_reduce", "reduce_scatter", "all_gather")
               for c in calls):
        return []  # no call to link (and no matmuls to sort)
    gemm = r.ops_where(_GEMM)
    if not len(gemm):
        return []
    out = []
    by_end: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per thread: its matmuls by end, and their ends
    by_start: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # ... by start (ties: by end), and their starts
    for th in distinct(ops.thread[gemm]).tolist():
        g = gemm[ops.thread[gemm] == th]
        g = g[np.argsort(ops.end[g], kind="stable")]
        by_end[th] = g, ops.end[g]
        g = g[np.argsort(ops.ts[g], kind="stable")]
        by_start[th] = g, ops.ts[g]
    r.meter.visit("context", len(gemm))
    coll_ts = {}
    for c in calls:
        coll_ts.setdefault(c.thread, []).append(c.ts)
    for th in coll_ts:
        coll_ts[th] = np.sort(np.array(coll_ts[th]))
    for c in calls:  # each call: a few searches over its thread's sorted matmuls and collectives
        if c.op < 0 or c.phase != "forward" or c.algo not in ("all_reduce", "reduce_scatter", "all_gather"):
            continue
        if c.thread not in by_end:
            continue
        r.meter.visit("context", 2)
        cts = coll_ts[c.thread]
        if c.algo in ("all_reduce", "reduce_scatter"):
            g, end = by_end[c.thread]
            k = int(np.searchsorted(end, c.ts, "right"))  # the matmuls that ended by the call's start
            if not k or c.n_in is None:
                continue
            j = int(g[k - 1])
            p = int(np.searchsorted(cts, c.ts, "left"))  # the previous collective on the thread
            if p and cts[p - 1] > ops.end[j]:
                continue
            # the matmul's output = the message: several matmuls nested (linear > addmm) agree
            if _gemm_io(r, j)[1] == c.n_in:
                out.append(c)
        else:
            g, ts = by_start[c.thread]
            k = int(np.searchsorted(ts, c.end, "left"))  # the first matmul that started after the call ended
            if k == len(g) or c.n_out is None:
                continue
            j = int(g[k])
            p = int(np.searchsorted(cts, c.ts, "right"))  # the next collective on the thread
            if p < len(cts) and cts[p] < ops.ts[j]:
                continue
            if _gemm_io(r, j)[0] == c.n_out:
                out.append(c)
    return out
