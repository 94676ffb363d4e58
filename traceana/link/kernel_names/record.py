"""The record the kernel-name grammar fills in for one name (see the package doc)."""

from __future__ import annotations

from msgspec.structs import replace

import msgspec

CLASSES = ("gemm", "convolution", "attention", "elementwise", "reduction", "normalization", "copy",
           "communication", "memcpy/memset", "other")
#: classes whose kernels multiply matrices (tensor-core use is told for them)
MATRIX = frozenset({"gemm", "convolution", "attention"})


class KernelName(msgspec.Struct, frozen=True):
    """What one kernel name says. Fields the name does not tell are None (or empty)."""

    library: str = "custom"  # cuBLAS, cuBLASLt, CUTLASS, cuDNN, ATen, Triton, NCCL, ... ("custom": unknown)
    cls: str = "other"  # one of CLASSES
    op: str | None = None  # within the class: fprop / dgrad / wgrad, all_reduce, softmax, layer_norm, add, ...
    a: str | None = None  # input (first operand) dtype: the data the kernel works on
    b: str | None = None  # second operand dtype, when the name gives it and it differs (bf16 x mxfp4)
    acc: str | None = None  # accumulate / compute dtype
    out: str | None = None  # output dtype
    tensor_cores: bool | None = None  # runs on tensor (matrix) cores; None: not told / not a matrix kernel
    math: str | None = None  # what the tensor cores multiply in: tf32 / xf32 for fp32 operands, else the input's
    tile: tuple[int, ...] | None = None  # the output tile as named (BLAS m x n[, k])
    tile_from: str | None = None  # the naming convention the tile was read from
    split: str | None = None  # "split-K" | "stream-K" | "split at launch"
    split_factor: int | None = None
    split_evidence: str | None = None  # which field of the name says it
    mma: str | None = None  # the matrix instruction shape as named ("16816", "16x16x16")
    align: int | None = None  # CUTLASS alignment (elements per access)
    detail: str | None = None  # anything else the name says (a collective's algorithm and protocol, fused ops)

    @property
    def dtype(self) -> str | None:
        """The dtype the kernel's time is accounted under: its input's."""
        return self.a

    @property
    def matrix(self) -> bool:
        return self.cls in MATRIX

    @property
    def tf32(self) -> bool:
        """fp32 operands multiplied on tensor cores in a reduced-precision format (NVIDIA TF32, AMD XF32)."""
        return self.math in ("tf32", "xf32")


#: libraries whose tensor cores take fp32 operands as TF32 (NVIDIA's); AMD's matrix cores multiply fp32 as
#: fp32 (MFMA f32) unless the name says XF32 (Tensile's X type)
NVIDIA = frozenset({"cuBLAS", "cuBLASLt", "CUTLASS", "cuDNN", "flash-attention", "FlashInfer", "Transformer Engine",
                    "CUTLASS (memory-efficient attention)", "DeepGEMM", "TensorRT-LLM", "Marlin"})


def finish(rec: KernelName) -> KernelName:
    """Tensor-core use is a matrix kernel's fact (None for every other class); on tensor cores, fp32
    operands are multiplied as TF32 by NVIDIA's libraries."""
    if rec.cls not in MATRIX:
        return replace(rec, tensor_cores=None, math=None) if rec.tensor_cores is not None or rec.math else rec
    if rec.tensor_cores and rec.math is None and rec.a is not None:
        return replace(rec, math="tf32" if rec.a == "fp32" and rec.library in NVIDIA else rec.a)
    return rec
