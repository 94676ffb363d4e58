"""`attach(trace, links, capture)`: a trace's CUDA/HIP-graph replays meet their capture.

Kernels replayed from a graph link only to the graph launch, so they have no op and no shapes.
The trace recorded while the graph was captured has them: each captured launch sits inside the
op that issued it. Per replayed graph launch, its kernels are aligned in order and by name with
the nodes of a captured graph (replay.align), and the aligned kernels are re-linked to synthetic
op instances carrying the capturing op's name and shapes (replay.inject). A launch that aligns
with no capture stays opaque, cause graph_unaligned.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import numpy as np

from traceana.errors import BadInput
from traceana.link.attribute import CAUSE_KEYS, Links, link
from traceana.load import Trace, load_trace
from traceana.link.replay.index import beside, capture_files

if TYPE_CHECKING:  # the alignment's modules load when a trace replays a graph (most do not)
    from traceana.link.replay.graphs import Captured
    from traceana.link.replay.inject import Match

__all__ = ["attach", "has_graph_replay"]


def has_graph_replay(links: Links) -> bool:
    return bool((links.gpu_cause == CAUSE_KEYS.index("graph_replay")).any())


def attach(trace: Trace, links: Links, capture: str | None, discover: bool = True) -> tuple[Trace, Links, dict | None]:
    """The replay with its graph kernels attributed to their capturing ops, and the report's
    trace.capture entry (None when no capture was given, found or held by the trace itself). A capture
    given by the user that cannot be read is a BadInput; one found beside the trace is a warning.
    Captures the trace itself holds (a run recorded whole: the capture, then the replays) are used
    with the others. A capture folder found beside a trace that replays no graph is named as not needed."""
    if capture is None and not discover:
        return trace, links, None
    given = capture is not None
    path = capture if given else beside(trace.path)
    if not has_graph_replay(links):
        if given:
            trace.warnings.append(f"--capture {os.path.basename(capture)}: the trace has no CUDA/HIP graph "
                                  "replays; the capture was not used")
            return trace, links, None
        return trace, links, (_not_needed(path) if path is not None else None)
    from traceana.link.replay.graphs import captured_graphs

    own = captured_graphs(trace, links, 0)  # its own captures, when it holds them
    if path is None and not own:
        return trace, links, None
    files, missing, caps = [], [], []
    error = None
    if path is not None:
        try:
            files, missing = capture_files(path)
            caps = [load_trace(f.path) for f in files]
        except BadInput as exc:
            if given:
                raise
            trace.warnings.append(f"a capture folder sits beside the trace ({path}) but cannot be used: {exc}")
            if not own:
                return trace, links, {"source": "beside", "folder": path, "error": str(exc), "files": [],
                                      "note": f"capture folder beside the trace not used: {exc}"}
            files, missing, caps, error = [], [], [], str(exc)
    graphs: list[Captured] = []
    per_file: list[int] = []
    for k, (f, ct) in enumerate(zip(files, caps)):
        g = captured_graphs(ct, link(ct), k, f.batch_size, f.mode)
        per_file.append(len(g))
        graphs.extend(g)
    listed = [{"file": os.path.basename(f.path), "batch_size": f.batch_size, "mode": f.mode, "graphs": n}
              for f, n in zip(files, per_file)]
    if own:  # the trace's own captures: one more source, the trace itself
        own = captured_graphs(trace, links, len(caps))
        caps.append(trace)
        graphs.extend(own)
        listed.append({"file": f"{os.path.basename(trace.path)} (itself)", "batch_size": None, "mode": None,
                       "graphs": len(own)})
    source = ("option" if given else "beside") if files else "trace"
    info = {"source": source, "folder": path if path is not None and os.path.isdir(path) else None, "files": listed}
    if error:
        info["error"] = error
    if missing:
        trace.warnings.append(f"capture index lists {len(missing)} file(s) that do not exist: {', '.join(missing[:3])}")
    if not graphs:
        trace.warnings.append("the capture trace(s) hold no graph capture (no BeginCapture ... EndCapture runtime "
                              "calls): graph replays stay opaque")
    trace, links, stats = _align_all(trace, links, graphs, caps)
    info.update(stats)
    info["note"] = _note(info)
    if stats["unaligned_launches"]:
        trace.warnings.append(f"{stats['unaligned_launches']} of {stats['graph_launches']} graph launches did not "
                              "align with a captured graph: their kernels stay opaque (graph unaligned)")
    return trace, links, info


def _not_needed(path: str) -> dict | None:
    """trace.capture for a capture folder found beside a trace that replays no graph: named, not used."""
    try:
        files, _ = capture_files(path)
    except BadInput:
        return None
    names = ", ".join(os.path.basename(f.path) for f in files[:4]) + (", ..." if len(files) > 4 else "")
    return {"source": "beside", "folder": path, "graph_launches": 0,
            "files": [{"file": os.path.basename(f.path), "batch_size": f.batch_size, "mode": f.mode, "graphs": None}
                      for f in files],
            "note": f"capture traces beside the trace ({names}) found but not needed: this trace replays no CUDA/HIP "
                    "graph, so every kernel was launched by an op of its own and is costed from that op's shapes"}


def _align_all(trace: Trace, links: Links, graphs: list[Captured], caps: list[Trace]) -> tuple[Trace, Links, dict]:
    from traceana.link.replay.graphs import replayed, tokens
    from traceana.link.replay.inject import Match, inject

    vocab: dict[str, int] = {}
    cap_tokens = [tokens(g.names, g.kinds, vocab) for g in graphs]
    gpu = trace.gpu
    names = trace.names
    launches = replayed(trace, links)
    memo: dict[tuple, list[tuple[int, list]]] = {}
    matches: list[Match] = []
    unaligned: list[np.ndarray] = []
    reasons: dict[str, list] = {}
    by_position = 0
    nxt = 0  # the captured graph after the last one used: replays run in capture order
    for la in sorted(launches, key=lambda i: float(trace.launches.ts[i])):
        best: list[tuple[int, list, np.ndarray]] = []
        for order in launches[la]:
            kinds = tuple(int(x) for x in gpu.kind[order].tolist())
            toks = tokens(tuple(names[c] for c in gpu.name[order].tolist()), kinds, vocab)
            fits = memo.get(toks)
            if fits is None:
                fits = memo[toks] = _fits(toks, cap_tokens)
            if fits and (not best or len(fits[0][1]) > len(best[0][1])):
                best = [(g, pairs, order) for g, pairs in fits]
        events = launches[la][-1]
        if not best:
            unaligned.append(events)
            _reason(reasons, "no captured graph has these kernels in this order" if graphs else "no graph captured",
                    events, gpu)
            continue
        best = _by_batch_size(trace, la, best, graphs)
        if len({graphs[g].source for g, _, _ in best}) > 1:
            unaligned.append(events)
            _reason(reasons, "captures of several batch sizes fit equally and the trace does not say which ran",
                    events, gpu)
            continue
        g, pairs, order = min(best, key=lambda b: (b[0] - nxt) % len(graphs))
        nxt = (g + 1) % len(graphs)
        by_position += int(-1 in cap_tokens[g])
        r = np.array([p[0] for p in pairs], dtype=np.int64)
        c = np.array([p[1] for p in pairs], dtype=np.int64)
        matches.append(Match(la, order[r], graphs[g].op[c], graphs[g].source))
        left = np.setdiff1d(order, order[r])
        if len(left):
            unaligned.append(left)
            _reason(reasons, "kernels the capture does not have (unpaired by the alignment)", left, gpu)
    loose = np.concatenate(unaligned) if unaligned else np.zeros(0, dtype=np.int64)
    aligned_ev = sum(len(m.events) for m in matches)
    n_events = sum(len(v[-1]) for v in launches.values())
    new_trace, new_links = inject(trace, links, matches, caps, loose)
    return new_trace, new_links, {
        "graph_launches": len(launches), "aligned_launches": len(matches),
        "unaligned_launches": len(launches) - len(matches), "by_position": by_position,
        "captured_graphs": len(graphs), "replay_events": n_events, "aligned_events": aligned_ev,
        "aligned_time_us": float(sum(gpu.dur[m.events].sum() for m in matches)),
        "unaligned": [{"reason": k, "events": v[0], "time_us": v[1]} for k, v in reasons.items()],
    }


def _note(info: dict) -> str:
    """One line for the report: which capture files, and how much of the replay they explained."""
    used = ", ".join(f"{f['file']}" + (f" (batch {f['batch_size']}" + (f", {f['mode']})" if f["mode"] else ")")
                                       if f["batch_size"] is not None else "")
                     for f in info["files"][:4]) + (", ..." if len(info["files"]) > 4 else "")
    return (f"{info['aligned_launches']} of {info['graph_launches']} graph launches "
            f"({info['aligned_events']:,} of {info['replay_events']:,} replayed events) aligned with "
            f"{info['captured_graphs']} captured graph(s) from {used}")


def _fits(toks: tuple[int, ...], cap_tokens: list[tuple[int, ...]]) -> list[tuple[int, list]]:
    """The captured graphs this sequence aligns with best (most pairs): [(graph, pairs)]."""
    from traceana.link.replay.align import align, tolerance

    out: list[tuple[int, list]] = []
    for g, ct in enumerate(cap_tokens):
        pairs = align(toks, ct, tolerance(len(toks), len(ct)))
        if pairs is None:
            continue
        if not out or len(pairs) > len(out[0][1]):
            out = [(g, pairs)]
        elif len(pairs) == len(out[0][1]):
            out.append((g, pairs))
    return out


_BATCH = re.compile(r"(?:\bbs\s*=\s*|\bbatch(?:_size)?\s*[=:_ ]\s*|^execute_)([0-9]{1,9})(?![0-9])")


def _by_batch_size(trace: Trace, la: int, best: list, graphs: list[Captured]) -> list:
    """Among equally good captures of different batch sizes, those whose batch size the step's
    annotation names (vLLM's `execute_N_...`, SGLang's `step[DECODE bs=N]`)."""
    sizes = {graphs[g].batch_size for g, _, _ in best}
    if len(sizes) < 2:
        return best
    an = trace.annotations
    ts = float(trace.launches.ts[la])
    around = np.flatnonzero((an.ts <= ts) & (an.end >= ts))
    named = {int(m.group(1)) for i in around.tolist() for m in _BATCH.finditer(trace.names[int(an.name[i])])}
    keep = [b for b in best if graphs[b[0]].batch_size in named]
    return keep or best


def _reason(reasons: dict[str, list], why: str, events: np.ndarray, gpu) -> None:
    r = reasons.setdefault(why, [0, 0.0])
    r[0] += len(events)
    r[1] += float(gpu.dur[events].sum())
