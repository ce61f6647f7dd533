"""Reference interpreter: plain Python/numpy, written for clarity, one small function per instruction.

One job: execute a program on a :class:`~plena_sim.memory.state.MachineState` exactly as ``isa.md`` and
``memory.md`` §5 say, so that the fast Numba core (``plena_sim.core``) can be checked against it array
by array and fault record by fault record.

Entry point: :func:`execute` ``(state, program_words, max_instructions=10**9) -> Outcome``. It runs from
``state.ctrl[CTRL_PC]`` until the PC leaves the program or a fault occurs, mutating the state arrays.
On a fault the state is exactly as before the faulting instruction (precise faults, see
:mod:`plena_sim.faults` for the record layout and the check order) and ``Outcome.fault`` holds the
record; the PC stays at the faulting instruction.

Dispatch: :data:`HANDLERS` maps every mnemonic of :mod:`isa.table` to its function ``op_<MNEMONIC>``
(checked complete at import); :data:`BY_OPCODE` is the same keyed by opcode number.

Each handler makes **all** of its checks first (via the ``_check_*`` / ``_fault`` helpers, which raise
:class:`_Fault`) and only then changes state. In a timing-only run (``execute(..., functional=False)``) the
TO-DATA check (:func:`_check_to_data`) comes between an instruction's IL / CF / LP checks and its AL / BD checks,
and a handler of the datapath (FP scalar, vector, matrix, DMA) returns right after its checks.

Numerics follow isa.md §5-§7 literally:

* dot products: float64, sequential in ascending k from +0.0 (vectorised only across *outputs*, never
  across k; no np.dot / np.sum / BLAS), ``p_s = f32(p * s)``, ``acc = f32(acc + p_s)``;
* vector ops: numpy float32 arithmetic, then one bf16 RNE rounding on the write;
* exp: ``math.exp`` (float64, the C library) of ``clamp(a, -88, 88)``, rounded to f32;
* V_RED_SUM: float64 sequential sum of the enabled lanes -> f32 -> f32 add to ``fp[rd]`` -> bf16.

Decisions where the spec leaves a bit pattern open (documented for the Numba core to mirror):

* NaN propagation of binary f32 arithmetic (``a + b``, ``a - b``, ``a * b``, V_RED_SUM's final
  ``fp[rd] + S``): the result is the *first* operand's NaN if it is a NaN, else the second operand's
  NaN if that is a NaN (the x86 SSE rule, which the Numba core gets from the hardware); the operand
  order is the one written in isa.md (``f - a`` for V_SUB_VF with rorder != 0). numpy *scalar*
  arithmetic does not follow this rule, so :func:`_nan_first` applies it explicitly. NaNs created from
  non-NaN operands (``inf - inf``, ``0 * inf``, ``sqrt(-1)``) are the platform's default NaN.
* V_MAX_VF / V_MIN_VF with a NaN input return ``a``'s NaN if ``a`` is NaN, else ``f``'s NaN (then bf16
  canonicalises it to ``sign | 0x7FC0``).
* V_EXP_V / S_EXP_FP of a NaN return that NaN (sign kept).
* V_RED_MAX with every candidate NaN leaves ``fp[rd]`` bit-for-bit unchanged; otherwise the chosen
  value's bf16 bits are copied exactly.
* Cycles: :func:`plena_sim.timing.latency.instruction_latency` for the fixed latencies; H_* latencies from
  the pure-Python HBM twin :func:`plena_sim.hbm.timing.schedule_py`; serial (timing.md §3) or overlap
  (§4, the plain-Python scoreboard functions ``resources_py`` / ``sb_issue_py`` / ``sb_commit_py`` of
  :mod:`plena_sim.timing.scoreboard`, the same source the core compiles) accounting.
* Trace: with a trace capacity, every retired instruction appends the same record as the core's
  (``plena_sim.timing.scoreboard.trace_record_py`` into the TimingState's ring), so traces compare record for record.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from isa.encoding import decode_program
from isa.program import Program
from isa.table import BY_MNEMONIC, EXP_CLAMP, FIELDS, INSTRUCTIONS, TOPK_POLICIES, Instr

from . import faults as F
from .config.hardware import MxType
from .errors import RunStopped
from .hbm.storage import hbm_note_read
from .limits.budget import work_table
from .memory.state import CTRL_LOOP_DEPTH, CTRL_PC, CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK, MachineState, Outcome
from .numerics import bf16
from .numerics.formats import fp_params, mx_decode_row, mx_encode_row, plain_decode_row, plain_encode_row
from .routing import Routing
from .timing.latency import NOOP_IF_RD0, instruction_latency, latency_table, topk_experts

__all__ = ["execute", "HANDLERS", "BY_OPCODE"]

U32 = 0xFFFFFFFF
_OPC = FIELDS["opcode"]
_OP_LOOP_END = BY_MNEMONIC["C_LOOP_END"].opcode


def _nan_first(a, b, result):
    """``result`` of a binary f32 op, except that a NaN operand propagates: a's NaN first, then b's
    (element-wise for arrays; ``b`` may be a scalar)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    out = np.where(np.isnan(a), a, np.where(np.isnan(b), b, result)).astype(np.float32)
    return out if out.ndim else np.float32(out)


def _exp_f32(v: float) -> np.float32:
    """f32(exp(clamp(v, -88, 88))) with exp in float64; NaN stays NaN."""
    if v != v:
        return np.float32(v)
    v = -EXP_CLAMP if v < -EXP_CLAMP else (EXP_CLAMP if v > EXP_CLAMP else v)
    return np.float32(math.exp(v))


# ====================================================================== faults


class _Fault(Exception):
    def __init__(self, rec):
        super().__init__(rec)
        self.rec = rec


def _fault(
    rule_id: str,
    pc: int,
    operand: str | None = None,
    value: int = 0,
    index: int = -1,
    limit: int = -1,
    x6: int = 0,
    x7: int = 0,
) -> NoReturn:
    rec = F.blank_record(F.RULE_BY_ID[rule_id].code, pc)
    rec[F.FAULT_OPERAND] = -1 if operand is None else F.OPERAND_INDEX[operand]
    rec[F.FAULT_VALUE] = min(int(value), F.INT64_MAX)
    rec[F.FAULT_INDEX] = int(index)
    rec[F.FAULT_LIMIT] = min(int(limit), F.INT64_MAX)
    rec[F.FAULT_X6] = min(int(x6), F.INT64_MAX)
    rec[F.FAULT_X7] = min(int(x7), F.INT64_MAX)
    raise _Fault(rec)


# ====================================================================== run context


@dataclass(frozen=True)
class Fields:
    """The raw fields of one instruction word (isa.md §3) and its pc."""

    pc: int
    word: int
    opcode: int
    rd: int
    rs1: int
    rs2: int
    rs3: int
    funct1: int
    imm18: int
    imm22: int

    @classmethod
    def of(cls, pc: int, word: int) -> Fields:
        g = {name: (word >> f.shift) & f.max for name, f in FIELDS.items()}
        return cls(pc, word, g["opcode"], g["rd"], g["rs1"], g["rs2"], g["rs3"], g["funct1"], g["imm18"], g["imm22"])


class _Run:
    """Mutable context of one :func:`execute` call (``functional=False``: a timing-only run, see :func:`execute`)."""

    def __init__(self, state: MachineState, words: list[int], functional: bool = True, routing: Routing | None = None):
        self.st = state
        self.cfg = state.cfg
        self.words = words
        self.functional = functional
        self.routing = routing
        self.next_pc = 0
        self.hbm_bytes = 0
        self.counters = {"matrix_macs": 0, "mx_nan": 0, "mx_saturated": 0}

    # ---- register access
    def gp(self, i: int) -> int:
        return int(self.st.gp[i])

    def set_gp(self, i: int, value: int) -> None:
        if i != 0:
            self.st.gp[i] = value & U32

    def fp(self, i: int) -> np.float32:
        return bf16.decode_scalar(int(self.st.fp[i]))

    def set_fp_bits(self, i: int, bits: int) -> None:
        if i != 0:
            self.st.fp[i] = bits

    # ---- VRAM rows
    def vread(self, addr: int) -> np.ndarray:
        return bf16.decode(self.st.vram[addr // self.cfg.VLEN])

    def vwrite(self, addr: int, values) -> None:
        self.st.vram[addr // self.cfg.VLEN] = bf16.encode(values)

    # ---- taint (timing-only runs): which gp registers / INT SRAM words hold data-derived values
    def tainted(self, i: int) -> bool:
        return (int(self.st.taint[0]) >> i) & 1 == 1

    def set_taint(self, i: int, bit: bool) -> None:
        """Mark gp ``i`` data-derived (``bit``) or not; nothing in a functional run or for gp0."""
        if self.functional or i == 0:
            return
        self.st.taint[0] = (int(self.st.taint[0]) & ~(1 << i)) | (int(bit) << i)

    def set_int_taint(self, addr: int, bit: bool) -> None:
        """Mark INT SRAM word ``addr`` data-derived or not; nothing in a functional run."""
        if not self.functional:
            self.st.int_taint[addr] = int(bit)

    def lane_enable(self) -> np.ndarray:
        """bool[V]: lanes whose head is enabled in V_MASK (heads >= 32 never)."""
        V, H = self.cfg.VLEN, self.cfg.HLEN
        mask = int(self.st.ctrl[CTRL_V_MASK]) & U32
        return np.array([(j // H) < 32 and (mask >> (j // H)) & 1 == 1 for j in range(V)], dtype=bool)


# ====================================================================== shared checks


def _check_fp_field(f: Fields, name: str) -> None:
    v = getattr(f, name)
    if v >= 8:
        _fault("IL-FREG", f.pc, name, v, limit=8)


def _check_a_field(f: Fields, name: str) -> None:
    v = getattr(f, name)
    if v >= 8:
        _fault("IL-AREG", f.pc, name, v, limit=8)


def _al_vrow(r: _Run, f: Fields, field: str, addr: int) -> None:
    V = r.cfg.VLEN
    if addr % V:
        _fault("AL-VROW", f.pc, field, addr, limit=V, x6=addr % V)


def _bd_vrow(r: _Run, f: Fields, field: str, addr: int, index: int = 0) -> None:
    row = addr // r.cfg.VLEN
    if row >= r.cfg.VECTOR_SRAM_SIZE:
        _fault("BD-VROW", f.pc, field, row, index=index, limit=r.cfg.VECTOR_SRAM_SIZE, x6=addr)


def _bd_mtile(r: _Run, f: Fields, field: str, addr: int, index: int = 0) -> None:
    tile = addr // (r.cfg.MLEN * r.cfg.MLEN)
    if tile >= r.cfg.mram_tiles:
        _fault("BD-MTILE", f.pc, field, tile, index=index, limit=r.cfg.mram_tiles, x6=addr)


def _check_cf_vm(r: _Run, f: Fields) -> None:
    if r.cfg.VLEN != r.cfg.MLEN:
        _fault("CF-VM", f.pc, None, r.cfg.VLEN, limit=r.cfg.MLEN)


def _check_cf_ba(r: _Run, f: Fields) -> None:
    c = r.cfg
    if c.BROADCAST_AMOUNT * c.HLEN != c.MLEN:
        _fault("CF-BA", f.pc, None, c.BROADCAST_AMOUNT * c.HLEN, limit=c.MLEN, x6=c.BROADCAST_AMOUNT, x7=c.HLEN)


def _bd_fps(r: _Run, f: Fields, field: str, addr: int, n: int) -> None:
    if addr + n > r.cfg.FP_SRAM_SIZE:
        _fault("BD-FPS", f.pc, field, addr, limit=r.cfg.FP_SRAM_SIZE, x6=n)


def _bd_ints(r: _Run, f: Fields, field: str, addr: int, n: int) -> None:
    if addr + n > r.cfg.INT_SRAM_SIZE:
        _fault("BD-INTS", f.pc, field, addr, limit=r.cfg.INT_SRAM_SIZE, x6=n)


def _guarded_fields(instr: Instr) -> tuple[str, ...]:
    """The gp fields a timing-only run requires to hold no data-derived value (TO-DATA), in operand order: every
    gp register read, except that the scalar integer ALU propagates taint and S_LD_INT / S_ST_INT only need a clean
    base (rs1; a stored value may be data-derived)."""
    if instr.family == "sint":
        return ()
    if instr.family == "intmem":
        return ("rs1",)
    return instr.gp_reads


_GUARDED = {i.opcode: _guarded_fields(i) for i in INSTRUCTIONS}
_GP_READS = {i.opcode: i.gp_reads for i in INSTRUCTIONS}


def _check_to_data(r: _Run, f: Fields) -> None:
    """TO-DATA (timing-only runs, after the IL / CF / LP checks, before AL / BD): a guarded gp operand holds a
    value derived from data the run does not compute."""
    if r.functional:
        return
    for name in _GUARDED[f.opcode]:
        reg = getattr(f, name)
        if r.tainted(reg):
            _fault("TO-DATA", f.pc, name, r.gp(reg), x6=reg)


# ====================================================================== matrix unit (isa.md §5)


def _dot_rows(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``P[..., i, j] = sum_k X[..., i, k] * W[k, j]`` in float64, sequential in ascending k from +0.0.

    Vectorised across outputs only; each product and each addition is one float64 rounding."""
    Xd = np.asarray(X, dtype=np.float64)
    Wd = np.asarray(W, dtype=np.float64)
    K = Xd.shape[-1]
    assert Wd.shape[0] == K
    p = np.zeros(Xd.shape[:-1] + Wd.shape[1:], dtype=np.float64)
    for k in range(K):
        p = p + Xd[..., :, k : k + 1] * Wd[k : k + 1, :]
    return p


def _accumulate(acc: np.ndarray, p: np.ndarray, s: float) -> None:
    """``acc = f32(acc + f32(p * s))`` in place (s = 1.0 or f32(BMM_SCALE) widened)."""
    p_s = (p * s).astype(np.float32)
    out = acc + p_s
    # both NaN: the accumulator's NaN, quieted (numpy's SIMD tail loops may commute the operands)
    both = np.isnan(acc) & np.isnan(p_s)
    if both.any():
        out[both] = (acc[both].view(np.uint32) | np.uint32(0x00400000)).view(np.float32)
    acc[...] = out


def _bmm_scale(r: _Run) -> float:
    return float(np.float32(r.cfg.BMM_SCALE))


def _mat_decode(r: _Run, m: int) -> tuple[int, int]:
    """(tile index, in-tile offset) of matrix address m."""
    MM = r.cfg.MLEN * r.cfg.MLEN
    return m // MM, m % MM


def _check_al_mm(r: _Run, f: Fields, field: str, m: int) -> int:
    M, B = r.cfg.MLEN, r.cfg.BLEN
    _, off = _mat_decode(r, m)
    if off % M:
        _fault("AL-MM", f.pc, field, m, limit=M, x6=off, x7=0)
    c = off // M
    if c % B:
        _fault("AL-MM", f.pc, field, m, index=c, limit=B, x6=off, x7=1)
    return c


def _check_vec_rows(r: _Run, f: Fields, field: str, v: int, n: int) -> None:
    for i in range(n):
        _bd_vrow(r, f, field, v + i * r.cfg.MLEN, i)


def _read_rows(r: _Run, v: int, n: int) -> np.ndarray:
    return np.stack([r.vread(v + i * r.cfg.MLEN) for i in range(n)])


def op_M_MM(r: _Run, f: Fields) -> None:
    c_ = r.cfg
    m, v = r.gp(f.rs1), r.gp(f.rs2)
    _check_cf_vm(r, f)
    _check_to_data(r, f)
    c = _check_al_mm(r, f, "rs1", m)
    _al_vrow(r, f, "rs2", v)
    _bd_mtile(r, f, "rs1", m)
    _check_vec_rows(r, f, "rs2", v, c_.BLEN)
    r.counters["matrix_macs"] += c_.BLEN * c_.BLEN * c_.MLEN
    if not r.functional:
        return
    T = r.st.mram[m // (c_.MLEN * c_.MLEN)]
    X = _read_rows(r, v, c_.BLEN)  # B x M
    W = T[:, c : c + c_.BLEN]  # M x B
    _accumulate(r.st.m_accum, _dot_rows(X, W), 1.0)


def op_M_TMM(r: _Run, f: Fields) -> None:
    c_ = r.cfg
    v, m = r.gp(f.rs1), r.gp(f.rs2)
    _check_cf_vm(r, f)
    _check_to_data(r, f)
    _al_vrow(r, f, "rs1", v)
    rr = _check_al_mm(r, f, "rs2", m)
    _check_vec_rows(r, f, "rs1", v, c_.BLEN)
    _bd_mtile(r, f, "rs2", m)
    r.counters["matrix_macs"] += c_.BLEN * c_.BLEN * c_.MLEN
    if not r.functional:
        return
    T = r.st.mram[m // (c_.MLEN * c_.MLEN)]
    X = _read_rows(r, v, c_.BLEN)  # B x M
    W = T[rr : rr + c_.BLEN, :].T  # M x B: W[k, j] = T[r+j][k]
    _accumulate(r.st.m_accum, _dot_rows(X, W), 1.0)


def op_M_MV(r: _Run, f: Fields) -> None:
    c_ = r.cfg
    M, B = c_.MLEN, c_.BLEN
    m, v = r.gp(f.rs1), r.gp(f.rs2)
    _check_cf_vm(r, f)
    _check_to_data(r, f)
    _, off = _mat_decode(r, m)
    if off % B:
        _fault("AL-MV", f.pc, "rs1", m, limit=B, x6=off, x7=0)
    if off >= M:
        _fault("AL-MV", f.pc, "rs1", m, limit=M, x6=off, x7=1)
    _al_vrow(r, f, "rs2", v)
    _bd_mtile(r, f, "rs1", m)
    _bd_vrow(r, f, "rs2", v)
    r.counters["matrix_macs"] += B * M
    if not r.functional:
        return
    T = r.st.mram[m // (M * M)]
    x = r.vread(v)[None, :]  # 1 x M
    W = T[:, off : off + B]  # M x B
    _accumulate(r.st.v_accum, _dot_rows(x, W)[0], 1.0)


def op_M_TMV(r: _Run, f: Fields) -> None:
    c_ = r.cfg
    M, B = c_.MLEN, c_.BLEN
    m, v = r.gp(f.rs1), r.gp(f.rs2)
    _check_cf_vm(r, f)
    _check_to_data(r, f)
    _, off = _mat_decode(r, m)
    if off % (B * M):
        _fault("AL-TMV", f.pc, "rs1", m, limit=B * M, x6=off)
    _al_vrow(r, f, "rs2", v)
    _bd_mtile(r, f, "rs1", m)
    _bd_vrow(r, f, "rs2", v)
    r.counters["matrix_macs"] += B * M
    if not r.functional:
        return
    T = r.st.mram[m // (M * M)]
    rr = off // M
    x = r.vread(v)[None, :]
    W = T[rr : rr + B, :].T  # W[k, j] = T[r+j][k]
    _accumulate(r.st.v_accum, _dot_rows(x, W)[0], 1.0)


def _check_bhead(r: _Run, f: Fields, m: int) -> int:
    M, H = r.cfg.MLEN, r.cfg.HLEN
    _, off = _mat_decode(r, m)
    if off % H:
        _fault("AL-BHEAD", f.pc, "rs1", m, limit=H, x6=off, x7=0)
    if off >= M:
        _fault("AL-BHEAD", f.pc, "rs1", m, limit=M, x6=off, x7=1)
    return off


def _batched_mm(r: _Run, f: Fields, transposed: bool) -> None:
    c_ = r.cfg
    M, H, BA = c_.MLEN, c_.HLEN, c_.BROADCAST_AMOUNT
    if f.rd != 0:
        _fault("IL-BRD", f.pc, "rd", f.rd)
    m, v = r.gp(f.rs1), r.gp(f.rs2)
    _check_cf_vm(r, f)
    _check_cf_ba(r, f)
    _check_to_data(r, f)
    h = _check_bhead(r, f, m)
    _al_vrow(r, f, "rs2", v)
    _bd_mtile(r, f, "rs1", m)
    _check_vec_rows(r, f, "rs2", v, M)
    r.counters["matrix_macs"] += BA * M * M * H
    if not r.functional:
        return
    T = r.st.mram[m // (M * M)]
    X = _read_rows(r, v, M)  # M (s) x M
    Xb = X.reshape(M, BA, H).transpose(1, 0, 2)  # [b, s, k] = X[s][b*H + k]
    W = T[0:M, h : h + H].T if transposed else T[h : h + H, 0:M]  # H (k) x M (n)
    _accumulate(r.st.hm_accum, _dot_rows(Xb, W), _bmm_scale(r))


def op_M_BMM(r: _Run, f: Fields) -> None:
    _batched_mm(r, f, transposed=False)


def op_M_BTMM(r: _Run, f: Fields) -> None:
    _batched_mm(r, f, transposed=True)


def _batched_mv(r: _Run, f: Fields, transposed: bool) -> None:
    c_ = r.cfg
    M, H, BA = c_.MLEN, c_.HLEN, c_.BROADCAST_AMOUNT
    m = r.gp(f.rs1) + r.gp(f.rd)  # exact integer sum
    v = r.gp(f.rs2)
    _check_cf_vm(r, f)
    _check_cf_ba(r, f)
    _check_to_data(r, f)
    h = _check_bhead(r, f, m)
    _al_vrow(r, f, "rs2", v)
    _bd_mtile(r, f, "rs1", m)
    _bd_vrow(r, f, "rs2", v)
    r.counters["matrix_macs"] += BA * M * H
    if not r.functional:
        return
    T = r.st.mram[m // (M * M)]
    xb = r.vread(v).reshape(BA, H)  # [b, k] = x[b*H + k]
    W = T[0:M, h : h + H].T if transposed else T[h : h + H, 0:M]
    _accumulate(r.st.hv_accum, _dot_rows(xb, W), _bmm_scale(r))


def op_M_BMV(r: _Run, f: Fields) -> None:
    _batched_mv(r, f, transposed=False)


def op_M_BTMV(r: _Run, f: Fields) -> None:
    _batched_mv(r, f, transposed=True)


def op_M_MM_WO(r: _Run, f: Fields) -> None:
    c_ = r.cfg
    M, B = c_.MLEN, c_.BLEN
    addr = r.gp(f.rd) + f.imm18
    s = 1 if f.rs1 == 0 else r.gp(f.rs1)
    _check_cf_vm(r, f)
    _check_to_data(r, f)
    vo = addr % M
    if vo % B:
        _fault("AL-WO", f.pc, "rd", addr, limit=B, x6=vo)
    vb = addr - vo
    rows = [vb + i * M * s for i in range(B)]
    for i, row in enumerate(rows):
        _bd_vrow(r, f, "rd", row, i)
    if not r.functional:
        return
    acc = r.st.m_accum.copy()
    for i, row in enumerate(rows):
        R = r.vread(row)
        R[vo : vo + B] = acc[i, :]
        r.vwrite(row, R)
    r.st.m_accum[...] = 0


def op_M_MV_WO(r: _Run, f: Fields) -> None:
    c_ = r.cfg
    M, B = c_.MLEN, c_.BLEN
    addr = r.gp(f.rd) + f.imm18
    _check_cf_vm(r, f)
    _check_to_data(r, f)
    vo = addr % M
    if vo % B:
        _fault("AL-WO", f.pc, "rd", addr, limit=B, x6=vo)
    vb = addr - vo
    _bd_vrow(r, f, "rd", vb)
    if not r.functional:
        return
    R = r.vread(vb)
    R[vo : vo + B] = r.st.v_accum
    r.vwrite(vb, R)
    r.st.v_accum[...] = 0


def _batched_wo(r: _Run, f: Fields, acc: np.ndarray) -> None:
    """M_BMM_WO / M_BMV_WO: the accumulator's rows (head-major) go to consecutive VRAM rows, then it clears."""
    M = r.cfg.MLEN
    addr = r.gp(f.rd) + f.imm18
    _check_cf_vm(r, f)
    _check_to_data(r, f)
    if addr % M:
        _fault("AL-BWO", f.pc, "rd", addr, limit=M, x6=addr % M)
    rows = acc.reshape(-1, M)  # hm: row j = b*M + s; hv: row j = b
    for j in range(rows.shape[0]):
        _bd_vrow(r, f, "rd", addr + j * M, j)
    if not r.functional:
        return
    for j in range(rows.shape[0]):
        r.vwrite(addr + j * M, rows[j])
    acc[...] = 0


def op_M_BMM_WO(r: _Run, f: Fields) -> None:
    _batched_wo(r, f, r.st.hm_accum)


def op_M_BMV_WO(r: _Run, f: Fields) -> None:
    _batched_wo(r, f, r.st.hv_accum)


# ====================================================================== vector unit (isa.md §6.1)


def _masked_write(r: _Run, f: Fields, dst: int, result: np.ndarray, a: np.ndarray) -> None:
    """``VROW(dst) = bf16(sel)``: masked lanes of disabled heads keep ``a``."""
    if f.rs3 != 0:
        result = np.where(r.lane_enable(), result, a)
    r.vwrite(dst, result.astype(np.float32))


def _vv(r: _Run, f: Fields, fn) -> None:
    d, a_addr, b_addr = r.gp(f.rd), r.gp(f.rs1), r.gp(f.rs2)
    _check_to_data(r, f)
    _al_vrow(r, f, "rd", d)
    _al_vrow(r, f, "rs1", a_addr)
    _al_vrow(r, f, "rs2", b_addr)
    _bd_vrow(r, f, "rd", d)
    _bd_vrow(r, f, "rs1", a_addr)
    _bd_vrow(r, f, "rs2", b_addr)
    if not r.functional:
        return
    a, b = r.vread(a_addr), r.vread(b_addr)
    _masked_write(r, f, d, fn(a, b), a)


def _vf(r: _Run, f: Fields, fn) -> None:
    _check_fp_field(f, "rs2")
    d, a_addr = r.gp(f.rd), r.gp(f.rs1)
    _check_to_data(r, f)
    _al_vrow(r, f, "rd", d)
    _al_vrow(r, f, "rs1", a_addr)
    _bd_vrow(r, f, "rd", d)
    _bd_vrow(r, f, "rs1", a_addr)
    if not r.functional:
        return
    a = r.vread(a_addr)
    _masked_write(r, f, d, fn(a, r.fp(f.rs2)), a)


def _vun(r: _Run, f: Fields, fn) -> None:
    d, a_addr = r.gp(f.rd), r.gp(f.rs1)
    _check_to_data(r, f)
    _al_vrow(r, f, "rd", d)
    _al_vrow(r, f, "rs1", a_addr)
    _bd_vrow(r, f, "rd", d)
    _bd_vrow(r, f, "rs1", a_addr)
    if not r.functional:
        return
    a = r.vread(a_addr)
    _masked_write(r, f, d, fn(a), a)


def op_V_ADD_VV(r, f):
    _vv(r, f, lambda a, b: _nan_first(a, b, a + b))


def op_V_SUB_VV(r, f):
    _vv(r, f, lambda a, b: _nan_first(a, b, a - b))


def op_V_MUL_VV(r, f):
    _vv(r, f, lambda a, b: _nan_first(a, b, a * b))


def op_V_ADD_VF(r, f):
    _vf(r, f, lambda a, s: _nan_first(a, s, a + s))


def op_V_SUB_VF(r, f):
    if f.funct1 == 0:
        _vf(r, f, lambda a, s: _nan_first(a, s, a - s))
    else:
        _vf(r, f, lambda a, s: _nan_first(np.full_like(a, s), a, s - a))


def op_V_MUL_VF(r, f):
    _vf(r, f, lambda a, s: _nan_first(a, s, a * s))


def _vmax(a: np.ndarray, s: np.float32) -> np.ndarray:
    if np.isnan(s):
        return np.where(np.isnan(a), a, s).astype(np.float32)
    return np.where(s > a, s, a).astype(np.float32)  # NaN a stays a; equal (incl. ±0) -> a


def _vmin(a: np.ndarray, s: np.float32) -> np.ndarray:
    if np.isnan(s):
        return np.where(np.isnan(a), a, s).astype(np.float32)
    return np.where(s < a, s, a).astype(np.float32)


def op_V_MAX_VF(r, f):
    _vf(r, f, _vmax)


def op_V_MIN_VF(r, f):
    _vf(r, f, _vmin)


def op_V_EXP_V(r, f):
    _vun(r, f, lambda a: np.array([_exp_f32(float(x)) for x in a], dtype=np.float32))


def op_V_RECI_V(r, f):
    _vun(r, f, lambda a: np.float32(1.0) / a)


def op_V_SHFT_V(r: _Run, f: Fields) -> None:
    V = r.cfg.VLEN
    d, a_addr, s = r.gp(f.rd), r.gp(f.rs1), r.gp(f.rs2)
    _check_to_data(r, f)
    _al_vrow(r, f, "rd", d)
    _al_vrow(r, f, "rs1", a_addr)
    _bd_vrow(r, f, "rd", d)
    _bd_vrow(r, f, "rs1", a_addr)
    if not r.functional:
        return
    a = r.vread(a_addr)
    out = np.zeros(V, dtype=np.float32)
    if s < V:
        out[s:] = a[: V - s]
    r.vwrite(d, out)  # never masked


def _red_operand(r: _Run, f: Fields) -> tuple[np.ndarray, np.ndarray] | None:
    """The operand row's bits and lane enables of a V_RED_*, after its checks; None when nothing is computed (a
    no-op, or a timing-only run)."""
    _check_fp_field(f, "rd")
    if f.rd == 0:
        return None  # no-op: no VRAM access, no checks
    a_addr = r.gp(f.rs1)
    _check_to_data(r, f)
    _al_vrow(r, f, "rs1", a_addr)
    _bd_vrow(r, f, "rs1", a_addr)
    if not r.functional:
        return None
    en = r.lane_enable() if f.rs3 != 0 else np.ones(r.cfg.VLEN, dtype=bool)
    return r.st.vram[a_addr // r.cfg.VLEN].copy(), en


def op_V_RED_SUM(r: _Run, f: Fields) -> None:
    got = _red_operand(r, f)
    if got is None:
        return
    bits, en = got
    a = bf16.decode(bits)
    s = 0.0
    for j in range(a.shape[0]):
        if en[j]:
            s = s + float(a[j])
    S = np.float32(s)
    acc = r.fp(f.rd)
    r.set_fp_bits(f.rd, bf16.encode_scalar(_nan_first(acc, S, acc + S)))


def op_V_RED_MAX(r: _Run, f: Fields) -> None:
    got = _red_operand(r, f)
    if got is None:
        return
    bits, en = got
    best_bits = int(r.st.fp[f.rd])
    best = bf16.decode_scalar(best_bits)
    have = not np.isnan(best)
    a = bf16.decode(bits)
    for j in range(a.shape[0]):
        if not en[j] or np.isnan(a[j]):
            continue
        if not have or a[j] > best:  # strict: the first of equal values is kept
            best, best_bits, have = a[j], int(bits[j]), True
    if have:
        r.set_fp_bits(f.rd, best_bits)


def op_V_TOPK(r: _Run, f: Fields) -> None:
    c_ = r.cfg
    V = c_.VLEN
    policy = f.rs3
    if policy > 1:
        _fault("IL-TOPK", f.pc, "rs3", policy, limit=2)
    E = int(topk_experts(policy))
    K = TOPK_POLICIES[policy][1]
    fpd, src, intd = r.gp(f.rd), r.gp(f.rs1), r.gp(f.rs2)
    _check_to_data(r, f)
    _al_vrow(r, f, "rs1", src)
    n_rows = -(-E // V)
    _bd_fps(r, f, "rd", fpd, K)
    for k in range(n_rows):
        _bd_vrow(r, f, "rs1", src + k * V, k)
    _bd_ints(r, f, "rs2", intd, K)
    if not r.functional:
        _route_topk(r, intd, E, K)
        return
    logits = np.concatenate([r.vread(src + k * V) for k in range(n_rows)])[:E]
    x = [(-math.inf if math.isnan(float(v)) else float(v)) for v in logits]
    order = sorted(range(E), key=lambda i: (-x[i], i))[:K]  # value descending, ties -> lower index
    xs = [np.float32(x[i]) for i in order]
    d = [np.float32(xi - xs[0]) for xi in xs]
    e = [np.float32(math.exp(float(di))) for di in d]
    den = np.float32(0.0)
    for ei in e:
        den = np.float32(den + ei)
    if not (math.isfinite(float(den)) and den > 0):
        w = [np.float32(0.0)] * K
    else:
        w = [np.float32(ei / den) for ei in e]
    for i in range(K):
        r.st.fp_sram[fpd + i] = bf16.encode_scalar(w[i])
        r.st.int_sram[intd + i] = order[i]


def _route_topk(r: _Run, intd: int, E: int, K: int) -> None:
    """V_TOPK in a timing-only run: the routing policy's experts for this call as ordinary INT SRAM words, or,
    without a policy, the K words marked data-derived (values unchanged). FP SRAM is never written."""
    st = r.st
    if r.routing is None:
        st.int_taint[intd : intd + K] = 1
        st.taint[2] = 1  # sticky: some INT SRAM word was marked (the Numba core's hint; state compared in lock step)
        return
    j = int(st.taint[1])
    st.int_sram[intd : intd + K] = r.routing.experts(j, E, K)
    st.int_taint[intd : intd + K] = 0
    st.taint[1] = j + 1


# ====================================================================== scalar FP (isa.md §6.3)


def _sfp(r: _Run, f: Fields, fn, binary: bool) -> None:
    _check_fp_field(f, "rd")
    _check_fp_field(f, "rs1")
    if binary:
        _check_fp_field(f, "rs2")
    if f.rd == 0 or not r.functional:
        return  # rd 0: a no-op, latency 0
    a = r.fp(f.rs1)
    res = fn(a, r.fp(f.rs2)) if binary else fn(a)
    r.set_fp_bits(f.rd, bf16.encode_scalar(res))


def op_S_ADD_FP(r, f):
    _sfp(r, f, lambda a, b: _nan_first(a, b, a + b), True)


def op_S_SUB_FP(r, f):
    _sfp(r, f, lambda a, b: _nan_first(a, b, a - b), True)


def op_S_MUL_FP(r, f):
    _sfp(r, f, lambda a, b: _nan_first(a, b, a * b), True)


def op_S_MAX_FP(r, f):
    _sfp(r, f, lambda a, b: b if b > a else a, True)


def op_S_EXP_FP(r, f):
    _sfp(r, f, lambda a: _exp_f32(float(a)), False)


def op_S_RECI_FP(r, f):
    _sfp(r, f, lambda a: np.float32(1.0) / a, False)


def op_S_SQRT_FP(r, f):
    _sfp(r, f, lambda a: np.sqrt(a), False)


def op_S_LD_FP(r: _Run, f: Fields) -> None:
    _check_fp_field(f, "rd")
    addr = r.gp(f.rs1) + f.imm18
    _check_to_data(r, f)
    _bd_fps(r, f, "rs1", addr, 1)
    if not r.functional:
        return
    r.set_fp_bits(f.rd, int(r.st.fp_sram[addr]))


def op_S_ST_FP(r: _Run, f: Fields) -> None:
    _check_fp_field(f, "rd")
    addr = r.gp(f.rs1) + f.imm18
    _check_to_data(r, f)
    _bd_fps(r, f, "rs1", addr, 1)
    if not r.functional:
        return
    r.st.fp_sram[addr] = r.st.fp[f.rd]


def op_S_MAP_V_FP(r: _Run, f: Fields) -> None:
    V = r.cfg.VLEN
    d = r.gp(f.rd)
    addr = r.gp(f.rs1) + f.imm18
    _check_to_data(r, f)
    _al_vrow(r, f, "rd", d)
    _bd_vrow(r, f, "rd", d)
    _bd_fps(r, f, "rs1", addr, V)
    if not r.functional:
        return
    r.st.vram[d // V] = r.st.fp_sram[addr : addr + V]  # exact copy of bf16 words


# ====================================================================== scalar INT (isa.md §6.4)


def _sint(r: _Run, f: Fields, value: int) -> None:
    """gp[rd] = value (mod 2^32); in a timing-only run rd is data-derived iff one of the registers read is."""
    if not r.functional:
        r.set_taint(f.rd, any(r.tainted(getattr(f, name)) for name in _GP_READS[f.opcode]))
    r.set_gp(f.rd, value)


def op_S_ADD_INT(r, f):
    _sint(r, f, r.gp(f.rs1) + r.gp(f.rs2))


def op_S_SUB_INT(r, f):
    _sint(r, f, r.gp(f.rs1) - r.gp(f.rs2))


def op_S_MUL_INT(r, f):
    _sint(r, f, r.gp(f.rs1) * r.gp(f.rs2))


def op_S_ADDI_INT(r, f):
    _sint(r, f, r.gp(f.rs1) + f.imm18)


def op_S_LUI_INT(r, f):
    _sint(r, f, f.imm22 << 12)


def op_S_LD_INT(r: _Run, f: Fields) -> None:
    addr = r.gp(f.rs1) + f.imm18
    _check_to_data(r, f)
    _bd_ints(r, f, "rs1", addr, 1)
    r.set_taint(f.rd, bool(r.st.int_taint[addr]))
    r.set_gp(f.rd, int(r.st.int_sram[addr]))


def op_S_ST_INT(r: _Run, f: Fields) -> None:
    addr = r.gp(f.rs1) + f.imm18
    _check_to_data(r, f)
    _bd_ints(r, f, "rs1", addr, 1)
    r.set_int_taint(addr, r.tainted(f.rd))
    r.st.int_sram[addr] = r.gp(f.rd)


# ====================================================================== DMA (memory.md §5)


def _first_true(n: int, pred) -> int | None:
    """The first i in [0, n) with pred(i), for a predicate monotone in i (False... then True...)."""
    if n <= 0 or not pred(n - 1):
        return None
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _dma_setup(r: _Run, f: Fields, unit: str):
    """Checks of memory.md §5.2-§5.5 in isa.md §8 order; returns the per-row plan."""
    c_ = r.cfg
    _check_a_field(f, "rs2")
    if unit == "M":
        T = c_.hbm_type("HBM_M_WEIGHT_TYPE" if f.funct1 == 0 else "HBM_M_KV_TYPE")
        L, P = c_.MLEN, c_.P_M
    else:
        T = c_.hbm_type("HBM_V_ACT_TYPE" if f.funct1 == 0 else "HBM_V_KV_TYPE")
        L, P = c_.VLEN, (c_.P_V if unit == "V" else c_.P_W)
    E, Mt, eb = fp_params(T)
    mx = isinstance(T, MxType)
    row_bytes = L * eb
    pitch = int(r.st.ctrl[CTRL_STRIDE]) if f.rs3 == 1 else row_bytes
    base = int(r.st.areg[f.rs2])
    off0 = r.gp(f.rs1)
    dst = r.gp(f.rd)
    scale_reg = int(r.st.ctrl[CTRL_SCALE])
    _check_to_data(r, f)
    # Row i's offset is off0 + i*pitch with pitch >= 0, so every per-row condition below is monotone in
    # i (false, then true from some row on): the first faulting row is found by bisection instead of
    # walking all P rows, which keeps a huge HBM_*_Amount from costing P Python iterations or a P-long list.
    # ---- AL
    if unit == "M":
        MM = c_.MLEN * c_.MLEN
        if dst % MM:
            _fault("AL-MTILE", f.pc, "rd", dst, limit=MM, x6=dst % MM)
    else:
        _al_vrow(r, f, "rd", dst)
    blk = eb * T.block if isinstance(T, MxType) else 0
    if mx:
        # o_i mod blk: row 0 fails iff off0 does; otherwise row 1 fails iff pitch does; then none can
        for i in (0, 1):
            o = off0 + i * pitch
            if i < P and o % blk:
                _fault("AL-MX", f.pc, "rs1", o, index=i, limit=blk, x6=o % blk, x7=pitch)
    # ---- BD: SRAM side, then HBM
    if unit == "M":
        MM = c_.MLEN * c_.MLEN
        t = _first_true(P // c_.MLEN, lambda t: (dst + t * MM) // MM >= c_.mram_tiles)
        if t is not None:
            _bd_mtile(r, f, "rd", dst + t * MM, t)
    else:
        row = _first_true(P, lambda i: (dst + i * c_.VLEN) // c_.VLEN >= c_.VECTOR_SRAM_SIZE)
        if row is not None:
            _bd_vrow(r, f, "rd", dst + row * c_.VLEN, row)
    scale_len = (L // T.block) if isinstance(T, MxType) else 0
    i_e = _first_true(P, lambda i: base + off0 + i * pitch + row_bytes > c_.HBM_SIZE)
    i_s = (
        _first_true(P, lambda i: base + scale_reg + (off0 + i * pitch) // blk + scale_len > c_.HBM_SIZE) if mx else None
    )
    if i_e is not None and (i_s is None or i_e <= i_s):  # element range before scale range per row
        _fault("BD-HBM", f.pc, "rs2", base + off0 + i_e * pitch, index=i_e, limit=c_.HBM_SIZE, x6=0, x7=row_bytes)
    if i_s is not None:
        s_start = base + scale_reg + (off0 + i_s * pitch) // blk
        _fault("BD-HBM", f.pc, "rs2", s_start, index=i_s, limit=c_.HBM_SIZE, x6=1, x7=scale_len)
    plan = [(base + off0 + i * pitch, base + scale_reg + (off0 + i * pitch) // blk if mx else 0) for i in range(P)]
    r.hbm_bytes = P * (row_bytes + scale_len)
    return T, E, Mt, eb, mx, L, P, dst, plan, row_bytes, scale_len


def _decode_row(r: _Run, T, E, Mt, eb, mx, L, e_start, s_start, row_bytes, scale_len) -> np.ndarray:
    out = np.empty(L, dtype=np.float32)
    hbm = r.st.hbm
    hbm_note_read(hbm.meta, e_start, row_bytes)
    elem = hbm.read(e_start, row_bytes)
    if mx:
        hbm_note_read(hbm.meta, s_start, scale_len)
        mx_decode_row(elem, hbm.read(s_start, scale_len), E, Mt, T.block, out)
    else:
        plain_decode_row(elem, E, Mt, eb, out)
    return out


def op_H_PREFETCH_M(r: _Run, f: Fields) -> None:
    T, E, Mt, eb, mx, L, P, dst, plan, rb, sl = _dma_setup(r, f, "M")
    if not r.functional:
        return
    M = r.cfg.MLEN
    rows = [_decode_row(r, T, E, Mt, eb, mx, L, e, s, rb, sl) for e, s in plan]  # all reads first
    t0 = dst // (M * M)
    for i, row in enumerate(rows):
        r.st.mram[t0 + i // M, i % M, :] = row  # exact f32, never rounded


def op_H_PREFETCH_V(r: _Run, f: Fields) -> None:
    T, E, Mt, eb, mx, L, P, dst, plan, rb, sl = _dma_setup(r, f, "V")
    if not r.functional:
        return
    rows = [_decode_row(r, T, E, Mt, eb, mx, L, e, s, rb, sl) for e, s in plan]
    for i, row in enumerate(rows):
        r.vwrite(dst + i * r.cfg.VLEN, row)  # bf16 RNE


def op_H_STORE_V(r: _Run, f: Fields) -> None:
    T, E, Mt, eb, mx, L, P, dst, plan, rb, sl = _dma_setup(r, f, "S")
    if not r.functional:
        return
    rows = [r.vread(dst + i * r.cfg.VLEN) for i in range(P)]  # all reads first
    counts = np.zeros(2, dtype=np.int64)
    for (e_start, s_start), x in zip(plan, rows, strict=True):
        elem = np.zeros(rb, dtype=np.uint8)
        if mx:
            scale = np.zeros(sl, dtype=np.uint8)
            mx_encode_row(x, E, Mt, T.block, elem, scale, counts)
            r.st.hbm.write(e_start, elem)
            r.st.hbm.write(s_start, scale)
        else:
            plain_encode_row(x, E, Mt, eb, elem)
            r.st.hbm.write(e_start, elem)
    r.counters["mx_nan"] += int(counts[0])
    r.counters["mx_saturated"] += int(counts[1])


# ====================================================================== control (isa.md §6.6)


def op_C_SET_ADDR_REG(r: _Run, f: Fields) -> None:
    _check_a_field(f, "rd")
    _check_to_data(r, f)
    r.st.areg[f.rd] = (r.gp(f.rs1) << 32) + r.gp(f.rs2)


def op_C_SET_SCALE_REG(r, f):
    _check_to_data(r, f)
    r.st.ctrl[CTRL_SCALE] = r.gp(f.rd)


def op_C_SET_STRIDE_REG(r, f):
    _check_to_data(r, f)
    r.st.ctrl[CTRL_STRIDE] = r.gp(f.rd)


def op_C_SET_V_MASK_REG(r, f):
    _check_to_data(r, f)
    r.st.ctrl[CTRL_V_MASK] = r.gp(f.rd)


def op_C_LOOP_START(r: _Run, f: Fields) -> None:
    if f.rd == 0:
        _fault("LP-GP0", f.pc, "rd", 0, x6=f.imm22)
    if f.imm22 == 0:
        _fault("LP-ZERO", f.pc, "imm", 0, x6=f.rd)
    st = r.st
    depth = int(st.ctrl[CTRL_LOOP_DEPTH])
    if depth >= st.loop_start.shape[0]:
        st.grow_loop_stack()
    r.set_taint(f.rd, False)
    r.set_gp(f.rd, f.imm22)
    st.loop_start[depth], st.loop_reg[depth], st.loop_count[depth] = f.pc, f.rd, 0
    st.ctrl[CTRL_LOOP_DEPTH] = depth + 1


def _remove_record(st: MachineState, k: int) -> None:
    depth = int(st.ctrl[CTRL_LOOP_DEPTH])
    for arr in (st.loop_start, st.loop_reg, st.loop_count):
        arr[k : depth - 1] = arr[k + 1 : depth].copy()
        arr[depth - 1] = 0
    st.ctrl[CTRL_LOOP_DEPTH] = depth - 1


def op_C_LOOP_END(r: _Run, f: Fields) -> None:
    st = r.st
    depth = int(st.ctrl[CTRL_LOOP_DEPTH])
    _check_to_data(r, f)
    k = next((k for k in range(depth - 1, -1, -1) if int(st.loop_reg[k]) == f.rd), None)
    if k is None:
        _fault("LP-NOMATCH", f.pc, "rd", f.rd, x6=depth)
    if r.gp(f.rd) > 1:
        r.set_gp(f.rd, r.gp(f.rd) - 1)
        st.loop_count[k] = 0
        r.next_pc = int(st.loop_start[k]) + 1
    else:
        r.set_gp(f.rd, 0)
        _remove_record(st, k)


def op_C_BREAK(r: _Run, f: Fields) -> None:
    st = r.st
    depth = int(st.ctrl[CTRL_LOOP_DEPTH])
    if depth == 0:
        _fault("LP-BREAK", f.pc, None, -1, x6=-1, x7=0)
    start, reg = int(st.loop_start[depth - 1]), int(st.loop_reg[depth - 1])
    end_pc = None
    for pc in range(start + 1, len(r.words)):
        w = r.words[pc]
        if (w & _OPC.max) == _OP_LOOP_END and ((w >> FIELDS["rd"].shift) & FIELDS["rd"].max) == reg:
            end_pc = pc
            break
    if end_pc is None:
        _fault("LP-BREAK", f.pc, None, reg, x6=start, x7=depth)
    _remove_record(st, depth - 1)
    r.set_gp(reg, 0)
    r.next_pc = end_pc + 1


# ====================================================================== dispatch

HANDLERS = {i.mnemonic: globals()[f"op_{i.mnemonic}"] for i in INSTRUCTIONS}
BY_OPCODE = {BY_MNEMONIC[mn].opcode: fn for mn, fn in HANDLERS.items()}
assert set(HANDLERS) == {i.mnemonic for i in INSTRUCTIONS}


def _words_of(program_words) -> list[int]:
    if isinstance(program_words, Program):
        return [int(w) for w in program_words.words]
    return [int(w) for w in np.asarray(program_words, dtype=np.int64).reshape(-1)]


def _dma_geom(cfg, f):
    from .hbm.timing import dma_geometry

    dop = {_OP_HPM: 0, _OP_HPV: 1, _OP_HSV: 2}[f.opcode]
    return dma_geometry(cfg, dop, 0 if f.funct1 == 0 else 1)


def _reg_value(st, kind, idx) -> int:
    """Trace value of a register (timing.REG_* kinds; bf16 bits for f, raw u64 for a)."""
    from .timing import scoreboard as T

    if kind == T.REG_GP:
        return int(st.gp[idx])
    if kind == T.REG_FP:
        return int(st.fp[idx])
    if kind == T.REG_A:
        return int(np.int64(st.areg[idx]))
    if kind == T.REG_SCALE:
        return int(st.ctrl[CTRL_SCALE])
    if kind == T.REG_STRIDE:
        return int(st.ctrl[CTRL_STRIDE])
    if kind == T.REG_VMASK:
        return int(st.ctrl[CTRL_V_MASK])
    return 0


def _timing_step(tm, st, f, g, aux, table, sets, pc, pcx, rpc):
    """Account one retired instruction on ``tm`` (a reference-backend TimingState) in its mode, booking pc's row
    of ``pcx`` (busy, HBM bytes, stalls); ``g`` = (gp[rd], gp[rs1], gp[rs2]) at issue, ``sets`` = (rr, wr), ``rpc``
    the per-pc rtl costs. Returns ``(issue, latency, unit, is_dma)``."""
    from .timing import rtl as RT
    from .timing import scoreboard as T

    o = f.opcode
    is_h = o in (_OP_HPM, _OP_HPV, _OP_HSV)
    lat = int(instruction_latency(table, o, f.rd, f.rs3))
    unit = -1 if (NOOP_IF_RD0[o] and f.rd == 0) else int(T.UNIT_OF[o])
    ts, rr, wr = tm.ts, sets[0], sets[1]
    rtl = tm.mode_code == T.MODE_RTL
    nr = nw = 0
    if tm.mode_code == T.MODE_SERIAL:
        issue = int(ts[T.T_CYCLES])
    else:
        nr, nw = T.resources_py(o, f.rd, f.rs1, f.rs2, f.rs3, f.funct1, f.imm18, g[0], g[1], g[2], aux, tm.cv, rr, wr)
        issue = int(_issue(tm, unit, rr, nr, wr, nw, pc, pcx, rpc))
    cost = (lat, lat, lat)
    if rtl and not is_h:
        cost = (int(rpc[RT.PC_READY, pc]), int(rpc[RT.PC_DONE, pc]), int(rpc[RT.PC_II, pc]))
    if is_h:
        lat = _dma_latency(tm, st, f, g[1], issue, pc, pcx)
        cost = (lat, lat, lat)
    if tm.mode_code == T.MODE_SERIAL:
        ts[T.T_CYCLES] = issue + lat
        ts[T.T_LAST_ISSUE] = issue
    elif rtl:
        pipe, pclass = int(rpc[RT.PC_PIPE, pc]), int(rpc[RT.PC_PCLASS, pc])
        T.rtl_commit_py(ts, pipe, issue, cost, pclass, rr, nr, wr, nw, tm.ready, tm.rdone, tm.wcls)
    else:
        T.sb_commit_py(ts, unit, issue, lat, rr, nr, wr, nw, tm.ready, tm.rdone)
    if unit >= 0 and tm.mode_code != T.MODE_OVERLAP:
        ts[T.T_BUSY + unit] += cost[2]
    if not is_h:
        pcx[pc, T.X_BUSY] += cost[2]
    return issue, cost[1], unit, is_h


def _issue(tm, unit, rr, nr, wr, nw, pc, pcx, rpc) -> int:
    """The issue cycle under overlap (timing.md §4) or rtl (docs/timing.md)."""
    from .timing import rtl as RT
    from .timing import scoreboard as T

    if tm.mode_code == T.MODE_OVERLAP:
        issue = T.sb_issue_py(tm.ts, unit, rr, nr, wr, nw, tm.ready, tm.rdone)
        pcx[pc, T.X_STALL + tm.ts[T.T_STALL_REASON]] += tm.ts[T.T_LAST_STALL]
        return issue
    pipe, cmask = int(rpc[RT.PC_PIPE, pc]), int(rpc[RT.PC_CMASK, pc])
    return T.rtl_issue_py(tm.ts, pipe, cmask, rr, nr, wr, nw, tm.ready, tm.rdone, tm.wcls, tm.hz, pcx, pc)


def _dma_latency(tm, st, f, g_rs1: int, issue: int, pc: int, pcx) -> int:
    """The HBM twin's latency of an H_* started at ``issue``; books its busy cycles and HBM bytes on pc's row."""
    from .hbm.timing import dma_blocks_py, dma_row_ranges, schedule_py
    from .timing import scoreboard as T

    geom = _dma_geom(st.cfg, f)
    pitch = int(st.ctrl[CTRL_STRIDE]) if f.rs3 == 1 else geom.elem_len
    ranges = dma_row_ranges(geom, int(st.areg[f.rs2]), g_rs1, pitch, int(st.ctrl[CTRL_SCALE]))
    blocks = dma_blocks_py(tm.params, ranges)
    req0 = tm.py_hstats["read_requests"] + tm.py_hstats["write_requests"]
    lat = int(schedule_py(tm.params, tm.py_hbm, blocks, geom.is_write, issue, tm.py_hstats))
    req = tm.py_hstats["read_requests"] + tm.py_hstats["write_requests"] - req0
    pcx[pc, T.X_BUSY] += lat
    pcx[pc, T.X_HBM_WRITE if geom.is_write else T.X_HBM_READ] += req * tm.params.burst_bytes
    return lat


def _budget_record(pc: int, retired: int, work: int, w: int, budget: int) -> list[int]:
    """The BUDGET record before the instruction at ``pc`` (``w`` units) with ``work`` units used."""
    rec = F.blank_record(F.R_BUDGET, pc)
    rec[F.FAULT_VALUE], rec[F.FAULT_LIMIT] = retired, budget
    rec[F.FAULT_X6], rec[F.FAULT_X7] = work - retired, w - 1
    return rec


@contextlib.contextmanager
def _counting_stops(retired: Callable[[], int]) -> Iterator[None]:
    """A :class:`~plena_sim.errors.RunStopped` raised (by a signal handler) inside the block gets the
    instructions ``retired()`` retired added to it."""
    try:
        yield
    except RunStopped as stop:
        stop.add_retired(retired())
        raise


def execute(
    state: MachineState,
    program_words,
    max_instructions: int = 10**9,
    timing: str | None = None,
    trace_capacity: int | None = None,
    functional: bool = True,
    routing: Routing | None = None,
) -> Outcome:
    """Run ``program_words`` (a Program or a sequence of u32 words) on ``state`` from its PC.

    Stops when the PC is >= the program length (normal end) or at the first fault (``Outcome.fault``
    = the record; the state is unchanged by the faulting instruction; the PC stays on it).
    ``timing`` / ``trace_capacity``: as :func:`plena_sim.core.execute` (with a capacity, the trace ring
    of the TimingState receives the same records as the core writes).

    ``functional=False``: a timing-only run. Every check, fault, cycle, trace record and counter is as in a
    functional run, and the integer side (gp, loops, control and address registers, INT SRAM loads and stores,
    the PC) executes exactly, but the datapath is skipped: no f register, FP SRAM, VRAM, MRAM, accumulator or HBM
    byte changes. V_TOPK writes ``routing``'s experts into INT SRAM, or without a policy marks its INT SRAM
    words data-derived; ``state.taint`` / ``state.int_taint`` follow data-derived values through the integer
    side, and one used as an address, count or control value faults TO-DATA. They are not reset here.
    """
    from .timing import scoreboard as T
    from .timing.scoreboard import MAX_RANGES, T_CYCLES

    words = _words_of(program_words)
    n = len(words)
    st = state
    cfg = st.cfg
    table = latency_table(cfg)
    tm = st.ensure_timing(timing, trace_capacity, "reference")
    cyc0 = int(tm.ts[T_CYCLES])
    rr = np.zeros((MAX_RANGES, 3), dtype=np.int64)
    wr = np.zeros((MAX_RANGES, 3), dtype=np.int64)
    by_opcode = np.zeros(64, dtype=np.int64)
    pc_count, pc_cycles = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    pcx = np.zeros((n, T.X_N), dtype=np.int64)
    rpc = _rtl_costs(tm, words)
    run = _Run(st, words, functional, routing)
    run.counters.setdefault("hbm_payload_read", 0)
    run.counters.setdefault("hbm_payload_written", 0)
    retired = work = 0
    work_of = work_table(cfg)
    fault = None
    max_loop = cfg.MAX_LOOP_INSTRUCTIONS
    with np.errstate(all="ignore"), _counting_stops(lambda: retired):
        while True:
            pc = int(st.ctrl[CTRL_PC])
            if pc >= n:
                break
            w = int(work_of[words[pc] & _OPC.max])
            if work + w > max_instructions:  # the work budget (plena_sim.limits.budget)
                fault = _budget_record(pc, retired, work, w, max_instructions)
                break
            depth = int(st.ctrl[CTRL_LOOP_DEPTH])
            st.loop_count[:depth] += 1  # runaway guard (undone if the instruction faults)
            try:
                for lvl in range(depth):
                    if int(st.loop_count[lvl]) > max_loop:
                        _fault(
                            "LP-RUNAWAY",
                            pc,
                            None,
                            int(st.loop_count[lvl]),
                            index=lvl,
                            limit=max_loop,
                            x6=int(st.loop_reg[lvl]),
                            x7=int(st.loop_start[lvl]),
                        )
                f = Fields.of(pc, words[pc])
                handler = BY_OPCODE.get(f.opcode)
                if handler is None:
                    _fault("IL-OPC", pc, None, f.opcode, x6=f.word)
                run.next_pc = pc + 1
                run.hbm_bytes = 0
                g_rd, g_rs1, g_rs2 = int(st.gp[f.rd]), int(st.gp[f.rs1]), int(st.gp[f.rs2])
                aux = int(st.loop_reg[depth - 1]) if (f.opcode == _OP_CBREAK and depth > 0) else -1
                if tm.trace_capacity:
                    rkind, ridx = T.dest_reg_py(f.opcode, f.rd, aux)
                    rold = _reg_value(st, rkind, ridx)
                    req0 = tm.py_hstats["read_requests"] + tm.py_hstats["write_requests"]
                handler(run, f)
            except _Fault as exc:
                st.loop_count[:depth] -= 1
                fault = exc.rec
                break
            retired += 1
            work += w
            by_opcode[f.opcode] += 1
            if f.opcode == _OP_HSV:
                run.counters["hbm_payload_written"] += run.hbm_bytes
            elif f.opcode in (_OP_HPM, _OP_HPV):
                run.counters["hbm_payload_read"] += run.hbm_bytes
            before = int(tm.ts[T_CYCLES])
            g = (g_rd, g_rs1, g_rs2)
            issue, lat, unit, is_h = _timing_step(tm, st, f, g, aux, table, (rr, wr), pc, pcx, rpc)
            pc_count[pc] += 1
            pc_cycles[pc] += int(tm.ts[T_CYCLES]) - before
            if tm.trace_capacity:
                before_trace = (rkind, ridx, rold, req0)
                _trace_record(tm, st, f, pc, retired - 1, (issue, lat, unit, is_h), g, aux, (rr, wr), before_trace)
            st.ctrl[CTRL_PC] = run.next_pc
    cycles = int(tm.ts[T_CYCLES]) - cyc0
    return Outcome(retired, fault, by_opcode, cycles, dict(run.counters), pc_count, pc_cycles, pcx)


def _trace_record(tm, st, f, pc, seq, timed, g, aux, sets, before) -> None:
    """Append the trace record of a retired instruction, as the core's ``trace_after`` does: ``timed`` =
    (issue, latency, unit, is_dma), ``before`` = (register kind, index, old value, HBM requests) taken before it
    ran."""
    from .timing import scoreboard as T

    issue, lat, unit, is_h = timed
    rkind, ridx, rold, req0 = before
    rr, wr = sets
    nr, nw = T.resources_py(
        f.opcode, f.rd, f.rs1, f.rs2, f.rs3, f.funct1, f.imm18, g[0], g[1], g[2], aux, tm.cv, rr, wr
    )
    hbm = (0, 0, 0, 0, 0)
    if is_h:
        geom = _dma_geom(st.cfg, f)
        pitch = int(st.ctrl[CTRL_STRIDE]) if f.rs3 == 1 else geom.elem_len
        moved = (tm.py_hstats["read_requests"] + tm.py_hstats["write_requests"] - req0) * tm.params.burst_bytes
        hbm = (int(st.areg[f.rs2]) + g[1], geom.rows, pitch, geom.elem_len, moved)
    cycles = int(tm.ts[T.T_LAST_STALL]) if tm.mode_code != T.MODE_SERIAL else 0
    stall = (cycles, int(tm.ts[T.T_STALL_REASON]) if cycles > 0 else 0)
    reg = (rkind, ridx, rold, _reg_value(st, rkind, ridx))
    sram = (st.vram, st.fp_sram, st.int_sram)
    sets4 = (nr, rr, nw, wr)
    T.trace_record_py(tm.tbuf, tm.tcount, seq, pc, f.opcode, unit, issue, lat, reg, sets4, hbm, stall, tm.cv, sram)


def _rtl_costs(tm, words: list[int]) -> np.ndarray | None:
    """The per-pc rtl costs of the program (None in the other timing models)."""
    from .timing import scoreboard as T
    from .timing.rtl import rtl_pc_costs, rtl_table

    if tm.mode_code != T.MODE_RTL:
        return None
    dec = decode_program(words)
    return rtl_pc_costs(rtl_table(tm.cfg), dec["opcode"], dec["rd"], dec["rs3"])


from isa.encoding import OPCODES as _OPCODES  # noqa: E402

_OP_HPM = _OPCODES["H_PREFETCH_M"]
_OP_HPV = _OPCODES["H_PREFETCH_V"]
_OP_HSV = _OPCODES["H_STORE_V"]
_OP_CBREAK = _OPCODES["C_BREAK"]
