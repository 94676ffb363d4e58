"""Build hook: compile the C trace scanner (traceana/load/_scan.c) and the Perfetto decoder
(traceana/load/pftrace/_decode.c) into the package.

Both are optional: without a C compiler the build still succeeds (a warning says so) and
traceana loads traces with its Python loaders, slower but with the same results. The extension
is built in place (next to its source, like `build_ext --inplace`), so a checkout that was
installed once — editable or not — imports it too, and added to the wheel.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = (os.path.join("traceana", "load", "_scan.c"), os.path.join("traceana", "load", "pftrace", "_decode.c"))
SOURCE = SOURCES[0]


def compile_scanner(root: str, source: str = SOURCE) -> str | None:
    """Compile one extension next to its source; its path, or None (and a warning) if it fails."""
    src = os.path.join(root, source)
    base = os.path.splitext(src)[0]
    out = base + sysconfig.get_config_var("EXT_SUFFIX")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
        return out
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    cmd = [*cc, "-O2", "-fPIC", "-shared", "-std=c99", "-I", include, src, "-o", out + ".tmp"]
    if sys.platform == "darwin":
        cmd[1:1] = ["-undefined", "dynamic_lookup"]
    name = os.path.basename(base)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"traceana: C extension {name} not built ({exc}); the Python code will be used", file=sys.stderr)
        return None
    if proc.returncode != 0:
        print(f"traceana: C extension {name} not built ({' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}); "
              "the Python code will be used", file=sys.stderr)
        return None
    os.replace(out + ".tmp", out)
    return out


class ScannerBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if os.environ.get("TRACEANA_PURE_PYTHON", "") not in ("", "0"):
            return
        for source in SOURCES:
            built = compile_scanner(self.root, source)
            if built is None or version == "editable":
                continue
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["force_include"][built] = os.path.relpath(built, self.root)
