"""Control unit (isa.md §6.6): hardware loops and the global registers (SCALE, STRIDE, V_MASK, a-registers).

One job: the semantics of the ``loop`` and ``creg`` families. LP-GP0 / LP-ZERO / IL-AREG are static
checks (:mod:`.static`); a C_LOOP_START that needs a larger loop stack returns ``RUN_GROW_LOOP``
before it changes anything. During a run the loop records hold *bases* instead of runaway counts (see
:mod:`.loop`): a record that is pushed or whose count is reset gets ``fresh`` (the retired count after this
instruction), so its count reads 0 once the instruction retires.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import ALU_ADDR, ALU_BREAK, ALU_END, ALU_SCALE, ALU_STRIDE, FAM_CREG

from ..faults import R_LP_BREAK, R_LP_NOMATCH
from ..memory.state import CTRL_LOOP_DEPTH, CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK
from .common import fault
from .slots import OPND_NONE, OPND_RD, RUN_GROW_LOOP, RUN_OK


@njit(cache=True)
def set_register(alu, rd, rs1, rs2, gp, areg, ctrl):
    """The ``creg`` family: C_SET_ADDR_REG (a = gp_hi * 2^32 + gp_lo) and SCALE / STRIDE / V_MASK = gp."""
    if alu == ALU_ADDR:
        areg[rd] = (np.uint64(gp[rs1]) << np.uint64(32)) | np.uint64(gp[rs2])
    elif alu == ALU_SCALE:
        ctrl[CTRL_SCALE] = np.int64(gp[rd])
    elif alu == ALU_STRIDE:
        ctrl[CTRL_STRIDE] = np.int64(gp[rd])
    else:
        ctrl[CTRL_V_MASK] = np.int64(gp[rd])


@njit(cache=True)
def _pop(k, depth, lstart, lreg, lcount, ctrl):
    """Remove loop record k (even if not on top); freed slots read 0, as the reference leaves them."""
    for q in range(k, depth - 1):
        lstart[q] = lstart[q + 1]
        lreg[q] = lreg[q + 1]
        lcount[q] = lcount[q + 1]
    lstart[depth - 1] = 0
    lreg[depth - 1] = 0
    lcount[depth - 1] = 0
    ctrl[CTRL_LOOP_DEPTH] = depth - 1


@njit(cache=True)
def loop_end(pc, rd, depth, gp, lstart, lreg, lcount, ctrl, frec, fresh):
    """C_LOOP_END: returns (status, next pc). (The run loop handles the common case, another iteration of the
    innermost loop, itself.)"""
    found = -1
    for k in range(depth - 1, -1, -1):
        if lreg[k] == rd:
            found = k
            break
    if found < 0:
        return fault(frec, R_LP_NOMATCH, pc, OPND_RD, rd, -1, -1, depth, 0), pc
    cnt = np.int64(gp[rd])
    if cnt > 1:
        gp[rd] = np.uint32(cnt - 1)
        lcount[found] = fresh
        return RUN_OK, lstart[found] + 1
    gp[rd] = 0
    _pop(found, depth, lstart, lreg, lcount, ctrl)
    return RUN_OK, pc + 1


@njit(cache=True)
def _break_target(sp, rg, op, rd_a, end_of, is_end):
    """The pc of the first C_LOOP_END on ``rg`` after ``sp`` (precomputed for records this core pushed)."""
    n = op.shape[0]
    if sp >= 0 and sp < n and end_of[sp] >= 0 and rd_a[sp] == rg:
        return end_of[sp]
    for q in range(sp + 1, n):  # a record not pushed by the C_LOOP_START at sp: scan program order
        if is_end[op[q]] != 0 and rd_a[q] == rg:
            return q
    return np.int64(-1)


@njit(cache=True)
def loop_control(alu, pc, rd, imm22, depth, gp, lstart, lreg, lcount, ctrl, op, rd_a, end_of, is_end, frec, fresh):
    """C_LOOP_START / C_BREAK (C_LOOP_END: :func:`loop_end`): returns (status, next pc). ``end_of`` = the
    precomputed C_BREAK targets, ``is_end`` = the C_LOOP_END flag per opcode."""
    if alu != ALU_BREAK:  # C_LOOP_START
        if depth >= lstart.shape[0]:
            return RUN_GROW_LOOP, pc
        gp[rd] = np.uint32(imm22)
        lstart[depth] = pc
        lreg[depth] = rd
        lcount[depth] = fresh
        ctrl[CTRL_LOOP_DEPTH] = depth + 1
        return RUN_OK, pc + 1
    if depth == 0:
        return fault(frec, R_LP_BREAK, pc, OPND_NONE, -1, -1, -1, -1, 0), pc
    sp, rg = lstart[depth - 1], lreg[depth - 1]
    tgt = _break_target(sp, rg, op, rd_a, end_of, is_end)
    if tgt < 0:
        return fault(frec, R_LP_BREAK, pc, OPND_NONE, rg, -1, -1, sp, depth), pc
    gp[rg] = 0
    _pop(depth - 1, depth, lstart, lreg, lcount, ctrl)
    return RUN_OK, tgt + 1


@njit(cache=True)
def execute(fam, alu, pc, f, imm22, depth, gp, areg, ctrl, loops, brk, frec, fresh):
    """The control unit's instructions (families loop, creg): (status, next pc). ``loops`` = (start, reg, base)
    arrays of the loop stack; ``brk`` = (opcodes, rd fields, C_BREAK targets, C_LOOP_END flag per opcode);
    ``fresh`` = the base of a record pushed or reset now."""
    rd, rs1, rs2 = f[0], f[1], f[2]
    lstart, lreg, lcount = loops
    if fam == FAM_CREG:
        set_register(alu, rd, rs1, rs2, gp, areg, ctrl)
        return RUN_OK, pc + 1
    if alu == ALU_END:
        return loop_end(pc, rd, depth, gp, lstart, lreg, lcount, ctrl, frec, fresh)
    op, rd_a, end_of, is_end = brk
    return loop_control(
        alu, pc, rd, imm22, depth, gp, lstart, lreg, lcount, ctrl, op, rd_a, end_of, is_end, frec, fresh
    )
