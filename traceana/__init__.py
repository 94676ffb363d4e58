"""traceana: explain every op of a PyTorch profiler trace against the GPU roofline.

The Python API is loaded on first use (module __getattr__), so `import traceana` (and the CLI) stays
cheap and imports neither pandas nor torch:

    traceana.analyze(path, device=None, profile=None, **options) -> traceana.api.Analysis
    traceana.diff(base, head) -> pandas.DataFrame               (traceana.api)
    traceana.profile(...)  -> a context manager recording a trace (traceana.measure.record)

No submodule is named after these (the comparison of two analyses is traceana/compare/runs.py), so
importing any submodule never shadows them.
"""

from __future__ import annotations

__version__ = "0.1.0"

#: public name -> (module, attribute), imported on first access
_API = {
    "analyze": ("traceana.api", "analyze"),
    "diff": ("traceana.api", "diff"),
    "Analysis": ("traceana.api", "Analysis"),
    "profile": ("traceana.measure.record", "profile"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'traceana' has no attribute {name!r}")
    import importlib

    module, attr = _API[name]
    return getattr(importlib.import_module(module), attr)


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
