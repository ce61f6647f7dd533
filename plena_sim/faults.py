"""Fault catalogue and typed fault exceptions (isa.md §8).

One job: the rule table (rule id, integer code used inside the Numba core, exception class, what the
rule means) and the conversion of a raw fault record into a located, human-readable :class:`SimFault`.

Inside the JIT a fault is a status plus an int64 record (see ``FAULT_*`` slots); it is turned into an
exception here, outside the JIT, with the pc, the source line, the instruction text, the operand register
values and the rule broken. The reference interpreter produces the same record, so the two backends can
be compared fault for fault.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "SimFault", "IllegalInstruction", "ConfigFault", "LoopFault", "InstructionBudgetExceeded",
    "AlignmentFault", "BoundsFault", "Rule", "RULES", "RULE_BY_ID", "RULE_BY_CODE", "FAULT_RECORD_LEN",
    "FAULT_RULE", "FAULT_PC", "FAULT_OPERAND", "FAULT_VALUE", "FAULT_INDEX", "FAULT_LIMIT",
    "OPERAND_NAMES", "make_fault",
]

# ---------------------------------------------------------------- the raw record (int64 array slots)
FAULT_RECORD_LEN = 8
FAULT_RULE = 0      # rule code (Rule.code); 0 = no fault
FAULT_PC = 1        # pc of the faulting instruction
FAULT_OPERAND = 2   # which operand field holds the offending value: OPERAND_NAMES index, -1 none
FAULT_VALUE = 3     # the offending value (an address, an index, a field value)
FAULT_INDEX = 4     # row / tile / block index within the instruction (-1 if not applicable)
FAULT_LIMIT = 5     # the bound or modulus the value was checked against (-1 if not applicable)
# slots 6, 7: rule-specific extra values (documented per rule below), 0 if unused

#: operand field names, indexed by FAULT_OPERAND
OPERAND_NAMES = ("rd", "rs1", "rs2", "rs3", "funct1", "imm", "derived")


# ---------------------------------------------------------------- exception classes

class SimFault(Exception):
    """A program fault: the run stopped before the faulting instruction changed anything."""

    kind = "SimFault"

    def __init__(self, rule: str, pc: int, where: str, text: str, detail: str,
                 operands: dict[str, int] | None = None, record: tuple[int, ...] = ()):
        self.rule = rule
        self.pc = pc
        self.where = where            # "file:line" (or "<program>:pc N")
        self.text = text              # the instruction's source text
        self.detail = detail          # what was wrong, with values
        self.operands = dict(operands or {})
        self.record = tuple(record)
        self.stats = None             # filled in by the machine (statistics so far)
        super().__init__(f"{where}: {text}: {detail} [{rule}, pc {pc}]")

    def to_dict(self) -> dict:
        return {"class": type(self).__name__, "rule": self.rule, "pc": self.pc, "line": self.where,
                "text": self.text, "detail": self.detail, "operands": self.operands}


class IllegalInstruction(SimFault):
    pass


class ConfigFault(SimFault):
    """ConfigError raised at run time (CF-VM, CF-BA): the instruction needs a topology the config lacks."""


class LoopFault(SimFault):
    pass


class InstructionBudgetExceeded(SimFault):
    pass


class AlignmentFault(SimFault):
    pass


class BoundsFault(SimFault):
    pass


# ---------------------------------------------------------------- the rule table

@dataclass(frozen=True)
class Rule:
    code: int        # integer used inside the JIT (never 0)
    id: str          # isa.md §8 rule id
    cls: type
    what: str        # the rule, stated positively (used in messages)


RULES: tuple[Rule, ...] = tuple(Rule(k + 1, rid, cls, what) for k, (rid, cls, what) in enumerate((
    ("IL-OPC", IllegalInstruction, "the opcode must be an instruction"),
    ("IL-FREG", IllegalInstruction, "an fp register field must be < 8"),
    ("IL-AREG", IllegalInstruction, "an HBM address register field must be < 8"),
    ("IL-BRD", IllegalInstruction, "M_BMM/M_BTMM rd field must be 0"),
    ("IL-TOPK", IllegalInstruction, "V_TOPK policy must be 0 or 1"),
    ("CF-VM", ConfigFault, "matrix instructions need VLEN == MLEN"),
    ("CF-BA", ConfigFault, "batched matrix instructions need BROADCAST_AMOUNT*HLEN == MLEN"),
    ("LP-ZERO", LoopFault, "C_LOOP_START count must be > 0"),
    ("LP-GP0", LoopFault, "C_LOOP_START counter must not be gp0"),
    ("LP-NOMATCH", LoopFault, "C_LOOP_END needs an active loop on its counter register"),
    ("LP-BREAK", LoopFault, "C_BREAK needs an active loop with a matching C_LOOP_END"),
    ("LP-RUNAWAY", LoopFault, "a loop iteration must execute at most MAX_LOOP_INSTRUCTIONS instructions"),
    ("BUDGET", InstructionBudgetExceeded, "the run must stay within its instruction budget"),
    ("AL-VROW", AlignmentFault, "a VRAM row address must be a multiple of VLEN"),
    ("AL-MTILE", AlignmentFault, "an MRAM tile address must be a multiple of MLEN*MLEN"),
    ("AL-MM", AlignmentFault, "a matrix address must be row-granular: in-tile offset a multiple of MLEN "
                              "and its row/column block a multiple of BLEN"),
    ("AL-MV", AlignmentFault, "an M_MV column offset must be a multiple of BLEN and < MLEN"),
    ("AL-TMV", AlignmentFault, "an M_TMV in-tile offset must be a multiple of BLEN*MLEN"),
    ("AL-BHEAD", AlignmentFault, "a batched head offset must be a multiple of HLEN and < MLEN"),
    ("AL-WO", AlignmentFault, "a write-out lane offset (addr mod MLEN) must be a multiple of BLEN"),
    ("AL-BWO", AlignmentFault, "a batched write-out address must be a multiple of MLEN"),
    ("AL-MX", AlignmentFault, "an MX row offset must be a multiple of the block's byte size"),
    ("BD-VROW", BoundsFault, "a VRAM row index must be < VECTOR_SRAM_SIZE"),
    ("BD-MTILE", BoundsFault, "an MRAM tile index must be < MATRIX_SRAM_SIZE // MLEN"),
    ("BD-FPS", BoundsFault, "an FP SRAM word index must be < FP_SRAM_SIZE"),
    ("BD-INTS", BoundsFault, "an INT SRAM word index must be < INT_SRAM_SIZE"),
    ("BD-HBM", BoundsFault, "every HBM byte accessed must be in [0, HBM_SIZE)"),
)))
RULE_BY_ID: MappingProxyType[str, Rule] = MappingProxyType({r.id: r for r in RULES})
RULE_BY_CODE: MappingProxyType[int, Rule] = MappingProxyType({r.code: r for r in RULES})

#: rule id -> integer code, as plain module constants for the Numba core: R_IL_OPC, R_AL_MM, ...
for _r in RULES:
    globals()["R_" + _r.id.replace("-", "_")] = _r.code


def make_fault(record, program=None, operand_values: dict[str, int] | None = None) -> SimFault:
    """Build the typed exception for a raw fault ``record`` (sequence of FAULT_RECORD_LEN ints).

    ``program`` (an :class:`isa.program.Program`) supplies the source line and text;
    ``operand_values`` the register values of the instruction's operands (e.g. ``{"gp5": 8196}``).
    """
    rec = tuple(int(x) for x in record)
    rule = RULE_BY_CODE.get(rec[FAULT_RULE])
    if rule is None:
        raise ValueError(f"not a fault record: {rec}")
    pc = rec[FAULT_PC]
    if program is not None and 0 <= pc < len(program):
        src = program.source[pc]
        where, text = src.where(), _strip_comment(src.text)
    else:
        where, text = f"<program>:pc {pc}", "?"
    detail = _detail(rule, rec, operand_values or {})
    return rule.cls(rule.id, pc, where, text, detail, operand_values, rec)


def _strip_comment(text: str) -> str:
    for mark in ("//", ";"):
        k = text.find(mark)
        if k >= 0:
            text = text[:k]
    return text.strip()


def _detail(rule: Rule, rec: tuple[int, ...], operands: dict[str, int]) -> str:
    op = rec[FAULT_OPERAND]
    opname = OPERAND_NAMES[op] if 0 <= op < len(OPERAND_NAMES) else None
    parts = [f"value {rec[FAULT_VALUE]}"]
    if opname:
        parts[0] += f" (from {opname})"
    if rec[FAULT_INDEX] >= 0:
        parts.append(f"at row/tile/block {rec[FAULT_INDEX]}")
    if rec[FAULT_LIMIT] >= 0:
        parts.append(f"checked against {rec[FAULT_LIMIT]}")
    regs = ", ".join(f"{k}={v}" for k, v in operands.items())
    text = f"{rule.what}; " + ", ".join(parts)
    if regs:
        text += f"; operands: {regs}"
    return text
