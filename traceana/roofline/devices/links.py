"""How each device talks to the host and to its peers, and its L2 size (links.csv, hand-written).

Host link and peer link figures are theoretical *per direction*: PCIe x16 carries 15.75 GB/s
(3.0), 31.5 GB/s (4.0) or 63 GB/s (5.0) each way, and datasheets quote NVLink / Infinity Fabric
as the bidirectional total of all a GPU's links, so the table holds half of it. A host<->device
copy is held to host_link_gbps, a peer (device-to-device across GPUs) copy to peer_link_gbps;
a single copy moves one way, so the per-direction figure is its roof. Blank cells are not
confirmed (None), never 0. Every row names its source.
"""

from __future__ import annotations

import csv
import functools
import io
from types import MappingProxyType
from typing import Any, Mapping

from traceana.roofline.devices.table import data_text

FIELDS = ("l2_bytes", "host_link", "host_link_gbps", "peer_link", "peer_link_gbps", "links_source")


def _num(v: str) -> float | None:
    try:
        x = float(v)
    except ValueError:
        return None
    return x if x > 0 else None


@functools.lru_cache(maxsize=1)
def load_links() -> Mapping[str, Mapping[str, Any]]:
    """table key -> {l2_bytes, host_link, host_link_gbps, peer_link, peer_link_gbps, links_source}."""
    raw = data_text("links.csv")
    out = {}
    for r in csv.DictReader(io.StringIO(raw)):
        l2 = _num(r["l2_mb"])
        peer = r["peer_link"].strip()
        out[r["key"]] = MappingProxyType({
            "l2_bytes": int(l2 * 2**20) if l2 else None,
            "host_link": r["host_link"].strip() or None,
            "host_link_gbps": _num(r["host_link_gbps"]),
            "peer_link": peer if peer and peer != "none" else None,
            "peer_link_gbps": _num(r["peer_link_gbps"]),
            "links_source": r["source"].strip(),
        })
    return MappingProxyType(out)


def links_for(key: str | None, host_link_gbps: float | None = None) -> dict[str, Any]:
    """The link facts of a table row (all None for an unknown device); a user's --host-link-gbps
    replaces the table's host link figure."""
    row = dict(load_links().get(key or "", {})) or dict.fromkeys(FIELDS)
    if host_link_gbps is not None:
        row["host_link_gbps"] = host_link_gbps
        row["host_link"] = f"{host_link_gbps:g} GB/s (--host-link-gbps)"
    return row
