"""Matrix unit (isa.md §5): tile products into the accumulators and the write-outs to VRAM.

One job: the semantics of the ``mat``, ``bmat`` and ``wo`` families. Every output is a float64 dot product,
sequential in ascending k from +0.0 (as :func:`.common.dot`), ``f32(p*s)`` then ``acc = f32(acc + p_s)``.
An instruction stages its operands once into float64 scratch (X rows into ``xbuf``, the W slice into ``wbuf``
as ``w[k, j]``) and computes whole tiles with the independent outputs vectorised: k steps outermost, then the
rows, a contiguous row of outputs innermost (docs/performance.md, "Matrix unit: vectorised tiles"). The X rows
take the first ``xbuf.shape[1]`` rows of ``xbuf``, the float64 sums of a block of rows the rows after them (the
host pads the rows of ``xbuf``: rows 4 KiB apart would share L1 cache sets). A NaN sum is redone by
:func:`.common.dot` (the NaN propagation rule).
Static checks (IL-BRD, CF-VM, CF-BA) are made before dispatch (:mod:`.static`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import (
    ALU_BMM,
    ALU_BMV,
    ALU_BTMM,
    ALU_BTMV,
    ALU_MM,
    ALU_MV,
    ALU_TMM,
    ALU_TMV,
    FAM_WO,
)

from ..faults import (
    R_AL_BHEAD,
    R_AL_BWO,
    R_AL_MM,
    R_AL_MV,
    R_AL_TMV,
    R_AL_VROW,
    R_AL_WO,
    R_BD_MTILE,
    R_BD_VROW,
)
from ..numerics.formats import bf16_bits_to_f32, f32_to_bf16_bits
from .common import acc32, canon, dot, fault
from .slots import (
    CFG_B,
    CFG_BA,
    CFG_FUNC,
    CFG_H,
    CFG_M,
    CFG_NTILES,
    CFG_V,
    CFG_VROWS,
    OPND_RD,
    OPND_RS1,
    OPND_RS2,
    RUN_OK,
)

#: "no fault" rule of the check helpers (their result is the fault record: rule, operand, value, index, limit, x6, x7)
_NONE = (-1, 0, 0, 0, 0, 0, 0)


@njit(cache=True)
def _offset_rule(alu, m, off, mf, M, B, H):
    """AL of the matrix operand's in-tile offset (AL-MM / AL-MV / AL-TMV / AL-BHEAD)."""
    if alu in (ALU_MM, ALU_TMM):
        if off % M != 0:
            return (R_AL_MM, mf, m, -1, M, off, 0)
        if (off // M) % B != 0:
            return (R_AL_MM, mf, m, off // M, B, off, 1)
    elif alu == ALU_MV:
        if off % B != 0:
            return (R_AL_MV, mf, m, -1, B, off, 0)
        if off >= M:
            return (R_AL_MV, mf, m, -1, M, off, 1)
    elif alu == ALU_TMV:
        if off % (B * M) != 0:
            return (R_AL_TMV, mf, m, -1, B * M, off, 0)
    else:
        if off % H != 0:
            return (R_AL_BHEAD, mf, m, -1, H, off, 0)
        if off >= M:
            return (R_AL_BHEAD, mf, m, -1, M, off, 1)
    return _NONE


@njit(cache=True)
def _vector_rows(alu, M, B):
    """VRAM rows of the vector operand: B (M_MM/M_TMM), M (M_BMM/M_BTMM), else 1."""
    if alu in (ALU_MM, ALU_TMM):
        return B
    if alu in (ALU_BMM, ALU_BTMM):
        return M
    return np.int64(1)


@njit(cache=True)
def _operand_rule(alu, m, v, mf, vf, M, V, B, H, NT, nrows):
    """AL and BD of both operands in isa.md §8 order (M_TMM: the vector operand first)."""
    tmm = alu == ALU_TMM
    if tmm and v % V != 0:
        return (R_AL_VROW, vf, v, -1, V, v % V, 0)
    r = _offset_rule(alu, m, m % (M * M), mf, M, B, H)
    if r[0] >= 0:
        return r
    if not tmm and v % V != 0:
        return (R_AL_VROW, vf, v, -1, V, v % V, 0)
    tile = m // (M * M)
    if not tmm and tile >= NT:
        return (R_BD_MTILE, mf, tile, 0, NT, m, 0)
    n, r0 = _vector_rows(alu, M, B), v // V
    if r0 + n > nrows:  # the first row out of range
        i = nrows - r0 if nrows > r0 else np.int64(0)
        return (R_BD_VROW, vf, r0 + i, i, nrows, v + i * M, 0)
    if tmm and tile >= NT:
        return (R_BD_MTILE, mf, tile, 0, NT, m, 0)
    return _NONE


# Index arithmetic on runtime offsets is cast to uint64 (``np.uint64(r0 + i)``): Numba then omits its
# negative-index wraparound, which otherwise costs a select per access and keeps the loops scalar.

#: depth steps per pass over a block of outputs (each output still adds them one by one, in ascending k)
_KSTEP = 4
#: rows of at least this many outputs take 8 depth steps per pass (fewer loads / stores of the sums)
_WIDE = 16
#: float64 sums per block of output rows (32 KiB, L1-sized)
_SUM_BLOCK = 4096
#: tile width (MLEN) from which transposed slices are copied in blocks of 8 lanes
_WIDE_TILE = 512


@njit(cache=True)
def _stage_x(vram, r0, R, K, row_step, lane_step, xbuf):
    """xbuf[i, k] = VRAM row ``r0 + i*row_step``, lane ``i*lane_step + k`` (bf16 -> float64, exact)."""
    for i in range(R):
        r, c = np.uint64(r0 + i * row_step), i * lane_step
        for k in range(K):
            xbuf[i, k] = np.float64(bf16_bits_to_f32(vram[r, np.uint64(c + k)]))


@njit(cache=True)
def _stage_w(T, transposed, a, b, K, N, wbuf):
    """wbuf[k, j] = T[a + k, b + j] (``transposed``: T[b + j, a + k]) for k < K, j < N, as float64. A transposed
    slice of a wide tile is copied in blocks of 8 lanes (each block reads one cache line per row of T)."""
    if transposed and T.shape[1] >= _WIDE_TILE:
        for k0 in range(0, K, 8):
            for j in range(N):
                r = np.uint64(b + j)
                for k in range(k0, min(k0 + 8, K)):
                    wbuf[k, j] = np.float64(T[r, np.uint64(a + k)])
        return
    for k in range(K):
        if transposed:
            for j in range(N):
                wbuf[k, j] = np.float64(T[np.uint64(b + j), np.uint64(a + k)])
        else:
            for j in range(N):
                wbuf[k, j] = np.float64(T[np.uint64(a + k), np.uint64(b + j)])


@njit(cache=True)
def _block_sums(x, xo, w, p, i0, G, K, N):
    """p[g, j] = sum_k x[i0 + g, xo + k] * w[k, j] for g < G, j < N, each sum sequential in ascending k from
    +0.0 (as :func:`.common.dot`): k steps outermost, then the rows, the N outputs of a row innermost (SIMD)."""
    for g in range(G):
        for j in range(N):
            p[g, j] = 0.0
    k = 0
    while N >= _WIDE and k + 8 <= K:  # wide rows: 8 steps per pass over p (half the loads and stores of p)
        for g in range(G):
            xr, c = x[np.uint64(i0 + g)], xo + k
            x0, x1, x2, x3 = xr[np.uint64(c)], xr[np.uint64(c + 1)], xr[np.uint64(c + 2)], xr[np.uint64(c + 3)]
            x4, x5, x6, x7 = xr[np.uint64(c + 4)], xr[np.uint64(c + 5)], xr[np.uint64(c + 6)], xr[np.uint64(c + 7)]
            for j in range(N):
                q = (((p[g, j] + x0 * w[k, j]) + x1 * w[k + 1, j]) + x2 * w[k + 2, j]) + x3 * w[k + 3, j]
                p[g, j] = (((q + x4 * w[k + 4, j]) + x5 * w[k + 5, j]) + x6 * w[k + 6, j]) + x7 * w[k + 7, j]
        k += 8
    while k + _KSTEP <= K:
        for g in range(G):
            i, c = np.uint64(i0 + g), xo + k
            x0, x1, x2, x3 = x[i, np.uint64(c)], x[i, np.uint64(c + 1)], x[i, np.uint64(c + 2)], x[i, np.uint64(c + 3)]
            for j in range(N):
                p[g, j] = (((p[g, j] + x0 * w[k, j]) + x1 * w[k + 1, j]) + x2 * w[k + 2, j]) + x3 * w[k + 3, j]
        k += _KSTEP
    while k < K:  # the last K mod _KSTEP steps
        for g in range(G):
            xk = x[np.uint64(i0 + g), np.uint64(xo + k)]
            for j in range(N):
                p[g, j] = p[g, j] + xk * w[k, j]
        k += 1


@njit(cache=True)
def _fold(acc, p, i0, G, N, s):
    """acc[i0 + g, j] = f32(acc + f32(p[g, j] * s)) for g < G, j < N, if no sum is NaN (else False, nothing
    changed: :func:`_fold_nan`); without a NaN both loops vectorise."""
    nans = 0
    for g in range(G):
        for j in range(N):
            nans += p[g, j] != p[g, j]
    if nans:
        return False
    for g in range(G):
        i = np.uint64(i0 + g)
        for j in range(N):
            acc[i, j] = acc32(acc[i, j], np.float32(p[g, j] * s))
    return True


@njit(cache=True)
def _fold_nan(acc, p, i0, G, N, s, x, xo, w, K):
    """:func:`_fold` of a block with NaN sums: each NaN sum is redone by :func:`.common.dot`, which applies the
    NaN propagation rule."""
    for g in range(G):
        i = np.uint64(i0 + g)
        for j in range(N):
            pj = p[g, j]
            if pj != pj:
                pj = dot(x[i], xo, w[:, j], K)
            acc[i, j] = acc32(acc[i, j], np.float32(pj * s))


@njit(cache=True)
def _tile(x, xo, w, p, R, K, N, s, acc):
    """acc[i, j] += f32(s * sum_k x[i, xo + k] * w[k, j]) for i < R, j < N, in blocks of rows whose float64 sums
    fit ``p`` (and _SUM_BLOCK)."""
    G = min(R, max(1, _SUM_BLOCK // N), p.shape[0])
    for i0 in range(0, R, G):
        g = min(G, R - i0)
        _block_sums(x, xo, w, p, i0, g, K, N)
        if not _fold(acc, p, i0, g, N, s):
            _fold_nan(acc, p, i0, g, N, s, x, xo, w, K)


@njit(cache=True, error_model="numpy")
def _mat(alu, pc, rs1, rs2, gp, vram, mram, acc, cfg, frec, xbuf, wbuf):
    """M_MM / M_TMM (B VRAM rows into the B x B accumulator) and M_MV / M_TMV (one row into v_accum viewed as
    1 x B): B output columns at column (M_MV: lane offset; transposed: row) ``c`` of the tile."""
    M, V, B = cfg[CFG_M], cfg[CFG_V], cfg[CFG_B]
    tmm = alu == ALU_TMM  # operand roles swapped
    m, v = np.int64(gp[rs2]) if tmm else np.int64(gp[rs1]), np.int64(gp[rs1]) if tmm else np.int64(gp[rs2])
    mf, vf = (OPND_RS2, OPND_RS1) if tmm else (OPND_RS1, OPND_RS2)
    r = _operand_rule(alu, m, v, mf, vf, M, V, B, cfg[CFG_H], cfg[CFG_NTILES], cfg[CFG_VROWS])
    if r[0] >= 0:
        return fault(frec, r[0], pc, r[1], r[2], r[3], r[4], r[5], r[6])
    if cfg[CFG_FUNC] == 0:  # timing-only: checks only
        return RUN_OK
    off, R = m % (M * M), acc.shape[0]
    _stage_x(vram, v // V, R, M, 1, 0, xbuf)
    _stage_w(mram[m // (M * M)], alu in (ALU_TMM, ALU_TMV), 0, off if alu == ALU_MV else off // M, M, B, wbuf)
    _tile(xbuf, 0, wbuf, xbuf[xbuf.shape[1] :], R, M, B, 1.0, acc)
    return RUN_OK


@njit(cache=True, error_model="numpy")
def _bmat(alu, pc, rd, rs1, rs2, gp, vram, mram, hm_acc, hv_acc, cfg, bmm_scale, frec, xbuf, wbuf):
    """M_BMM / M_BTMM (M VRAM rows, one tile product per head) and M_BMV / M_BTMV (one row, the heads as rows)
    against the head slice at the tile offset ``h``; the sums scaled by f32(BMM_SCALE)."""
    M, V, B, H, BA = cfg[CFG_M], cfg[CFG_V], cfg[CFG_B], cfg[CFG_H], cfg[CFG_BA]
    mv = alu in (ALU_BMV, ALU_BTMV)
    m, v = np.int64(gp[rs1]) + (np.int64(gp[rd]) if mv else 0), np.int64(gp[rs2])
    r = _operand_rule(alu, m, v, OPND_RS1, OPND_RS2, M, V, B, H, cfg[CFG_NTILES], cfg[CFG_VROWS])
    if r[0] >= 0:
        return fault(frec, r[0], pc, r[1], r[2], r[3], r[4], r[5], r[6])
    if cfg[CFG_FUNC] == 0:
        return RUN_OK
    s, p = np.float64(np.float32(bmm_scale)), xbuf[xbuf.shape[1] :]
    _stage_w(mram[m // (M * M)], alu in (ALU_BTMM, ALU_BTMV), m % (M * M), 0, H, M, wbuf)
    if mv:
        _stage_x(vram, v // V, BA, H, 0, H, xbuf)
        _tile(xbuf, 0, wbuf, p, BA, H, M, s, hv_acc)
        return RUN_OK
    _stage_x(vram, v // V, M, M, 1, 0, xbuf)
    for b in range(BA):
        _tile(xbuf, b * H, wbuf, p, M, H, M, s, hm_acc[b])
    return RUN_OK


@njit(cache=True)
def _write_lanes(vram, r, vo, B, V, acc, i):
    """VROW r lanes [vo, vo+B) = bf16(acc[i]); the other lanes are rewritten canonicalised (the whole row is
    canonicalised first: one branch-free loop, then the B lanes are overwritten)."""
    ru = np.uint64(r)
    for j in range(V):
        vram[ru, j] = canon(vram[ru, j])
    for j in range(B):
        vram[ru, np.uint64(vo + j)] = f32_to_bf16_bits(acc[i, j])


@njit(cache=True, error_model="numpy")
def _lane_writeout(pc, rs1, addr, gp, vram, acc, cfg, frec):
    """M_MM_WO (B rows at pitch M*gp[rs1], rs1 = 0: 1) and M_MV_WO (v_accum viewed as 1 x B: one row), B lanes
    at ``addr mod M``; clears the accumulator."""
    M, V, B, nrows = cfg[CFG_M], cfg[CFG_V], cfg[CFG_B], cfg[CFG_VROWS]
    vo = addr % M
    if vo % B != 0:
        return fault(frec, R_AL_WO, pc, OPND_RD, addr, -1, B, vo, 0)
    vb, pitch = addr - vo, M * (np.int64(1) if rs1 == 0 else np.int64(gp[rs1]))
    for i in range(acc.shape[0]):
        if (vb + i * pitch) // V >= nrows:
            return fault(frec, R_BD_VROW, pc, OPND_RD, (vb + i * pitch) // V, i, nrows, vb + i * pitch, 0)
    if cfg[CFG_FUNC] == 0:
        return RUN_OK
    for i in range(acc.shape[0]):
        _write_lanes(vram, (vb + i * pitch) // V, vo, B, V, acc, i)
    acc[:, :] = 0.0
    return RUN_OK


@njit(cache=True, error_model="numpy")
def _batched_writeout(alu, pc, addr, vram, hm_acc, hv_acc, cfg, frec):
    """M_BMM_WO (BA*M rows, head-major) and M_BMV_WO (BA rows) from VRAM row ``addr / V``; clears the accumulator."""
    M, V, BA, nrows = cfg[CFG_M], cfg[CFG_V], cfg[CFG_BA], cfg[CFG_VROWS]
    if addr % M != 0:
        return fault(frec, R_AL_BWO, pc, OPND_RD, addr, -1, M, addr % M, 0)
    r0 = addr // V
    rows = hm_acc.reshape((BA * M, M)) if alu == ALU_BMM else hv_acc  # row b*M + s, or b
    nr = rows.shape[0]
    if r0 + nr > nrows:
        i = nrows - r0 if nrows > r0 else np.int64(0)
        return fault(frec, R_BD_VROW, pc, OPND_RD, r0 + i, i, nrows, addr + i * M, 0)
    if cfg[CFG_FUNC] == 0:
        return RUN_OK
    for i in range(nr):
        r = np.uint64(r0 + i)
        for j in range(M):
            vram[r, j] = f32_to_bf16_bits(rows[i, j])
    rows[:, :] = 0.0
    return RUN_OK


@njit(cache=True, error_model="numpy")
def execute(fam, alu, pc, f, gp, vram, mram, m_acc, v_acc, hm_acc, hv_acc, cfg, bmm_scale, frec, xbuf, wbuf):
    """The matrix unit's instructions (families mat, bmat, wo): the status. Each path gets only the arrays it
    uses (an array argument of a call costs reference counting, docs/performance.md)."""
    rd, rs1, rs2, _rs3, _f1, imm = f
    if fam == FAM_WO:
        addr = np.int64(gp[rd]) + imm
        if alu == ALU_MM:
            return _lane_writeout(pc, rs1, addr, gp, vram, m_acc, cfg, frec)
        if alu == ALU_MV:
            return _lane_writeout(pc, rs1, addr, gp, vram, v_acc.reshape((1, v_acc.shape[0])), cfg, frec)
        return _batched_writeout(alu, pc, addr, vram, hm_acc, hv_acc, cfg, frec)
    if alu in (ALU_MM, ALU_TMM):
        return _mat(alu, pc, rs1, rs2, gp, vram, mram, m_acc, cfg, frec, xbuf, wbuf)
    if alu in (ALU_MV, ALU_TMV):
        return _mat(alu, pc, rs1, rs2, gp, vram, mram, v_acc.reshape((1, v_acc.shape[0])), cfg, frec, xbuf, wbuf)
    return _bmat(alu, pc, rd, rs1, rs2, gp, vram, mram, hm_acc, hv_acc, cfg, bmm_scale, frec, xbuf, wbuf)
