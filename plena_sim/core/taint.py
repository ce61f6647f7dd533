"""Timing-only bookkeeping (issue 30): data-derived integers and the MoE routing policy of V_TOPK.

One job: in a timing-only run the datapath is skipped, so an integer that comes from data (an INT SRAM word
V_TOPK wrote, a register loaded from it, anything computed from those) is unknown. ``taint[0]`` is the bitmask of
the gp registers holding such a value, ``itaint[w]`` flags INT SRAM word ``w``; an instruction that uses one as an
address, count or control value ends in TO-DATA (:func:`check_reads`); the integer side moves the flags along
(:func:`propagate`). With a routing policy (:mod:`plena_sim.routing`, the array ``route``) V_TOPK writes the
policy's experts instead (:func:`route_topk`), plain integers. The reference interpreter implements the same rules.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import ALU_ADDI, ALU_LOAD, ALU_LUI, ALU_START, FAM_INTMEM, FAM_LOOP, FAM_SINT

from ..faults import R_TO_DATA
from .common import fault
from .slots import RUN_OK
from .static import TAB_ALU, TAB_FAMILY, TAB_GPCHECKED

#: routing array slots (plena_sim.routing.Routing.to_array)
_R_CODE, _R_SEED, _R_ROWS, _R_COLS, _R_HEADER = 0, 1, 2, 3, 4
_ROUTE_NONE, _ROUTE_UNIFORM, _ROUTE_ROUND_ROBIN = 0, 1, 2
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True)
def check_reads(pc, o, words, gp, tabs, taint, frec):
    """TO-DATA if a gp register the instruction at ``pc`` (opcode ``o``; ``words`` the per-pc field arrays, rd,
    rs1, rs2, rs3 first) checks (``TAB_GPCHECKED``, in that field order) holds a data-derived value; the record
    names the field, the value and (X6) the register. Called only in a timing-only run (taint is 0 otherwise)."""
    mask, checked = taint[0], tabs[TAB_GPCHECKED][o]
    for k in range(4):
        r = words[k][pc]
        if (checked >> k) & 1 and (mask >> r) & 1:
            return fault(frec, R_TO_DATA, pc, k, np.int64(gp[r]), -1, -1, r, 0)
    return RUN_OK


@njit(cache=True)
def propagate(pc, o, words, gp, tabs, taint, itaint):
    """Before the instruction at ``pc`` (opcode ``o``) executes, once :func:`check_reads` passed: the sint
    destination becomes data-derived iff a source is (ADDI reads rs1, ADD/SUB/MUL rs1 and rs2, LUI none: the
    table's operands), S_LD_INT takes its word's flag, S_ST_INT gives its word the stored register's flag,
    C_LOOP_START's counter is clean. Exact before execution: none of these can fault after this point except an
    INT SRAM access out of bounds (BD-INTS), which changes nothing here either. Only reached while something is
    data-derived (``taint[0]`` or ``taint[2]``), through the run loop's gate."""
    fam, alu, rd, mask = tabs[TAB_FAMILY][o], tabs[TAB_ALU][o], words[0][pc], taint[0]
    if fam == FAM_SINT:
        src = np.int64(0)
        if alu != ALU_LUI:
            src |= (mask >> words[1][pc]) & 1
        if alu != ALU_LUI and alu != ALU_ADDI:  # rs2 of ADDI is the immediate's field
            src |= (mask >> words[2][pc]) & 1
        _set(taint, rd, src)
    elif fam == FAM_INTMEM:
        addr = np.int64(gp[words[1][pc]]) + words[5][pc]
        if addr < itaint.shape[0]:
            if alu == ALU_LOAD:
                _set(taint, rd, itaint[addr])
            else:
                itaint[addr] = (mask >> rd) & 1
    elif fam == FAM_LOOP and alu == ALU_START:
        _set(taint, rd, 0)


@njit(cache=True)
def _set(taint, r, bit):
    if r != 0:
        taint[0] = (taint[0] & ~(np.int64(1) << r)) | (np.int64(bit) << r)


@njit(cache=True)
def _mix(x):
    """SplitMix64: (next state, output), uint64 arithmetic wrapping like plena_sim.routing.splitmix64."""
    x = x + _GOLDEN
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x, z ^ (z >> np.uint64(31))


@njit(cache=True)
def route_topk(idst, E, K, int_sram, itaint, route, taint, sel):
    """V_TOPK of a timing-only run, after its checks: the policy's K experts for call ``taint[1]`` into INT SRAM
    (clean words; ``sel`` scratch of >= E entries), or without a policy the K words flagged data-derived."""
    code = route[_R_CODE]
    if code == _ROUTE_NONE:
        for k in range(K):
            itaint[idst + k] = 1
        taint[2] = 1  # some INT SRAM word holds data now: the run loop keeps its bookkeeping on
        return
    j = taint[1]
    if code == _ROUTE_ROUND_ROBIN:
        for k in range(K):
            sel[k] = (j * K + k) % E
    elif code == _ROUTE_UNIFORM:
        for e in range(E):
            sel[e] = e
        x = np.uint64(route[_R_SEED]) * _GOLDEN + np.uint64(j)
        for k in range(K):
            x, r = _mix(x)
            i = k + np.int64(r % np.uint64(E - k))
            sel[k], sel[i] = sel[i], sel[k]
    else:
        row = _R_HEADER + (j % route[_R_ROWS]) * route[_R_COLS]
        for k in range(K):
            sel[k] = route[row + k]
    for k in range(K):
        int_sram[idst + k] = np.uint32(sel[k])
        itaint[idst + k] = 0
    taint[1] = j + 1
