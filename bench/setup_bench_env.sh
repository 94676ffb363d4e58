#!/usr/bin/env bash
# The benchmark's own virtualenv: bench/.venv with traceana (this checkout), orjson (the
# JSON-parse floor) and holistictraceanalysis (HTA, the peer whose trace load is timed).
# HTA pulls pandas, plotly and friends; none of that goes near traceana's own install.
#
#     bash bench/setup_bench_env.sh && bench/.venv/bin/python bench/bench_report.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TRACEANA_BENCH_VENV:-bench/.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install -q -e . orjson holistictraceanalysis
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as m
for p in ("traceana", "orjson", "holistictraceanalysis", "pandas", "numpy", "msgspec"):
    try:
        print(f"{p:24s} {m.version(p)}")
    except m.PackageNotFoundError:
        print(f"{p:24s} missing")
EOF
