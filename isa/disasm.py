"""Disassembler: words -> canonical assembly text (isa.md §2).

Canonical form: upper-case mnemonic, lower-case registers, decimal numbers, operands joined by ``", "``;
placeholders print as ``0``; an optional operand is printed only if it or a later optional operand is
non-zero; upstream-compatibility operands are never printed. Non-zero unused bits are appended as
``" ; unused=0x........"``. A word that is not an instruction (or whose operand fields can never be
assembled, e.g. an fp field of 8) prints as ``.word 0x........`` with a comment saying why; such words are
not an error until executed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import SupportsInt

from .encoding import field
from .table import BY_OPCODE, NOT_INSTRUCTIONS, REGISTER_COUNT, Instr, Operand

__all__ = ["disassemble_word", "disassemble", "illegal_reason"]

_PREFIX = {"gp": "gp", "f": "f", "a": "a"}


def _operand_value(op: Operand, word: int) -> int:
    return field(word, op.field) if op.field else 0


def illegal_reason(instr: Instr, word: int) -> str | None:
    """Why the operand fields of ``word`` cannot be written in assembly (None if they can)."""
    for op in instr.operands:
        if op.field is None:
            continue
        v = field(word, op.field)
        if op.kind in REGISTER_COUNT and v >= REGISTER_COUNT[op.kind]:
            return f"{op.name} field {op.field}={v} names no {op.kind} register"
        if op.kind == "zero" and v != 0:
            return f"{op.field} must be 0, is {v}"
        if op.max_value is not None and v > op.max_value:
            return f"{op.name}={v} exceeds {op.max_value}"
        for bad, why in op.forbid:
            if v == bad:
                return why
    return None


def disassemble_word(word: int) -> str:
    word = int(word)
    opcode = field(word, "opcode")
    instr = BY_OPCODE.get(opcode)
    if instr is None:
        name = NOT_INSTRUCTIONS.get(opcode, "")
        note = f"opcode {opcode:#04x} is not an instruction" + (f" (upstream {name})" if name else "")
        return f".word 0x{word:08X} ; {note}"
    why = illegal_reason(instr, word)
    if why is not None:
        return f".word 0x{word:08X} ; {instr.mnemonic}: {why}"
    shown = [o for o in instr.operands if not o.compat]
    # drop trailing optional operands that are zero
    while shown and shown[-1].optional and _operand_value(shown[-1], word) == 0:
        shown.pop()
    parts = []
    for op in shown:
        v = _operand_value(op, word)
        parts.append("0" if op.kind == "zero" else (f"{_PREFIX[op.kind]}{v}" if op.kind in _PREFIX else str(v)))
    text = instr.mnemonic + (" " + ", ".join(parts) if parts else "")
    unused = word & instr.unused_mask
    if unused:
        text += f" ; unused=0x{unused:08X}"
    return text


def disassemble(words: Iterable[SupportsInt]) -> list[str]:
    return [disassemble_word(int(w)) for w in words]
