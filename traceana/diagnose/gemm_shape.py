"""GEMM shapes that leave tensor cores partly empty: alignment, tile and wave quantization.

For C[M, N] = A[M, K] @ B[K, N] (batched B times):
  alignment   tensor cores take K and N (and M) in multiples of 16 bytes: 8 elements in
              fp16/bf16, 4 in tf32, 16 in fp8/int8. Otherwise cuBLAS/CUTLASS fall back to
              narrow-vector kernels (CUTLASS names them `align1` / `align2`) or pads.
  tile        the output is cut into tiles, one per thread block (CTA / workgroup); partial tiles
              at the edges still cost a whole tile: efficiency = M*N / (ceil(M/tM)*tM * ceil(N/tN)*tN).
  wave        the tiles run in waves of one tile per SM / CU (large GEMM tiles fill one): with
              T = B*ceil(M/tM)*ceil(N/tN) tiles and S SMs/CUs (the device's `sms`),
              efficiency = T / (ceil(T/S)*S).
The tile, the alignment and any split of K are read from the kernel names by the kernel-name
grammar (traceana/link/kernel_names/blas.py: Tensile / hipBLASLt MT, cuBLAS xmma tilesize, cuBLASLt
nvjet, CUTLASS 2 and 3, cuBLAS's SIMT names). The libraries are column-major BLAS: PyTorch computes
its row-major C[M, N] as C^T = B^T A^T, so the name's first tile dim runs along N and the second
along M. When the name shows no tile (CK templates, gemv, split-K helpers, unknown libraries) the
finding says "tile unknown" and does no tile or wave arithmetic.

Split-K and stream-K change what runs in waves: a split-K GEMM launches tiles x splits workgroups, a
stream-K one a persistent grid that shares all tiles' K loops out evenly; neither's waves are the
tile count's. Their wave arithmetic uses the recorded launch grid (the op's one kernel's blocks)
when there is one, else none is done. (Tensile's GSU<n> / GSUM / GSUA<alg> / SK<n> fields, cuBLAS's
splitKreduce_kernel beside the GEMM kernel.)

Pure arithmetic on the rows.
"""

from __future__ import annotations

from math import ceil, gcd

from traceana import units as u
from traceana.link.kernel_names import parse

MIN_SHARE = 0.005  # tile/wave findings from 0.5% of device time
SHAPE_SHARE = 0.001  # misaligned GEMMs are worth naming from 0.1% of device time
_TC_KEY = {"tf32": "tf32_tc", "bf16": "bf16_tc", "fp16": "fp16_tc", "fp8": "fp8_tc", "int8": "int8_tc"}
ALIGN = {"fp16": 8, "bf16": 8, "tf32": 4, "fp8": 16, "int8": 16, "uint8": 16}


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


def parse_tile(name: str) -> tuple[int, int, str] | None:
    """(tile m, tile n, naming convention) in the library's BLAS (column-major) order, read from a kernel name."""
    k = parse(name)
    if k.tile is None or k.cls != "gemm" or len(k.tile) < 2 or k.tile[0] <= 0 or k.tile[1] <= 0:
        return None
    return k.tile[0], k.tile[1], k.tile_from or k.library


def kernel_tile(kernels: list) -> tuple[int, int, str] | None:
    """The tile of the first kernel whose name shows one (BLAS m x n, library)."""
    for k in kernels or []:
        t = parse_tile(k.get("name", "") if isinstance(k, dict) else str(k))
        if t:
            return t
    return None


def _names(kernels: list) -> list[str]:
    return [k.get("name", "") if isinstance(k, dict) else str(k) for k in kernels or []]


def split_k(kernels: list) -> dict | None:
    """How the GEMM's K loop is split across workgroups, as its kernel names say: {"mode": "stream-K" |
    "split-K" | "split at launch", "factor": int | None, "evidence": str}, or None when the names show
    no split (or a factor of 1). "split at launch": a hipBLASLt kernel that takes its factor as an
    argument, so the name cannot tell whether this launch split K. The GEMM kernel's own name first,
    then a split-K reduction kernel beside it."""
    recs = [parse(n) for n in _names(kernels)]
    for reduce in (False, True):
        for k in recs:
            if k.split and (k.op == "split-K reduce") == reduce:
                return {"mode": k.split, "factor": k.split_factor, "evidence": k.split_evidence or k.split}
    return None


def _split_waves(q: dict, split: dict, row: dict, sms: int | None) -> dict:
    """Wave arithmetic of a split-K / stream-K GEMM: from the recorded grid of its one kernel (the
    workgroups that really ran: tiles x splits), else none (waves unknown, wave efficiency taken as 1).
    Stream-K has none: its persistent grid shares the K loops out evenly, whatever the tile count."""
    grid = row.get("grid_blocks")
    one = len(set(_names(row.get("kernels")))) == 1
    tiles = q["ctas"]
    q = {**q, "split": dict(split), "wave_from": None, "waves": None, "wave_eff": 1.0}
    if split["mode"] != "stream-K" and one and grid and sms:
        ctas = int(grid)
        waves = ceil(ctas / sms)
        q.update({"ctas": ctas, "waves": waves, "wave_eff": ctas / (waves * sms), "wave_from": "grid"})
        if split["factor"] is None and tiles and ctas % tiles == 0:
            q["split"]["factor"] = ctas // tiles
    q["eff"] = q["tile_eff"] * q["wave_eff"]
    return q


def kernel_align(kernels: list) -> int | None:
    for name in _names(kernels):
        a = parse(name).align
        if a is not None:
            return a
    return None


def tensor_dtype(row: dict) -> str | None:
    """The tensor-core dtype the GEMM ran in: fp16/bf16/fp8/int8, tf32 (fp32 on tensor cores), or
    None for fp32 on CUDA cores (no alignment rule)."""
    dt = row.get("dtype")
    if dt in ("fp16", "bf16", "fp8", "int8", "uint8"):
        return dt
    if dt == "fp32":
        if row.get("peak_dtype") == "tf32_tc" or any(parse(n).tf32 for n in _names(row.get("kernels"))):
            return "tf32"
    return None


def quantization(b: int, m: int, n: int, tile: tuple[int, int], sms: int | None) -> dict:
    """Tile and wave arithmetic for tile = (tile along M, tile along N); "tile" names it as a
    kernel name writes it (BLAS m x n, i.e. N x M)."""
    tm, tn = tile
    tiles_m, tiles_n = ceil(m / tm), ceil(n / tn)
    tile_eff = (m * n) / (tiles_m * tm * tiles_n * tn) if m and n else 1.0
    ctas = b * tiles_m * tiles_n
    waves = ceil(ctas / sms) if sms else None
    wave_eff = ctas / (waves * sms) if sms and waves else 1.0
    return {"tile": f"{tn}x{tm}", "tiles_m": tiles_m, "tiles_n": tiles_n, "ctas": ctas, "waves": waves,
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
    kt = kernel_tile(row.get("kernels"))
    # the name's BLAS m x n is N x M of the row-major product
    q = quantization(b, m, n, (kt[1], kt[0]), sms) if kt else None
    split = split_k(row.get("kernels"))
    if q and split:
        q = _split_waves(q, split, row, sms)
    better = {"K": ceil(k / align) * align, "pad_N": ceil(n / align) * align}
    if q:
        better.update({"M": _better(m, align, kt[1]), "N": _better(n, align, kt[0])})
    if q and sms and not split and q["wave_eff"] < 0.95:
        step = sms // gcd(sms, b * q["tiles_n"])  # M tiles per whole number of waves
        lo, hi = (q["tiles_m"] // step) * step, -(-q["tiles_m"] // step) * step
        better["wave_M"] = [x * kt[1] for x in (lo, hi) if x > 0]
    return {"B": b, "M": m, "N": n, "K": k, "dtype": tdt, "align": align, "misaligned": bad,
            "kernel_align": kernel_align(row.get("kernels")), "tile_library": kt[2] if kt else None,
            "quant": q, "split": split, "better": better}


def _what(row: dict) -> str:
    return u.op_label(row["name"], row.get("input_dims"), row.get("dtype"))


def _calls(n: int) -> str:
    return u.plural(n, "call")


def _tc_frac(r: dict, pk: float | None, bw: float | None) -> float | None:
    """Fraction of its roof (tensor-core compute or DRAM, whichever is slower) the GEMM reaches."""
    if not pk or not r["device_time_us"]:
        return None
    floor = max(r["flops"] / (pk * 1e6), (r["bytes"] or 0) / (bw * 1e3) if bw else 0.0)
    return r["count"] * floor / r["device_time_us"]


def _tile_text(a: dict, sms: int | None) -> str:
    q = a["quant"]
    if q is None:
        return ("Tile unknown: no kernel name of this GEMM shows its tile (the naming conventions read are "
                "Tensile/hipBLASLt MT, cuBLAS xmma tilesize, cuBLASLt nvjet, CUTLASS 2 and 3), so no tile or "
                "wave arithmetic is done.")
    tn, tm = q["tile"].split("x")
    tile = (f"Tile {q['tile']} from the kernel name ({a['tile_library']}, BLAS m x n: {tn} along N, {tm} along M): "
            f"{q['tiles_m']}x{q['tiles_n']} tiles (M x N), tile efficiency {q['tile_eff'] * 100:.1f}% (M*N / padded "
            "tiles); ")
    split = q.get("split")
    if not split:
        return tile + (f"{q['ctas']:,} tiles on {sms or '?'} SMs/CUs (one tile per SM/CU at a time assumed) = "
                       f"{q['waves'] or '?'} wave(s), wave efficiency {q['wave_eff'] * 100:.1f}% (tiles / (waves x SMs)).")
    what = {"stream-K": "stream-K", "split-K": "split-K",
            "split at launch": "free to split K at launch"}[split["mode"]]
    tile += f"the kernel is {what} ({split['evidence']}), so its waves are not the tile count's: "
    if split["mode"] == "stream-K":
        return tile + ("a persistent grid shares every tile's K loop out evenly across the CUs: no wave "
                       "quantization to recover.")
    if q["wave_from"] == "grid":
        f = split.get("factor")
        return tile + (f"the recorded grid ran {q['ctas']:,} workgroups"
                       + (" (one per tile: this launch did not split K)" if f == 1 else
                          f" ({f} splits of K per tile)" if f else "")
                       + f" on {sms} SMs/CUs = {q['waves']} wave(s), wave efficiency {q['wave_eff'] * 100:.1f}% "
                       "(workgroups / (waves x SMs)).")
    return tile + "the trace records no grid for its one kernel, so no wave arithmetic is done."


def shape_findings(rows: list[dict], device: dict, total_us: float) -> list[dict]:
    """gemm_shape findings: misaligned dims, tile and wave quantization of tensor-core GEMMs."""
    peaks, sms, bw = device.get("peak_tflops") or {}, device.get("sms"), device.get("dram_gbps")
    facts = []
    for r in rows:
        if r.get("family") != "gemm" or r.get("flops") is None or r["device_time_us"] < SHAPE_SHARE * total_us:
            continue
        a = analyse(r, sms)
        if a:
            pk = peaks.get(_TC_KEY.get(a["dtype"], ""))
            facts.append((r, a, pk, _tc_frac(r, pk, bw)))
    ref: dict[str, float] = {}
    for dt in {a["dtype"] for _, a, _, _ in facts}:
        fr = [f for r, a, _, f in facts if a["dtype"] == dt and not a["misaligned"] and f]
        if fr:
            ref[dt] = _median(fr)
    out = []
    for r, a, pk, frac in facts:
        q = a["quant"]
        loss = 1 - q["eff"] if q else 0.0
        mis = a["misaligned"]
        quant = q is not None and r["bound"] == "compute" and loss >= 0.15 and r["device_time_us"] >= MIN_SHARE * total_us
        if not mis and not quant:
            continue
        t = r["device_time_us"]
        saving = t * loss if quant else 0.0
        parts = [f"{_what(r)}: {_calls(r['count'])}, {u.us(t)}; as a GEMM B={a['B']:,}, M={a['M']:,}, "
                 f"N={a['N']:,}, K={a['K']:,} in {a['dtype']}."]
        if mis:
            dims = ", ".join(f"{k}={v:,}" for k, v in mis.items())
            ka = a["kernel_align"]
            pads = {"K": a["better"]["K"], "N": a["better"]["pad_N"]}
            parts.append(f"{dims} {'is' if len(mis) == 1 else 'are'} not a multiple of {a['align']} elements "
                         f"(16 bytes in {a['dtype']}): the contiguous rows of the operands are not 16-byte aligned, "
                         "so tensor-core kernels cannot use full-width loads"
                         + (f"; the kernel name shows align{ka} ({ka}-element accesses)." if ka and ka < a["align"]
                            else ".")
                         + " Pad to " + ", ".join(f"{k}={pads[k]:,}" for k in mis) + " (zeros).")
            if frac is not None:
                parts.append(f"It reaches {frac * 100:.1f}% of its roof ({pk:g} TFLOP/s {a['dtype']} or "
                             f"{bw:g} GB/s, whichever is slower).")
            dt_ref = ref.get(a["dtype"])
            if dt_ref and frac is not None and frac < dt_ref:
                est = t * (1 - frac / dt_ref)
                parts.append(f"The aligned {a['dtype']} GEMMs in this trace reach {dt_ref * 100:.0f}% of theirs "
                             f"(median): at that rate it would take {u.us(t - est)}.")
                saving = max(saving, est)
        parts.append(_tile_text(a, sms))
        if quant:
            parts.append(f"{loss * 100:.1f}% of the tensor-core time is padding (1 - tile x wave efficiency).")
            if a["better"].get("wave_M"):
                parts.append("Whole waves at M = " + " or ".join(f"{x:,}" for x in a["better"]["wave_M"])
                             + " (e.g. by changing the batch or sequence length per call).")
            elif q["tile_eff"] < 0.9:
                parts.append(f"M={a['better']['M']:,} / N={a['better']['N']:,} fill the tiles.")
        parts.append(f"Saving shown: {u.us(saving)}" + (" (no aligned GEMM of this dtype in the trace to compare "
                                                        "with: no estimate)." if not saving else "."))
        out.append({"kind": "gemm_shape",
                    "title": f"{r['name']} shape wastes tensor cores: "
                             + (f"{', '.join(mis)} not a multiple of {a['align']}" if mis
                                else f"{loss * 100:.0f}% tile/wave padding"),
                    "text": " ".join(parts), "ops": [r["id"]], "saving_us": saving})
    return out


def _median(xs: list[float]) -> float:
    """statistics.median (not imported for this one use: ~3 ms)."""
    s = sorted(xs)
    h = len(s) // 2
    return s[h] if len(s) % 2 else (s[h - 1] + s[h]) / 2
