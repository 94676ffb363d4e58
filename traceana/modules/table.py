"""The by-module table: device time, FLOPs, bytes, achieved rate and dominant bound per module path, forward
and backward apart, hierarchical; and each op row's and finding's module and user frame.

Every GPU event belongs to one op row (its signature group) and, through the op that launched it, to one
module path and phase (attribute.places). An event's time is its duration. An op row's FLOPs and bytes
(per call, times its calls) are shared out over the row's calls (op instances; for rows of opaque events,
the unit the row counts calls in), so each module's FLOPs and bytes are those of the calls it made, and the
module table's sums equal the ops table's.
"""

from __future__ import annotations

import numpy as np

from traceana.arrays import distinct
from traceana.link.attribute import CAUSE_KEYS, Links
from traceana.load.model import Trace
from traceana.modules.attribute import PHASES, Places
from traceana.modules.frames import module_class
from traceana.modules.paths import Paths
from traceana.link.signatures import BY_KERNEL, Group

# where the time of events with no module goes: (key, label)
OTHER = (("outside_modules", "ops outside any module"),
         ("backward_unknown", "backward (module unknown)"),
         ("accumulate_grad", "backward: gradient accumulation (AccumulateGrad; DDP's reducer hooks run in it)"),
         ("optimizer", "optimizer step"),
         ("no_op", "kernels with no op (launched outside the profiled ops)"))
BOUNDS = ("compute", "memory", "latency", "underutilised", "host_link", "communication", "unknown", "unmodelled",
          "opaque")
TOP_OPS = 5
SEP = "/"

SOURCE_NOTES = {
    None: "this trace records no Python stacks: record with torch.profiler.profile(with_stack=True) to see "
          "which module and which line of your code issued each op (with_modules only fills \"Module Hierarchy\" "
          "for TorchScript models)",
    "call_stack": "modules from the ops' \"Call stack\" (an older torch's with_stack=True), which names functions, "
                  "not modules: each path is the chain of your code's frames instead; a torch >= 2.0 "
                  "with_stack=True trace names each nn.Module",
    "module_hierarchy": "modules from the ops' \"Module Hierarchy\" (TorchScript): attribute names with classes",
    "python_function": "modules from the Python call tree (with_stack=True): each path is the profiler's instance "
                       "names, Class_k being the k-th instance of that class it saw; the attribute names "
                       "(model.layers.3.mlp) are not in the trace",
}


def module_table(places: Places, trace: Trace, links: Links, groups: list[Group], rows: list[dict],
                 total_us: float) -> dict:
    """The JSON `modules` section; also writes each row's module / source fields (in place)."""
    ev_row, weight = _event_rows(trace, links, groups, rows)
    gpu = trace.gpu
    op = links.gpu_op
    has_op = op >= 0
    mod = np.full(len(gpu), -1, dtype=np.int64)
    phase = np.full(len(gpu), -1, dtype=np.int64)
    fr = np.full(len(gpu), -1, dtype=np.int64)
    mod[has_op] = places.module[op[has_op]]
    phase[has_op] = places.phase[op[has_op]]
    fr[has_op] = places.frame[op[has_op]]
    ok = ev_row >= 0
    dur = np.where(ok, gpu.dur, 0.0)
    flops_pc = np.array([float(r.get("flops") or 0.0) for r in rows] + [0.0])
    bytes_pc = np.array([float(r.get("bytes") or 0.0) for r in rows] + [0.0])
    bound = np.array([_bound_code(r.get("bound")) for r in rows] + [len(BOUNDS) - 1], dtype=np.int64)
    f_ev = flops_pc[ev_row] * weight
    b_ev = bytes_pc[ev_row] * weight
    bd_ev = bound[ev_row]
    _row_fields(rows, places, ev_row, mod, phase, fr, dur)

    n_paths = len(places.paths)
    n_ph = len(PHASES) + 1
    key = (mod + 1) * n_ph + (phase + 1)
    size = (n_paths + 1) * n_ph
    t = np.bincount(key, weights=dur, minlength=size).reshape(n_paths + 1, n_ph)
    fl = np.bincount(key, weights=f_ev, minlength=size).reshape(n_paths + 1, n_ph)
    by = np.bincount(key, weights=b_ev, minlength=size).reshape(n_paths + 1, n_ph)
    tb = np.bincount(key * len(BOUNDS) + bd_ev, weights=dur, minlength=size * len(BOUNDS)).reshape(
        n_paths + 1, n_ph, len(BOUNDS))
    tree, by_class = _tree(places, t[1:], fl[1:], by[1:], tb[1:], _top_rows(mod, ev_row, dur, rows, n_paths),
                           total_us)
    acc = np.zeros(len(gpu), dtype=bool)
    if places.accumulate is not None:
        acc[has_op] = places.accumulate[op[has_op]]
    none = ok & (mod < 0)
    cat = np.select([phase < 0, acc, phase == 1, phase == 2], [4, 2, 1, 3], 0)
    other = []
    for c, (k, label) in enumerate(OTHER):
        m = none & (cat == c)
        if m.any():
            tb_c = np.bincount(bd_ev[m], weights=dur[m], minlength=len(BOUNDS))
            other.append({"key": k, "label": label, **_stats(dur[m].sum(), f_ev[m].sum(), b_ev[m].sum(), tb_c,
                                                               total_us)})
    return {
        "source": places.source,
        "note": SOURCE_NOTES[places.source],
        "backward": _backward_note(places, t, float(dur[none & (cat == 2)].sum())),
        "total": {"time_us": float(dur.sum()), "flops": float(f_ev.sum()), "bytes": float(b_ev.sum())},
        "tree": tree,
        "by_class": by_class,
        "other": other,
        "by_source": _by_source(places, fr, phase, dur, f_ev, b_ev, bd_ev, mod, total_us),
    }


def _bound_code(b: str | None) -> int:
    return BOUNDS.index(b) if b in BOUNDS else BOUNDS.index("unknown")


def _event_rows(trace: Trace, links: Links, groups: list[Group], rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Each GPU event's row index (len(rows) when none), and its share of one call of its row: 1 / the events
    of its call, scaled so that a row's shares sum to its call count."""
    n = len(trace.gpu)
    ev_row = np.full(n, len(rows), dtype=np.int64)
    for i, g in enumerate(groups):
        if g.events is not None and len(g.events):
            ev_row[g.events] = i
    n_ops, n_la = len(trace.ops), len(trace.launches)
    per_kernel = np.isin(links.gpu_cause, [CAUSE_KEYS.index(c) for c in BY_KERNEL])
    idx = np.arange(n, dtype=np.int64)
    # the unit a row counts its calls in (signatures.group_ops): the op instance, else the launch, else the event
    unit = np.where(per_kernel, n_ops + n_la + idx,
                    np.where(links.gpu_op >= 0, links.gpu_op,
                             np.where(links.gpu_launch >= 0, n_ops + links.gpu_launch, n_ops + n_la + idx)))
    weight = np.zeros(n)
    if not n:
        return ev_row, weight
    span = n_ops + n_la + n + 1
    _, inv, cnt = np.unique(ev_row * span + unit, return_inverse=True, return_counts=True)
    weight = 1.0 / cnt[inv.reshape(-1)]
    sums = np.bincount(ev_row, weights=weight, minlength=len(rows) + 1)
    calls = np.array([r["count"] for r in rows] + [0], dtype=np.float64)
    scale = np.divide(calls, sums, out=np.zeros_like(calls), where=sums > 0)
    weight *= scale[ev_row]
    return np.where(ev_row < len(rows), ev_row, len(rows)), weight


def _stats(t: np.ndarray | float, f: float, b: float, tb: np.ndarray, total_us: float) -> dict:
    """One entry's figures (t: its time, or its times by phase; tb: its time by bound)."""
    t = float(np.sum(t))
    return _figures(t, float(f), float(b), int(np.argmax(tb)) if float(np.sum(tb)) > 0 else -1, total_us)


def _figures(t: float, f: float, b: float, bound: int, total_us: float) -> dict:
    return {"time_us": t, "flops": f, "bytes": b,
            "pct": t / total_us * 100 if total_us > 0 else 0.0,
            "achieved_tflops": f / t / 1e6 if t > 0 and f > 0 else None,
            "achieved_gbps": b / t / 1e3 if t > 0 and b > 0 else None,
            "bound": BOUNDS[bound] if bound >= 0 else None}


def _table(t: np.ndarray, f: np.ndarray, b: np.ndarray, tb: np.ndarray, total_us: float) -> list[dict]:
    """Per entry (rows of t, f, b: [entry, phase]; tb: [entry, phase, bound]): its figures over all phases and
    per phase (forward and backward always, the optimizer step when it has time), computed column-wise."""
    tt, ft, bt = t.sum(axis=1).tolist(), f.sum(axis=1).tolist(), b.sum(axis=1).tolist()
    tbt = tb.sum(axis=1)
    bound = np.where(tbt.sum(axis=1) > 0, tbt.argmax(axis=1), -1).tolist()
    pb = np.where(tb.sum(axis=2) > 0, tb.argmax(axis=2), -1).tolist()
    tl, fl, bl = t.tolist(), f.tolist(), b.tolist()
    out = []
    for i in range(len(tt)):
        row = _figures(tt[i], ft[i], bt[i], bound[i], total_us)
        for k, name in enumerate(PHASES, 1):
            if name == "optimizer" and tl[i][k] <= 0:
                continue
            row[name] = _figures(tl[i][k], fl[i][k], bl[i][k], pb[i][k], total_us)
        out.append(row)
    return out


def _tree(places: Places, t, fl, by, tb, top: dict[int, list[str]], total_us: float) -> tuple[list[dict], list[dict]]:
    """Module nodes depth-first (children by time), each with inclusive totals, its own (self) time, and its
    forward / backward split; nodes that took no device time are left out. Also the same figures per module
    class (by_class). The paths are a tree of parent pointers (modules/paths.py): nodes are the paths with
    figures and their ancestors, totals summed up one level at a time, the order made with a stack."""
    paths = places.paths
    n_paths = len(paths)
    parent = np.array(paths.parent, dtype=np.int64)
    level = np.array(paths.depth, dtype=np.int64)
    node = np.zeros(n_paths, dtype=bool)
    up = np.flatnonzero(t.sum(axis=1) + fl.sum(axis=1) + by.sum(axis=1) > 0)
    while len(up):  # the paths with figures and every ancestor of theirs (a round per level)
        node[up] = True
        up = parent[up]
        up = up[up >= 0]
        up = up[~node[up]]
    acc = [x.astype(np.float64, copy=True) for x in (t, fl, by, tb)]
    for d in range(int(level.max()) if n_paths else 0, 1, -1):  # deepest first: each level into its parents
        at = np.flatnonzero(node & (level == d))
        for a in acc:
            np.add.at(a, parent[at], a[at])
    keep = np.flatnonzero(node)
    total = acc[0].sum(axis=1)
    self_t = t.sum(axis=1)
    children: dict[int, list[int]] = {}
    for k in keep.tolist():
        children.setdefault(int(parent[k]), []).append(k)
    names = paths.name
    for kids in children.values():
        kids.sort(key=lambda k: (-total[k], names[k]))
    figures = dict(zip(keep.tolist(), _table(*(a[keep] for a in acc), total_us)))
    out: list[dict] = []
    at_out: dict[int, int] = {}
    cls = _class_of(places.source)
    stack = list(reversed(children.get(-1, [])))
    while stack:  # depth first, children by time (a stack, not recursion: depth is the trace's)
        k = stack.pop()
        at_out[k] = len(out)
        p = paths[k]
        pk = int(parent[k])
        out.append({"path": SEP.join(p), "name": p[-1], "class": cls(p[-1]), "depth": len(p) - 1,
                    "parent": at_out[pk] if pk >= 0 else -1, "self_time_us": float(self_t[k]),
                    "ops": top.get(k, []), **figures[k]})
        stack.extend(reversed(children.get(k, [])))
    return out, _by_class(paths, keep, cls, acc, total_us)


#: by_class lists at most this many classes
TOP_CLASSES = 30


def _by_class(paths, keep: np.ndarray, cls, acc: list[np.ndarray], total_us: float) -> list[dict]:
    """Per module class (all its instances: "LlamaMLP x 24"), its inclusive figures: the time of each node
    not inside another node of its own class (a Sequential in a Sequential counts once). Classes overlap
    one another (a decoder layer holds its MLP): each row is that class's share, not a partition.
    `keep`: the tree's nodes (path numbers, each after its parent)."""
    name_of: dict[int, str] = {}
    classes: dict[int, frozenset] = {}  # the classes of each node's ancestors (a set per distinct chain)
    pick: dict[str, list[int]] = {}
    for k in keep.tolist():
        nm = paths.name[k]
        c = name_of[k] = cls(nm) or nm
        pk = paths.parent[k]
        above = classes.get(pk, frozenset()) if pk >= 0 else frozenset()
        classes[k] = above if c in above else above | {c}
        if c in above:
            continue  # inside an instance of its own class: already counted there
        pick.setdefault(c, []).append(k)
    if not pick:
        return []
    order = list(pick)
    sums = [np.stack([a[pick[c]].sum(axis=0) for c in order]) for a in acc]
    figures = _table(*sums, total_us)
    out = [{"class": c, "instances": len(pick[c]), **f} for c, f in zip(order, figures)]
    out.sort(key=lambda r: (-r["time_us"], r["class"]))
    return out[:TOP_CLASSES]


def _class_of(source: str | None):
    if source == "python_function":
        return module_class
    if source == "module_hierarchy":
        return lambda s: s[s.find("(") + 1:-1] if s.endswith(")") and "(" in s else s
    return lambda s: s


def _top_rows(mod: np.ndarray, ev_row: np.ndarray, dur: np.ndarray, rows: list[dict], n_paths: int) -> dict:
    """path index -> the ids of the op rows that took most of its own time (at most TOP_OPS)."""
    sel = (mod >= 0) & (ev_row < len(rows))
    if not sel.any():
        return {}
    k = mod[sel] * (len(rows) + 1) + ev_row[sel]
    u, inv = np.unique(k, return_inverse=True)
    tt = np.bincount(inv.reshape(-1), weights=dur[sel])
    out: dict[int, list[str]] = {}
    for j in np.lexsort((-tt, u // (len(rows) + 1))).tolist():
        p = int(u[j] // (len(rows) + 1))
        lst = out.setdefault(p, [])
        if len(lst) < TOP_OPS:
            lst.append(rows[int(u[j] % (len(rows) + 1))]["id"])
    return out


def _row_fields(rows: list[dict], places: Places, ev_row, mod, phase, fr, dur) -> None:
    """Each op row's module (the class path with most of its time, its top instance path and how many
    instances), user frame and phase (in place)."""
    n = len(rows)
    of = _class_of(places.source)
    memo: dict[str, str] = {}

    def cls(x: str) -> str:
        c = memo.get(x)
        if c is None:
            c = memo[x] = of(x)
        return c

    cpaths = Paths()  # the class paths ("LlamaModel/LlamaDecoderLayer/LlamaMLP"), as parent pointers too
    cp: list[int] = []
    for pk, nm in zip(places.paths.parent, places.paths.name):  # parents come first
        cp.append(cpaths.child(cp[pk] if pk >= 0 else -1, cls(nm)))
    cpath_of = np.array(cp + [-1], dtype=np.int64)
    n_c = len(cpaths)
    for r in rows:
        r.update({"module": None, "module_class": None, "module_instances": 0, "module_share": None,
                  "source": None, "source_function": None, "phase": None})
    sel = ev_row < n
    rt = np.bincount(ev_row[sel], weights=dur[sel], minlength=n)
    m = sel & (mod >= 0)
    if m.any():
        c = cpath_of[mod[m]]
        best_c = _best(ev_row[m], c, dur[m], n)
        inst = _best(ev_row[m] * (n_c + 1) + c, mod[m], dur[m], None)
        n_inst = _distinct_per(ev_row[m] * (n_c + 1) + c, mod[m])
        share = _share(ev_row[m], c, dur[m], best_c, n)
        for i in np.flatnonzero(best_c >= 0).tolist():
            k = i * (n_c + 1) + int(best_c[i])
            r = rows[i]
            r["module_class"] = SEP.join(cpaths[int(best_c[i])])
            r["module"] = SEP.join(places.paths[inst[k]])
            r["module_instances"] = int(n_inst[k])
            r["module_share"] = float(share[i] / rt[i]) if rt[i] > 0 else None
    f = sel & (fr >= 0)
    if f.any():
        best_f = _best(ev_row[f], fr[f], dur[f], n)
        for i in np.flatnonzero(best_f >= 0).tolist():
            fm = places.frames[int(best_f[i])]
            rows[i]["source"] = fm.where()
            rows[i]["source_function"] = fm.function
    p = sel & (phase >= 0)
    if p.any():
        best_p = _best(ev_row[p], phase[p], dur[p], n)
        for i in np.flatnonzero(best_p >= 0).tolist():
            rows[i]["phase"] = PHASES[int(best_p[i])]


def _best(group: np.ndarray, value: np.ndarray, w: np.ndarray, n: int | None):
    """Per group, the value with the most weight (ties: the smallest value). An array of n (-1 for groups
    with none), or a dict when n is None."""
    span = int(value.max()) + 1
    key = group * span + value
    top = int(key.max()) + 1
    if top <= 4 * len(key) + 4096:  # a small key space: the keys counted in place, no sort
        u = np.flatnonzero(np.bincount(key, minlength=top))
        tw = np.bincount(key, weights=w, minlength=top)[u]
    else:
        u, inv = np.unique(key, return_inverse=True)
        tw = np.bincount(inv.reshape(-1), weights=w)
    g, v = u // span, u % span
    order = np.lexsort((v, -tw, g))
    first = np.ones(len(order), dtype=bool)
    first[1:] = g[order][1:] != g[order][:-1]
    pick = order[first]
    if n is None:
        return dict(zip(g[pick].tolist(), v[pick].tolist()))
    out = np.full(n, -1, dtype=np.int64)
    out[g[pick]] = v[pick]
    return out


def _distinct_per(group: np.ndarray, value: np.ndarray) -> dict:
    """group -> how many distinct values it has."""
    span = int(value.max()) + 1
    u = distinct(group * span + value)
    g, c = np.unique(u // span, return_counts=True)
    return dict(zip(g.tolist(), c.tolist()))


def _share(group, value, w, best, n) -> np.ndarray:
    hit = best[group] == value
    return np.bincount(group[hit], weights=w[hit], minlength=n)


def _backward_note(places: Places, t: np.ndarray, accumulate_us: float) -> str | None:
    """How backward ops were placed, or why they could not be."""
    bwd = float(t[:, 2].sum())
    if bwd <= 0 or places.source is None:
        return None
    unknown = float(t[0, 2]) - accumulate_us
    if places.seq_recorded:
        how = ("backward ops take the module and line of the forward op whose autograd node they run "
               "(the node's sequence number)")
    else:
        how = "the trace records no sequence numbers, so backward ops cannot be traced to their forward op"
    if accumulate_us > 0:
        how += f"; {accumulate_us / bwd * 100:.0f}% of backward time is gradient accumulation (no module)"
    if unknown > 0.005 * bwd:
        how += f"; {unknown / bwd * 100:.0f}% has no module (its forward op ran outside modules or was not found)"
    return how


def _by_source(places: Places, fr, phase, dur, f_ev, b_ev, bd_ev, mod, total_us: float, top: int = 30) -> list[dict]:
    """The user frames that issued most device time (top `top`), each with its forward / backward split."""
    sel = fr >= 0
    if not sel.any():
        return []
    n_ph = len(PHASES) + 1
    nf = len(places.frames)
    k = fr[sel] * n_ph + phase[sel] + 1
    t = np.bincount(k, weights=dur[sel], minlength=nf * n_ph).reshape(nf, n_ph)
    fl = np.bincount(k, weights=f_ev[sel], minlength=nf * n_ph).reshape(nf, n_ph)
    by = np.bincount(k, weights=b_ev[sel], minlength=nf * n_ph).reshape(nf, n_ph)
    tb = np.bincount(k * len(BOUNDS) + bd_ev[sel], weights=dur[sel], minlength=nf * n_ph * len(BOUNDS)).reshape(
        nf, n_ph, len(BOUNDS))
    tot = t.sum(axis=1)
    m = sel & (mod >= 0)
    best_m = _best(fr[m], mod[m], dur[m], nf) if m.any() else np.full(nf, -1)
    pick = [i for i in np.lexsort((np.arange(nf), -tot))[:top].tolist() if tot[i] > 0]
    figures = _table(t[pick], fl[pick], by[pick], tb[pick], total_us)
    out = []
    for i, fig in zip(pick, figures):
        f = places.frames[i]
        out.append({"source": f.where(), "file": f.file, "line": f.line, "function": f.function,
                    "module": SEP.join(places.paths[int(best_m[i])]) if best_m[i] >= 0 else None, **fig})
    return out


def finding_fields(findings: list[dict], rows: list[dict]) -> None:
    """Each finding's module and user frame (in place): the class path and the frame that hold at least
    half of its ops' device time (a finding spread over the whole model names none)."""
    by_id = {r["id"]: r for r in rows}
    for f in findings:
        rs = [by_id[i] for i in f.get("ops") or () if i in by_id]
        f["module_class"] = _majority(rs, "module_class")
        f["source"] = _majority(rs, "source")


def _majority(rows: list[dict], key: str) -> str | None:
    total = sum(r["device_time_us"] for r in rows)
    by: dict[str, float] = {}
    for r in rows:
        if r.get(key):
            by[r[key]] = by.get(r[key], 0.0) + r["device_time_us"] * (r.get("module_share") or 1.0
                                                                      if key == "module_class" else 1.0)
    if not by or total <= 0:
        return None
    best = min(by, key=lambda k: (-by[k], k))
    return best if by[best] >= 0.5 * total else None
