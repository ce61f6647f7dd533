"""Vector unit (isa.md §6.1-§6.2): element-wise ops, V_SHFT_V, reductions, V_TOPK.

One job: the semantics of the ``vbin``, ``vunary``, ``shift``, ``reduce`` and ``topk`` families on bf16
VRAM rows (f32 arithmetic, one bf16 rounding on write; all reads before any write). Static checks
(IL-FREG, IL-TOPK) are made before dispatch (:mod:`.static`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from isa.encoding import (
    ALU_ADD,
    ALU_EXP,
    ALU_MAX,
    ALU_MIN,
    ALU_MUL,
    ALU_SUB,
    ALU_SUM,
    FAM_SHIFT,
    FAM_VBIN,
)
from isa.table import TOPK_POLICIES

from ..faults import R_AL_VROW, R_BD_FPS, R_BD_INTS, R_BD_VROW
from ..memory.state import CTRL_V_MASK
from ..numerics.formats import bf16_bits_to_f32, f32_to_bf16_bits
from .common import exp_clamped, fault, lane_on, nan32, nan64
from .slots import (
    CFG_FPS,
    CFG_FUNC,
    CFG_H,
    CFG_INTS,
    CFG_V,
    CFG_VROWS,
    OPND_RD,
    OPND_RS1,
    OPND_RS2,
    RUN_OK,
)
from .taint import route_topk

#: V_TOPK policies (isa.md §6.2): experts E and selections K per policy
TOPK_EXPERTS = tuple(e for e, _k in TOPK_POLICIES)
TOPK_SELECT = tuple(k for _e, k in TOPK_POLICIES)


@njit(cache=True)
def _row_checks(pc, d, a, b, vv, V, nrows, frec):
    """AL then BD of the row operands, in assembly order rd, rs1, (rs2 when ``vv``)."""
    if d % V != 0:
        return fault(frec, R_AL_VROW, pc, OPND_RD, d, -1, V, d % V, 0)
    if a % V != 0:
        return fault(frec, R_AL_VROW, pc, OPND_RS1, a, -1, V, a % V, 0)
    if vv and b % V != 0:
        return fault(frec, R_AL_VROW, pc, OPND_RS2, b, -1, V, b % V, 0)
    if d // V >= nrows:
        return fault(frec, R_BD_VROW, pc, OPND_RD, d // V, 0, nrows, d, 0)
    if a // V >= nrows:
        return fault(frec, R_BD_VROW, pc, OPND_RS1, a // V, 0, nrows, a, 0)
    if vv and b // V >= nrows:
        return fault(frec, R_BD_VROW, pc, OPND_RS2, b // V, 0, nrows, b, 0)
    return RUN_OK


@njit(cache=True, error_model="numpy", inline="always")
def _lane(alu, x, y, rorder):
    """One lane of an element-wise op: ``x`` the rs1 lane, ``y`` the rs2 lane or the f operand."""
    if alu == ALU_ADD:
        return nan32(x, y, x + y)
    if alu == ALU_SUB:
        if rorder == 0:
            return nan32(x, y, x - y)
        return nan32(y, x, y - x)
    if alu == ALU_MUL:
        return nan32(x, y, x * y)
    if alu in (ALU_MAX, ALU_MIN):
        if x != x:
            return x
        if y != y:
            return y
        if (alu == ALU_MAX and y > x) or (alu == ALU_MIN and y < x):
            return y
        return x
    if alu == ALU_EXP:
        return exp_clamped(x)
    return np.float32(1.0) / x  # ALU_RECI


@njit(cache=True, error_model="numpy")
def _vv_row(alu, vram, ra, rb, rowf, V):
    """rowf = VROW ra (op) VROW rb; one loop per operation (no per-lane dispatch)."""
    if alu == ALU_ADD:
        for j in range(V):
            x, y = bf16_bits_to_f32(vram[ra, j]), bf16_bits_to_f32(vram[rb, j])
            rowf[j] = nan32(x, y, x + y)
    elif alu == ALU_MUL:
        for j in range(V):
            x, y = bf16_bits_to_f32(vram[ra, j]), bf16_bits_to_f32(vram[rb, j])
            rowf[j] = nan32(x, y, x * y)
    else:
        for j in range(V):
            rowf[j] = _lane(alu, bf16_bits_to_f32(vram[ra, j]), bf16_bits_to_f32(vram[rb, j]), 0)


@njit(cache=True, error_model="numpy")
def _vf_row(alu, vram, ra, f, rorder, rowf, V):
    """rowf = VROW ra (op) f, or (unary op) VROW ra; the common operations get their own loop."""
    if alu == ALU_ADD:
        for j in range(V):
            x = bf16_bits_to_f32(vram[ra, j])
            rowf[j] = nan32(x, f, x + f)
    elif alu == ALU_MUL:
        for j in range(V):
            x = bf16_bits_to_f32(vram[ra, j])
            rowf[j] = nan32(x, f, x * f)
    else:
        for j in range(V):
            rowf[j] = _lane(alu, bf16_bits_to_f32(vram[ra, j]), f, rorder)


@njit(cache=True, error_model="numpy")
def elementwise(fam, alu, vf, pc, f, gp, fp, ctrl, vram, cfg, frec, rowf):
    """The ``vbin`` (VV / VF forms), ``vunary`` and ``shift`` families. ``f`` = the (rd, rs1, rs2, rs3, funct1,
    imm) fields."""
    rd, rs1, rs2, rs3, f1, _imm = f
    V = cfg[CFG_V]
    vv = fam == FAM_VBIN and vf == 0
    d = np.int64(gp[rd])
    a = np.int64(gp[rs1])
    b = np.int64(gp[rs2])
    st = _row_checks(pc, d, a, b, vv, V, cfg[CFG_VROWS], frec)
    if st != RUN_OK or cfg[CFG_FUNC] == 0:  # timing-only: checks only
        return st
    ra, rb, rdst = a // V, b // V, d // V
    if fam == FAM_SHIFT:  # shift amount gp[rs2], unchecked; never masked
        for j in range(V):
            rowf[j] = bf16_bits_to_f32(vram[ra, j - b]) if j >= b else np.float32(0.0)
    else:
        if vv:
            _vv_row(alu, vram, ra, rb, rowf, V)
        else:  # VF (funct1 is an operand of V_SUB_VF only: the reversed order) and unary forms
            _vf_row(
                alu, vram, ra, bf16_bits_to_f32(fp[rs2]) if vf != 0 else np.float32(0.0), f1 if vf != 0 else 0, rowf, V
            )
        if rs3 != 0:
            vmask = ctrl[CTRL_V_MASK]
            for j in range(V):
                if not lane_on(vmask, j, cfg[CFG_H]):
                    rowf[j] = bf16_bits_to_f32(vram[ra, j])
    for j in range(V):
        vram[rdst, j] = f32_to_bf16_bits(rowf[j])
    return RUN_OK


@njit(cache=True, error_model="numpy")
def _row_sum(vram, ra, V, H, masked, vmask):
    s = 0.0
    for j in range(V):
        if masked and not lane_on(vmask, j, H):
            continue
        y = np.float64(bf16_bits_to_f32(vram[ra, j]))
        s = nan64(s, y, s + y)
    return np.float32(s)


@njit(cache=True)
def _row_max(vram, ra, V, H, masked, vmask, best_bits):
    best = bf16_bits_to_f32(best_bits)
    for j in range(V):
        if masked and not lane_on(vmask, j, H):
            continue
        bits = vram[ra, j]
        x = bf16_bits_to_f32(bits)
        if x != x:
            continue
        if best != best or x > best:
            best = x
            best_bits = bits
    return best_bits


@njit(cache=True, error_model="numpy")
def reduce_row(alu, pc, rd, rs1, rs3, gp, fp, ctrl, vram, cfg, frec):
    """V_RED_SUM / V_RED_MAX (a no-op when rd = 0: no VRAM access, no AL/BD checks)."""
    if rd == 0:
        return RUN_OK
    V = cfg[CFG_V]
    a = np.int64(gp[rs1])
    if a % V != 0:
        return fault(frec, R_AL_VROW, pc, OPND_RS1, a, -1, V, a % V, 0)
    if a // V >= cfg[CFG_VROWS]:
        return fault(frec, R_BD_VROW, pc, OPND_RS1, a // V, 0, cfg[CFG_VROWS], a, 0)
    if cfg[CFG_FUNC] == 0:
        return RUN_OK
    masked = rs3 != 0
    vmask = ctrl[CTRL_V_MASK]
    if alu == ALU_SUM:
        S = _row_sum(vram, a // V, V, cfg[CFG_H], masked, vmask)
        fd = bf16_bits_to_f32(fp[rd])
        fp[rd] = f32_to_bf16_bits(nan32(fd, S, fd + S))
    else:
        fp[rd] = _row_max(vram, a // V, V, cfg[CFG_H], masked, vmask, fp[rd])
    return RUN_OK


@njit(cache=True)
def _topk_checks(pc, fdst, a, idst, nrow, K, cfg, frec):
    V = cfg[CFG_V]
    if a % V != 0:
        return fault(frec, R_AL_VROW, pc, OPND_RS1, a, -1, V, a % V, 0)
    if fdst + K > cfg[CFG_FPS]:
        return fault(frec, R_BD_FPS, pc, OPND_RD, fdst, -1, cfg[CFG_FPS], K, 0)
    r0 = a // V
    for k in range(nrow):
        if r0 + k >= cfg[CFG_VROWS]:
            return fault(frec, R_BD_VROW, pc, OPND_RS1, r0 + k, k, cfg[CFG_VROWS], a + k * V, 0)
    if idst + K > cfg[CFG_INTS]:
        return fault(frec, R_BD_INTS, pc, OPND_RS2, idst, -1, cfg[CFG_INTS], K, 0)
    return RUN_OK


@njit(cache=True)
def _rank(logits, taken, sel, E, K):
    """The top K of E logits by value, ties to the lower index, into ``sel``."""
    for e in range(E):
        taken[e] = False
    for i in range(K):
        best = -1
        for e in range(E):
            if taken[e]:
                continue
            if best < 0 or logits[e] > logits[best]:
                best = e
        taken[best] = True
        sel[i] = best


@njit(cache=True, error_model="numpy")
def topk(pc, rd, rs1, rs2, rs3, gp, vram, fp_sram, int_sram, cfg, frec, logits, taken, sel, wts, tos):
    """V_TOPK (isa.md §6.2): softmax weights of the top K of E logits -> FP SRAM, indices -> INT SRAM. ``tos`` =
    the timing-only state (taint, INT SRAM flags, routing array: :func:`.taint.route_topk`)."""
    V = cfg[CFG_V]
    E = TOPK_EXPERTS[rs3]
    K = TOPK_SELECT[rs3]
    fdst, a, idst = np.int64(gp[rd]), np.int64(gp[rs1]), np.int64(gp[rs2])
    st = _topk_checks(pc, fdst, a, idst, (E + V - 1) // V, K, cfg, frec)
    if st != RUN_OK:
        return st
    if cfg[CFG_FUNC] == 0:
        route_topk(idst, E, K, int_sram, tos[1], tos[2], tos[0], sel)
        return RUN_OK
    r0 = a // V
    for e in range(E):
        x = bf16_bits_to_f32(vram[r0 + e // V, e % V])
        logits[e] = np.float32(-np.inf) if x != x else x
    _rank(logits, taken, sel, E, K)
    xmax = logits[sel[0]]
    den = np.float32(0.0)
    for i in range(K):
        e_i = np.float32(math.exp(np.float64(np.float32(logits[sel[i]] - xmax))))
        wts[i] = e_i
        den = np.float32(den + e_i)
    ok = (den == den) and den > np.float32(0.0) and den != np.float32(np.inf)
    for i in range(K):
        w = np.float32(wts[i] / den) if ok else np.float32(0.0)
        fp_sram[fdst + i] = f32_to_bf16_bits(w)
        int_sram[idst + i] = np.uint32(sel[i])
    return RUN_OK
