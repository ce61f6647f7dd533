"""Cycle accounting and the trace ring of one retired instruction (timing.md §3-§5).

One job: charge the instruction's latency (serial: Σ latencies; overlap: the §4 scoreboard of
:mod:`plena_sim.timing`; H_*: the HBM bank model of :mod:`plena_sim.hbm_timing`, started at the issue
cycle) and append its trace record.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import ALU_PREFETCH_M, ALU_PREFETCH_V, FAM_DMA

from .. import timing as TM
from ..hbm_timing import (
    EMPTY,
    G_ELEM_LEN,
    G_ROWS,
    G_SCALE_LEN,
    PRM_BURST_BYTES,
    PRM_CHANNELS,
    ST_READ_REQUESTS,
    ST_WRITE_REQUESTS,
    W_N,
    dma_instruction,
)
from ..state import CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK
from ..timing import (
    MODE_SERIAL,
    REG_A,
    REG_FP,
    REG_GP,
    REG_SCALE,
    REG_STRIDE,
    REG_VMASK,
    T_BUSY,
    T_CYCLES,
)
from .static import TAB_ALU, TAB_FAMILY, TAB_NOOP


@njit(cache=True)
def reg_value(kind, idx, gp, fp, areg, ctrl):
    """Current value of a register named by a trace REG_* kind (bf16 bits for f, raw u64 for a)."""
    if kind == REG_GP:
        return np.int64(gp[idx])
    if kind == REG_FP:
        return np.int64(fp[idx])
    if kind == REG_A:
        return np.int64(areg[idx])
    if kind == REG_SCALE:
        return ctrl[CTRL_SCALE]
    if kind == REG_STRIDE:
        return ctrl[CTRL_STRIDE]
    if kind == REG_VMASK:
        return ctrl[CTRL_V_MASK]
    return np.int64(0)


@njit(cache=True)
def _geom_row(alu, f1, geom):
    gi = 0 if alu == ALU_PREFETCH_M else (1 if alu == ALU_PREFETCH_V else 2)
    return geom[gi, 0 if f1 == 0 else 1]


@njit(cache=True)
def _hbm_latency(alu, rs2, rs3, f1, g_rs1, t0, areg, ctrl, hbm_tm):
    """HBM-model latency of a retired H_* instruction started at cycle ``t0`` (timing.md §5).
    ``hbm_tm`` = (params, geometry, channels, banks, stats, blocks, hash set, work)."""
    hp, geom, ch, bank, hstats, blocks, hset, work = hbm_tm
    g = _geom_row(alu, f1, geom)
    pitch = ctrl[CTRL_STRIDE] if rs3 == 1 else g[G_ELEM_LEN]
    lat = dma_instruction(hp, g, np.int64(areg[rs2]), g_rs1, pitch, ctrl[CTRL_SCALE], t0, ch, bank, hstats,
                          blocks, hset, work)
    if lat >= 0:
        return lat
    # the preallocated scratch (capped, see TimingState) is too small for this instruction: use a one-off
    # scratch of the geometry bound (only configurations with huge P_* / rows get here)
    burst = hp[PRM_BURST_BYTES]
    per_row = (g[G_ELEM_LEN] + burst - 1) // burst + 1
    if g[G_SCALE_LEN] > 0:
        per_row += (g[G_SCALE_LEN] + burst - 1) // burst + 1
    nb = g[G_ROWS] * per_row
    size = np.int64(16)
    while size < 2 * nb:
        size *= 2
    b2 = np.zeros(nb, dtype=np.int64)
    h2 = np.full(size, EMPTY, dtype=np.int64)
    w2 = np.zeros((W_N, max(nb, hp[PRM_CHANNELS] + 1)), dtype=np.int64)
    return dma_instruction(hp, g, np.int64(areg[rs2]), g_rs1, pitch, ctrl[CTRL_SCALE], t0, ch, bank, hstats,
                           b2, h2, w2)


@njit(cache=True)
def account_dma(o, alu, f, g, aux, base_lat, unit, areg, ctrl, sb, hbm_tm, tmode):
    """Timing of one retired H_* instruction: returns (issue cycle, latency) and updates the state.
    ``f`` = (rd, rs1, rs2, rs3, f1, imm18) fields, ``g`` = (gp[rd], gp[rs1], gp[rs2]) at issue,
    ``sb`` = (ts, ready, rdone, cv, rr, wr)."""
    rd, rs1, rs2, rs3, f1, imm18 = f
    ts, ready, rdone, cv, rr, wr = sb
    if tmode == MODE_SERIAL:
        start = ts[T_CYCLES]
        lat = _hbm_latency(alu, rs2, rs3, f1, g[1], start, areg, ctrl, hbm_tm)
        ts[T_CYCLES] = start + lat
        ts[TM.T_LAST_ISSUE] = start
        if unit >= 0:
            ts[T_BUSY + unit] += lat
        return start, lat
    nr, nw = TM.resources_nb(o, rd, rs1, rs2, rs3, f1, imm18, g[0], g[1], g[2], aux, cv, rr, wr)
    issue = TM.sb_issue_nb(ts, unit, rr, nr, wr, nw, ready, rdone)
    lat = _hbm_latency(alu, rs2, rs3, f1, g[1], issue, areg, ctrl, hbm_tm)
    TM.sb_commit_nb(ts, unit, issue, lat, rr, nr, wr, nw, ready, rdone)
    return issue, lat


@njit(cache=True)
def trace_dma(tbuf, tcount, seq, pc, o, alu, unit, issue, lat, reg, f, g, aux, sb, areg, ctrl, hbm_tm, req_before):
    """Append the trace record of a retired H_* instruction (timing.REC_FIELDS), with its HBM span.
    ``reg`` = (kind, index, old, new)."""
    rd, rs1, rs2, rs3, f1, imm18 = f
    _ts, _ready, _rdone, cv, rr, wr = sb
    hp, geom, hstats = hbm_tm[0], hbm_tm[1], hbm_tm[4]
    _nr, nw = TM.resources_nb(o, rd, rs1, rs2, rs3, f1, imm18, g[0], g[1], g[2], aux, cv, rr, wr)
    gr = _geom_row(alu, f1, geom)
    pitch = ctrl[CTRL_STRIDE] if rs3 == 1 else gr[G_ELEM_LEN]
    haddr = np.int64(areg[rs2]) + g[1]
    hspan = (gr[G_ROWS] - 1) * pitch + gr[G_ELEM_LEN]
    hbytes = (hstats[ST_READ_REQUESTS] + hstats[ST_WRITE_REQUESTS] - req_before) * hp[PRM_BURST_BYTES]
    TM.trace_record_nb(tbuf, tcount, seq, pc, o, unit, issue, lat, reg[0], reg[1], reg[2], reg[3], nw, wr, cv,
                       haddr, hspan, hbytes)


@njit(cache=True)
def trace_reg_before(tracing, o, rd, aux, gp, fp, areg, ctrl, tim):
    """(kind, index, value before, HBM requests so far) of the register the instruction writes (tracing only)."""
    if not tracing:
        return np.int64(0), np.int64(0), np.int64(0), np.int64(0)
    hstats = tim[5][4]
    rkind, ridx = TM.dest_reg_nb(o, rd, aux)
    return rkind, ridx, reg_value(rkind, ridx, gp, fp, areg, ctrl), hstats[ST_READ_REQUESTS] + hstats[ST_WRITE_REQUESTS]


@njit(cache=True)
def account(pc, o, words, g, aux, base_lat, tabs, areg, ctrl, tim):
    """Timing of one retired instruction: (issue cycle, latency); the timing state in ``tim`` is updated."""
    ts, ready, rdone, cv, unit_of = tim[0], tim[1], tim[2], tim[3], tim[4]
    rr, wr = tim[8], tim[9]
    rd = words[0][pc]
    unit = unit_of[o]
    if tabs[TAB_NOOP][o] != 0 and rd == 0:
        unit = -1                                  # zero-latency no-op: no unit, no resources
    tmode = ts[TM.T_MODE]
    f = (rd, words[1][pc], words[2][pc], words[3][pc], words[4][pc], words[5][pc])
    if tabs[TAB_FAMILY][o] == FAM_DMA:
        return account_dma(o, tabs[TAB_ALU][o], f, g, aux, base_lat, unit, areg, ctrl, (ts, ready, rdone, cv, rr, wr),
                           tim[5], tmode)
    if tmode == MODE_SERIAL:
        issue = ts[T_CYCLES]
        ts[T_CYCLES] = issue + base_lat
        ts[TM.T_LAST_ISSUE] = issue
        if unit >= 0:
            ts[T_BUSY + unit] += base_lat
        return issue, base_lat
    nr, nw = TM.resources_nb(o, f[0], f[1], f[2], f[3], f[4], f[5], g[0], g[1], g[2], aux, cv, rr, wr)
    issue = TM.sb_issue_nb(ts, unit, rr, nr, wr, nw, ready, rdone)
    TM.sb_commit_nb(ts, unit, issue, base_lat, rr, nr, wr, nw, ready, rdone)
    return issue, base_lat


@njit(cache=True)
def trace(pc, o, words, g, aux, issue, lat, reg, seq, tabs, regs, tim):
    """Append the trace record of a retired instruction (timing.REC_FIELDS)."""
    gp, fp, areg, ctrl = regs[0], regs[1], regs[2], regs[3]
    cv, unit_of, tbuf, tcount, rr, wr = tim[3], tim[4], tim[6], tim[7], tim[8], tim[9]
    rd = words[0][pc]
    unit = unit_of[o]
    if tabs[TAB_NOOP][o] != 0 and rd == 0:
        unit = -1
    f = (rd, words[1][pc], words[2][pc], words[3][pc], words[4][pc], words[5][pc])
    after = (reg[0], reg[1], reg[2], reg_value(reg[0], reg[1], gp, fp, areg, ctrl))
    if tabs[TAB_FAMILY][o] == FAM_DMA:
        trace_dma(tbuf, tcount, seq, pc, o, tabs[TAB_ALU][o], unit, issue, lat, after, f, g, aux,
                  (tim[0], tim[1], tim[2], cv, rr, wr), areg, ctrl, tim[5], reg[3])
        return
    _nr, nw = TM.resources_nb(o, f[0], f[1], f[2], f[3], f[4], f[5], g[0], g[1], g[2], aux, cv, rr, wr)
    TM.trace_record_nb(tbuf, tcount, seq, pc, o, unit, issue, lat, after[0], after[1], after[2], after[3], nw, wr,
                       cv, np.int64(0), np.int64(0), np.int64(0))
