"""Framework and library kernels that are not GEMM, convolution or attention libraries, and the words of
any other name.

  ATen        at::native:: kernels (and ATen's own unqualified ones: softmax_warp_*, multi_tensor_apply_kernel,
              cunn_*): the kernel template says the class (vectorized / unrolled / elementwise_kernel:
              element-wise, reduce_kernel: reduction, CatArrayBatchedCopy: copy, *layer_norm* / batch_norm_*
              / GammaBeta* / RowwiseMoments: normalization, cunn_SoftMax* / softmax_warp_*: softmax, max_pool_* /
              avg_pool*: pooling, index* / *gather* / *scatter*: lookups), its functor the operation (a
              direct_copy_kernel / *_copy_kernel functor is a copy: a cast or a contiguous()), the template's
              scalar types the dtype (`CUDAFunctor_add<c10::BFloat16>` bf16; fp32 beside bf16 is the accumulator)
  CUB / rocPRIM / Thrust   sorts, scans, selects (other), DeviceReduce / DeviceSegmentedReduce (reduction)
  FBGEMM      fbgemm_gpu:: and its table-batched-embedding kernels (split_embedding_*: lookups and their
              fused backward + optimizer), permutes (copies), quantize kernels (element-wise)
  Inductor    triton_{poi|red|per|tem|for|spl|mix}_fused_{ops}_{n}: poi pointwise, red / per reductions
              (an RMSNorm or LayerNorm when the fused ops are mean + rsqrt, var_mean or *_norm), tem a GEMM
              template, for foreach; torch 2.0's triton__0d1d… names say nothing of what they compute
  serving     vllm::, sgl_hip:: / sgl_kernel::, aiter::, and their KV-cache writes (reshape_and_cache, store_kv)
  words       any other name: the words of its own identifier (split at _ and case changes) say the class
"""

from __future__ import annotations

import re

from traceana import lazy_re
from traceana.link.kernel_names.dtypes import cxx_types, mangled_types, data_types, word_types
from traceana.link.kernel_names.record import KernelName as K
from traceana.link.kernel_names.parts import Parts

_NS_LIBRARY = {"at": "ATen", "c10": "ATen", "at_cuda_detail": "CUB", "cub": "CUB", "hipcub": "CUB",
               "rocprim": "rocPRIM", "thrust": "Thrust", "fbgemm_gpu": "FBGEMM", "vllm": "vLLM", "sgl_hip": "SGLang",
               "sgl_kernel": "SGLang", "sglang": "SGLang", "aiter": "aiter", "ck": "CK", "ck_tile": "CK",
               "transformer_engine": "Transformer Engine", "apex": "apex", "deep_gemm": "DeepGEMM",
               "tensorrt_llm": "TensorRT-LLM", "flashinfer": "FlashInfer", "cutlass": "CUTLASS", "marlin": "Marlin",
               "torchao": "torchao", "xformers": "xFormers", "megablocks": "MegaBlocks", "triton": "Triton",
               "cudnn": "cuDNN", "cublas": "cuBLAS", "cublasLt": "cuBLASLt", "miopen": "MIOpen", "rccl": "RCCL",
               "deep_ep": "DeepEP"}
# ATen kernels declared outside at:: (or in an anonymous namespace the name drops)
_ATEN_BASES = lazy_re.compile(r"^(?:softmax_warp_(?:forward|backward)|multi_tensor_apply_kernel|cunn_\w+|"
                              r"elementwise_kernel_with_index|vectorized_elementwise_kernel|"
                              r"unrolled_elementwise_kernel|"
                              r"indexSelect\w*|index_elementwise_kernel|reduce_kernel|CatArrayBatchedCopy\w*|"
                              r"\w*layer_norm\w*_kernel|batch_norm_\w+|max_pool_\w+|avg_pool\w*|adaptive_\w+_pool\w*|"
                              r"upsample_\w+|im2col_kernel|col2im_kernel|embedding_\w+|krn_partials_per_segment|"
                              r"compute_grad_weight\w*|sum_and_scatter|radixSortKVInPlace|gatherTopK|bitonicSort\w*)$")
# ATen kernel templates -> (class, op)
_ATEN = (
    (lazy_re.compile(r"CatArrayBatchedCopy"), "copy", "cat"),
    (lazy_re.compile(r"layer_norm|LayerNorm|GammaBeta|cuComputeGradGammaBeta|cuComputePartGradGammaBeta|"
                     r"cuApplyLayerNorm|cuWelford"), "normalization", "layer_norm"),
    (lazy_re.compile(r"RowwiseMoments|ComputeFusedParams|ComputeInternalGradients|ComputeBackwardFusedParams|"
                     r"group_norm|GroupNorm"), "normalization", "group_norm"),
    (lazy_re.compile(r"batch_norm|BatchNorm"), "normalization", "batch_norm"),
    (lazy_re.compile(r"rms_?norm|RMSNorm", re.I), "normalization", "rms_norm"),
    (lazy_re.compile(r"SoftMax|softmax", re.I), "reduction", "softmax"),
    (lazy_re.compile(r"ClassNLLCriterion|nll_loss|cross_entropy", re.I), "reduction", "loss"),
    (lazy_re.compile(r"pool", re.I), "reduction", "pooling"),
    (lazy_re.compile(r"^reduce_kernel|^reduce_|Reduce"), "reduction", None),
    (lazy_re.compile(r"^index|_index|Index|gather|scatter|embedding|Embedding|(?:^|_)(?:take|put)(?:_|$)|searchsorted|"
                     r"(?:^|_)sort|[Ss]ort[A-Z]|topk|TopK|unique|nonzero|cumsum|(?:^|_)scan"), "other", "index"),
    (lazy_re.compile(r"multi_tensor_apply"), "elementwise", "foreach"),
    (lazy_re.compile(r"im2col|col2im"), "convolution", "fprop"),
    (lazy_re.compile(r"upsample|distribution|elementwise|Elementwise|unrolled|vectorized"), "elementwise", None),
)
_IDENTS = lazy_re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# functor templates that only wrap the operation (the one they wrap names it)
_WRAP_FUNCTORS = frozenset({"BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor", "UnaryFunctor", "CUDAFunctorOnSelf",
                            "CUDAFunctorOnOther", "gpu_kernel_impl", "gpu_kernel_impl_nocast",
                            "gpu_kernel_with_scalars",
                            "gpu_index_kernel", "func_wrapper_t", "ReduceOp"})
_COPY = lazy_re.compile(r"direct_copy_kernel|_copy_kernel|copy_kernel_cuda|CopyFunctor|float8_copy|bfloat16_copy|"
                        r"float16_copy|copy_device_to_device")
# an element-wise template applying a norm's per-element step (GroupNorm's, batch norm's)
_NORM_FUNCTOR = lazy_re.compile(r"GroupNorm|LayerNorm|batch_norm|BatchNorm|RMSNorm|rms_norm|layer_norm")
_INDUCTOR = lazy_re.compile(r"^triton_(?P<kind>poi|red|per|tem|for|spl|mix|unk)_(?:fused_)?(?P<ops>.*?)(?:_\d+)?$")
_INDUCTOR_CLASS = {"poi": "elementwise", "red": "reduction", "per": "reduction", "tem": "gemm", "for": "elementwise",
                   "spl": "reduction", "mix": "other", "unk": "other"}
_TORCH20 = lazy_re.compile(r"^triton__\d")
_CUB = lazy_re.compile(r"Reduce")
_FBGEMM_BASES = lazy_re.compile(r"^(?:split_embedding\w*|bounds_check_indices_kernel|linearize_index_kernel|"
                                r"permute_pooled_embs_kernel|recat_copy_async_kernel|dense_to_jagged\w*|jagged_\w+|"
                                r"batched_unary_embeddings\w*|int_nbit_split_embedding\w*)$")
# the words of an unknown kernel's own name, in order of precedence
_WORD_CLASSES = (
    ("elementwise", r"rotary|(^|_)rope($|_)"),  # a rotary position embedding is arithmetic, no table lookup
    ("copy", r"reshape_and_cache|concat_and_cache|store_kv|kv_?cache_?(write|copy|store)|"
             r"(^|_)(copy|memcpy|transpose|permute|concat|"
             r"cat|pack|unpack)($|_)|nchw_?to_?nhwc|nhwc_?to_?nchw"),
    ("convolution", r"conv|winograd|wgrad|dgrad|fprop|im2col|col2im|convolve"),
    ("gemm", r"gemm|gemv|matmul|(^|_)b?mm($|_)|(^|_)dot($|_)|grouped_gemm|fused_moe|moe_gemm|moe_mm|marlin|"
             r"w8a8|w4a16|scaled_mm"),
    ("normalization", r"norm($|_|\d)|layernorm|rmsnorm|batchnorm|groupnorm|welford"),
    ("reduction", r"reduce|softmax|(^|_)(sum|mean|max|min|argmax|argmin|topk|top_k|pool)($|_)|logsumexp|cross_entropy"),
    ("other", r"embedding|gather|scatter|index|lookup|sort|scan|histogram|bucketize|routing|bounds_check|"
              r"(^|_)(unique|nonzero|cumsum|arange)($|_)"),
    ("elementwise", r"elementwise|pointwise|act_and_mul|silu|gelu|relu|swiglu|geglu|rotary|rope|dropout|quant|"
                    r"cast|convert|fill|clamp|scale|(^|_)(add|mul|sub|div|exp|where|masked|bias|activation|adam|"
                    r"sgd|lamb|rmsprop)($|_)"),
)
# each searched over all the words at once, one word per line: ^ and $ (MULTILINE) hold at every word's ends,
# and no pattern can match a newline, so a match lies within one word (one search per class, not per word)
_WORD_RX = [(c, lazy_re.compile(p, re.MULTILINE)) for c, p in _WORD_CLASSES]
_CAMEL = lazy_re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def parse(p: Parts) -> K | None:
    b = p.base
    if b.startswith("triton_"):
        return _inductor(K, b)
    if _TORCH20.match(b):
        return K(library="Triton", cls="other", op="inductor", detail="torch 2.0 name: argument alignment only")
    top = p.ns[:1]
    if top == ("at",) or top == ("c10",) or (not p.ns and _ATEN_BASES.match(b)):
        return _aten(K, p)
    if top in (("cub",), ("at_cuda_detail",), ("hipcub",), ("rocprim",), ("thrust",)):
        a, _ = data_types(cxx_types(p.targs))
        cls = "reduction" if _CUB.search(b) and "Sort" not in b else "other"
        return K(library=_NS_LIBRARY[top[0]], cls=cls, op="sort" if "Sort" in b else "scan" if "Scan" in b else None,
                 a=a)
    if top == ("fbgemm_gpu",) or (not p.ns and _FBGEMM_BASES.match(b)):
        return _fbgemm(K, p)
    if b.startswith("_finalize_matmul_scatter") or b == "_sum_bitmatrix_rows":  # triton_kernels' MoE helpers
        types = word_types(b)
        return K(library="Triton", cls="reduction", op="MoE", a=types[0] if types else None)
    return None


def words(p: Parts):
    """Any other kernel: its library from its namespace, its class from the words of its own name."""
    lib = next((_NS_LIBRARY[n] for n in p.ns if n in _NS_LIBRARY), "custom")
    names = [p.base] + (list(p.words) if p.mangled else [])
    text = " ".join(_CAMEL.sub("_", n).lower() for n in names)
    lines = "\n".join(text.split())
    cls = next((c for c, rx in _WORD_RX if rx.search(lines)), "other")
    if p.mangled:
        a, acc = data_types(mangled_types(p.head, p.words))
    elif p.targs:
        a, acc = data_types(cxx_types(p.targs))
    else:
        a, acc = data_types(word_types(p.base))
    return K(library=lib, cls=cls, a=a, acc=acc if cls in ("reduction", "normalization", "gemm") else None,
             out=a if cls in ("elementwise", "copy") else None)


def _aten(K, p: Parts):
    b = p.base
    cls, op = "other", None
    for rx, c, o in _ATEN:
        if rx.search(b):
            cls, op = c, o
            break
    args = p.targs
    a, acc = data_types(cxx_types(args))
    if cls == "elementwise":
        if _COPY.search(args):
            cls, op = "copy", "copy"
        elif _NORM_FUNCTOR.search(args):
            cls = "normalization"
        elif op is None:
            op = _functor(args)
    elif cls == "reduction" and op is None:
        op = _functor(args)
    if cls == "elementwise" and op == "fill":
        acc = None
    return K(library="ATen", cls=cls, op=op, a=a, acc=acc if cls in ("reduction", "normalization") else None,
             out=a if cls in ("elementwise", "copy") else None)


def _functor(args: str) -> str | None:
    """The operation an ATen element-wise or reduction kernel applies, from its functor: CUDAFunctor_add and
    CUDAFunctorOnSelf_add -> add, MulFunctor -> mul, threshold_kernel_impl -> threshold, GeluCUDAKernelImpl ->
    gelu, MeanOps -> mean, sum_functor -> sum (templates that only wrap it, such as BinaryFunctor, are skipped)."""
    for m in _IDENTS.finditer(args):
        w = m.group(0)
        if w in _WRAP_FUNCTORS:
            continue
        if w.startswith("CUDAFunctor") and "_" in w:
            return w.split("_", 1)[1].lower()
        for suffix in _FUNCTOR_SUFFIXES:
            if w.endswith(suffix) and len(w) > len(suffix):
                return w[: -len(suffix)].lower()
    return None


_FUNCTOR_SUFFIXES = ("CUDAKernelImpl", "KernelImpl", "_cuda_kernel", "_kernel_cuda", "_kernel_impl", "Functor",
                     "_functor",
                     "Ops", "_kernel")


def _fbgemm(K, p: Parts):
    b = p.base
    low = b.lower()
    a, _ = data_types(cxx_types(p.targs))
    if "quantize" in low or "fp8" in low and "to_float" in low or "dequant" in low:
        return K(library="FBGEMM", cls="elementwise", op="quantize", a=a)
    if "permute" in low or "recat" in low or "jagged" in low:
        return K(library="FBGEMM", cls="copy", op="permute", a=a, out=a)
    if "split_embedding" in low or "embedding" in low:
        op = "embedding backward + optimizer" if "backward" in low else "embedding"
        return K(library="FBGEMM", cls="other", op=op, a=a)
    return K(library="FBGEMM", cls="other", a=a)


def _inductor(K, b: str):
    m = _INDUCTOR.match(b)
    if not m:
        return K(library="Triton", cls="other", op="inductor")
    kind, ops = m.group("kind"), m.group("ops")
    cls = _INDUCTOR_CLASS[kind]
    pieces = set(ops.split("_")) - {""}
    if cls == "reduction" and ("rsqrt" in pieces and ("mean" in pieces or "var" in pieces) or "norm" in pieces):
        cls = "normalization"
    elif cls == "elementwise" and pieces and pieces <= {"to", "copy", "clone", "cat", "view", "unsafe", "permute",
                                                       "transpose", "constant", "pad", "nd", "slice", "select"}:
        cls = "copy"
    return K(library="Triton", cls=cls, op="softmax" if "softmax" in pieces else "inductor", detail=ops or None)
