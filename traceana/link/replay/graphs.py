"""What a graph capture trace knows: per captured graph, its nodes in capture order, each the
kernel (or copy) a launch put into the graph and the op that launched it; and, in the replay,
the GPU events each graph launch ran.

A capture is the span between a stream's BeginCapture and EndCapture runtime calls on one
thread (torch.cuda.graph, vLLM, SGLang all capture this way): every kernel launch, memcpy or
memset issued in it becomes a node. Captured kernels do not run, so the capture trace has no
kernel events: the kernel's name comes from the launch event's `kernel` arg (roctracer writes
it; CUPTI does not, so CUDA captures align by position only, see replay.align).
"""

from __future__ import annotations


import msgspec
import numpy as np

from traceana.link.attribute import Links, graph_launches
from traceana.load.model import Trace
from traceana.link.replay.align import KIND_TOKENS, UNNAMED

MEMCPY, MEMSET = KIND_TOKENS


class Captured(msgspec.Struct, frozen=True):
    """One captured graph."""

    source: int  # index into the capture files used
    index: int  # its place among the graphs of that file, in capture order
    names: tuple[str | None, ...]  # kernel name per node (None: a copy, or a kernel the trace does not name)
    kinds: tuple[int, ...]  # 0 kernel, 1 memcpy, 2 memset per node
    op: np.ndarray  # int64 capture-trace op index per node, -1 when the launch had no op
    batch_size: int | None
    mode: str | None


def launch_kind(name: str) -> int | None:
    """0 kernel launch, 1 memcpy, 2 memset, None for other runtime calls (a graph node is made
    only by these)."""
    if "Graph" in name:
        return None
    if "LaunchKernel" in name or "LaunchCooperativeKernel" in name:
        return 0
    if "Memcpy" in name:
        return 1
    if "Memset" in name:
        return 2
    return None


def captured_graphs(trace: Trace, links: Links, source: int, batch_size: int | None = None,
                    mode: str | None = None) -> list[Captured]:
    """The graphs captured in this trace, in capture order."""
    la, names = trace.launches, trace.names
    if not len(la):
        return []
    begin = np.array(["BeginCapture" in n for n in names], dtype=bool)[la.name]
    end = np.array(["EndCapture" in n for n in names], dtype=bool)[la.name]
    kind_of_name = np.array([(-1 if (k := launch_kind(n)) is None else k) for n in names], dtype=np.int8)
    kind = kind_of_name[la.name]
    out: list[Captured] = []
    order = np.lexsort((la.ts, la.thread))
    open_at: dict[int, int] = {}  # thread -> position in `order` of its open BeginCapture
    for pos, i in enumerate(order.tolist()):
        th = int(la.thread[i])
        if begin[i]:
            open_at[th] = pos
        elif end[i] and th in open_at:
            start = open_at.pop(th)
            nodes = [j for j in order[start + 1:pos].tolist() if kind[j] >= 0]
            if nodes:
                out.append(_graph(trace, links, nodes, kind, source, len(out), batch_size, mode))
    return out


def _graph(trace: Trace, links: Links, nodes: list[int], kind: np.ndarray, source: int, index: int,
           batch_size: int | None, mode: str | None) -> Captured:
    la, names = trace.launches, trace.names
    kinds = tuple(int(kind[j]) for j in nodes)
    knames = tuple(names[int(la.kernel[j])] if k == 0 and la.kernel[j] >= 0 else None
                   for j, k in zip(nodes, kinds))
    return Captured(source, index, knames, kinds, links.launch_op[np.array(nodes, dtype=np.int64)],
                    batch_size, mode)


def tokens(names: tuple[str | None, ...], kinds: tuple[int, ...], vocab: dict[str, int]) -> tuple[int, ...]:
    """Token per node or event: a code per kernel name (shared by both traces through vocab),
    MEMCPY / MEMSET for copies, UNNAMED for a kernel whose name is unknown."""
    out = []
    for nm, k in zip(names, kinds):
        if k == 1:
            out.append(MEMCPY)
        elif k == 2:
            out.append(MEMSET)
        elif nm is None:
            out.append(UNNAMED)
        else:
            key = " ".join(nm.split())
            code = vocab.get(key)
            if code is None:
                code = vocab[key] = len(vocab)
            out.append(code)
    return tuple(out)


def replayed(trace: Trace, links: Links) -> dict[int, list[np.ndarray]]:
    """Graph launch index -> its GPU event indices, in the orders worth trying: by graph node id
    when every event records one (ids are given as nodes are added, i.e. in capture order), then
    by start time."""
    gpu = trace.gpu
    ev = np.flatnonzero((links.gpu_op < 0) & (links.gpu_launch >= 0))
    if len(ev) == 0:
        return {}
    ev = ev[graph_launches(trace)[links.gpu_launch[ev]]]
    ev = ev[np.lexsort((gpu.stream[ev], gpu.ts[ev], links.gpu_launch[ev]))]
    out: dict[int, list[np.ndarray]] = {}
    if len(ev) == 0:
        return out
    la = links.gpu_launch[ev]
    cuts = np.flatnonzero(np.diff(la)) + 1
    for part in np.split(ev, cuts):
        orders = []
        node = gpu.graph_node[part]
        if (node >= 0).all():
            by_node = part[np.argsort(node, kind="stable")]
            if not np.array_equal(by_node, part):
                orders.append(by_node)
        orders.append(part)
        out[int(links.gpu_launch[part[0]])] = orders
    return out
