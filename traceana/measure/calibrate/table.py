"""The printed table of a profile: each figure measured vs datasheet, % of spec (pure)."""

from __future__ import annotations

LABEL = {
    "gemm.fp64": "GEMM fp64", "gemm.fp32": "GEMM fp32", "gemm.bf16": "GEMM bf16", "gemm.tf32_tc": "GEMM tf32 (TC)",
    "gemm.bf16_tc": "GEMM bf16 (TC)", "gemm.fp16_tc": "GEMM fp16 (TC)", "gemm.fp8_tc": "GEMM fp8 (TC)",
    "dram.copy": "DRAM copy", "dram.triad": "DRAM triad", "cache.copy": "cache copy",
    "dispatch.overhead": "dispatch / op", "launch.latency": "launch / kernel",
    "h2d.pinned": "host->dev pinned", "h2d.pageable": "host->dev pageable", "d2h.pinned": "dev->host pinned",
    "d2h.pageable": "dev->host pageable", "peer.copy": "peer copy",
}


def _num(v: float) -> str:
    return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"


def lines(profile: dict) -> list[str]:
    dev = profile.get("device") or {}
    cpu = dev.get("kind") == "cpu"
    head = [f"{dev.get('name')} ({dev.get('kind')}"
            + (f", {dev.get('driver')}" if dev.get("driver") else "")
            + f", torch {dev.get('torch')}, {dev.get('threads')} CPU thread(s)); {profile.get('mode')} run, "
            f"{profile.get('duration_s', 0):.1f} s"]
    rows = [("figure", "measured", "unit", "spread", "datasheet", "% of spec", "size")]
    figs = profile.get("figures") or {}
    order = list(LABEL)
    for key, f in sorted(figs.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])):
        sheet = f.get("datasheet")
        spread = f"{f['spread_pct']:.1f}%" + (" unusable" if f.get("unusable") else " unstable" if f.get("unstable") else "")
        rows.append((LABEL.get(key, key), _num(f["value"]), f["unit"], spread,
                     _num(sheet) if sheet else ("unknown (CPU)" if cpu else "unknown"),
                     f"{f['pct_of_datasheet']:.0f}%" if f.get("pct_of_datasheet") is not None else "-",
                     f["size"]))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    body = ["  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:6], widths[1:6])), r[6]]).rstrip()
            for r in rows]
    tail = [f"skipped {k}: {why}" for k, why in (profile.get("skipped") or {}).items()]
    tail += [f"unusable {k} (report --profile will not use it): {f['unusable']}" for k, f in figs.items()
             if f.get("unusable")]
    tail += list(profile.get("notes") or [])
    tail.append("spread = (max - min) / median of the repeats; value = the median; a figure whose spread is over "
                "25%, or that contradicts another (fp32 GEMM under half fp64, a GEMM below what DRAM alone feeds, "
                "copy and triad 2x apart), is measured again (twice at most) and marked unusable if it stays so")
    return head + [""] + body + [""] + tail
