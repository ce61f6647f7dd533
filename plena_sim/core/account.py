"""Cycle accounting and the trace ring of one retired instruction (timing.md §3-§5).

One job: charge the instruction's latency (serial: Σ latencies; overlap: the §4 scoreboard of
:mod:`plena_sim.timing.scoreboard`; H_*: the HBM bank model of :mod:`plena_sim.hbm.timing`, started at the issue
cycle) and append its trace record.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import ALU_PREFETCH_M, ALU_PREFETCH_V, FAM_DMA

from ..hbm import timing as HT
from ..limits.polling import stop_requested
from ..memory.state import CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK
from ..timing import rtl as RT
from ..timing import scoreboard as TM


@njit(cache=True)
def reg_value(kind, idx, gp, fp, areg, ctrl):
    """Current value of a register named by a trace REG_* kind (bf16 bits for f, raw u64 for a)."""
    if kind == TM.REG_GP:
        return np.int64(gp[idx])
    if kind == TM.REG_FP:
        return np.int64(fp[idx])
    if kind == TM.REG_A:
        return np.int64(areg[idx])
    if kind == TM.REG_SCALE:
        return ctrl[CTRL_SCALE]
    if kind == TM.REG_STRIDE:
        return ctrl[CTRL_STRIDE]
    if kind == TM.REG_VMASK:
        return ctrl[CTRL_V_MASK]
    return np.int64(0)


@njit(cache=True)
def _geom_row(alu, f1, geom):
    gi = 0 if alu == ALU_PREFETCH_M else (1 if alu == ALU_PREFETCH_V else 2)
    return geom[gi, 0 if f1 == 0 else 1]


@njit(cache=True)
def _dma_blocks(alu, f, g_rs1, areg, ctrl, hp, gr, blocks, hset, work, stopf):
    """The distinct HBM blocks of a retiring H_* instruction (timing.md §5.3): ``(n, blocks, work)``, in the run's
    scratch or, when that is too small, in a one-off scratch of the geometry bound (only configurations with huge
    P_* / rows get there); n = DMA_STOPPED if the stop flag was set (nothing changed)."""
    pitch = ctrl[CTRL_STRIDE] if f[3] == 1 else gr[HT.G_ELEM_LEN]
    base = np.int64(areg[f[2]])
    n = HT.dma_blocks(hp, gr, base, g_rs1, pitch, ctrl[CTRL_SCALE], blocks, hset, work, stopf)
    if n != HT.DMA_FULL or stop_requested(stopf):
        return (n if n != HT.DMA_FULL else np.int64(HT.DMA_STOPPED)), blocks, work
    burst = hp[HT.PRM_BURST_BYTES]
    per_row = (gr[HT.G_ELEM_LEN] + burst - 1) // burst + 1
    if gr[HT.G_SCALE_LEN] > 0:
        per_row += (gr[HT.G_SCALE_LEN] + burst - 1) // burst + 1
    nb = gr[HT.G_ROWS] * per_row
    size = np.int64(16)
    while size < 2 * nb:
        size *= 2
    b2 = np.zeros(nb, dtype=np.int64)
    h2 = np.full(size, HT.EMPTY, dtype=np.int64)
    w2 = np.zeros((HT.W_N, max(nb, hp[HT.PRM_CHANNELS] + 1)), dtype=np.int64)
    return HT.dma_blocks(hp, gr, base, g_rs1, pitch, ctrl[CTRL_SCALE], b2, h2, w2, stopf), b2, w2


@njit(cache=True)
def account_serial(ts, unit, lat):
    """timing.md §3: issue = the running total; returns the issue cycle. Branch-free (a unit < 0 adds 0 to slot 0):
    LLVM inlines it into the run loop, and a branch would leave an NRT incref / decref pair of ``ts`` per
    instruction there (docs/performance.md)."""
    issue = ts[TM.T_CYCLES]
    ts[TM.T_CYCLES] = issue + lat
    ts[TM.T_LAST_ISSUE] = issue
    ts[TM.T_BUSY + max(unit, 0)] += lat * (unit >= 0)
    return issue


@njit(cache=True)
def account_overlap(o, f, g, aux, unit, lat, ts, ready, rdone, cv, rr, wr):
    """timing.md §4: issue when every resource read is ready and every one written is done; returns it (its stall
    in ``ts[T_LAST_STALL]`` / ``ts[T_STALL_REASON]``). ``f`` = (rd, rs1, rs2, rs3, f1, imm18) fields, ``g`` =
    (gp[rd], gp[rs1], gp[rs2]) at issue."""
    nr, nw = TM.resources_nb(o, f[0], f[1], f[2], f[3], f[4], f[5], g[0], g[1], g[2], aux, cv, rr, wr)
    issue = TM.sb_issue_nb(ts, unit, rr, nr, wr, nw, ready, rdone)
    TM.sb_commit_nb(ts, unit, issue, lat, rr, nr, wr, nw, ready, rdone)
    return issue


@njit(cache=True)
def account_rtl(pc, o, f, g, aux, unit, ts, ready, rdone, cv, rr, wr, rtl, pcx):
    """The rtl model (docs/timing.md) for a fixed-cost instruction: returns (issue cycle, done latency).
    ``rtl`` = (wcls, per-pc costs of :func:`plena_sim.timing.rtl.rtl_pc_costs`, hazard table)."""
    wcls, rpc, hz = rtl
    nr, nw = TM.resources_nb(o, f[0], f[1], f[2], f[3], f[4], f[5], g[0], g[1], g[2], aux, cv, rr, wr)
    pipe = rpc[RT.PC_PIPE, pc]
    issue = TM.rtl_issue_nb(ts, pipe, rpc[RT.PC_CMASK, pc], rr, nr, wr, nw, ready, rdone, wcls, hz, pcx, pc)
    cost = (rpc[RT.PC_READY, pc], rpc[RT.PC_DONE, pc], rpc[RT.PC_II, pc])
    TM.rtl_commit_nb(ts, pipe, issue, cost, rpc[RT.PC_PCLASS, pc], rr, nr, wr, nw, ready, rdone, wcls)
    if unit >= 0:
        ts[TM.T_BUSY + unit] += cost[2]
    return issue, cost[1]


@njit(cache=True)
def _dma_issue(pc, o, f, g, aux, unit, ts, ready, rdone, cv, rr, wr, rtl, pcx):
    """(issue cycle, read ranges, write ranges) of an H_* under overlap / rtl."""
    nr, nw = TM.resources_nb(o, f[0], f[1], f[2], f[3], f[4], f[5], g[0], g[1], g[2], aux, cv, rr, wr)
    if ts[TM.T_MODE] == TM.MODE_OVERLAP:
        issue = TM.sb_issue_nb(ts, unit, rr, nr, wr, nw, ready, rdone)
        pcx[pc, TM.X_STALL + ts[TM.T_STALL_REASON]] += ts[TM.T_LAST_STALL]
        return issue, nr, nw
    wcls, rpc, hz = rtl
    pipe = rpc[RT.PC_PIPE, pc]
    return TM.rtl_issue_nb(ts, pipe, rpc[RT.PC_CMASK, pc], rr, nr, wr, nw, ready, rdone, wcls, hz, pcx, pc), nr, nw


@njit(cache=True)
def account_dma(pc, o, alu, f, g, aux, unit, areg, ctrl, ts, ready, rdone, cv, rr, wr, hbm_tm, stopf, rtl, pcx):
    """Timing of one retired H_* instruction, started at its issue cycle (the HBM bank model): returns (issue
    cycle, latency); latency DMA_STOPPED (nothing booked) if the stop flag was set while its blocks were listed.
    Books the latency (busy) and the HBM bytes on pc's row of ``pcx``."""
    hp, geom, ch, bank, hstats, blocks, hset, work = hbm_tm
    gr = _geom_row(alu, f[4], geom)
    n, blk, wk = _dma_blocks(alu, f, g[1], areg, ctrl, hp, gr, blocks, hset, work, stopf)
    if n < 0:
        return np.int64(-1), n
    req0 = hstats[HT.HST_READ_REQUESTS] + hstats[HT.HST_WRITE_REQUESTS]
    mode = ts[TM.T_MODE]
    if mode == TM.MODE_SERIAL:
        issue, nr, nw = ts[TM.T_CYCLES], 0, 0
    else:
        issue, nr, nw = _dma_issue(pc, o, f, g, aux, unit, ts, ready, rdone, cv, rr, wr, rtl, pcx)
    lat = HT.dma_latency(hp, ch, bank, blk, n, gr[HT.G_IS_WRITE], issue, hstats, wk)
    if mode == TM.MODE_SERIAL:
        account_serial(ts, unit, lat)
    elif mode == TM.MODE_OVERLAP:
        TM.sb_commit_nb(ts, unit, issue, lat, rr, nr, wr, nw, ready, rdone)
    else:
        pipe = rtl[1][RT.PC_PIPE, pc]
        TM.rtl_commit_nb(
            ts, pipe, issue, (lat, lat, lat), rtl[1][RT.PC_PCLASS, pc], rr, nr, wr, nw, ready, rdone, rtl[0]
        )
        ts[TM.T_BUSY + unit] += lat
    nbytes = (hstats[HT.HST_READ_REQUESTS] + hstats[HT.HST_WRITE_REQUESTS] - req0) * hp[HT.PRM_BURST_BYTES]
    pcx[pc, TM.X_BUSY] += lat
    pcx[pc, TM.X_HBM_WRITE if gr[HT.G_IS_WRITE] != 0 else TM.X_HBM_READ] += nbytes
    return issue, lat


@njit(cache=True)
def trace_before(o, rd, aux, regs, tim):
    """(kind, index, value before, HBM requests so far) of the register the instruction writes."""
    gp, fp, areg, ctrl = regs[0], regs[1], regs[2], regs[3]
    hstats = tim[5][4]
    rkind, ridx = TM.dest_reg_nb(o, rd, aux)
    requests = hstats[HT.HST_READ_REQUESTS] + hstats[HT.HST_WRITE_REQUESTS]
    return rkind, ridx, reg_value(rkind, ridx, gp, fp, areg, ctrl), requests


@njit(cache=True)
def trace_after(pc, o, fam, alu, unit, issue, lat, f, g, aux, reg, seq, regs, tim, mem):
    """Append the trace record of a retired instruction (timing.REC_FIELDS): its register change (``reg`` =
    :func:`trace_before`'s tuple), read and write sets, stall (cycles and main reason, as the issue rule left them in
    ``ts``; none under serial), H_*: its HBM rows and bytes; the leading values it wrote."""
    gp, fp, areg, ctrl = regs[0], regs[1], regs[2], regs[3]
    cv, tbuf, tcount, rr, wr = tim[3], tim[6], tim[7], tim[8], tim[9]
    hp, geom, hstats = tim[5][0], tim[5][1], tim[5][4]
    new = reg_value(reg[0], reg[1], gp, fp, areg, ctrl)
    nr, nw = TM.resources_nb(o, f[0], f[1], f[2], f[3], f[4], f[5], g[0], g[1], g[2], aux, cv, rr, wr)
    hbm = (np.int64(0), np.int64(0), np.int64(0), np.int64(0), np.int64(0))
    if fam == FAM_DMA:
        gr = _geom_row(alu, f[4], geom)
        pitch = ctrl[CTRL_STRIDE] if f[3] == 1 else gr[HT.G_ELEM_LEN]
        moved = (hstats[HT.HST_READ_REQUESTS] + hstats[HT.HST_WRITE_REQUESTS] - reg[3]) * hp[HT.PRM_BURST_BYTES]
        hbm = (np.int64(areg[f[2]]) + g[1], gr[HT.G_ROWS], np.int64(pitch), gr[HT.G_ELEM_LEN], moved)
    ts = tim[0]
    stall = ts[TM.T_LAST_STALL] if ts[TM.T_MODE] != TM.MODE_SERIAL else np.int64(0)
    reason = ts[TM.T_STALL_REASON] if stall > 0 else np.int64(0)
    TM.trace_record_nb(
        tbuf,
        tcount,
        seq,
        pc,
        o,
        unit,
        issue,
        lat,
        (reg[0], reg[1], reg[2], new),
        (nr, rr, nw, wr),
        hbm,
        (stall, reason),
        cv,
        (mem[0], mem[2], mem[3]),
    )
