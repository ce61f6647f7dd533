"""The one assembly-text builder every generator uses (kernels.md §1.2-§1.3).

:class:`Asm` formats each instruction canonically (upper-case mnemonic, ``gpN``/``fN``/``aN``, decimal
immediates, whole-line ``; `` comments) and validates it as it is emitted, through the real assembler plus
the generator rules of kernels.md §1.2 (no gp0/f0 destinations, S_LUI_INT < 2^20, ...). Any violation is a
``ValueError`` naming the instruction. :func:`load_imm` and :func:`add_imm` are the only way a generator
materialises a constant that may not fit an immediate field.

Register operands are written with :func:`gp`, :func:`fp` and :func:`areg` (``gp(3) == "gp3"``); plain
ints are immediates or flags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from isa.assembler import _LineError, assemble_line_cached
from isa.table import BY_MNEMONIC, FIELDS, INSTRUCTIONS

from . import mutation_hooks

__all__ = ["Asm", "AsmSink", "gp", "fp", "areg", "load_imm", "add_imm", "IMM18_LIMIT", "LUI_LIMIT"]

#: S_ADDI_INT / S_LD_* / S_ST_* / S_MAP_V_FP / M_*_WO immediates are < this
IMM18_LIMIT = FIELDS["imm18"].max + 1
LUI_LIMIT = 1 << 20  # S_LUI_INT immediates (bits 20-21 would be shifted out of 32 bits)
U32_LIMIT = 1 << 32

#: instructions that write a gp / an f register operand (kernels.md §1.2: never gp0 / f0), from the table
_INT_DEST = frozenset(
    i.mnemonic for i in INSTRUCTIONS if any(o.kind == "gp" and o.name in i.writes for o in i.operands)
)
_FP_DEST = frozenset(i.mnemonic for i in INSTRUCTIONS if any(o.kind == "f" and o.name in i.writes for o in i.operands))


class AsmSink(Protocol):
    """What :func:`load_imm` / :func:`add_imm` emit into: an :class:`Asm` or an Asm-like wrapper (e.g. the
    instruction-counting tracker of flash attention), with ``sink.S_ADDI_INT(...)`` as ``sink.emit(...)``."""

    def emit(self, mnemonic: str, *operands: int | str) -> None: ...

    def comment(self, text: str) -> None: ...

    def __getattr__(self, name: str) -> Callable[..., None]: ...


def gp(n: int) -> str:
    return f"gp{int(n)}"


def fp(n: int) -> str:
    return f"f{int(n)}"


def areg(n: int) -> str:
    return f"a{int(n)}"


class Asm:
    """Accumulates validated assembly lines. ``str(asm)`` / :meth:`text` gives the program text."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self.n_instructions = 0

    # ---- emission
    def emit(self, mnemonic: str, *operands: int | str) -> None:
        """Emit one instruction; ints are immediates/flags, strings registers (``gp(3)``)."""
        mnemonic = mnemonic.upper()
        if mnemonic not in BY_MNEMONIC:
            raise ValueError(f"Asm: unknown mnemonic {mnemonic!r}")
        ops = []
        for o in operands:
            if isinstance(o, bool):
                raise ValueError(f"Asm: {mnemonic}: boolean operand {o!r}")
            if isinstance(o, int):
                if o < 0:
                    raise ValueError(f"Asm: {mnemonic}: negative immediate {o}")
                ops.append(str(o))
            elif isinstance(o, str):
                ops.append(o.lower())
            else:
                raise ValueError(f"Asm: {mnemonic}: operand {o!r} is neither a register nor an int")
        line = mnemonic + (" " + ", ".join(ops) if ops else "")
        self._check_rules(mnemonic, ops, line)
        try:
            assemble_line_cached(line)
        except _LineError as exc:
            raise ValueError(f"Asm: {line}: {exc.reason}") from None
        self._lines.append(line)
        self.n_instructions += 1

    def __getattr__(self, name: str) -> Callable[..., None]:
        # asm.S_ADDI_INT(gp(1), gp(0), 5) == asm.emit("S_ADDI_INT", ...)
        if name.isupper() and name in BY_MNEMONIC:
            return lambda *ops: self.emit(name, *ops)
        raise AttributeError(name)

    def comment(self, text: str) -> None:
        for part in str(text).splitlines() or [""]:
            self._lines.append(f"; {part}".rstrip())

    def begin(self, kernel: str, **params: object) -> None:
        kv = " ".join(f"{k}={v}" for k, v in params.items())
        self.comment(f"{kernel} begin {kv}".rstrip())

    def end(self, kernel: str) -> None:
        self.comment(f"{kernel} end")

    # ---- results
    def text(self) -> str:
        return "\n".join(self._lines) + ("\n" if self._lines else "")

    __str__ = text

    def lines(self) -> list[str]:
        return list(self._lines)

    # ---- generator rules beyond the assembler (kernels.md §1.2)
    @staticmethod
    def _check_rules(mnemonic: str, ops: list[str], line: str) -> None:
        if mnemonic in _INT_DEST and ops and ops[0] == "gp0":
            raise ValueError(f"Asm: {line}: an integer instruction must not write gp0")
        if mnemonic in _FP_DEST and ops and ops[0] == "f0":
            raise ValueError(f"Asm: {line}: an fp instruction must not write f0")
        if mnemonic == "S_LUI_INT" and len(ops) == 2 and ops[1].isdigit() and int(ops[1]) >= LUI_LIMIT:
            raise ValueError(f"Asm: {line}: S_LUI_INT immediate must be < 2^20 (upper bits are lost)")


def load_imm(asm: AsmSink, r: int, v: int) -> None:
    """``gp[r] = v`` for ``0 <= v < 2^32`` (S_ADDI_INT, or S_LUI_INT + S_ADDI_INT)."""
    if not 0 <= v < U32_LIMIT:
        raise ValueError(f"load_imm: value {v} is outside 0..2^32-1")
    if r == 0:
        raise ValueError("load_imm: destination must not be gp0")
    if mutation_hooks.active("raw_large_immediate"):
        asm.S_ADDI_INT(gp(r), gp(0), v)  # mutation: raises in Asm when v >= 2^18
        return
    if mutation_hooks.active("truncated_immediate"):
        asm.S_ADDI_INT(gp(r), gp(0), v & (IMM18_LIMIT - 1))
        return
    if v < IMM18_LIMIT:
        asm.S_ADDI_INT(gp(r), gp(0), v)
        return
    asm.S_LUI_INT(gp(r), v >> 12)
    if v & 0xFFF:
        asm.S_ADDI_INT(gp(r), gp(r), v & 0xFFF)


def add_imm(asm: AsmSink, dst: int, src: int, v: int, tmp: int | None = None) -> None:
    """``gp[dst] = gp[src] + v`` for ``v >= 0``; values >= 2^18 need a scratch ``tmp`` != ``src``."""
    if v < 0:
        raise ValueError(f"add_imm: negative value {v}; emit S_SUB_INT with a materialised value instead")
    if v < IMM18_LIMIT:
        asm.S_ADDI_INT(gp(dst), gp(src), v)
        return
    if tmp is None:
        raise ValueError(f"add_imm: value {v} >= 2^18 needs a scratch register")
    if tmp == src:
        raise ValueError("add_imm: the scratch register must differ from the source")
    load_imm(asm, tmp, v)
    asm.S_ADD_INT(gp(dst), gp(src), gp(tmp))


#: the largest C_LOOP_START count (the imm22 field), for loop-budget checks in plans
LOOP_COUNT_MAX = FIELDS["imm22"].max
