"""Importing this package registers every formula family."""

from traceana.cost.families import (  # noqa: F401
    attention,
    comm,
    conv,
    custom,
    gemm,
    index,
    memory,
    norm,
    pointwise,
    pool,
    reduction,
    tbe,
)
