"""GEMM shapes that leave tensor cores partly empty: alignment, tile and wave quantization.

For C[M, N] = A[M, K] @ B[K, N] (batched B times):
  alignment   tensor cores take K and N (and M) in multiples of 16 bytes: 8 elements in
              fp16/bf16, 4 in tf32, 16 in fp8/int8. Otherwise cuBLAS/CUTLASS fall back to
              narrow-vector kernels (CUTLASS names them `align1` / `align2`) or pads.
  tile        the output is cut into tm x tn tiles, one per thread block (CTA); partial tiles
              at the edges still cost a whole tile: efficiency = M*N / (ceil(M/tm)*tm * ceil(N/tn)*tn).
  wave        the tiles run in waves of one CTA per SM (large GEMM tiles fill an SM): with
              T = B*ceil(M/tm)*ceil(N/tn) tiles and S SMs, efficiency = T / (ceil(T/S)*S).
The tile is read from the kernel name where it shows (`tilesize128x128x64`, `_256x128_`);
otherwise 128x128 is assumed and 256x128 shown beside it. Pure arithmetic on the rows.
"""

from __future__ import annotations

import re
from math import ceil, gcd

ALIGN = {"fp16": 8, "bf16": 8, "tf32": 4, "fp8": 16, "int8": 16, "uint8": 16}
DEFAULT_TILES = ((128, 128), (256, 128))
_TILE_RE = re.compile(r"(?:tilesize|_)(\d{2,3})x(\d{2,3})(?:x\d+)?(?:_|$)")
_ALIGN_RE = re.compile(r"align(\d+)")
TF32_HINTS = ("tf32", "xf32", "s1688", "s16816", "tensorop_s", "xmma")
CUDA_CORE_HINTS = ("sgemm", "gemmsn", "gemv", "dot_kernel")


def gemm_dims(row: dict) -> tuple[int, int, int, int] | None:
    """(B, M, N, K) of a matrix-multiply row from its recorded dims, or None."""
    name = row["name"].split("::", 1)[-1]
    d = [tuple(x) for x in (row.get("input_dims") or []) if isinstance(x, (list, tuple))
         and all(isinstance(v, int) for v in x)]
    mats = [x for x in d if len(x) >= 2]
    try:
        if name in ("mm", "matmul") and len(mats) >= 2:
            a, b = mats[0], mats[1]
        elif name in ("addmm", "baddbmm", "addbmm") and len(mats) >= 2:
            a, b = mats[-2], mats[-1]
        elif name == "bmm" and len(mats) >= 2:
            a, b = mats[0], mats[1]
        elif name == "linear" and len(mats) >= 2:
            x, w = mats[0], mats[1]
            m = 1
            for v in x[:-1]:
                m *= v
            return 1, m, w[0], w[1]
        else:
            return None
        if a[-1] != b[-2]:
            return None
        batch = 1
        if len(a) >= 3 and len(b) >= 3:
            for v in a[:-2]:
                batch *= v
            return batch, a[-2], b[-1], a[-1]
        m = 1
        for v in a[:-1]:
            m *= v
        return batch, m, b[-1], a[-1]
    except (IndexError, TypeError):
        return None


def kernel_tile(kernels: list) -> tuple[int, int] | None:
    for k in kernels or []:
        name = k.get("name", "") if isinstance(k, dict) else str(k)
        m = _TILE_RE.search(name)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def kernel_align(kernels: list) -> int | None:
    for k in kernels or []:
        name = k.get("name", "") if isinstance(k, dict) else str(k)
        m = _ALIGN_RE.search(name)
        if m:
            return int(m.group(1))
    return None


def tensor_dtype(row: dict) -> str | None:
    """The tensor-core dtype the GEMM ran in: fp16/bf16/fp8/int8, tf32 (fp32 on tensor cores), or
    None for fp32 on CUDA cores (no alignment rule)."""
    dt = row.get("dtype")
    if dt in ("fp16", "bf16", "fp8", "int8", "uint8"):
        return dt
    if dt == "fp32":
        names = " ".join(k.get("name", "") for k in row.get("kernels") or []).lower()
        if row.get("peak_dtype") == "tf32_tc" or any(h in names for h in TF32_HINTS):
            return "tf32"
    return None


def quantization(b: int, m: int, n: int, tile: tuple[int, int], sms: int | None) -> dict:
    tm, tn = tile
    tiles_m, tiles_n = ceil(m / tm), ceil(n / tn)
    tile_eff = (m * n) / (tiles_m * tm * tiles_n * tn) if m and n else 1.0
    ctas = b * tiles_m * tiles_n
    waves = ceil(ctas / sms) if sms else None
    wave_eff = ctas / (waves * sms) if sms and waves else 1.0
    return {"tile": f"{tm}x{tn}", "tiles_m": tiles_m, "tiles_n": tiles_n, "ctas": ctas, "waves": waves,
            "tile_eff": tile_eff, "wave_eff": wave_eff, "eff": tile_eff * wave_eff}


def _better(v: int, align: int, tile: int) -> int:
    """Nearest size to v that is a multiple of the tile (else of the alignment), not above v when close."""
    down = (v // tile) * tile
    if down >= 0.9 * v and down > 0:
        return down
    return ceil(v / align) * align


def analyse(row: dict, sms: int | None) -> dict | None:
    """Alignment and quantization facts for one GEMM row, or None when it is no tensor-core GEMM."""
    dims = gemm_dims(row)
    tdt = tensor_dtype(row)
    if dims is None or tdt is None:
        return None
    b, m, n, k = dims
    align = ALIGN[tdt]
    # K and N are the contiguous dims of row-major A[M, K], B[K, N] and C[M, N] (K of a transposed
    # weight too): they set the vector width. M only decides how many tiles there are.
    bad = {lab: v for lab, v in (("N", n), ("K", k)) if v % align}
    tile = kernel_tile(row.get("kernels"))
    tiles = [tile] if tile else list(DEFAULT_TILES)
    q = [quantization(b, m, n, t, sms) for t in tiles]
    better = {"M": _better(m, align, tiles[0][0]), "N": _better(n, align, tiles[0][1]),
              "K": ceil(k / align) * align, "pad_N": ceil(n / align) * align}
    qq = q[0]
    if sms and qq["wave_eff"] < 0.95:
        step = sms // gcd(sms, b * qq["tiles_n"])  # M tiles per whole number of waves
        lo, hi = (qq["tiles_m"] // step) * step, -(-qq["tiles_m"] // step) * step
        better["wave_M"] = [x * tiles[0][0] for x in (lo, hi) if x > 0]
    return {"B": b, "M": m, "N": n, "K": k, "dtype": tdt, "align": align, "misaligned": bad,
            "kernel_align": kernel_align(row.get("kernels")), "tile_from_kernel": tile is not None,
            "quant": q, "better": better}
