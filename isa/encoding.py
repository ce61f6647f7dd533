"""Word <-> field conversion and the decoder constants, all derived from :mod:`isa.table`.

* :func:`encode` packs field values into a word; :func:`field` / :func:`decode` unpack one.
* :func:`decode_program` unpacks a whole program into flat integer arrays (one per field), the form the
  Numba core executes.
* ``OP_<MNEMONIC>`` module constants (e.g. ``OP_M_MM``), ``SHIFT_<FIELD>``, ``MASK_<FIELD>``,
  ``FAM_<FAMILY>`` and ``ALU_<OPERATION>`` are generated from the table so Numba code can use them as
  compile-time constants; :func:`opcode_families` / :func:`opcode_alus` map opcodes to the latter two.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from .table import ALUS, BY_MNEMONIC, BY_OPCODE, FAMILIES, FIELDS, INSTRUCTIONS, NOT_INSTRUCTIONS, WORD_BITS

__all__ = [
    "encode",
    "field",
    "decode",
    "decode_program",
    "is_instruction",
    "WORD_MASK",
    "OPCODES",
    "UNIT_CODE",
    "UNIT_NAMES",
    "opcode_units",
    "opcode_families",
    "opcode_alus",
    "N_OPCODES",
    "FAM_NONE",
]

if TYPE_CHECKING:  # the OP_ / SHIFT_ / MASK_ / FAM_ / ALU_ constants below are generated into globals()

    def __getattr__(name: str) -> int: ...


WORD_MASK = (1 << WORD_BITS) - 1

#: mnemonic -> opcode number
OPCODES: dict[str, int] = {i.mnemonic: i.opcode for i in INSTRUCTIONS}

#: unit letter -> small integer (used in statistics arrays); order of the table's unit column
UNIT_NAMES: tuple[str, ...] = ("M", "V", "S", "H", "C")
UNIT_CODE: dict[str, int] = {u: k for k, u in enumerate(UNIT_NAMES)}

# ---- generated module constants for the Numba core (OP_M_MM, SHIFT_RD, MASK_RD, ...)
for _i in INSTRUCTIONS:
    globals()[f"OP_{_i.mnemonic}"] = _i.opcode
for _f in FIELDS.values():
    globals()[f"SHIFT_{_f.name.upper()}"] = _f.shift
    globals()[f"MASK_{_f.name.upper()}"] = _f.max
N_OPCODES = 1 << FIELDS["opcode"].width
# ---- family / operation codes (FAM_SINT, ALU_ADD, ...): the core dispatches on these, not on opcodes
for _k, _name in enumerate(FAMILIES):
    globals()[f"FAM_{_name.upper()}"] = _k
for _k, _name in enumerate(ALUS):
    globals()[f"ALU_{_name.upper()}"] = _k
#: the family code of a non-instruction opcode
FAM_NONE = -1


def opcode_families() -> np.ndarray:
    """int64 array indexed by opcode: family code (``FAM_*``), or FAM_NONE for a non-instruction."""
    out = np.full(N_OPCODES, FAM_NONE, dtype=np.int64)
    for i in INSTRUCTIONS:
        out[i.opcode] = FAMILIES.index(i.family)
    return out


def opcode_alus() -> np.ndarray:
    """int64 array indexed by opcode: operation code (``ALU_*``), or -1 for a non-instruction."""
    out = np.full(N_OPCODES, -1, dtype=np.int64)
    for i in INSTRUCTIONS:
        out[i.opcode] = ALUS.index(i.alu)
    return out


def opcode_units() -> np.ndarray:
    """int8 array indexed by opcode: unit code, or -1 for a non-instruction."""
    out = np.full(N_OPCODES, -1, dtype=np.int8)
    for i in INSTRUCTIONS:
        out[i.opcode] = UNIT_CODE[i.unit]
    return out


def is_instruction(opcode: int) -> bool:
    return opcode in BY_OPCODE


def encode(mnemonic: str, **fields: int) -> int:
    """Pack ``fields`` (names from FIELDS, e.g. rd=1, imm18=5) into the word of ``mnemonic``.

    Every value is range-checked against its field width; a field the format does not carry is an
    error (ValueError). This is the only place words are assembled.
    """
    instr = BY_MNEMONIC[mnemonic]
    word = instr.opcode
    for name, value in fields.items():
        f = FIELDS[name]
        if name not in ("opcode",) and name not in instr.used_fields:
            if value == 0:
                continue
            raise ValueError(f"{mnemonic} has no field {name}")
        if not 0 <= value <= f.max:
            raise ValueError(f"{mnemonic}: {name}={value} does not fit {f.width} bits")
        word |= value << f.shift
    return word


def field(word: int, name: str) -> int:
    f = FIELDS[name]
    return (word >> f.shift) & f.max


def decode(word: int) -> dict[str, int]:
    """All fields of ``word`` (every field extracted; the opcode decides which are meaningful)."""
    if not 0 <= word <= WORD_MASK:
        raise ValueError(f"word {word:#x} is not a 32-bit value")
    return {name: field(word, name) for name in FIELDS}


def decode_program(words: Iterable[int] | np.ndarray) -> dict[str, np.ndarray]:
    """Vectorised decode: one int64 array per field, plus ``word`` (the raw words as int64)."""
    w = np.asarray(words, dtype=np.int64).reshape(-1)
    if w.size and (w.min() < 0 or w.max() > WORD_MASK):
        raise ValueError("program words must be 32-bit values")
    out = {"word": w.copy()}
    for name, f in FIELDS.items():
        out[name] = (w >> f.shift) & f.max
    return out


def not_instruction_name(opcode: int) -> str | None:
    """The upstream name of a reserved opcode ('' if none), or None if ``opcode`` is an instruction."""
    return NOT_INSTRUCTIONS.get(opcode) if opcode not in BY_OPCODE else None
