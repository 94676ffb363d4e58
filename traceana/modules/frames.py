"""What a recorded Python frame name says: which file and line, and whether that file is the user's own
code (their script, their model library: transformers, torchvision, timm, ...) or the machinery around
it (the torch package, the Python standard library, built-ins).

Frame names come in three spellings, all read here as text, never by importing anything:
  python_function events   "transformers/models/llama/modeling_llama.py(123): forward", the path relative
                           to the sys.path entry it was imported from (so the script itself is "train.py");
                           "nn.Module: LlamaMLP_3" (an eager module's call); "<built-in method ...>"
  "Call stack" op args     the same frames, absolute paths, innermost first, joined by ";"
  "Module Hierarchy" args  (TorchScript) "TOP(Net)::forward.blocks(Sequential)::forward.0(Block)::forward."
"""

from __future__ import annotations

import re
import sys

import msgspec

MODULE_PREFIX = "nn.Module: "

# Packages whose frames are the machinery between the user's code and the op, never the place to point at:
# torch and its compilers, test runners. The standard library is told by its module names.
NOT_USER = frozenset({"torch", "functorch", "torchgen", "triton", "typing_extensions", "_pytest", "pytest",
                      "pluggy", "importlib_metadata"})
# Kernel libraries: their Python only launches kernels, and what it calls on the way (a helper module they put
# on sys.path, "torch_guard.py") is theirs too, so the user's frame is the one that called into them.
KERNEL_LIBS = frozenset({"aiter", "flash_attn", "flash_attn_interface", "flashinfer", "xformers", "deep_gemm",
                         "sgl_kernel"})
STDLIB = frozenset(sys.stdlib_module_names)

_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$", re.S)
# an absolute path into an installed package: keep what follows the install folder
_PACKAGES = re.compile(r"^.*/(?:site|dist)-packages/")
# an absolute path into the interpreter's own library (python3.11/threading.py, python3.7/json/decoder.py)
_STDLIB_DIR = re.compile(r"/lib(?:64)?/python\d+(?:\.\d+)?/(?!site-packages/|dist-packages/)")


class Frame(msgspec.Struct, frozen=True):
    file: str  # as recorded, an installed package's prefix dropped ("torch/nn/modules/linear.py")
    line: int
    function: str
    user: bool  # the user's own code (their script or model library), not torch / stdlib / built-ins
    kernel_lib: bool = False  # inside a kernel library (KERNEL_LIBS)

    def where(self) -> str:
        """"file.py:123"."""
        return f"{self.file}:{self.line}"


def parse_frame(name: str) -> Frame | None:
    """A python_function / Call stack frame "path(line): function"; None for built-ins, module entries and
    anything else without a file and line."""
    if name.startswith(("<", "nn.Module: ")) or "): " not in name:  # built-ins, module entries: no file
        return None
    m = _FRAME.match(name)
    if m is None:
        return None
    path, line, fn = m.group(1), int(m.group(2)), m.group(3)
    stdlib = False
    if path.startswith("/"):  # a Call stack's absolute path
        stdlib = bool(_STDLIB_DIR.search(path))
        path = _PACKAGES.sub("", path)
    lib = _top(path) in KERNEL_LIBS
    return Frame(path, line, fn, not stdlib and not lib and is_user_file(path), lib)


def is_user_file(path: str) -> bool:
    """Whether a (relative or absolute) source path is the user's code: not inside the torch package, not the
    standard library (a top-level stdlib module name: "threading.py", "json/decoder.py"), not "<frozen ...>"
    or "<string>". transformers, torchvision, timm and the user's own files all count: that is where the
    model is written."""
    if not path or path.startswith("<"):
        return False
    if path.startswith("/"):  # an absolute path outside site-packages: the user's files (or a source checkout)
        return not _in_torch_checkout(path)
    top = _top(path)
    return top not in NOT_USER and top not in STDLIB and top not in KERNEL_LIBS


def _top(path: str) -> str:
    """The top-level package (or module) of a relative source path."""
    top = path.split("/", 1)[0]
    return top[:-3] if top.endswith(".py") else top


def _in_torch_checkout(path: str) -> bool:
    """An absolute path inside a torch source tree (an editable install): .../torch/nn/modules/linear.py."""
    return "/torch/" in path and not path.rsplit("/torch/", 1)[1].startswith(".")


def module_name(name: str) -> str | None:
    """"nn.Module: LlamaMLP_3" -> "LlamaMLP_3"; None for other frames."""
    return name[len(MODULE_PREFIX):] if name.startswith(MODULE_PREFIX) else None


_INSTANCE = re.compile(r"_\d+$")


def module_class(instance: str) -> str:
    """"LlamaMLP_3" -> "LlamaMLP": the profiler numbers each class's instances in the order it first saw them."""
    return _INSTANCE.sub("", instance)


def call_stack_frames(text: str) -> list[Frame]:
    """A "Call stack" arg's frames, innermost first (the arg's order), built-ins and blanks left out."""
    out = []
    for part in text.split(";"):
        f = parse_frame(part.strip()) if part.strip() else None
        if f is not None:
            out.append(f)
    return out


_HIER = re.compile(r"([^.()]*)\(([^()]*)\)::([^.]*)\.")


def hierarchy_path(text: str) -> tuple[str, ...]:
    """A TorchScript "Module Hierarchy" arg as the module path from the top: each step "attr(Class)"
    ("TOP(Net)::forward.blocks(Sequential)::forward.0(Block)::forward." -> ("Net", "blocks(Sequential)",
    "0(Block)")); the top module is named by its class ("TOP" when the class is not recorded)."""
    steps = _HIER.findall(text)
    out = []
    for i, (attr, cls, _method) in enumerate(steps):
        if i == 0:
            out.append(cls or attr or "TOP")
        else:
            out.append(f"{attr}({cls})" if cls else attr)
    return tuple(out)
