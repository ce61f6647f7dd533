"""Precompiled operand plans: encoding already-parsed operands without text, and spelling words back.

For every (mnemonic, operand count) the assembler accepts, :data:`PLANS` holds the first matching form of
:meth:`~isa.table.Instr.forms` compiled into one :class:`OperandCode` per operand. :func:`encode_operands`
encodes a tuple of operands -- ``int`` numbers and canonical lower-case register names (``"gp3"``) -- into a
word, or returns None when anything is unusual (a wrong kind, an out-of-range or forbidden value, an other
spelling). It accepts a subset of what the text assembler accepts and gives the same word, so a caller
falls back to the full assembler on None to get its exact error message (or its result for a rare spelling).

A successful encoding also yields a *recipe*: an index into :data:`TEMPLATES` that spells the instruction
back from its word exactly as its operands were written (``"0"`` vs ``"gp0"`` for a placeholder or a
zero-literal register, see ``Operand.zero_literal``). :class:`SpelledTexts` uses it to produce source text
lazily, one line on request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from .table import BY_MNEMONIC, FIELDS, INSTRUCTIONS, REGISTER_COUNT, Instr, Operand

__all__ = [
    "OperandCode",
    "Plan",
    "Encoder",
    "PLANS",
    "TEMPLATES",
    "EXPLICIT",
    "encode_operands",
    "encoder_for",
    "spell",
    "SpelledTexts",
]

#: the recipe of a word whose text is stored explicitly (not spelled from a template)
EXPLICIT = 0xFFFF


@dataclass(frozen=True)
class OperandCode:
    """How one operand of a form is accepted and encoded."""

    #: accepted register spellings (canonical, lower case) -> the operand's encoded bits
    regs: Mapping[str, int]
    #: ints 0..hi are accepted (-1: none), minus ``forbid``; an int ``v`` encodes as ``v * mult``
    hi: int
    mult: int
    forbid: frozenset[int]
    #: recipe increment when the operand is written as an int (0: it can only be written one way)
    int_bit: int
    #: template pieces when written as a str / an int: (text, shift, mask) -- the field's value is printed
    #: after ``text`` unless mask is 0 (a number is always an int: both pieces are the same)
    as_str: tuple[str, int, int]
    as_int: tuple[str, int, int]


#: the hot-loop form of a plan: (opcode, recipe, per operand (regs, hi, mult, forbid or None, int_bit))
Encoder = tuple[int, int, tuple[tuple[dict[str, int], int, int, "frozenset[int] | None", int], ...]]


@dataclass(frozen=True)
class Plan:
    mnemonic: str
    opcode: int
    codes: tuple[OperandCode, ...]
    #: recipe of the all-strings spelling; ``recipe + sum(int_bit)`` is the recipe of a spelling
    recipe: int

    @property
    def encoder(self) -> Encoder:
        """The plan as plain tuples and dicts, what :func:`encode_operands` takes (build it once)."""
        steps = tuple((dict(c.regs), c.hi, c.mult, c.forbid or None, c.int_bit) for c in self.codes)
        return self.opcode, self.recipe, steps


def _field_of(op: Operand) -> tuple[int, int]:
    """(shift, width mask) of the operand's field; (0, 0) if it is not encoded."""
    if op.field is None:
        return 0, 0
    f = FIELDS[op.field]
    return f.shift, f.max


def _operand_code(op: Operand, int_bit: int) -> OperandCode | None:
    """The code of one operand; None if it cannot be encoded here (an unencoded register)."""
    shift, fmax = _field_of(op)
    forbid = frozenset(bad for bad, _why in op.forbid)
    if op.kind in REGISTER_COUNT:
        if op.field is None:
            return None
        count = min(REGISTER_COUNT[op.kind], fmax + 1)
        regs = MappingProxyType({f"{op.kind}{n}": n << shift for n in range(count) if n not in forbid})
        hi = 0 if op.zero_literal and 0 not in forbid else -1  # the number 0 spells register 0
        return OperandCode(regs, hi, 0, frozenset(), int_bit, (op.kind, shift, fmax), ("", shift, fmax))
    if op.kind == "zero":  # the placeholder: gp0 or the number 0, never anything else
        return OperandCode(MappingProxyType({"gp0": 0}), 0, 0, frozenset(), int_bit, ("gp0", 0, 0), ("0", 0, 0))
    no_regs: Mapping[str, int] = MappingProxyType({})
    if op.field is None:  # an unencoded number: only 0 (anything else goes to the full assembler)
        return OperandCode(no_regs, 0 if op.max_value is None else -1, 0, forbid, 0, ("0", 0, 0), ("0", 0, 0))
    hi = min(op.max_value, fmax) if op.max_value is not None else fmax
    return OperandCode(no_regs, hi, 1 << shift, forbid, 0, ("", shift, fmax), ("", shift, fmax))


def _compile_form(instr: Instr, form: tuple[Operand, ...], recipe: int) -> tuple[Plan, int] | None:
    """The plan of ``form`` and its number of spellings (recipes); None if it goes to the full assembler."""
    named = [o.field for o in form if o.field is not None]
    if len(named) != len(set(named)):
        return None  # two operands in one field
    codes = []
    bit = 1  # the int bits of the two-way operands are consecutive powers of two
    for op in form:
        two_ways = op.kind == "zero" or (op.kind in REGISTER_COUNT and op.zero_literal)
        code = _operand_code(op, bit if two_ways else 0)
        if code is None:
            return None
        codes.append(code)
        bit <<= two_ways
    return Plan(instr.mnemonic, instr.opcode, tuple(codes), recipe), bit


def _compile() -> dict[tuple[str, int], Plan]:
    plans: dict[tuple[str, int], Plan] = {}
    recipe = 0
    for instr in INSTRUCTIONS:
        seen: set[int] = set()
        for form in instr.forms():
            if len(form) in seen:
                continue  # the assembler picks the first form of a length
            seen.add(len(form))
            compiled = _compile_form(instr, form, recipe)
            if compiled is not None:
                plans[(instr.mnemonic, len(form))], n_spellings = compiled
                recipe += n_spellings
    assert recipe < EXPLICIT
    return plans


#: (mnemonic, operand count) -> the plan of the form the assembler picks for that count
PLANS: Mapping[tuple[str, int], Plan] = MappingProxyType(_compile())


def encode_operands(encoder: Encoder, operands: Sequence[object]) -> tuple[int, int] | None:
    """(word, recipe) of ``operands`` under a plan's ``encoder``, or None if the full assembler must decide.

    An operand is an ``int`` (``bool`` and other subclasses are refused) or a register name; names are
    looked up as written, then lower-cased. (The hot path of generators and of the assembler.)
    """
    word, recipe, steps = encoder
    for (regs, hi, mult, forbid, int_bit), o in zip(steps, operands, strict=True):
        if type(o) is str:
            bits = regs.get(o)
            if bits is None:
                bits = regs.get(o.lower())
                if bits is None:
                    return None
            word |= bits
        elif type(o) is int and 0 <= o <= hi and (forbid is None or o not in forbid):
            word |= o * mult
            recipe += int_bit
        else:
            return None
    return word, recipe


def _template(plan: Plan, int_mask: int) -> tuple[str, tuple[tuple[int, int], ...]]:
    """(%-format, fields) of one spelling: the text is ``format % tuple((word >> shift) & mask ...)``."""
    parts = []
    fields = []
    for code in plan.codes:
        text, shift, mask = code.as_int if code.int_bit & int_mask else code.as_str
        parts.append(text.replace("%", "%%") + ("%d" if mask else ""))
        if mask:
            fields.append((shift, mask))
    head = plan.mnemonic + (" " + ", ".join(parts) if parts else "")
    return head, tuple(fields)


def _templates() -> tuple[tuple[str, tuple[tuple[int, int], ...]], ...]:
    out: list[tuple[str, tuple[tuple[int, int], ...]]] = []
    for plan in sorted(PLANS.values(), key=lambda p: p.recipe):
        n_ways = 1 << sum(1 for c in plan.codes if c.int_bit)
        assert len(out) == plan.recipe
        out.extend(_template(plan, int_mask) for int_mask in range(n_ways))
    return tuple(out)


#: recipe -> (format, fields) spelling an encoded word back as written
TEMPLATES = _templates()


def spell(word: int, recipe: int) -> str:
    """The source text of ``word`` written as recipe ``recipe`` (not :data:`EXPLICIT`)."""
    fmt, fields = TEMPLATES[recipe]
    return fmt % tuple((word >> shift) & mask for shift, mask in fields)


class SpelledTexts:
    """The line texts of a program built from operands: spelled from (word, recipe) on request.

    ``explicit`` holds the text of the words whose recipe is :data:`EXPLICIT`. Arrays are used read-only.
    """

    __slots__ = ("_words", "_recipes", "_explicit")

    def __init__(self, words: np.ndarray, recipes: np.ndarray, explicit: Mapping[int, str]):
        self._words, self._recipes, self._explicit = words, recipes, dict(explicit)  # a private copy

    def __len__(self) -> int:
        return len(self._words)

    def __getitem__(self, k: int) -> str:
        recipe = int(self._recipes[k])
        if recipe == EXPLICIT:
            return self._explicit[k % len(self._words)]
        return spell(int(self._words[k]), recipe)

    def all(self) -> list[str]:
        """Every text, in word order; each distinct (word, recipe) is spelled once (programs repeat lines)."""
        keys = self._words.astype(np.uint64) | (self._recipes.astype(np.uint64) << np.uint64(32))
        explicit = np.flatnonzero(self._recipes == EXPLICIT)
        keys[explicit] = np.uint64(_EXPLICIT_KEY) | explicit.astype(np.uint64)  # one key per explicit word
        distinct, inverse = np.unique(keys, return_inverse=True)
        texts = [self._text_of_key(key) for key in distinct.tolist()]
        return list(map(texts.__getitem__, inverse.reshape(-1).tolist()))

    def _text_of_key(self, key: int) -> str:
        if key >= _EXPLICIT_KEY:
            return self._explicit[key - _EXPLICIT_KEY]
        return spell(key & 0xFFFFFFFF, key >> 32)


#: keys of :meth:`SpelledTexts.all` at and above this are explicit words (their index added)
_EXPLICIT_KEY = (EXPLICIT + 1) << 32


#: (mnemonic, operand count) -> encoder of :data:`PLANS`
_ENCODERS: Mapping[tuple[str, int], Encoder] = MappingProxyType({key: p.encoder for key, p in PLANS.items()})


def encoder_for(mnemonic: str, count: int) -> Encoder | None:
    """The encoder of ``mnemonic`` (any case) with ``count`` operands, or None."""
    encoder = _ENCODERS.get((mnemonic, count))
    if encoder is None and mnemonic.upper() in BY_MNEMONIC:
        encoder = _ENCODERS.get((mnemonic.upper(), count))
    return encoder
