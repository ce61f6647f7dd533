"""Matrix unit (isa.md §5): tile products into the accumulators and the write-outs to VRAM.

One job: the semantics of the ``mat``, ``bmat`` and ``wo`` families. Every output is a float64 dot product,
sequential in ascending k from +0.0 (:func:`.common.dot`), ``f32(p*s)`` then ``acc = f32(acc + p_s)``.
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
from ..numerics import bf16_bits_to_f32, f32_to_bf16_bits
from .common import acc32, canon, dot, fault
from .slots import (
    CFG_B,
    CFG_BA,
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


@njit(cache=True)
def _offset_checks(alu, pc, m, off, mf, M, B, H, frec):
    """AL of the matrix operand's in-tile offset (AL-MM / AL-MV / AL-TMV / AL-BHEAD)."""
    if alu in (ALU_MM, ALU_TMM):
        if off % M != 0:
            return fault(frec, R_AL_MM, pc, mf, m, -1, M, off, 0)
        if (off // M) % B != 0:
            return fault(frec, R_AL_MM, pc, mf, m, off // M, B, off, 1)
    elif alu == ALU_MV:
        if off % B != 0:
            return fault(frec, R_AL_MV, pc, mf, m, -1, B, off, 0)
        if off >= M:
            return fault(frec, R_AL_MV, pc, mf, m, -1, M, off, 1)
    elif alu == ALU_TMV:
        if off % (B * M) != 0:
            return fault(frec, R_AL_TMV, pc, mf, m, -1, B * M, off, 0)
    else:
        if off % H != 0:
            return fault(frec, R_AL_BHEAD, pc, mf, m, -1, H, off, 0)
        if off >= M:
            return fault(frec, R_AL_BHEAD, pc, mf, m, -1, M, off, 1)
    return RUN_OK


@njit(cache=True)
def _vector_rows(alu, M, B):
    """VRAM rows of the vector operand: B (M_MM/M_TMM), M (M_BMM/M_BTMM), else 1."""
    if alu in (ALU_MM, ALU_TMM):
        return B
    if alu in (ALU_BMM, ALU_BTMM):
        return M
    return np.int64(1)


@njit(cache=True)
def _operand_checks(alu, pc, m, v, mf, vf, cfg, frec):
    """AL and BD of both operands in isa.md §8 order (M_TMM: the vector operand first)."""
    M, V, B = cfg[CFG_M], cfg[CFG_V], cfg[CFG_B]
    NT, nrows = cfg[CFG_NTILES], cfg[CFG_VROWS]
    tmm = alu == ALU_TMM
    if tmm and v % V != 0:
        return fault(frec, R_AL_VROW, pc, vf, v, -1, V, v % V, 0)
    st = _offset_checks(alu, pc, m, m % (M * M), mf, M, B, cfg[CFG_H], frec)
    if st != RUN_OK:
        return st
    if not tmm and v % V != 0:
        return fault(frec, R_AL_VROW, pc, vf, v, -1, V, v % V, 0)
    tile = m // (M * M)
    if not tmm and tile >= NT:
        return fault(frec, R_BD_MTILE, pc, mf, tile, 0, NT, m, 0)
    for i in range(_vector_rows(alu, M, B)):
        if v // V + i >= nrows:
            return fault(frec, R_BD_VROW, pc, vf, v // V + i, i, nrows, v + i * M, 0)
    if tmm and tile >= NT:
        return fault(frec, R_BD_MTILE, pc, mf, tile, 0, NT, m, 0)
    return RUN_OK


@njit(cache=True)
def _tile_product(alu, T, c, xbuf, wbuf, m_accum, v_accum, M, B):
    """M_MM / M_TMM / M_MV / M_TMV: B output columns at column (or row) ``c`` of tile T."""
    for j in range(B):  # wbuf[j, k] = weight of output column j at depth k
        for k in range(M):
            if alu in (ALU_MM, ALU_MV):
                wbuf[j, k] = np.float64(T[k, c + j])
            else:
                wbuf[j, k] = np.float64(T[c + j, k])
    if alu in (ALU_MM, ALU_TMM):
        for i in range(B):
            for j in range(B):
                m_accum[i, j] = acc32(m_accum[i, j], np.float32(dot(xbuf[i], 0, wbuf[j], M)))
    else:
        for j in range(B):
            v_accum[j] = acc32(v_accum[j], np.float32(dot(xbuf[0], 0, wbuf[j], M)))


@njit(cache=True)
def _batched_product(alu, T, h, xbuf, wbuf, hm_accum, hv_accum, M, H, BA, bmm_scale):
    """M_BMM / M_BTMM / M_BMV / M_BTMV: every head b < BA against the head slice at ``h``."""
    s = np.float64(np.float32(bmm_scale))
    for j in range(M):  # wbuf[j, k]: j < M output column, k < H depth
        for k in range(H):
            if alu in (ALU_BMM, ALU_BMV):
                wbuf[j, k] = np.float64(T[h + k, j])
            else:
                wbuf[j, k] = np.float64(T[j, h + k])
    if alu in (ALU_BMV, ALU_BTMV):
        for b in range(BA):
            for j in range(M):
                p = dot(xbuf[0], b * H, wbuf[j], H)
                hv_accum[b, j] = acc32(hv_accum[b, j], np.float32(p * s))
        return
    for b in range(BA):
        for srow in range(M):
            for j in range(M):
                p = dot(xbuf[srow], b * H, wbuf[j], H)
                hm_accum[b, srow, j] = acc32(hm_accum[b, srow, j], np.float32(p * s))


@njit(cache=True, error_model="numpy")
def product(alu, pc, rd, rs1, rs2, gp, vram, mram, m_acc, v_acc, hm_acc, hv_acc, cfg, bmm_scale, frec, xbuf, wbuf):
    """The ``mat`` and ``bmat`` families (not the write-outs), into the M/V or batched accumulators."""
    M, V, B = cfg[CFG_M], cfg[CFG_V], cfg[CFG_B]
    if alu == ALU_TMM:  # operand roles swapped
        v, m, mf, vf = np.int64(gp[rs1]), np.int64(gp[rs2]), OPND_RS2, OPND_RS1
    else:
        m, v, mf, vf = np.int64(gp[rs1]), np.int64(gp[rs2]), OPND_RS1, OPND_RS2
        if alu in (ALU_BMV, ALU_BTMV):
            m = m + np.int64(gp[rd])
    st = _operand_checks(alu, pc, m, v, mf, vf, cfg, frec)
    if st != RUN_OK:
        return st
    T = mram[m // (M * M)]
    off = m % (M * M)
    r0 = v // V
    for i in range(_vector_rows(alu, M, B)):  # X rows as float64 (bf16 values, exact)
        for k in range(V):
            xbuf[i, k] = np.float64(bf16_bits_to_f32(vram[r0 + i, k]))
    if alu in (ALU_MM, ALU_TMM, ALU_MV, ALU_TMV):
        c = off if alu == ALU_MV else off // M
        _tile_product(alu, T, c, xbuf, wbuf, m_acc, v_acc, M, B)
    else:
        _batched_product(alu, T, off, xbuf, wbuf, hm_acc, hv_acc, M, cfg[CFG_H], cfg[CFG_BA], bmm_scale)
    return RUN_OK


@njit(cache=True)
def _write_lanes(vram, r, vo, B, V, values):
    """VROW r lanes [vo, vo+B) = bf16(values); the other lanes are rewritten canonicalised."""
    for j in range(V):
        if j >= vo and j < vo + B:
            vram[r, j] = f32_to_bf16_bits(values[j - vo])
        else:
            vram[r, j] = canon(vram[r, j])


@njit(cache=True)
def _lane_writeout(alu, pc, rs1, addr, gp, vram, m_accum, v_accum, cfg, frec):
    """M_MM_WO (B rows at pitch M*gp[stride]) and M_MV_WO (one row), B lanes at ``addr mod M``."""
    M, V, B, nrows = cfg[CFG_M], cfg[CFG_V], cfg[CFG_B], cfg[CFG_VROWS]
    vo = addr % M
    if vo % B != 0:
        return fault(frec, R_AL_WO, pc, OPND_RD, addr, -1, B, vo, 0)
    vb = addr - vo
    if alu == ALU_MV:
        if vb // V >= nrows:
            return fault(frec, R_BD_VROW, pc, OPND_RD, vb // V, 0, nrows, vb, 0)
        _write_lanes(vram, vb // V, vo, B, V, v_accum)
        v_accum[:] = 0.0
        return RUN_OK
    s = np.int64(1) if rs1 == 0 else np.int64(gp[rs1])
    for i in range(B):
        if (vb + i * M * s) // V >= nrows:
            return fault(frec, R_BD_VROW, pc, OPND_RD, (vb + i * M * s) // V, i, nrows, vb + i * M * s, 0)
    for i in range(B):
        _write_lanes(vram, (vb + i * M * s) // V, vo, B, V, m_accum[i])
    m_accum[:, :] = 0.0
    return RUN_OK


@njit(cache=True, error_model="numpy")
def writeout(alu, pc, rd, rs1, imm, gp, vram, m_acc, v_acc, hm_acc, hv_acc, cfg, frec):
    """The ``wo`` family: M_MM_WO, M_MV_WO, M_BMM_WO (BA*M rows), M_BMV_WO (BA rows); clears the accumulator."""
    M, V, BA, nrows = cfg[CFG_M], cfg[CFG_V], cfg[CFG_BA], cfg[CFG_VROWS]
    addr = np.int64(gp[rd]) + imm
    if alu in (ALU_MM, ALU_MV):
        return _lane_writeout(alu, pc, rs1, addr, gp, vram, m_acc, v_acc, cfg, frec)
    if addr % M != 0:
        return fault(frec, R_AL_BWO, pc, OPND_RD, addr, -1, M, addr % M, 0)
    r0 = addr // V
    nr = BA * M if alu == ALU_BMM else BA
    if r0 + nr > nrows:
        i = nrows - r0 if nrows > r0 else np.int64(0)
        return fault(frec, R_BD_VROW, pc, OPND_RD, r0 + i, i, nrows, addr + i * M, 0)
    if alu == ALU_BMM:
        for b in range(BA):
            for s2 in range(M):
                for j in range(M):
                    vram[r0 + b * M + s2, j] = f32_to_bf16_bits(hm_acc[b, s2, j])
        hm_acc[:, :, :] = 0.0
    else:
        for b in range(BA):
            for j in range(M):
                vram[r0 + b, j] = f32_to_bf16_bits(hv_acc[b, j])
        hv_acc[:, :] = 0.0
    return RUN_OK


@njit(cache=True, error_model="numpy")
def execute(fam, alu, pc, f, gp, vram, mram, m_acc, v_acc, hm_acc, hv_acc, cfg, bmm_scale, frec, xbuf, wbuf):
    """The matrix unit's instructions (families mat, bmat, wo): the status."""
    rd, rs1, rs2, _rs3, _f1, imm = f
    if fam == FAM_WO:
        return writeout(alu, pc, rd, rs1, imm, gp, vram, m_acc, v_acc, hm_acc, hv_acc, cfg, frec)
    return product(
        alu, pc, rd, rs1, rs2, gp, vram, mram, m_acc, v_acc, hm_acc, hv_acc, cfg, bmm_scale, frec, xbuf, wbuf
    )
