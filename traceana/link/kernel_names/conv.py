"""Convolution libraries' kernel names, and their other kernels (batch norm, layout transposes).

  cuDNN    implicit_convolve_sgemm / explicit_convolve_sgemm / precomputed_convolve_sgemm<T, …> (fprop
           on CUDA cores: the s of sgemm), cudnn::detail::dgrad_engine / dgrad2d_alg1_1 (dgrad),
           cudnn::cnn::wgrad_alg0_engine (wgrad), cudnn::winograd_nonfused::winogradForward* (fprop) /
           winogradWgrad* (wgrad), cask_cudnn::compute*Offsets* (index set-up of an implicit GEMM:
           Wgrad in the name for wgrad), cudnn::bn_fw_* / bn_bw_* (batch norm), nchwToNhwcKernel /
           nhwcToNchwKernel (layout copies); the legacy `volta_scudnn_*` and the xmma / CUTLASS ones
           are read by blas.py
  MIOpen   igemm_{fwd|bwd|wrw}_gtc[x{n}]_{layout}_{type}_…_bt{M}x{N}x{K}_…[_gkgs]: implicit-GEMM
           convolutions (fwd fprop, bwd dgrad, wrw wgrad; gtcx: xdlops, i.e. matrix cores; gkgs:
           GEMM-K global split, a split-K); naive_conv_[ab_][nonpacked_]{fwd|bwd|wrw}_{layout}_{in}_
           {acc}_{out}; MIOpenBatchNorm* (batch norm); SubTensorOp* / Op*Tensor* (element-wise);
           batched_transpose_* / transpose_NCHW2CNHW_* (layout copies)
  CK       ck::tensor_operation::device::kernel_grouped_conv_{fwd|bwd_data|bwd_weight}_* and
           kernel_*_bwd_weight (a convolution's weight gradient as a batched GEMM): xdl / wmma kernels
           run on matrix cores
  ATen     conv_depthwise2d_{forward|backward|grad_weight}_kernel<…, T, …>, conv_depthwise3d_cuda_*: the
           depthwise convolutions ATen runs itself, on CUDA cores (each output channel reads one input
           channel: few FLOPs per byte, memory-bound); cuDNN's conv2d_grouped_direct_kernel is its direct
           grouped convolution
"""

from __future__ import annotations

from traceana import lazy_re
from traceana.link.kernel_names.dtypes import cxx_types, mangled_types, data_types, word_types
from traceana.link.kernel_names.record import KernelName as K
from traceana.link.kernel_names.parts import Parts

_CUDNN_FPROP = lazy_re.compile(r"^(?:implicit|explicit|precomputed)_convolve_\w*gemm$|^conv2d_grouped_direct_kernel$")
_IGEMM = lazy_re.compile(r"^igemm_(?P<dir>fwd|bwd|wrw)_(?P<gtc>gtc\w*?)_(?P<layout>nchw|nhwc|ncdhw|ndhwc)_"
                         r"(?P<type>fp32|fp16|bf16|int8|int4)(?P<rest>_.*)?$")
_BT = lazy_re.compile(r"(?:^|_)bt(\d{1,4})x(\d{1,4})x(\d{1,4})(?:_|$)")
_NAIVE = lazy_re.compile(r"^naive_conv_(?:ab_)?(?:nonpacked_|packed_)?(?P<dir>fwd|bwd|wrw)_(?P<layout>[a-z]+)_"
                         r"(?P<in>[a-z0-9]+)_(?P<acc>[a-z0-9]+)_(?P<out>[a-z0-9]+)$")
_DIR = {"fwd": "fprop", "bwd": "dgrad", "wrw": "wgrad"}


def parse(p: Parts) -> K | None:
    b = p.base
    if not b:
        return None
    if p.ns[:1] in (("cudnn",), ("cask_cudnn",)) or _CUDNN_FPROP.match(b) or b in ("nchwToNhwcKernel",
                                                                                 "nhwcToNchwKernel"):
        return _cudnn(K, p)
    if b.startswith("conv_depthwise"):
        return _depthwise(K, p)
    if b.startswith("igemm_"):
        return _igemm(K, b)
    if b.startswith("naive_conv_"):
        return _naive(K, b)
    if b.startswith(("MIOpen", "miopen", "SubTensorOp", "Op1dTensor", "Op2dTensor", "Op3dTensor", "Op4dTensor",
                     "Op5dTensor", "OpTensor", "batched_transpose_", "transpose_NCHW", "transpose_CNHW",
                     "transpose_NHWC", "gcnAsmConv", "MIOpenConv", "MIOpenCvFwd", "Im2Col", "Col2Im")):
        return _miopen(K, b)
    if p.ns[:1] in (("ck",), ("ck_tile",)) and ("conv" in b.lower() or "bwd_weight" in b.lower()):
        return _ck_conv(K, p)
    return None


def _cudnn(K, p: Parts):
    b = p.base
    low = b.lower()
    a, acc = data_types(cxx_types(p.targs))
    simt = a == "fp32" or "sgemm" in low  # cuDNN's templated engines on fp32 run on CUDA cores
    if low.startswith("bn_"):
        return K(library="cuDNN", cls="normalization", op="batch_norm", a=a, acc=acc, out=a)
    if "nchwtonhwc" in low or "nhwctonchw" in low or "transpose" in low:
        return K(library="cuDNN", cls="copy", op="layout", a=a, out=a)
    if "scale" in low and "tensor" in low:
        return K(library="cuDNN", cls="elementwise", op="scale", a=a, out=a)
    if "wgrad" in low:
        op = "wgrad"
    elif "dgrad" in low:
        op = "dgrad"
    elif _CUDNN_FPROP.match(b) or "winogradforward" in low or "fprop" in low or "im2col" in low:
        op = "fprop"
    else:
        op = None
    if op is None and not any(x in low for x in ("conv", "winograd", "offsets", "gemm", "engine", "kernel")):
        return None
    return K(library="cuDNN", cls="convolution", op=op, a=a, acc=acc, out=a, tensor_cores=False if simt else None,
             detail="winograd" if "winograd" in low else "grouped" if "grouped" in low else None)


def _depthwise(K, p: Parts):
    low = p.base.lower()
    a, acc = data_types(cxx_types(p.targs))
    op = "wgrad" if "grad_weight" in low else "dgrad" if "backward" in low else "fprop"
    return K(library="ATen", cls="convolution", op=op, a=a, acc=acc, out=a, tensor_cores=False, detail="depthwise")


def _igemm(K, b: str):
    m = _IGEMM.match(b)
    if not m:
        return K(library="MIOpen", cls="convolution")
    rest = m.group("rest") or ""
    t = _BT.search(rest)
    a = word_types(m.group("type"))[0]
    gkgs = "_gkgs" in rest
    return K(library="MIOpen", cls="convolution", op=_DIR[m.group("dir")], a=a, out=a,
             tensor_cores=m.group("gtc").startswith("gtcx"), tile=tuple(int(x) for x in t.groups()) if t else None,
             tile_from="MIOpen igemm bt" if t else None, split="split-K" if gkgs else None,
             split_evidence="its name's gkgs field: the GEMM-K dimension split across workgroups" if gkgs else None)


def _naive(K, b: str):
    m = _NAIVE.match(b)
    if not m:
        return K(library="MIOpen", cls="convolution", tensor_cores=False)
    t = [word_types(m.group(k)) for k in ("in", "acc", "out")]
    a, acc, out = (x[0] if x else None for x in t)
    return K(library="MIOpen", cls="convolution", op=_DIR[m.group("dir")], a=a, acc=acc, out=out,
             tensor_cores=False, detail="naive (reference) convolution")


def _miopen(K, b: str):
    low = b.lower()
    types = word_types(b)
    a = types[0] if types else None
    if "batchnorm" in low:
        return K(library="MIOpen", cls="normalization", op="batch_norm", a=a)
    if "transpose" in low:
        return K(library="MIOpen", cls="copy", op="layout", a=a, out=a)
    if "tensorop" in low or low.startswith("op") and "tensor" in low:
        return K(library="MIOpen", cls="elementwise", a=a, out=a)
    if "softmax" in low:
        return K(library="MIOpen", cls="reduction", op="softmax", a=a)
    if "conv" in low or "cvfwd" in low or "im2col" in low or "col2im" in low:
        return K(library="MIOpen", cls="convolution", op="fprop" if "fwd" in low else None, a=a)
    return K(library="MIOpen", cls="other", a=a)


def _ck_conv(K, p: Parts):
    low = (p.base + " " + " ".join(p.words)).lower()
    op = "wgrad" if "bwd_weight" in low else "dgrad" if "bwd_data" in low else "fprop" if "fwd" in low else None
    a, acc = data_types(mangled_types(p.head, p.words) if p.mangled else cxx_types(p.targs))
    tc = True if any(x in low for x in ("xdl", "wmma", "mfma")) else None
    return K(library="CK", cls="convolution", op=op, a=a, acc=acc, tensor_cores=tc)
