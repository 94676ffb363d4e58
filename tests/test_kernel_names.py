"""The kernel-name grammar (traceana/link/kernel_names): every row of tests/kernel_names.tsv (every distinct
kernel name of the shared traces, and names from the libraries' documented naming conventions) read into
its library, class, op, dtypes, tensor-core use, tile and split; the names the issue quotes, checked one by
one; a name read from its head only, once."""

from __future__ import annotations

import glob
import os
import time

import pytest

from tests.kernel_names_table import FIELDS, cut, fmt, rows
from traceana.link.kernel_names import HEAD, parse
from traceana.link.kernel_names.read import _parse

ROWS = rows()


def test_the_table_holds_real_names_of_every_family():
    names = [n for n, _, _ in ROWS]
    assert len(set(names)) == len(names) >= 150  # distinct names
    libs = {e["library"] for _, e, _ in ROWS}
    assert {"cuBLAS", "cuBLASLt", "CUTLASS", "cuDNN", "Tensile", "MIOpen", "CK", "ATen", "Triton", "flash-attention",
            "FlashInfer", "NCCL", "DeepEP", "FBGEMM", "vLLM"} <= libs
    classes = {e["cls"] for _, e, _ in ROWS}
    assert classes == {"gemm", "convolution", "attention", "elementwise", "reduction", "normalization", "copy",
                       "communication", "memcpy/memset", "other"}


@pytest.mark.parametrize("name,expected,source", ROWS, ids=[f"{i}:{n[:60]}" for i, (n, _, _) in enumerate(ROWS)])
def test_each_name_reads_as_the_table_says(name, expected, source):
    k = parse(name)
    assert {f: fmt(k, f) for f in FIELDS} == expected


@pytest.mark.parametrize("name,library,cls,a,acc,out,tc", [
    # cuBLAS: fp16 inputs, s = fp32 accumulate, 16816 = the m16n8k16 MMA (tensor cores), fp16 output; not an
    # fp32 GEMM (the s is the accumulator)
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", "cuBLAS", "gemm", "fp16", "fp32", "fp16", True),
    # sgemm: fp32 on CUDA cores (no MMA shape in the name)
    ("volta_sgemm_128x64_nn", "cuBLAS", "gemm", "fp32", "fp32", "fp32", False),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", "cuBLAS", "gemm", "fp16", "fp32", "fp16", True),
    # the template's tensors are bf16: a bf16 GEMM beside a float compute type, not an fp32 one
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
     "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16> >()",
     "cuBLAS", "gemm", "bf16", "fp32", "bf16", False),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)",
     "CUTLASS", "gemm", "bf16", "fp32", "bf16", True),
    # cuBLASLt on Hopper: t = bf16 operands, s = fp32 accumulate, t = bf16 output
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "cuBLASLt", "gemm", "bf16", "fp32", "bf16", True),
    # Tensile: HHS = fp16 data, fp16 destination, fp32 compute; MI = a matrix (MFMA) instruction
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_GSU1", "Tensile", "gemm", "fp16", "fp32", "fp16", True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >"
     "(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)", "ATen", "elementwise", "fp32", None, "fp32",
     None),
])
def test_the_names_the_issue_quotes(name, library, cls, a, acc, out, tc):
    k = parse(name)
    assert (k.library, k.cls, k.a, k.acc, k.out, k.tensor_cores) == (library, cls, a, acc, out, tc)


def test_tf32_is_fp32_operands_on_tensor_cores():
    # CUTLASS names no input type when it is the accumulator's: fp32 operands, s1688 MMA -> TF32
    assert parse("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(Params)").tf32
    assert parse("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_"
                 "kernel").tf32
    assert not parse("ampere_sgemm_128x64_nn").tf32  # CUDA cores
    assert not parse("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn").tf32  # fp16 operands
    # AMD's fp32 MFMA multiplies fp32 as fp32 (only an X type, XF32, is reduced precision)
    k = parse("Cijk_Ailk_Bljk_SSS_BH_MT64x64x16_MI32x32x2x1_SN_GSU4_GSUASB")
    assert k.tensor_cores and k.math == "fp32" and not k.tf32
    # GSU4: GlobalSplitU 4, partial sums in one buffer by atomic adds
    assert (k.split, k.split_factor) == ("split-K", 4) and "atomic adds" in k.split_evidence


def test_a_name_is_read_from_its_head_once():
    # a template list of ~8 MB: the grammar reads its first HEAD (4,096) characters, whatever follows
    body = ", ".join(["at::native::Foo<float>"] * 350_000)
    name = f"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, {body}>(int)"
    assert len(name) > 8_000_000 and HEAD == 4096
    t0 = time.perf_counter()
    k = parse(name)
    assert (k.library, k.cls, k.op, k.a) == ("ATen", "elementwise", "add", "bf16")
    assert parse(name[:HEAD]) is k  # the same cached record: one parse per distinct head
    assert time.perf_counter() - t0 < 5.0  # (not a timing test: a scan of the whole name per rule took minutes)
    hits = _parse.cache_info().hits
    parse(name)
    assert _parse.cache_info().hits == hits + 1


SHARED = os.environ.get("TRACEANA_SHARED")


@pytest.mark.skipif(not SHARED or not os.path.isdir(os.path.join(SHARED or "", "traces")),
                    reason="the shared traces are not present")
def test_every_kernel_name_of_the_shared_traces_is_in_the_table():
    from traceana.load import load_trace

    table = {n for n, _, _ in ROWS}
    missing, differ = [], []
    for path in sorted(glob.glob(os.path.join(SHARED, "traces", "**", "*.json.gz"), recursive=True)):
        t = load_trace(path)
        for code in set(t.gpu.name[t.gpu.kind == 0].tolist()):
            name = t.names[code]
            if cut(name) not in table:
                missing.append(name[:120])
            elif parse(cut(name)) != parse(name):  # the parameter list cut off says nothing the grammar reads
                differ.append(name[:120])
    assert not missing and not differ


def test_word_classes_searched_over_all_words_at_once():
    """native.words searches each class once over the name's words, one per line (MULTILINE): the class is
    the one a search of every word apart finds, first class first (random names of the classes' keywords)."""
    import random
    import re

    from traceana.link.kernel_names import native

    vocab = ["add", "mul", "rope", "rotary", "copy", "cat", "conv", "gemm", "mm", "bmm", "dot", "norm", "norm2",
             "rmsnorm", "reduce", "sum", "max", "pool", "gather", "index", "unique", "silu", "quant", "fill", "kv",
             "cache", "store", "write", "b", "x", "16", "kernel", "fused", "attention", "matmul", "scale", "where"]
    rng = random.Random(7)
    per_word = [(c, re.compile(p)) for c, p in native._WORD_CLASSES]
    for _ in range(5000):
        words = ["_".join(rng.choice(vocab) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        want = next((c for c, rx in per_word if any(rx.search(w) for w in words)), "other")
        lines = "\n".join(words)
        assert next((c for c, rx in native._WORD_RX if rx.search(lines)), "other") == want, words
