"""`traceana devices`: list the device table, or explain which row a device name maps to."""

from __future__ import annotations

import json
from typing import Any

import click

from traceana.roofline.devices import device_rows, match_device
from traceana.roofline.devices.table import load_aliases

# (header, getter) for the listing; peaks are dense TFLOP/s, tensor-core rates for tf32..fp8.
_PEAK_COLUMNS = (("fp32", "fp32"), ("tf32", "tf32_tc"), ("bf16", "bf16_tc"),
                 ("fp16", "fp16_tc"), ("fp8", "fp8_tc"))
_FOOTER = (
    "TFLOP/s are dense (no 2:4 sparsity); tf32/bf16/fp16/fp8 are tensor-core rates; "
    "'-' = not in the table (not supported or not confirmed)."
)


def _num(value: float | int | None) -> str:
    return "-" if value is None else f"{value:g}"


def _profile_line(prof: Any) -> str:
    """One profile's measured roofs, e.g. 'cpu.json (Xeon, cpu, measured 2025-01-02): gemm.fp32 0.104 TFLOP/s, ...'."""
    figs = ", ".join(f"{k} {f.value:.3g} {f.unit}" for k, f in prof.figures)
    return f"{prof.label()}: {figs}"


def _table_lines(profiles: tuple = ()) -> list[str]:
    header = ["key", "name pattern", "SMs", "GB/s", *(h for h, _ in _PEAK_COLUMNS)]
    body = [
        [row.key, row.name_regex, _num(row.sms), _num(row.dram_gbps),
         *(_num(row.peak_tflops.get(dtype)) for _, dtype in _PEAK_COLUMNS)]
        for row in device_rows()
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def fmt(cells: list[str]) -> str:
        left = [c.ljust(w) for c, w in zip(cells[:2], widths[:2])]
        right = [c.rjust(w) for c, w in zip(cells[2:], widths[2:])]
        return "  ".join(left + right).rstrip()

    rows = list(device_rows())
    placed: set[int] = set()
    lines = [fmt(header)]
    for row, cells in zip(rows, body):
        lines.append(fmt(cells))
        for i, prof in enumerate(profiles):  # a GPU profile sits under the row its device matches
            if prof.kind != "cpu" and match_device({"name": prof.name}).key == row.key:
                lines.append(f"  measured: {_profile_line(prof)}")
                placed.add(i)
    others = [p for i, p in enumerate(profiles) if i not in placed]
    if others:
        lines += ["", "Profiles with no table row (a CPU, or a device the table lacks):"]
        lines += [f"  {_profile_line(p)}" for p in others]
    lines += ["", _FOOTER, "", "Names without a row (aliases.csv):"]
    for alias in load_aliases():
        cond = alias.conditions()
        without = f" (without {', '.join(alias.blank)})" if alias.blank else ""
        lines.append(f"  {alias.name_regex}{f' [{cond}]' if cond else ''} -> {alias.target}{without}")
    lines += ["", "`traceana devices --match NAME` shows which row a reported name maps to and why."]
    return lines


def _match_lines(device: Any) -> list[str]:
    peaks = ", ".join(f"{d} {v:g}" for d, v in device.peak_tflops.items())
    lines = [
        f"name     {device.name!r}",
        f"row      {device.key or 'none (unknown device)'}",
        f"matched  {device.source}",
        f"DRAM     {_num(device.dram_gbps)} GB/s" if device.dram_gbps else "DRAM     unknown",
        f"peaks    {peaks} TFLOP/s" if peaks else "peaks    unknown",
    ]
    lines += [f"warning  {note}" for note in device.notes]
    return lines


def _props(name: str, sms: int | None, mem_gb: float | None, cc: str | None) -> dict[str, Any]:
    props: dict[str, Any] = {"name": name}
    if sms is not None:
        props["numSms"] = sms
    if mem_gb is not None:
        props["totalGlobalMem"] = int(mem_gb * 2**30)
    if cc is not None:
        from traceana.numbers import ascii_int

        major, _, minor = cc.partition(".")
        major_n, minor_n = ascii_int(major), ascii_int(minor or "0")
        if major_n is None or minor_n is None:
            raise click.BadParameter(f"{cc!r} is not MAJOR.MINOR", param_hint="--cc")
        props["computeMajor"], props["computeMinor"] = major_n, minor_n
    return props


@click.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--match", "name", metavar="NAME",
              help="Show which row a verbatim device name (as the trace reports it) maps to, and why.")
@click.option("--sms", type=int, metavar="N", help="With --match: the trace's numSms (CUs on ROCm).")
@click.option("--mem-gb", type=float, metavar="GIB", help="With --match: totalGlobalMem in GiB.")
@click.option("--cc", metavar="MAJOR.MINOR", help="With --match: computeMajor.computeMinor.")
@click.option("--profile", "profiles", multiple=True, metavar="PROFILE.json",
              help="Also list the measured roofs of these device profiles (`traceana calibrate`), each under "
                   "the table row its device matches. Repeatable.")
def devices(as_json: bool, name: str | None, sms: int | None, mem_gb: float | None,
            cc: str | None, profiles: tuple[str, ...] = ()) -> None:
    """List the device table (peak TFLOP/s per dtype, DRAM GB/s), or explain one name."""
    from traceana.roofline.device_profile import load_profile

    loaded = tuple(load_profile(p) for p in profiles)
    if name is None:
        if sms is not None or mem_gb is not None or cc is not None:
            raise click.UsageError("--sms, --mem-gb and --cc only make sense with --match NAME")
        if as_json:
            doc = {"devices": [row.as_dict() for row in device_rows()],
                   "aliases": [alias.as_dict() for alias in load_aliases()]}
            if loaded:
                doc["profiles"] = [{**p.as_dict(), "table_key": None if p.kind == "cpu" else
                                    match_device({"name": p.name}).key} for p in loaded]
            click.echo(json.dumps(doc, indent=2, sort_keys=True))
        else:
            click.echo("\n".join(_table_lines(loaded)))
        return
    device = match_device(_props(name, sms, mem_gb, cc))
    if as_json:
        click.echo(json.dumps(device.as_dict(), indent=2, sort_keys=True))
    else:
        click.echo("\n".join(_match_lines(device)))
