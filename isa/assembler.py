"""Assembler: PLENA assembly text -> :class:`~isa.program.Program` (isa.md §2).

Accepts the upstream syntax (``;`` and ``//`` comments, blank lines, ``gpN``/``fN``/``aN``, decimal
immediates, the literal ``0`` the upstream compiler writes for gp0 in a first operand -- see
``Operand.zero_literal`` in the table) plus hex immediates and ``_`` separators; mnemonics and registers
are case-insensitive.
Every operand is kind- and range-checked against the opcode table; all errors of a file are collected
and raised together as one :class:`AssemblerError`.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .encoding import encode
from .plans import encode_operands, encoder_for
from .program import Program, SourceMap, read_only
from .regions import REGION_CLOSE, REGION_OPEN, Region, RegionError, RegionRecorder, parse_marker
from .table import BY_MNEMONIC, FIELDS, NOT_INSTRUCTIONS, OPERAND_KINDS, REGISTER_COUNT, Instr, Operand

__all__ = ["AsmDiagnostic", "AssemblerError", "assemble", "assemble_file"]

_REG_RE = re.compile(r"^(gp|f|a)([0-9]+)$", re.IGNORECASE)
_DEC_RE = re.compile(r"^[0-9][0-9_]*$")
_HEX_RE = re.compile(r"^0[xX][0-9a-fA-F_]*[0-9a-fA-F][0-9a-fA-F_]*$")
_KIND_NAME = {"gp": "GP register", "f": "FP register", "a": "HBM address register"}
_RESERVED_NAMES = {name: op for op, name in NOT_INSTRUCTIONS.items() if name}


@dataclass(frozen=True)
class AsmDiagnostic:
    """One located assembler error."""

    file: str
    line: int  # 1-based
    column: int  # 1-based column of ``token`` in the line
    token: str
    reason: str
    line_text: str

    def __str__(self) -> str:
        tok = f" '{_shown(self.token)}'" if self.token else ""
        return f"{self.file}:{self.line}:{self.column}:{tok} {self.reason}"


class AssemblerError(ValueError):
    """All errors of one assembly; ``diagnostics`` lists them in line order.

    The first error is also exposed as ``line_no``, ``line_text``, ``reason`` (isa.md §2).
    """

    def __init__(self, diagnostics: list[AsmDiagnostic]):
        assert diagnostics
        self.diagnostics = tuple(diagnostics)
        first = self.diagnostics[0]
        self.file, self.line_no, self.column = first.file, first.line, first.column
        self.line_text, self.reason, self.token = first.line_text, first.reason, first.token
        n = len(self.diagnostics)
        head = f"{n} assembler error{'s' if n != 1 else ''}"
        super().__init__(head + ":\n" + "\n".join(f"  {d}" for d in self.diagnostics))


class _LineError(Exception):
    def __init__(self, column: int, token: str, reason: str):
        self.column, self.token, self.reason = column, token, reason


def strip_comment(line: str) -> str:
    """Remove everything from the first ``//``, then everything from the first ``;``."""
    k = line.find("//")
    if k >= 0:
        line = line[:k]
    k = line.find(";")
    if k >= 0:
        line = line[:k]
    return line


#: longest digit string converted to an int; anything longer is out of range for every field anyway
#: (and Python refuses str<->int conversions beyond 4300 digits)
_MAX_DIGITS = 40


def _shown(tok: str, limit: int = 40) -> str:
    """``tok`` for a message, shortened to ``limit`` characters."""
    return tok if len(tok) <= limit else tok[: limit - 3] + "..."


def _parse_number(tok: str) -> int | None:
    """Value of a decimal / hex immediate; None if malformed; -1 if it has too many digits to be valid."""
    if _DEC_RE.match(tok):
        digits = tok.replace("_", "").lstrip("0")
        return int(digits or "0", 10) if len(digits) <= _MAX_DIGITS else -1
    if _HEX_RE.match(tok):
        digits = tok[2:].replace("_", "").lstrip("0")
        return int(digits or "0", 16) if len(digits) <= _MAX_DIGITS else -1
    return None


def _describe(tok: str) -> str:
    m = _REG_RE.match(tok)
    if m:
        return f"{_KIND_NAME[m.group(1).lower()]} '{_shown(tok)}'"
    return f"'{_shown(tok)}'"


def _expected(op: Operand) -> str:
    return OPERAND_KINDS[op.kind]


def _parse_operand(op: Operand, tok: str, col: int, index: int, instr: Instr) -> int:
    """Value of one operand token for ``op`` (register index or number); raises _LineError."""
    pos = f"operand {index + 1} ({op.name})"
    if tok.startswith("-") or tok.startswith("+"):
        raise _LineError(col, tok, f"{pos}: signed numbers are not allowed; expected {_expected(op)}")
    m = _REG_RE.match(tok)
    if op.kind in ("gp", "f", "a"):
        if not m and op.zero_literal and _parse_number(tok) == 0:
            m = _REG_RE.match(f"{op.kind}0")  # upstream-compatibility spelling of register 0 (table.py)
        if not m:
            also = " (or 0 for gp0)" if op.zero_literal else ""
            raise _LineError(col, tok, f"{pos}: expected {_expected(op)}{also}, got {_describe(tok)}")
        kind, digits = m.group(1).lower(), m.group(2)
        if kind != op.kind:
            raise _LineError(col, tok, f"{pos}: expected {_expected(op)}, got {_describe(tok)}")
        if len(digits) > 1 and digits[0] == "0":
            raise _LineError(col, tok, f"{pos}: register index must not have leading zeros")
        if len(digits) > 2 or int(digits) >= REGISTER_COUNT[kind]:
            raise _LineError(col, tok, f"{pos}: register {_shown(tok)} out of range; expected {_expected(op)}")
        n = int(digits)
        value = n
    elif op.kind == "zero":
        if m and m.group(1).lower() == "gp" and m.group(2) == "0":
            return 0
        v = _parse_number(tok)
        if v != 0:
            raise _LineError(col, tok, f"{pos}: expected placeholder 0 (or gp0), got {_describe(tok)}")
        return 0
    else:  # numbers: imm18, imm22, flag
        if m:
            raise _LineError(col, tok, f"{pos}: expected {_expected(op)}, got {_describe(tok)}")
        v = _parse_number(tok)
        if v is None:
            raise _LineError(col, tok, f"{pos}: expected {_expected(op)}, got malformed number '{_shown(tok)}'")
        f = FIELDS[op.field] if op.field else None
        hi = op.max_value if op.max_value is not None else (f.max if f else 0)
        if v < 0 or v > hi:
            shown = v if v >= 0 and len(tok) <= 40 else _shown(tok)
            raise _LineError(col, tok, f"{pos}: value {shown} out of range; expected {op.name} 0..{hi}")
        value = v
    for bad, why in op.forbid:
        if value == bad:
            raise _LineError(col, tok, f"{pos}: {why}")
    return value


def _split_operands(rest: str, rest_col: int) -> list[tuple[str, int]]:
    """Comma-split ``rest``; returns (token, 1-based column) pairs. Empty tokens are kept ('')."""
    out = []
    pos = 0
    for piece in rest.split(","):
        lead = len(piece) - len(piece.lstrip())
        tok = piece.strip()
        out.append((tok, rest_col + pos + lead))
        pos += len(piece) + 1
    return out


def _assemble_line(code: str) -> int | None:
    """Encode one comment-stripped line; None for a blank line. Raises _LineError."""
    body = code.strip()
    if not body:
        return None
    col0 = len(code) - len(code.lstrip()) + 1
    parts = body.split(None, 1)
    mnem_tok = parts[0]
    mnem = mnem_tok.upper()
    instr = BY_MNEMONIC.get(mnem)
    if instr is None:
        if mnem in _RESERVED_NAMES:
            raise _LineError(
                col0, mnem_tok, f"{mnem} (opcode {_RESERVED_NAMES[mnem]:#04x}) is not an instruction of this ISA"
            )
        raise _LineError(
            col0,
            mnem_tok,
            "unknown mnemonic; expected an instruction name such as S_ADDI_INT "
            "(labels, directives and '#' comments are not supported)",
        )
    ops: list[tuple[str, int]] = []
    if len(parts) > 1:
        rest_col = col0 + body.index(parts[1], len(mnem_tok))
        ops = _split_operands(parts[1], rest_col)
    for tok, col in ops:
        if tok == "":
            raise _LineError(col, "", "empty operand (stray or trailing comma)")
    forms = [f for f in instr.forms() if len(f) == len(ops)]
    if not forms:
        allowed = " | ".join(", ".join(o.name for o in f) or "(none)" for f in instr.forms())
        tok, col = ops[-1] if ops else (mnem_tok, col0)
        hint = " (missing commas?)" if any(" " in t or "\t" in t for t, _ in ops) else ""
        raise _LineError(
            col,
            tok,
            f"{mnem} takes {' or '.join(str(len(f)) for f in instr.forms())} "
            f"operands, got {len(ops)}{hint}; expected: {allowed}",
        )
    form = forms[0]
    fields: dict[str, int] = {}
    for k, (op, (tok, col)) in enumerate(zip(form, ops, strict=True)):
        if " " in tok or "\t" in tok:
            raise _LineError(col, tok, f"operand {k + 1} ({op.name}): contains whitespace (missing comma?)")
        value = _parse_operand(op, tok, col, k, instr)
        if op.field is not None:
            fields[op.field] = value
    return encode(mnem, **fields)


def _token_operand(tok: str) -> int | str:
    """A stripped operand token as :func:`~isa.plans.encode_operands` takes it: plain decimal digits as an
    int, anything else as the text (the plan accepts only canonical register names)."""
    if tok.isdigit() and tok.isascii() and len(tok) <= _MAX_DIGITS:
        return int(tok)
    return tok


def line_word(line: str) -> int | None:
    """The word of one source line (None if blank/comment); raises _LineError.

    The common spelling is encoded straight from its tokens (:mod:`isa.plans`); anything the plan does
    not take goes through :func:`_assemble_line`, which gives the word or the located error.
    """
    code = strip_comment(line)
    parts = code.split(None, 1)
    if not parts:
        return None
    ops = [_token_operand(t.strip()) for t in parts[1].split(",")] if len(parts) > 1 else []
    encoder = encoder_for(parts[0], len(ops))
    if encoder is not None:
        encoded = encode_operands(encoder, ops)
        if encoded is not None:
            return encoded[0]
    return _assemble_line(code)


#: distinct lines remembered per :func:`assemble` call (generated programs repeat most of their lines)
_MEMO_MAX = 1 << 16


#: memo value of a region marker line (blank and plain comment lines are -1)
_MARKER = -2


def assemble(text: str, filename: str = "<asm>") -> Program:
    """Assemble ``text``. Raises :class:`AssemblerError` listing every error of the text (region markers
    included: :mod:`isa.regions`)."""
    lines = text.splitlines()
    words = array("I")
    where = array("q")  # 0-based line index of each word
    memo: dict[str, int] = {}  # line -> word, -1 for blank/comment, _MARKER for a region marker
    errors: list[AsmDiagnostic] = []
    recorder = RegionRecorder()
    for index, line in enumerate(lines):
        word = memo.get(line)
        if word is None:
            try:
                word = _line_code(line)
            except (_LineError, RegionError) as e:
                errors.append(AsmDiagnostic(filename, index + 1, e.column, e.token, e.reason, line))
                continue
            if len(memo) < _MEMO_MAX:
                memo[line] = word
        if word >= 0:
            words.append(word)
            where.append(index)
        elif word == _MARKER:
            _mark(recorder, line, len(words), index, filename, errors)
    regions = _regions(recorder, lines, filename, errors)
    if errors:
        raise AssemblerError(sorted(errors, key=lambda d: d.line))
    index_of = np.array(where, dtype=np.int64)
    texts = list(map(lines.__getitem__, where))
    source = SourceMap.from_lines(filename, index_of + 1, texts)
    return Program.trusted(read_only(np.array(words, dtype=np.uint32)), source, filename, regions)


def _line_code(line: str) -> int:
    """The word of a line, -1 for a blank or plain comment line, _MARKER for a region marker; raises _LineError
    or RegionError (a malformed marker, or one after an instruction)."""
    encoded = line_word(line)
    marker = parse_marker(line)
    if encoded is not None:
        return encoded
    return -1 if marker is None else _MARKER


def _mark(recorder: RegionRecorder, line: str, word: int, index: int, filename: str, errors: list) -> None:
    """Record the marker of line ``index`` (before word ``word``); an ``@endregion`` without an open region is
    an error of that line."""
    found = parse_marker(line)
    assert found is not None
    name, column = found
    if name is not None:
        recorder.open(name, word, index)
        return
    try:
        recorder.close(word)
    except RegionError as e:
        errors.append(AsmDiagnostic(filename, index + 1, column, REGION_CLOSE, e.reason, line))


def _regions(recorder: RegionRecorder, lines: list[str], filename: str, errors: list) -> tuple[Region, ...]:
    """The recorded regions; a region left open is an error of the line that opened it."""
    for path, index in recorder.unclosed():
        line = lines[index]
        column = line.find(REGION_OPEN) + 1
        reason = f"region {path!r} is never closed (missing {REGION_CLOSE})"
        errors.append(AsmDiagnostic(filename, index + 1, column, REGION_OPEN, reason, line))
    return () if errors else recorder.regions()


def assemble_file(path: str | Path) -> Program:
    """Assemble a file (UTF-8). Unreadable files raise AssemblerError at line 0."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = f"cannot read file: {getattr(exc, 'strerror', None) or exc}"
        raise AssemblerError([AsmDiagnostic(str(p), 0, 0, "", reason, "")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # locate the first bad byte: line (1-based, counted in b"\n") and column (1-based, in bytes)
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line_end = data.find(b"\n", exc.start)
        raw_line = data[line_start : line_end if line_end >= 0 else len(data)]
        shown = raw_line.decode("utf-8", errors="replace")
        diag = AsmDiagnostic(
            str(p),
            data.count(b"\n", 0, exc.start) + 1,
            exc.start - line_start + 1,
            "",
            f"not UTF-8 text: byte 0x{data[exc.start]:02X} cannot be decoded",
            shown,
        )
        raise AssemblerError([diag]) from None
    return assemble(text, str(p))
