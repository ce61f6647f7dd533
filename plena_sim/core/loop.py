"""The run loop: fetch -> static fault -> dispatch -> account -> trace -> retire (isa.md §8 order).

One job: drive the unit files over the decoded program. The state arrives in a few typed tuples (built by
:mod:`.host` from the :class:`~plena_sim.state.MachineState` and timing state) and is unpacked once, before
the loop: a call that passes a tuple of arrays pays a reference count per member on every call, so each unit
gets only the plain arrays it uses (docs/performance.md). Dispatch is on the table's family / operation codes
(:mod:`.static`), never on opcode numbers.

Tuples: ``prog`` = (op, word, words, facts) with words the :data:`.static.WORD_FIELDS` arrays and facts the
per-pc (latency, unit, C_BREAK target, bad-word flag) of :func:`.static.per_pc`; ``regs`` = (gp, fp,
areg, ctrl, (loop start, reg, count)); ``mem`` = (vram, mram, fp_sram, int_sram, (page_index, pages, meta));
``accs`` = (m, v, hm, hv accumulators); ``par`` = (cfg, fmt, latency table, macs, opcode tables, BMM_SCALE);
``tim`` = (ts, ready, rdone, cv, unit_of, HBM timing tuple, trace buffer, trace count, read set, write set);
``out`` = (stats, (pc_count, pc_cycles), fault record, pages needed): the per-pc profile, instructions retired and
the cycles they added (``ts[T_CYCLES]`` after the accounting minus before); serial fixed-latency instructions add
exactly their ``lat_pc`` each, so the host derives those cycles from the counts and the loop adds only the H_* and
overlap ones (the host also derives the counts per opcode and the matrix MACs); ``scr`` = scratch (rowf, xbuf,
wbuf, (ebuf, sbuf, fbuf, counts), logits, taken, sel, wts).
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

from ..faults import R_BUDGET, R_IL_OPC, R_LP_RUNAWAY
from ..state import CTRL_LOOP_DEPTH, CTRL_PC
from ..timing import MODE_SERIAL, T_BUSY, T_CYCLES, T_LAST_ISSUE, T_MODE
from . import control, dma, matrix, scalar, vector
from .account import account_dma, account_overlap, trace_after, trace_before
from .common import fault
from .slots import CFG_MAXLOOP, OPND_NONE, RUN_DONE, RUN_OK, RUN_STATIC, STAT_RETIRED
from .static import TAB_ALU, TAB_FAMILY, TAB_LOOPEND, TAB_VF


@njit(cache=True)
def _stop(pc, depth, over, lstart, lreg, lcount, maxloop, frec):
    """The instruction at ``pc`` does not run: the runaway increments are rolled back and the status is
    LP-RUNAWAY of the first loop record over its budget, else RUN_STATIC (the word is not an instruction or fails
    a static check: the host writes that fault record)."""
    for k in range(depth):
        if over and lcount[k] > maxloop:
            c = lcount[k]
            rollback(depth, lcount)
            return fault(frec, R_LP_RUNAWAY, pc, OPND_NONE, c, k, maxloop, lreg[k], lstart[k])
    rollback(depth, lcount)
    return RUN_STATIC


@njit(cache=True)
def rollback(depth, lcount):
    """Undo the runaway increments of an instruction that does not retire."""
    for k in range(depth):
        lcount[k] -= 1


@njit(cache=True)
def _leave(pc, n, max_instr, frec):
    """The status when the loop stops at the top: done (the PC left the program) or the budget fault."""
    if pc >= n:
        return RUN_DONE
    return fault(frec, R_BUDGET, pc, OPND_NONE, max_instr, -1, max_instr, 0, 0)


@njit(cache=True, error_model="numpy")
def run(prog, regs, mem, accs, par, tim, out, scr, max_instr, tcap):
    """Run from ``ctrl[CTRL_PC]`` until the PC leaves the program or a status (fault, grow) is returned."""
    op, word, (rd_a, rs1_a, rs2_a, rs3_a, f1_a, i18_a, i22_a), (lat_pc, unit_pc, end_of, bad) = prog
    gp, fp, areg, ctrl, loops = regs
    lstart, lreg, lcount = loops
    cfg, fmt, _lat_table, _macs, tabs, bmm_scale = par
    fam_of, alu_of, vf_of, is_end = tabs[TAB_FAMILY], tabs[TAB_ALU], tabs[TAB_VF], tabs[TAB_LOOPEND]
    vram, mram, fp_sram, int_sram, (pidx, pages, meta) = mem
    m_acc, v_acc, hm_acc, hv_acc = accs
    ts, ready, rdone, cv, _unit_of, hbm_tm, _tbuf, _tcount, rr, wr = tim
    stats, (pc_count, pc_cycles), frec, need = out
    rowf, xbuf, wbuf, (eb, sb, fb, cnt), logits, taken, sel, wts = scr
    n, maxloop, reg = op.shape[0], cfg[CFG_MAXLOOP], (0, 0, 0, 0)
    brk = (op, rd_a, end_of, is_end)
    while True:
        pc = ctrl[CTRL_PC]
        if pc >= n or stats[STAT_RETIRED] == max_instr:  # the PC left the program, or the budget is spent
            return _leave(pc, n, max_instr, frec)
        depth, over = ctrl[CTRL_LOOP_DEPTH], False
        for k in range(depth):  # the runaway guard counts this instruction in every record
            lcount[k] += 1
            over = over or lcount[k] > maxloop
        o = op[pc]
        if over or bad[pc] != 0:
            return _stop(pc, depth, over, lstart, lreg, lcount, maxloop, frec)
        rd, rs1, rs2, rs3, f1, imm = rd_a[pc], rs1_a[pc], rs2_a[pc], rs3_a[pc], f1_a[pc], i18_a[pc]
        fam, alu, npc, st, f = fam_of[o], alu_of[o], pc + 1, RUN_OK, (rd, rs1, rs2, rs3, f1, imm)
        g = (np.int64(gp[rd]), np.int64(gp[rs1]), np.int64(gp[rs2]))  # register values at issue
        aux = lreg[depth - 1] if depth > 0 else np.int64(-1)  # innermost loop register (C_BREAK)
        if tcap > 0:
            reg = trace_before(o, rd, aux, regs, tim)
        # ---------------------------------------------------------------- dispatch on the table's family
        if fam == FAM_SINT:  # gp0 / f0 stay 0
            gp[rd] = np.uint32(scalar.int_result(alu, g[1], g[2], imm, i22_a[pc])) if rd != 0 else 0
        elif fam == FAM_SFP:
            fp[rd] = scalar.fp_result(alu, fp[rs1], fp[rs2]) if rd != 0 else 0
        elif fam == FAM_LOOP and alu == ALU_END and aux == rd and g[0] > 1:  # next iteration, innermost loop
            gp[rd], lcount[depth - 1], npc = np.uint32(g[0] - 1), 0, lstart[depth - 1] + 1
        elif fam in (FAM_LOOP, FAM_CREG):
            st, npc = control.execute(fam, alu, pc, f, i22_a[pc], depth, gp, areg, ctrl, loops, brk, frec)
        elif fam in (FAM_VBIN, FAM_VUNARY, FAM_SHIFT):
            st = vector.elementwise(fam, alu, vf_of[o], pc, f, gp, fp, ctrl, vram, cfg, frec, rowf)
        elif fam in (FAM_REDUCE, FAM_TOPK):  # straight to the unit function, with only the arrays it reads
            st = (
                vector.reduce_row(alu, pc, rd, rs1, rs3, gp, fp, ctrl, vram, cfg, frec)
                if fam == FAM_REDUCE
                else vector.topk(pc, rd, rs1, rs2, rs3, gp, vram, fp_sram, int_sram, cfg, frec, logits, taken, sel, wts)
            )
        elif fam in (FAM_MAT, FAM_BMAT, FAM_WO):
            st = matrix.execute(
                fam, alu, pc, f, gp, vram, mram, m_acc, v_acc, hm_acc, hv_acc, cfg, bmm_scale, frec, xbuf, wbuf
            )
        elif fam in (FAM_FPMEM, FAM_INTMEM, FAM_MAPV):
            st = scalar.memory(fam, alu, pc, f, gp, fp, vram, fp_sram, int_sram, cfg, frec)
        elif fam == FAM_DMA:
            st = dma.transfer(
                alu, pc, f, gp, areg, ctrl, vram, mram, pidx, pages, meta, cfg, fmt, stats, frec, need, eb, sb, fb, cnt
            )
        else:  # a family without a unit branch: loud, never silent
            st = fault(frec, R_IL_OPC, pc, OPND_NONE, o, -1, -1, word[pc], 0)
        if st != RUN_OK:
            rollback(depth, lcount)  # nothing was changed; undo the runaway increments
            return st
        # ---------------------------------------------------------------- account, trace, retire
        unit, lat, before = unit_pc[pc], lat_pc[pc], ts[T_CYCLES]
        if fam == FAM_DMA:
            issue, lat = account_dma(o, alu, f, g, aux, unit, areg, ctrl, ts, ready, rdone, cv, rr, wr, hbm_tm)
            pc_cycles[pc] += ts[T_CYCLES] - before
        elif ts[T_MODE] == MODE_SERIAL:  # timing.md §3 (account_serial, written out); adds lat_pc[pc] (host)
            ts[T_CYCLES], ts[T_LAST_ISSUE] = before + lat, before
            issue = before
            if unit >= 0:
                ts[T_BUSY + unit] += lat
        else:
            issue = account_overlap(o, f, g, aux, unit, lat, ts, ready, rdone, cv, rr, wr)
            pc_cycles[pc] += ts[T_CYCLES] - before
        if tcap > 0:
            trace_after(pc, o, fam, alu, unit, issue, lat, f, g, aux, reg, stats[STAT_RETIRED], regs, tim)
        stats[STAT_RETIRED] += 1
        pc_count[pc] += 1
        ctrl[CTRL_PC] = npc
