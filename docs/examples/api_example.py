"""A worked example of traceana's Python API (run by tests/test_api.py).

    python docs/examples/api_example.py [TRACE] [OUT_DIR]

Analyses TRACE (default: the shipped T4 sample), prints the op table, the arithmetic of the slowest
op recomputed from the DataFrame, the findings and the time by bound, writes the HTML and markdown
reports into OUT_DIR (default: the current directory), and compares the run against a copy whose
matmul is twice as fast.
"""

from __future__ import annotations

import copy
import os
import sys

import traceana

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "sample_traces", "t4_seed_pow_mul.json")


def main(trace: str, out_dir: str) -> None:
    a = traceana.analyze(trace)  # device="a100_sxm4_40gb" would judge it against another GPU
    print(a)

    # One row per op signature, indexed by id; units are in the column names.
    cols = ["name", "calls", "device_time_us", "flops", "bytes", "tflops_per_s", "gbps", "pct_of_roof", "bound"]
    print(a.ops[cols].to_string())

    # The slowest op's numbers, recomputed from its row: achieved FLOP/s = FLOPs / mean time,
    # % of roof = roofline time / mean time.
    top = a.ops.iloc[0]
    tflops = top["flops"] / (top["mean_time_us"] * 1e-6) / 1e12
    print(f"{top['name']}: {top['flops']:.3e} FLOPs in {top['mean_time_us']:.0f} us = {tflops:.3f} TFLOP/s "
          f"(column tflops_per_s: {top['tflops_per_s']:.3f}); roof {top['roofline_time_us']:.0f} us = "
          f"{top['roofline_time_us'] / top['mean_time_us'] * 100:.1f}% of roof ({top['peak_tflops_per_s']} TFLOP/s "
          f"{top['peak_dtype']})")

    # Kernels per op, findings by saving, time by bound.
    print(a.kernels.groupby("op_name")["time_us"].sum().sort_values(ascending=False).to_string())
    print(a.findings[["kind", "saving_us", "confidence", "title"]].to_string())
    print(a.breakdown.query("timeline_us > 0").to_string())

    # Memory-bound ops by how far they are from the DRAM roof.
    mem = a.ops[a.ops["bound"] == "memory"].sort_values("pct_of_roof")
    print("memory-bound, furthest from the roof first:", ", ".join(f"{n} {p:.1f}%" for n, p in
                                                                   zip(mem["name"], mem["pct_of_roof"])))

    # The reports, from the same analysis (same bytes as `traceana report -o ...`).
    a.to_html(os.path.join(out_dir, "api_example.report.html"))
    with open(os.path.join(out_dir, "api_example.report.md"), "w", encoding="utf-8") as fh:
        fh.write(a.to_markdown())

    # A what-if run: the same trace with the matmul taking half the time, compared with diff().
    faster = copy.deepcopy(a.raw)
    mm = next(op for op in faster["ops"] if op["name"] == "aten::mm")
    mm["device_time_us"] /= 2
    d = traceana.diff(a, faster)
    print(d[["name", "match", "base_time_us", "head_time_us", "delta_us", "delta_pct"]].to_string())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else TRACE, sys.argv[2] if len(sys.argv) > 2 else ".")
