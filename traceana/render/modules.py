"""The by-module table as each format shows it (from the analysis' `modules` section), and the one-line
"where" (module, user frame) of an op row or a finding. Display strings only; escaping is the renderer's
(jinja2 autoescape for HTML, md_text for markdown)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana.render.views import fmt_pct, fmt_sig, fmt_time_us
from traceana.document import mapping, seq
from traceana.units import num, text

#: The HTML tree shows at most this many modules (the JSON has them all) ...
HTML_NODES = 400
#: ... and leaves out those under this share of the device time.
HTML_MIN_PCT = 0.05
#: The markdown lists at most this many lines, of modules over MD_MIN_PCT of the device time.
MD_NODES = 14
MD_MIN_PCT = 2.0
#: names of a chain of modules shown as one markdown item, at most (its first and last ones)
MD_CHAIN = 16
#: module levels the HTML tree draws (an analysis has at most modules.paths.MAX_DEPTH; a hand-made
#: document may nest its nodes deeper: those are not drawn, as the template nests one element a level)
HTML_DEPTH = 64


def short_path(path: Any, keep: int = 2) -> str:
    """The last `keep` steps of a module path ("…/LlamaAttention/Linear")."""
    parts = text(path, 2000).split("/")
    return ("…/" if len(parts) > keep else "") + "/".join(parts[-keep:])


def where(x: Mapping[str, Any], keep: int = 2) -> str:
    """An op row's or finding's module and user frame in one line: "…/LlamaAttention/Linear ×4 ·
    modeling_llama.py:232"; "" when neither is known."""
    bits = []
    cls = text(x.get("module_class"), 2000)
    if cls:
        n = num(x.get("module_instances"))
        bits.append(short_path(cls, keep) + (f" ×{int(n)}" if n and n > 1 else ""))
    src = text(x.get("source"), 400)
    if src:
        bits.append(src.rsplit("/", 1)[-1])
    return " · ".join(bits)


def where_title(x: Mapping[str, Any]) -> str:
    """The full module path, instance, user frame and phase, for a tooltip."""
    lines = []
    if text(x.get("module_class"), 2000):
        lines.append(f"module: {text(x.get('module_class'), 2000)}")
        n, share = num(x.get("module_instances")), num(x.get("module_share"))
        if n:
            lines.append(f"instances: {int(n)} (most time: {text(x.get('module'), 2000)})")
        if share is not None and share < 0.995:
            lines.append(f"share of this op's time under that module: {fmt_pct(share * 100)}")
    if text(x.get("source"), 400):
        fn = text(x.get("source_function"), 200)
        lines.append(f"code: {text(x.get('source'), 400)}" + (f" ({fn})" if fn else ""))
    if text(x.get("phase"), 20):
        lines.append(f"phase: {text(x.get('phase'), 20)}")
    return "\n".join(lines)


def _node_line(n: Mapping[str, Any]) -> dict[str, str]:
    fwd, bwd, opt = mapping(n.get("forward")), mapping(n.get("backward")), mapping(n.get("optimizer"))
    return {
        "time": fmt_time_us(n.get("time_us")), "pct": fmt_pct(n.get("pct")),
        "fwd": fmt_time_us(fwd.get("time_us")) if num(fwd.get("time_us")) else "—",
        "bwd": fmt_time_us(bwd.get("time_us")) if num(bwd.get("time_us")) else "—",
        "opt": fmt_time_us(opt.get("time_us")) if num(opt.get("time_us")) else "",
        "tflops": fmt_sig(n.get("achieved_tflops")) if num(n.get("achieved_tflops")) else "—",
        "gbps": fmt_sig(n.get("achieved_gbps")) if num(n.get("achieved_gbps")) else "—",
        "bound": text(n.get("bound"), 20).replace("_", " ") or "—",
        "fwd_bound": text(fwd.get("bound"), 20).replace("_", " "),
        "bwd_bound": text(bwd.get("bound"), 20).replace("_", " "),
    }


def modules_view(a: Mapping[str, Any], link) -> dict[str, Any] | None:
    """The HTML section: the note, and the tree as nested nodes ({name, title, cells, ops, children, open})."""
    m = mapping(a.get("modules"))
    if not m:
        return None
    recorded = bool(text(m.get("source")))
    if recorded and not num(mapping(m.get("total")).get("time_us")):
        return None  # stacks, but no time to share out
    nodes = [n for n in seq(m.get("tree")) if isinstance(n, Mapping)]
    keep = sorted((i for i, n in enumerate(nodes) if (num(n.get("pct")) or 0.0) >= HTML_MIN_PCT),
                  key=lambda i: -(num(nodes[i].get("time_us")) or 0.0))[:HTML_NODES]
    kept = set(keep)
    # a kept node's ancestors are kept too (a child never takes more time than its parent, so they are)
    built: dict[int, dict[str, Any]] = {}
    level: dict[int, int] = {}
    dropped: set[int] = set()
    roots: list[dict[str, Any]] = []
    for i, n in enumerate(nodes):
        if i not in kept:
            continue
        p = int(num(n.get("parent")) if num(n.get("parent")) is not None else -1)
        if p in dropped or (p in kept and p not in built):  # under a node not drawn (too deep, or after it)
            dropped.add(i)
            continue
        level[i] = level[p] + 1 if p in built else 0
        if level[i] >= HTML_DEPTH:
            dropped.add(i)
            continue
        item = {"name": text(n.get("name"), 300), "title": text(n.get("path"), 3000),
                "cells": _node_line(n), "ops": [link(o) for o in seq(n.get("ops"))[:5]], "children": [],
                "open": False}
        built[i] = item
        (built[p]["children"] if p in built else roots).append(item)
    _open(roots)
    other = [{"name": text(o.get("label"), 300), "cells": _node_line(o)} for o in seq(m.get("other"))
             if isinstance(o, Mapping)] if recorded else []  # without stacks every op is "outside modules"
    by_class = [{"name": text(r.get("class"), 200), "instances": int(num(r.get("instances")) or 0),
                 "cells": _node_line(r)} for r in seq(m.get("by_class"))[:12] if isinstance(r, Mapping)]
    by_source = [{"name": text(s.get("source"), 400), "function": text(s.get("function"), 200),
                  "module": short_path(s.get("module"), 3) if text(s.get("module")) else "",
                  "module_title": text(s.get("module"), 3000), "cells": _node_line(s)}
                 for s in seq(m.get("by_source"))[:15] if isinstance(s, Mapping)]
    return {"note": text(m.get("note"), 600), "backward": text(m.get("backward"), 600),
            "what": "CPU self time" if m.get("time") == "cpu_self" else "Device time",
            "source": text(m.get("source"), 40), "roots": roots, "other": other, "by_source": by_source,
            "by_class": by_class,
            "shown": len(built), "total": len(nodes)}


def _open(level: list[dict[str, Any]]) -> None:
    """Open the top modules, and below an open one its submodules when they are few (a model's dozens of
    layers stay folded, one click away). A stack, not recursion: the depth is the document's."""
    todo = list(level)
    while todo:
        item = todo.pop()
        item["open"] = True
        if 0 < len(item["children"]) <= 4:
            todo.extend(item["children"])


def markdown_items(a: Mapping[str, Any], limit: int = MD_NODES,
                   min_pct: float = MD_MIN_PCT) -> list[tuple[int, str, str, bool]]:
    """(depth, name, figures, is a module) of the modules with the most device time (over `min_pct`, at most
    `limit`), depth first, a chain of modules where one holds (nearly) all its parent's time as one item; then
    the time outside modules. Unescaped: the renderer escapes."""
    m = mapping(a.get("modules"))
    nodes = [n for n in seq(m.get("tree")) if isinstance(n, Mapping)]
    if not nodes:
        return []
    children: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        children.setdefault(int(num(n.get("parent")) if num(n.get("parent")) is not None else -1), []).append(i)
    out: list[tuple[int, str, str, bool]] = []
    stack = [(i, 0) for i in reversed(children.get(-1, []))]
    seen: set[int] = set()  # (a hand-made document's parents may loop)
    while stack:  # depth first, a stack: the depth is the document's
        i, depth = stack.pop()
        if i in seen or len(out) >= limit or (num(nodes[i].get("pct")) or 0.0) < min_pct:
            continue
        seen.add(i)
        names, j = [text(nodes[i].get("name"), 120)], i
        while (len(children.get(j, [])) == 1 and children[j][0] not in seen
               and _same_time(nodes[j], nodes[children[j][0]])):
            j = children[j][0]
            seen.add(j)
            names.append(text(nodes[j].get("name"), 120))
        if len(names) > MD_CHAIN:  # (a hand-made document's chain: its ends)
            names = names[:MD_CHAIN // 2] + ["…"] + names[-(MD_CHAIN // 2):]
        out.append((depth, "/".join(names), _md_cells(nodes[j]), True))
        stack.extend((k, depth + 1) for k in reversed(children.get(j, [])))
    for o in seq(m.get("other")):
        if isinstance(o, Mapping) and (num(o.get("pct")) or 0.0) >= min_pct and len(out) < limit + 3:
            out.append((0, text(o.get("label"), 200), _md_cells(o), False))
    return out


def _same_time(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    ta, tb = num(a.get("time_us")) or 0.0, num(b.get("time_us")) or 0.0
    return ta > 0 and tb >= 0.99 * ta


def _md_cells(n: Mapping[str, Any]) -> str:
    c = _node_line(n)
    bits = [f"{c['time']} ({c['pct']})"]
    if c["bwd"] != "—":
        bits.append(f"fwd {c['fwd']} / bwd {c['bwd']}")
    if c["opt"]:
        bits.append(f"optimizer {c['opt']}")
    if c["tflops"] != "—":
        bits.append(f"{c['tflops']} TFLOP/s")
    if c["bound"] != "—":
        bits.append(c["bound"])
    return ", ".join(bits)


def class_items(a: Mapping[str, Any], limit: int = 8) -> list[tuple[str, str]]:
    """(class x instances, figures) of the module classes with the most device time, all instances together,
    leaving out the wrappers (a class holding >= 95% of the largest class's time: the model, its layer
    stack) that say nothing the tree does not. Unescaped: the renderer escapes."""
    rows = [r for r in seq(mapping(a.get("modules")).get("by_class")) if isinstance(r, Mapping)]
    if not rows:
        return []
    top = max(num(r.get("time_us")) or 0.0 for r in rows)
    out = []
    for r in rows:
        t = num(r.get("time_us")) or 0.0
        if top > 0 and t >= 0.95 * top and len(rows) > 1:
            continue
        if len(out) >= limit or (num(r.get("pct")) or 0.0) < MD_MIN_PCT:
            break
        n = int(num(r.get("instances")) or 0)
        out.append((f"{text(r.get('class'), 120)}" + (f" ×{n:,}" if n > 1 else ""), _md_cells(r)))
    return out

