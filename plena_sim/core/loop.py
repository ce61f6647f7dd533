"""The run loop: fetch -> static fault -> dispatch -> account -> trace -> retire (isa.md §8 order).

One job: drive the unit files over the decoded program. The state travels in a few typed tuples (built by
:mod:`.host` from the :class:`~plena_sim.state.MachineState` and timing state); dispatch is on the
table's family / operation codes (:mod:`.static`), never on opcode numbers.

Tuples: ``prog`` = (op, word, words) with words the :data:`.static.WORD_FIELDS` arrays; ``regs`` = (gp, fp,
areg, ctrl, (loop start, reg, count)); ``mem`` = (vram, mram, fp_sram, int_sram, (page_index, pages, meta));
``accs`` = (m, v, hm, hv accumulators); ``par`` = (cfg, fmt, latency table, macs, opcode tables, BMM_SCALE);
``scr`` = scratch (rowf, xbuf, wbuf, (ebuf, sbuf, fbuf, counts), logits, taken, sel, wts); ``out`` = (stats,
by_opcode, fault record, pages needed); ``tim`` = (ts, ready, rdone, cv, unit_of, hbm timing tuple, trace
buffer, trace count, read set, write set).
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
from . import control, dma, matrix, scalar, vector
from .account import account, trace, trace_reg_before
from .common import fault
from .slots import (
    CFG_MAXLOOP,
    OPND_NONE,
    RUN_DONE,
    RUN_OK,
    STAT_CYCLES,
    STAT_MACS,
    STAT_RETIRED,
)
from .static import (
    TAB_ALU,
    TAB_FAMILY,
    TAB_LOOPEND,
    TAB_VALID,
    TAB_VF,
    per_pc,
    static_fault,
)


@njit(cache=True)
def _runaway(pc, depth, loops, maxloop, frec):
    """The runaway guard: every active record counts this instruction (rolled back if it does not retire)."""
    lstart, lreg, lcount = loops
    for k in range(depth):
        lcount[k] += 1
    for k in range(depth):
        if lcount[k] > maxloop:
            c = lcount[k]
            _rollback(depth, lcount)
            return fault(frec, R_LP_RUNAWAY, pc, OPND_NONE, c, k, maxloop, lreg[k], lstart[k])
    return RUN_OK


@njit(cache=True)
def _rollback(depth, lcount):
    for k in range(depth):
        lcount[k] -= 1


@njit(cache=True, error_model="numpy", inline="always")
def execute(pc, o, prog, pre, regs, mem, accs, par, scr, out):
    """Execute the instruction at ``pc``: returns (status, next pc); changes nothing unless it succeeds."""
    words, end_of = prog[2], pre[1]
    rd, rs1, rs2, rs3, f1, imm18, imm22 = (words[0][pc], words[1][pc], words[2][pc], words[3][pc], words[4][pc],
                                           words[5][pc], words[6][pc])
    gp, fp, areg, ctrl, loops = regs
    cfg, fmt, tabs = par[0], par[1], par[4]
    frec = out[2]
    fam, alu = tabs[TAB_FAMILY][o], tabs[TAB_ALU][o]
    st = RUN_OK
    if fam == FAM_SINT:
        if rd != 0:
            gp[rd] = np.uint32(scalar.int_result(alu, np.int64(gp[rs1]), np.int64(gp[rs2]), imm18, imm22))
    elif fam == FAM_LOOP:
        depth = ctrl[CTRL_LOOP_DEPTH]
        if alu == ALU_END:
            return control.loop_end(pc, rd, depth, gp, loops[0], loops[1], loops[2], ctrl, frec)
        return control.loop_control(alu, pc, rd, imm22, depth, gp, loops, ctrl,
                                    (prog[0], words[0], end_of, tabs[TAB_LOOPEND]), frec)
    elif fam == FAM_INTMEM:
        st = scalar.int_memory(alu, pc, rd, rs1, imm18, gp, mem[3], cfg, frec)
    elif fam == FAM_MAT or fam == FAM_BMAT:
        st = matrix.product(alu, pc, rd, rs1, rs2, gp, mem[0], mem[1], accs, cfg, par[5], frec, scr[1], scr[2])
    elif fam == FAM_WO:
        st = matrix.writeout(alu, pc, rd, rs1, imm18, gp, mem[0], accs, cfg, frec)
    elif fam == FAM_REDUCE:
        st = vector.reduce_row(alu, pc, rd, rs1, rs3, gp, fp, ctrl, mem[0], cfg, frec)
    elif fam == FAM_TOPK:
        st = vector.topk(pc, rd, rs1, rs2, rs3, gp, mem[0], mem[2], mem[3], cfg, frec, scr[4], scr[5], scr[6],
                         scr[7])
    elif fam == FAM_SFP:
        scalar.fp_arith(alu, rd, rs1, rs2, fp)
    elif fam == FAM_FPMEM:
        st = scalar.fp_memory(alu, pc, rd, rs1, imm18, gp, fp, mem[2], cfg, frec)
    elif fam == FAM_MAPV:
        st = scalar.map_v_fp(pc, rd, rs1, imm18, gp, mem[0], mem[2], cfg, frec)
    elif fam == FAM_DMA:
        st = dma.transfer(alu, pc, rd, rs1, rs2, rs3, f1, gp, areg, ctrl, mem[0], mem[1], mem[4], cfg, fmt,
                          out[0], frec, out[3], scr[3])
    elif fam == FAM_CREG:
        control.set_register(alu, rd, rs1, rs2, gp, areg, ctrl)
    elif fam == FAM_VBIN or fam == FAM_VUNARY or fam == FAM_SHIFT:
        st = vector.elementwise(fam, alu, tabs[TAB_VF][o], pc, rd, rs1, rs2, rs3, f1, gp, fp, ctrl, mem[0], cfg,
                                frec, scr[0])
    else:                                          # a family without a unit branch: loud, never silent
        st = fault(frec, R_IL_OPC, pc, OPND_NONE, o, -1, -1, prog[1][pc], 0)
    return st, pc + 1


@njit(cache=True, error_model="numpy")
def run(prog, regs, mem, accs, par, tim, out, scr, max_instr, tcap):
    """Run from ``ctrl[CTRL_PC]`` until the PC leaves the program or a status (fault, grow) is returned."""
    op, words = prog[0], prog[2]
    gp, fp, areg, ctrl, loops = regs
    cfg, tabs = par[0], par[4]
    stats, by_opcode, frec = out[0], out[1], out[2]
    pre = per_pc(op, words, tabs, par[2], cfg, frec)
    lat_pc, bad = pre[0], pre[2]
    n = op.shape[0]
    tracing = tcap > 0
    while True:
        pc = ctrl[CTRL_PC]
        if pc >= n:
            return RUN_DONE
        if stats[STAT_RETIRED] == max_instr:
            return fault(frec, R_BUDGET, pc, OPND_NONE, stats[STAT_RETIRED], -1, max_instr, 0, 0)
        depth = ctrl[CTRL_LOOP_DEPTH]
        st = _runaway(pc, depth, loops, cfg[CFG_MAXLOOP], frec)
        if st != RUN_OK:
            return st
        o = op[pc]
        if tabs[TAB_VALID][o] == 0 or bad[pc] != 0:       # not an instruction, or a static check fails
            _rollback(depth, loops[2])
            if tabs[TAB_VALID][o] == 0:
                return fault(frec, R_IL_OPC, pc, OPND_NONE, o, -1, -1, prog[1][pc], 0)
            return static_fault(frec, pc, o, words, tabs, cfg)
        g = (np.int64(gp[words[0][pc]]), np.int64(gp[words[1][pc]]), np.int64(gp[words[2][pc]]))
        aux = loops[1][depth - 1] if depth > 0 else np.int64(-1)     # the innermost loop register
        reg = trace_reg_before(tracing, o, words[0][pc], aux, gp, fp, areg, ctrl, tim)
        st, npc = execute(pc, o, prog, pre, regs, mem, accs, par, scr, out)
        if st != RUN_OK:
            _rollback(depth, loops[2])
            return st
        issue, lat = account(pc, o, words, g, aux, lat_pc[pc], tabs, areg, ctrl, tim)
        if tracing:
            trace(pc, o, words, g, aux, issue, lat, reg, stats[STAT_RETIRED], tabs, regs, tim)
        stats[STAT_RETIRED] += 1
        stats[STAT_CYCLES] += lat
        stats[STAT_MACS] += par[3][o]
        by_opcode[o] += 1
        ctrl[CTRL_PC] = npc
