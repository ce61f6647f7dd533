"""What the core knows about an instruction before it runs, derived from the opcode table.

One job: turn :mod:`isa.table` into the arrays the run loop indexes by opcode (family and operation
codes for dispatch, matrix MACs, static checks) and compute the per-pc facts of a program once per call
(latency, C_BREAK targets, whether the word fails a static check).

Static checks (isa.md §8 order IL -> CF -> LP, operands in table order): an f / a register field >= the
register count (IL-FREG / IL-AREG), a non-zero ``zero`` field, a ``max_value`` or a ``forbid`` value (the
operand's ``rule``), VLEN != MLEN for unit M (CF-VM), BA*HLEN != MLEN for the batched family (CF-BA).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from isa.encoding import (
    ALU_END,
    ALU_START,
    FAM_LOOP,
    N_OPCODES,
    opcode_alus,
    opcode_families,
)
from isa.table import INSTRUCTIONS, REGISTER_COUNT, Instr, mac_table

from ..faults import OPERAND_INDEX, RULE_BY_ID
from ..timing.latency import instruction_latency
from .common import fault
from .slots import CFG_BA, CFG_H, CFG_M, CFG_V, OPND_NONE

__all__ = ["OpcodeTables", "opcode_tables", "per_pc", "static_fault", "checks_of", "WORD_FIELDS"]

#: check kinds: field value must be < bound / must be 0 / must differ from bound
CHK_LT, CHK_EQ0, CHK_NE = range(3)
#: static checks per opcode, at most (the table has at most 2)
MAX_CHECKS = 4
#: check columns: word field (:data:`WORD_FIELDS` index), operand code (fault record), kind, bound, rule
#: code, fault limit, x6 word field (-1: x6 = 0)
N_CK = 7
#: the opcode tables tuple (:attr:`OpcodeTables.arrays`)
TAB_NAMES = (
    "family",
    "alu",
    "valid",
    "checks",
    "n_checks",
    "n_il",
    "cf_vm",
    "cf_ba",
    "vf",
    "loop_end",
    "noop",
    "gp_checked",
)
(
    TAB_FAMILY,
    TAB_ALU,
    TAB_VALID,
    TAB_CHECKS,
    TAB_NCHECKS,
    TAB_NIL,
    TAB_CFVM,
    TAB_CFBA,
    TAB_VF,
    TAB_LOOPEND,
    TAB_NOOP,
    TAB_GPCHECKED,
) = range(len(TAB_NAMES))
#: instruction-word fields in decode order (the per-pc field arrays of the run loop)
WORD_FIELDS = ("rd", "rs1", "rs2", "rs3", "funct1", "imm18", "imm22")


def _fidx(field: str) -> int:
    return OPERAND_INDEX["imm" if field.startswith("imm") else field]


def _word_field(field: str) -> int:
    return WORD_FIELDS.index(field)


def _other_field(instr: Instr, field: str) -> int:
    """The word-field index of the instruction's other encoded operand (x6 of an LP fault), or -1."""
    for o in instr.operands:
        if o.field is not None and o.field != field:
            return _word_field(o.field)
    return -1


def checks_of(instr: Instr) -> list[tuple[int, int, int, int, int, int, int]]:
    """Static checks of one instruction: (word field, operand code, kind, bound, rule, limit, x6 field)."""
    il, lp = [], []
    for o in instr.operands:
        if o.field is None:
            continue
        wf, of = _word_field(o.field), _fidx(o.field)
        if o.kind in ("f", "a"):
            n = REGISTER_COUNT[o.kind]
            il.append((wf, of, CHK_LT, n, RULE_BY_ID["IL-FREG" if o.kind == "f" else "IL-AREG"].code, n, -1))
        if o.kind == "zero":
            il.append((wf, of, CHK_EQ0, 0, RULE_BY_ID[o.rule].code, -1, -1))
        if o.max_value is not None:
            il.append((wf, of, CHK_LT, o.max_value + 1, RULE_BY_ID[o.rule].code, o.max_value + 1, -1))
        for bad, _why in o.forbid:
            lp.append((wf, of, CHK_NE, bad, RULE_BY_ID[o.rule].code, -1, _other_field(instr, o.field)))
    return il + lp


#: the register fields in fault-record operand order (OPERAND_NAMES: rd, rs1, rs2, rs3)
_REG_FIELDS = ("rd", "rs1", "rs2", "rs3")


def gp_checked_mask(instr: Instr) -> int:
    """Bit k set: a timing-only run checks that the gp register in field ``_REG_FIELDS[k]`` does not hold a
    data-derived value (TO-DATA). Every gp the instruction reads, except the values the integer side only moves:
    the ALU sources of the ``sint`` family and the value S_ST_INT stores (their taint propagates instead)."""
    reads = list(instr.gp_reads)
    if instr.family == "sint":
        reads = []
    elif instr.family == "intmem" and instr.alu == "store":
        reads = [f for f in reads if f != "rd"]
    return sum(1 << _REG_FIELDS.index(f) for f in reads)


class OpcodeTables:
    """Arrays indexed by opcode, built once per process from the table; :attr:`arrays` is the tuple the
    run loop takes, indexed by the ``TAB_*`` constants."""

    def __init__(self) -> None:
        self.family = opcode_families()
        self.alu = opcode_alus()
        self.valid = (self.family >= 0).astype(np.int64)
        self.checks = np.zeros((N_OPCODES, MAX_CHECKS, N_CK), dtype=np.int64)
        self.n_checks = np.zeros(N_OPCODES, dtype=np.int64)
        self.n_il = np.zeros(N_OPCODES, dtype=np.int64)  # checks before the CF checks (IL)
        self.cf_vm = np.zeros(N_OPCODES, dtype=np.int64)  # unit M: needs VLEN == MLEN
        self.cf_ba = np.zeros(N_OPCODES, dtype=np.int64)  # batched: needs BA*HLEN == MLEN
        for i in INSTRUCTIONS:
            ck = checks_of(i)
            assert len(ck) <= MAX_CHECKS, i.mnemonic
            self.n_checks[i.opcode] = len(ck)
            self.n_il[i.opcode] = sum(1 for c in ck if c[2] != CHK_NE)
            for k, c in enumerate(ck):
                self.checks[i.opcode, k] = c
            self.cf_vm[i.opcode] = i.unit == "M"
            self.cf_ba[i.opcode] = i.family == "bmat"
        self.vf = np.zeros(N_OPCODES, dtype=np.int64)  # vector op whose rs2 is an f register (VF form)
        self.loop_end = np.zeros(N_OPCODES, dtype=np.int64)  # C_LOOP_END (the C_BREAK target scan)
        self.noop = np.zeros(N_OPCODES, dtype=np.int64)  # a zero-latency no-op when rd = 0
        self.gp_checked = np.zeros(N_OPCODES, dtype=np.int64)  # bit k: the gp in field k (rd, rs1, rs2, rs3) is checked
        for i in INSTRUCTIONS:
            self.vf[i.opcode] = i.family == "vbin" and i.operands[2].kind == "f"
            self.loop_end[i.opcode] = i.family == "loop" and i.alu == "end"
            self.noop[i.opcode] = i.noop_if_rd0
            self.gp_checked[i.opcode] = gp_checked_mask(i)
        self.arrays = (
            self.family,
            self.alu,
            self.valid,
            self.checks,
            self.n_checks,
            self.n_il,
            self.cf_vm,
            self.cf_ba,
            self.vf,
            self.loop_end,
            self.noop,
            self.gp_checked,
        )

    @staticmethod
    def macs(M: int, B: int, H: int, BA: int) -> np.ndarray:
        """Matrix MACs per opcode at this machine (the table's ``macs`` expressions)."""
        return np.array(mac_table(M, B, H, BA), dtype=np.int64)


@lru_cache(maxsize=1)
def opcode_tables() -> OpcodeTables:
    return OpcodeTables()


RULE_CF_VM = RULE_BY_ID["CF-VM"].code
RULE_CF_BA = RULE_BY_ID["CF-BA"].code


@njit(cache=True)
def _check_fails(ck, val):
    kind = ck[2]
    if kind == CHK_LT:
        return val >= ck[3]
    if kind == CHK_EQ0:
        return val != 0
    return val == ck[3]


@njit(cache=True)
def _cf_fault(frec, pc, o, tabs, cfg):
    """CF-VM / CF-BA of opcode ``o`` on this machine: RUN_FAULT with the record, else -1."""
    cf_vm, cf_ba = tabs[TAB_CFVM], tabs[TAB_CFBA]
    M = cfg[CFG_M]
    if cf_vm[o] != 0 and cfg[CFG_V] != M:
        return fault(frec, RULE_CF_VM, pc, OPND_NONE, cfg[CFG_V], -1, M, 0, 0)
    BA, H = cfg[CFG_BA], cfg[CFG_H]
    if cf_ba[o] != 0 and BA * H != M:
        return fault(frec, RULE_CF_BA, pc, OPND_NONE, BA * H, -1, M, BA, H)
    return -1


@njit(cache=True)
def static_fault(frec, pc, o, words, tabs, cfg):
    """The first static check the word at ``pc`` fails, written to ``frec`` (returns RUN_FAULT), else -1."""
    checks, n_checks, n_il = tabs[TAB_CHECKS], tabs[TAB_NCHECKS], tabs[TAB_NIL]
    for k in range(n_checks[o] + 1):
        if k == n_il[o]:
            st = _cf_fault(frec, pc, o, tabs, cfg)
            if st >= 0:
                return st
        if k == n_checks[o]:
            break
        ck = checks[o, k]
        val = words[ck[0]][pc]
        if _check_fails(ck, val):
            x6 = words[ck[6]][pc] if ck[6] >= 0 else np.int64(0)
            return fault(frec, ck[4], pc, ck[1], val, -1, ck[5], x6, 0)
    return -1


@njit(cache=True)
def per_pc(op, words, tabs, lat_table, unit_of, cfg, frec):
    """Per-pc facts of a program: latency; timing unit (-1 for a zero-latency no-op); C_BREAK target (the next
    C_LOOP_END on the same counter after a C_LOOP_START); a flag for a word that is not an instruction or fails a
    static check. ``frec`` is scratch (left holding the last failing record)."""
    fam, alu, valid, noop = tabs[TAB_FAMILY], tabs[TAB_ALU], tabs[TAB_VALID], tabs[TAB_NOOP]
    n = op.shape[0]
    rd_a, rs3_a = words[0], words[3]
    lat_pc = np.zeros(n, dtype=np.int64)
    unit_pc = np.full(n, -1, dtype=np.int64)
    end_of = np.full(n, -1, dtype=np.int64)
    bad = np.ones(n, dtype=np.int64)
    next_end = np.full(16, -1, dtype=np.int64)
    for q in range(n - 1, -1, -1):
        o = op[q]
        if valid[o] == 0:
            continue
        lat_pc[q] = instruction_latency(lat_table, o, rd_a[q], rs3_a[q])  # H_*: 0 (HBM model)
        unit_pc[q] = -1 if (noop[o] != 0 and rd_a[q] == 0) else unit_of[o]
        bad[q] = 1 if static_fault(frec, q, o, words, tabs, cfg) >= 0 else 0
        if fam[o] == FAM_LOOP and alu[o] == ALU_START:
            end_of[q] = next_end[rd_a[q]]
        elif fam[o] == FAM_LOOP and alu[o] == ALU_END:
            next_end[rd_a[q]] = q
    return lat_pc, unit_pc, end_of, bad
