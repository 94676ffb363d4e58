"""Property tests: our matrix-op FLOPs equal torch.utils.flop_counter's on random shapes.

OpCalls are built the way the profiler records them (dims, type strings, Concrete Inputs).
torch runs only here, on meta tensors (no data, no device).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils.flop_counter import (  # noqa: E402
    FlopCounterMode,
    flop_registry,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

from traceana.cost import Cost, OpCall, op_cost  # noqa: E402

aten = torch.ops.aten
SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
dim = st.integers(1, 9)
# FLOPs do not depend on the dtype, bytes and the compute roof do: every matrix test draws one.
DTYPES = {"float": ("fp32", 4), "c10::BFloat16": ("bf16", 2), "c10::Half": ("fp16", 2), "double": ("fp64", 8)}
dtype = st.sampled_from(sorted(DTYPES))


def meta(*shape):
    return torch.empty(*shape, device="meta")


def counted(fn) -> int:
    with FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops()


def cost(name, dims, types, concrete=None) -> Cost:
    c = op_cost(OpCall(name, tuple(tuple(d) for d in dims), tuple(types),
                       None, tuple(concrete) if concrete is not None else None))
    assert isinstance(c, Cost), c
    assert c.matrix
    return c


def lst(v) -> str:
    return "[" + ", ".join(str(int(x)) for x in v) + "]"


# ---------------------------------------------------------------- GEMMs


@SETTINGS
@given(m=dim, n=dim, k=dim, dt=dtype)
def test_mm_addmm(m, n, k, dt):
    ref = counted(lambda: torch.mm(meta(m, k), meta(k, n)))
    c = cost("aten::mm", [(m, k), (k, n)], [dt, dt])
    assert c.flops == ref
    assert c.dtype == DTYPES[dt][0] and c.bytes == DTYPES[dt][1] * (m * k + k * n + m * n)
    ref = counted(lambda: torch.addmm(meta(n), meta(m, k), meta(k, n)))
    c = cost("aten::addmm", [(n,), (m, k), (k, n), (), ()], ["float"] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"])
    assert c.flops == ref


@SETTINGS
@given(b=dim, m=dim, n=dim, k=dim, dt=dtype)
def test_bmm_baddbmm(b, m, n, k, dt):
    ref = counted(lambda: torch.bmm(meta(b, m, k), meta(b, k, n)))
    c = cost("aten::bmm", [(b, m, k), (b, k, n)], [dt] * 2)
    assert c.flops == ref and c.dtype == DTYPES[dt][0]
    ref = counted(lambda: torch.baddbmm(meta(b, m, n), meta(b, m, k), meta(b, k, n)))
    c = cost("aten::baddbmm", [(b, m, n), (b, m, k), (b, k, n), (), ()], ["float"] * 3 + ["Scalar"] * 2)
    assert c.flops == ref


batch = st.lists(st.integers(1, 3), min_size=0, max_size=2)


@SETTINGS
@given(ba=batch, bb=batch, m=dim, n=dim, k=dim, data=st.data())
def test_matmul_broadcast(ba, bb, m, n, k, data):
    # make the batch dims broadcastable: where both have a dim, one of them may be 1
    r = min(len(ba), len(bb))
    for i in range(1, r + 1):
        if ba[-i] != bb[-i] and 1 not in (ba[-i], bb[-i]):
            bb[-i] = data.draw(st.sampled_from([1, ba[-i]]))
    a, b = (*ba, m, k), (*bb, k, n)
    ref = counted(lambda: torch.matmul(meta(*a), meta(*b)))
    assert cost("aten::matmul", [a, b], ["float", "float"]).flops == ref


@SETTINGS
@given(lead=st.lists(st.integers(1, 4), min_size=1, max_size=3), n=dim, k=dim, bias=st.booleans())
def test_linear(lead, n, k, bias):
    x, w = (*lead, k), (n, k)
    ref = counted(lambda: torch.nn.functional.linear(meta(*x), meta(*w), meta(n) if bias else None))
    dims = [x, w, (n,) if bias else ()]
    types = ["float", "float", "float" if bias else ""]
    assert cost("aten::linear", dims, types).flops == ref


@SETTINGS
@given(m=dim, n=dim, k=dim)
def test_scaled_mm(m, n, k):
    ref = flop_registry[aten._scaled_mm]((m, k), (k, n), (), (), out_val=None)
    dims = [(m, k), (k, n), (), (), (), (), (), ()]
    types = ["c10::Float8_e4m3fn"] * 2 + ["float", "float", "", "", "Scalar", "Scalar"]
    c = cost("aten::_scaled_mm", dims, types, ["", "", "", "", "", "", "15", "False"])
    assert c.flops == ref
    assert c.dtype == "fp8"


# ---------------------------------------------------------------- convolution


@st.composite
def conv_case(draw):
    nsp = draw(st.integers(1, 3))
    transposed = draw(st.booleans())
    groups = draw(st.integers(1, 3))
    cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    k = [draw(st.integers(1, 3)) for _ in range(nsp)]
    stride = [draw(st.integers(1, 3)) for _ in range(nsp)]
    pad = [draw(st.integers(0, 2)) for _ in range(nsp)]
    dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
    opad = [draw(st.integers(0, max(s, d) - 1)) if transposed else 0 for s, d in zip(stride, dil)]
    size = [draw(st.integers(max(1, d * (kk - 1) + 1 - 2 * p), 7)) for kk, d, p in zip(k, dil, pad)]
    if transposed:  # the output must not be empty: (size-1)*s - 2p + d(k-1) + opad + 1 >= 1
        pad = [min(p, ((sz - 1) * s + d * (kk - 1) + op) // 2)
               for p, sz, s, d, kk, op in zip(pad, size, stride, dil, k, opad)]
    n = draw(st.integers(1, 2))
    x = (n, cin, *size)
    w = (cin, cout // groups, *k) if transposed else (cout, cin // groups, *k)
    return x, w, stride, pad, dil, transposed, opad, groups


CONV_TYPES = ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]


def conv_concrete(stride, pad, dil, transposed, opad, groups):
    return ["", "", "", lst(stride), lst(pad), lst(dil), str(transposed), lst(opad), str(groups)]


@SETTINGS
@given(case=conv_case(), dt=dtype)
def test_convolution(case, dt):
    x, w, stride, pad, dil, transposed, opad, groups = case
    ref = counted(lambda: aten.convolution(meta(*x), meta(*w), None, stride, pad, dil, transposed, opad, groups))
    dims = [x, w] + [()] * 7
    c = cost("aten::convolution", dims, [dt, dt] + CONV_TYPES[2:],
             conv_concrete(stride, pad, dil, transposed, opad, groups))
    assert c.flops == ref and c.dtype == DTYPES[dt][0]
    out = aten.convolution(meta(*x), meta(*w), None, stride, pad, dil, transposed, opad, groups).shape
    assert c.bytes == DTYPES[dt][1] * (torch.Size(x).numel() + torch.Size(w).numel() + out.numel())
    if not transposed:  # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...)
        cud = cost("aten::cudnn_convolution", [x, w] + [()] * 7,
                   ["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
                   ["", "", lst(pad), lst(stride), lst(dil), str(groups), "False", "False", "True"])
        assert cud.flops == ref


@SETTINGS
@given(case=conv_case(), mask=st.lists(st.booleans(), min_size=3, max_size=3))
def test_convolution_backward(case, mask):
    x, w, stride, pad, dil, transposed, opad, groups = case
    out = aten.convolution(meta(*x), meta(*w), None, stride, pad, dil, transposed, opad, groups).shape
    bias_sizes = [out[1]] if mask[2] else None
    ref = counted(lambda: aten.convolution_backward(meta(*out), meta(*x), meta(*w), bias_sizes, stride, pad, dil,
                                                    transposed, opad, groups, mask))
    fwd = counted(lambda: aten.convolution(meta(*x), meta(*w), None, stride, pad, dil, transposed, opad, groups))
    dims = [tuple(out), x, w] + [()] * 8
    types = ["float"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    concrete = ["", "", "", "[0]", lst(stride), lst(pad), lst(dil), str(transposed), lst(opad), str(groups),
                "[" + ", ".join(map(str, mask)) + "]"]
    c = cost("aten::convolution_backward", dims, types, concrete)
    # flop_counter ignores groups in the weight gradient (counts it groups x too high); we do not.
    assert c.flops == ref - (groups - 1) * fwd * mask[1]
    if groups == 1:
        assert c.flops == ref


# ---------------------------------------------------------------- attention


@st.composite
def attn_case(draw):
    b, hk = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    hq = hk * draw(st.integers(1, 3))  # GQA
    sq, skv = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    dq, dv = draw(st.sampled_from([8, 16, 64])), draw(st.sampled_from([8, 16, 64]))
    return (b, hq, sq, dq), (b, hk, skv, dq), (b, hk, skv, dv)


BF = "c10::BFloat16"


def bshd(s):
    return (s[0], s[2], s[1], s[3])


@SETTINGS
@given(case=attn_case(), causal=st.booleans(), dt=st.sampled_from(["c10::BFloat16", "c10::Half", "float"]))
def test_sdpa_forward(case, causal, dt):
    q, k, v = case
    ref = sdpa_flop_count(q, k, v)
    flash = cost("aten::_scaled_dot_product_flash_attention", [q, k, v, (), (), (), ()],
                 [dt] * 3 + ["Scalar"] * 4, ["", "", "", "0.", str(causal), "False", "0.125"])
    assert flash.flops == ref == flop_registry[aten._scaled_dot_product_flash_attention](q, k, v, out_val=None)
    assert flash.dtype == DTYPES[dt][0]
    assert any("causal" in n for n in flash.notes) == causal
    eff = cost("aten::_scaled_dot_product_efficient_attention", [q, k, v, (), (), (), (), ()],
               [BF] * 3 + ["", "Scalar", "Scalar", "Scalar", "Scalar"], ["", "", "", "", "True", "0.", str(causal), ""])
    assert eff.flops == flop_registry[aten._scaled_dot_product_efficient_attention](q, k, v, None, True, out_val=None)
    cud = cost("aten::_scaled_dot_product_cudnn_attention", [q, k, v] + [()] * 6,
               [BF] * 3 + ["", "Scalar"] + ["Scalar"] * 4)
    assert cud.flops == ref
    pub = cost("aten::scaled_dot_product_attention", [q, k, v] + [()] * 5,
               [BF] * 3 + ["", "Scalar", "Scalar", "", "Scalar"])
    assert pub.flops == ref
    # _flash/_efficient_attention_forward take (batch, seq, heads, dim): equal to sdpa_flop_count on (B,H,S,D)
    raw = cost("aten::_flash_attention_forward", [bshd(q), bshd(k), bshd(v)] + [()] * 12,
               [BF] * 3 + ["", ""] + ["Scalar"] * 6 + [""] * 4,
               ["", "", "", "", "", str(q[2]), str(k[2]), "0.", str(causal), "False", "0.125", "", "", "", ""])
    assert raw.flops == ref
    effraw = cost("aten::_efficient_attention_forward", [bshd(q), bshd(k), bshd(v)] + [()] * 11,
                  [BF] * 3 + ["", "", "", "", ""] + ["Scalar"] * 4 + ["", ""])
    assert effraw.flops == ref


@SETTINGS
@given(case=attn_case())
def test_sdpa_backward(case):
    q, k, v = case
    go = q[:3] + (v[3],)
    lse = (q[0], q[1], q[2])
    ref = sdpa_backward_flop_count(go, q, k, v)
    assert ref == flop_registry[aten._scaled_dot_product_flash_attention_backward](go, q, k, v, out_val=None)
    flash = cost("aten::_scaled_dot_product_flash_attention_backward", [go, q, k, v, go, lse] + [()] * 9,
                 [BF] * 5 + ["float"] + [""] * 2 + ["Scalar"] * 4 + ["long int"] * 2 + ["Scalar"])
    assert flash.flops == ref
    eff = cost("aten::_scaled_dot_product_efficient_attention_backward", [go, q, k, v, (), go, lse] + [()] * 6,
               [BF] * 4 + ["", BF, "float"] + ["long int"] * 2 + ["Scalar", "ScalarList", "Scalar", "Scalar"])
    assert eff.flops == ref
    raw = cost("aten::_flash_attention_backward", [bshd(go), bshd(q), bshd(k), bshd(v), bshd(go), lse] + [()] * 11,
               [BF] * 5 + ["float"] + [""] * 11)
    assert raw.flops == ref
    if q[3] == v[3]:
        assert ref * 2 == 5 * sdpa_flop_count(q, k, v)  # backward = 2.5 x forward
