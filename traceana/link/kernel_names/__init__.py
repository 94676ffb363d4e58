"""One kernel-name grammar: what a GPU kernel's name says about it, read once per distinct name.

`parse(name)` returns a KernelName: the library that wrote the kernel, its class (gemm,
convolution, attention, elementwise, reduction, normalization, copy, communication,
memcpy/memset, other), what it does within the class (`op`: a convolution's fprop / dgrad /
wgrad, a collective's all_reduce, a norm's kind, an element-wise functor), its input, accumulate
and output dtypes, whether it runs on tensor cores (matrix cores), and the tile, split-K /
stream-K and alignment where the name carries them. Every stage reads kernel names through it:
kernel classes, communication, the GEMM tile findings, the opaque accounts, the kernel account.

A name is read from its first HEAD characters only (a template list can run to megabytes; what a
name says is in its head), and each distinct head is parsed once (cached).

The names' grammars are the libraries' own naming conventions, one module each:
  blas.py       cuBLAS (arch_{in}_{acc}{mma}gemm_{out}_{tile}, sm{N}_xmma_*, gemv / gemmSN / dot
                templates), cuBLASLt nvjet, CUTLASS 2 and 3, Tensile / hipBLASLt Cijk_*, CK GEMMs,
                triton_kernels' matmul_ogs
  conv.py       cuDNN (implicit_convolve_sgemm, *_engine, winograd, xmma fprop / dgrad / wgrad,
                batch norm), MIOpen (igemm_{fwd,bwd,wrw}_gtc*, naive_conv_*, MIOpenBatchNorm*), CK
                convolutions
  attention.py  flash-attention, CUTLASS memory-efficient attention, FlashInfer, vLLM paged /
                unified attention, cuDNN SDPA, CK / aiter FMHA
  native.py     ATen native kernels (functors and scalar types from the template arguments),
                CUB / rocPRIM, FBGEMM, Inductor's Triton kernels, the serving engines' kernels,
                and the words of any other name (custom kernels)
  comm.py       NCCL / RCCL / MSCCL++ / NVSHMEM / DeepEP / pplx / custom all-reduce /
                symmetric-memory kernels and the collective each runs
"""

from __future__ import annotations

from traceana.link.kernel_names.parts import HEAD, Parts
from traceana.link.kernel_names.record import CLASSES, MATRIX, KernelName
from traceana.link.kernel_names.read import classify, parse

__all__ = ["CLASSES", "MATRIX", "HEAD", "KernelName", "Parts", "classify", "parse"]
