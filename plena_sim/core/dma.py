"""DMA unit (memory.md §5, isa.md §6.5): H_PREFETCH_M, H_PREFETCH_V, H_STORE_V.

One job: move rows between the sparse HBM and MRAM / VRAM with MX or plain encode / decode, after every
alignment and bounds check (precise faults). A store that needs more spare HBM pool pages returns
``RUN_NEED_PAGES`` before it changes anything. IL-AREG is a static check (:mod:`.static`). A transfer polls the
stop flag (:mod:`plena_sim.limits.stop`) between its rows, and what it counts is committed only when it retires.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import ALU_PREFETCH_M, ALU_PREFETCH_V, ALU_STORE_V

from ..faults import R_AL_MTILE, R_AL_MX, R_AL_VROW, R_BD_HBM, R_BD_MTILE, R_BD_VROW
from ..hbm.storage import hbm_missing_pages_after, hbm_note_read, hbm_read, hbm_write
from ..limits.polling import stop_requested
from ..memory.state import CTRL_SCALE, CTRL_STRIDE
from ..numerics.formats import (
    bf16_bits_to_f32,
    f32_to_bf16_bits,
    mx_decode_row,
    mx_encode_row,
    plain_decode_row,
    plain_encode_row,
)
from .common import fault, sat_add
from .slots import (
    CFG_FUNC,
    CFG_HBM_SIZE,
    CFG_M,
    CFG_NTILES,
    CFG_PM,
    CFG_PV,
    CFG_PW,
    CFG_V,
    CFG_VROWS,
    FMT_BLOCK,
    FMT_E,
    FMT_EB,
    FMT_MT,
    FMT_MX,
    OPND_RD,
    OPND_RS1,
    OPND_RS2,
    PEND_HBM_RD,
    PEND_HBM_WR,
    PEND_MX_NAN,
    PEND_MX_SAT,
    RUN_NEED_PAGES,
    RUN_OK,
    RUN_STOP,
    STAT_HBM_RD,
    STAT_HBM_WR,
    STAT_MX_NAN,
    STAT_MX_SAT,
)


@njit(cache=True)
def _geometry(alu, f1, rs3, ctrl, cfg, fmt):
    """(HBM type row, row length L, rows P, row bytes, block bytes, scale bytes per row, pitch, element bytes);
    :func:`transfer` appends (is MX, exponent bits, mantissa bits, block elements) as the geometry tuple."""
    if alu == ALU_PREFETCH_M:
        t = 0 if f1 == 0 else 1
        L = cfg[CFG_M]
        P = cfg[CFG_PM]
    else:
        t = 2 if f1 == 0 else 3
        L = cfg[CFG_V]
        P = cfg[CFG_PV] if alu == ALU_PREFETCH_V else cfg[CFG_PW]
    eb = fmt[t, FMT_EB]
    row_bytes = L * eb
    nsc = L // fmt[t, FMT_BLOCK] if fmt[t, FMT_MX] != 0 else np.int64(0)
    pitch = ctrl[CTRL_STRIDE] if rs3 == 1 else row_bytes
    return t, L, P, row_bytes, eb * fmt[t, FMT_BLOCK], nsc, pitch, eb


@njit(cache=True)
def _sram_checks(alu, pc, dst, P, is_mx, off0, pitch, blk, cfg, frec):
    """AL of the SRAM destination and of the MX row offsets, then BD of the SRAM side."""
    M, V = cfg[CFG_M], cfg[CFG_V]
    MM = M * M
    if alu == ALU_PREFETCH_M:
        if dst % MM != 0:
            return fault(frec, R_AL_MTILE, pc, OPND_RD, dst, -1, MM, dst % MM, 0)
    elif dst % V != 0:
        return fault(frec, R_AL_VROW, pc, OPND_RD, dst, -1, V, dst % V, 0)
    if is_mx:
        for i in range(P):
            oi = off0 + i * pitch
            if oi % blk != 0:
                return fault(frec, R_AL_MX, pc, OPND_RS1, oi, i, blk, oi % blk, pitch)
            if pitch % blk == 0:
                break  # every later row offset is aligned too
    if alu == ALU_PREFETCH_M:
        t0, nt, NT = dst // MM, P // M, cfg[CFG_NTILES]
        if t0 + nt > NT:
            k = NT - t0 if t0 < NT else np.int64(0)
            return fault(frec, R_BD_MTILE, pc, OPND_RD, t0 + k, k, NT, dst + k * MM, 0)
    else:
        r0, nrows = dst // V, cfg[CFG_VROWS]
        if r0 + P > nrows:
            k = nrows - r0 if nrows > r0 else np.int64(0)
            return fault(frec, R_BD_VROW, pc, OPND_RD, r0 + k, k, nrows, dst + k * V, 0)
    return RUN_OK


@njit(cache=True)
def _hbm_checks(pc, base_u, off0, P, pitch, row_bytes, is_mx, scale_reg, blk, nsc, hbm_size, frec):
    """BD-HBM of every row's element and scale range (exact: a base >= HBM_SIZE faults on its first range)."""
    if base_u >= np.uint64(hbm_size):
        return fault(frec, R_BD_HBM, pc, OPND_RS2, sat_add(base_u, off0), 0, hbm_size, 0, row_bytes)
    base = np.int64(base_u)
    for i in range(P):
        oi = off0 + i * pitch
        ea = base + oi
        if ea + row_bytes > hbm_size:
            return fault(frec, R_BD_HBM, pc, OPND_RS2, ea, i, hbm_size, 0, row_bytes)
        if is_mx:
            sa = base + scale_reg + oi // blk
            if sa + nsc > hbm_size:
                return fault(frec, R_BD_HBM, pc, OPND_RS2, sa, i, hbm_size, 1, nsc)
    return RUN_OK


@njit(cache=True)
def _missing_pages(page_index, base, off0, P, pitch, row_bytes, is_mx, scale_reg, blk, nsc):
    """Pool pages a store would add (rows ascend, pitch >= 0: each page counted once per stream)."""
    missing = np.int64(0)
    last_e = np.int64(-1)
    last_s = np.int64(-1)
    for i in range(P):
        oi = off0 + i * pitch
        m_e, last_e = hbm_missing_pages_after(page_index, base + oi, row_bytes, last_e)
        missing += m_e
        if is_mx:
            m_s, last_s = hbm_missing_pages_after(page_index, base + scale_reg + oi // blk, nsc, last_s)
            missing += m_s
    return missing


@njit(cache=True)
def _store(page_index, pages, meta, vram, r0, P, V, base, off0, pitch, g, scale_reg, ebuf, sbuf, fbuf, counts, stopf):
    """H_STORE_V effects: encode P VRAM rows into HBM (element bytes, then MX scales); the counts it adds go to
    ``counts`` (:data:`PENDING_NAMES`). RUN_STOP if the stop flag is set between two rows."""
    L, row_bytes, blk, nsc, eb = g[1], g[3], g[4], g[5], g[7]
    is_mx, E, Mt, kb = g[8] != 0, g[9], g[10], g[11]
    eb_row, sb_row, f_row = ebuf[:row_bytes], sbuf[:nsc], fbuf[:L]
    for i in range(P):
        if stop_requested(stopf):
            return RUN_STOP
        for j in range(V):
            f_row[j] = bf16_bits_to_f32(vram[r0 + i, j])
        oi = off0 + i * pitch
        if is_mx:
            mx_encode_row(f_row, E, Mt, kb, eb_row, sb_row, counts)
        else:
            plain_encode_row(f_row, E, Mt, eb, eb_row)
        hbm_write(page_index, pages, meta, base + oi, eb_row)
        if is_mx:
            hbm_write(page_index, pages, meta, base + scale_reg + oi // blk, sb_row)
    counts[PEND_HBM_WR] = P * (row_bytes + nsc)
    return RUN_OK


@njit(cache=True)
def _load(
    alu,
    page_index,
    pages,
    meta,
    vram,
    mram,
    dst,
    P,
    M,
    V,
    base,
    off0,
    pitch,
    g,
    scale_reg,
    ebuf,
    sbuf,
    fbuf,
    cnt,
    stopf,
):
    """H_PREFETCH_M / H_PREFETCH_V effects: decode P rows into MRAM (exact f32) or VRAM (bf16); the bytes read go
    to ``counts``. RUN_STOP if the stop flag is set between two rows."""
    L, row_bytes, blk, nsc, eb = g[1], g[3], g[4], g[5], g[7]
    is_mx, E, Mt, kb = g[8] != 0, g[9], g[10], g[11]
    eb_row, sb_row, f_row = ebuf[:row_bytes], sbuf[:nsc], fbuf[:L]
    for i in range(P):
        if stop_requested(stopf):
            return RUN_STOP
        oi = off0 + i * pitch
        hbm_note_read(meta, base + oi, row_bytes)
        hbm_read(page_index, pages, meta, base + oi, eb_row)
        if is_mx:
            hbm_note_read(meta, base + scale_reg + oi // blk, nsc)
            hbm_read(page_index, pages, meta, base + scale_reg + oi // blk, sb_row)
            mx_decode_row(eb_row, sb_row, E, Mt, kb, f_row)
        else:
            plain_decode_row(eb_row, E, Mt, eb, f_row)
        if alu == ALU_PREFETCH_M:
            tl, rr = dst // (M * M) + i // M, i % M
            for j in range(M):
                mram[tl, rr, j] = f_row[j]
        else:
            r = dst // V + i
            for j in range(V):
                vram[r, j] = f32_to_bf16_bits(f_row[j])
    cnt[PEND_HBM_RD] = P * (row_bytes + nsc)
    return RUN_OK


@njit(cache=True)
def transfer(
    alu, pc, f, gp, areg, ctrl, vram, mram, pidx, pages, meta, cfg, fmt, frec, need, ebuf, sbuf, fbuf, cnt, stopf
):
    """The ``dma`` family: the status. ``f`` = the (rd, rs1, rs2, rs3, funct1, imm) fields; HBM = (``pidx`` page
    index, ``pages``, ``meta``); DMA buffers ``ebuf`` / ``sbuf`` (element / scale bytes), ``fbuf`` (f32 row), ``cnt``
    (the counts the instruction adds, :data:`PENDING_NAMES`: added to ``stats`` by :func:`commit` once it retires).
    RUN_STOP: the stop flag was set between two rows; only destination rows changed (the instruction re-executes
    exactly: its sources are never its destinations). Plain arrays: an array taken out of a tuple costs a reference
    count per call."""
    rd, rs1, rs2, rs3, f1, _imm = f
    t, L, P, row_bytes, blk, nsc, pitch, eb = _geometry(alu, f1, rs3, ctrl, cfg, fmt)
    is_mx = fmt[t, FMT_MX] != 0
    g = (t, L, P, row_bytes, blk, nsc, pitch, eb, np.int64(is_mx), fmt[t, FMT_E], fmt[t, FMT_MT], fmt[t, FMT_BLOCK])
    off0, dst, scale_reg = np.int64(gp[rs1]), np.int64(gp[rd]), ctrl[CTRL_SCALE]
    st = _sram_checks(alu, pc, dst, P, is_mx, off0, pitch, blk, cfg, frec)
    if st == RUN_OK:
        st = _hbm_checks(pc, areg[rs2], off0, P, pitch, row_bytes, is_mx, scale_reg, blk, nsc, cfg[CFG_HBM_SIZE], frec)
    if st != RUN_OK:
        return st
    base = np.int64(areg[rs2])
    cnt[:] = 0
    if cfg[CFG_FUNC] == 0:  # timing-only: the bytes the transfer moves, nothing moved
        cnt[PEND_HBM_WR if alu == ALU_STORE_V else PEND_HBM_RD] = P * (row_bytes + nsc)
        return RUN_OK
    if alu == ALU_STORE_V:
        missing = _missing_pages(pidx, base, off0, P, pitch, row_bytes, is_mx, scale_reg, blk, nsc)
        if missing > 0 and meta[0] + missing > pages.shape[0]:
            need[0] = missing
            return RUN_NEED_PAGES
        r0, V = dst // cfg[CFG_V], cfg[CFG_V]
        return _store(pidx, pages, meta, vram, r0, P, V, base, off0, pitch, g, scale_reg, ebuf, sbuf, fbuf, cnt, stopf)
    M, V = cfg[CFG_M], cfg[CFG_V]
    return _load(
        alu, pidx, pages, meta, vram, mram, dst, P, M, V, base, off0, pitch, g, scale_reg, ebuf, sbuf, fbuf, cnt, stopf
    )


@njit(cache=True)
def commit(stats, cnt):
    """Add the counts of a retired H_* instruction (``cnt``, filled by :func:`transfer`) to the run statistics."""
    stats[STAT_MX_NAN] += cnt[PEND_MX_NAN]
    stats[STAT_MX_SAT] += cnt[PEND_MX_SAT]
    stats[STAT_HBM_RD] += cnt[PEND_HBM_RD]
    stats[STAT_HBM_WR] += cnt[PEND_HBM_WR]
