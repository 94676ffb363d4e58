"""The Python API: `traceana.analyze(path)` -> Analysis with pandas DataFrames; `traceana.diff(a, b)`.

    import traceana
    a = traceana.analyze("trace.json.gz")          # or a saved `report -o x.json`
    a.ops.sort_values("device_time_us", ascending=False).head()
    a.to_html("report.html")

Every number comes from the analysis dict the JSON report holds (docs/analysis-schema.md), read
back through JSON exactly as `traceana report -o x.json` writes it, so a DataFrame cell equals the
JSON report's value (a null is NaN / None). The frames only rename and flatten:
column names carry their unit (`_us`, `tflops_per_s`, `gbps`, `pct_of_`), nested objects become
`prefix_key` columns, lists become tuples (hashable: groupby and drop_duplicates work on them).
pandas is imported when a frame is first built, never by the CLI.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from traceana.errors import BadInput

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["Analysis", "analyze", "diff", "OP_COLUMNS"]

#: Op row fields (docs/analysis-schema.md) -> DataFrame column; fields not named here keep their name.
#: Per call: flops, bytes, *_time_us except device_time_us (all calls), kernels_per_call.
OP_COLUMNS: dict[str, str] = {
    "name": "name", "input_dims": "input_dims", "input_types": "input_types",
    "concrete_inputs": "concrete_inputs", "count": "calls", "device_time_us": "device_time_us",
    "mean_time_us": "mean_time_us", "kernel_count": "kernels_per_call", "bound": "bound",
    "flops": "flops", "bytes": "bytes", "intensity": "flops_per_byte",
    "achieved_tflops": "tflops_per_s", "achieved_gbps": "gbps", "roofline_time_us": "roofline_time_us",
    "roof_pct": "pct_of_roof", "compute_time_us": "compute_time_us", "memory_time_us": "memory_time_us",
    "launch_floor_us": "launch_floor_us", "model_time_us": "model_time_us", "model_pct": "pct_of_model",
    "peak_dtype": "peak_dtype", "peak_tflops": "peak_tflops_per_s", "peak_why": "peak_why",
    "roof_kind": "roof_kind", "dtype": "dtype", "family": "family", "estimated": "estimated",
    "opaque": "opaque", "cause": "cause", "reason": "reason", "limiter": "limiter",
    "grid_blocks": "grid_blocks", "kernel_class": "kernel_class", "flops_expr": "flops_expr",
    "bytes_expr": "bytes_expr", "notes": "notes", "meta": "meta",
    "recorded_bytes": "recorded_bytes", "recorded_gbps": "recorded_gbps",
    "module": "module", "module_class": "module_class", "module_instances": "module_instances",
    "module_share": "module_share", "source": "source", "source_function": "source_function", "phase": "phase",
}
#: Nested op fields flattened to `<prefix>_<key>` columns (present, as NaN / None, on every row).
OP_NESTED: dict[str, tuple[str, ...]] = {
    "over_roof": ("pct", "reason", "text"),
    "comm": ("algorithm", "group_size", "msg_bytes", "bus_factor", "bytes_per_rank", "algbw_gbps", "busbw_gbps",
             "sized", "link", "link_kind", "link_gbps", "transfer_us", "wait_us"),
    "copy": ("direction", "memory", "link", "link_gbps", "bytes", "time_us", "gbps", "events"),
}
#: Kept as they are: `copies` is keyed by copy direction ({"HtoD (Pinned)": {time_us, bytes, events}}).
OP_AS_IS = ("copies",)
_NUMERIC = {"device_time_us", "mean_time_us", "kernels_per_call", "flops", "bytes", "flops_per_byte",
            "tflops_per_s", "gbps", "roofline_time_us", "pct_of_roof", "compute_time_us", "memory_time_us",
            "launch_floor_us", "model_time_us", "pct_of_model", "peak_tflops_per_s", "grid_blocks",
            "recorded_bytes", "recorded_gbps", "over_roof_pct", "comm_group_size", "comm_msg_bytes",
            "comm_bus_factor", "comm_bytes_per_rank", "comm_algbw_gbps", "comm_busbw_gbps", "comm_link_gbps",
            "comm_transfer_us", "comm_wait_us",
            "copy_link_gbps", "copy_bytes", "copy_time_us", "copy_gbps", "copy_events", "module_share"}
#: a.kernel_account: per (class, dtype, library, tensor cores) row of analysis["kernels"]["rows"]
KERNEL_ACCOUNT_COLUMNS = ("class", "dtype", "library", "tensor_cores", "math", "time_us", "pct", "uncovered_us",
                          "count", "names", "top")
FINDING_COLUMNS = ("id", "kind", "group", "title", "fix", "saving_us", "idle_us", "confidence", "estimated", "lever",
                   "ops", "text", "module_class", "source")
#: a.modules: per module (and per phase: forward_*, backward_*, optimizer_*) these figures
MODULE_FIGURES = ("time_us", "pct", "flops", "bytes", "achieved_tflops", "achieved_gbps", "bound")
_OPTION_NAMES = ("peak_tflops", "bandwidth_gbps", "launch_floor_us", "host_link_gbps", "network_gbps", "explain_top",
                 "meta", "hta", "capture", "find_capture")


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _cell(v: Any) -> Any:
    """A JSON value as a DataFrame cell: lists as (nested) tuples, the rest unchanged."""
    return _tuples(v) if isinstance(v, list) else v


def op_record(op: Mapping[str, Any]) -> dict[str, Any]:
    """One op row of the analysis as a flat {column: value} (no `id`, no `kernels`)."""
    rec: dict[str, Any] = {col: None for col in OP_COLUMNS.values()}
    rec["notes"], rec["meta"] = (), False
    for prefix, keys in OP_NESTED.items():
        rec.update({f"{prefix}_{k}": None for k in keys})
    for k in OP_AS_IS:
        rec[k] = None
    for key, value in op.items():
        if key in ("id", "kernels"):
            continue
        if key in OP_NESTED or (isinstance(value, Mapping) and key not in OP_AS_IS):
            for k, v in (value or {}).items():
                rec[f"{key}_{k}"] = _cell(v)
        else:
            rec[OP_COLUMNS.get(key, key)] = _cell(value)
    return rec


def _frame(records: list[dict[str, Any]], columns: list[str], numeric: set[str] = frozenset(),
           index: str | None = None) -> pd.DataFrame:
    import pandas as pd

    for r in records:  # columns only some rows have (fields a newer traceana added)
        columns.extend(k for k in r if k not in columns)
    df = pd.DataFrame.from_records(records, columns=columns) if records else pd.DataFrame(columns=columns)
    for c in numeric & set(df.columns):
        if df[c].dtype == object:
            df[c] = df[c].astype("float64")
    if index is not None:
        df = df.set_index(index)
    return df


#: analysis["memory"]["devices"][] fields in Analysis.memory, in order.
MEMORY_COLUMNS = ("device", "type", "index", "peak_allocated_bytes", "peak_at_us", "reserved_at_peak_bytes",
                  "peak_reserved_bytes", "start_allocated_bytes", "end_allocated_bytes", "allocations", "frees",
                  "allocated_bytes", "freed_bytes", "events", "totals", "peak_op")
_MEMORY_NUMERIC = {"peak_allocated_bytes", "peak_at_us", "reserved_at_peak_bytes", "peak_reserved_bytes",
                   "start_allocated_bytes", "end_allocated_bytes", "allocated_bytes", "freed_bytes",
                   "live_at_peak_bytes", "before_recording_bytes"}


class Analysis:
    """One trace's analysis. `raw` is the JSON report's content; the frames are views of it."""

    def __init__(self, doc: Mapping[str, Any], *, source: str | None = None, profile: Any = None) -> None:
        from traceana.render.json_out import render_json

        self.raw: dict[str, Any] = json.loads(render_json(doc))  # exactly what `report -o x.json` holds
        self.source = source
        self.profile = profile

    def __repr__(self) -> str:
        dev = self.raw.get("device") or {}
        return (f"<traceana.Analysis {(self.raw.get('trace') or {}).get('file')!s}: {dev.get('name') or 'no GPU'}, "
                f"{len(self.raw.get('ops') or [])} op signatures>")

    @property
    def device(self) -> dict[str, Any]:
        return self.raw.get("device") or {}

    @property
    def coverage(self) -> dict[str, Any]:
        return self.raw.get("coverage") or {}

    @property
    def warnings(self) -> list[str]:
        return list(self.raw.get("warnings") or [])

    @cached_property
    def ops(self) -> pd.DataFrame:
        """One row per op signature, indexed by its id ("op1" = most device time)."""
        ops = [o for o in self.raw.get("ops") or [] if isinstance(o, Mapping)]
        records = [{"id": o.get("id"), **op_record(o)} for o in ops]
        cols = ["id", *op_record({}).keys()]
        df = _frame(records, cols, _NUMERIC, index="id")
        if len(df):
            df["calls"] = df["calls"].astype("int64")
        return df

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """One row per (op signature, kernel): the kernels the report lists under each op."""
        records = [{"op_id": o.get("id"), "op_name": o.get("name"), "kernel": k.get("name"),
                    "calls": k.get("count"), "time_us": k.get("time_us")}
                   for o in self.raw.get("ops") or [] if isinstance(o, Mapping)
                   for k in o.get("kernels") or [] if isinstance(k, Mapping)]
        return _frame(records, ["op_id", "op_name", "kernel", "calls", "time_us"], {"time_us"})

    @cached_property
    def kernel_account(self) -> pd.DataFrame:
        """The kernel account (analysis["kernels"]): device time by kernel class x dtype x library, with
        tensor-core use, read from kernel names (shapes or not), largest first. `uncovered_us`: the part no
        costed op covers; `top`: the largest kernel names of the row. attrs holds the totals and the sentence."""
        acc = self.raw.get("kernels") or {}
        records = [{c: _cell(r.get(c)) for c in KERNEL_ACCOUNT_COLUMNS if c != "top"}
                   | {"top": tuple(t.get("name") for t in r.get("top") or [] if isinstance(t, Mapping))}
                   for r in acc.get("rows") or [] if isinstance(r, Mapping)]
        df = _frame(records, list(KERNEL_ACCOUNT_COLUMNS), {"time_us", "pct", "uncovered_us"})
        df.attrs.update({k: acc.get(k) for k in ("total_us", "uncovered_us", "matrix_us", "tensor_core_us",
                                                  "sentence")})
        return df

    @cached_property
    def findings(self) -> pd.DataFrame:
        """One row per finding, in the report's order (levers by saving x confidence, then notes)."""
        records = [{k: _cell(f.get(k)) for k in f} for f in self.raw.get("findings") or [] if isinstance(f, Mapping)]
        return _frame(records, list(FINDING_COLUMNS), {"saving_us", "idle_us"})

    @cached_property
    def modules(self) -> pd.DataFrame:
        """One row per module path (the by-module table, depth first), indexed by path, then one row per kind
        of time outside modules (kind "other": ops outside modules, the optimizer step, gradient accumulation,
        backward ops with no module, kernels with no op; path "(key)"). time_us, flops and bytes include
        the submodules' (self_time_us: the module's own ops only); forward_*, backward_* and optimizer_*
        split them by phase. The depth-0 rows sum to the ops table's totals."""
        m = self.raw.get("modules") or {}
        phases = ("forward", "backward", "optimizer")
        cols = ["path", "kind", "name", "class", "depth", "parent", "self_time_us", *MODULE_FIGURES,
                *(f"{p}_{k}" for p in phases for k in MODULE_FIGURES), "ops"]
        tree = [n for n in m.get("tree") or [] if isinstance(n, Mapping)]
        records = []
        for n in tree:
            parent = n.get("parent")
            rec = {"path": n.get("path"), "kind": "module", "name": n.get("name"), "class": n.get("class"),
                   "depth": n.get("depth"), "self_time_us": n.get("self_time_us"), "ops": _cell(n.get("ops")),
                   "parent": tree[parent].get("path") if isinstance(parent, int) and 0 <= parent < len(tree) else None}
            records.append(self._figures(rec, n, phases))
        for o in m.get("other") or []:
            if isinstance(o, Mapping):
                rec = {"path": f"({o.get('key')})", "kind": "other", "name": o.get("label"), "class": None, "depth": 0,
                       "parent": None, "self_time_us": o.get("time_us"), "ops": ()}
                records.append(self._figures(rec, o, phases))
        numeric = {c for c in cols if c.endswith(("time_us", "pct", "flops", "bytes", "tflops", "gbps"))}
        df = _frame(records, cols, numeric, index="path")
        if len(df):
            df["depth"] = df["depth"].astype("int64")
        return df

    @staticmethod
    def _figures(rec: dict[str, Any], n: Mapping[str, Any], phases: tuple[str, ...]) -> dict[str, Any]:
        rec.update({k: n.get(k) for k in MODULE_FIGURES})
        for p in phases:
            ph = n.get(p) if isinstance(n.get(p), Mapping) else {}
            rec.update({f"{p}_{k}": ph.get(k) for k in MODULE_FIGURES})
        return rec

    @cached_property
    def breakdown(self) -> pd.DataFrame:
        """Time by category (the bounds, communication, copies, idle), indexed by category:
        `kernel_time_us` summed kernel time per bound (breakdown.by_bound, every device);
        `timeline_us` wall-clock time (breakdown.devices[].by_category, overlapping streams counted
        once, summed over the devices); `pct_of_span` = timeline_us / the devices' summed span."""
        bd = self.raw.get("breakdown") or {}
        by_bound = bd.get("by_bound") or {}
        devices = [d for d in bd.get("devices") or [] if isinstance(d, Mapping)]
        span = sum(d.get("span_us") or 0.0 for d in devices)
        cats = [*(bd.get("categories") or []), *by_bound]
        timeline: dict[str, float] = {}
        for d in devices:
            for c, v in (d.get("by_category") or {}).items():
                timeline[c] = timeline.get(c, 0.0) + (v or 0.0)
                cats.append(c)
        records = [{"category": c, "kernel_time_us": by_bound.get(c),
                    "timeline_us": timeline.get(c) if devices else None,
                    "pct_of_span": timeline[c] / span * 100.0 if c in timeline and span > 0 else None}
                   for c in dict.fromkeys(cats)]
        return _frame(records, ["category", "kernel_time_us", "timeline_us", "pct_of_span"],
                      {"kernel_time_us", "timeline_us", "pct_of_span"}, index="category")

    @cached_property
    def ledger(self) -> pd.DataFrame:
        """The primary device's account of its span, one row per term (work by bound, exposed
        communication as transfer / wait, exposed copies, idle by cause), indexed by term: `us` sums
        to the span; `share` = us / span. The same numbers as the report's lead and stacked bar."""
        led = self.raw.get("ledger") or {}
        records = [{"term": t.get("key"), "group": t.get("group"), "label": t.get("label"), "us": t.get("us"),
                    "share": t.get("share"), "meaning": t.get("meaning")}
                   for t in led.get("terms") or [] if isinstance(t, Mapping)]
        return _frame(records, ["term", "group", "label", "us", "share", "meaning"], {"us", "share"}, index="term")

    @cached_property
    def memory(self) -> pd.DataFrame:
        """One row per device the trace recorded memory for ([memory] events, profile_memory=True), indexed by
        device ('cuda:0', 'cpu'): peak allocated and reserved, when, what the recorded allocations held at the
        peak, the op that made the peak allocation. Empty when the trace has no memory events."""
        m = self.raw.get("memory") or {}
        records = []
        for d in m.get("devices") or []:
            if not isinstance(d, Mapping):
                continue
            live = d.get("live_at_peak") or {}
            records.append({k: d.get(k) for k in MEMORY_COLUMNS if k in d}
                           | {"live_at_peak_bytes": live.get("bytes"),
                              "before_recording_bytes": live.get("before_recording_bytes")})
        return _frame(records, [*MEMORY_COLUMNS, "live_at_peak_bytes", "before_recording_bytes"],
                      _MEMORY_NUMERIC, index="device")

    @cached_property
    def memory_steps(self) -> pd.DataFrame:
        """One row per (device, ProfilerStep): allocated at its start and end, its peaks, the bytes it allocated."""
        m = self.raw.get("memory") or {}
        records = [{"device": d.get("device"), **s} for d in m.get("devices") or [] if isinstance(d, Mapping)
                   for s in d.get("steps") or [] if isinstance(s, Mapping)]
        cols = ["device", "step", "start_us", "dur_us", "events", "start_allocated_bytes", "end_allocated_bytes",
                "peak_allocated_bytes", "peak_reserved_bytes", "allocated_bytes", "allocations"]
        return _frame(records, cols, {c for c in cols if c.endswith(("_us", "_bytes"))})

    def to_json(self) -> str:
        """The JSON report's text (the same bytes as `traceana report -o x.json`)."""
        from traceana.render.json_out import render_json

        return render_json(self.raw)

    def to_markdown(self, long: bool = False) -> str:
        """The markdown report (the same text as `traceana report -o x.md`; `long`: as with --long)."""
        from traceana.render import render

        return render(self.raw, "md", long=long)

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """The HTML report; written to `path` too when given (returns the text either way)."""
        from traceana.render.html import render_html

        html = render_html(self.raw)
        if path is not None:
            from traceana.output.safe_write import write_text

            write_text(os.fspath(path), html)
        return html


def _options(device: str | None, profile: Any, options: dict[str, Any]):
    from traceana.analysis import Options

    unknown = sorted(set(options) - set(_OPTION_NAMES))
    if unknown:
        raise TypeError(f"analyze() got unknown option(s) {', '.join(unknown)}; "
                        f"known: device, profile, {', '.join(_OPTION_NAMES)}")
    kw = {k: v for k, v in options.items() if v is not None}
    if isinstance(kw.get("peak_tflops"), (str, int, float)):  # '65' or 'fp32=8.1,fp16_tc=65', as on the CLI
        from traceana.cli.common import parse_peaks

        kw["peak_tflops"] = parse_peaks(str(kw["peak_tflops"]))
    if profile is not None:
        from traceana.roofline.device_profile import Profile, load_profile

        # a path to a `traceana calibrate` profile, or one already loaded
        kw["profile"] = profile if isinstance(profile, Profile) else load_profile(os.fspath(profile))
    return Options(device_key=device, **kw)


def analyze(path: str | os.PathLike[str], device: str | None = None, profile: Any = None,
            **options: Any) -> Analysis:
    """Analyse a profiler trace (.json / .json.gz, or Perfetto .pftrace), or load a saved analysis (`report -o x.json`).

    device: a device-table row (`traceana devices`) instead of the trace's own device.
    profile: a `traceana calibrate` profile (path or loaded Profile): ops are also judged against its
        measured, achievable roofs (stored on the result as given).
    options: peak_tflops ({dtype: TFLOP/s} or the CLI's '65' / 'fp32=8.1,...'), bandwidth_gbps,
    launch_floor_us, host_link_gbps, network_gbps, explain_top, meta, hta, capture, find_capture — the
    `traceana report` options of the same names (traceana.analysis.Options). meta is off unless given.
    """
    from traceana.render.saved import ANALYSIS_SCHEMA, decode, sniff, validate

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise BadInput(f"{path}: no such file" if not os.path.exists(path) else f"{path}: not a file")
    opts = _options(device, profile, options)
    schema, data = sniff(path)
    if schema is not None:
        if schema != ANALYSIS_SCHEMA:
            raise BadInput(f"{path}: is a {schema} document; analyze() takes a trace or a saved analysis")
        if device is not None or profile is not None or any(v is not None for v in options.values()):
            raise BadInput(f"{path}: is a saved analysis; device=, profile= and other options apply to traces")
        return Analysis(validate(decode(data, schema), path), source=path)
    del data  # a trace: read again by the loader, not kept alive meanwhile
    from traceana.analysis import analyze as run

    return Analysis(run(path, opts), source=path, profile=profile)


def _as_doc(x: Any) -> tuple[dict[str, Any], str]:
    if isinstance(x, Analysis):
        return x.raw, os.path.basename(x.source or "") or (x.raw.get("trace") or {}).get("file") or ""
    if isinstance(x, Mapping):
        return dict(x), (x.get("trace") or {}).get("file") or ""
    if isinstance(x, (str, os.PathLike)):
        p = os.fspath(x)
        if os.path.isdir(p):
            from traceana.cli.diff import load_side

            return load_side(p)
        return analyze(p).raw, os.path.basename(p)
    raise TypeError(f"diff() takes Analysis objects, analysis dicts or paths, not {type(x).__name__}")


_SIDE = (("count", "calls"), ("device_time_us", "device_time_us"), ("time_us", "time_us"),
         ("share_pct", "share_pct"), ("roof_pct", "pct_of_roof"), ("roofline_total_us", "roofline_total_us"),
         ("bound", "bound"), ("flops", "flops"))


def diff_frame(doc: Mapping[str, Any]) -> pd.DataFrame:
    """A `traceana.diff/1` document as one row per op signature: matched ops (largest change
    first), then new, then vanished ops. `time_us` columns are per step when both sides have
    ProfilerStep annotations (attrs["per"] == "step"), else per run."""
    rows = []
    for kind, items in (("ops", doc.get("ops")), ("new", doc.get("new")), ("vanished", doc.get("vanished"))):
        for r in items or []:
            rec: dict[str, Any] = {"name": r.get("name"), "input_dims": _cell(r.get("input_dims")),
                                   "input_types": _cell(r.get("input_types")),
                                   "match": r.get("match") if kind == "ops" else kind,
                                   "head_input_dims": _cell(r.get("head_input_dims", r.get("input_dims"))),
                                   "head_input_types": _cell(r.get("head_input_types", r.get("input_types")))}
            for side in ("base", "head"):
                s = r.get(side) or {}
                rec.update({f"{side}_{col}": s.get(key) for key, col in _SIDE})
            rec.update({k: r.get(k) for k in ("delta_us", "delta_pct", "roof_delta_pp", "roof_changed")})
            if kind != "ops":
                b, h = rec["base_time_us"] or 0.0, rec["head_time_us"] or 0.0
                rec["delta_us"] = h - b
            rows.append(rec)
    cols = ["name", "input_dims", "input_types", "match", "head_input_dims", "head_input_types",
            *(f"{side}_{col}" for side in ("base", "head") for _, col in _SIDE),
            "delta_us", "delta_pct", "roof_delta_pp", "roof_changed"]
    numeric = {c for c in cols if c.endswith(("_us", "_pct", "_pp", "_flops", "_calls", "_of_roof"))}
    df = _frame(rows, cols, numeric)
    norm = doc.get("normalisation") or {}
    df.attrs.update({"per": norm.get("per"), "base": (doc.get("base") or {}).get("label"),
                     "head": (doc.get("head") or {}).get("label"), "note": norm.get("note")})
    return df


def diff(base: Any, head: Any, roof_threshold: float | None = None) -> pd.DataFrame:
    """Compare HEAD against BASE (Analysis objects, analysis dicts, traces, saved analyses or
    directories of them) op signature by op signature: the `traceana diff` comparison
    (traceana/compare/runs.py) as a DataFrame (diff_frame)."""
    from traceana.compare.runs import ROOF_THRESHOLD_PP, diff_analyses

    (b, bl), (h, hl) = _as_doc(base), _as_doc(head)
    doc = diff_analyses(b, h, base_label=bl, head_label=hl,
                        roof_threshold=ROOF_THRESHOLD_PP if roof_threshold is None else roof_threshold)
    return diff_frame(doc)
