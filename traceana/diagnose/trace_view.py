"""The trace's columns as the context rules (context.py, collective_calls.py) read them: TraceView.

Computed once, each when a rule first needs it: op and annotation names, the steps and phase windows
(forward / backward / optimizer, from rank_facts' windows, with the backward's tail: after the step's
backward began and before its optimizer), the op nesting (the link stage's: link/nesting.py), launches by
(thread, start) and the GPU events of each launch; the ops nested in an op, the GPU events launched inside
any op's window, the phase of any time, the ops / annotations / kernels whose names a pattern finds.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from traceana.arrays import distinct, slices
from traceana.link.attribute import Links
from traceana.link.comm_kernels import comm_event_mask
from traceana.link.kernel_names import HEAD
from traceana.link.nesting import OpNesting, nesting_of
from traceana.link.steps import _steps, inside, merge, phase_windows
from traceana.load.model import Trace
from traceana.meter import OFF, Meter


class _Names:
    """names[codes[i]] for an index i, looked up when asked (no list of every op's name up front; the codes
    as a list once something asks for one name at a time)."""

    __slots__ = ("_codes", "codes", "names")

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
        self._lower: list[str] | None = None  # the heads in lowercase, made on first use
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
        cand, which = slices(self.order, p, stop)
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
        lids, which = slices(self.la_order, x, y)
        o = np.lexsort((lids, which))  # each call's launches in launch order
        lids, which = lids[o], which[o]
        u = np.searchsorted(self.ev_launch, lids, side="left")
        v = np.searchsorted(self.ev_launch, lids, side="right")
        ev, k = slices(self.ev_by_launch, u, v)
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

    def _codes_where(self, rx: re.Pattern, which: str, column: np.ndarray, lower: bool = False) -> np.ndarray:
        """Per name code, whether rx finds the name's head (`lower`: the head in lowercase, for a rule written
        in lowercase: a case-blind search of a 600-character kernel name costs ~100 us, a plain search of its
        lowercase ~7x less); only the codes the column holds are searched (kernel names are most of the table
        and an op rule never reads them)."""
        hit = np.zeros(len(self.heads), dtype=bool)
        if len(column):
            if lower and self._lower is None:
                self._lower = [h.lower() for h in self.heads]
            heads = self._lower if lower else self.heads
            used = self._used.get(which)
            if used is None:
                used = self._used[which] = _codes(column)
            hit[[c for c in used if rx.search(heads[c])]] = True
        return hit

    def ops_where(self, rx: re.Pattern, lower: bool = False) -> np.ndarray:
        names = self.trace.ops.name
        hit = self._codes_where(rx, "ops", names, lower)
        return np.flatnonzero(hit[names]) if hit.any() else np.zeros(0, np.int64)

    def anns_where(self, rx: re.Pattern, lower: bool = False) -> np.ndarray:
        names = self.trace.annotations.name
        hit = self._codes_where(rx, "anns", names, lower)
        return np.flatnonzero(hit[names]) if hit.any() else np.zeros(0, np.int64)

    def kernels_where(self, rx: re.Pattern, lower: bool = False) -> np.ndarray:
        g = self.trace.gpu
        hit = self._codes_where(rx, "gpu", g.name, lower)
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


def _split(items: np.ndarray, which: np.ndarray, n: int) -> list[np.ndarray]:
    """items (grouped by which, in order) as n arrays, one per slice."""
    ends = np.cumsum(np.bincount(which, minlength=n)).tolist()
    return [items[a:z] for a, z in zip([0] + ends[:-1], ends)]
