"""The Numba execution core: one ``@njit`` run loop over the decoded program and the state arrays.

One job: execute PLENA instructions exactly as ``shared/spec/isa.md`` / ``memory.md`` define them,
fast, on the arrays of a :class:`~plena_sim.state.MachineState`, with the cycle accounting of
``timing.md`` (§3 serial or §4 overlap scoreboard, :mod:`plena_sim.timing`; fixed latencies from
:mod:`plena_sim.latency`, H_* latencies from the HBM bank model :mod:`plena_sim.hbm_timing` with
t0 = the start / issue cycle) and an optional trace ring (one int64 record per retired instruction,
``timing.REC_FIELDS``), all inside the run loop.

Public API
----------
* :func:`execute` ``(state, program_words, max_instructions=10**9) -> Outcome`` -- the same contract
  as ``plena_sim.reference.execute``: runs from ``state.ctrl[CTRL_PC]`` until the PC leaves the
  program or an instruction faults, mutating ``state`` in place. A fault is returned as the raw int64
  record of :mod:`plena_sim.faults` in ``Outcome.fault`` (the Machine turns it into an exception).
* :func:`warm_up` ``() -> float`` -- compile (or load from the on-disk cache) every specialisation the
  core uses, on a tiny program; returns the seconds it took (the JIT compile time, when uncached).
* :data:`COUNTER_NAMES` -- the keys of ``Outcome.counters``.

Design
------
The run loop (:func:`_run`) is a single nopython function taking only numpy arrays and int64
scalars, always with the same dtypes/ndim, so it has exactly one compiled specialisation. It never
allocates per instruction (scratch rows are allocated once per call) and never calls back into Python.
Everything that needs Python -- growing the loop-stack arrays, adding pages to the sparse HBM pool --
is requested by returning a status *before* the instruction changes anything; :func:`execute` grows
the arrays and calls the loop again, which re-executes the same instruction from the start.

Faults are precise: every check of an instruction (isa.md §8 order IL -> CF -> LP -> AL -> BD,
operands in assembly order, rows ascending; the per-rule order in :mod:`plena_sim.faults`) happens
before its first state change. The per-instruction runaway increments of the loop records are made
up front and rolled back when the instruction faults (or asks for a grow), so a faulting instruction
leaves the loop counts as they were.

Numerics: dot products in float64, sequential in ascending k from +0.0 (written as ``p = p + x*w``;
the core is compiled without ``fastmath``, so LLVM neither contracts nor reassociates), ``p_s =
f32(p*s)``, ``acc = f32(acc + p_s)``; vector and scalar FP arithmetic in float32; exp in float64 of
the clamped argument; bf16 RNE on every VRAM / FP write. ``error_model="numpy"`` gives IEEE results
for float division by zero instead of a Python exception. When both operands of an arithmetic
operation are NaN, the result is the first operand's NaN, quieted (explicit, see ``_nan32``): IEEE
leaves the choice open and LLVM may commute operands, but the sign of a NaN is architectural state
(bf16 keeps it).
"""
from __future__ import annotations

import math
import time

import numpy as np
from numba import njit

from isa.encoding import decode_program
from isa.encoding import (  # noqa: F401  (generated module constants, used as compile-time globals)
    OP_M_MM, OP_M_TMM, OP_M_BMM, OP_M_BTMM, OP_M_BMM_WO, OP_M_MM_WO, OP_M_MV, OP_M_TMV, OP_M_BMV,
    OP_M_BTMV, OP_M_MV_WO, OP_M_BMV_WO, OP_V_ADD_VV, OP_V_ADD_VF, OP_V_SUB_VV, OP_V_SUB_VF,
    OP_V_MUL_VV, OP_V_MUL_VF, OP_V_EXP_V, OP_V_RECI_V, OP_V_RED_SUM, OP_V_RED_MAX, OP_S_ADD_FP,
    OP_S_SUB_FP, OP_S_MAX_FP, OP_S_MUL_FP, OP_S_EXP_FP, OP_S_RECI_FP, OP_S_SQRT_FP, OP_S_LD_FP,
    OP_S_ST_FP, OP_S_MAP_V_FP, OP_S_ADD_INT, OP_S_ADDI_INT, OP_S_SUB_INT, OP_S_MUL_INT, OP_S_LUI_INT,
    OP_S_LD_INT, OP_S_ST_INT, OP_H_PREFETCH_M, OP_H_PREFETCH_V, OP_H_STORE_V, OP_C_SET_ADDR_REG,
    OP_C_SET_SCALE_REG, OP_C_SET_STRIDE_REG, OP_C_SET_V_MASK_REG, OP_C_LOOP_START, OP_C_LOOP_END,
    OP_V_SHFT_V, OP_C_BREAK, OP_V_MAX_VF, OP_V_MIN_VF, OP_V_TOPK,
)
from isa.program import Program
from isa.table import BY_OPCODE, EXP_CLAMP, TOPK_POLICIES, mac_table
from .faults import (  # noqa: F401
    R_IL_OPC, R_IL_FREG, R_IL_AREG, R_IL_BRD, R_IL_TOPK, R_CF_VM, R_CF_BA, R_LP_ZERO, R_LP_GP0,
    R_LP_NOMATCH, R_LP_BREAK, R_LP_RUNAWAY, R_BUDGET, R_AL_VROW, R_AL_MTILE, R_AL_MM, R_AL_MV,
    R_AL_TMV, R_AL_BHEAD, R_AL_WO, R_AL_BWO, R_AL_MX, R_BD_VROW, R_BD_MTILE, R_BD_FPS, R_BD_INTS,
    R_BD_HBM, FAULT_RECORD_LEN, INT64_MAX,
)
from .hbm import hbm_missing_pages_after, hbm_read, hbm_write
from .hbm_timing import (EMPTY, G_ELEM_LEN, G_ROWS, G_SCALE_LEN, PRM_BURST_BYTES, PRM_CHANNELS, HST_READ_REQUESTS,
                         HST_WRITE_REQUESTS, W_N, dma_instruction)
from .latency import NOOP_IF_RD0, instruction_latency, latency_table
from . import timing as TM
from .timing import (MODE_SERIAL, T_BUSY, T_CYCLES, resources_nb, sb_commit_nb, sb_issue_nb, dest_reg_nb,
                     REC_N, RC_SEQ, RC_PC, RC_OP, RC_UNIT, RC_ISSUE, RC_START, RC_END, RC_RKIND, RC_RIDX,
                     RC_ROLD, RC_RNEW, RC_M1K, RC_M1S, RC_M1C, RC_M2K, RC_M2S, RC_M2C, RC_HADDR, RC_HSPAN,
                     RC_HBYTES, REG_GP, REG_FP, REG_A, REG_SCALE, REG_STRIDE, REG_VMASK, MEM_VROW,
                     MEM_MTILE, MEM_FPW, MEM_INTW, TC_VROW_BASE, TC_MTILE_BASE, TC_FPW_BASE, TC_INTW_BASE,
                     TC_TOTAL, MAX_RANGES)
from .numerics import (
    bf16_bits_to_f32, f32_to_bf16_bits, mx_decode_row, mx_encode_row, plain_decode_row,
    plain_encode_row,
)
from .state import CTRL_LOOP_DEPTH, CTRL_PC, CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK, MachineState, Outcome

__all__ = ["execute", "warm_up", "COUNTER_NAMES", "compile_seconds"]

# ------------------------------------------------------------------------------------ statuses
ST_DONE = 0          # PC left the program
ST_FAULT = 1         # frec holds the fault record
ST_GROW_LOOP = 2     # a C_LOOP_START needs a larger loop stack (nothing changed)
ST_NEED_PAGES = 3    # an H_STORE_V needs need[0] more spare HBM pool pages (nothing changed)
_OK = -1             # internal: instruction executed

# ------------------------------------------------------------------------------------ stats slots
S_RETIRED = 0
S_CYCLES = 1
S_MACS = 2
S_MX_NAN = 3
S_MX_SAT = 4
S_HBM_RD = 5     # payload bytes read by H_PREFETCH_*
S_HBM_WR = 6     # payload bytes written by H_STORE_V
N_STATS = 7
#: Outcome.counters keys, in stats-slot order after retired/cycles
COUNTER_NAMES = ("matrix_macs", "mx_nan", "mx_saturated", "hbm_payload_read", "hbm_payload_written")

# ------------------------------------------------------------------------------------ config slots
C_M = 0
C_V = 1
C_B = 2
C_H = 3
C_BA = 4
C_VROWS = 5
C_NTILES = 6
C_FPS = 7
C_INTS = 8
C_HBM_SIZE = 9
C_PM = 10
C_PV = 11
C_PW = 12
C_MAXLOOP = 13
N_CFG = 14

# HBM type descriptors: fmt[t, F_*] for t = 0 HBM_M_WEIGHT, 1 HBM_M_KV, 2 HBM_V_ACT, 3 HBM_V_KV
F_MX = 0
F_E = 1
F_MT = 2
F_EB = 3
F_BLOCK = 4
N_FMT = 5
_HBM_TYPES = ("HBM_M_WEIGHT_TYPE", "HBM_M_KV_TYPE", "HBM_V_ACT_TYPE", "HBM_V_KV_TYPE")

# operand field indices of the fault record (faults.OPERAND_NAMES)
O_NONE = -1
O_RD = 0
O_RS1 = 1
O_RS2 = 2
O_RS3 = 3
O_IMM = 5

_U32 = 0xFFFFFFFF
#: V_TOPK experts E and selections K per policy (isa.table.TOPK_POLICIES)
_TOPK_E = tuple(e for e, _k in TOPK_POLICIES)
_TOPK_K = tuple(k for _e, k in TOPK_POLICIES)

_VALID = np.zeros(64, dtype=np.bool_)
for _op in BY_OPCODE:
    _VALID[_op] = True


# ==================================================================================== helpers

@njit("int64(int64[::1], int64, int64, int64, int64, int64, int64, int64, int64)", cache=True)
def _fault(frec, rule, pc, operand, value, index, limit, x6, x7):
    """Fill the fault record (faults.py slots); returns ST_FAULT. One explicit signature: the
    arguments are cast to int64 at every call site, so there is a single compiled version."""
    frec[0] = rule
    frec[1] = pc
    frec[2] = operand
    frec[3] = value
    frec[4] = index
    frec[5] = limit
    frec[6] = x6
    frec[7] = x7
    return ST_FAULT


@njit(cache=True)
def _canon(bits):
    """bf16(f32(bits)): identity except that NaNs become the canonical quiet NaN (sign kept)."""
    return f32_to_bf16_bits(bf16_bits_to_f32(bits))


@njit(cache=True)
def _lane_on(vmask, j, H):
    h = j // H
    return h < 32 and ((vmask >> h) & 1) == 1


@njit(cache=True)
def _exp_clamped(a):
    """f32(exp(clamp(a, -88, 88))) with exp in float64; NaN stays NaN (its own bits)."""
    if a != a:
        return a
    x = np.float64(a)
    if x < -EXP_CLAMP:
        x = -EXP_CLAMP
    elif x > EXP_CLAMP:
        x = EXP_CLAMP
    return np.float32(math.exp(x))


# ---- NaN propagation. IEEE 754 leaves open which NaN a binary operation returns when both operands
# are NaN; x86 returns the first operand, but LLVM may commute fadd/fmul operands, so the core makes
# the rule explicit: a NaN result is the first NaN operand, quieted (an invalid operation on non-NaN
# operands keeps the hardware default NaN). This is also what numpy's element-wise loops in the
# reference produce for ``in1 op in2``. Only the NaN path is slow.

@njit(cache=True)
def _q32(x):
    return np.uint32(np.float32(x).view(np.uint32) | np.uint32(0x00400000)).view(np.float32)


@njit(cache=True)
def _q64(x):
    return np.uint64(np.float64(x).view(np.uint64) | np.uint64(0x0008000000000000)).view(np.float64)


@njit(cache=True)
def _nan32(a, b, r):
    """float32 result ``r`` of ``a op b`` with the first-NaN-operand rule."""
    if r != r:
        if a != a:
            return _q32(a)
        if b != b:
            return _q32(b)
    return r


@njit(cache=True)
def _nan64(a, b, r):
    """float64 result ``r`` of ``a op b`` with the first-NaN-operand rule."""
    if r != r:
        if a != a:
            return _q64(a)
        if b != b:
            return _q64(b)
    return r


@njit(cache=True)
def _acc32(acc, ps):
    """``f32(acc + ps)`` (accumulator first)."""
    return _nan32(acc, ps, np.float32(acc + ps))


@njit(cache=True)
def _dot(x, xo, w, n):
    """``sum_k x[xo+k] * w[k]`` for k < n: float64, sequential ascending from +0.0, no FMA."""
    p = 0.0
    for k in range(n):
        p = p + x[xo + k] * w[k]
    if p != p:   # some NaN: redo with the explicit propagation rule (x before w, p before product)
        p = 0.0
        for k in range(n):
            a = x[xo + k]
            b = w[k]
            t = _nan64(a, b, a * b)
            p = _nan64(p, t, p + t)
    return p


@njit(cache=True)
def _sat_add(u, k):
    """min(u + k, INT64_MAX) for a uint64 ``u`` and an int64 ``k >= 0`` (fault-record values)."""
    if u > np.uint64(INT64_MAX):
        return np.int64(INT64_MAX)
    s = np.int64(u)
    if s > INT64_MAX - k:
        return np.int64(INT64_MAX)
    return s + k


# ==================================================================================== vector unit

@njit(cache=True, error_model="numpy")
def _vector(o, pc, rd, rs1, rs2, rs3, f1, gp, fp, ctrl, vram, cfg, frec, rowf):
    V = cfg[C_V]
    H = cfg[C_H]
    nrows = cfg[C_VROWS]
    is_vf = (o == OP_V_ADD_VF or o == OP_V_SUB_VF or o == OP_V_MUL_VF or o == OP_V_MAX_VF
             or o == OP_V_MIN_VF)
    is_vv = o == OP_V_ADD_VV or o == OP_V_SUB_VV or o == OP_V_MUL_VV
    if is_vf and rs2 >= 8:
        return _fault(frec, R_IL_FREG, pc, O_RS2, rs2, -1, 8, 0, 0)
    d = np.int64(gp[rd])
    a = np.int64(gp[rs1])
    b = np.int64(gp[rs2])
    # AL then BD, operands in assembly order rd, rs1, (rs2)
    if d % V != 0:
        return _fault(frec, R_AL_VROW, pc, O_RD, d, -1, V, d % V, 0)
    if a % V != 0:
        return _fault(frec, R_AL_VROW, pc, O_RS1, a, -1, V, a % V, 0)
    if is_vv and b % V != 0:
        return _fault(frec, R_AL_VROW, pc, O_RS2, b, -1, V, b % V, 0)
    if d // V >= nrows:
        return _fault(frec, R_BD_VROW, pc, O_RD, d // V, 0, nrows, d, 0)
    if a // V >= nrows:
        return _fault(frec, R_BD_VROW, pc, O_RS1, a // V, 0, nrows, a, 0)
    if is_vv and b // V >= nrows:
        return _fault(frec, R_BD_VROW, pc, O_RS2, b // V, 0, nrows, b, 0)
    # ---- effects (all reads before any write: compute into rowf, then store)
    ra = a // V
    rb = b // V
    rdst = d // V
    if o == OP_V_SHFT_V:
        s = b  # shift amount (gp[rs2], unchecked)
        for j in range(V):
            if j >= s:
                rowf[j] = bf16_bits_to_f32(vram[ra, j - s])
            else:
                rowf[j] = np.float32(0.0)
        for j in range(V):
            vram[rdst, j] = f32_to_bf16_bits(rowf[j])
        return _OK
    f = bf16_bits_to_f32(fp[rs2]) if is_vf else np.float32(0.0)
    for j in range(V):
        x = bf16_bits_to_f32(vram[ra, j])
        if o == OP_V_ADD_VV:
            y = bf16_bits_to_f32(vram[rb, j])
            r = _nan32(x, y, x + y)
        elif o == OP_V_ADD_VF:
            r = _nan32(x, f, x + f)
        elif o == OP_V_SUB_VV:
            y = bf16_bits_to_f32(vram[rb, j])
            r = _nan32(x, y, x - y)
        elif o == OP_V_SUB_VF:
            if f1 == 0:
                r = _nan32(x, f, x - f)
            else:
                r = _nan32(f, x, f - x)
        elif o == OP_V_MUL_VV:
            y = bf16_bits_to_f32(vram[rb, j])
            r = _nan32(x, y, x * y)
        elif o == OP_V_MUL_VF:
            r = _nan32(x, f, x * f)
        elif o == OP_V_MAX_VF:
            if x != x:
                r = x
            elif f != f:
                r = f
            elif f > x:
                r = f
            else:
                r = x
        elif o == OP_V_MIN_VF:
            if x != x:
                r = x
            elif f != f:
                r = f
            elif f < x:
                r = f
            else:
                r = x
        elif o == OP_V_EXP_V:
            r = _exp_clamped(x)
        else:  # OP_V_RECI_V
            r = np.float32(1.0) / x
        rowf[j] = r
    if rs3 != 0:
        vmask = ctrl[CTRL_V_MASK]
        for j in range(V):
            if not _lane_on(vmask, j, H):
                rowf[j] = bf16_bits_to_f32(vram[ra, j])
    for j in range(V):
        vram[rdst, j] = f32_to_bf16_bits(rowf[j])
    return _OK


@njit(cache=True, error_model="numpy")
def _reduce(o, pc, rd, rs1, rs3, gp, fp, ctrl, vram, cfg, frec):
    """V_RED_SUM / V_RED_MAX."""
    if rd >= 8:
        return _fault(frec, R_IL_FREG, pc, O_RD, rd, -1, 8, 0, 0)
    if rd == 0:
        return _OK  # no-op: no VRAM access, no AL/BD checks
    V = cfg[C_V]
    H = cfg[C_H]
    a = np.int64(gp[rs1])
    if a % V != 0:
        return _fault(frec, R_AL_VROW, pc, O_RS1, a, -1, V, a % V, 0)
    if a // V >= cfg[C_VROWS]:
        return _fault(frec, R_BD_VROW, pc, O_RS1, a // V, 0, cfg[C_VROWS], a, 0)
    ra = a // V
    vmask = ctrl[CTRL_V_MASK]
    masked = rs3 != 0
    if o == OP_V_RED_SUM:
        s = 0.0
        for j in range(V):
            if masked and not _lane_on(vmask, j, H):
                continue
            y = np.float64(bf16_bits_to_f32(vram[ra, j]))
            s = _nan64(s, y, s + y)
        S = np.float32(s)
        fd = bf16_bits_to_f32(fp[rd])
        fp[rd] = f32_to_bf16_bits(_nan32(fd, S, fd + S))
    else:
        best_bits = fp[rd]
        best = bf16_bits_to_f32(best_bits)
        for j in range(V):
            if masked and not _lane_on(vmask, j, H):
                continue
            bits = vram[ra, j]
            x = bf16_bits_to_f32(bits)
            if x != x:
                continue
            if best != best or x > best:
                best = x
                best_bits = bits
        fp[rd] = best_bits
    return _OK


@njit(cache=True, error_model="numpy")
def _topk(pc, rd, rs1, rs2, rs3, gp, vram, fp_sram, int_sram, cfg, frec, logits, taken, sel, wts):
    if rs3 > 1:
        return _fault(frec, R_IL_TOPK, pc, O_RS3, rs3, -1, 2, 0, 0)
    V = cfg[C_V]
    E = _TOPK_E[rs3]
    K = _TOPK_K[rs3]
    nrow = (E + V - 1) // V
    fdst = np.int64(gp[rd])
    a = np.int64(gp[rs1])
    idst = np.int64(gp[rs2])
    if a % V != 0:
        return _fault(frec, R_AL_VROW, pc, O_RS1, a, -1, V, a % V, 0)
    if fdst + K > cfg[C_FPS]:
        return _fault(frec, R_BD_FPS, pc, O_RD, fdst, -1, cfg[C_FPS], K, 0)
    r0 = a // V
    for k in range(nrow):
        if r0 + k >= cfg[C_VROWS]:
            return _fault(frec, R_BD_VROW, pc, O_RS1, r0 + k, k, cfg[C_VROWS], a + k * V, 0)
    if idst + K > cfg[C_INTS]:
        return _fault(frec, R_BD_INTS, pc, O_RS2, idst, -1, cfg[C_INTS], K, 0)
    for e in range(E):
        x = bf16_bits_to_f32(vram[r0 + e // V, e % V])
        if x != x:
            x = np.float32(-np.inf)
        logits[e] = x
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
    xmax = logits[sel[0]]
    den = np.float32(0.0)
    for i in range(K):
        d = np.float32(logits[sel[i]] - xmax)
        e_i = np.float32(math.exp(np.float64(d)))
        wts[i] = e_i
        den = np.float32(den + e_i)
    ok = (den == den) and den > np.float32(0.0) and den != np.float32(np.inf)
    for i in range(K):
        if ok:
            w = np.float32(wts[i] / den)
        else:
            w = np.float32(0.0)
        fp_sram[fdst + i] = f32_to_bf16_bits(w)
        int_sram[idst + i] = np.uint32(sel[i])
    return _OK


# ==================================================================================== scalar unit

@njit(cache=True, error_model="numpy")
def _scalar_fp(o, pc, rd, rs1, rs2, fp):
    two = o == OP_S_ADD_FP or o == OP_S_SUB_FP or o == OP_S_MAX_FP or o == OP_S_MUL_FP
    if rd >= 8:
        return ST_FAULT, O_RD, rd
    if rs1 >= 8:
        return ST_FAULT, O_RS1, rs1
    if two and rs2 >= 8:
        return ST_FAULT, O_RS2, rs2
    if rd == 0:
        return _OK, 0, 0
    a = bf16_bits_to_f32(fp[rs1])
    if o == OP_S_ADD_FP:
        b = bf16_bits_to_f32(fp[rs2])
        r = _nan32(a, b, a + b)
    elif o == OP_S_SUB_FP:
        b = bf16_bits_to_f32(fp[rs2])
        r = _nan32(a, b, a - b)
    elif o == OP_S_MUL_FP:
        b = bf16_bits_to_f32(fp[rs2])
        r = _nan32(a, b, a * b)
    elif o == OP_S_MAX_FP:
        b = bf16_bits_to_f32(fp[rs2])
        r = b if b > a else a
    elif o == OP_S_EXP_FP:
        r = _exp_clamped(a)
    elif o == OP_S_RECI_FP:
        r = np.float32(1.0) / a
    else:  # S_SQRT_FP
        r = np.sqrt(a)
    fp[rd] = f32_to_bf16_bits(r)
    return _OK, 0, 0


# ==================================================================================== matrix unit

@njit(cache=True, error_model="numpy")
def _matrix(o, pc, rd, rs1, rs2, gp, vram, mram, m_accum, v_accum, hm_accum, hv_accum, cfg, bmm_scale,
            frec, xbuf, wbuf):
    """M_MM, M_TMM, M_MV, M_TMV, M_BMM, M_BTMM, M_BMV, M_BTMV (not the write-outs)."""
    M = cfg[C_M]
    V = cfg[C_V]
    B = cfg[C_B]
    H = cfg[C_H]
    BA = cfg[C_BA]
    NT = cfg[C_NTILES]
    nrows = cfg[C_VROWS]
    MM = M * M
    batched = o == OP_M_BMM or o == OP_M_BTMM or o == OP_M_BMV or o == OP_M_BTMV
    if (o == OP_M_BMM or o == OP_M_BTMM) and rd != 0:
        return _fault(frec, R_IL_BRD, pc, O_RD, rd, -1, -1, 0, 0)
    if V != M:
        return _fault(frec, R_CF_VM, pc, O_NONE, V, -1, M, 0, 0)
    if batched and BA * H != M:
        return _fault(frec, R_CF_BA, pc, O_NONE, BA * H, -1, M, BA, H)
    # operand roles
    if o == OP_M_TMM:
        v = np.int64(gp[rs1])
        m = np.int64(gp[rs2])
        mf = O_RS2
        vf = O_RS1
    else:
        m = np.int64(gp[rs1])
        v = np.int64(gp[rs2])
        mf = O_RS1
        vf = O_RS2
        if o == OP_M_BMV or o == OP_M_BTMV:
            m = m + np.int64(gp[rd])
    off = m % MM
    # ---- AL (M_TMM: vector operand first)
    if o == OP_M_TMM and v % V != 0:
        return _fault(frec, R_AL_VROW, pc, vf, v, -1, V, v % V, 0)
    if o == OP_M_MM or o == OP_M_TMM:
        if off % M != 0:
            return _fault(frec, R_AL_MM, pc, mf, m, -1, M, off, 0)
        if (off // M) % B != 0:
            return _fault(frec, R_AL_MM, pc, mf, m, off // M, B, off, 1)
    elif o == OP_M_MV:
        if off % B != 0:
            return _fault(frec, R_AL_MV, pc, mf, m, -1, B, off, 0)
        if off >= M:
            return _fault(frec, R_AL_MV, pc, mf, m, -1, M, off, 1)
    elif o == OP_M_TMV:
        if off % (B * M) != 0:
            return _fault(frec, R_AL_TMV, pc, mf, m, -1, B * M, off, 0)
    else:
        if off % H != 0:
            return _fault(frec, R_AL_BHEAD, pc, mf, m, -1, H, off, 0)
        if off >= M:
            return _fault(frec, R_AL_BHEAD, pc, mf, m, -1, M, off, 1)
    if o != OP_M_TMM and v % V != 0:
        return _fault(frec, R_AL_VROW, pc, vf, v, -1, V, v % V, 0)
    # ---- BD
    if o == OP_M_MM or o == OP_M_TMM:
        nv = B
    elif o == OP_M_BMM or o == OP_M_BTMM:
        nv = M
    else:
        nv = 1
    tile = m // MM
    r0 = v // V
    if o != OP_M_TMM and tile >= NT:
        return _fault(frec, R_BD_MTILE, pc, mf, tile, 0, NT, m, 0)
    for i in range(nv):
        if r0 + i >= nrows:
            return _fault(frec, R_BD_VROW, pc, vf, r0 + i, i, nrows, v + i * M, 0)
    if o == OP_M_TMM and tile >= NT:
        return _fault(frec, R_BD_MTILE, pc, mf, tile, 0, NT, m, 0)
    # ---- effects
    T = mram[tile]
    # X rows as float64 (bf16 values, exact)
    for i in range(nv):
        for k in range(V):
            xbuf[i, k] = np.float64(bf16_bits_to_f32(vram[r0 + i, k]))
    if o == OP_M_MM or o == OP_M_TMM or o == OP_M_MV or o == OP_M_TMV:
        if o == OP_M_MV:
            c = off
        else:
            c = off // M
        # wbuf[j, k] = weight of output column j at depth k
        for j in range(B):
            for k in range(M):
                if o == OP_M_MM or o == OP_M_MV:
                    wbuf[j, k] = np.float64(T[k, c + j])
                else:
                    wbuf[j, k] = np.float64(T[c + j, k])
        if o == OP_M_MM or o == OP_M_TMM:
            for i in range(B):
                for j in range(B):
                    p = _dot(xbuf[i], 0, wbuf[j], M)
                    m_accum[i, j] = _acc32(m_accum[i, j], np.float32(p))
        else:
            for j in range(B):
                p = _dot(xbuf[0], 0, wbuf[j], M)
                v_accum[j] = _acc32(v_accum[j], np.float32(p))
    else:
        h = off
        s = np.float64(np.float32(bmm_scale))
        # wbuf[j, k] (j < M output column, k < H depth)
        for j in range(M):
            for k in range(H):
                if o == OP_M_BMM or o == OP_M_BMV:
                    wbuf[j, k] = np.float64(T[h + k, j])
                else:
                    wbuf[j, k] = np.float64(T[j, h + k])
        if o == OP_M_BMM or o == OP_M_BTMM:
            for b in range(BA):
                for srow in range(M):
                    xr = xbuf[srow]
                    for j in range(M):
                        p = _dot(xr, b * H, wbuf[j], H)
                        hm_accum[b, srow, j] = _acc32(hm_accum[b, srow, j], np.float32(p * s))
        else:
            for b in range(BA):
                for j in range(M):
                    p = _dot(xbuf[0], b * H, wbuf[j], H)
                    hv_accum[b, j] = _acc32(hv_accum[b, j], np.float32(p * s))
    return _OK


@njit(cache=True, error_model="numpy")
def _writeout(o, pc, rd, rs1, imm, gp, vram, m_accum, v_accum, hm_accum, hv_accum, cfg, frec):
    """M_MM_WO, M_MV_WO, M_BMM_WO, M_BMV_WO."""
    M = cfg[C_M]
    V = cfg[C_V]
    B = cfg[C_B]
    BA = cfg[C_BA]
    nrows = cfg[C_VROWS]
    if V != M:
        return _fault(frec, R_CF_VM, pc, O_NONE, V, -1, M, 0, 0)
    addr = np.int64(gp[rd]) + imm
    vo = addr % M
    if o == OP_M_MM_WO or o == OP_M_MV_WO:
        if vo % B != 0:
            return _fault(frec, R_AL_WO, pc, O_RD, addr, -1, B, vo, 0)
        vb = addr - vo
        if o == OP_M_MV_WO:
            if vb // V >= nrows:
                return _fault(frec, R_BD_VROW, pc, O_RD, vb // V, 0, nrows, vb, 0)
            r = vb // V
            for j in range(V):
                if j >= vo and j < vo + B:
                    vram[r, j] = f32_to_bf16_bits(v_accum[j - vo])
                else:
                    vram[r, j] = _canon(vram[r, j])
            v_accum[:] = 0.0
            return _OK
        s = np.int64(1) if rs1 == 0 else np.int64(gp[rs1])
        for i in range(B):
            ra = vb + i * M * s
            if ra // V >= nrows:
                return _fault(frec, R_BD_VROW, pc, O_RD, ra // V, i, nrows, ra, 0)
        for i in range(B):
            r = (vb + i * M * s) // V
            for j in range(V):
                if j >= vo and j < vo + B:
                    vram[r, j] = f32_to_bf16_bits(m_accum[i, j - vo])
                else:
                    vram[r, j] = _canon(vram[r, j])
        m_accum[:, :] = 0.0
        return _OK
    if vo != 0:
        return _fault(frec, R_AL_BWO, pc, O_RD, addr, -1, M, vo, 0)
    r0 = addr // V
    nr = BA * M if o == OP_M_BMM_WO else BA
    if r0 + nr > nrows:
        i = nrows - r0 if nrows > r0 else np.int64(0)
        return _fault(frec, R_BD_VROW, pc, O_RD, r0 + i, i, nrows, addr + i * M, 0)
    if o == OP_M_BMM_WO:
        for b in range(BA):
            for s2 in range(M):
                r = r0 + b * M + s2
                for j in range(M):
                    vram[r, j] = f32_to_bf16_bits(hm_accum[b, s2, j])
        hm_accum[:, :, :] = 0.0
    else:
        for b in range(BA):
            for j in range(M):
                vram[r0 + b, j] = f32_to_bf16_bits(hv_accum[b, j])
        hv_accum[:, :] = 0.0
    return _OK


# ==================================================================================== DMA unit

@njit(cache=True, error_model="numpy")
def _dma(o, pc, rd, rs1, rs2, rs3, f1, gp, areg, ctrl, vram, mram, page_index, pages, meta, cfg, fmt,
         stats, frec, need, ebuf, sbuf, fbuf, counts):
    """H_PREFETCH_M, H_PREFETCH_V, H_STORE_V (memory.md §5)."""
    if rs2 >= 8:
        return _fault(frec, R_IL_AREG, pc, O_RS2, rs2, -1, 8, 0, 0)
    M = cfg[C_M]
    V = cfg[C_V]
    MM = M * M
    if o == OP_H_PREFETCH_M:
        t = 0 if f1 == 0 else 1
        L = M
        P = cfg[C_PM]
    else:
        t = 2 if f1 == 0 else 3
        L = V
        P = cfg[C_PV] if o == OP_H_PREFETCH_V else cfg[C_PW]
    is_mx = fmt[t, F_MX] != 0
    E = fmt[t, F_E]
    Mt = fmt[t, F_MT]
    eb = fmt[t, F_EB]
    kb = fmt[t, F_BLOCK]
    row_bytes = L * eb
    blk = eb * kb
    nsc = L // kb if is_mx else np.int64(0)
    pitch = ctrl[CTRL_STRIDE] if rs3 == 1 else row_bytes
    off0 = np.int64(gp[rs1])
    dst = np.int64(gp[rd])
    scale_reg = ctrl[CTRL_SCALE]
    hbm_size = cfg[C_HBM_SIZE]
    # ---- AL
    if o == OP_H_PREFETCH_M:
        if dst % MM != 0:
            return _fault(frec, R_AL_MTILE, pc, O_RD, dst, -1, MM, dst % MM, 0)
    elif dst % V != 0:
        return _fault(frec, R_AL_VROW, pc, O_RD, dst, -1, V, dst % V, 0)
    if is_mx:
        for i in range(P):
            oi = off0 + i * pitch
            if oi % blk != 0:
                return _fault(frec, R_AL_MX, pc, O_RS1, oi, i, blk, oi % blk, pitch)
            if pitch % blk == 0:
                break  # every later row offset is aligned too
    # ---- BD: SRAM side
    if o == OP_H_PREFETCH_M:
        t0 = dst // MM
        nt = P // M
        NT = cfg[C_NTILES]
        if t0 + nt > NT:
            k = NT - t0 if NT > t0 else np.int64(0)
            return _fault(frec, R_BD_MTILE, pc, O_RD, t0 + k, k, NT, dst + k * MM, 0)
    else:
        r0 = dst // V
        nrows = cfg[C_VROWS]
        if r0 + P > nrows:
            k = nrows - r0 if nrows > r0 else np.int64(0)
            return _fault(frec, R_BD_VROW, pc, O_RD, r0 + k, k, nrows, dst + k * V, 0)
    # ---- BD: HBM side (exact: a base >= HBM_SIZE faults on its first range)
    base_u = areg[rs2]
    if base_u >= np.uint64(hbm_size):
        return _fault(frec, R_BD_HBM, pc, O_RS2, _sat_add(base_u, off0), 0, hbm_size, 0, row_bytes)
    base = np.int64(base_u)
    for i in range(P):
        oi = off0 + i * pitch
        ea = base + oi
        if ea + row_bytes > hbm_size:
            return _fault(frec, R_BD_HBM, pc, O_RS2, ea, i, hbm_size, 0, row_bytes)
        if is_mx:
            sa = base + scale_reg + oi // blk
            if sa + nsc > hbm_size:
                return _fault(frec, R_BD_HBM, pc, O_RS2, sa, i, hbm_size, 1, nsc)
    # ---- capacity (store only): enough spare pool pages for every write, else ask Python
    if o == OP_H_STORE_V:
        missing = np.int64(0)
        last_e = np.int64(-1)            # rows ascend (pitch >= 0): count each page once per stream
        last_s = np.int64(-1)
        for i in range(P):
            oi = off0 + i * pitch
            m_e, last_e = hbm_missing_pages_after(page_index, base + oi, row_bytes, last_e)
            missing += m_e
            if is_mx:
                m_s, last_s = hbm_missing_pages_after(page_index, base + scale_reg + oi // blk, nsc, last_s)
                missing += m_s
        if missing > 0 and meta[0] + missing > pages.shape[0]:
            need[0] = missing
            return ST_NEED_PAGES
    # ---- effects
    eb_row = ebuf[:row_bytes]
    sb_row = sbuf[:nsc]
    f_row = fbuf[:L]
    if o == OP_H_STORE_V:
        r0 = dst // V
        counts[0] = 0
        counts[1] = 0
        for i in range(P):
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
        stats[S_MX_NAN] += counts[0]
        stats[S_MX_SAT] += counts[1]
        stats[S_HBM_WR] += P * (row_bytes + nsc)
        return _OK
    for i in range(P):
        oi = off0 + i * pitch
        hbm_read(page_index, pages, meta, base + oi, eb_row)
        if is_mx:
            hbm_read(page_index, pages, meta, base + scale_reg + oi // blk, sb_row)
            mx_decode_row(eb_row, sb_row, E, Mt, kb, f_row)
        else:
            plain_decode_row(eb_row, E, Mt, eb, f_row)
        if o == OP_H_PREFETCH_M:
            tl = dst // MM + i // M
            rr = i % M
            for j in range(M):
                mram[tl, rr, j] = f_row[j]
        else:
            r = dst // V + i
            for j in range(V):
                vram[r, j] = f32_to_bf16_bits(f_row[j])
    stats[S_HBM_RD] += P * (row_bytes + nsc)
    return _OK


# ==================================================================================== timing (timing.md §3-§5)

@njit(cache=True)
def _reg_value(kind, idx, gp, fp, areg, ctrl):
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
def _hbm_latency(o, rs2, rs3, f1, g_rs1, t0, areg, ctrl, hp, geom, ch, bank, hstats, blocks, hset, work):
    """HBM-model latency of a retired H_* instruction started at cycle ``t0`` (timing.md §5)."""
    if o == OP_H_PREFETCH_M:
        g = geom[0, 0 if f1 == 0 else 1]
    elif o == OP_H_PREFETCH_V:
        g = geom[1, 0 if f1 == 0 else 1]
    else:
        g = geom[2, 0 if f1 == 0 else 1]
    pitch = ctrl[CTRL_STRIDE] if rs3 == 1 else g[G_ELEM_LEN]
    lat = dma_instruction(hp, g, np.int64(areg[rs2]), g_rs1, pitch, ctrl[CTRL_SCALE], t0, ch, bank, hstats,
                          blocks, hset, work)
    if lat < 0:
        # the preallocated scratch (capped, see TimingState) is too small for this instruction: use a
        # one-off scratch of the geometry bound (only configurations with huge P_* / rows get here)
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
        lat = dma_instruction(hp, g, np.int64(areg[rs2]), g_rs1, pitch, ctrl[CTRL_SCALE], t0, ch, bank,
                              hstats, b2, h2, w2)
    return lat


@njit(cache=True)
def _account(o, pc, rd, rs1, rs2, rs3, f1, imm18, g_rd, g_rs1, g_rs2, aux, base_lat, unit, is_h,
             areg, ctrl, ts, ready, rdone, cv, hp, geom, ch, bank, hstats, blocks, hset, work, rr, wr, tmode):
    """Timing of one retired instruction: returns (issue cycle, latency) and updates the state."""
    if tmode == MODE_SERIAL:
        start = ts[T_CYCLES]
        lat = base_lat
        if is_h:
            lat = _hbm_latency(o, rs2, rs3, f1, g_rs1, start, areg, ctrl, hp, geom, ch, bank, hstats,
                               blocks, hset, work)
        ts[T_CYCLES] = start + lat
        ts[TM.T_LAST_ISSUE] = start
        if unit >= 0:
            ts[T_BUSY + unit] += lat
        return start, lat
    nr, nw = resources_nb(o, rd, rs1, rs2, rs3, f1, imm18, g_rd, g_rs1, g_rs2, aux, cv, rr, wr)
    issue = sb_issue_nb(ts, unit, rr, nr, wr, nw, ready, rdone)
    lat = base_lat
    if is_h:
        lat = _hbm_latency(o, rs2, rs3, f1, g_rs1, issue, areg, ctrl, hp, geom, ch, bank, hstats,
                           blocks, hset, work)
    sb_commit_nb(ts, unit, issue, lat, rr, nr, wr, nw, ready, rdone)
    return issue, lat


@njit(cache=True)
def _trace_record(tbuf, tcount, seq, pc, o, unit, issue, lat, rkind, ridx, old, new,
                  rd, rs1, rs2, rs3, f1, imm18, g_rd, g_rs1, g_rs2, aux, cv, rr, wr,
                  areg, ctrl, geom, hp, req_before, hstats):
    """Append one record to the trace ring (timing.REC_FIELDS)."""
    nr, nw = resources_nb(o, rd, rs1, rs2, rs3, f1, imm18, g_rd, g_rs1, g_rs2, aux, cv, rr, wr)
    haddr = np.int64(0)
    hspan = np.int64(0)
    hbytes = np.int64(0)
    if o == OP_H_PREFETCH_M or o == OP_H_PREFETCH_V or o == OP_H_STORE_V:
        gi = 0 if o == OP_H_PREFETCH_M else (1 if o == OP_H_PREFETCH_V else 2)
        g = geom[gi, 0 if f1 == 0 else 1]
        pitch = ctrl[CTRL_STRIDE] if rs3 == 1 else g[G_ELEM_LEN]
        haddr = np.int64(areg[rs2]) + g_rs1
        hspan = (g[G_ROWS] - 1) * pitch + g[G_ELEM_LEN]
        hbytes = (hstats[HST_READ_REQUESTS] + hstats[HST_WRITE_REQUESTS] - req_before) * hp[PRM_BURST_BYTES]
    TM.trace_record_nb(tbuf, tcount, seq, pc, o, unit, issue, lat, rkind, ridx, old, new, nw, wr, cv,
                       haddr, hspan, hbytes)


# ==================================================================================== the run loop

@njit(cache=True, error_model="numpy")
def _run(op, rd_a, rs1_a, rs2_a, rs3_a, f1_a, i18_a, i22_a, word_a,
         gp, fp, areg, ctrl, lstart, lreg, lcount,
         vram, mram, fp_sram, int_sram, m_accum, v_accum, hm_accum, hv_accum,
         page_index, pages, meta,
         cfg, fmt, lat_table, bmm_scale, valid, macs_tab,
         stats, by_opcode, frec, need, max_instr,
         ts, ready, rdone, cv, unit_of, hp, geom, ch, bank, hstats, blocks, hset, work, tbuf, tcount, tcap):
    n = op.shape[0]
    M = cfg[C_M]
    V = cfg[C_V]
    B = cfg[C_B]
    maxloop = cfg[C_MAXLOOP]
    # ---- per-call precomputation (static per pc): latency and C_BREAK targets
    lat_pc = np.zeros(n, dtype=np.int64)
    end_of = np.full(n, -1, dtype=np.int64)
    next_end = np.full(16, -1, dtype=np.int64)
    for q in range(n - 1, -1, -1):
        o = op[q]
        if valid[o]:
            lat_pc[q] = instruction_latency(lat_table, o, rd_a[q], rs3_a[q])   # H_*: 0 (HBM model)
        if o == OP_C_LOOP_START:
            end_of[q] = next_end[rd_a[q]]
        elif o == OP_C_LOOP_END:
            next_end[rd_a[q]] = q
    # ---- scratch buffers (allocated once per call)
    W = max(M, V)
    rowf = np.empty(W, dtype=np.float32)
    xbuf = np.empty((W, W), dtype=np.float64)
    wbuf = np.empty((W, W), dtype=np.float64)
    ebuf = np.empty(W * 4, dtype=np.uint8)
    sbuf = np.empty(W, dtype=np.uint8)
    fbuf = np.empty(W, dtype=np.float32)
    counts = np.zeros(2, dtype=np.int64)
    logits = np.empty(max(_TOPK_E), dtype=np.float32)
    taken = np.empty(max(_TOPK_E), dtype=np.bool_)
    sel = np.empty(8, dtype=np.int64)
    wts = np.empty(8, dtype=np.float32)
    rr = np.zeros((TM.MAX_RANGES, 3), dtype=np.int64)
    wr = np.zeros((TM.MAX_RANGES, 3), dtype=np.int64)
    tmode = ts[TM.T_MODE]
    tracing = tcap > 0
    noop_tab = NOOP_IF_RD0
    rkind = np.int64(0)
    ridx = np.int64(0)
    rold = np.int64(0)
    req_before = np.int64(0)
    nr = np.int64(0)
    nw = np.int64(0)

    while True:
        pc = ctrl[CTRL_PC]
        if pc >= n:
            return ST_DONE
        if stats[S_RETIRED] == max_instr:
            return _fault(frec, R_BUDGET, pc, O_NONE, stats[S_RETIRED], -1, max_instr, 0, 0)
        depth = ctrl[CTRL_LOOP_DEPTH]
        # runaway guard: increment now, roll back below if the instruction does not retire
        for k in range(depth):
            lcount[k] += 1
        for k in range(depth):
            if lcount[k] > maxloop:
                c = lcount[k]
                for q in range(depth):
                    lcount[q] -= 1
                return _fault(frec, R_LP_RUNAWAY, pc, O_NONE, c, k, maxloop, lreg[k], lstart[k])
        o = op[pc]
        rd = rd_a[pc]
        rs1 = rs1_a[pc]
        rs2 = rs2_a[pc]
        st = _OK
        npc = pc + 1
        # register values at issue (timing.md §4: registers are captured at issue)
        g_rd = np.int64(gp[rd])
        g_rs1 = np.int64(gp[rs1])
        g_rs2 = np.int64(gp[rs2])
        aux = lreg[depth - 1] if (o == OP_C_BREAK and depth > 0) else np.int64(-1)
        if tracing:
            rkind, ridx = dest_reg_nb(o, rd, aux)
            if rkind == REG_GP:
                rold = np.int64(gp[ridx])
            elif rkind == REG_FP:
                rold = np.int64(fp[ridx])
            else:
                rold = _reg_value(rkind, ridx, gp, fp, areg, ctrl)
            req_before = hstats[HST_READ_REQUESTS] + hstats[HST_WRITE_REQUESTS]
        # ------------------------------------------------------------ scalar INT (hot path first)
        if o == OP_S_ADDI_INT:
            if rd != 0:
                gp[rd] = np.uint32((np.int64(gp[rs1]) + i18_a[pc]) & _U32)
        elif o == OP_C_LOOP_END:
            found = -1
            for k in range(depth - 1, -1, -1):
                if lreg[k] == rd:
                    found = k
                    break
            if found < 0:
                st = _fault(frec, R_LP_NOMATCH, pc, O_RD, rd, -1, -1, depth, 0)
            else:
                cnt = np.int64(gp[rd])
                if cnt > 1:
                    gp[rd] = np.uint32(cnt - 1)
                    lcount[found] = 0
                    npc = lstart[found] + 1
                else:
                    gp[rd] = 0
                    for k in range(found, depth - 1):
                        lstart[k] = lstart[k + 1]
                        lreg[k] = lreg[k + 1]
                        lcount[k] = lcount[k + 1]
                    lstart[depth - 1] = 0      # freed slots read 0 (as the reference leaves them)
                    lreg[depth - 1] = 0
                    lcount[depth - 1] = 0
                    ctrl[CTRL_LOOP_DEPTH] = depth - 1
        elif o == OP_S_ADD_INT or o == OP_S_SUB_INT or o == OP_S_MUL_INT:
            a = np.int64(gp[rs1])
            b = np.int64(gp[rs2])
            if o == OP_S_ADD_INT:
                r = (a + b) & _U32
            elif o == OP_S_SUB_INT:
                r = (a - b) & _U32
            else:
                r = np.int64((np.uint64(a) * np.uint64(b)) & np.uint64(_U32))
            if rd != 0:
                gp[rd] = np.uint32(r)
        elif o == OP_S_LUI_INT:
            if rd != 0:
                gp[rd] = np.uint32((i22_a[pc] << 12) & _U32)
        elif o == OP_S_LD_INT or o == OP_S_ST_INT:
            addr = np.int64(gp[rs1]) + i18_a[pc]
            if addr >= cfg[C_INTS]:
                st = _fault(frec, R_BD_INTS, pc, O_RS1, addr, -1, cfg[C_INTS], 1, 0)
            elif o == OP_S_LD_INT:
                if rd != 0:
                    gp[rd] = int_sram[addr]
            else:
                int_sram[addr] = gp[rd]
        # ------------------------------------------------------------ matrix
        elif o == OP_M_MM or o == OP_M_TMM or o == OP_M_MV or o == OP_M_TMV or o == OP_M_BMM \
                or o == OP_M_BTMM or o == OP_M_BMV or o == OP_M_BTMV:
            st = _matrix(o, pc, rd, rs1, rs2, gp, vram, mram, m_accum, v_accum, hm_accum, hv_accum,
                         cfg, bmm_scale, frec, xbuf, wbuf)
        elif o == OP_M_MM_WO or o == OP_M_MV_WO or o == OP_M_BMM_WO or o == OP_M_BMV_WO:
            st = _writeout(o, pc, rd, rs1, i18_a[pc], gp, vram, m_accum, v_accum, hm_accum, hv_accum,
                           cfg, frec)
        # ------------------------------------------------------------ vector
        elif o == OP_V_ADD_VV or o == OP_V_ADD_VF or o == OP_V_SUB_VV or o == OP_V_SUB_VF \
                or o == OP_V_MUL_VV or o == OP_V_MUL_VF or o == OP_V_EXP_V or o == OP_V_RECI_V \
                or o == OP_V_SHFT_V or o == OP_V_MAX_VF or o == OP_V_MIN_VF:
            st = _vector(o, pc, rd, rs1, rs2, rs3_a[pc], f1_a[pc], gp, fp, ctrl, vram, cfg, frec, rowf)
        elif o == OP_V_RED_SUM or o == OP_V_RED_MAX:
            st = _reduce(o, pc, rd, rs1, rs3_a[pc], gp, fp, ctrl, vram, cfg, frec)
        elif o == OP_V_TOPK:
            st = _topk(pc, rd, rs1, rs2, rs3_a[pc], gp, vram, fp_sram, int_sram, cfg, frec, logits, taken,
                       sel, wts)
        # ------------------------------------------------------------ scalar FP
        elif o == OP_S_ADD_FP or o == OP_S_SUB_FP or o == OP_S_MAX_FP or o == OP_S_MUL_FP \
                or o == OP_S_EXP_FP or o == OP_S_RECI_FP or o == OP_S_SQRT_FP:
            s0, fo, fv = _scalar_fp(o, pc, rd, rs1, rs2, fp)
            if s0 == ST_FAULT:
                st = _fault(frec, R_IL_FREG, pc, fo, fv, -1, 8, 0, 0)
        elif o == OP_S_LD_FP or o == OP_S_ST_FP:
            if rd >= 8:
                st = _fault(frec, R_IL_FREG, pc, O_RD, rd, -1, 8, 0, 0)
            else:
                addr = np.int64(gp[rs1]) + i18_a[pc]
                if addr >= cfg[C_FPS]:
                    st = _fault(frec, R_BD_FPS, pc, O_RS1, addr, -1, cfg[C_FPS], 1, 0)
                elif o == OP_S_LD_FP:
                    if rd != 0:
                        fp[rd] = fp_sram[addr]
                else:
                    fp_sram[addr] = fp[rd]
        elif o == OP_S_MAP_V_FP:
            d = np.int64(gp[rd])
            addr = np.int64(gp[rs1]) + i18_a[pc]
            if d % V != 0:
                st = _fault(frec, R_AL_VROW, pc, O_RD, d, -1, V, d % V, 0)
            elif d // V >= cfg[C_VROWS]:
                st = _fault(frec, R_BD_VROW, pc, O_RD, d // V, 0, cfg[C_VROWS], d, 0)
            elif addr + V > cfg[C_FPS]:
                st = _fault(frec, R_BD_FPS, pc, O_RS1, addr, -1, cfg[C_FPS], V, 0)
            else:
                r = d // V
                for j in range(V):
                    vram[r, j] = fp_sram[addr + j]
        # ------------------------------------------------------------ DMA
        elif o == OP_H_PREFETCH_M or o == OP_H_PREFETCH_V or o == OP_H_STORE_V:
            st = _dma(o, pc, rd, rs1, rs2, rs3_a[pc], f1_a[pc], gp, areg, ctrl, vram, mram, page_index,
                      pages, meta, cfg, fmt, stats, frec, need, ebuf, sbuf, fbuf, counts)
        # ------------------------------------------------------------ control
        elif o == OP_C_LOOP_START:
            n_it = i22_a[pc]
            if rd == 0:
                st = _fault(frec, R_LP_GP0, pc, O_RD, 0, -1, -1, n_it, 0)
            elif n_it == 0:
                st = _fault(frec, R_LP_ZERO, pc, O_IMM, 0, -1, -1, rd, 0)
            elif depth >= lstart.shape[0]:
                st = ST_GROW_LOOP
            else:
                gp[rd] = np.uint32(n_it)
                lstart[depth] = pc
                lreg[depth] = rd
                lcount[depth] = 0
                ctrl[CTRL_LOOP_DEPTH] = depth + 1
        elif o == OP_C_BREAK:
            if depth == 0:
                st = _fault(frec, R_LP_BREAK, pc, O_NONE, -1, -1, -1, -1, 0)
            else:
                sp = lstart[depth - 1]
                rg = lreg[depth - 1]
                tgt = end_of[sp] if (sp >= 0 and sp < n and op[sp] == OP_C_LOOP_START
                                     and rd_a[sp] == rg) else -1
                if tgt < 0:
                    # record not created by the C_LOOP_START at sp (never happens for records this
                    # core pushed; kept exact for arbitrary initial states): scan program order
                    for q in range(sp + 1, n):
                        if op[q] == OP_C_LOOP_END and rd_a[q] == rg:
                            tgt = q
                            break
                if tgt < 0:
                    st = _fault(frec, R_LP_BREAK, pc, O_NONE, rg, -1, -1, sp, depth)
                else:
                    gp[rg] = 0
                    lstart[depth - 1] = 0
                    lreg[depth - 1] = 0
                    lcount[depth - 1] = 0
                    ctrl[CTRL_LOOP_DEPTH] = depth - 1
                    npc = tgt + 1
        elif o == OP_C_SET_ADDR_REG:
            if rd >= 8:
                st = _fault(frec, R_IL_AREG, pc, O_RD, rd, -1, 8, 0, 0)
            else:
                areg[rd] = (np.uint64(gp[rs1]) << np.uint64(32)) | np.uint64(gp[rs2])
        elif o == OP_C_SET_SCALE_REG:
            ctrl[CTRL_SCALE] = np.int64(gp[rd])
        elif o == OP_C_SET_STRIDE_REG:
            ctrl[CTRL_STRIDE] = np.int64(gp[rd])
        elif o == OP_C_SET_V_MASK_REG:
            ctrl[CTRL_V_MASK] = np.int64(gp[rd])
        else:
            st = _fault(frec, R_IL_OPC, pc, O_NONE, o, -1, -1, word_a[pc], 0)

        if st != _OK:
            # nothing was changed by the instruction; undo the runaway increments
            for k in range(depth):
                lcount[k] -= 1
            return st
        is_h = o == OP_H_PREFETCH_M or o == OP_H_PREFETCH_V or o == OP_H_STORE_V
        unit = unit_of[o]
        if noop_tab[o] and rd == 0:
            unit = -1                               # zero-latency no-op: no unit, no resources
        if tmode == MODE_SERIAL and not is_h:
            issue = ts[T_CYCLES]
            lat = lat_pc[pc]
            ts[T_CYCLES] = issue + lat
            ts[TM.T_LAST_ISSUE] = issue
            if unit >= 0:
                ts[T_BUSY + unit] += lat
        elif not is_h:
            # overlap, fixed latency: the scoreboard inline (few array arguments per call: cheap)
            nr, nw = resources_nb(o, rd, rs1, rs2, rs3_a[pc], f1_a[pc], i18_a[pc], g_rd, g_rs1, g_rs2, aux,
                                  cv, rr, wr)
            issue = sb_issue_nb(ts, unit, rr, nr, wr, nw, ready, rdone)
            lat = lat_pc[pc]
            sb_commit_nb(ts, unit, issue, lat, rr, nr, wr, nw, ready, rdone)
        else:
            issue, lat = _account(o, pc, rd, rs1, rs2, rs3_a[pc], f1_a[pc], i18_a[pc], g_rd, g_rs1, g_rs2,
                                  aux, lat_pc[pc], unit, is_h, areg, ctrl, ts, ready, rdone, cv, hp, geom,
                                  ch, bank, hstats, blocks, hset, work, rr, wr, tmode)
        if tracing:
            if is_h:
                _trace_record(tbuf, tcount, stats[S_RETIRED], pc, o, unit, issue, lat, rkind, ridx, rold,
                              _reg_value(rkind, ridx, gp, fp, areg, ctrl), rd, rs1, rs2, rs3_a[pc], f1_a[pc],
                              i18_a[pc], g_rd, g_rs1, g_rs2, aux, cv, rr, wr, areg, ctrl, geom, hp,
                              req_before, hstats)
            else:
                # few array arguments per call (each costs reference counting): inline the common case
                if tmode == MODE_SERIAL:
                    nr, nw = resources_nb(o, rd, rs1, rs2, rs3_a[pc], f1_a[pc], i18_a[pc], g_rd, g_rs1, g_rs2,
                                          aux, cv, rr, wr)
                if rkind == REG_GP:
                    rnew = np.int64(gp[ridx])
                elif rkind == REG_FP:
                    rnew = np.int64(fp[ridx])
                else:
                    rnew = _reg_value(rkind, ridx, gp, fp, areg, ctrl)
                TM.trace_record_nb(tbuf, tcount, stats[S_RETIRED], pc, o, unit, issue, lat, rkind, ridx, rold,
                                   rnew, nw, wr, cv, np.int64(0), np.int64(0), np.int64(0))
        stats[S_RETIRED] += 1
        stats[S_CYCLES] += lat
        stats[S_MACS] += macs_tab[o]
        by_opcode[o] += 1
        ctrl[CTRL_PC] = npc


# ==================================================================================== Python side

_PARAM_CACHE: dict[int, tuple] = {}


def _params(cfg):
    """(cfg int64[N_CFG], fmt int64[4, N_FMT], latency table, bmm_scale, macs int64[64]) for ``cfg``."""
    key = id(cfg)
    hit = _PARAM_CACHE.get(key)
    if hit is not None and hit[0] is cfg:
        return hit[1]
    c = np.zeros(N_CFG, dtype=np.int64)
    c[C_M], c[C_V], c[C_B], c[C_H], c[C_BA] = cfg.MLEN, cfg.VLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
    c[C_VROWS] = cfg.VECTOR_SRAM_SIZE
    c[C_NTILES] = cfg.mram_tiles
    c[C_FPS] = cfg.FP_SRAM_SIZE
    c[C_INTS] = cfg.INT_SRAM_SIZE
    c[C_HBM_SIZE] = cfg.HBM_SIZE
    c[C_PM], c[C_PV], c[C_PW] = cfg.P_M, cfg.P_V, cfg.P_W
    c[C_MAXLOOP] = cfg.MAX_LOOP_INSTRUCTIONS
    fmt = np.zeros((4, N_FMT), dtype=np.int64)
    for t, name in enumerate(_HBM_TYPES):
        ty = cfg.hbm_type(name)
        if ty.is_mx:
            fmt[t, F_MX] = 1
            fmt[t, F_E], fmt[t, F_MT] = ty.elem.exponent, ty.elem.mantissa
            fmt[t, F_BLOCK] = ty.block
        else:
            fmt[t, F_E], fmt[t, F_MT] = ty.data.exponent, ty.data.mantissa
            fmt[t, F_BLOCK] = 1
        fmt[t, F_EB] = ty.elem_bytes
    M, B, H, BA = cfg.MLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
    macs = np.array(mac_table(M, B, H, BA), dtype=np.int64)
    out = (c, fmt, np.ascontiguousarray(latency_table(cfg), dtype=np.int64), float(cfg.BMM_SCALE), macs)
    if len(_PARAM_CACHE) >= 64:
        _PARAM_CACHE.clear()
    _PARAM_CACHE[key] = (cfg, out)
    return out


def _i64(a):
    return np.ascontiguousarray(a, dtype=np.int64)


def execute(state: MachineState, program_words, max_instructions: int = 10**9, timing: str | None = None,
            trace_capacity: int | None = None) -> Outcome:
    """Run ``program_words`` on ``state`` (from ``state.ctrl[CTRL_PC]``) with the Numba core.

    Returns an :class:`~plena_sim.state.Outcome`: instructions retired, the fault record (or None),
    retired count per opcode, the cycles this call added (timing.md §3 / §4 for ``timing`` =
    ``"serial"`` / ``"overlap"``; None keeps the mode of ``state.timing``, default serial) and the
    counters :data:`COUNTER_NAMES`. Timing state (cycles, scoreboard, HBM banks, trace ring of
    ``trace_capacity`` records) lives in ``state.timing`` and persists across calls until
    ``state.reset_timing()``. ``state`` is mutated in place (loop-stack arrays and the HBM page pool
    may be replaced by larger ones)."""
    if isinstance(program_words, Program):
        program_words = program_words.words
    dec = decode_program(program_words)
    fields = [_i64(dec[k]) for k in ("opcode", "rd", "rs1", "rs2", "rs3", "funct1", "imm18", "imm22", "word")]
    cfgi, fmt, lat, bmm_scale, macs = _params(state.cfg)
    tm = state.ensure_timing(timing, trace_capacity, "numba")
    cyc0 = int(tm.ts[T_CYCLES])
    stats = np.zeros(N_STATS, dtype=np.int64)
    by_opcode = np.zeros(64, dtype=np.int64)
    frec = np.zeros(FAULT_RECORD_LEN, dtype=np.int64)
    need = np.zeros(1, dtype=np.int64)
    hbm = state.hbm
    max_instr = int(max_instructions)
    while True:
        st = _run(*fields,
                  state.gp, state.fp, state.areg, state.ctrl, state.loop_start, state.loop_reg,
                  state.loop_count, state.vram, state.mram, state.fp_sram, state.int_sram,
                  state.m_accum, state.v_accum, state.hm_accum, state.hv_accum,
                  hbm.page_index, hbm.pages, hbm.meta,
                  cfgi, fmt, lat, bmm_scale, _VALID, macs,
                  stats, by_opcode, frec, need, max_instr,
                  tm.ts, tm.ready, tm.rdone, tm.cv, TM.UNIT_OF, tm.hp, tm.geom, tm.ch, tm.bank, tm.hstats,
                  tm.blocks, tm.hset, tm.work, tm.tbuf, tm.tcount, np.int64(tm.trace_capacity))
        if st == ST_GROW_LOOP:
            state.grow_loop_stack()
        elif st == ST_NEED_PAGES:
            hbm.reserve(int(need[0]))
        else:
            break
    fault = tuple(int(x) for x in frec) if st == ST_FAULT else None
    counters = {"matrix_macs": int(stats[S_MACS]), "mx_nan": int(stats[S_MX_NAN]),
                "mx_saturated": int(stats[S_MX_SAT]), "hbm_payload_read": int(stats[S_HBM_RD]),
                "hbm_payload_written": int(stats[S_HBM_WR])}
    return Outcome(int(stats[S_RETIRED]), fault, by_opcode, int(tm.ts[T_CYCLES]) - cyc0, counters)


#: seconds spent in the last :func:`warm_up` (JIT compile or cache load); None before it ran
compile_seconds: float | None = None


def warm_up(cfg=None) -> float:
    """Compile (or load from the cache) the core on a tiny program; return the seconds taken."""
    global compile_seconds
    from .config import load_config
    t0 = time.perf_counter()
    if cfg is None:
        cfg = load_config(overrides={"MLEN": 16, "VLEN": 16, "BLEN": 4, "HLEN": 4, "BROADCAST_AMOUNT": 4,
                                     "VECTOR_SRAM_SIZE": 64, "MATRIX_SRAM_SIZE": 64,
                                     "HBM_SIZE": 1 << 20, "HBM_M_Prefetch_Amount": 16})
    state = MachineState(cfg)
    from isa.encoding import encode
    words = [encode("S_ADDI_INT", rd=1, rs1=0, imm18=1), encode("C_LOOP_START", rd=2, imm22=2),
             encode("V_ADD_VV", rd=0, rs1=0, rs2=0), encode("H_STORE_V", rd=0, rs1=0, rs2=0),
             encode("H_PREFETCH_V", rd=0, rs1=0, rs2=0), encode("H_PREFETCH_M", rd=0, rs1=0, rs2=0),
             encode("M_MM", rs1=0, rs2=0), encode("M_MM_WO", rd=0, imm18=0),
             encode("C_LOOP_END", rd=2)]
    execute(state, words, timing="serial", trace_capacity=0)
    state.reset_timing()
    state.ctrl[CTRL_PC] = 0
    execute(state, words, timing="overlap", trace_capacity=4)
    compile_seconds = time.perf_counter() - t0
    return compile_seconds
