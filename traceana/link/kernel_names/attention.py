"""Fused attention kernels' names: which library, forward or backward, prefill or decode, which dtype.

  flash-attention   flash_fwd_kernel / flash_fwd_splitkv_kernel / flash_bwd_*<Flash_fwd_kernel_traits<…,
                    cutlass::bfloat16_t, …>> (namespace flash, pytorch_flash: PyTorch's SDPA flash path),
                    FlashAttention-3's FlashAttnFwdSm90 / FlashAttnBwdSm90
  CUTLASS fmha      fmha_cutlassF_{type}_… / fmha_cutlassB_… (PyTorch's and xFormers' memory-efficient
                    attention: F forward, B backward)
  FlashInfer        flashinfer:: kernels, BatchPrefillWith*KVCacheKernel, BatchDecodeWithPagedKVCache*,
                    SinglePrefillWithKVCache*, MergeStates* (the same words in ck_tile's mangled names are CK's)
  vLLM              paged_attention_v1_kernel / v2 / ll4mi (ROCm) and kernel_unified_attention_2d / 3d
  cuDNN             cudnn_generated_*_sdpa_* / *_flash_fprop_* / *_flash_bprop_* (the cuDNN SDPA backend)
  CK / aiter        ck_tile::Fmha*Kernel, aiter's fmha / mha kernels
  any other         a name whose words say attention, attn, fmha, mha, sdpa or flash (Triton kernels, AOTriton's
                    attn_fwd, custom kernels)
"""

from __future__ import annotations

import re

from traceana import lazy_re
from traceana.link.kernel_names.dtypes import cxx_types, mangled_types, data_types, word_types
from traceana.link.kernel_names.record import KernelName as K
from traceana.link.kernel_names.parts import Parts

_WORDS = lazy_re.compile(r"(?:^|[_:\s])(?:attention|attn|fmha|mha|sdpa|flash|paged_?att\w*)(?=[_\d:<\s]|$)|"
                         r"attention|Attention|Attn|Fmha|FlashAttn|flashattn|xformers|unified_attention|"
                         r"Batch(?:Prefill|Decode)With|Single(?:Prefill|Decode)With|MergeStates", re.IGNORECASE)
#: KV-cache writes (vLLM reshape_and_cache[_flash], SGLang store_kvcache): copies beside attention, not attention
CACHE_WRITE = lazy_re.compile(r"reshape_and_cache|store_kv|kv_?cache_?(?:write|copy|store)|concat_and_cache", re.I)
_LIBS = (("flashinfer", "FlashInfer"), ("pytorch_flash", "flash-attention"), ("flash", "flash-attention"),
         ("xformers", "xFormers"), ("ck_tile", "CK"), ("ck", "CK"), ("aiter", "aiter"), ("vllm", "vLLM"),
         ("sgl_hip", "SGLang"), ("sgl_kernel", "SGLang"), ("transformer_engine", "Transformer Engine"),
         ("cudnn", "cuDNN"), ("tensorrt_llm", "TensorRT-LLM"))


def parse(p: Parts) -> K | None:
    b = p.base
    text = b if not p.mangled else " ".join((b,) + p.words)
    if not _WORDS.search(text) and not b.startswith("fmha_cutlass") or CACHE_WRITE.search(b):
        return None
    low = text.lower()
    lib = _library(p, low)
    if p.mangled:
        types = mangled_types(p.head, p.words)
    elif p.targs:
        types = cxx_types(p.targs)
    else:
        types = word_types(b)
    a, acc = data_types(types)
    if b.startswith("fmha_cutlass"):
        lib = "CUTLASS (memory-efficient attention)"
        a = (word_types(b) or [a])[0]
    op = _op(low)
    return K(library=lib, cls="attention", op=op, a=a, acc=acc, out=a, tensor_cores=_tc(lib, low))


def _library(p: Parts, low: str) -> str:
    for ns in p.ns[:2]:
        for key, lib in _LIBS:
            if ns == key:
                return lib
    b = p.base
    if b.startswith(("flash_fwd", "flash_bwd", "FlashAttn")):
        return "flash-attention"
    if b.startswith(("paged_attention", "kernel_unified_attention")):
        return "vLLM"
    if re.match(r"(?:Batch|Single)(?:Prefill|Decode)With|MergeStates|VariableLengthMergeStates", b):
        return "FlashInfer"
    if b.startswith("cudnn_generated") or "sdpa" in low and "cudnn" in low:
        return "cuDNN"
    if "xformers" in low:
        return "xFormers"
    return "custom"


def _op(low: str) -> str | None:
    if "decode" in low or "paged_attention" in low:
        return "decode"
    if "prefill" in low:
        return "prefill"
    if any(x in low for x in ("bwd", "backward", "bprop", "cutlassb")):
        return "backward"
    if any(x in low for x in ("fwd", "forward", "fprop", "cutlassf")):
        return "forward"
    return None


def _tc(lib: str, low: str) -> bool | None:
    """Fused attention libraries run their two GEMMs on tensor cores (matrix cores: mfma / xdl on AMD)."""
    if lib in ("flash-attention", "FlashInfer", "cuDNN", "CUTLASS (memory-efficient attention)", "CK", "aiter"):
        return True
    return True if any(x in low for x in ("mfma", "xdl", "wmma", "wgmma", "hmma")) else None
