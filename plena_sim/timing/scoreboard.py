"""Cycle accounting of timing.md §3 (serial) and §4 (overlap scoreboard), shared by both backends.

One job: given one retired instruction (its fields and the register values captured at issue), decide
when it issues and when it is done, and keep the per-run timing state (cycles, unit busy time, stalls,
the scoreboard and the HBM bank state of :mod:`plena_sim.hbm.timing`).

API
---
* :data:`TIMING_MODES` = ``("serial", "overlap", "rtl")`` (rtl: docs/timing.md; its data in
  :mod:`plena_sim.timing.rtl`).
* :class:`TimingState` ``(cfg, mode="serial", trace_capacity=0, backend="numba")`` -- every array the
  run loop needs, owned by :class:`~plena_sim.memory.state.MachineState` (``state.timing``) so it persists
  across the resumed calls of one run: ``ts`` (int64[T_N], slots ``T_*``), the scoreboard ``ready`` /
  ``read_done`` (int64, one entry per resource, see *Resources*), the HBM timing state (``hp``,
  ``geom``, ``ch``, ``bank``, ``hstats``, scratch) and the trace ring (``tbuf`` int64[cap, REC_N],
  ``tcount`` int64[1]). ``backend="reference"`` additionally holds the pure-Python HBM twin
  (``py_hbm`` / ``py_hstats``, see :func:`plena_sim.hbm.timing.schedule_py`).
* ``rtl_issue(...)`` / ``rtl_commit(...)``: the rtl model's issue rule (pipeline occupancy, separate ready / done,
  the hazards with their recovery; ``wcls`` = the producer class of each resource's last writer) over the same
  read / write sets; every stall part is booked per pc in ``pcx`` (``X_*`` columns), also by ``sb_issue``.
* ``resources(...)``, ``sb_issue(...)``, ``sb_commit(...)`` -- the scoreboard as three functions written
  once in plain Python (``*_py``, used by the reference interpreter) and compiled by Numba (``*_nb``,
  used by the core).

Resources (one flat int64 index space; ``cv`` = :meth:`TimingState.cfg_vector`): gp1..15 at 1..15,
f1..7 at 16+k, a0..7 at 24+k, SCALE 32, STRIDE 33, VMASK 34, ACC_M 35, ACC_V 36, ACC_HM 37, ACC_HV 38,
then one entry per VRAM row, MRAM tile, FP SRAM word and INT SRAM word (bases ``cv[TC_*_BASE]``). Indices
>= :data:`MEM_FIRST` (35) are the memory / accumulator resources that carry the WAR constraint. The
per-row arrays are created with ``np.zeros`` only in overlap and rtl mode (the OS maps their pages on first
touch, so untouched rows cost nothing). A resource set is a list of ``(start, count, step)`` ranges.

Trace record (int64[REC_N], one per retired instruction, ring buffer of capacity ``cap``; record ``k``
is at ``tbuf[k % cap]``, ``tcount[0]`` = records written): see the ``RC_*`` slots.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.encoding import (
    ALU_BMM,
    ALU_BMV,
    ALU_BTMV,
    ALU_LOAD,
    ALU_MM,
    ALU_MV,
    ALU_PREFETCH_M,
    ALU_PREFETCH_V,
    ALU_TMM,
    ALU_TMV,
    FAM_BMAT,
    FAM_DMA,
    FAM_FPMEM,
    FAM_INTMEM,
    FAM_MAPV,
    FAM_MAT,
    FAM_REDUCE,
    FAM_SHIFT,
    FAM_TOPK,
    FAM_VBIN,
    FAM_VUNARY,
    FAM_WO,
    N_OPCODES,
    UNIT_NAMES,
    opcode_alus,
    opcode_families,
    opcode_units,
)
from isa.table import INSTRUCTIONS, TOPK_POLICIES

from .rtl import HZ_RECOVERY, HZ_STALL, HZ_WAW, S_HAZARD0, S_RAW, S_RECOVERY, S_UNIT, S_WAR, rtl_table

__all__ = [
    "TIMING_MODES",
    "TimingState",
    "MODE_SERIAL",
    "MODE_OVERLAP",
    "MODE_RTL",
    "REC_FIELDS",
    "REC_N",
    "resources_py",
    "resources_nb",
    "sb_issue_py",
    "sb_issue_nb",
    "sb_commit_py",
    "sb_commit_nb",
    "dest_reg_py",
    "dest_reg_nb",
    "UNIT_OF",
    "check_mode",
]

TIMING_MODES = ("serial", "overlap", "rtl")
MODE_SERIAL = 0
MODE_OVERLAP = 1
MODE_RTL = 2

# ---- ts slots
T_CYCLES = 0  # serial: running total; overlap: max done so far
T_LAST_ISSUE = 1  # issue cycle of the last retired instruction (-1 before the first)
T_UNIT_FREE = 2  # + unit (5 slots)
T_BUSY = 7  # + unit (5 slots)
T_STALL_UNIT = 12
T_STALL_DATA = 13
T_MODE = 14
T_LAST_STALL = 15  # overlap / rtl: the stall of the last issued instruction (0: none) ...
T_PIPE_FREE = 16  # + rtl pipeline (rtl.PIPES, 9 slots)
T_STALL_REASON = 25  # ... and its (main) reason (rtl.S_*) when it stalled
T_N = 32

# ---- per-pc extras (``pcx``, int64[n, X_N], one row per program word; the backends' Outcome.pc_extra)
X_BUSY = 0  # busy cycles not fixed per pc (H_*: the HBM model's latency)
X_HBM_READ = 1  # HBM bytes read (requests x burst)
X_HBM_WRITE = 2  # HBM bytes written
X_STALL = 3  # + stall reason (rtl.STALL_REASONS, 8 columns)
X_N = 11

# ---- register resources
RS_GP = 0
RS_FP = 16
RS_A = 24
RS_SCALE = 32
RS_STRIDE = 33
RS_VMASK = 34
RS_ACC_M = 35
RS_ACC_V = 36
RS_ACC_HM = 37
RS_ACC_HV = 38
MEM_FIRST = 35
N_REGRES = 40

# ---- cfg vector slots
TC_M = 0
TC_V = 1
TC_B = 2
TC_BA = 3
TC_PM = 4
TC_PV = 5
TC_PW = 6
TC_MX = 7  # + HBM type 0..3 (M weight, M kv, V act, V kv): 1 if MX
TC_VROW_BASE = 11
TC_MTILE_BASE = 12
TC_FPW_BASE = 13
TC_INTW_BASE = 14
TC_TOTAL = 15
TC_N = 16

MAX_RANGES = 8

# ---- the register part of the resource sets, from the opcode table
#: register role kinds: a gp / f / a operand, SCALE / STRIDE / VMASK, the innermost loop counter (C_BREAK)
RK_GP, RK_F, RK_A, RK_LOOP, RK_SCALE, RK_STRIDE, RK_VMASK = range(7)
_SPECIAL_KIND = {"SCALE": RK_SCALE, "STRIDE": RK_STRIDE, "V_MASK": RK_VMASK, "LOOP": RK_LOOP}
_OPERAND_KIND = {"gp": RK_GP, "f": RK_F, "a": RK_A}
_REG_FIELD = {"rd": 0, "rs1": 1, "rs2": 2}
#: V_TOPK experts / selections per policy (isa.md §6.2)
TOPK_E = np.array([e for e, _k in TOPK_POLICIES], dtype=np.int64)
TOPK_K = np.array([k for _e, k in TOPK_POLICIES], dtype=np.int64)


def _register_roles():
    """(reads[op, k, (kind, field)], n_reads, writes[...], n_writes, has rmask, has rstride) from the table."""
    reads = np.zeros((N_OPCODES, 4, 2), dtype=np.int64)
    writes = np.zeros((N_OPCODES, 2, 2), dtype=np.int64)
    n_r = np.zeros(N_OPCODES, dtype=np.int64)
    n_w = np.zeros(N_OPCODES, dtype=np.int64)
    rmask = np.zeros(N_OPCODES, dtype=np.int64)
    rstride = np.zeros(N_OPCODES, dtype=np.int64)
    for i in INSTRUCTIONS:
        for o in i.operands:
            if o.kind in _OPERAND_KIND and o.field in _REG_FIELD:
                role = (_OPERAND_KIND[o.kind], _REG_FIELD[o.field])
                if o.name not in i.writes:
                    reads[i.opcode, n_r[i.opcode]] = role
                    n_r[i.opcode] += 1
                if o.name in i.writes or o.name in i.updates:
                    writes[i.opcode, n_w[i.opcode]] = role
                    n_w[i.opcode] += 1
            rmask[i.opcode] |= o.name == "rmask"
            rstride[i.opcode] |= o.name == "rstride"
        for w in i.writes:
            if w in _SPECIAL_KIND:
                writes[i.opcode, n_w[i.opcode]] = (_SPECIAL_KIND[w], 0)
                n_w[i.opcode] += 1
    return reads, n_r, writes, n_w, rmask, rstride


_RREG, _N_RREG, _WREG, _N_WREG, _RMASK, _RSTRIDE = _register_roles()
_FAM = opcode_families()
_ALU = opcode_alus()
_NOOP = np.array(
    [int(any(i.opcode == o and i.noop_if_rd0 for i in INSTRUCTIONS)) for o in range(N_OPCODES)], dtype=np.int64
)
_VF = np.array(
    [
        int(any(i.opcode == o and i.family == "vbin" and i.operands[2].kind == "f" for i in INSTRUCTIONS))
        for o in range(N_OPCODES)
    ],
    dtype=np.int64,
)
#: most DMA blocks the preallocated per-run scratch holds (see TimingState)
SCRATCH_CAP = 1 << 16

# ---- trace record slots
#: memory ranges a record keeps (the most any instruction touches is 3: V_*_VV reads two rows, writes one)
MEM_SLOTS = 4
#: the fields of one memory slot: space (MEM_*), op (0 read, 1 write), first index, count, step
MEM_SLOT_FIELDS = ("space", "op", "start", "count", "step")
#: leading values of the first VRAM row / FP SRAM / INT SRAM range written (raw bits: bf16, bf16, u32)
VAL_SLOTS = 4
REC_FIELDS = (
    "seq",
    "pc",
    "opcode",
    "unit",
    "issue",
    "start",
    "end",
    "reg_kind",
    "reg_idx",
    "reg_old",
    "reg_new",
    *(f"m{k}_{f}" for k in range(MEM_SLOTS) for f in MEM_SLOT_FIELDS),
    "mem_more",
    "hbm_addr",
    "hbm_rows",
    "hbm_pitch",
    "hbm_elem",
    "hbm_bytes",
    "stall_cycles",
    "stall_reason",
    "val_space",
    "val_count",
    *(f"val{k}" for k in range(VAL_SLOTS)),
)
REC_N = len(REC_FIELDS)
_F = {name: k for k, name in enumerate(REC_FIELDS)}
RC_SEQ, RC_PC, RC_OP, RC_UNIT, RC_ISSUE, RC_START, RC_END = (_F[n] for n in REC_FIELDS[:7])
RC_RKIND, RC_RIDX, RC_ROLD, RC_RNEW = _F["reg_kind"], _F["reg_idx"], _F["reg_old"], _F["reg_new"]
#: slot k's field f is at RC_MEM + MEM_SLOT_N * k + MS_*
RC_MEM, MEM_SLOT_N = _F["m0_space"], len(MEM_SLOT_FIELDS)
MS_SPACE, MS_OP, MS_START, MS_COUNT, MS_STEP = range(MEM_SLOT_N)
RC_MEM_MORE = _F["mem_more"]
RC_HADDR, RC_HROWS, RC_HPITCH, RC_HELEM, RC_HBYTES = (
    _F["hbm_" + n] for n in ("addr", "rows", "pitch", "elem", "bytes")
)
RC_STALL, RC_STALL_REASON = _F["stall_cycles"], _F["stall_reason"]
RC_VSPACE, RC_VCOUNT, RC_VAL = _F["val_space"], _F["val_count"], _F["val0"]
#: register kinds of a trace record
REG_NONE, REG_GP, REG_FP, REG_A, REG_SCALE, REG_STRIDE, REG_VMASK = range(7)
REG_KIND_NAMES = ("", "gp", "f", "a", "SCALE", "STRIDE", "V_MASK")
#: memory kinds of a trace record
MEM_NONE, MEM_VROW, MEM_MTILE, MEM_FPW, MEM_INTW = range(5)
MEM_KIND_NAMES = ("", "VRAM rows", "MRAM tiles", "FP SRAM words", "INT SRAM words")
#: the ``--vram/--mram/--fpsram/--intsram`` spaces of a memory kind (trace JSON ``mem[].space``)
MEM_SPACES = ("", "vram", "mram", "fpsram", "intsram")

#: opcode -> unit code (M V S H C = 0..4; -1 not an instruction)
UNIT_OF = opcode_units().astype(np.int64)


def check_mode(mode) -> int:
    if mode not in TIMING_MODES:
        raise ValueError(f"unknown timing mode {mode!r} (known: {', '.join(TIMING_MODES)})")
    return TIMING_MODES.index(mode)


# =============================================================================== scoreboard (shared source)


@njit(cache=True)
def _put(table, n, resource, count, step):
    """Append one resource range (first resource, count, step) to a read/write set; returns n + 1."""
    table[n, 0] = resource
    table[n, 1] = count
    table[n, 2] = step
    return n + 1


def resources_py(o, rd, rs1, rs2, rs3, f1, imm18, g_rd, g_rs1, g_rs2, aux, cv, rr, wr):
    """Read / write sets of one instruction (timing.md §4 table) as ranges ``(start, count, step)``
    in ``rr`` / ``wr``; returns ``(n_read_ranges, n_write_ranges)``. ``g_*`` = gp values at issue;
    ``aux`` = the loop register of the innermost record (C_BREAK). The register part comes from the
    opcode table (``_RREG`` / ``_WREG``), the memory part from the family. The helpers are compiled
    (callable from both the reference's Python and the core's njit copy of this function)."""
    if _NOOP[o] != 0 and rd == 0:
        return 0, 0  # zero-latency no-op: no resources
    nr, nw = _register_sets(o, rd, rs1, rs2, rs3, aux, rr, wr)
    fam = _FAM[o]
    if fam in (FAM_MAT, FAM_BMAT):
        return _matrix_sets(_ALU[o], rd, g_rd, g_rs1, g_rs2, cv, rr, nr, wr, nw)
    if fam == FAM_WO:
        return _writeout_sets(_ALU[o], rs1, imm18, g_rd, g_rs1, cv, rr, nr, wr, nw)
    return _memory_sets(fam, _ALU[o], rs2, rs3, f1, imm18, g_rd, g_rs1, g_rs2, _VF[o], cv, rr, nr, wr, nw)


@njit(cache=True)
def _register_sets(o, rd, rs1, rs2, rs3, aux, rr, wr):
    """The register reads and writes of the table's operand roles (gp0 / f0 are no resources)."""
    nr = 0
    nw = 0
    for k in range(_N_RREG[o]):
        res = _reg_resource(_RREG[o, k, 0], _RREG[o, k, 1], rd, rs1, rs2, aux)
        if res >= 0:
            nr = _put(rr, nr, res, 1, 1)
    if _RMASK[o] != 0 and rs3 != 0:
        nr = _put(rr, nr, RS_VMASK, 1, 1)
    if _RSTRIDE[o] != 0 and rs3 == 1:
        nr = _put(rr, nr, RS_STRIDE, 1, 1)
    for k in range(_N_WREG[o]):
        res = _reg_resource(_WREG[o, k, 0], _WREG[o, k, 1], rd, rs1, rs2, aux)
        if res >= 0:
            nw = _put(wr, nw, res, 1, 1)
    return nr, nw


@njit(cache=True)
def _reg_resource(kind, fld, rd, rs1, rs2, aux):
    """Resource index of a register role (-1 for gp0 / f0); ``fld`` 0/1/2 = rd/rs1/rs2."""
    if kind >= RK_SCALE:
        return RS_SCALE + (kind - RK_SCALE)  # SCALE, STRIDE, VMASK
    idx = aux if kind == RK_LOOP else (rd if fld == 0 else (rs1 if fld == 1 else rs2))
    if kind == RK_A:
        return RS_A + idx
    if idx <= 0:
        return -1
    return (RS_FP if kind == RK_F else RS_GP) + idx


@njit(cache=True)
def _matrix_sets(alu, rd, g_rd, g_rs1, g_rs2, cv, rr, nr, wr, nw):
    """M_MM/M_TMM/M_MV/M_TMV/M_B*: the tile, the vector rows and the accumulator."""
    M = cv[TC_M]
    m, v = (g_rs2, g_rs1) if alu == ALU_TMM else (g_rs1, g_rs2)
    if alu in (ALU_BMV, ALU_BTMV):
        m = m + g_rd
        acc, nv = RS_ACC_HV, 1
    elif alu in (ALU_MM, ALU_TMM):
        acc, nv = RS_ACC_M, cv[TC_B]
    elif alu in (ALU_MV, ALU_TMV):
        acc, nv = RS_ACC_V, 1
    else:
        acc, nv = RS_ACC_HM, M
    nr = _put(rr, nr, cv[TC_MTILE_BASE] + m // (M * M), 1, 1)
    nr = _put(rr, nr, cv[TC_VROW_BASE] + v // cv[TC_V], nv, 1)
    nr = _put(rr, nr, acc, 1, 1)
    nw = _put(wr, nw, acc, 1, 1)
    return nr, nw


@njit(cache=True)
def _writeout_sets(alu, rs1, imm18, g_rd, g_rs1, cv, rr, nr, wr, nw):
    """M_*_WO: the accumulator and the VRAM rows written (M_MM_WO / M_MV_WO also read them: lanes merge)."""
    M = cv[TC_M]
    V = cv[TC_V]
    VB = cv[TC_VROW_BASE]
    addr = g_rd + imm18
    vo = addr % M
    if alu == ALU_MM:
        s = g_rs1 if rs1 != 0 else 1
        acc, start, cnt, step, rdrow = RS_ACC_M, VB + (addr - vo) // V, cv[TC_B], (M * s) // V, True
    elif alu == ALU_MV:
        acc, start, cnt, step, rdrow = RS_ACC_V, VB + (addr - vo) // V, 1, 1, True
    elif alu == ALU_BMM:
        acc, start, cnt, step, rdrow = RS_ACC_HM, VB + addr // V, cv[TC_BA] * M, 1, False
    else:
        acc, start, cnt, step, rdrow = RS_ACC_HV, VB + addr // V, cv[TC_BA], 1, False
    nr = _put(rr, nr, acc, 1, 1)
    if rdrow:
        nr = _put(rr, nr, start, cnt, step)
    nw = _put(wr, nw, start, cnt, step)
    nw = _put(wr, nw, acc, 1, 1)
    return nr, nw


@njit(cache=True)
def _memory_sets(fam, alu, rs2, rs3, f1, imm18, g_rd, g_rs1, g_rs2, vf, cv, rr, nr, wr, nw):
    """The memory part of the vector, scalar, DMA and control families."""
    V = cv[TC_V]
    VB = cv[TC_VROW_BASE]
    if fam in (FAM_VBIN, FAM_VUNARY, FAM_SHIFT):
        nr = _put(rr, nr, VB + g_rs1 // V, 1, 1)
        if fam == FAM_VBIN and vf == 0:
            nr = _put(rr, nr, VB + g_rs2 // V, 1, 1)
        nw = _put(wr, nw, VB + g_rd // V, 1, 1)
    elif fam == FAM_REDUCE:
        nr = _put(rr, nr, VB + g_rs1 // V, 1, 1)
    elif fam == FAM_TOPK:
        nr = _put(rr, nr, VB + g_rs1 // V, (TOPK_E[rs3 & 1] + V - 1) // V, 1)
        nw = _put(wr, nw, cv[TC_FPW_BASE] + g_rd, TOPK_K[rs3 & 1], 1)
        nw = _put(wr, nw, cv[TC_INTW_BASE] + g_rs2, TOPK_K[rs3 & 1], 1)
    elif fam in (FAM_FPMEM, FAM_INTMEM):
        word = (cv[TC_FPW_BASE] if fam == FAM_FPMEM else cv[TC_INTW_BASE]) + g_rs1 + imm18
        if alu == ALU_LOAD:
            nr = _put(rr, nr, word, 1, 1)
        else:
            nw = _put(wr, nw, word, 1, 1)
    elif fam == FAM_MAPV:
        nr = _put(rr, nr, cv[TC_FPW_BASE] + g_rs1 + imm18, V, 1)
        nw = _put(wr, nw, VB + g_rd // V, 1, 1)
    elif fam == FAM_DMA:
        nr, nw = _dma_sets(alu, f1, g_rd, cv, rr, nr, wr, nw)
    return nr, nw


@njit(cache=True)
def _dma_sets(alu, f1, g_rd, cv, rr, nr, wr, nw):
    """H_*: SCALE when the HBM type is MX, then the SRAM rows or tiles moved."""
    M = cv[TC_M]
    V = cv[TC_V]
    t = (0 if alu == ALU_PREFETCH_M else 2) + (0 if f1 == 0 else 1)
    if cv[TC_MX + t] != 0:
        nr = _put(rr, nr, RS_SCALE, 1, 1)
    if alu == ALU_PREFETCH_M:
        nw = _put(wr, nw, cv[TC_MTILE_BASE] + g_rd // (M * M), cv[TC_PM] // M, 1)
    elif alu == ALU_PREFETCH_V:
        nw = _put(wr, nw, cv[TC_VROW_BASE] + g_rd // V, cv[TC_PV], 1)
    else:
        nr = _put(rr, nr, cv[TC_VROW_BASE] + g_rd // V, cv[TC_PW], 1)
    return nr, nw


def sb_issue_py(ts, unit, rr, nr, wr, nw, ready, rdone):
    """Issue cycle of the next instruction (timing.md §4); also books its stall (unit / data) and leaves it with
    its reason (rtl.S_*: unit, operand not ready, write after read) in ``ts[T_LAST_STALL]`` /
    ``ts[T_STALL_REASON]`` for the caller's per-pc row (no array more to pass on the hot path)."""
    prev = ts[T_LAST_ISSUE] + 1
    uf = ts[T_UNIT_FREE + unit] if unit >= 0 else 0
    raw = 0
    war = 0
    for i in range(nr):
        idx = rr[i, 0]
        for _k in range(rr[i, 1]):
            if ready[idx] > raw:
                raw = ready[idx]
            idx += rr[i, 2]
    for i in range(nw):
        idx = wr[i, 0]
        for _k in range(wr[i, 1]):
            if ready[idx] > raw:
                raw = ready[idx]
            if idx >= MEM_FIRST and rdone[idx] > war:
                war = rdone[idx]
            idx += wr[i, 2]
    issue = max(prev, uf, raw, war)
    stall = issue - prev
    ts[T_LAST_STALL] = stall
    if stall > 0:
        reason = stall_reason(uf, raw, war)
        ts[T_STALL_REASON] = reason
        ts[T_STALL_UNIT if reason == S_UNIT else T_STALL_DATA] += stall
    return issue


@njit(cache=True)
def stall_reason(uf, raw, war):
    """The reason of a stall: the unit if its busy term decided the issue, else the later of operand ready
    (RAW / WAW) and write after read."""
    if uf >= raw and uf >= war:
        return S_UNIT
    return S_RAW if raw >= war else S_WAR


def rtl_issue_py(ts, pipe, cmask, rr, nr, wr, nw, ready, rdone, wcls, hz, pcx, pc):
    """Issue cycle under the rtl model (docs/timing.md): the §4 terms with the pipeline's occupancy, then a hazard
    (the producer class ``wcls`` of a resource, the consumer mask ``cmask``) that decides the issue cycle adds its
    stall and its recovery; books every stall part on pc's row of ``pcx`` and leaves the whole stall and its main
    reason (the largest part) in ``ts[T_LAST_STALL]`` / ``ts[T_STALL_REASON]``, as :func:`sb_issue_py` does."""
    prev = ts[T_LAST_ISSUE] + 1
    uf = ts[T_PIPE_FREE + pipe] if pipe >= 0 else 0
    raw, hzt, hzk = _rtl_scan(rr, nr, ready, wcls, cmask, hz, 0, 0, 0, 0)
    raw, hzt, hzk = _rtl_scan(wr, nw, ready, wcls, cmask, hz, 1, raw, hzt, hzk)
    war = _war_term(wr, nw, rdone)
    base = max(prev, uf, raw, war)
    reason = stall_reason(uf, raw, war)
    ts[T_LAST_STALL], ts[T_STALL_REASON] = base - prev, reason  # the stall and its main reason (the trace)
    if base > prev:
        pcx[pc, X_STALL + reason] += base - prev
    if hzt <= base:
        return base
    hazard, recovery = hzt - base, hz[hzk, HZ_RECOVERY]
    pcx[pc, X_STALL + S_HAZARD0 + hzk - 1] += hazard
    pcx[pc, X_STALL + S_RECOVERY] += recovery
    ts[T_LAST_STALL] = base - prev + hazard + recovery
    if hazard > base - prev:  # the main reason: the largest part (the earlier stall column on a tie)
        ts[T_STALL_REASON] = S_HAZARD0 + hzk - 1
    if recovery > max(base - prev, hazard):
        ts[T_STALL_REASON] = S_RECOVERY
    return hzt + recovery


@njit(cache=True)
def _rtl_scan(rs, n, ready, wcls, cmask, hz, waw, raw, hzt, hzk):
    """The latest ``ready`` of a resource set and its latest hazard term (ready + stall of a resource whose producer
    class is a hazard this consumer has, of dependence ``waw``): (raw, hazard term, hazard class)."""
    for i in range(n):
        idx = rs[i, 0]
        for _k in range(rs[i, 1]):
            t = ready[idx]
            if t > raw:
                raw = t
            c = wcls[idx]
            if c > 0 and (cmask >> c) & 1 != 0 and hz[c, HZ_WAW] == waw and t + hz[c, HZ_STALL] > hzt:
                hzt = t + hz[c, HZ_STALL]
                hzk = c
            idx += rs[i, 2]
    return raw, hzt, hzk


@njit(cache=True)
def _war_term(wr, nw, rdone):
    """The latest read_done of the memory / accumulator resources a write set names (WAR)."""
    war = 0
    for i in range(nw):
        idx = wr[i, 0]
        for _k in range(wr[i, 1]):
            if idx >= MEM_FIRST and rdone[idx] > war:
                war = rdone[idx]
            idx += wr[i, 2]
    return war


def rtl_commit_py(ts, pipe, issue, cost, pclass, rr, nr, wr, nw, ready, rdone, wcls):
    """Book an instruction issued under the rtl model: ``cost`` = (ready, done, ii) latencies; the pipeline is
    occupied for ii, its writes are ready (with its producer class) after ready, its memory reads are done after
    ii, the run ends no earlier than its done."""
    ts[T_LAST_ISSUE] = issue
    occ = issue + cost[2]
    if pipe >= 0:
        ts[T_PIPE_FREE + pipe] = occ
    rdy = issue + cost[0]
    for i in range(nw):
        idx = wr[i, 0]
        for _k in range(wr[i, 1]):
            ready[idx] = rdy
            wcls[idx] = pclass
            idx += wr[i, 2]
    for i in range(nr):
        idx = rr[i, 0]
        if idx + (rr[i, 1] - 1) * rr[i, 2] >= MEM_FIRST:
            for _k in range(rr[i, 1]):
                if idx >= MEM_FIRST and rdone[idx] < occ:
                    rdone[idx] = occ
                idx += rr[i, 2]
    done = issue + cost[1]
    if done > ts[T_CYCLES]:
        ts[T_CYCLES] = done
    return done


def sb_commit_py(ts, unit, issue, lat, rr, nr, wr, nw, ready, rdone):
    """Book an issued instruction: unit busy, ready[] of its writes, read_done[] of its memory reads."""
    done = issue + lat
    ts[T_LAST_ISSUE] = issue
    if unit >= 0:
        ts[T_UNIT_FREE + unit] = done
        ts[T_BUSY + unit] += lat
    for i in range(nw):
        idx = wr[i, 0]
        for _k in range(wr[i, 1]):
            ready[idx] = done
            idx += wr[i, 2]
    for i in range(nr):
        idx = rr[i, 0]
        if idx + (rr[i, 1] - 1) * rr[i, 2] >= MEM_FIRST:
            for _k in range(rr[i, 1]):
                if idx >= MEM_FIRST and rdone[idx] < done:
                    rdone[idx] = done
                idx += rr[i, 2]
    if done > ts[T_CYCLES]:
        ts[T_CYCLES] = done
    return done


def dest_reg_py(o, rd, aux):
    """(REG_* kind, index) of the architectural register an instruction writes (for the trace): the first
    written (or updated) register role of the opcode table."""
    if _N_WREG[o] == 0:
        return REG_NONE, 0
    kind = _WREG[o, 0, 0]
    if kind >= RK_SCALE:
        return REG_SCALE + (kind - RK_SCALE), 0
    idx = aux if kind == RK_LOOP else rd  # every written operand register is in rd
    if kind == RK_A:
        return REG_A, idx
    if idx <= 0 or (kind == RK_F and idx >= 8):
        return REG_NONE, 0
    return (REG_FP if kind == RK_F else REG_GP), idx


def trace_record_py(tbuf, tcount, seq, pc, o, unit, issue, lat, reg, sets, hbm, stall, cv, sram):
    """Append one record (REC_FIELDS) to the ring ``tbuf``. ``reg`` = (kind, index, old, new) of the register
    written; ``sets`` = (nr, rr, nw, wr): the read and write sets (:func:`resources_py`), whose memory ranges
    fill the memory slots, reads first; ``hbm`` = (address, rows, pitch, row bytes, bytes moved) of an H_*;
    ``stall`` = (cycles, STALL_REASONS index); ``sram`` = (vram, fp_sram, int_sram) after the instruction:
    the leading values of the first VRAM row / FP SRAM / INT SRAM range it wrote."""
    cap = tbuf.shape[0]
    r = tbuf[tcount[0] % cap]
    tcount[0] += 1
    for k in range(REC_N):
        r[k] = 0
    r[RC_SEQ] = seq
    r[RC_PC] = pc
    r[RC_OP] = o
    r[RC_UNIT] = unit
    r[RC_ISSUE] = issue
    r[RC_START] = issue
    r[RC_END] = issue + lat
    r[RC_RKIND], r[RC_RIDX], r[RC_ROLD], r[RC_RNEW] = reg[0], reg[1], reg[2], reg[3]
    nr, rr, nw, wr = sets
    slot = _record_ranges(r, 0, 0, rr, nr, cv)
    _record_ranges(r, slot, 1, wr, nw, cv)
    for k in range(5):
        r[RC_HADDR + k] = hbm[k]
    r[RC_STALL], r[RC_STALL_REASON] = stall[0], stall[1]
    _record_values(r, sram)


@njit(cache=True)
def _record_ranges(r, slot, op, rs, n, cv):
    """The memory ranges of ``rs[:n]`` (reads: op 0, writes: op 1) into the record's slots from ``slot``;
    returns the next free slot (ranges past the last slot are counted in ``mem_more``)."""
    for i in range(n):
        kind, start = _mem_kind(rs[i, 0], cv)
        if kind == MEM_NONE:
            continue
        if slot == MEM_SLOTS:
            r[RC_MEM_MORE] += 1
            continue
        base = RC_MEM + MEM_SLOT_N * slot
        r[base + MS_SPACE], r[base + MS_OP], r[base + MS_START] = kind, op, start
        r[base + MS_COUNT], r[base + MS_STEP] = rs[i, 1], rs[i, 2]
        slot += 1
    return slot


@njit(cache=True)
def _mem_kind(idx, cv):
    """(MEM_* kind, index in its memory) of a resource index (MEM_NONE: a register or an accumulator)."""
    if idx >= cv[TC_INTW_BASE]:
        return MEM_INTW, idx - cv[TC_INTW_BASE]
    if idx >= cv[TC_FPW_BASE]:
        return MEM_FPW, idx - cv[TC_FPW_BASE]
    if idx >= cv[TC_MTILE_BASE]:
        return MEM_MTILE, idx - cv[TC_MTILE_BASE]
    if idx >= cv[TC_VROW_BASE]:
        return MEM_VROW, idx - cv[TC_VROW_BASE]
    return MEM_NONE, 0


@njit(cache=True)
def _record_values(r, sram):
    """The leading values (raw bits) of the first VRAM row / FP SRAM / INT SRAM range the record writes."""
    vram, fp_sram, int_sram = sram
    for s in range(MEM_SLOTS):
        base = RC_MEM + MEM_SLOT_N * s
        kind, start = r[base + MS_SPACE], r[base + MS_START]
        if r[base + MS_OP] != 1 or kind in (MEM_MTILE, MEM_NONE):
            continue
        if kind == MEM_VROW:
            n = min(VAL_SLOTS, vram.shape[1])
            for k in range(n):
                r[RC_VAL + k] = vram[start, k]
        elif kind == MEM_FPW:
            n = min(VAL_SLOTS, r[base + MS_COUNT], fp_sram.shape[0] - start)
            for k in range(n):
                r[RC_VAL + k] = fp_sram[start + k]
        else:
            n = min(VAL_SLOTS, r[base + MS_COUNT], int_sram.shape[0] - start)
            for k in range(n):
                r[RC_VAL + k] = int_sram[start + k]
        r[RC_VSPACE], r[RC_VCOUNT] = kind, n
        return


resources_nb = njit(cache=True)(resources_py)
trace_record_nb = njit(cache=True)(trace_record_py)
sb_issue_nb = njit(cache=True)(sb_issue_py)
sb_commit_nb = njit(cache=True)(sb_commit_py)
rtl_issue_nb = njit(cache=True)(rtl_issue_py)
rtl_commit_nb = njit(cache=True)(rtl_commit_py)
dest_reg_nb = njit(cache=True)(dest_reg_py)


# =============================================================================== per-run state


class TimingState:
    """All timing state of one run (see the module docstring)."""

    def __init__(self, cfg, mode: str = "serial", trace_capacity: int = 0, backend: str = "numba"):
        from ..hbm.timing import (
            dma_geometry_table,
            max_dma_blocks,
            new_dma_scratch,
            new_stats,
            new_timing_state,
            timing_params,
        )

        self.cfg = cfg
        self.mode = mode
        self.mode_code = check_mode(mode)
        self.ts = np.zeros(T_N, dtype=np.int64)
        self.ts[T_LAST_ISSUE] = -1
        self.ts[T_MODE] = self.mode_code
        self.cv = self.cfg_vector(cfg)
        total = int(self.cv[TC_TOTAL]) if self.mode_code != MODE_SERIAL else 1
        self.ready = np.zeros(total, dtype=np.int64)
        self.rdone = np.zeros(total, dtype=np.int64)
        #: rtl: the hazard producer class of each resource's last writer
        self.wcls = np.zeros(total if self.mode_code == MODE_RTL else 1, dtype=np.int64)
        self.hz = rtl_table(cfg).hz if self.mode_code == MODE_RTL else np.zeros((1, 3), dtype=np.int64)
        self.params = timing_params(cfg)
        self.hp = self.params.as_array()
        self.geom = dma_geometry_table(cfg)
        self.ch, self.bank = new_timing_state(self.params)
        self.hstats = new_stats(self.params)
        # scratch for the DMA block lists: the bound of the configuration, capped (a configuration with
        # huge P_* gets a one-off scratch inside the run loop for an instruction that needs more)
        self.max_blocks = min(max_dma_blocks(cfg, self.params), SCRATCH_CAP)
        self.blocks, self.hset, self.work = new_dma_scratch(self.params, self.max_blocks)
        self.payload = np.zeros(2, dtype=np.int64)  # exact bytes read / written (H_*)
        cap = int(trace_capacity)
        if cap < 0:
            raise ValueError("trace capacity must be >= 0")
        self.trace_capacity = cap
        self.tbuf = np.zeros((max(cap, 1), REC_N), dtype=np.int64)
        self.tcount = np.zeros(1, dtype=np.int64)
        if backend == "reference":
            from ..hbm.timing import PyTimingState, new_stats_py

            self.py_hbm = PyTimingState(self.params)
            self.py_hstats = new_stats_py(self.params)

    @staticmethod
    def cfg_vector(cfg) -> np.ndarray:
        cv = np.zeros(TC_N, dtype=np.int64)
        cv[TC_M], cv[TC_V], cv[TC_B], cv[TC_BA] = cfg.MLEN, cfg.VLEN, cfg.BLEN, cfg.BROADCAST_AMOUNT
        cv[TC_PM], cv[TC_PV], cv[TC_PW] = cfg.P_M, cfg.P_V, cfg.P_W
        for t, name in enumerate(("HBM_M_WEIGHT_TYPE", "HBM_M_KV_TYPE", "HBM_V_ACT_TYPE", "HBM_V_KV_TYPE")):
            cv[TC_MX + t] = 1 if cfg.hbm_type(name).is_mx else 0
        cv[TC_VROW_BASE] = N_REGRES
        cv[TC_MTILE_BASE] = cv[TC_VROW_BASE] + cfg.VECTOR_SRAM_SIZE
        cv[TC_FPW_BASE] = cv[TC_MTILE_BASE] + cfg.mram_tiles
        cv[TC_INTW_BASE] = cv[TC_FPW_BASE] + cfg.FP_SRAM_SIZE
        cv[TC_TOTAL] = cv[TC_INTW_BASE] + cfg.INT_SRAM_SIZE
        return cv

    # ---- results
    @property
    def cycles(self) -> int:
        return int(self.ts[T_CYCLES])

    def busy(self) -> dict:
        return {u: int(self.ts[T_BUSY + k]) for k, u in enumerate(UNIT_NAMES)}

    def hbm_counts(self) -> dict:
        """hbm.timing.stats_dict of this run (either backend)."""
        from ..hbm.timing import stats_dict

        if hasattr(self, "py_hstats"):
            d = dict(self.py_hstats)
            d["per_channel_requests"] = [int(x) for x in d["per_channel_requests"]]
            return d
        return stats_dict(self.hstats)

    def trace_records(self) -> np.ndarray:
        """The retained trace records, oldest first (int64[n, REC_N])."""
        n = int(self.tcount[0])
        cap = self.trace_capacity
        if cap == 0 or n == 0:
            return np.zeros((0, REC_N), dtype=np.int64)
        if n <= cap:
            return self.tbuf[:n].copy()
        k = n % cap
        return np.concatenate([self.tbuf[k:], self.tbuf[:k]])
