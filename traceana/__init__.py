"""traceana: explain every op of a PyTorch profiler trace against the GPU roofline.

The Python API is loaded on first use, so `import traceana` (and the CLI) stays cheap and imports
neither pandas nor torch:

    traceana.analyze(path, device=None, profile=None, **options) -> traceana.api.Analysis
    traceana.diff(base, head) -> pandas.DataFrame               (traceana.api)
    traceana.profile(...)  -> a context manager recording a trace (traceana.record)

`traceana.diff` and `traceana.profile` are also the names of submodules (traceana/diff.py, and a
traceana/profile.py where one exists). The package attribute always means the API function; the
modules are reached with `from traceana.diff import diff_analyses` or `importlib.import_module`.
"""

from __future__ import annotations

import sys
import types

__version__ = "0.1.0"

#: public name -> (module, attribute), imported on first access
_API = {
    "analyze": ("traceana.api", "analyze"),
    "diff": ("traceana.api", "diff"),
    "Analysis": ("traceana.api", "Analysis"),
    "profile": ("traceana.record", "profile"),
}

__all__ = ["__version__", *_API]


def _load(name: str):
    import importlib

    module, attr = _API[name]
    return getattr(importlib.import_module(module), attr)


class _Package(types.ModuleType):
    """Properties win over the module's __dict__, where the import system files a submodule of the
    same name (`import traceana.diff` sets traceana.diff = <module>): the setters drop that entry,
    so the name stays the API function."""

    analyze = property(lambda self: _load("analyze"), lambda self, value: None)
    diff = property(lambda self: _load("diff"), lambda self, value: None)
    Analysis = property(lambda self: _load("Analysis"), lambda self, value: None)
    profile = property(lambda self: _load("profile"), lambda self, value: None)

    def __dir__(self):
        return sorted({*super().__dir__(), *_API})


sys.modules[__name__].__class__ = _Package
