"""Importing this package registers every formula family."""

from traceana.cost.families import (  # noqa: F401
    attention,
    attention_paged,
    comm,
    conv,
    custom,
    gemm,
    index,
    memory,
    moe,
    norm,
    pointwise,
    pool,
    quant,
    reduction,
    resample,
    serving,
    tbe,
)
