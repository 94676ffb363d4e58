"""Hand-arithmetic tests of copies, fills, casts, views, cat/stack and gathers/scatters."""

from __future__ import annotations

from traceana.cost import Cost, OpCall, Unmodelled, op_cost

F32, BF16, I64 = "float", "c10::BFloat16", "long int"


def run(name, dims, types, concrete=None, strides=None, kernels=()) -> Cost:
    c = op_cost(OpCall(f"aten::{name}", tuple(dims), tuple(types), strides, concrete, tuple(kernels)))
    assert isinstance(c, Cost), c
    return c


# ---------------------------------------------------------------- fills and copies


def test_fill_seed_writes_only():
    c = run("fill_", [(8192, 8192), ()], [F32, "Scalar"], ("", "0."))
    assert c.bytes == 268_435_456  # write 8192*8192*4, nothing read
    assert c.flops == 0 and c.family == "memory"


def test_zero_():
    assert run("zero_", [(64, 3, 7, 7)], [F32]).bytes == 64 * 3 * 49 * 4  # 37,632


def test_copy_reads_src_writes_dst():
    c = run("copy_", [(16, 559, 1024), (16, 559, 1024), ()], [F32, BF16, "Scalar"], ("", "", "False"))
    n = 16 * 559 * 1024  # 9,158,656
    assert c.bytes == n * 2 + n * 4  # read bf16 src + write fp32 dst = 54,951,936
    assert c.flops == 0


def test_copy_from_broadcast_source():
    c = run("copy_", [(4, 1024), (4, 1024), ()], [F32, F32, "Scalar"], strides=((1024, 1), (0, 1), ()))
    assert c.bytes == 1024 * 4 + 4 * 1024 * 4  # one stored row read + full dst written = 20,480


def test_to_copy_with_dtype_enum():
    # .to(torch.bfloat16): dtype enum 15
    c = run("_to_copy", [(951, 1024)] + [()] * 6, [F32, "Scalar"] + [""] * 3 + ["Scalar", ""],
            ("", "15", "", "", "", "False", ""))
    assert c.bytes == 951 * 1024 * 4 + 951 * 1024 * 2  # read fp32 + write bf16 = 5,842,944
    assert c.dtype == "bf16"


def test_to_copy_fp8_enums():
    for enum in ("23", "24"):  # Float8_e5m2, Float8_e4m3fn
        c = run("_to_copy", [(100,)] + [()] * 6, [F32, "Scalar"] + [""] * 5, ("", enum, "", "", "", "", ""))
        assert c.bytes == 400 + 100  # fp32 read + 1-byte write


def test_to_copy_without_concrete_assumes_input_dtype():
    c = run("_to_copy", [(100,)] + [()] * 6, ["int", "Scalar", "Scalar", "", "", "Scalar", ""])
    assert c.bytes == 2 * 400 and c.estimated
    assert any("not recorded" in n for n in c.notes)


def test_to_device_overload_dtype_position():
    # to.device(self, device, dtype, non_blocking, copy, memory_format): dtype is argument 2
    c = run("to", [(32,)] + [()] * 5, [I64, "", "Scalar", "Scalar", "Scalar", ""], ("", "", "6", "False", "False", ""))
    assert c.bytes == 32 * 8 + 32 * 4  # = 384


def test_clone_and_contiguous():
    assert run("clone", [(128, 9375), ()], [F32, ""]).bytes == 2 * 128 * 9375 * 4  # 9,600,000
    free = run("contiguous", [(4096, 64), ()], [F32, "Scalar"], ("", "0"), strides=((64, 1), ()))
    assert free.bytes == 0  # already contiguous: returns self
    copy = run("contiguous", [(4096, 64), ()], [F32, "Scalar"], ("", "0"), strides=((1, 4096), ()))
    assert copy.bytes == 2 * 4096 * 64 * 4  # transposed input: a real copy = 2,097,152


def test_views_and_allocations_are_free():
    for name in ("view", "transpose", "as_strided", "t", "expand", "permute", "empty", "empty_strided"):
        c = run(name, [(3, 4), ()], [F32, "ScalarList"])
        assert c.bytes == 0 and c.flops == 0


def test_zeros_factory():
    c = run("zeros", [()] * 5, ["ScalarList", "Scalar", "", "", "Scalar"], ("[5, 5]", "15", "", "", "False"))
    assert c.bytes == 25 * 2  # bf16 zeros written = 50
    assert run("zeros_like", [(100,)] + [()] * 5, [I64, "", "", "", "", ""]).bytes == 800


def test_arange():
    c = run("arange", [()] * 6, ["Scalar", "Scalar", "", "", "", "Scalar"], ("0", "559", "", "", "", "False"))
    assert c.bytes == 559 * 8  # int64 = 4,472


# ---------------------------------------------------------------- TensorLists


def test_cat_tensorlist_with_kernel_dtype():
    dims = (((1, 559, 32), (1, 559, 32)), ())
    strides = (((17888, 1, 559), (17888, 1, 559)), ())
    kern = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::"
            "OpaqueType<2u>, unsigned int, 4, 64, 64>(...)",)
    c = run("cat", dims, ["TensorList", "Scalar"], ("", "-1"), strides, kern)
    n = 2 * 559 * 32  # 35,776 elements
    assert c.bytes == 2 * n * 2  # read all inputs + write the concatenation, 2-byte elements = 143,104
    assert not c.estimated


def test_cat_without_dtype_hint_is_estimated():
    c = run("cat", [((2, 3), (4, 3)), ()], ["TensorList", "Scalar"], ("", "0"))
    assert c.bytes == 2 * 18 * 4 and c.estimated  # 18 elements read + written at an assumed 4 B


def test_stack_broadcast_inputs():
    c = run("stack", [((4, 5), (4, 5)), ()], ["TensorList", "Scalar"], ("", "0"),
            (((0, 1), (5, 1)), ()))
    assert c.bytes == (5 + 20) * 4 + 40 * 4  # first input stored as one row: read 25, write 40 = 260


def test_cat_shapes_not_recorded():
    r = op_cost(OpCall("aten::cat", ((), ()), ("TensorList", "Scalar")))
    assert isinstance(r, Unmodelled) and "not recorded" in r.reason


# ---------------------------------------------------------------- gathers / scatters


def test_embedding_reads_only_gathered_rows():
    c = run("embedding", [(151936, 1024), (16, 559), (), (), ()], [BF16, I64, "Scalar", "Scalar", "Scalar"],
            ("", "", "-1", "False", "False"))
    rows = 16 * 559  # 8,944 lookups
    # read indices 8,944*8 + read rows 8,944*1024*2 + write the same rows
    assert c.bytes == rows * 8 + 2 * rows * 1024 * 2  # 71,552 + 36,634,624 = 36,706,176
    assert c.family == "index"


def test_embedding_dense_backward():
    c = run("embedding_dense_backward", [(16, 559, 1024), (16, 559), (), (), ()],
            [BF16, I64, "Scalar", "Scalar", "Scalar"], ("", "", "151936", "-1", "False"))
    assert c.bytes == 16 * 559 * 1024 * 2 + 16 * 559 * 8 + 151936 * 1024 * 2  # grad + idx + dense grad write
    assert c.flops == 16 * 559 * 1024


def test_index_select():
    c = run("index_select", [(5, 3), (), (2,)], [F32, "Scalar", I64], ("", "0", ""))
    assert c.bytes == 2 * 8 + 2 * 3 * 4 * 2  # index + gathered rows + out = 64


def test_gather():
    c = run("gather", [(44,), (), (47424,), ()], [F32, "Scalar", "long", "Scalar"], ("", "0", "", "False"))
    assert c.bytes == 47424 * 8 + 47424 * 4 * 2  # index + gathered + out = 758,784


def test_scatter_add_inplace_read_modify_write():
    c = run("scatter_add_", [(50,), (), (9976,), (9976,)], [F32, "Scalar", "long", F32], ("", "0", "", ""))
    # read index 79,808 + src 39,904 + dst elements 39,904, write dst elements 39,904
    assert c.bytes == 9976 * 8 + 3 * 9976 * 4  # = 199,520
    assert c.flops == 9976


def test_index_put_without_recorded_indices():
    c = run("index_put_", [(6, 2048), (), (6825,), ()], [F32, "", F32, "Scalar"], ("", "", "", "False"))
    assert c.bytes == 6825 * 4 * 2  # read values + write as many elements = 54,600
    assert c.estimated  # the index tensors' reads are unknown


def test_index_without_indices_is_unmodelled():
    r = op_cost(OpCall("aten::index", ((3, 4), ()), (F32, "")))
    assert isinstance(r, Unmodelled)


def test_index_with_recorded_indices():
    c = run("index", [(100, 8), ((5,),)], [F32, "TensorList"])
    assert c.bytes == 5 * 8 + 5 * 8 * 4 * 2  # int64 index + 5 gathered rows + out = 360


def test_slice_backward():
    c = run("slice_backward", [(1024, 183), (), (), (), (), ()], [F32, "ScalarList"] + ["Scalar"] * 4,
            ("", "[1024, 3328]", "1", "0", "183", "1"))
    assert c.bytes == 1024 * 183 * 4 + 1024 * 3328 * 4  # read grad + write the full zero-padded grad
