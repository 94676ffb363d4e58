"""GEMM libraries' kernel names (and cuDNN's kernels that share cuBLAS's grammar).

  cuBLAS / cuDNN legacy  {arch}_[{out}_]{acc}[{mma}]{gemm|cudnn}[_{in}]_{M}x{N}_..._{layout}:
                         `volta_sgemm_128x64_nn` fp32 on CUDA cores (s = fp32, no MMA shape);
                         `ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn` fp16 output, s = fp32
                         accumulate, 16816 = the m16n8k16 MMA (tensor cores), fp16 inputs;
                         `turing_s1688gemm_fp16_…` / `volta_s884gemm_fp16_…` fp16 inputs, fp32 accumulate and
                         output (no output type: the accumulator's); `volta_h884gemm_…` fp16 in and accumulate
                         on Volta's 884 MMA; an MMA shape with no input type is fp16 before Ampere (Volta's and
                         Turing's tensor cores take fp16 / int8 only: no TF32); `volta_scudnn_…` a cuDNN fp32
                         convolution (a fused `relu` epilogue: the forward pass)
  cuBLAS xmma            sm{NN}_xmma_{gemm|fprop|dgrad|wgrad}_[implicit_gemm_]{A}{B}_{math}{acc}_{epilogue}_…
                         _tilesize{M}x{N}x{K}_…: `sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64…`
                         bf16 operands, bf16 math with an fp32 accumulator; `f32f32_tf32f32` fp32 operands
                         on TF32 tensor cores (fprop / dgrad / wgrad are cuDNN's convolutions)
  cuBLASLt nvjet         nvjet_{types}_{M}x{N}_{K}x{stages}_{cluster}_…: one letter per operand (h fp16,
                         t bf16, s fp32, q fp8): `nvjet_tst_…` bf16 in, fp32 accumulate, bf16 out; `nvjet_hsh`
  cuBLAS templates       gemv2T_kernel_val / gemvNSP / gemvx::kernel / gemmSN / gemmk1 / dot_kernel<…,
                         cublasGemvTensorStridedBatched<T>…>: CUDA-core kernels whose tensors are T (a
                         `__nv_bfloat16` one is bf16 even beside a float compute type); splitKreduce_kernel
                         sums a split-K GEMM's partials
  CUTLASS 2              cutlass_{cc}_{tensorop|simt|wmma_tensorop}_[{in}_]{acc}{mma}{gemm|fprop|dgrad|wgrad}
                         _[{epilogue}_][{in}_]{M}x{N}_{K}x{stages}_{layout}_align{n} (the type before the
                         MMA core is the output's, the one after it the inputs'):
                         `cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4` fp32 operands on TF32 tensor
                         cores (no input type: the accumulator's), `…_tensorop_bf16_s16816gemm_relu_bf16_…`,
                         `cutlass_75_tensorop_s1688gemm_f16_…` fp16 inputs (sm75 has no TF32: an MMA with no
                         input type built for cc < 80 is fp16)
  CUTLASS 3              cutlass3x_sm{NN}_{tensorop|simt}_[{acc}{MMA}]gemm_{A}_{B}_{acc}_{C}_{D}_{M}x{N}x{K}
                         _{cluster}_…; `stream_k` in the name is the stream-K scheduler
  Tensile / hipBLASLt    Cijk_{A layout}_{B layout}_{types}_{flags}_…_MT{M}x{N}x{DepthU}_MI{mfma}_…: types
                         are DataType, DestDataType, ComputeDataType (HHS fp16 / fp16 / fp32, BBS bf16, SSS or
                         S fp32; hipBLASLt may write B_BS); MI is the matrix (MFMA) instruction, so tensor
                         cores; GSU<n> / GSUM / GSUA<alg> split K (GlobalSplitU), SK<n> is stream-K
  CK                     ck:: / ck_tile:: device GEMMs (xdl / wmma: matrix cores)
  triton_kernels         _matmul_ogs_{layouts}_{y}x{x}x{w}_{BM}x{BN}x{BK}x{split_k}[_{epilogue}]: MoE
                         GEMMs, e.g. bf16 activations x mxfp4 weights
"""

from __future__ import annotations

from traceana import lazy_re
from traceana.link.kernel_names.dtypes import (BLAS_LETTER, NVJET, cxx_types, mangled_types, data_types, tensile_types,
                                               word_types)
from traceana.link.kernel_names.record import KernelName as K
from traceana.link.kernel_names.parts import Parts

_ARCHS = "maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell"
_LEGACY = lazy_re.compile(rf"^(?P<arch>{_ARCHS})_(?:(?P<out>fp16|bf16|fp32|tf32|int8|i8|fp8|e4m3|e5m2|fp64)_)?"
                          r"(?P<acc>[shdicz])?(?P<mma>\d{3,6})?(?P<tag>tf32)?(?P<kind>gemm|cudnn|gemv)"
                          r"(?P<rest>(?:_.*)?)$")
_TILE2 = lazy_re.compile(r"^(\d{1,4})x(\d{1,4})$")
_XMMA = lazy_re.compile(r"^sm(?P<sm>\d{2,3})_xmma_(?P<kind>gemm|fprop|dgrad|wgrad)_(?P<rest>.*)$")
_XT = lazy_re.compile(r"bf16|tf32|f16|f32|f64|e4m3|e5m2|s8|u8|i8|s32|i32")
_XMMA_TYPES = lazy_re.compile(r"^(?:bf16|tf32|f16|f32|f64|e4m3|e5m2|s8|u8|i8|s32|i32)+$")
_XNAME = {"bf16": "bf16", "tf32": "tf32", "f16": "fp16", "f32": "fp32", "f64": "fp64", "e4m3": "fp8", "e5m2": "fp8",
          "s8": "int8", "i8": "int8", "u8": "uint8", "s32": "int32", "i32": "int32", "void": None}
_TILESIZE = lazy_re.compile(r"tilesize(\d{1,4})x(\d{1,4})x(\d{1,4})")
_NVJET = lazy_re.compile(r"^nvjet_(?:sm\d+_)?(?P<types>[a-z]{3,5})_"
                         r"(?P<m>\d{1,4})x(?P<n>\d{1,4})_(?P<k>\d{1,4})x\d{1,3}_")
_CUTLASS2 = lazy_re.compile(r"^cutlass_(?:(?P<cc>\d{2,3})_)?(?P<opc>wmma_tensorop|tensorop|simt|wmma)_"
                            r"(?:(?P<out>[a-z]+\d+|tf32)_)?"
                            r"(?P<acc>[shdicz])?(?P<mma>\d{3,6})?(?P<tag>tf32|bf16|f16|fast_f32)?"
                            r"(?P<kind>gemm|fprop|dgrad|wgrad|gemv|trmm|symm|syrk|her2k)(?P<rest>(?:_.*)?)$")
_CUTLASS3 = lazy_re.compile(r"^cutlass3x_sm\d{2,3}_(?P<opc>tensorop|simt|wmma)_(?:(?P<acc>[shdi])(?P<mma>\d+x\d+x\d+))?"
                            r"(?P<kind>gemm|fprop|dgrad|wgrad|conv\w*?)_(?P<rest>.*)$")
_TILE3 = lazy_re.compile(r"^(\d{1,4})x(\d{1,4})x(\d{1,4})$")
_ALIGN = lazy_re.compile(r"align(\d{1,3})(?!\d)")
_TENSILE = lazy_re.compile(r"^Cijk_A[a-z]+_B[a-z]+_(?P<rest>.*)$")
_TENSILE_TYPE = lazy_re.compile(r"^(?:F8N|B8N|F8|B8|I8|[SDHBIXCZ])+$")
_TENSILE_FLAGS = lazy_re.compile(r"^B?H?$")
_MT = lazy_re.compile(r"(?:^|_)MT(\d{1,6})x(\d{1,6})x(\d{1,6})(?:_|$)")
_MI = lazy_re.compile(r"(?:^|_)MI(\d{1,3}x\d{1,3}x\d{1,3}(?:x\d{1,3})?)(?:_|$)")
_GSU = lazy_re.compile(r"(?:^|_)GSU(\d{1,6}|M)(?:_|$)")
_GSUA = lazy_re.compile(r"(?:^|_)GSUA([A-Z]+)(?:_|$)")
_STREAM_K = lazy_re.compile(r"(?:^|_)SK(\d{1,6})(?:_|$)")
GSU_ALGO = {"SB": "atomic adds into one buffer", "MB": "separate buffers summed by a second kernel",
            "MBSK": "separate buffers summed in the same kernel"}
_CUBLAS_BASE = lazy_re.compile(r"^(?:gemv\w*|gemmSN_\w+|gemmk1_kernel|gemm_kernel\w*|dot_kernel|scal_kernel|"
                               r"axpy_kernel|nrm2_kernel|asum_kernel|reduce_1Block_kernel|splitKreduce_kernel|"
                               r"sgemm_largek_lds\d+|magma_\w*gemm\w*|trsm\w*_kernel|syrk\w*_kernel|gemmBatched\w*)$")
_GEMV_TENSOR = lazy_re.compile(r"cublasGemvTensor\w*<([^<>]*?)(?: const)?>")
_CK_CONV = lazy_re.compile(r"conv|bwd_weight|bwd_data")
_OGS = lazy_re.compile(r"^_?matmul_ogs_(?P<layout>[A-Z]+)_(?P<types>[a-z0-9]+)_"
                       r"(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)x(?P<s>\d+)(?:_(?P<epi>\w+))?$")
_OGS_TYPE = lazy_re.compile(r"mxfp4|mxfp8|nvfp4|bf16|fp16|fp32|fp8e4m3|fp8e5m2|fp8|f16|f32|e4m3|e5m2")


def parse(p: Parts) -> K | None:
    b = p.base
    if not b or p.mangled and not p.ns:
        return None
    if b.startswith(("volta_", "turing_", "ampere_", "maxwell_", "pascal_", "ada_", "hopper_", "blackwell_")):
        return _legacy(K, p)
    if b.startswith("sm") and "_xmma_" in b:
        return _xmma(K, p)
    if b.startswith("nvjet_"):
        return _nvjet(K, b)
    if b.startswith("cutlass_"):
        return _cutlass2(K, p)
    if b.startswith("cutlass3x_"):
        return _cutlass3(K, b)
    if b.startswith("Cijk_"):
        return _tensile(K, b)
    if "matmul_ogs_" in b:
        return _ogs(K, b)
    if _CUBLAS_BASE.match(b) or p.ns in (("cublasLt",), ("internal", "gemvx"), ("epilogue", "impl")):
        return _cublas_template(K, p)
    if p.ns[:1] in (("ck",), ("ck_tile",)) and "gemm" in b.lower() and not _CK_CONV.search(b.lower()):
        return _ck_gemm(K, p)
    return None


def _tokens(rest: str) -> list[str]:
    return [t for t in rest.split("_") if t]


_PRE_TF32 = frozenset({"maxwell", "pascal", "volta", "turing"})


def _mma_inputs(letter: str, mma: str | None, out: str | None, pre_tf32: bool, acc: str | None) -> str | None:
    """The inputs of an MMA kernel whose name gives no input type: int8 for an integer accumulator; a 16-bit
    output's type; fp16 before Ampere (no TF32 there) and for the 16-bit-only m16n8k16 shape; else the
    accumulator's (fp32 operands on TF32 tensor cores)."""
    if letter == "i":
        return "int8"
    if out in ("fp16", "bf16"):
        return out
    if pre_tf32 or mma in ("16816", "161616"):
        return "fp16"
    return acc


def _legacy(K, p: Parts):
    m = _LEGACY.match(p.base)
    if not m:
        return None
    toks = _tokens(m.group("rest"))
    letter = m.group("acc") or ""
    acc = "fp32" if m.group("tag") == "tf32" else BLAS_LETTER.get(letter)
    mma = m.group("mma")
    tile_i = next((i for i, t in enumerate(toks) if _TILE2.match(t)), len(toks))
    ins = word_types("_".join(toks[:tile_i]))
    out = word_types(m.group("out"))[0] if m.group("out") else None
    if ins:
        a = ins[0]
    elif mma:
        a = "fp32" if m.group("tag") == "tf32" else _mma_inputs(letter, mma, out, m.group("arch") in _PRE_TF32, acc)
    else:
        a = out or acc
    if a == "tf32":
        a = "fp32"
    outs = [out or acc or a]
    tile = tuple(int(x) for x in toks[tile_i].split("x")) if tile_i < len(toks) else None
    conv = m.group("kind") == "cudnn"
    low = [t.lower() for t in toks]
    split = "split-K" if "splitk" in low else None
    return K(library="cuDNN" if conv else "cuBLAS", cls="convolution" if conv else "gemm",
             op=("fprop" if "relu" in low else None) if conv else None, a=a, acc=acc,
             out=outs[0] if outs else a, tensor_cores=bool(mma), tile=tile,
             tile_from="CUTLASS 2 / cuBLAS" if tile else None, split=split,
             split_evidence="the name's splitK: cuDNN splits the reduction dimension" if split else None,
             mma=mma, detail="winograd" if "winograd" in low else None)


def _xmma(K, p: Parts):
    m = _XMMA.match(p.base)
    if not m:
        return None
    toks = _tokens(m.group("rest"))
    types = [_XT.findall(t) for t in toks if _XMMA_TYPES.match(t)][:3]
    ab = [_XNAME[t] for t in types[0]] if types else []
    math = [_XNAME[t] for t in types[1]] if len(types) > 1 else []
    ab = ["fp32" if x == "tf32" else x for x in ab]  # tf32 operands are fp32 in memory
    a = ab[0] if ab else None
    bb = ab[1] if len(ab) > 1 and ab[1] != a else None
    acc = math[-1] if math else None
    tc = None if not math or math[0] == "fp64" else math[0] not in ("fp32",)
    t = _TILESIZE.search(m.group("rest"))
    kind = m.group("kind")
    low = m.group("rest").lower()
    split = "split-K" if "splitk" in low or "split_k" in low else None
    return K(library="cuDNN" if kind != "gemm" else "cuBLAS", cls="gemm" if kind == "gemm" else "convolution",
             op=None if kind == "gemm" else kind, a=a, b=bb, acc=acc, tensor_cores=tc,
             math=("tf32" if math[0] in ("tf32", "fp32") and a == "fp32" else math[0]) if tc and math else None,
             tile=tuple(int(x) for x in t.groups()) if t else None, tile_from="cuBLAS xmma" if t else None,
             split=split, split_evidence="the name's split-K field" if split else None)


def _nvjet(K, b: str):
    m = _NVJET.match(b)
    if not m:
        return K(library="cuBLASLt", cls="gemm", tensor_cores=True)
    L = m.group("types")
    codes = [NVJET.get(c) for c in L]
    if len(codes) == 3:
        a, bb, acc, out = codes[0], None, codes[1], codes[2]
    else:
        a, bb, acc, out = codes[0], codes[1], codes[-2], codes[-1]
    return K(library="cuBLASLt", cls="gemm", a=a, b=bb if bb != a else None, acc=acc, out=out, tensor_cores=True,
             tile=(int(m.group("m")), int(m.group("n")), int(m.group("k"))), tile_from="cuBLASLt nvjet")


def _cutlass2(K, p: Parts):
    m = _CUTLASS2.match(p.base)
    if not m:
        return None
    toks = _tokens(m.group("rest"))
    letter = m.group("acc") or ""
    acc = BLAS_LETTER.get(letter)
    mma = m.group("mma")
    tc = m.group("opc") != "simt"
    tile_i = next((i for i, t in enumerate(toks) if _TILE2.match(t)), len(toks))
    ins = word_types("_".join(toks[:tile_i]))
    out = (word_types(m.group("out")) or [None])[0] if m.group("out") else None
    tag = {"tf32": "fp32", "fast_f32": "fp32", "bf16": "bf16", "f16": "fp16"}.get(m.group("tag") or "")
    if ins:
        a = ins[0]
    elif tag:
        a = tag
    elif mma and tc:
        a = _mma_inputs(letter, mma, out, m.group("cc") is not None and int(m.group("cc")) < 80, acc)
    else:
        a = out or ("int8" if letter == "i" and mma else acc)
    if a == "tf32":
        a = "fp32"
    outs = [out or acc or a]
    tile = tuple(int(x) for x in toks[tile_i].split("x")) if tile_i < len(toks) else None
    al = _ALIGN.search(m.group("rest"))
    kind = m.group("kind")
    conv = kind in ("fprop", "dgrad", "wgrad")
    lib = "cuDNN" if any("cudnn" in n for n in p.ns) else "CUTLASS"
    return K(library=lib, cls="convolution" if conv else "gemm", op=kind if conv else None, a=a, acc=acc,
             out=outs[0] if outs else a, tensor_cores=tc, tile=tile, tile_from="CUTLASS 2 / cuBLAS" if tile else None,
             mma=mma, align=int(al.group(1)) if al else None)


def _cutlass3(K, b: str):
    m = _CUTLASS3.match(b)
    if not m:
        return None
    toks = _tokens(m.group("rest"))
    types = []
    for t in toks:
        if t in _XNAME:
            types.append(_XNAME[t])
        else:
            break
    tile = next((tuple(int(x) for x in t.split("x")) for t in toks if _TILE3.match(t)), None)
    low = m.group("rest").lower()
    split = "stream-K" if "stream_k" in low or "streamk" in low else "split-K" if "splitk" in low else None
    kind = m.group("kind")
    conv = kind in ("fprop", "dgrad", "wgrad") or kind.startswith("conv")
    al = _ALIGN.search(m.group("rest"))
    a = types[0] if types else None
    return K(library="CUTLASS", cls="convolution" if conv else "gemm", op=kind if conv else None, a=a,
             b=types[1] if len(types) > 1 and types[1] != a else None, acc=types[2] if len(types) > 2 else None,
             out=types[4] if len(types) > 4 else None, tensor_cores=m.group("opc") != "simt", tile=tile,
             tile_from="CUTLASS 3" if tile else None, split=split,
             split_evidence="the name's stream-K tile scheduler" if split == "stream-K" else None,
             mma=m.group("mma"), align=int(al.group(1)) if al else None)


def _tensile(K, b: str):
    m = _TENSILE.match(b)
    if not m:
        return None
    toks = m.group("rest").split("_")
    t0, t1, t2 = (toks + ["", "", ""])[:3]
    field = t0
    if t1 and _TENSILE_TYPE.match(t1) and (not _TENSILE_FLAGS.match(t1) or _TENSILE_FLAGS.match(t2 or "x")):
        field = t0 + t1
    types = tensile_types(field) if _TENSILE_TYPE.match(field) else []
    if len(types) == 2 and field.endswith("B") and len(field) == 2:  # old "SB": fp32, B = UseBeta
        types = types[:1]
    a = types[0] if types else None
    if len(types) == 4:
        bb, out, acc = types[1], types[2], types[3]
    elif len(types) == 3:
        bb, out, acc = None, types[1], types[2]
    elif len(types) == 2:
        bb, out, acc = None, types[0], types[1]
    else:
        bb, out, acc = None, a, a
    mt = _MT.search(b)
    mi = _MI.search(b)
    split, factor, evidence = _tensile_split(b)
    # XF32: fp32 operands on the matrix cores at reduced precision
    xf32 = ("X" in field or "xf32" in b.lower()) and mi is not None
    return K(library="Tensile", cls="gemm", a=a, b=bb if bb != a else None, acc=acc, out=out,
             tensor_cores=mi is not None, math="xf32" if xf32 else None,
             tile=tuple(int(x) for x in mt.groups()) if mt else None,
             tile_from="Tensile / hipBLASLt" if mt else None, split=split, split_factor=factor,
             split_evidence=evidence, mma=mi.group(1) if mi else None)


def _tensile_split(b: str) -> tuple[str | None, int | None, str | None]:
    """How the name splits K: SK<n> (n > 0) stream-K; GSU<n> (n > 1) split-K by n; GSUM split-K set at launch;
    GSUA<alg> without GSU: GlobalSplitU is a launch argument (hipBLASLt's UserArgs kernels)."""
    m = _STREAM_K.search(b)
    if m and int(m.group(1)) > 0:
        return "stream-K", None, f"its name's SK{m.group(1)} field: StreamK mode {m.group(1)}"
    m = _GSU.search(b)
    algo = _GSUA.search(b)
    how = f"; partial sums in {GSU_ALGO.get(algo.group(1), algo.group(1))}" if algo else ""
    if m and m.group(1) == "M":
        return "split-K", None, f"its name's GSUM field: GlobalSplitU above 1, set at launch{how}"
    if m and int(m.group(1)) > 1:
        return "split-K", int(m.group(1)), f"its name's GSU{m.group(1)} field: GlobalSplitU {m.group(1)}{how}"
    if not m and algo:
        return ("split at launch", None,
                f"its name's GSUA{algo.group(1)} field and no GSU field: GlobalSplitU is a launch argument{how}")
    return None, None, None


def _cublas_template(K, p: Parts):
    b = p.base
    low = b.lower()
    a, acc = data_types(cxx_types(p.targs))
    if a is None and low[:1] in BLAS_LETTER and low[1:5] == "gemm":  # sgemm_largek_lds64: s = fp32
        a = BLAS_LETTER[low[0]]
    tensors = [cxx_types(x) for x in _GEMV_TENSOR.findall(p.targs)]
    tensors = [t[0] for t in tensors if t]
    if tensors:
        a = tensors[0]
        acc = acc if acc != a else None
    out = tensors[-1] if tensors else a
    lib = "cuBLASLt" if p.ns[:1] in (("cublasLt",), ("epilogue",)) else "cuBLAS"
    if low.startswith(("scal", "axpy")):
        return K(library=lib, cls="elementwise", op=low.split("_")[0], a=a, out=out)
    if low.startswith(("nrm2", "asum")):
        return K(library=lib, cls="reduction", op=low.split("_")[0], a=a, acc=acc, out=out)
    if low.startswith("splitkreduce"):
        return K(library=lib, cls="gemm", op="split-K reduce", a=a, acc=acc, out=out, split="split-K",
                 split_evidence="cuBLAS's splitKreduce_kernel sums its partial sums")
    if low.startswith("reduce_1block"):
        return K(library=lib, cls="gemm", op="split-K reduce", a=a, acc=acc, out=out)
    if p.ns[:1] == ("epilogue",):
        return K(library=lib, cls="gemm", op="epilogue", a=a, acc=acc, out=out)
    op = "gemv" if "gemv" in low or low.startswith("dot") else None
    return K(library=lib, cls="gemm", op=op, a=a, acc=acc, out=out, tensor_cores=False)


def _ck_gemm(K, p: Parts):
    a, acc = data_types(mangled_types(p.head, p.words) if p.mangled else cxx_types(p.targs))
    low = (p.base + " " + " ".join(p.words)).lower()
    tc = True if any(x in low for x in ("xdl", "wmma", "mfma")) else None
    return K(library="CK", cls="gemm", a=a, acc=acc, tensor_cores=tc)


def _ogs(K, b: str):
    m = _OGS.match(b)
    if not m:
        return K(library="Triton", cls="gemm", op="MoE")
    types = [word_types(t)[0] for t in _OGS_TYPE.findall(m.group("types")) if word_types(t)]
    y, x, w = (types + [None, None, None])[:3]
    s = int(m.group("s"))
    return K(library="Triton", cls="gemm", op="MoE", a=x, b=w if w != x else None, out=y, tensor_cores=True,
             tile=(int(m.group("m")), int(m.group("n")), int(m.group("k"))), tile_from="triton_kernels matmul_ogs",
             split="split-K" if s > 1 else None, split_factor=s if s > 1 else None,
             split_evidence=f"its name's split-K field {s}" if s > 1 else None, detail=m.group("epi"))
