"""Which GPU kernels are communication, from their names."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def comm_name_mask(names: Sequence[str]) -> np.ndarray:
    """Per name code: is it a collective-communication kernel (NCCL / RCCL)?"""
    return np.array([("nccl" in n.lower() or "rccl" in n.lower()) for n in names], dtype=bool)
