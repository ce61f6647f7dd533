"""Scalar unit (isa.md §6.3-§6.4): integer and FP arithmetic, INT / FP SRAM loads and stores, S_MAP_V_FP.

One job: the semantics of the ``sint``, ``intmem``, ``sfp``, ``fpmem`` and ``mapv`` families. Static
checks (IL-FREG) are made before dispatch (:mod:`.static`); these functions make the dynamic ones.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import (
    ALU_ADD,
    ALU_ADDI,
    ALU_EXP,
    ALU_LOAD,
    ALU_MAX,
    ALU_MUL,
    ALU_RECI,
    ALU_SUB,
    FAM_FPMEM,
    FAM_INTMEM,
)

from ..faults import R_AL_VROW, R_BD_FPS, R_BD_INTS, R_BD_VROW
from ..numerics.formats import bf16_bits_to_f32, f32_to_bf16_bits
from .common import exp_clamped, fault, nan32
from .slots import CFG_FPS, CFG_FUNC, CFG_INTS, CFG_V, CFG_VROWS, OPND_RD, OPND_RS1, RUN_OK

_U32 = 0xFFFFFFFF


@njit(cache=True)
def int_result(alu, a, b, imm18, imm22):
    """gp_d of the ``sint`` family from gp[rs1] = a, gp[rs2] = b (mod 2^32); scalars only (inlined)."""
    if alu == ALU_ADDI:
        return (a + imm18) & _U32
    if alu == ALU_ADD:
        return (a + b) & _U32
    if alu == ALU_SUB:
        return (a - b) & _U32
    if alu == ALU_MUL:
        return np.int64((np.uint64(a) * np.uint64(b)) & np.uint64(_U32))
    return (imm22 << 12) & _U32  # ALU_LUI


@njit(cache=True)
def sram_access(alu, pc, rd, addr, reg, sram, size, rule, frec, skip):
    """S_LD_INT / S_ST_INT (``reg`` = gp, INT SRAM) and S_LD_FP / S_ST_FP (``reg`` = f, FP SRAM): one word (only
    the check when ``skip``)."""
    if addr >= size:
        return fault(frec, rule, pc, OPND_RS1, addr, -1, size, 1, 0)
    if skip:  # FP SRAM words of a timing-only run: data
        return RUN_OK
    if alu == ALU_LOAD:
        if rd != 0:
            reg[rd] = sram[addr]
    else:
        sram[addr] = reg[rd]
    return RUN_OK


@njit(cache=True, error_model="numpy")
def fp_result(alu, x, y):
    """f_d bits of S_ADD/SUB/MAX/MUL/EXP/RECI/SQRT_FP from f_s1 bits ``x`` and f_s2 bits ``y`` (scalars only,
    so the compiler inlines it into the run loop)."""
    a = bf16_bits_to_f32(x)
    if alu in (ALU_ADD, ALU_SUB, ALU_MUL, ALU_MAX):
        b = bf16_bits_to_f32(y)  # rs2 is an operand (IL-checked) only of these
        if alu == ALU_ADD:
            r = nan32(a, b, a + b)
        elif alu == ALU_SUB:
            r = nan32(a, b, a - b)
        elif alu == ALU_MUL:
            r = nan32(a, b, a * b)
        else:
            r = b if b > a else a
    elif alu == ALU_EXP:
        r = exp_clamped(a)
    elif alu == ALU_RECI:
        r = np.float32(1.0) / a
    else:  # ALU_SQRT
        r = np.sqrt(a)
    return f32_to_bf16_bits(r)


@njit(cache=True)
def map_v_fp(pc, rd, rs1, imm18, gp, vram, fp_sram, cfg, frec):
    """S_MAP_V_FP: VROW(gp[rd]) = FPSRAM[gp[rs1] + imm : +VLEN] (exact copy)."""
    V = cfg[CFG_V]
    d = np.int64(gp[rd])
    addr = np.int64(gp[rs1]) + imm18
    if d % V != 0:
        return fault(frec, R_AL_VROW, pc, OPND_RD, d, -1, V, d % V, 0)
    if d // V >= cfg[CFG_VROWS]:
        return fault(frec, R_BD_VROW, pc, OPND_RD, d // V, 0, cfg[CFG_VROWS], d, 0)
    if addr + V > cfg[CFG_FPS]:
        return fault(frec, R_BD_FPS, pc, OPND_RS1, addr, -1, cfg[CFG_FPS], V, 0)
    if cfg[CFG_FUNC] == 0:
        return RUN_OK
    r = d // V
    for j in range(V):
        vram[r, j] = fp_sram[addr + j]
    return RUN_OK


@njit(cache=True)
def memory(fam, alu, pc, f, gp, fp, vram, fp_sram, int_sram, cfg, frec):
    """The scalar unit's memory instructions (families fpmem, intmem, mapv): the status. (The arithmetic,
    :func:`int_result` and :func:`fp_result`, is applied by the run loop itself.)"""
    rd, rs1, imm18 = f[0], f[1], f[5]
    addr = np.int64(gp[rs1]) + imm18
    if fam == FAM_FPMEM:
        return sram_access(alu, pc, rd, addr, fp, fp_sram, cfg[CFG_FPS], R_BD_FPS, frec, cfg[CFG_FUNC] == 0)
    if fam == FAM_INTMEM:
        return sram_access(alu, pc, rd, addr, gp, int_sram, cfg[CFG_INTS], R_BD_INTS, frec, False)
    return map_v_fp(pc, rd, rs1, imm18, gp, vram, fp_sram, cfg, frec)
