"""The one assembly-text builder every generator uses (kernels.md §1.2-§1.3).

:class:`Asm` validates and encodes each instruction as it is emitted, with the assembler's rules (through
the opcode table's precompiled operand plans, :mod:`isa.plans`, or the real assembler for anything unusual)
plus the generator rules of kernels.md §1.2 (no gp0/f0 destinations, S_LUI_INT < 2^20, ...). Any violation
is a :class:`GeneratorError` (a ``ValueError``) naming the instruction, the bad value and the generator being
emitted (the innermost ``; <kernel> begin`` comment not yet ended): a plan validates its parameters, so an invalid
instruction, loop count or address reaching the builder is the generator's bug, not the caller's. Its text --
canonical: upper-case mnemonic, ``gpN``/``fN``/``aN``, decimal immediates, whole-line ``; `` comments -- is made
only when asked for; :meth:`Asm.program` gives the assembled program directly. :func:`load_imm` and
:func:`add_imm` are the only way a generator materialises a constant that may not fit an immediate field.

Register operands are written with :func:`gp`, :func:`fp` and :func:`areg` (``gp(3) == "gp3"``); plain
ints are immediates or flags.
"""

from __future__ import annotations

import contextlib
import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import MappingProxyType
from typing import Protocol

import numpy as np

from isa.assembler import _LineError, line_word
from isa.plans import EXPLICIT, PLANS, Encoder, Plan, SpelledTexts, encode_operands
from isa.program import Program, SourceMap, read_only
from isa.regions import Region, RegionError, RegionRecorder, parse_marker
from isa.table import BY_MNEMONIC, FIELDS, INSTRUCTIONS

from . import mutation_hooks

__all__ = [
    "Asm",
    "AsmSink",
    "GeneratorError",
    "gp",
    "fp",
    "areg",
    "load_imm",
    "add_imm",
    "region",
    "IMM18_LIMIT",
    "LUI_LIMIT",
]

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


@contextlib.contextmanager
def region(asm: AsmSink, name: str) -> Iterator[None]:
    """Mark the body as the region ``name``: ``; @region NAME`` before it, ``; @endregion`` after it (regions nest;
    the assembler records them and every run reports each region's instructions and cycles)."""
    if not name or name != name.strip() or "\n" in name or name.startswith("("):
        raise ValueError(f"region name {name!r} must be one non-empty line without outer blanks, not '(...)'")
    asm.comment(f"@region {name}")
    yield
    asm.comment("@endregion")


_GP_NAMES = tuple(f"gp{n}" for n in range(16))
_FP_NAMES = tuple(f"f{n}" for n in range(8))
_A_NAMES = tuple(f"a{n}" for n in range(8))


def gp(n: int) -> str:
    return _GP_NAMES[n] if type(n) is int and 0 <= n < 16 else f"gp{int(n)}"


def fp(n: int) -> str:
    return _FP_NAMES[n] if type(n) is int and 0 <= n < 8 else f"f{int(n)}"


def areg(n: int) -> str:
    return _A_NAMES[n] if type(n) is int and 0 <= n < 8 else f"a{int(n)}"


def _with_rules(plan: Plan) -> Plan:
    """``plan`` refusing what :meth:`Asm._check_rules` refuses (gp0 / f0 as the first operand of a writing
    instruction, an S_LUI_INT immediate >= 2^20): such an instruction takes the full path, which raises."""
    codes = list(plan.codes)
    banned = ({"gp0"} if plan.mnemonic in _INT_DEST else set()) | ({"f0"} if plan.mnemonic in _FP_DEST else set())
    if codes and banned:
        regs = {name: bits for name, bits in codes[0].regs.items() if name not in banned}
        codes[0] = replace(codes[0], regs=MappingProxyType(regs))
    if plan.mnemonic == "S_LUI_INT" and len(codes) == 2:
        codes[1] = replace(codes[1], hi=min(codes[1].hi, LUI_LIMIT - 1))
    return replace(plan, codes=tuple(codes))


def _asm_encoders() -> dict[str, tuple[Encoder | None, ...]]:
    """MNEMONIC -> its encoders by operand count (None: no plan for that count), with the generator rules."""
    out: dict[str, list[Encoder | None]] = {mnemonic: [] for mnemonic in BY_MNEMONIC}
    for (mnemonic, count), plan in PLANS.items():
        by_count = out[mnemonic]
        by_count.extend([None] * (count + 1 - len(by_count)))
        by_count[count] = _with_rules(plan).encoder
    return {mnemonic: tuple(by_count) for mnemonic, by_count in out.items()}


_ENCODERS = MappingProxyType(_asm_encoders())
#: the comments that open and close a kernel's text (kernels.md §1.1: ``; <kernel> begin <key=value ...>``)
_KERNEL_BEGIN = re.compile(r"([A-Za-z_][\w.]*) begin(?: |$)")
_KERNEL_END = re.compile(r"([A-Za-z_][\w.]*) end$")
#: distinct instructions an Asm remembers (bounds its memo's memory)
_MEMO_MAX = 1 << 16


class GeneratorError(ValueError):
    """A generator emitted what the machine cannot take (an invalid instruction, immediate, loop count or address).

    ``generator``: the kernel being emitted (``"?"`` outside every :meth:`Asm.begin`); ``value``: the bad value (an
    operand, or the instruction text); ``detail``: what is wrong.  ``str()`` starts with ``Asm:`` (the builder's
    errors always did)."""

    def __init__(self, generator: str, detail: str, value: object = None) -> None:
        self.generator, self.detail, self.value = generator, detail, value
        super().__init__(f"Asm: {detail} [generator {generator}]")


def generator_error(asm: object, detail: str, value: object = None) -> GeneratorError:
    """The :class:`GeneratorError` of ``detail`` for the kernel ``asm`` is emitting (any sink: its ``generator``
    attribute if it has one)."""
    return GeneratorError(str(getattr(asm, "generator", "?")), detail, value)


class Asm:
    """Accumulates validated instructions and comments. ``str(asm)`` / :meth:`text` gives the program text,
    :meth:`program` the assembled program (without going through text).

    An instruction is kept as its word and a recipe that spells its line back (:mod:`isa.plans`); only
    comments and rarely spelled instructions are kept as text.
    """

    def __init__(self) -> None:
        self._words = array("I")
        self._recipes = array("H")  # EXPLICIT: the line is in _explicit
        self._explicit: dict[int, str] = {}  # word index -> line text
        self._comments: dict[int, str] = {}  # line index -> comment line (every other line is a word's)
        #: (mnemonic, operands, their types) -> (word, recipe) of accepted instructions (generators repeat most)
        self._memo: dict[tuple[str, tuple[object, ...], tuple[type, ...]], tuple[int, int]] = {}
        #: dynamic instructions of the hardware loops emitted through a LoopBudget beyond their first iteration
        self.dynamic_extra = 0
        self._kernels: list[str] = []  # the kernels begun and not yet ended, innermost last

    @property
    def generator(self) -> str:
        """The kernel being emitted: the innermost :meth:`begin` not yet ended (``"?"`` outside every one)."""
        return self._kernels[-1] if self._kernels else "?"

    @property
    def n_instructions(self) -> int:
        return len(self._words)

    # ---- emission
    def emit(self, mnemonic: str, *operands: int | str) -> None:
        """Emit one instruction; ints are immediates/flags, strings registers (``gp(3)``)."""
        self._add(mnemonic, _ENCODERS.get(mnemonic, ()), operands)

    def _add(self, mnemonic: str, encoders: tuple[Encoder | None, ...], operands: tuple[object, ...]) -> None:
        """Append one instruction: remembered, or encoded from the operands, or through the full path."""
        key = (mnemonic, operands, tuple(map(type, operands)))  # exact types: True or 1.0 is not 1
        try:
            encoded = self._memo.get(key)
        except TypeError:  # an unhashable operand: not an instruction the memo can hold (the full path refuses it)
            encoded = None
        if encoded is None:
            try:
                encoder = encoders[len(operands)]
            except IndexError:
                encoder = None
            encoded = None if encoder is None else encode_operands(encoder, operands)
            if encoded is None:
                self._emit_checked(mnemonic, operands)
                return
            if len(self._memo) < _MEMO_MAX:
                self._memo[key] = encoded
        self._words.append(encoded[0])
        self._recipes.append(encoded[1])

    def _emit_checked(self, mnemonic: str, operands: tuple[object, ...]) -> None:
        """The full path: the line as text, the generator rules and the real assembler."""
        mnemonic = mnemonic.upper()
        if mnemonic not in BY_MNEMONIC:
            raise generator_error(self, f"unknown mnemonic {mnemonic!r}", mnemonic)
        ops = []
        for o in operands:
            if isinstance(o, bool):
                raise generator_error(self, f"{mnemonic}: boolean operand {o!r}", o)
            if isinstance(o, int):
                if o < 0:
                    raise generator_error(self, f"{mnemonic}: negative immediate {o}", o)
                ops.append(str(o))
            elif isinstance(o, str):
                ops.append(o.lower())
            else:
                raise generator_error(self, f"{mnemonic}: operand {o!r} is neither a register nor an int", o)
        line = mnemonic + (" " + ", ".join(ops) if ops else "")
        broken = self._broken_rule(mnemonic, ops, line)
        if broken is not None:
            raise generator_error(self, broken, line)
        if line.splitlines() != [line]:
            raise generator_error(self, f"{line!r}: an instruction must be one line", line)
        try:
            word = line_word(line)
        except _LineError as exc:
            raise generator_error(self, f"{line}: {exc.reason}", line) from None
        assert word is not None  # the line starts with a mnemonic
        self._explicit[len(self._words)] = line
        self._words.append(word)
        self._recipes.append(EXPLICIT)

    def __getattr__(self, name: str) -> Callable[..., None]:
        # asm.S_ADDI_INT(gp(1), gp(0), 5) == asm.emit("S_ADDI_INT", ...): every mnemonic of the table is a
        # method (set after the class); this signature tells type checkers so
        raise AttributeError(name)

    def comment(self, text: str) -> None:
        for part in str(text).splitlines() or [""]:
            self._comments[len(self._words) + len(self._comments)] = f"; {part}".rstrip()
            self._track_kernel(part)

    def begin(self, kernel: str, **params: object) -> None:
        kv = " ".join(f"{k}={v}" for k, v in params.items())
        self.comment(f"{kernel} begin {kv}".rstrip())

    @contextlib.contextmanager
    def generating(self, kernel: str) -> Iterator[None]:
        """Name ``kernel`` as the generator of what is emitted inside the block (as :meth:`begin` / :meth:`end` do,
        without their comments: for helpers such as the ``set_addr_regs`` preamble)."""
        self._kernels.append(kernel)
        try:
            yield
        finally:
            self._kernels.pop()

    def end(self, kernel: str) -> None:
        self.comment(f"{kernel} end")

    def _track_kernel(self, comment: str) -> None:
        """Follow the ``<kernel> begin ...`` / ``<kernel> end`` comments every kernel is framed by (kernels.md §1.1):
        the innermost open one is :attr:`generator`."""
        begun = _KERNEL_BEGIN.match(comment)
        if begun:
            self._kernels.append(begun.group(1))
            return
        ended = _KERNEL_END.match(comment)
        if ended and ended.group(1) in self._kernels:  # the innermost of that name (and any left open inside it)
            del self._kernels[len(self._kernels) - 1 - self._kernels[::-1].index(ended.group(1)) :]

    # ---- results
    def _line_count(self) -> int:
        return len(self._words) + len(self._comments)

    def _word_lines(self) -> np.ndarray:
        """The 0-based line index of every word: the lines that are not comments, in order."""
        is_word = np.ones(self._line_count(), dtype=bool)
        is_word[list(self._comments)] = False
        return np.flatnonzero(is_word)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Read-only copies of the words and their recipes."""
        return read_only(np.array(self._words, dtype=np.uint32)), read_only(np.array(self._recipes, np.uint16))

    def lines(self) -> list[str]:
        texts = SpelledTexts(*self._arrays(), self._explicit).all()
        out: list[str] = []
        taken = 0  # words placed so far
        for index, comment in self._comments.items():  # in line order
            upto = taken + index - len(out)
            out.extend(texts[taken:upto])
            out.append(comment)
            taken = upto
        out.extend(texts[taken:])
        return out

    def text(self) -> str:
        return "\n".join(self.lines()) + ("\n" if self._line_count() else "")

    __str__ = text

    def program(self, name: str) -> Program:
        """The assembled program, equal to ``assemble(self.text(), name)`` (words and source map) without
        formatting or parsing text: line texts are spelled from the words when asked for."""
        words, recipes = self._arrays()
        source = SourceMap(name, self._word_lines() + 1, SpelledTexts(words, recipes, self._explicit))
        return Program.trusted(words, source, name, self._regions())

    def _regions(self) -> tuple[Region, ...]:
        """The regions the ``@region`` / ``@endregion`` comments mark (:mod:`isa.regions`, as the assembler
        records them from the text); a ValueError naming the line or the region of an unbalanced marker."""
        recorder = RegionRecorder()
        for placed, (index, comment) in enumerate(self._comments.items()):  # line order; ``placed`` comments before
            try:
                found = parse_marker(comment)
                if found is not None and found[0] is not None:
                    recorder.open(found[0], index - placed, index)
                elif found is not None:
                    recorder.close(index - placed)
            except RegionError as exc:
                raise ValueError(f"Asm: line {index + 1} {comment!r}: {exc.reason}") from None
        try:
            return recorder.regions()
        except RegionError as exc:
            raise ValueError(f"Asm: {exc.reason}") from None

    # ---- generator rules beyond the assembler (kernels.md §1.2)
    @staticmethod
    def _broken_rule(mnemonic: str, ops: list[str], line: str) -> str | None:
        """The generator rule ``line`` breaks, or None."""
        if mnemonic in _INT_DEST and ops and ops[0] == "gp0":
            return f"{line}: an integer instruction must not write gp0"
        if mnemonic in _FP_DEST and ops and ops[0] == "f0":
            return f"{line}: an fp instruction must not write f0"
        if mnemonic == "S_LUI_INT" and len(ops) == 2 and ops[1].isdigit() and int(ops[1]) >= LUI_LIMIT:
            return f"{line}: S_LUI_INT immediate must be < 2^20 (upper bits are lost)"
        return None


def _mnemonic_method(mnemonic: str) -> Callable[..., None]:
    encoders = _ENCODERS[mnemonic]

    def method(self: Asm, *operands: int | str) -> None:
        self._add(mnemonic, encoders, operands)

    method.__name__ = method.__qualname__ = mnemonic
    method.__doc__ = f"``emit({mnemonic!r}, ...)``"
    return method


for _mnemonic in BY_MNEMONIC:
    setattr(Asm, _mnemonic, _mnemonic_method(_mnemonic))


def load_imm(asm: AsmSink, r: int, v: int) -> None:
    """``gp[r] = v`` for ``0 <= v < 2^32`` (S_ADDI_INT, or S_LUI_INT + S_ADDI_INT)."""
    if not 0 <= v < U32_LIMIT:
        raise generator_error(asm, f"load_imm: value {v} is outside 0..2^32-1", v)
    if r == 0:
        raise generator_error(asm, "load_imm: destination must not be gp0", r)
    if v < IMM18_LIMIT:  # (both mutation hooks below emit this same instruction for such a value)
        asm.S_ADDI_INT(gp(r), gp(0), v)
        return
    if mutation_hooks.active("raw_large_immediate"):
        asm.S_ADDI_INT(gp(r), gp(0), v)  # mutation: raises in Asm when v >= 2^18
        return
    if mutation_hooks.active("truncated_immediate"):
        asm.S_ADDI_INT(gp(r), gp(0), v & (IMM18_LIMIT - 1))
        return
    hi, lo = v >> 12, v & 0xFFF
    if mutation_hooks.active("imm_lui_sign_extended"):
        hi = ((v + 0x800) >> 12) & 0xFFFFF  # the RISC-V LUI/ADDI split (its ADDI sign-extends; this one does not)
    if mutation_hooks.active("imm_low_11_bits"):
        lo = v & 0x7FF  # the low part taken as a signed 12-bit immediate: bit 11 dropped
    asm.S_LUI_INT(gp(r), hi)
    if lo:
        asm.S_ADDI_INT(gp(r), gp(r), lo)


def add_imm(asm: AsmSink, dst: int, src: int, v: int, tmp: int | None = None) -> None:
    """``gp[dst] = gp[src] + v`` for ``v >= 0``; values >= 2^18 need a scratch ``tmp`` != ``src``."""
    if v < 0:
        raise generator_error(asm, f"add_imm: negative value {v}; emit S_SUB_INT with a materialised value instead", v)
    if v < IMM18_LIMIT:
        asm.S_ADDI_INT(gp(dst), gp(src), v)
        return
    if tmp is None:
        raise generator_error(asm, f"add_imm: value {v} >= 2^18 needs a scratch register", v)
    if tmp == src:
        raise generator_error(asm, "add_imm: the scratch register must differ from the source", tmp)
    load_imm(asm, tmp, v)
    asm.S_ADD_INT(gp(dst), gp(src), gp(tmp))


#: the largest C_LOOP_START count (the imm22 field), for loop-budget checks in plans
LOOP_COUNT_MAX = FIELDS["imm22"].max
