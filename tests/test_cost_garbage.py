"""No formula raises, whatever the recorded arguments: random garbage for every registered op."""

from __future__ import annotations

import random

import pytest

from traceana.cost import Cost, OpCall, Unmodelled, registered_names
from traceana.cost.registry import lookup

TYPES = ["float", "c10::BFloat16", "c10::Half", "long int", "int", "bool", "double", "Scalar", "",
         "ScalarList", "TensorList", "GenericList", "Int", "Bool", "c10::Float8_e4m3fn", "weird",
         "unsigned char"]
CONCRETE = ["", "0", "1", "-1", "2", "[1, 1]", "[2, 2]", "[]", "[-1]", "True", "False",
            "[True, True, False]", "0.5", "15", "6", "24", "x", "[a]", "-inf", "nan", "[0, 0]", "3",
            "[3, 3]", "1e-05", "[0]", "[5, 5]", "-7", "1000000"]


def _dims(r: random.Random):
    x = r.random()
    if x < 0.3:
        return ()
    if x < 0.4:  # a TensorList
        return tuple(tuple(r.randint(0, 5) for _ in range(r.randint(0, 3))) for _ in range(r.randint(0, 3)))
    return tuple(r.choice([-1, 0]) if r.random() < 0.05 else r.choice([1, 2, 3, 4, 5, 8, 16])
                 for _ in range(r.randint(0, 5)))


def _garbage(name: str, r: random.Random) -> OpCall:
    n = r.randint(0, 12)
    return OpCall(
        name=name,
        dims=tuple(_dims(r) for _ in range(n)),
        types=tuple(r.choice(TYPES) for _ in range(n if r.random() < 0.9 else r.randint(0, n))),
        strides=None if r.random() < 0.5 else tuple(_dims(r) for _ in range(n)),
        concrete=None if r.random() < 0.3 else tuple(r.choice(CONCRETE) for _ in range(n)),
        kernel_names=() if r.random() < 0.7 else ("CatArrayBatchedCopy<OpaqueType<2u>, unsigned int>",),
    )


@pytest.mark.parametrize("seed", range(4))
def test_random_arguments_never_raise(seed):
    r = random.Random(seed)
    for name in registered_names():
        fn = lookup(name)
        for _ in range(25):
            call = _garbage(name, r)
            res = fn(call)  # the formula itself: op_cost's try/except is only a last resort
            assert isinstance(res, (Cost, Unmodelled)), call
            if isinstance(res, Cost):
                assert res.flops >= 0 and res.bytes >= 0, (call, res)
