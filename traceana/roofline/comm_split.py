"""Every collective row: which link it crosses, and its time split into transfer and wait.

Definitions (the same words and meanings as the cross-rank report, traceana/ranks/cross_rank.py):

  transfer  the part of a collective's time that moving its data needs: the bytes the algorithm
            sends per rank (nccl-tests bus bytes, cost/families/comm.py) at the link's bandwidth
            per direction. It is the least time the collective can take on that link.
  wait      the rest of the collective's time (mean time - transfer, never below 0): waiting for
            the other ranks to arrive (imbalance, a straggler), plus per-call latency and
            protocol overhead. Overlap cannot recover it; balancing the ranks can.
  The cross-rank report measures the same split from the other side: a rank's wait in a
  collective is its time there less the fastest rank's, the rest its transfer.

Which link (the device table holds the peer link, traceana/roofline/devices/links.csv, never the network):

  a group within one host     the peer link (NVLink / Infinity Fabric, per direction per GPU);
                              a device without one sends peer traffic over PCIe (its host link)
  a group spanning hosts      the network: its bandwidth is not in the device table, so the
                              transfer is unknown unless --network-gbps gives it (then an
                              all_to_all sends its off-host share over the network and the rest
                              over the peer link; any other algorithm's bus bytes cross it)
  cannot tell                 the peer link, marked assumed: the transfer is then the least the
                              collective can take (across hosts it would be longer)

Where the group sits: the trace lists the GPUs its process saw (deviceProperties: H GPUs on the
host) and distributedInfo the world size and, in newer traces, every process group's ranks
(pg_config). Ranks are taken to fill hosts in order (torchrun: rank = host * H + local rank). A
group of n ranks is within one host when every recorded group of n ranks holding this rank is, or
the whole world fits in H; it spans hosts when n > H (H >= 2: a process that sees one GPU says
nothing about its host), or when every recorded group of n ranks holding this rank does.

A collective row with no recorded size is still a communication row: bound "communication",
sized False, transfer and wait unknown, its reason "size not recorded" (its opaque cause stays in
the coverage table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from traceana import units as u
from traceana.link.comm_kernels import is_comm_kernel, is_comm_op
from traceana.link.steps import collective_kind
from traceana.meter import OFF, Meter

_KIND_ALGO = {"AllReduce": "all_reduce", "ReduceScatter": "reduce_scatter", "AllGather": "all_gather",
              "AllToAll": "all_to_all", "Broadcast": "broadcast", "SendRecv": "send_recv",
              "Dispatch": "all_to_all", "Combine": "all_to_all", "Send": "send_recv", "Recv": "send_recv",
              "Reduce": "reduce"}
_OP_ALGO = (("alltoall", "all_to_all"), ("all_to_all", "all_to_all"), ("dispatch", "all_to_all"),
            ("combine", "all_to_all"), ("reduce_scatter", "reduce_scatter"), ("allgather", "all_gather"),
            ("all_gather", "all_gather"), ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"),
            ("broadcast", "broadcast"), ("send", "send_recv"), ("recv", "send_recv"), ("barrier", "barrier"))


def topology(trace: Any) -> dict:
    """What the trace says about where the ranks sit: GPUs this process saw, world size, rank,
    and the recorded process groups' ranks."""
    d = trace.distributed or {}

    def intval(v: Any) -> int | None:
        return v if type(v) is int and v >= 0 else None

    groups = []
    for pg in d.get("pg_config") or []:
        ranks = pg.get("ranks") if isinstance(pg, dict) else None
        if isinstance(ranks, list) and ranks and all(type(r) is int and r >= 0 for r in ranks):
            groups.append(tuple(ranks))
    return {"host_gpus": len(trace.device_properties) or None, "world_size": intval(d.get("world_size")),
            "rank": intval(d.get("rank")), "groups": groups}


def placement(n: int | None, topo: dict) -> tuple[str, str]:
    """("host" | "network" | "unknown", why) for a group of n ranks holding this rank."""
    h, w, me = topo.get("host_gpus"), topo.get("world_size"), topo.get("rank")
    if not n or n <= 1:
        return "host", "a group of one rank sends nothing"
    mine = [g for g in topo.get("groups") or [] if len(g) == n and (me is None or me in g)]
    if h and h >= 2 and mine:
        spans = {len({r // h for r in g}) > 1 for g in mine}
        if spans == {False}:
            return "host", (f"every recorded group of {n} ranks holding this rank lies within one host's {h} GPUs "
                            f"(distributedInfo pg_config; ranks fill hosts in order)")
        if spans == {True}:
            return "network", (f"every recorded group of {n} ranks holding this rank spans hosts of {h} GPUs "
                               f"(distributedInfo pg_config; ranks fill hosts in order)")
    if h and h >= 2 and n > h:
        return "network", f"its {n} ranks do not fit in the {h} GPUs this host has (deviceProperties)"
    if h and w and w <= h:
        return "host", f"the whole world of {w} ranks fits in the {h} GPUs this host has (deviceProperties)"
    if not h or h < 2:
        return "unknown", "the trace does not say how many GPUs share a host (one device in deviceProperties)"
    return "unknown", (f"its {n} ranks fit in this host's {h} GPUs, but which ranks it holds is not recorded "
                       f"(world size {w})" if w else f"its {n} ranks fit in this host's {h} GPUs, but which ranks "
                                                         "it holds is not recorded")


def _peer(device: dict) -> tuple[str | None, float | None, str]:
    """The link between GPUs of one host: (name, GB/s per direction, how it was chosen)."""
    if device.get("peer_link_gbps"):
        return device.get("peer_link"), device["peer_link_gbps"], "the peer link"
    if device.get("host_link_gbps"):
        return device.get("host_link"), device["host_link_gbps"], "no peer link in the device table: peer traffic " \
                                                                  "crosses the host link (PCIe)"
    return None, None, "the device table has no peer or host link figure for this device"


def is_comm_row(row: dict) -> bool:
    """A collective / p2p / expert-parallel op, or an op whose time is mostly communication kernels."""
    if is_comm_op(str(row.get("name") or "")) or is_comm_kernel(str(row.get("name") or "")):
        return True
    ks = row.get("kernels") or []
    total = sum(k["time_us"] for k in ks)
    comm = sum(k["time_us"] for k in ks if is_comm_kernel(k["name"]))
    return total > 0 and comm >= total / 2


def algorithm_of(name: str, kernels: Sequence[str]) -> str | None:
    """The collective an unsized row ran, from its op name, else its kernels' names."""
    low = name.lower()
    if is_comm_op(name):
        for frag, algo in _OP_ALGO:
            if frag in low:
                return algo
    for k in (*kernels, name):  # NCCL's SendRecv kernel runs all-to-all and p2p alike: it says neither
        kind = collective_kind(k)
        if kind in _KIND_ALGO and kind != "SendRecv":
            return _KIND_ALGO[kind]
    return None


def issuer(trace: Any, links: Any, events: Any, meter: Meter = OFF) -> str | None:
    """The name of the communication op that issued a row's first kernel: the op itself, or the
    nearest op enclosing it on its thread that names a collective (record_param_comms recorded
    under c10d::allreduce_ says all_reduce through it)."""
    if trace is None or events is None or not len(events):
        return None
    op = int(links.gpu_op[events[0]])
    if op < 0:
        return None
    ops, names = trace.ops, trace.names
    meter.visit("cost", len(ops))  # a scan of the ops per unsized collective signature
    enc = np.flatnonzero((ops.thread == ops.thread[op]) & (ops.ts <= ops.ts[op]) & (ops.end >= ops.end[op]))
    enc = enc[np.argsort(-ops.ts[enc], kind="stable")]  # innermost first
    for j in enc.tolist():
        n = names[int(ops.name[j])]
        if is_comm_op(n) and algorithm_of(n, ()) is not None:
            return n
    return None


def finish(row: dict, device: dict, topo: dict, network_gbps: float | None = None, trace: Any = None,
           links: Any = None, events: Any = None, meter: Meter = OFF) -> None:
    """Make a collective row a communication row with its link and transfer / wait (in place);
    rows that are not communication are left as they are. trace / links / events (the row's GPU
    events) let an unsized row name the collective that issued it."""
    if row.get("bound") != "communication" and not is_comm_row(row):
        return
    comm = row.get("comm")
    sized = bool(comm) and comm.get("bytes_per_rank") is not None
    if not sized:
        _unsized(row, device, topo, issuer(trace, links, events, meter))
        return
    n = comm.get("group_size")
    where, why = placement(n, topo)
    if comm.get("group_assumed") and where == "network":  # only the assumed world size would span hosts
        where, why = "unknown", (f"its group size was not recorded (taken as the world size {n}, which would span "
                                 f"hosts: {why})")
    mean = row["mean_time_us"]
    algo = comm.get("algorithm")
    per_rank = float(comm["bytes_per_rank"])
    link, gbps, how = _peer(device)
    out: dict[str, Any] = {"sized": True, "placement": where, "placement_why": why}
    if n is not None and n <= 1:
        transfer: float | None = 0.0
        out.update({"link": None, "link_kind": "peer_link", "link_gbps": None, "link_why": why})
    elif where == "network":
        out.update({"link_kind": "network", "link": "network", "link_gbps": network_gbps})
        if network_gbps:
            transfer, basis = _network_transfer(algo, n, comm.get("msg_bytes"), per_rank, topo, network_gbps, gbps)
            out["link_why"] = f"the group spans hosts ({why}): {basis}"
        else:
            transfer = None
            out["link_why"] = (f"the group spans hosts ({why}): the network bounds it, and its bandwidth is not in "
                               "the device table (give it with --network-gbps), so the transfer is unknown")
    else:
        out.update({"link_kind": "peer_link", "link": link, "link_gbps": gbps})
        transfer = per_rank / (gbps * 1e3) if gbps else None
        if where == "host":
            out["link_why"] = f"the group is within one host ({why}): {how}"
        else:
            out["link_assumed"] = True
            out["link_why"] = (f"taken as within one host ({why}): {how}, the fastest link the group can use, so "
                               "the transfer is the least it can take (across hosts the network bounds it)")
        if not gbps:
            out["link_why"] += "; with no link figure the transfer is unknown"
    wait = max(mean - transfer, 0.0) if transfer is not None else None
    out.update({"transfer_us": transfer, "wait_us": wait,
                "transfer_per_kernel_us": (transfer / max(row.get("kernel_count") or 1.0, 1e-9)
                                           if transfer is not None else None)})
    if transfer is not None and transfer > mean * 1.0001 and mean > 0:
        out["over_link"] = True
    comm.pop("link_note", None)
    comm.update(out)
    if comm.get("link_gbps") and comm.get("busbw_gbps") is not None and out["link_kind"] == "peer_link":
        comm["link_pct"] = comm["busbw_gbps"] / comm["link_gbps"] * 100.0
    else:
        comm.pop("link_pct", None)
    comm["text"] = _text(row, comm)
    row["bound"] = "communication"
    row["roof_kind"] = out["link_kind"]


def _network_transfer(algo: str | None, n: int, msg: float | None, per_rank: float, topo: dict, net: float,
                      peer: float | None) -> tuple[float, str]:
    """Transfer time across hosts at `net` GB/s, and the arithmetic in words."""
    h = topo.get("host_gpus") or 1
    if algo == "all_to_all" and msg and peer and h < n:
        local = min(h, n)
        off = msg * (n - local) / n  # to the ranks on other hosts
        on = msg * (local - 1) / n  # to the other ranks on this host
        t_off, t_on = off / (net * 1e3), on / (peer * 1e3)
        return max(t_off, t_on), (f"all_to_all: {u.nbytes(off)} to the {n - local} ranks on other hosts at "
                                  f"{net:g} GB/s (--network-gbps) and {u.nbytes(on)} to the {local - 1} on this host "
                                  f"at {peer:g} GB/s; the slower side sets the transfer")
    return per_rank / (net * 1e3), f"{u.nbytes(per_rank)} per rank crosses the network at {net:g} GB/s (--network-gbps)"


def _unsized(row: dict, device: dict, topo: dict, issued_by: str | None = None) -> None:
    """A collective whose size the trace did not record: a communication row that says so."""
    names = [k["name"] for k in row.get("kernels") or []]
    algo = algorithm_of(issued_by or str(row.get("name") or ""), names)
    n = topo.get("world_size")
    where, why = placement(n, topo) if n else ("unknown", "no group size recorded")
    if where == "network":  # only the world size, taken for the unrecorded group, would span hosts
        where, why = "unknown", f"its group size was not recorded (the world of {n} ranks would span hosts: {why})"
    link, gbps, _ = _peer(device)
    reason = row.get("reason") or "its message size was not recorded"
    row.update({"bound": "communication", "roof_kind": "network" if where == "network" else "peer_link"})
    row["comm"] = {"sized": False, "algorithm": algo, "issued_by": issued_by, "group_size": None,
                   "transfer_us": None, "wait_us": None,
                   "transfer_per_kernel_us": None, "placement": where, "placement_why": why,
                   "link_kind": row["roof_kind"], "link": "network" if where == "network" else link,
                   "link_gbps": None if where == "network" else gbps,
                   "text": (f"{algo or 'collective'}: size not recorded, so its transfer and wait cannot be told "
                            f"apart ({reason})")}
    row["reason"] = f"size not recorded: {reason}"


def _text(row: dict, comm: dict) -> str:
    """The split in one sentence, numbers as in the row."""
    algo = comm.get("algorithm") or "collective"
    mean = row["mean_time_us"]
    t, w = comm.get("transfer_us"), comm.get("wait_us")
    if t is None:
        return f"{algo}: {u.nbytes(comm['bytes_per_rank'])} per rank; transfer unknown ({comm['link_why']})"
    if comm.get("group_size") is not None and comm["group_size"] <= 1:
        return f"{algo} over a group of one rank: nothing to send; its {u.us(mean)} is all overhead"
    at = f"{comm['link']}'s {comm['link_gbps']:g} GB/s" if comm.get("link_gbps") else "the network"
    out = (f"{algo}: {u.nbytes(comm['bytes_per_rank'])} per rank at {at} = {u.us(t)} transfer; "
           f"the other {u.us(w)} of its {u.us(mean)} per call is wait (for the other ranks, and per-call latency)")
    if comm.get("over_link"):
        out += "; it ran faster than that link allows: the group is smaller or the link faster than the table says"
    if comm.get("link_assumed"):
        out += " (link assumed: the group's hosts are not recorded)"
    return out
