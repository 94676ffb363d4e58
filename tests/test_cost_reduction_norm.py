"""Hand-arithmetic tests of reductions, softmax, normalisation layers and pooling."""

from __future__ import annotations

from traceana.cost import Cost, OpCall, Unmodelled, op_cost
from traceana.cost.families import norm

F32, BF16, F16 = "float", "c10::BFloat16", "c10::Half"


def run(name, dims, types, concrete=None, strides=None) -> Cost:
    c = op_cost(OpCall(f"aten::{name}", tuple(dims), tuple(types), strides, concrete))
    assert isinstance(c, Cost), c
    return c


# ---------------------------------------------------------------- reductions


def test_sum_to_scalar_seed():
    c = run("sum", [(8192, 8192), ()], [F32, ""], ("", ""))
    assert c.bytes == 268_435_456 + 4  # read 8192*8192*4 + write one fp32
    assert c.flops == 67_108_864  # one add per element
    assert c.family == "reduction"


def test_sum_dim_list():
    c = run("sum", [(3, 4, 5), (), (), ()], [F32, "ScalarList", "Scalar", ""], ("", "[1, 2]", "False", ""))
    assert c.bytes == 60 * 4 + 3 * 4  # read 60 + write [3] = 252
    assert c.flops == 60


def test_sum_keepdim_negative_dim():
    c = run("sum", [(3, 4), (), (), ()], [F32, "ScalarList", "Scalar", ""], ("", "[-1]", "True", ""))
    assert c.bytes == 12 * 4 + 3 * 4  # out [3, 1] = 60
    assert c.bytes_expr.endswith("write out 3*1*4 B = 60 B")


def test_sum_of_ints_writes_int64():
    c = run("sum", [(979, 1024), ()], ["int", ""], ("", ""))
    assert c.bytes == 979 * 1024 * 4 + 8  # int32 read, int64 scalar write = 4,009,992


def test_sum_dtype_argument():
    c = run("sum", [(100,), (), (), ()], [BF16, "ScalarList", "Scalar", "Scalar"], ("", "[0]", "False", "6"))
    assert c.bytes == 100 * 2 + 4  # bf16 read, fp32 write = 204


def test_mean_dims_not_recorded_is_estimated():
    c = run("mean", [(32, 2048, 7, 7), (), (), ()], [F32, "GenericList", "Bool", ""])
    assert c.estimated
    assert c.bytes == 32 * 2048 * 49 * 4 + 4  # output assumed fully reduced


def test_mean_dims_recorded():
    c = run("mean", [(32, 2048, 7, 7), (), (), ()], [F32, "ScalarList", "Scalar", ""], ("", "[-1, -2]", "True", ""))
    assert not c.estimated
    assert c.bytes == 32 * 2048 * 49 * 4 + 32 * 2048 * 4  # 12,845,056 + 262,144 = 13,107,200


def test_max_dim_writes_values_and_indices():
    c = run("max", [(1, 5184, 1), (), ()], [F32, "Scalar", "Scalar"], ("", "-1", "False"))
    assert c.bytes == 5184 * 4 + 5184 * 4 + 5184 * 8  # read + values fp32 + indices int64 = 82,944


def test_max_all_and_max_other():
    assert run("max", [(10, 10)], [F32]).bytes == 400 + 4  # read 100 fp32, write one
    c = run("max", [(10,), (10,)], [F32, F32])  # max.other is elementwise
    assert c.family == "pointwise" and c.bytes == 3 * 40


def test_argmax_writes_int64():
    c = run("argmax", [(15, 151936), (), ()], [F32, "Scalar", "Scalar"], ("", "-1", "False"))
    assert c.bytes == 15 * 151936 * 4 + 15 * 8  # 9,116,160 + 120 = 9,116,280


def test_any_all_write_bool():
    assert run("all", [(16, 559)], ["bool"], ("",)).bytes == 16 * 559 + 1  # 8,945


def test_var_correction_and_linalg_vector_norm():
    c = run("var", [(8, 16), (), (), ()], [F32, "ScalarList", "Scalar", "Scalar"], ("", "[1]", "1", "False"))
    assert c.bytes == 128 * 4 + 8 * 4  # = 544
    c = run("linalg_vector_norm", [(1, 768), (), (), (), ()], [BF16, "Scalar", "ScalarList", "Scalar", ""],
            ("", "2", "[-1]", "True", ""))
    assert c.bytes == 768 * 2 + 2  # = 1,538


def test_bad_reduction_dim():
    r = op_cost(OpCall("aten::sum", ((3, 4), (), (), ()), (F32, "ScalarList", "Scalar", ""), None,
                       ("", "[5]", "False", "")))
    assert isinstance(r, Unmodelled)


def test_cumsum():
    c = run("cumsum", [(300,), (), ()], ["long", "Scalar", ""], ("", "0", ""))
    assert c.bytes == 300 * 8 * 2  # read + write int64 = 4,800


def test_mse_loss_mean():
    c = run("mse_loss", [(5, 128), (5, 128), ()], [F32, F32, "Scalar"], ("", "", "1"))
    assert c.bytes == 2 * 640 * 4 + 4  # read input + target, write scalar = 5,124
    assert c.flops == 3 * 640


# ---------------------------------------------------------------- softmax


def test_softmax_bf16():
    c = run("_softmax", [(16, 5185, 5185), (), ()], [BF16, "Scalar", "Scalar"], ("", "-1", "False"))
    n = 16 * 5185 * 5185  # 430,147,600
    assert c.bytes == 2 * n * 2  # read + write bf16 = 1,720,590,400
    assert c.flops == n * norm.SOFTMAX  # 12 per element
    assert c.family == "norm"


def test_softmax_half_to_float():
    c = run("_softmax", [(4, 10), (), ()], [F16, "Scalar", "Scalar"], ("", "-1", "True"))
    assert c.bytes == 40 * 2 + 40 * 4  # read fp16, write fp32 = 240


def test_softmax_dtype_argument():
    c = run("softmax", [(4, 10), (), ()], [BF16, "Scalar", "Scalar"], ("", "-1", "6"))
    assert c.bytes == 40 * 2 + 40 * 4


def test_log_softmax_backward_old_schema():
    c = run("_log_softmax_backward_data", [(32, 1000), (32, 1000), (), (32, 1000)], [F32, F32, "Int", F32])
    assert c.bytes == 3 * 32000 * 4  # read grad + read output + write grad_input = 384,000


# ---------------------------------------------------------------- layer / RMS norm


def test_native_layer_norm():
    c = run("native_layer_norm", [(1024, 512), (), (512,), (512,), ()], [F32, "", F32, F32, ""])
    # read x 2,097,152 + w 2,048 + b 2,048 + write y 2,097,152 + mean 4,096 + rstd 4,096
    assert c.bytes == 4_206_592
    assert c.flops == 1024 * 512 * norm.LAYER_NORM


def test_layer_norm_bf16_stats_in_fp32():
    c = run("native_layer_norm", [(10, 64), (), (64,), (64,), ()], [BF16, "ScalarList", BF16, BF16, "Scalar"],
            ("", "[64]", "", "", "1e-05"))
    assert c.bytes == 640 * 2 + 64 * 2 * 2 + 640 * 2 + 10 * 4 * 2  # 1,280 + 256 + 1,280 + 80 = 2,896


def test_layer_norm_shape_mismatch():
    r = op_cost(OpCall("aten::native_layer_norm", ((10, 64), (), (), (), ()), (F32, "ScalarList", "", "", ""),
                       None, ("", "[32]", "", "", "")))
    assert isinstance(r, Unmodelled)


def test_native_layer_norm_backward():
    c = run("native_layer_norm_backward",
            [(1024, 512), (1024, 512), (), (1024, 1), (1024, 1), (512,), (512,), ()],
            [F32, F32, "", F32, F32, F32, F32, ""])
    # read grad, x (2 x 2,097,152) + mean, rstd (2 x 4,096) + weight 2,048 (bias not read)
    # write grad_input 2,097,152 + grad_weight 2,048 + grad_bias 2,048
    assert c.bytes == 2 * 2_097_152 + 2 * 4_096 + 2_048 + 2_097_152 + 2 * 2_048  # = 6,305,792


def test_fused_rms_norm():
    c = run("_fused_rms_norm", [(8, 16, 32, 32), (), (32, 32), ()], [F32, "ScalarList", F32, ""],
            ("", "[32, 32]", "", ""))
    # read x 524,288 + w 4,096; write y 524,288 + rstd (8*16 rows) 512
    assert c.bytes == 1_053_184
    assert c.flops == 8 * 16 * 32 * 32 * norm.RMS_NORM


# ---------------------------------------------------------------- batch / group norm


def test_batch_norm_training():
    c = run("native_batch_norm", [(8, 16, 32, 32), (16,), (16,), (16,), (16,), (), (), ()],
            [F32] * 5 + ["Scalar"] * 3, ("", "", "", "", "", "True", "0.1", "1e-05"))
    # read x 524,288 + 4 per-channel 256; write y 524,288 + save_mean/invstd 128 + running stats 128
    assert c.bytes == 524_288 + 256 + 524_288 + 128 + 128
    assert c.flops == 131_072 * norm.BATCH_NORM_TRAIN
    assert any("twice" in n for n in c.notes)


def test_batch_norm_eval():
    c = run("_native_batch_norm_legit_no_training", [(8, 16, 32, 32), (16,), (16,), (16,), (16,), (), ()],
            [F32] * 5 + ["Scalar"] * 2, ("", "", "", "", "", "0.1", "1e-05"))
    assert c.bytes == 524_288 + 256 + 524_288  # no statistics written
    assert c.flops == 131_072 * norm.BATCH_NORM_EVAL


def test_cudnn_batch_norm_backward():
    c = run("cudnn_batch_norm_backward", [(32, 512, 7, 7), (32, 512, 7, 7)] + [(512,)] * 5 + [(), (0,)],
            [F32] * 7 + ["Double", "unsigned char"])
    n = 32 * 512 * 49 * 4  # 3,211,264 B per activation tensor
    assert c.bytes == 2 * n + 5 * 2048 + n + 2 * 2048  # reads + grad_input + grad_weight/bias = 9,656,320


def test_group_norm():
    c = run("native_group_norm", [(8, 16, 32, 32), (16,), (16,), (), (), (), (), ()], [F32] * 3 + ["Scalar"] * 5,
            ("", "", "", "8", "16", "1024", "4", "1e-05"))
    assert c.bytes == 524_288 + 128 + 524_288 + 2 * 8 * 4 * 4  # + mean/rstd [8, 4] fp32 = 1,048,960


# ---------------------------------------------------------------- pooling


def test_max_pool2d_with_indices():
    c = run("max_pool2d_with_indices", [(10, 64, 112, 112)] + [()] * 5, [BF16] + ["ScalarList"] * 4 + ["Scalar"],
            ("", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False"))
    out = 10 * 64 * 56 * 56  # (112 + 2 - 2 - 1) // 2 + 1 = 56
    assert c.bytes == 10 * 64 * 112 * 112 * 2 + out * 2 + out * 8  # = 24,084,480
    assert c.flops == out * 9


def test_adaptive_avg_pool2d():
    c = run("adaptive_avg_pool2d", [(10, 512, 7, 7), ()], [BF16, "ScalarList"], ("", "[1, 1]"))
    assert c.bytes == 10 * 512 * 49 * 2 + 10 * 512 * 2  # 501,760 + 10,240 = 512,000


def test_pool_without_kernel_size():
    r = op_cost(OpCall("aten::max_pool2d_with_indices", ((32, 64, 112, 112),) + ((),) * 5,
                       (F32, "GenericList", "GenericList", "GenericList", "GenericList", "Bool")))
    assert isinstance(r, Unmodelled)
