"""Traces of real model code, recorded on CPU and re-shaped as if the model had run on one GPU.

Tests that need a realistic op sequence run library code (Hugging Face transformers models built
from a config, no weights) under torch.profiler on CPU, then `gpu_shaped` turns the CPU trace into
the Kineto trace a CUDA run of the same code would leave, so that traceana analyses it end to end.

What is recorded (kept exactly as torch.profiler wrote it): every cpu_op event, its name, thread,
start, duration, nesting, External id, Input Dims / types / strides, Concrete Inputs, sequence
numbers; the autograd wrappers of the backward; user annotations.

What is synthetic (added here, and only this):
  launches   each op that would launch GPU work gets a `cudaLaunchKernel` runtime event inside it
             (in its own time after its last child: 40% of that, at most 4 us, ending 10% of it
             (at most 0.5 us) before the op returns) and one `kernel`
             event on stream 7 of device 0, joined by a correlation id and carrying the op's
             External id. Which ops launch (see `_launches`):
               - an aten op in ONE_KERNEL (GEMMs, convolutions, softmax, norms, dropout in training,
                 embedding backward, fused attention) launches its own kernel(s); nothing below it does
                 (the CPU implementation's helper calls are not what CUDA runs);
               - any other aten op launches when none of its descendants launches (a leaf, after
                 dropping allocation and view children), unless it is in NO_LAUNCH (views, metadata,
                 allocation, and `to` / `contiguous` / `dropout` that returned their input);
               - inside another aten op, a subtree whose tensors are all 0-dim converts a Python
                 number to a wrapped scalar on the host: it launches nothing;
               - `_local_scalar_dense` (`.item()`) is a 4-byte device-to-host copy instead
                 (`cudaMemcpyAsync` + `Memcpy DtoH (Device -> Pageable)`), followed by a
                 `cudaStreamSynchronize` inside the op (the CPU times stay as recorded: the
                 synchronisation does not wait here).
  names      a kernel name typical of the op family in CUDA PyTorch builds (`_kernel_names`): cuBLAS
             `ampere_sgemm_*` / `ampere_bf16_s16816gemm_*` for GEMMs, cuDNN `implicit_convolve_sgemm`
             / `dgrad` / `wgrad` for convolutions, `softmax_warp_forward`, `vectorized_layer_norm_kernel`,
             `CatArrayBatchedCopy`, `indexSelectLargeIndex`, `reduce_kernel`, `fused_dropout_kernel_vec`,
             `pytorch_flash::flash_fwd_kernel`, and `vectorized_elementwise_kernel<4, ...>` naming the
             op's functor for element-wise ops.
  times      kernel duration = KERNEL_FIXED_US + max(bytes / (MEM_EFF x DRAM), flops / (MATH_EFF x peak))
             on the device (A100-SXM4-40GB, its row of traceana/roofline/devices/table.csv), where
               bytes = every tensor argument read once (the self of copy_/fill_/random fills is
                       written, not read) + one write as large as the largest tensor argument (cat:
                       the sum of its inputs; GEMMs: the [.., M, N] result), from the recorded dims;
               flops = 2*batch*M*N*K for GEMMs (and per dtype: fp32 at the fp32 CUDA-core peak, as
                       PyTorch runs fp32 matmuls without TF32 by default; bf16 / fp16 at the tensor-core
                       peak), 2*N*Cout*(spatial/stride)*Cin/groups*prod(kernel) for convolutions (twice
                       that, on grad_output's spatial size, for convolution_backward: dgrad + wgrad),
                       4*B*H*Sq*Sk*D for fused attention, 0 for everything else;
             each kernel starts at max(its launch + LAUNCH_LATENCY_US, the previous kernel's end).
             The GPU timeline therefore follows the recorded CPU timeline (a CPU op's recorded time
             decides when its kernel is launched) and the time model (how long the kernel runs).
  device     deviceProperties of an A100-SXM4-40GB (what cudaGetDeviceProperties reports).

Recording cost is kept small: tiny configs (2 layers, hidden 64, 4 heads), one warm-up forward
outside the profiler, then one profiled forward (+ backward for the `_train` variants).
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.recorded_models import MODELS, SMALL  # tiny transformers configs, no weights

REPO = Path(__file__).resolve().parents[1]
DEVICE_KEY = "a100_sxm4_40gb"
A100_PROPS = {"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42505273344, "computeMajor": 8,
              "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
              "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
              "sharedMemPerMultiprocessor": 167936, "numSms": 108, "sharedMemPerBlockOptin": 166912}
STREAM = 7
KERNEL_FIXED_US = 2.0  # per-kernel fixed cost (ramp-up, tail): the shortest kernels on an A100 take ~2 us
LAUNCH_LATENCY_US = 3.0  # from the start of cudaLaunchKernel to the earliest the kernel can start
SYNC_RETURN_US = 5.0  # a synchronize returns this long after the GPU's last queued work ends (sync_waits)
MEM_EFF = 0.8  # fraction of peak DRAM bandwidth a streaming kernel reaches
MATH_EFF = 0.6  # fraction of peak FLOP/s a GEMM / convolution / attention kernel reaches

ITEMSIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
            "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
CUDA_TYPE = {"float": "float", "double": "double", "c10::Half": "c10::Half", "c10::BFloat16": "c10::BFloat16",
             "long int": "long", "int": "int", "bool": "bool", "unsigned char": "unsigned char"}

NO_LAUNCH = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "transpose", "t",
    "permute", "select", "slice", "narrow", "unsqueeze", "squeeze", "flatten", "unflatten", "split",
    "split_with_sizes", "unsafe_split", "chunk", "unbind", "detach", "detach_", "alias", "lift_fresh", "empty",
    "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "set_", "contiguous", "to",
    "_to_copy", "type_as", "dropout", "feature_dropout", "view_as", "unfold", "movedim", "swapaxes", "diagonal",
    "resolve_conj", "resolve_neg", "conj", "numpy_T", "mT", "size", "stride", "sym_size", "sym_stride", "numel",
    "is_contiguous", "is_nonzero", "broadcast_tensors", "result_type", "requires_grad_", "retain_grad",
    "_has_compatible_shallow_copy_type", "align_to", "refine_names", "is_same_size", "_assert_tensor_metadata",
    "_nested_tensor_from_mask_left_aligned", "matmul", "linear", "einsum", "layer_norm", "softmax", "log_softmax",
    "embedding", "embedding_backward", "sym_numel", "dim", "output_nr", "_version", "_is_zerotensor"})
# ops CUDA runs as their own kernel(s), whatever their CPU implementation calls underneath
ONE_KERNEL = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "_addmm_activation", "addmv", "mv", "dot",
    "mkldnn_convolution", "_slow_conv2d_forward", "slow_conv3d_forward", "_convolution", "convolution_backward",
    "cudnn_convolution", "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
    "native_layer_norm", "native_layer_norm_backward", "native_group_norm", "native_group_norm_backward",
    "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit", "_fused_rms_norm",
    "native_dropout", "native_dropout_backward", "embedding_dense_backward", "index_select", "cat", "gelu",
    "gelu_backward", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward", "nll_loss_forward", "nll_loss_backward",
    "sum", "mean", "amax", "max", "min", "var_mean", "topk", "sort", "cumsum", "index", "index_put_", "gather",
    "scatter", "scatter_add_", "nonzero", "masked_fill_", "masked_fill", "where", "arange", "upsample_nearest2d",
    "max_pool2d_with_indices", "adaptive_avg_pool2d", "_adaptive_avg_pool2d", "avg_pool2d"})
_GEMMS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "_addmm_activation", "addmv", "mv", "dot"})
_CONVS = frozenset({"mkldnn_convolution", "_slow_conv2d_forward", "slow_conv3d_forward", "_convolution",
                    "cudnn_convolution", "convolution_backward"})
_REDUCE = {"sum": "sum_functor", "mean": "MeanOps", "amax": "MaxNanFunctor", "max": "MaxNanFunctor",
           "min": "MinNanFunctor", "var_mean": "WelfordOps", "all": "and_functor", "any": "or_functor",
           "norm": "NormTwoOps", "linalg_vector_norm": "NormTwoOps", "prod": "prod_functor", "argmax": "ArgMaxOps"}
_DROPOUT = frozenset({"dropout", "feature_dropout", "alpha_dropout"})
_OVERWRITE = frozenset({"copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_"})


def device_row(key: str = DEVICE_KEY) -> dict:
    """The device's row of traceana/roofline/devices/table.csv (peaks in TFLOP/s, bandwidth in GB/s)."""
    with open(REPO / "traceana" / "roofline" / "devices" / "table.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


def _short(name: str) -> str:
    return name.split("::", 1)[-1]


def _tensors(args: dict) -> list[tuple[tuple[int, ...], int, str]]:
    """(shape, itemsize, dtype) of each tensor argument (TensorList elements take the list's first dtype)."""
    out = []
    for d, t in zip(args.get("Input Dims") or [], args.get("Input type") or []):
        if t in ITEMSIZE and isinstance(d, list) and all(isinstance(x, int) for x in d):
            out.append((tuple(d), ITEMSIZE[t], t))
        elif t == "TensorList" and isinstance(d, list):
            out.extend((tuple(s), 4, "float") for s in d if isinstance(s, list))
    return out


def _gemm(short: str, ts: list) -> tuple[float, tuple[int, ...]] | None:
    """(FLOPs, result shape) of a matrix multiply from its operand shapes."""
    mats = [s for s, _, _ in ts if len(s) >= 2]
    if short in ("mv", "addmv", "dot"):
        vecs = [s for s, _, _ in ts]
        return (2.0 * math.prod(vecs[-2]), tuple(vecs[-2][:1])) if len(vecs) >= 2 else None
    if len(mats) < 2:
        return None
    a, b = mats[-2], mats[-1]
    if a[-1] != b[-2]:
        return None
    batch = a[:-2]
    return 2.0 * math.prod(batch) * a[-2] * b[-1] * a[-1], batch + (a[-2], b[-1])


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.strip("[]() ").split(",") if x.strip()]
    except ValueError:
        return []


_CONV_STRIDE = {"mkldnn_convolution": 4, "cudnn_convolution": 4, "_convolution": 3, "_slow_conv2d_forward": 4,
                "slow_conv3d_forward": 4}


def _conv_flops(short: str, args: dict, ts: list) -> float:
    """2*N*Cout*(input spatial / stride)*Cin/groups*prod(kernel): the output size from the stride alone
    (padding and dilation ignored: an estimate for the time model only). convolution_backward(grad_output,
    input, weight, ...): dgrad + wgrad, each the forward's FLOPs, on grad_output's spatial size."""
    if short == "convolution_backward":
        if len(ts) < 3 or len(ts[0][0]) < 3:
            return 0.0
        g, w = ts[0][0], ts[2][0]
        return 2.0 * 2.0 * g[0] * w[0] * math.prod(g[2:]) * math.prod(w[1:])
    if len(ts) < 2 or len(ts[0][0]) < 3:
        return 0.0
    x, w = ts[0][0], ts[1][0]
    conc = args.get("Concrete Inputs") or []
    k = _CONV_STRIDE.get(short)
    stride = _ints(conc[k]) if k is not None and k < len(conc) and isinstance(conc[k], str) else []
    spatial = x[2:]
    stride = (stride * len(spatial))[:len(spatial)] if stride else [1] * len(spatial)
    out_spatial = math.prod(max(1, s // st) for s, st in zip(spatial, stride))
    return 2.0 * x[0] * w[0] * out_spatial * math.prod(w[1:])


def _cost(name: str, args: dict) -> tuple[float, float, str]:
    """(bytes, FLOPs, dtype) of one launching op under the time model in the module doc."""
    short = _short(name)
    ts = _tensors(args)
    dtype = ts[0][2] if ts else "float"
    reads = [t for i, t in enumerate(ts) if not (i == 0 and short in _OVERWRITE)]
    flops = 0.0
    if short in _GEMMS and (g := _gemm(short, ts)):
        flops, out = g
        out_bytes = math.prod(out) * ts[0][1]
    elif short == "cat":
        out_bytes = sum(math.prod(s) * isz for s, isz, _ in ts)
    else:
        out_bytes = max((math.prod(s) * isz for s, isz, _ in ts), default=4)
        if short in _CONVS:
            flops = _conv_flops(short, args, ts)
        elif "flash_attention" in short and len(ts) >= 3 and len(ts[0][0]) == 4:
            b, h, sq, d = ts[0][0]
            flops = 4.0 * b * h * sq * ts[1][0][2] * d * (2.5 if short.endswith("backward") else 1.0)
    return sum(math.prod(s) * isz for s, isz, _ in reads) + out_bytes, flops, dtype


def kernel_time_us(nbytes: float, flops: float, dtype: str, row: dict) -> float:
    """The time model: fixed cost + the slower of the memory and compute times at the set efficiencies."""
    peak = float(row["fp32"]) if dtype not in ("c10::Half", "c10::BFloat16") else float(row["bf16_tc"])
    return KERNEL_FIXED_US + max(nbytes / (MEM_EFF * float(row["dram_gbps"]) * 1e3),
                                 flops / (MATH_EFF * peak * 1e6))


def _kernel_names(name: str, args: dict, dtype: str) -> list[str]:
    """Kernel name(s) CUDA PyTorch runs for this op (typical names of the op family)."""
    short = _short(name)
    ct = CUDA_TYPE.get(dtype, "float")
    half = dtype in ("c10::Half", "c10::BFloat16")
    if short in _GEMMS:
        if half:
            tag = "bf16" if dtype == "c10::BFloat16" else "fp16"
            return [f"ampere_{tag}_s16816gemm_{tag}_128x64_ldg8_f2f_stages_64x4_tn"]
        return ["ampere_sgemm_128x64_tn" if short in ("mm", "addmm", "_addmm_activation") else
                "ampere_sgemm_64x64_nn"]
    if short == "convolution_backward":
        return ["void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*)",
                "void cudnn::detail::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int)"]
    if short in _CONVS:
        return [f"void cudnn::cnn::implicit_convolve_sgemm<{ct}, {ct}, 128, 5, 5, 3, 3, 3, 1, false, false, true>"
                f"(int, int, int, {ct} const*, int, {ct}*, {ct} const*, kernel_conv_params, unsigned long long)"]
    if "flash_attention" in short:
        return ["void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>"
                "(pytorch_flash::Flash_bwd_params)" if short.endswith("backward") else
                "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>, false, false>"
                "(pytorch_flash::Flash_fwd_params)"]
    if short in ("_softmax", "_log_softmax"):
        log = "true" if short == "_log_softmax" else "false"
        return [f"void (anonymous namespace)::softmax_warp_forward<{ct}, {ct}, float, 5, {log}, false>"
                f"({ct}*, {ct} const*, int, int, int, bool const*, int, bool)"]
    if short in ("_softmax_backward_data", "_log_softmax_backward_data"):
        return [f"void (anonymous namespace)::softmax_warp_backward<{ct}, {ct}, float, 5, false, false>"
                f"({ct}*, {ct} const*, {ct} const*, int, int, int, bool const*)"]
    if short in ("native_layer_norm", "_fused_rms_norm"):
        return [f"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<{ct}, float>"
                f"(int, float, {ct} const*, {ct} const*, {ct} const*, float*, float*, {ct}*)"]
    if short == "native_layer_norm_backward":
        return [f"void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<{ct}, float>"
                f"({ct} const*, {ct} const*, float const*, float const*, {ct} const*, {ct}*, int)",
                f"void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<{ct}, float>"
                f"(long, long, {ct} const*, {ct} const*, float const*, float const*, {ct}*, {ct}*)"]
    if short in ("native_group_norm", "native_batch_norm", "_native_batch_norm_legit"):
        return [f"void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, {ct}, float, int>"
                f"(at::GenericPackedTensorAccessor<{ct} const, 3ul>, float, float)"]
    if short in ("native_group_norm_backward", "native_batch_norm_backward"):
        return [f"void at::native::batch_norm_backward_kernel<{ct}, float, float, int>"
                f"(at::GenericPackedTensorAccessor<{ct} const, 3ul>)"]
    if short in ("native_dropout", "dropout", "feature_dropout"):
        return [f"void at::native::(anonymous namespace)::fused_dropout_kernel_vec<{ct}, float, unsigned int, 1, 4, "
                f"bool>(at::cuda::detail::TensorInfo<{ct} const, unsigned int>, unsigned long, float)"]
    if short == "cat":
        return [f"void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)"
                f"::OpaqueType<{ITEMSIZE.get(dtype, 4)}>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)"
                f"::OpaqueType<{ITEMSIZE.get(dtype, 4)}>*, CatArrInputTensorMetadata, TensorSizeStride, int, "
                f"unsigned int)"]
    if short in ("index_select", "embedding"):
        return [f"void at::native::(anonymous namespace)::indexSelectLargeIndex<{ct}, long, unsigned int, 2, 2, -2, "
                f"true>(at::cuda::detail::TensorInfo<{ct}, unsigned int>, long, long)"]
    if short == "embedding_dense_backward":
        return ["void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>"
                "(long const*, float const*, float*, int, long, int)"]
    if short in ("gather", "scatter", "scatter_add_"):
        return ["void at::native::_scatter_gather_elementwise_kernel<128, 8, "
                "at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()>(int, "
                "at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator())"]
    if short in ("index", "index_put_"):
        return ["void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
                "at::native::index_kernel_impl<at::native::OpaqueType<4> >>(at::TensorIterator&)>(long)"]
    if short in _REDUCE:
        return [f"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<{ct}, at::native::{_REDUCE[short]}"
                f"<{ct}, float, {ct}>, unsigned int, {ct}, 4> >(at::native::ReduceOp<{ct}, "
                f"at::native::{_REDUCE[short]}<{ct}, float, {ct}>, unsigned int, {ct}, 4>)"]
    if short in ("topk", "sort"):
        return ["void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo)"]
    if short in ("cumsum", "nonzero"):
        return ["void at_cuda_detail::cub::DeviceScanKernel<at_cuda_detail::cub::DeviceScanPolicy<long>::Policy900>"
                "(long const*, long*, int)"]
    if short in ("nll_loss_forward", "nll_loss_backward"):
        return [f"void (anonymous namespace)::{short}_reduce_cuda_kernel_2d<float, float, long>"
                f"(float*, float*, float const*, long const*, float const*, bool, long, long, long)"]
    if short in ("fill_", "zero_", "zeros", "ones", "full", "scalar_tensor", "new_ones", "new_zeros", "new_full",
                 "ones_like", "zeros_like", "full_like"):
        return [f"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<{ct}>, "
                f"std::array<char*, 1ul> >(int, at::native::FillFunctor<{ct}>, std::array<char*, 1ul>)"]
    if short in ("copy_", "clone"):
        return [f"void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
                f"at::TensorIteratorBase&)::{{lambda()#3}}::operator()() const::{{lambda({ct})#1}}, "
                f"std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, "
                f"TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
                f"at::native::memory::StoreWithCast<1> >(int, std::array<char*, 2ul>)"]
    if short in ("bernoulli_", "normal_", "uniform_", "random_"):
        return [f"void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
                f"at::native::templates::cuda::{short.rstrip('_')}_kernel<at::CUDAGeneratorImpl*>>(long, "
                f"at::PhiloxCudaState)"]
    n_args = len(_tensors(args)) + 1
    functor = short.rstrip("_").capitalize()
    return [f"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_{functor}<{ct}>, "
            f"std::array<char*, {n_args}ul> >(int, at::native::CUDAFunctor_{functor}<{ct}>, "
            f"std::array<char*, {n_args}ul>)"]


def _all_zero_dim(e: dict) -> bool:
    ts = _tensors(e["args"])
    return bool(ts) and all(s == () for s, _, _ in ts)


def _returns_input(e: dict) -> bool:
    """A dropout that ran in eval mode or with p = 0 returns its input: no kernel."""
    c = e["args"].get("Concrete Inputs") or []
    return len(c) >= 3 and (c[2] == "False" or c[1] in ("0", "0."))


def _launches(ops: list[dict]) -> list[tuple[dict, int, float]]:
    """(op, how many kernels, where its own code resumes after its last child) for each op that launches GPU
    work, by the rules in the module doc. ops: one thread's cpu_op events sorted by (start, longest first)."""
    parent: list[int] = [-1] * len(ops)
    stack: list[int] = []
    for i, e in enumerate(ops):
        while stack and ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= e["ts"]:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    children: list[list[int]] = [[] for _ in ops]
    for i, p in enumerate(parent):
        if p >= 0:
            children[p].append(i)
    silent = [False] * len(ops)  # under a ONE_KERNEL op, or scalar bookkeeping inside another op
    for i, e in enumerate(ops):
        p = parent[i]
        if p < 0 or not ops[p]["name"].startswith("aten::"):
            continue
        ps = _short(ops[p]["name"])
        silent[i] = (silent[p] or ps in ONE_KERNEL or (ps in _DROPOUT and not _returns_input(ops[p]))
                     or (_all_zero_dim(e) and _short(e["name"]) != "_local_scalar_dense"))  # .item() copies
    launch = [0] * len(ops)
    below = [False] * len(ops)  # some descendant launches
    for i in range(len(ops) - 1, -1, -1):  # children come after their parent
        e = ops[i]
        short = _short(e["name"])
        if not silent[i] and e["name"].startswith("aten::"):
            if short in _DROPOUT and not _returns_input(e):
                launch[i] = 1
            elif short in ONE_KERNEL or (not below[i] and short not in NO_LAUNCH):
                launch[i] = len(_kernel_names(e["name"], e["args"], "float"))
        if (launch[i] or below[i]) and parent[i] >= 0:
            below[parent[i]] = True
    tail = [e["ts"] for e in ops]  # the end of the op's last child: its launches go after it, outside every child
    for i, p in enumerate(parent):
        if p >= 0:
            tail[p] = max(tail[p], ops[i]["ts"] + ops[i]["dur"])
    return [(ops[i], launch[i], tail[i]) for i in range(len(ops)) if launch[i]]


def _host_time(events: list[dict], speedup: float) -> None:
    """Scale the CPU side's clock (in place): a host `speedup` times faster than the one that recorded."""
    t0 = min((e["ts"] for e in events if e.get("ph") == "X"), default=0.0)
    for e in events:  # the clock restarts at 1 s: sub-ns durations keep their precision (not at epoch scale)
        if e.get("ph") == "X":
            e["ts"] = 1e6 + (e["ts"] - t0) / speedup
            e["dur"] = e["dur"] / speedup


def _shifted(shifts: list[tuple[float, float]], t: float) -> float:
    """t on the clock of a host that waited in syncs: every wait that ended before t delays it."""
    return t + sum(d for p, d in shifts if p < t)


def gpu_shaped(cpu_doc: dict, device_key: str = DEVICE_KEY, host_speedup: float = 1.0,
               sync_waits: bool = False) -> dict:
    """The CPU trace with the launches, kernels, copies and device properties a CUDA run would add.

    host_speedup: the CPU side's times divided by it (a host faster than the one that recorded: 2 cores
    running the model's math on CPU are far slower than a host that only dispatches to a GPU).
    sync_waits: each `.item()` synchronisation holds the CPU until the GPU has finished everything queued
    before it (+ SYNC_RETURN_US to wake the thread), as cudaStreamSynchronize does; every CPU event after it moves later by that wait and the ops
    around it grow by it (off by default: the CPU times then stay exactly as recorded)."""
    row = device_row(device_key)
    events = [dict(e) for e in cpu_doc["traceEvents"]]
    if host_speedup != 1.0:
        _host_time(events, host_speedup)
    shifts: list[tuple[float, float]] = []
    by_thread: dict[object, list[dict]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            by_thread.setdefault(e["tid"], []).append(e)
    work: list[tuple[dict, int, float]] = []
    for ops in by_thread.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        work.extend(_launches(ops))
    work.sort(key=lambda w: w[0]["ts"] + w[0]["dur"])
    pid = next((e["pid"] for e in events if e.get("cat") == "cpu_op"), 1)
    out: list[dict] = []
    out.append({"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}})
    out.append({"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}})
    out.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": STREAM, "args": {"name": f"stream {STREAM}"}})
    corr, gpu_free = 1, -math.inf
    for e, n, tail in work:
        a = e["args"]
        ext = a.get("External id")
        nbytes, flops, dtype = _cost(e["name"], a)
        names = _kernel_names(e["name"], a, dtype)
        end = e["ts"] + e["dur"]
        room = end - tail  # the op's own time after its last child
        slot = min(4.0, 0.4 * room) / len(names)
        for k, kname in enumerate(names):
            l_ts = _shifted(shifts, end - min(0.5, 0.1 * room) - slot * (len(names) - k))
            is_copy = _short(e["name"]) == "_local_scalar_dense"
            out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync" if is_copy else "cudaLaunchKernel",
                        "pid": pid, "tid": e["tid"], "ts": l_ts, "dur": slot * 0.8,
                        "args": {"External id": ext, "cbid": 41 if is_copy else 211, "correlation": corr}})
            start = max(l_ts + LAUNCH_LATENCY_US, gpu_free)
            if is_copy:
                dur = KERNEL_FIXED_US
                gpu = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0,
                       "tid": STREAM, "ts": start, "dur": dur,
                       "args": {"External id": ext, "device": 0, "context": 1, "stream": STREAM, "correlation": corr,
                                "bytes": int(nbytes // 2), "memory bandwidth (GB/s)": nbytes / 2 / dur / 1e3}}
            else:
                dur = kernel_time_us(nbytes / n, flops / n, dtype, row)
                elems = max(1, int(nbytes / n / 8))
                gpu = {"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": STREAM, "ts": start, "dur": dur,
                       "args": {"External id": ext, "device": 0, "context": 1, "stream": STREAM, "correlation": corr,
                                "registers per thread": 32, "shared memory": 0, "blocks per SM": 0.0,
                                "warps per SM": 0.0, "grid": [max(1, -(-elems // 512)), 1, 1], "block": [128, 1, 1],
                                "est. achieved occupancy %": 0}}
            out.append(gpu)
            gpu_free = start + dur
            corr += 1
        if _short(e["name"]) == "_local_scalar_dense":
            s_ts, s_dur = end - min(0.4, 0.08 * room), min(0.3, 0.06 * room)
            at = _shifted(shifts, s_ts)
            wait = max(gpu_free + SYNC_RETURN_US - (at + s_dur), 0.0) if sync_waits else 0.0
            out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": pid,
                        "tid": e["tid"], "ts": at, "dur": s_dur + wait, "args": {"cbid": 131, "correlation": corr}})
            if wait > 0:
                shifts.append((s_ts + s_dur, wait))
            corr += 1
    for e in events:  # the recorded CPU events, on the clock of a host that waited in its syncs
        if e.get("ph") == "X" and shifts:
            end = _shifted(shifts, e["ts"] + e["dur"])
            e["ts"] = _shifted(shifts, e["ts"])
            e["dur"] = end - e["ts"]
    out = events + out
    doc = {k: v for k, v in cpu_doc.items() if k != "traceEvents"}
    doc["deviceProperties"] = [dict(A100_PROPS)]
    doc["traceEvents"] = out
    return doc


def record(run: Callable[[], object], with_stack: bool = False, profile_memory: bool = False) -> dict:
    """Run `run` once under torch.profiler (CPU activity, record_shapes=True): its chrome trace as a dict.
    with_stack adds the python_function events (the Python call tree, nn.Module entries included),
    profile_memory the [memory] instant events (one per allocation and free)."""
    import tempfile

    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                with_stack=with_stack, profile_memory=profile_memory) as p:
        run()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "cpu.json"
        p.export_chrome_trace(str(path))
        return json.loads(path.read_text())


def write(doc: dict, path: Path) -> str:
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return str(path)


def model_trace(key: str) -> dict:
    """Record one model: key is MODELS' name, then `_sdpa` for attn_implementation="sdpa" (default eager),
    and `_train` for forward + backward in train mode (default: one eval forward under no_grad)."""
    import torch
    parts = key.split("_")
    model, fwd = MODELS[parts[0]]("sdpa" if "sdpa" in parts else "eager")
    torch.manual_seed(0)
    if "train" in parts:
        model.train()

        def run():
            fwd().float().pow(2).mean().backward()
    else:
        model.eval()

        def run():
            with torch.no_grad():
                fwd()
    run()  # warm-up: lazy initialisation stays out of the recording
    model.zero_grad(set_to_none=True)
    return gpu_shaped(record(run))


def train_step_doc() -> dict:
    """A training step of a tiny BertForMaskedLM (2 layers, hidden 64, built from its config: no weights)
    on CPU: forward, loss, backward and an AdamW step, recorded with with_stack=True and profile_memory=True
    (and record_shapes): the CPU trace exactly as torch.profiler wrote it (python_function, [memory] and
    cpu_op events; no GPU shaping)."""
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=1000, max_position_embeddings=64, attn_implementation="eager", **SMALL)
    model = transformers.BertForMaskedLM(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (2, 32), generator=g)
    labels = torch.randint(0, 1000, (2, 32), generator=g)

    def run():
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()

    run()  # warm-up: lazy initialisation (and AdamW's state) stays out of the recording
    return record(run, with_stack=True, profile_memory=True)


class Recorder:
    """Recorded traces for one pytest session, each model recorded once (see `recorded_trace`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._paths: dict[str, str] = {}

    def __call__(self, key: str) -> str:
        """Path of the GPU-shaped trace of a built-in model (model_trace's keys)."""
        if key not in self._paths:
            self._paths[key] = write(model_trace(key), self.folder / f"{key}.pt.trace.json.gz")
        return self._paths[key]

    def train_step(self) -> str:
        """Path of train_step_doc's trace (CPU only, as recorded; stacks and memory events on)."""
        key = "bert_mlm_train_step"
        if key not in self._paths:
            self._paths[key] = write(train_step_doc(), self.folder / f"{key}.pt.trace.json.gz")
        return self._paths[key]

    def train_step_gpu(self) -> str:
        """Path of train_step_doc's trace re-shaped as a CUDA run (gpu_shaped): stacks and memory events kept."""
        key = "bert_mlm_train_step_gpu"
        if key not in self._paths:
            self._paths[key] = write(gpu_shaped(train_step_doc()), self.folder / f"{key}.pt.trace.json.gz")
        return self._paths[key]

    def custom(self, key: str, setup: Callable[[], Callable[[], object]]) -> str:
        """Path of the GPU-shaped trace of any code: setup() builds what it needs and returns the zero-argument
        callable to record (it is run once unrecorded first, as a warm-up)."""
        if key not in self._paths:
            run = setup()
            run()
            self._paths[key] = write(gpu_shaped(record(run)), self.folder / f"{key}.pt.trace.json.gz")
        return self._paths[key]


@pytest.fixture(scope="session")
def recorded_trace(tmp_path_factory) -> Recorder:
    """recorded_trace("bert"), recorded_trace("gpt2_sdpa"), recorded_trace("vit_train"), ... -> trace path;
    recorded_trace.custom(key, setup) records any code. Skips when transformers is not installed."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return Recorder(tmp_path_factory.mktemp("recorded"))
