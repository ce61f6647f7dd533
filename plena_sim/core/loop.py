"""The run loop: fetch -> static fault -> dispatch -> account -> trace -> retire (isa.md §8 order).

One job: drive the unit files over the decoded program. The state arrives in a few typed tuples (built by
:mod:`.host` from the :class:`~plena_sim.memory.state.MachineState` and timing state) and is unpacked once, before
the loop: a call that passes a tuple of arrays pays a reference count per member on every call, so each unit
gets only the plain arrays it uses (docs/performance.md). Dispatch is on the table's family / operation codes
(:mod:`.static`), never on opcode numbers.

Tuples: ``prog`` = (op, word, words, facts) with words the :data:`.static.WORD_FIELDS` arrays and facts the
per-pc (latency, unit, C_BREAK target, bad-word flag) of :func:`.static.per_pc` and the per-pc work budget units
(:mod:`plena_sim.limits.budget`); ``regs`` = (gp, fp, areg, ctrl, (loop start, reg, count)); ``mem`` = (vram, mram,
fp_sram, int_sram, (page_index, pages, meta)); ``accs`` = (m, v, hm, hv accumulators); ``par`` = (cfg, fmt, latency
table, macs, opcode tables, BMM_SCALE); ``tim`` = (ts, ready, rdone, cv, unit_of, HBM timing tuple, trace buffer,
trace count, read set, write set, rtl tuple (wcls, per-pc rtl costs, hazard table)); ``out`` = (stats,
(pc_count, pc_cycles, pc_extra), fault record, pages needed): the per-pc profile (pc_extra:
:data:`plena_sim.timing.scoreboard.X_N` columns: DMA busy, HBM bytes, stalls by reason), instructions retired, the
budget units used and the cycles they added (``ts[T_CYCLES]`` after the accounting minus before); serial fixed-latency
instructions add exactly their ``lat_pc`` each, so the host derives those cycles (and the fixed busy cycles of every
model) from the counts and the loop adds only the H_* and overlap / rtl ones (the host also derives the counts per
opcode and the matrix MACs); ``scr`` = scratch (rowf, xbuf, wbuf, (ebuf, sbuf, fbuf, counts), logits, taken, sel,
wts); ``stopf`` = the stop flag (:mod:`plena_sim.limits.stop`), polled every :data:`POLL_UNITS` budget units and between
the rows of an H_* instruction.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import (
    ALU_END,
    FAM_BMAT,
    FAM_CREG,
    FAM_DMA,
    FAM_FPMEM,
    FAM_INTMEM,
    FAM_LOOP,
    FAM_MAPV,
    FAM_MAT,
    FAM_REDUCE,
    FAM_SFP,
    FAM_SHIFT,
    FAM_SINT,
    FAM_TOPK,
    FAM_VBIN,
    FAM_VUNARY,
    FAM_WO,
)

from ..faults import INT64_MAX, R_BUDGET, R_IL_OPC, R_LP_RUNAWAY
from ..limits.polling import stop_requested
from ..memory.state import CTRL_LOOP_DEPTH, CTRL_PC
from ..timing.scoreboard import (
    MODE_OVERLAP,
    MODE_SERIAL,
    T_CYCLES,
    T_LAST_STALL,
    T_MODE,
    T_STALL_REASON,
    X_STALL,
)
from . import control, dma, matrix, scalar, vector
from .account import account_dma, account_overlap, account_rtl, account_serial, trace_after, trace_before
from .common import fault
from .slots import CFG_FUNC, CFG_MAXLOOP, OPND_NONE, RUN_DONE, RUN_OK, RUN_STATIC, RUN_STOP, STAT_RETIRED, STAT_WORK
from .static import TAB_ALU, TAB_FAMILY, TAB_LOOPEND, TAB_VF
from .taint import check_reads, propagate

#: budget units between two polls of the stop flag (a few ms of the heaviest units: 4096 MACs, a DMA row)
POLL_UNITS = 1 << 13


@njit(cache=True)
def _flip(depth, lcount, retired):
    """Runaway counts <-> bases (``base = retired - count``; the map is its own inverse): :func:`run` at entry and
    at every exit."""
    for k in range(depth):
        lcount[k] = retired - lcount[k]


@njit(cache=True)
def _deadline(depth, lcount, retired, maxloop):
    """The retired count at or after which some record may run away: min(oldest base, retired) + maxloop (a lower
    bound while the run goes on: pushes and resets only raise bases)."""
    oldest = retired
    for k in range(depth):
        oldest = min(oldest, lcount[k])
    return oldest + maxloop if maxloop <= INT64_MAX - oldest else INT64_MAX


@njit(cache=True)
def _runaway(pc, depth, lstart, lreg, lcount, retired, maxloop, frec):
    """The runaway guard at its deadline: LP-RUNAWAY of the first record (outermost first) whose count after this
    instruction's increment, ``retired + 1 - base``, exceeds the limit, else (RUN_OK, the next deadline)."""
    for k in range(depth):
        c = retired + 1 - lcount[k]
        if c > maxloop:
            return fault(frec, R_LP_RUNAWAY, pc, OPND_NONE, c, k, maxloop, lreg[k], lstart[k]), retired
    return RUN_OK, _deadline(depth, lcount, retired, maxloop)


@njit(cache=True)
def _gate(pc, runaway_at, max_work, maxloop, regs, stats, prog, tabs, stopf, frec, tos):
    """The checks before the instruction at ``pc`` once one of them may end the run: (status, the work units at
    which to come back, the retired count at which to come back for the runaway guard). In order: the end of the
    program, the stop flag (polled here every :data:`POLL_UNITS` units and between the rows of an H_* instruction),
    then isa.md §8: the budget, the runaway guard, the static checks, and in a timing-only run with data-derived
    registers TO-DATA (:func:`.taint.check_reads`). The loop calls it only then: a call that passes arrays costs
    reference counts, too much for every instruction."""
    ctrl, loops, facts = regs[3], regs[4], prog[3]
    work, retired = stats[STAT_WORK], stats[STAT_RETIRED]
    if pc >= facts[3].shape[0]:
        return RUN_DONE, work, runaway_at
    if stop_requested(stopf):
        return RUN_STOP, work, runaway_at
    bad, w = facts[3][pc], facts[4][pc]
    if work + w > max_work:
        return fault(frec, R_BUDGET, pc, OPND_NONE, retired, -1, max_work, work - retired, w - 1), work, runaway_at
    if retired >= runaway_at:  # some record may exceed MAX_LOOP_INSTRUCTIONS now
        st, runaway_at = _runaway(pc, ctrl[CTRL_LOOP_DEPTH], loops[0], loops[1], loops[2], retired, maxloop, frec)
        if st != RUN_OK:
            return st, work, runaway_at
    if bad != 0:
        return RUN_STATIC, work, runaway_at
    if (tos[0][0] | tos[0][2]) != 0 and facts[1][pc] >= 0:  # timing-only bookkeeping; a no-op reads nothing
        st = check_reads(pc, prog[0][pc], prog[2], regs[0], tabs, tos[0], frec)
        if st != RUN_OK:
            return st, work, runaway_at
        propagate(pc, prog[0][pc], prog[2], regs[0], tabs, tos[0], tos[1])
    return RUN_OK, work + w + min(POLL_UNITS, max_work - work - w), runaway_at  # min(max_work, ...): no overflow


@njit(cache=True)
def run(prog, regs, mem, accs, par, tim, out, scr, max_work, tcap, stopf):
    """Run from ``ctrl[CTRL_PC]`` until the PC leaves the program or a status (fault, grow, stop) is returned.

    The runaway guard in O(1) per instruction: while the loop runs, each loop record holds the *base*
    ``retired - count`` instead of its count (every record's count grows by one per instruction exactly when
    ``retired`` does, so the base is constant until the record is reset), and the counts are checked only when
    ``retired`` reaches the deadline of :func:`_deadline`; the records hold counts again whenever ``run``
    returns. Same records, same faults as the spec's increment of every record (isa.md §6.6)."""
    depth, stats, lcount = regs[3][CTRL_LOOP_DEPTH], out[0], regs[4][2]
    _flip(depth, lcount, stats[STAT_RETIRED])
    st = _loop(prog, regs, mem, accs, par, tim, out, scr, max_work, tcap, stopf)
    _flip(regs[3][CTRL_LOOP_DEPTH], lcount, stats[STAT_RETIRED])
    return st


@njit(cache=True, error_model="numpy")
def _loop(prog, regs, mem, accs, par, tim, out, scr, max_work, tcap, stopf):
    """:func:`run` with the loop records holding bases. Per instruction: the checks that may end the run (one
    condition on scalars and plain loads, pc-indexed ones only after ``pc < n``; :func:`_gate` only when it trips),
    dispatch on the table's family, then account (timing.md §3-§5), trace, retire."""
    op, word, (rd_a, rs1_a, rs2_a, rs3_a, f1_a, i18_a, i22_a), (lat_pc, unit_pc, end_of, bad, work_pc) = prog
    (gp, fp, areg, ctrl, loops), (lstart, lreg, lcount) = regs, regs[4]
    cfg, fmt, _lat_table, _macs, tabs, bmm_scale = par
    fam_of, alu_of, vf_of, is_end = tabs[TAB_FAMILY], tabs[TAB_ALU], tabs[TAB_VF], tabs[TAB_LOOPEND]
    (vram, mram, fp_sram, int_sram, (pidx, pages, meta)), (m_acc, v_acc, hm_acc, hv_acc) = mem, accs
    ts, ready, rdone, cv, _unit_of, hbm_tm, _tbuf, _tcount, rr, wr, rtl = tim
    stats, (pc_count, pc_cycles, pcx), frec, need = out
    rowf, xbuf, wbuf, (eb, sb, fb, cnt), logits, taken, sel, wts, tos = scr
    n, maxloop, reg, brk = op.shape[0], cfg[CFG_MAXLOOP], (0, 0, 0, 0), (op, rd_a, end_of, is_end)
    func, taint = cfg[CFG_FUNC] != 0, tos[0]
    gate_at, runaway_at = np.int64(-1), _deadline(ctrl[CTRL_LOOP_DEPTH], lcount, stats[STAT_RETIRED], maxloop)
    while True:
        pc = ctrl[CTRL_PC]
        if (
            pc >= n
            or stats[STAT_WORK] + work_pc[pc] > gate_at
            or stats[STAT_RETIRED] >= runaway_at
            or bad[pc] != 0
            or (not func and (taint[0] | taint[2]) != 0)  # timing-only with data-derived values: TO-DATA, taint
        ):
            st, gate_at, runaway_at = _gate(
                pc, runaway_at, max_work, maxloop, regs, stats, prog, tabs, stopf, frec, tos
            )
            if st != RUN_OK:
                return st
        w, depth, retired, o = work_pc[pc], ctrl[CTRL_LOOP_DEPTH], stats[STAT_RETIRED], op[pc]
        rd, rs1, rs2, rs3, f1, imm = rd_a[pc], rs1_a[pc], rs2_a[pc], rs3_a[pc], f1_a[pc], i18_a[pc]
        fam, alu, npc, st, f = fam_of[o], alu_of[o], pc + 1, RUN_OK, (rd, rs1, rs2, rs3, f1, imm)
        g = (np.int64(gp[rd]), np.int64(gp[rs1]), np.int64(gp[rs2]))  # register values at issue
        aux = lreg[depth - 1] if depth > 0 else np.int64(-1)  # innermost loop register (C_BREAK)
        reg = trace_before(o, rd, aux, regs, tim) if tcap > 0 else reg
        if fam == FAM_SINT:  # dispatch on the table's family; gp0 / f0 stay 0
            gp[rd] = np.uint32(scalar.int_result(alu, g[1], g[2], imm, i22_a[pc])) if rd != 0 else 0
        elif fam == FAM_SFP:
            fp[rd] = 0 if rd == 0 else scalar.fp_result(alu, fp[rs1], fp[rs2]) if func else fp[rd]  # f: data
        elif fam == FAM_LOOP and alu == ALU_END and aux == rd and g[0] > 1:  # next iteration, innermost loop
            gp[rd], lcount[depth - 1], npc = np.uint32(g[0] - 1), retired + 1, lstart[depth - 1] + 1
        elif fam in (FAM_LOOP, FAM_CREG):
            st, npc = control.execute(fam, alu, pc, f, i22_a[pc], depth, gp, areg, ctrl, loops, brk, frec, retired + 1)
        elif fam in (FAM_VBIN, FAM_VUNARY, FAM_SHIFT):  # straight to the unit functions, only the arrays they use
            st = vector.elementwise(fam, alu, vf_of[o], pc, f, gp, fp, ctrl, vram, cfg, frec, rowf)
        elif fam == FAM_REDUCE:
            st = vector.reduce_row(alu, pc, rd, rs1, rs3, gp, fp, ctrl, vram, cfg, frec)
        elif fam == FAM_TOPK:
            st = vector.topk(
                pc, rd, rs1, rs2, rs3, gp, vram, fp_sram, int_sram, cfg, frec, logits, taken, sel, wts, tos
            )
        elif fam in (FAM_MAT, FAM_BMAT, FAM_WO):
            st = matrix.execute(
                fam, alu, pc, f, gp, vram, mram, m_acc, v_acc, hm_acc, hv_acc, cfg, bmm_scale, frec, xbuf, wbuf
            )
        elif fam in (FAM_FPMEM, FAM_INTMEM, FAM_MAPV):
            st = scalar.memory(fam, alu, pc, f, gp, fp, vram, fp_sram, int_sram, cfg, frec)
        elif fam == FAM_DMA:
            st = dma.transfer(
                alu, pc, f, gp, areg, ctrl, vram, mram, pidx, pages, meta, cfg, fmt, frec, need, eb, sb, fb, cnt, stopf
            )
        else:  # a family without a unit branch: loud, never silent
            st = fault(frec, R_IL_OPC, pc, OPND_NONE, o, -1, -1, word[pc], 0)
        if st != RUN_OK:  # nothing was changed (RUN_STOP: the H_* re-executes from its start)
            return st
        unit, lat, before = unit_pc[pc], lat_pc[pc], ts[T_CYCLES]  # account, trace, retire
        if fam == FAM_DMA:
            issue, lat = account_dma(
                pc, o, alu, f, g, aux, unit, areg, ctrl, ts, ready, rdone, cv, rr, wr, hbm_tm, stopf, rtl, pcx
            )
            if lat < 0:  # stopped while listing its HBM blocks: nothing booked or counted yet
                return RUN_STOP
            dma.commit(stats, cnt)
            pc_cycles[pc] += ts[T_CYCLES] - before
        elif ts[T_MODE] == MODE_SERIAL:  # timing.md §3; adds lat_pc[pc] (the host derives those cycles)
            issue = account_serial(ts, unit, lat)
        elif ts[T_MODE] == MODE_OVERLAP:  # timing.md §4; its stall booked on the pc's row
            issue = account_overlap(o, f, g, aux, unit, lat, ts, ready, rdone, cv, rr, wr)
            pc_cycles[pc] += ts[T_CYCLES] - before
            pcx[pc, X_STALL + ts[T_STALL_REASON]] += ts[T_LAST_STALL]
        else:  # rtl (docs/timing.md)
            issue, lat = account_rtl(pc, o, f, g, aux, unit, ts, ready, rdone, cv, rr, wr, rtl, pcx)
            pc_cycles[pc] += ts[T_CYCLES] - before
        if tcap > 0:
            trace_after(pc, o, fam, alu, unit, issue, lat, f, g, aux, reg, stats[STAT_RETIRED], regs, tim, mem)
        stats[STAT_RETIRED] += 1
        stats[STAT_WORK] += w
        pc_count[pc] += 1
        ctrl[CTRL_PC] = npc
