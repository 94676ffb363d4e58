"""Hand-arithmetic tests of the pointwise family (expected values worked out beside each assert)."""

from __future__ import annotations

from traceana.cost import Cost, OpCall, Unmodelled, op_cost
from traceana.cost.families.pointwise import TRANSCENDENTAL

F32, F16, BF16, I64 = "float", "c10::Half", "c10::BFloat16", "long int"
BIG = (8192, 8192)


def run(name, dims, types, strides=None, concrete=None) -> Cost:
    c = op_cost(OpCall(f"aten::{name}", tuple(dims), tuple(types), strides, concrete))
    assert isinstance(c, Cost), c
    return c


# ---------------------------------------------------------------- the seed cases


def test_pow_scalar_exponent_seed():
    c = run("pow", [BIG, ()], [F32, "Scalar"], concrete=("", "2"))
    assert c.bytes == 536_870_912  # read 8192*8192*4 + write 8192*8192*4
    assert c.flops == 67_108_864  # x**2 is x*x: 8192*8192 x 1
    assert c.family == "pointwise" and c.dtype == "fp32" and not c.matrix
    assert c.flops_expr == "8192*8192 elements x 1 FLOP = 67,108,864"
    assert c.bytes_expr.endswith("= 536,870,912 B")


def test_pow_exponent_not_recorded_is_general_pow():
    c = run("pow", [BIG, ()], [F32, "Scalar"])
    assert c.bytes == 536_870_912
    assert c.flops == 8192 * 8192 * TRANSCENDENTAL["pow"]
    assert any("exponent not recorded" in n for n in c.notes)


def test_pow_special_exponents():
    assert run("pow", [(10,), ()], [F32, "Scalar"], concrete=("", "0.5")).flops == 10  # sqrt: 1 each
    assert run("pow", [(10,), ()], [F32, "Scalar"], concrete=("", "3")).flops == 20  # x*x*x: 2 each
    assert run("pow", [(10,), ()], [F32, "Scalar"], concrete=("", "2.7")).flops == 10 * TRANSCENDENTAL["pow"]
    assert run("pow", [(10,), (10,)], [F32, F32]).flops == 10 * TRANSCENDENTAL["pow"]  # tensor exponent


def test_mul_inplace_scalar_seed():
    c = run("mul_", [BIG, ()], [F32, "Scalar"], concrete=("", "2"))
    assert c.bytes == 536_870_912  # read self 8192*8192*4 + write self 8192*8192*4
    assert c.flops == 67_108_864


def test_mul_inplace_zero_dim_double_operand():
    # x.mul_(0.5) records the Python number as a 0-dim CPU double: passed by value, 0 bytes
    c = run("mul_", [BIG, ()], [F32, "double"])
    assert c.bytes == 536_870_912  # read self 8192*8192*4 + write self 8192*8192*4
    assert c.dtype == "fp32"  # in-place keeps self's dtype


# ---------------------------------------------------------------- broadcasting and strides


def test_binary_same_shape():
    c = run("add", [(1024, 512), (1024, 512), ()], [F32, F32, "Scalar"], concrete=("", "", "1"))
    assert c.bytes == 3 * 1024 * 512 * 4  # read a + read b + write out = 6,291,456
    assert c.flops == 1024 * 512


def test_broadcast_operand_read_at_its_own_size():
    # bias [512] broadcast over [1024, 512]: read 512 elements, not 1024*512
    c = run("add", [(1024, 512), (512,), ()], [F32, F32, "Scalar"])
    assert c.bytes == 1024 * 512 * 4 + 512 * 4 + 1024 * 512 * 4  # 4,196,352
    assert c.flops == 1024 * 512


def test_stride_zero_expanded_input_counts_once():
    # b = bias.expand(1024, 512): shape [1024, 512] but strides (0, 1): 512 elements in memory
    c = run("mul", [(1024, 512), (1024, 512)], [F32, F32], strides=((512, 1), (0, 1)))
    assert c.bytes == 1024 * 512 * 4 + 512 * 4 + 1024 * 512 * 4  # read a + read 512 stored + write out
    assert "stride-0" in c.bytes_expr


def test_broadcast_both_sides():
    c = run("mul", [(8, 1, 6), (7, 1)], [F32, F32])
    assert c.flops == 8 * 7 * 6  # broadcast shape (8, 7, 6) = 336 outputs
    assert c.bytes == 8 * 6 * 4 + 7 * 4 + 336 * 4  # 192 + 28 + 1,344 = 1,564


def test_python_scalar_operand():
    c = run("mul", [(4096, 1024), ()], [BF16, "double"])
    assert c.bytes == 4096 * 1024 * 2 + 4096 * 1024 * 2  # bf16 stays bf16; the scalar is by value
    assert c.dtype == "bf16"


def test_inplace_with_tensor_operand():
    c = run("add_", [(1000, 1000), (1000, 1000), ()], [F32, F32, "Scalar"])
    assert c.bytes == 3 * 4_000_000  # read self + read other + write self = 12,000,000


# ---------------------------------------------------------------- dtypes


def test_type_promotion_half_and_float():
    c = run("add", [(100,), (100,), ()], [F16, F32, "Scalar"])
    assert c.bytes == 100 * 2 + 100 * 4 + 100 * 4  # fp16 read + fp32 read + fp32 write = 1,000
    assert c.dtype == "fp32"


def test_type_promotion_half_and_bfloat16_gives_float():
    c = run("mul", [(10,), (10,)], [F16, BF16])
    assert c.bytes == 10 * 2 + 10 * 2 + 10 * 4  # write fp32 = 80


def test_int_tensor_plus_python_float():
    c = run("add", [(4,), (), ()], [I64, "double", "Scalar"])
    assert c.bytes == 4 * 8 + 4 * 4  # int64 read, default-float (fp32) write = 48
    assert c.dtype == "fp32"


def test_int_tensor_plus_int_scalar_stays_int():
    c = run("add", [(4,), (), ()], [I64, "Scalar", "Scalar"], concrete=("", "3", "1"))
    assert c.bytes == 4 * 8 + 4 * 8  # read + write int64 = 64
    assert c.dtype == "int64"


def test_int_tensor_plus_float_scalar_promotes():
    c = run("add", [(4,), (), ()], [I64, "Scalar", "Scalar"], concrete=("", "2.5", "1"))
    assert c.bytes == 4 * 8 + 4 * 4  # int64 read, fp32 write = 48


def test_true_division_of_ints_is_float():
    c = run("div", [(10,), (10,)], [I64, I64])
    assert c.bytes == 10 * 8 * 2 + 10 * 4  # two int64 reads + fp32 write = 200


def test_comparison_writes_bool():
    c = run("gt", [(1000,), ()], [F32, "Scalar"], concrete=("", "0"))
    assert c.bytes == 1000 * 4 + 1000 * 1  # read fp32 + write bool = 5,000
    assert c.dtype == "fp32"  # the compare runs in the operands' dtype


def test_zero_dim_operands_only():
    c = run("add", [(), (), ()], [I64, I64, "Int"])
    assert c.bytes == 8 + 8  # read 0-dim self + write one int64 (the other is a Python int)
    assert c.flops == 1


def test_out_variant_sets_dtype():
    c = run("nan_to_num", [(1024, 64), (), (), (), (1024, 64)], [F32, "Scalar", "", "", F32])
    assert c.bytes == 2 * 1024 * 64 * 4  # read + write out = 524,288


def test_out_tensor_of_size_zero_is_resized():
    c = run("abs", [(4096,), (0,)], [F32, F32])
    assert c.bytes == 4096 * 4 * 2  # read + write = 32,768


# ---------------------------------------------------------------- op-specific


def test_transcendental_weight_and_memory_bound_note():
    c = run("exp", [(1000,)], [F32])
    assert c.flops == 1000 * TRANSCENDENTAL["exp"]  # 1000 x 8 = 8,000
    assert c.bytes == 8000  # read 4,000 + write 4,000
    assert any("memory-bound" in n for n in c.notes)


def test_exp_of_int_is_float():
    c = run("exp", [(10,)], [I64])
    assert c.bytes == 10 * 8 + 10 * 4  # int64 read, fp32 write = 120


def test_inplace_unary():
    c = run("relu_", [(32, 64, 112, 112)], [F32])
    assert c.bytes == 2 * 32 * 64 * 112 * 112 * 4  # read + write self = 205,520,896
    assert c.flops == 32 * 64 * 112 * 112


def test_where_promotes_the_values_not_the_condition():
    c = run("where", [(4096,), (4096,), ()], ["bool", F32, F32])
    assert c.bytes == 4096 * 1 + 4096 * 4 + 4 + 4096 * 4  # cond + x + 0-dim fp32 y + out = 36,868
    assert c.dtype == "fp32"


def test_masked_fill_keeps_self_dtype():
    c = run("masked_fill", [(5, 5), (5, 5), ()], [BF16, "bool", "Scalar"], concrete=("", "", "0"))
    assert c.bytes == 25 * 2 + 25 * 1 + 25 * 2  # self + mask + out = 125


def test_threshold_backward():
    c = run("threshold_backward", [(32, 2048, 7, 7), (32, 2048, 7, 7), ()], [F32, F32, "Int"])
    n = 32 * 2048 * 7 * 7  # 3,211,264
    assert c.bytes == 3 * n * 4  # read grad + read self + write grad_input = 38,535,168
    assert c.flops == n


def test_addcmul_three_operands():
    c = run("addcmul_", [(512, 8192)] * 3 + [()], [F32] * 3 + ["Scalar"])
    n = 512 * 8192
    assert c.bytes == 4 * n * 4  # read self, t1, t2 + write self = 67,108,864
    assert c.flops == 3 * n


def test_dropout_train_and_eval():
    train = run("native_dropout", [(16, 100), (), ()], [F32, "Scalar", "Scalar"], concrete=("", "0.1", "True"))
    assert train.bytes == 1600 * 4 + 1600 * 4 + 1600 * 1  # read + write out + write bool mask = 14,400
    assert train.flops == 2 * 1600
    ev = run("dropout", [(16, 100), (), ()], [F32, "Scalar", "Scalar"], concrete=("", "0.", "False"))
    assert ev.bytes == 0 and ev.flops == 0


def test_foreach_uses_kernel_hint_for_dtype():
    call = OpCall("aten::_foreach_add_", (((128, 128), (128,)), ((128, 128), (128,)), ()),
                  ("TensorList", "TensorList", "Scalar"), None, ("", "", "-0.001"),
                  ("void at::native::multi_tensor_apply_kernel<c10::BFloat16, ...>",))
    c = op_cost(call)
    n = 128 * 128 + 128  # 16,512 elements
    assert isinstance(c, Cost) and not c.estimated
    assert c.bytes == 3 * n * 2  # read self list + read other list + write self, bf16 = 99,072
    assert c.flops == n


def test_foreach_without_hint_assumes_fp32_and_flags_it():
    c = op_cost(OpCall("aten::_foreach_mul_", (((10,), (20,)), ()), ("TensorList", "Scalar")))
    assert isinstance(c, Cost) and c.estimated
    assert c.bytes == 2 * 30 * 4  # read + write 30 elements at 4 B = 240


# ---------------------------------------------------------------- garbage in, Unmodelled out


def test_unbroadcastable_operands():
    r = op_cost(OpCall("aten::add", ((3, 4), (5,), ()), (F32, F32, "Scalar")))
    assert isinstance(r, Unmodelled) and "broadcast" in r.reason


def test_unknown_dtype():
    r = op_cost(OpCall("aten::exp", ((3, 4),), ("c10::Float7_weird",)))
    assert isinstance(r, Unmodelled)


def test_negative_dims():
    r = op_cost(OpCall("aten::mul", ((3, -4), (3, 4)), (F32, F32)))
    assert isinstance(r, Unmodelled) and "invalid" in r.reason


def test_no_tensor_operand():
    r = op_cost(OpCall("aten::eq", ((), (), (), ()), ("Scalar", "Scalar", "int", "Scalar")))
    assert isinstance(r, Unmodelled)


def test_corrupt_record_with_extra_tensors():
    # old profilers sometimes appended earlier ops' shapes to the argument list
    r = op_cost(OpCall("aten::where", ((2048, 512), (2048, 512), (2048, 160), (2048, 160)), (F32,) * 4))
    assert isinstance(r, Unmodelled)
