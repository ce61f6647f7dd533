"""Fault catalogue, the raw fault record, and typed fault exceptions (isa.md §8).

One job: the rule table (rule id, integer code used inside the Numba core, exception class, what the
rule means), the layout of the raw fault record both execution backends fill, and the conversion of a
record into a located, human-readable :class:`SimFault`.

Inside the JIT a fault is a status plus an int64 record of ``FAULT_RECORD_LEN`` slots; it is turned
into an exception here, outside the JIT, with the pc, the source line, the instruction text, the operand
register values and the rule broken. The reference interpreter (``plena_sim.reference``) produces the
same record, so the two backends can be compared fault for fault: **the records must be identical**.

Precise faults
==============
A faulting instruction changes nothing: not the registers, not memory, not the accumulators, not the
loop stack *and not the loop records' runaway counts* (the per-instruction ``count += 1`` of isa.md §6.6
is committed only when the instruction retires; on any fault -- LP-RUNAWAY included -- every count is
left as it was before the instruction). The instruction is not retired and not charged (cycles,
by_opcode, counters unchanged). ``ctrl[CTRL_PC]`` stays at the faulting instruction.

Check order (isa.md §8, memory.md §5.2)
=======================================
Before each instruction: BUDGET (the work budget of :mod:`plena_sim.limits.budget`: the units used so far plus the
instruction's own exceed ``max_instructions``; one unit per instruction, so ``retired == max_instructions`` for a
program without H_* and matrix instructions), then the runaway increment and
LP-RUNAWAY, then decode (IL-OPC). Within an instruction: IL -> CF -> LP -> (timing-only runs: TO-DATA, the gp
operands in field order rd, rs1, rs2, rs3) -> AL -> BD. Within one class,
operands are taken **in assembly operand order** (isa.md §4 column "Assembly operands"), and the rows /
tiles of one operand in ascending order. Concretely (the AL and BD operand sequence per instruction):

* V two/three-address ops: AL-VROW ``gp[rd]``, ``gp[rs1]``, (VV: ``gp[rs2]``); then BD-VROW in the
  same order. V_SHFT_V: rd, rs1 only. V_RED_*: IL-FREG(rd); if ``f.rd != 0``: AL-VROW / BD-VROW
  ``gp[rs1]``.
* V_TOPK: IL-TOPK; AL-VROW ``gp[rs1]``; then BD in operand order: BD-FPS (``gp[rd]``, K words),
  BD-VROW (logit rows ``k < ceil(E/V)`` ascending), BD-INTS (``gp[rs2]``, K words).
* M_MM ``0, mat, vec``: CF-VM; AL-MM(mat, rs1), AL-VROW(vec, rs2); BD-MTILE(mat), BD-VROW(rows i<B).
  M_TMM ``0, vec, mat``: CF-VM; AL-VROW(vec, rs1), AL-MM(mat, rs2); BD-VROW(rows), BD-MTILE(mat).
  M_MV / M_TMV: as M_MM with AL-MV / AL-TMV (one VRAM row).
  M_BMM / M_BTMM: IL-BRD; CF-VM; CF-BA; AL-BHEAD(rs1), AL-VROW(rs2); BD-MTILE, BD-VROW(rows s<M).
  M_BMV / M_BTMV: CF-VM; CF-BA; AL-BHEAD(m = gp[rs1] + gp[rd], reported on rs1), AL-VROW(rs2);
  BD-MTILE, BD-VROW(one row).
  M_*_WO: CF-VM; AL-WO / AL-BWO on ``addr = gp[rd] + imm18``; BD-VROW on every destination row in the
  order they are written.
* S_LD_FP / S_ST_FP: IL-FREG(rd); BD-FPS(gp[rs1] + imm). S_MAP_V_FP: AL-VROW(gp[rd]); BD-VROW(gp[rd]),
  BD-FPS(gp[rs1] + imm, V words). S_LD_INT / S_ST_INT: BD-INTS. S_*_FP arithmetic: IL-FREG on rd,
  rs1, (rs2) in that order, then no-op if ``f.rd == 0``.
* H_*: IL-AREG(rs2); AL-VROW / AL-MTILE(gp[rd]); AL-MX rows i = 0..P-1; BD-VROW / BD-MTILE
  (rows / tiles ascending); BD-HBM rows i = 0..P-1, element range before scale range.
* C_SET_ADDR_REG: IL-AREG(rd). C_LOOP_START: LP-GP0, then LP-ZERO. C_LOOP_END: LP-NOMATCH.
  C_BREAK: LP-BREAK.

Record slots
============
``rec[FAULT_RULE]`` rule code (``Rule.code``; 0 = no fault), ``rec[FAULT_PC]`` pc of the faulting
instruction, ``rec[FAULT_OPERAND]`` index into :data:`OPERAND_NAMES` of the instruction-word field that
holds the offending operand (-1 none), ``rec[FAULT_VALUE]`` the offending value, ``rec[FAULT_INDEX]`` the
row / tile / block index within the instruction (-1 if not applicable), ``rec[FAULT_LIMIT]`` the bound
or modulus checked against (-1 if not applicable), ``rec[FAULT_X6]``, ``rec[FAULT_X7]`` rule-specific
extras (0 if unused). Unused slots hold exactly the values given here (-1 for OPERAND/INDEX/LIMIT,
0 for X6/X7) so that records compare equal across backends. Values that exceed int64 (only possible
for HBM byte addresses near 2^64) are saturated to 2^63-1.

==========  =======  ==================================  ======  =========================
rule        OPERAND  VALUE                               INDEX   LIMIT
==========  =======  ==================================  ======  =========================
IL-OPC      -1       opcode number                       -1      -1
IL-FREG     field    field value (8..15)                 -1      8
IL-AREG     field    field value (8..15)                 -1      8
IL-BRD      rd       f.rd                                -1      -1
IL-TOPK     rs3      f.rs3 (policy)                      -1      2
CF-VM       -1       VLEN                                -1      MLEN
CF-BA       -1       BROADCAST_AMOUNT*HLEN               -1      MLEN
LP-ZERO     imm      imm22 (0)                           -1      -1
LP-GP0      rd       f.rd (0)                            -1      -1
LP-NOMATCH  rd       f.rd                                -1      -1
LP-BREAK    -1       reg of the top record (-1: empty)   -1      -1
LP-RUNAWAY  -1       the record's count after increment  level   MAX_LOOP_INSTRUCTIONS
BUDGET      -1       instructions retired                -1      max_instructions
AL-VROW     field    VRAM element address                -1      VLEN
AL-MTILE    rd       MRAM element address                -1      MLEN*MLEN
AL-MM       field    matrix address m                    see X7  MLEN (X7=0) / BLEN (X7=1)
AL-MV       rs1      matrix address m                    -1      BLEN (X7=0) / MLEN (X7=1)
AL-TMV      rs1      matrix address m                    -1      BLEN*MLEN
AL-BHEAD    rs1      matrix address m (BMV: rs1+rd)      -1      HLEN (X7=0) / MLEN (X7=1)
AL-WO       rd       addr = gp[rd] + imm18               -1      BLEN
AL-BWO      rd       addr = gp[rd] + imm18               -1      MLEN
AL-MX       rs1      row offset o_i = gp[rs1] + i*pitch  i       eb*block (bytes)
BD-VROW     field    VRAM row index (address div VLEN)   row i   VECTOR_SRAM_SIZE
BD-MTILE    field    MRAM tile index                     tile t  number of MRAM tiles
BD-FPS      field    first FP SRAM word accessed         -1      FP_SRAM_SIZE
BD-INTS     field    first INT SRAM word accessed        -1      INT_SRAM_SIZE
BD-HBM      rs2      first byte address of the range     row i   HBM_SIZE
TO-DATA     field    the register's value                -1      -1
==========  =======  ==================================  ======  =========================

==========  ======================================  =====================================================
rule        X6                                      X7
==========  ======================================  =====================================================
IL-OPC      the instruction word (u32)              0
IL-FREG     0                                       0
IL-AREG     0                                       0
IL-BRD      0                                       0
IL-TOPK     0                                       0
CF-VM       0                                       0
CF-BA       BROADCAST_AMOUNT                        HLEN
LP-ZERO     f.rd (counter register)                 0
LP-GP0      imm22 (the count)                       0
LP-NOMATCH  loop stack depth                        0
LP-BREAK    start_pc of top record (-1: empty)      loop stack depth
LP-RUNAWAY  the record's counter register           the record's start_pc
BUDGET      units used beyond 1 per instruction     the next instruction's units beyond 1
AL-VROW     address mod VLEN                        0
AL-MTILE    address mod (MLEN*MLEN)                 0
AL-MM       off = m mod (MLEN*MLEN)                 0: off mod MLEN != 0; 1: (off div MLEN) mod BLEN != 0
                                                    (INDEX = off div MLEN)
AL-MV       off                                     0: off mod BLEN != 0; 1: off >= MLEN
AL-TMV      off                                     0
AL-BHEAD    off                                     0: off mod HLEN != 0; 1: off >= MLEN
AL-WO       addr mod MLEN                           0
AL-BWO      addr mod MLEN                           0
AL-MX       o_i mod (eb*block)                      pitch
BD-VROW     the row's element address               0
BD-MTILE    the tile's / operand's element address  0
BD-FPS      number of words accessed                0
BD-INTS     number of words accessed                0
BD-HBM      0: element range, 1: scale range        range length (bytes)
TO-DATA     the register index                      0
==========  ======================================  =====================================================

Notes on the tables: "field" is the word field of the register operand that supplied the address
(e.g. rs2 for the vector operand of M_MM, rs1 for that of M_TMM, rd for V_* destinations and the
write-out ops, rs1 for S_LD_FP/S_ST_FP/S_MAP_V_FP/S_LD_INT/S_ST_INT bases, rd / rs2 for V_TOPK's FP /
INT destinations, rd for the H_* SRAM side; BD-MTILE: rs1 / rs2 mat operand or rd of H_PREFETCH_M).
INDEX of BD-VROW is the row number within the instruction's access (0 for single-row operands; i of
``v + i*M``; ``b*M + s`` for M_BMM_WO; k for V_TOPK logit rows; i for H_* and M_MM_WO rows); for
BD-MTILE it is t of H_PREFETCH_M (0 for M_*). LP-RUNAWAY: ``level`` is the position in the loop stack
(0 = outermost) of the first record, scanning from the outermost, whose count exceeds the limit.
BUDGET and LP-RUNAWAY report the pc of the instruction that was about to execute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .limits.budget import MACS_PER_UNIT
from .numerics import bf16

if TYPE_CHECKING:
    from isa.table import Instr

__all__ = [
    "SimFault",
    "IllegalInstruction",
    "ConfigFault",
    "LoopFault",
    "InstructionBudgetExceeded",
    "AlignmentFault",
    "BoundsFault",
    "DataDependenceFault",
    "Rule",
    "RULES",
    "RULE_BY_ID",
    "RULE_BY_CODE",
    "FAULT_RECORD_LEN",
    "FAULT_RULE",
    "FAULT_PC",
    "FAULT_OPERAND",
    "FAULT_VALUE",
    "FAULT_INDEX",
    "FAULT_LIMIT",
    "FAULT_X6",
    "FAULT_X7",
    "OPERAND_NAMES",
    "OPERAND_INDEX",
    "make_fault",
    "blank_record",
    "operand_registers",
    "operand_values",
    "INT64_MAX",
]

# ---------------------------------------------------------------- the raw record (int64 array slots)
FAULT_RECORD_LEN = 8
FAULT_RULE = 0  # rule code (Rule.code); 0 = no fault
FAULT_PC = 1  # pc of the faulting instruction
FAULT_OPERAND = 2  # which operand field holds the offending value: OPERAND_NAMES index, -1 none
FAULT_VALUE = 3  # the offending value (an address, an index, a field value)
FAULT_INDEX = 4  # row / tile / block index within the instruction (-1 if not applicable)
FAULT_LIMIT = 5  # the bound or modulus the value was checked against (-1 if not applicable)
FAULT_X6 = 6  # rule-specific extra value (tables above), 0 if unused
FAULT_X7 = 7  # rule-specific extra value (tables above), 0 if unused

INT64_MAX = (1 << 63) - 1

#: operand field names, indexed by FAULT_OPERAND
OPERAND_NAMES = ("rd", "rs1", "rs2", "rs3", "funct1", "imm", "derived")
OPERAND_INDEX = MappingProxyType({n: k for k, n in enumerate(OPERAND_NAMES)})


def blank_record(rule_code: int, pc: int) -> list[int]:
    """A record with the rule and pc set and every other slot at its 'unused' value."""
    return [int(rule_code), int(pc), -1, 0, -1, -1, 0, 0]


# ---------------------------------------------------------------- exception classes


class SimFault(Exception):
    """A program fault: the run stopped before the faulting instruction changed anything.

    Attributes: ``rule`` (isa.md §8 id), ``pc``, ``where`` (``file:line``), ``text`` (instruction
    source text), ``detail`` (what was wrong, with values), ``operands`` (register name -> value),
    ``record`` (the raw record), ``stats`` (statistics so far, attached by the machine).
    """

    kind = "SimFault"

    def __init__(
        self,
        rule: str,
        pc: int,
        where: str,
        text: str,
        detail: str,
        operands: dict[str, int] | None = None,
        record: tuple[int, ...] = (),
    ):
        self.rule = rule
        self.pc = pc
        self.where = where  # "file:line" (or "<program>:pc N")
        self.text = text  # the instruction's source text
        self.detail = detail  # what was wrong, with values
        self.operands = dict(operands or {})
        self.record = tuple(record)
        self.stats: dict[str, Any] | None = None  # filled in by the machine (statistics so far)
        self.result: Any = None  # the machine's RunResult, when it raises the fault
        super().__init__(f"{where}: {text}: {detail} [{rule}, pc {pc}]")

    def to_dict(self) -> dict:
        return {
            "class": type(self).__name__,
            "rule": self.rule,
            "pc": self.pc,
            "line": self.where,
            "text": self.text,
            "detail": self.detail,
            "operands": self.operands,
        }


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


class DataDependenceFault(SimFault):
    """TO-DATA (timing-only runs): an address, loop count or control value comes from data the mode skips."""


# ---------------------------------------------------------------- the rule table


@dataclass(frozen=True)
class Rule:
    code: int  # integer used inside the JIT (never 0)
    id: str  # isa.md §8 rule id
    cls: type
    what: str  # the rule, stated positively (used in messages)


RULES: tuple[Rule, ...] = tuple(
    Rule(k + 1, rid, cls, what)
    for k, (rid, cls, what) in enumerate(
        (
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
            ("BUDGET", InstructionBudgetExceeded, "the run must stay within its work budget (plena_sim.limits.budget)"),
            ("AL-VROW", AlignmentFault, "a VRAM row address must be a multiple of VLEN"),
            ("AL-MTILE", AlignmentFault, "an MRAM tile address must be a multiple of MLEN*MLEN"),
            (
                "AL-MM",
                AlignmentFault,
                "a matrix address must be row-granular: in-tile offset a multiple of MLEN "
                "and its row/column block a multiple of BLEN",
            ),
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
            (
                "TO-DATA",
                DataDependenceFault,
                "in a timing-only run no address, loop count or control value may come from skipped data "
                "(INT SRAM words written by V_TOPK without a routing policy)",
            ),
        )
    )
)
RULE_BY_ID: MappingProxyType[str, Rule] = MappingProxyType({r.id: r for r in RULES})
RULE_BY_CODE: MappingProxyType[int, Rule] = MappingProxyType({r.code: r for r in RULES})

#: rule id -> integer code, as plain module constants for the Numba core: R_IL_OPC, R_AL_MM, ...
for _r in RULES:
    globals()["R_" + _r.id.replace("-", "_")] = _r.code

if TYPE_CHECKING:  # for type checkers: the R_<RULE> names above are generated module constants

    def __getattr__(name: str) -> int: ...


# ---------------------------------------------------------------- operand naming

_REG_PREFIX = {"gp": "gp", "f": "f", "a": "a"}


def _instr_of(word: int | None) -> Instr | None:
    if word is None:
        return None
    from isa.encoding import field
    from isa.table import BY_OPCODE

    return BY_OPCODE.get(field(int(word), "opcode"))


def _field(word: int, name: str) -> int:
    from isa.table import FIELDS

    f = FIELDS[name]
    return (int(word) >> f.shift) & f.max


def operand_registers(word: int) -> list[tuple[str, str, int, str]]:
    """The register operands of ``word`` in assembly order: ``(name, kind, index, field)``,
    e.g. ``("gp5", "gp", 5, "rs1")``. Field values with no register (f8, a9) are skipped; M_MM_WO's
    stride register is skipped when it is gp0 (it then means stride 1)."""
    instr = _instr_of(word)
    if instr is None:
        return []
    from isa.table import REGISTER_COUNT

    out = []
    seen = set()
    for op in instr.operands:
        if op.kind not in _REG_PREFIX or op.field is None:
            continue
        v = _field(word, op.field)
        if v >= REGISTER_COUNT[op.kind]:
            continue
        name = f"{_REG_PREFIX[op.kind]}{v}"
        if name in seen:
            continue
        seen.add(name)
        out.append((name, op.kind, v, op.field))
    return out


def operand_values(word: int, gp, fp, areg) -> dict[str, int | float]:
    """Register name -> current value for the register operands of ``word`` (fp values as floats).

    ``gp``: u32 values, ``fp``: bf16 bit patterns, ``areg``: u64 values (array-likes)."""
    vals: dict[str, int | float] = {}
    for name, kind, idx, _field_name in operand_registers(word):
        if kind == "gp":
            vals[name] = int(gp[idx])
        elif kind == "a":
            vals[name] = int(areg[idx])
        else:
            vals[name] = float(bf16.decode_scalar(fp[idx]))
    return vals


def _reg_for_field(word: int | None, field_name: str | None) -> str | None:
    if word is None or field_name is None:
        return None
    for name, _kind, _idx, fld in operand_registers(word):
        if fld == field_name:
            return name
    return None


# ---------------------------------------------------------------- record -> exception


def make_fault(
    record, program=None, operand_values: dict[str, int] | None = None, *, word: int | None = None, state=None
) -> SimFault:
    """Build the typed exception for a raw fault ``record`` (sequence of FAULT_RECORD_LEN ints).

    ``program`` (an :class:`isa.program.Program`) supplies the source line, the text and the word;
    ``operand_values`` the register values of the instruction's operands (e.g. ``{"gp5": 8196}``).
    Alternatively pass ``state`` (a :class:`~plena_sim.memory.state.MachineState` at the fault, unchanged by
    the faulting instruction) and the operand values are read from it. ``word`` overrides the
    instruction word when no program is available.
    """
    rec = tuple(int(x) for x in record)
    if len(rec) != FAULT_RECORD_LEN:
        raise ValueError(f"a fault record has {FAULT_RECORD_LEN} slots, got {len(rec)}")
    rule = RULE_BY_CODE.get(rec[FAULT_RULE])
    if rule is None:
        raise ValueError(f"not a fault record: {rec}")
    pc = rec[FAULT_PC]
    if word is None and program is not None and 0 <= pc < len(program):
        word = int(program.words[pc])
    if program is not None and 0 <= pc < len(program):
        src = program.source[pc]
        where, text = src.where(), _strip_comment(src.text)
    else:
        where = f"<program>:pc {pc}"
        if word is not None:
            from isa.disasm import disassemble_word

            text = disassemble_word(word)
        elif rule.id in ("BUDGET", "LP-RUNAWAY"):
            text = "(end of program)"
        else:
            text = "?"
    if operand_values is None and state is not None and word is not None:
        operand_values = globals()["operand_values"](word, state.gp, state.fp, state.areg)
    operand_values = dict(operand_values or {})
    detail = _detail(rule, rec, word, operand_values)
    return rule.cls(rule.id, pc, where, text, detail, operand_values, rec)


def _strip_comment(text: str) -> str:
    for mark in ("//", ";"):
        k = text.find(mark)
        if k >= 0:
            text = text[:k]
    return text.strip()


def _fmt_val(v) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _detail(rule: Rule, rec: tuple[int, ...], word: int | None, operands: dict) -> str:
    try:
        msg = _specific(rule.id, rec, word)
    except Exception:  # never let message formatting hide the fault itself
        msg = None
    if msg is None:
        msg = _generic(rule, rec)
    if operands:
        msg += "; " + ", ".join(f"{k}={_fmt_val(v)}" for k, v in operands.items())
    return msg


def _generic(rule: Rule, rec: tuple[int, ...]) -> str:
    op = rec[FAULT_OPERAND]
    opname = OPERAND_NAMES[op] if 0 <= op < len(OPERAND_NAMES) else None
    parts = [f"value {rec[FAULT_VALUE]}"]
    if opname:
        parts[0] += f" (from {opname})"
    if rec[FAULT_INDEX] >= 0:
        parts.append(f"at row/tile/block {rec[FAULT_INDEX]}")
    if rec[FAULT_LIMIT] >= 0:
        parts.append(f"checked against {rec[FAULT_LIMIT]}")
    return f"{rule.what}; " + ", ".join(parts)


@dataclass(frozen=True)
class _FaultView:
    """The slots of a fault record with the naming of its operand, as the rule messages use them."""

    val: int
    idx: int
    lim: int
    x6: int
    x7: int
    word: int | None
    fld: str | None  # the word field of the offending operand (OPERAND_NAMES), None if none
    instr: Instr | None
    mn: str  # the mnemonic ("instruction" if unknown)
    reg: str | None  # the register in field ``fld`` ("gp5"), None if none
    src: str  # " (gp5)", " (field rs1)" or ""

    def imm_src(self) -> str:
        """``" (gp3 + 16)"`` for the ``addr = gp[x] + imm`` forms."""
        if self.word is None or self.instr is None:
            return self.src
        imm = _field(self.word, "imm18")
        return f" ({self.reg} + {imm})" if self.reg else self.src


def _fault_view(rec: tuple[int, ...], word: int | None) -> _FaultView:
    op = rec[FAULT_OPERAND]
    fld = OPERAND_NAMES[op] if 0 <= op < len(OPERAND_NAMES) else None
    instr = _instr_of(word)
    mn = instr.mnemonic if instr is not None else "instruction"
    reg = _reg_for_field(word, fld)
    src = f" ({reg})" if reg else (f" (field {fld})" if fld else "")
    return _FaultView(
        rec[FAULT_VALUE],
        rec[FAULT_INDEX],
        rec[FAULT_LIMIT],
        rec[FAULT_X6],
        rec[FAULT_X7],
        word,
        fld,
        instr,
        mn,
        reg,
        src,
    )


def _msg_il_opc(v: _FaultView) -> str:
    from isa.table import NOT_INSTRUCTIONS

    up = NOT_INSTRUCTIONS.get(v.val, "")
    note = f" (upstream {up}, not part of this ISA)" if up else ""
    return f"opcode {v.val:#04x} is not an instruction{note}; word 0x{v.x6 & 0xFFFFFFFF:08X}"


def _msg_lp_break(v: _FaultView) -> str:
    if v.x7 == 0 or v.val < 0:
        return "C_BREAK outside any loop (loop stack empty)"
    return (
        f"the innermost loop (counter gp{v.val}, C_LOOP_START at pc {v.x6}) has no C_LOOP_END gp{v.val} after its start"
    )


def _msg_al_mm(v: _FaultView) -> str:
    what = "column" if v.mn != "M_TMM" else "row"
    if v.x7 == 0:
        return (
            f"matrix address {v.val}{v.src} is not row-granular: offset {v.x6} within tile is not a "
            f"multiple of MLEN={v.lim}"
        )
    return (
        f"matrix address {v.val}{v.src} selects {what} {v.idx} (in-tile offset {v.x6}), which is not a "
        f"multiple of BLEN={v.lim}"
    )


def _msg_al_mv(v: _FaultView) -> str:
    if v.x7 == 0:
        return f"matrix address {v.val}{v.src}: column offset {v.x6} within tile is not a multiple of BLEN={v.lim}"
    return (
        f"matrix address {v.val}{v.src}: in-tile offset {v.x6} is not < MLEN={v.lim} "
        f"(M_MV addresses a column offset within the tile's first row)"
    )


def _msg_al_bhead(v: _FaultView) -> str:
    src = v.src
    if v.instr is not None and v.mn in ("M_BMV", "M_BTMV"):
        rd_reg = _reg_for_field(v.word, "rd")
        src = f" ({v.reg} + {rd_reg})" if v.reg and rd_reg else src
    if v.x7 == 0:
        return f"matrix address {v.val}{src}: head offset {v.x6} within tile is not a multiple of HLEN={v.lim}"
    return f"matrix address {v.val}{src}: head offset {v.x6} within tile is not < MLEN={v.lim}"


def _msg_bd_vrow(v: _FaultView) -> str:
    row = f"row {v.idx} of the access: " if v.idx > 0 else ""
    return (
        f"{row}VRAM row {v.val} (element address {v.x6}{', base ' + v.reg if v.reg else ''}) is outside "
        f"VRAM (VECTOR_SRAM_SIZE={v.lim} rows)"
    )


def _msg_bd_mtile(v: _FaultView) -> str:
    t = f"tile {v.idx} of the transfer: " if v.idx > 0 else ""
    return (
        f"{t}MRAM tile {v.val} (element address {v.x6}{', base ' + v.reg if v.reg else ''}) is outside "
        f"MRAM ({v.lim} tiles)"
    )


def _msg_bd_sram(mem: str, key: str) -> Callable[[_FaultView], str]:
    """The BD-FPS / BD-INTS message of the SRAM ``mem`` (size key ``key``)."""

    def msg(v: _FaultView) -> str:
        base = v.imm_src() if v.fld == "rs1" else v.src
        if v.x6 == 1:
            return f"{mem} word {v.val}{base} is outside {key}={v.lim}"
        return f"{mem} words [{v.val}, {v.val + v.x6}){base} exceed {key}={v.lim}"

    return msg


def _msg_bd_hbm(v: _FaultView) -> str:
    kind = "element" if v.x6 == 0 else "scale"
    if v.val == INT64_MAX:
        return (
            f"row {v.idx}: {kind} byte range of {v.x7} bytes{v.src} starts at or beyond 2^63-1 "
            f"(saturated in the record) and exceeds HBM_SIZE={v.lim}"
        )
    return f"row {v.idx}: {kind} byte range [{v.val}, {v.val + v.x7}) of {v.x7} bytes{v.src} exceeds HBM_SIZE={v.lim}"


#: rule id -> the specific message of a record of that rule
_SPECIFIC: MappingProxyType[str, Callable[[_FaultView], str]] = MappingProxyType(
    {
        "IL-OPC": _msg_il_opc,
        "IL-FREG": lambda v: f"fp register field {v.fld}={v.val} names no register (only f0..f7 exist)",
        "IL-AREG": lambda v: f"HBM address register field {v.fld}={v.val} names no register (only a0..a7 exist)",
        "IL-BRD": lambda v: f"{v.mn} requires rd field 0, found {v.val}",
        "IL-TOPK": lambda v: f"policy {v.val} is not 0 (E=32, K=4) or 1 (E=128, K=8)",
        "CF-VM": lambda v: f"matrix instructions need VLEN == MLEN; the config has VLEN={v.val}, MLEN={v.lim}",
        "CF-BA": lambda v: (
            f"batched matrix instructions need BROADCAST_AMOUNT*HLEN == MLEN; the config has "
            f"{v.x6}*{v.x7} = {v.val}, MLEN={v.lim}"
        ),
        "LP-ZERO": lambda v: f"loop count is 0 (counter gp{v.x6}); a loop must run at least once",
        "LP-GP0": lambda v: f"loop counter gp0 always reads 0 (count {v.x6}); use gp1..gp15",
        "LP-NOMATCH": lambda v: f"no active loop counts in gp{v.val} (loop stack depth {v.x6})",
        "LP-BREAK": _msg_lp_break,
        "LP-RUNAWAY": lambda v: (
            f"loop level {v.idx} (C_LOOP_START at pc {v.x7}, counter gp{v.x6}) has executed "
            f"{v.val} instructions in one iteration, more than MAX_LOOP_INSTRUCTIONS={v.lim}"
        ),
        "BUDGET": lambda v: (
            f"work budget exhausted: {v.val} instructions retired and {v.val + v.x6} work units used, the next "
            f"instruction needs {1 + v.x7}, max_instructions={v.lim} (a unit is an instruction, a DMA row or "
            f"{MACS_PER_UNIT} matrix MACs)"
        ),
        "AL-VROW": lambda v: f"VRAM row address {v.val}{v.src} is not a multiple of VLEN={v.lim} (remainder {v.x6})",
        "AL-MTILE": lambda v: (
            f"MRAM tile address {v.val}{v.src} is not a multiple of MLEN*MLEN={v.lim} (offset {v.x6} within tile)"
        ),
        "AL-MM": _msg_al_mm,
        "AL-MV": _msg_al_mv,
        "AL-TMV": lambda v: (
            f"matrix address {v.val}{v.src}: in-tile offset {v.x6} is not a multiple of "
            f"BLEN*MLEN={v.lim} (M_TMV addresses row blocks)"
        ),
        "AL-BHEAD": _msg_al_bhead,
        "AL-WO": lambda v: (
            f"write-out address {v.val}{v.imm_src()}: lane offset {v.x6} (address mod MLEN) is "
            f"not a multiple of BLEN={v.lim}"
        ),
        "AL-BWO": lambda v: (
            f"write-out address {v.val}{v.imm_src()} is not a multiple of MLEN={v.lim} (remainder {v.x6})"
        ),
        "AL-MX": lambda v: (
            f"row {v.idx}: HBM row offset {v.val} ({v.reg or 'gp_hoff'} + {v.idx}*pitch, pitch "
            f"{v.x7}) is not a multiple of the MX block size {v.lim} bytes (remainder {v.x6})"
        ),
        "BD-VROW": _msg_bd_vrow,
        "BD-MTILE": _msg_bd_mtile,
        "BD-FPS": _msg_bd_sram("FP SRAM", "FP_SRAM_SIZE"),
        "BD-INTS": _msg_bd_sram("INT SRAM", "INT_SRAM_SIZE"),
        "BD-HBM": _msg_bd_hbm,
        "TO-DATA": lambda v: (
            f"gp{v.x6} = {v.val} (field {v.fld}) comes from data a timing-only run does not compute (a "
            f"V_TOPK result); give a routing policy (--routing uniform|round-robin|FILE) or run functionally"
        ),
    }
)


def _specific(rid: str, rec: tuple[int, ...], word: int | None) -> str | None:
    """The rule-specific message of a record (None: no specific message, use the generic one)."""
    view = _fault_view(rec, word)
    fmt = _SPECIFIC.get(rid)
    return fmt(view) if fmt is not None else None
