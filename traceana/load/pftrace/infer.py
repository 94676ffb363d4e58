"""What an event without a category is, told from its track and its args (for writers that leave
categories out; torch.profiler's own export names them).

- Anywhere in a process: a Python call when it has a `Python id` (with_stack; a profiler may put a
  background Python thread under the GPU's process id).
- On a GPU stream's track, or with the `device` and `stream` args a GPU activity record carries (the
  profiler may name no track): a kernel, memcpy or memset when it is tied to a launch (a `correlation`
  arg, a correlation id, or a flow from a CPU thread): a memcpy / memset by its name (CUPTI and
  roctracer name copies "Memcpy ..." and fills "Memset ..."), else a kernel. Anything else on a GPU
  track (a range the GPU side records for a user annotation) has no role.
- On a CPU thread's track: a runtime / driver
  call when it has a `correlation` (or `cbid`, CUPTI's callback id) or launches along a flow; an
  operator when its name is an operator schema name (`namespace::op`), it is the collective's record
  (`record_param_comms`), or it has an arg only operators carry (input shapes or types, an autograd
  sequence number, a forward thread id); else a user annotation (record_function, ProfilerStep#N).
- On a track with no process: no role (the profiler's own spans).
"""

from __future__ import annotations

import numpy as np
from traceana.arrays import distinct

# args only operator events carry (record_function ranges do not)
OP_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs", "Sequence number", "Fwd thread id",
           "Collective name")
#: the args read here
WANTED = (*OP_ARGS, "correlation", "Python id", "cbid", "device", "stream")


def roles(rows: np.ndarray, strings: list[str], names: np.ndarray, gpu_track: np.ndarray, has_pid: np.ndarray,
          args, corr_field: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(role, GPU kind) of each of `rows` (event rows without a category): roles as load.columns' _ROLE
    (0 GPU event, 1 op, 2 launch, 3 annotation, 4 Python call, -1 none), kinds 0 kernel, 1 memcpy, 2 memset."""
    n = len(corr_field)

    def has(key: str) -> np.ndarray:
        return args.has(key, n)[rows]

    code = names[rows]
    uniq = distinct(code)
    text = {int(c): (strings[c] if c >= 0 else "") for c in uniq.tolist()}
    lower = {c: s.lower() for c, s in text.items()}

    def by_name(pred) -> np.ndarray:
        hit = [c for c, s in text.items() if pred(c, s)]
        return np.isin(code, hit)

    tied = has("correlation") | (corr_field[rows] >= 0)
    python = has("Python id") & has_pid[rows]
    gpu = (gpu_track[rows] | (has("device") & has("stream"))) & ~python
    role = np.full(len(rows), -1, np.int8)
    kind = np.zeros(len(rows), np.int8)
    g = gpu & tied
    role[g] = 0
    kind[g & by_name(lambda c, s: lower[c].startswith("memcpy"))] = 1
    kind[g & by_name(lambda c, s: lower[c].startswith("memset"))] = 2
    cpu = ~gpu & has_pid[rows]
    op_args = np.zeros(len(rows), bool)
    for k in OP_ARGS:
        op_args |= has(k)
    is_op = by_name(lambda c, s: "::" in s or s == "record_param_comms") | op_args
    launch = tied | has("cbid")
    role[cpu] = 3
    role[cpu & is_op] = 1
    role[cpu & launch & ~python] = 2
    role[python] = 4
    return role, kind
