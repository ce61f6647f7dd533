"""Assembler: PLENA assembly text -> :class:`~isa.program.Program` (isa.md §2).

Accepts the upstream syntax (``;`` and ``//`` comments, blank lines, ``gpN``/``fN``/``aN``, decimal
immediates, the literal ``0`` the upstream compiler writes for gp0 in a first operand -- see
``Operand.zero_literal`` in the table) plus hex immediates and ``_`` separators; mnemonics and registers
are case-insensitive.
Every operand is kind- and range-checked against the opcode table; the errors of a file are collected and
raised together as one :class:`AssemblerError` (the first ``MAX_ERRORS_SHOWN`` = 100 kept, all counted). A
program holds at most ``max_words`` instructions; a file is read only if it is a regular file of at most
``MAX_PROGRAM_BYTES`` (:mod:`isa.readers`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .encoding import encode
from .plans import encode_operands, encoder_for
from .program import Program, SourceMap, TextSpans, read_only
from .readers import MAX_ERRORS_SHOWN, MAX_PROGRAM_BYTES, MAX_PROGRAM_WORDS, InputFileError, read_input
from .regions import REGION_CLOSE, REGION_OPEN, Region, RegionError, RegionRecorder, parse_marker
from .safetext import printable
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
        return f"{printable(self.file)}:{self.line}:{self.column}:{tok} {self.reason}"


class AssemblerError(ValueError):
    """The errors of one assembly: ``count`` of them, the first ``MAX_ERRORS_SHOWN`` (in line order) in
    ``diagnostics``; :meth:`lines` is what a message shows (those, then how many more there are).

    The first error is also exposed as ``line_no``, ``line_text``, ``reason`` (isa.md §2).
    """

    def __init__(self, diagnostics: list[AsmDiagnostic], count: int | None = None):
        assert diagnostics
        self.diagnostics = tuple(diagnostics[:MAX_ERRORS_SHOWN])
        self.count = max(len(diagnostics), count or 0)
        first = self.diagnostics[0]
        self.file, self.line_no, self.column = first.file, first.line, first.column
        self.line_text, self.reason, self.token = first.line_text, first.reason, first.token
        n = self.count
        head = f"{n} assembler error{'s' if n != 1 else ''}"
        super().__init__(head + ":\n" + "\n".join(f"  {line}" for line in self.lines()))

    @property
    def omitted(self) -> int:
        """Errors counted but not kept."""
        return self.count - len(self.diagnostics)

    def lines(self) -> list[str]:
        """The kept diagnostics, then ``... and N more errors`` if some were only counted."""
        out = [str(d) for d in self.diagnostics]
        if self.omitted:
            out.append(f"... and {self.omitted} more errors (the first {len(self.diagnostics)} are shown)")
        return out


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
    """``tok`` for a message: non-printable characters escaped, shortened to ``limit`` characters."""
    return printable(tok, limit)


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
        if mnem_tok.startswith("\ufeff"):
            raise _LineError(
                col0, mnem_tok, "the line starts with a UTF-8 byte-order mark (U+FEFF); save the file without it"
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


class _Diagnostics:
    """The errors of one assembly: the first ``MAX_ERRORS_SHOWN`` kept (plus as many found after the last line,
    which may name earlier lines), all counted."""

    def __init__(self) -> None:
        self.kept: list[AsmDiagnostic] = []
        self.late: list[AsmDiagnostic] = []
        self.count = 0

    def append(self, d: AsmDiagnostic, late: bool = False) -> None:
        self.count += 1
        into = self.late if late else self.kept
        if len(into) < MAX_ERRORS_SHOWN:
            into.append(d)

    def __bool__(self) -> bool:
        return self.count > 0

    def error(self) -> AssemblerError:
        return AssemblerError(sorted(self.kept + self.late, key=lambda d: d.line), self.count)


#: characters of text split into lines at a time (the lines of one block exist at once, not of the whole file)
_BLOCK = 1 << 20


def _blocks(text: str) -> Iterator[tuple[int, str]]:
    """``(offset, block)``: ``text`` in pieces of about ``_BLOCK`` characters, each ending after a line feed
    (so no line and no CR LF pair is split)."""
    pos, n = 0, len(text)
    while pos < n:
        cut = text.find("\n", pos + _BLOCK)
        end = n if cut < 0 else cut + 1
        yield pos, text[pos:end]
        pos = end


class _Assembly:
    """The state of one :func:`assemble` call: the words with their lines' spans, the memo, the markers and
    the errors. Each block of lines is encoded with one memo lookup per line; the (rare) marker and error
    lines are then handled one by one, in line order."""

    def __init__(self, filename: str, max_words: int):
        self.filename, self.max_words = filename, max_words
        self.memo: dict[str, int] = {}  # line -> word, -1 blank/comment, _MARKER, or _ERROR - k (problems[k])
        self.problems: dict[int, tuple[int, str, str]] = {}  # memo value -> (column, token, reason) of an error
        self.transient: list[int] = []  # error codes of lines not memoised (dropped after their block)
        self.next_error = _ERROR
        self.errors = _Diagnostics()
        self.recorder = RegionRecorder()
        self.opened: dict[int, str] = {}  # line index -> text of each marker that opened a region
        self.words: list[np.ndarray] = []
        self.where: list[np.ndarray] = []  # 0-based line index of each word
        self.spans: list[tuple[np.ndarray, np.ndarray]] = []  # offsets of each word's line in the text
        self.n_words = 0
        self.n_lines = 0

    def code(self, line: str) -> int:
        """The memo value of a line not seen before (and remembered, up to _MEMO_MAX lines)."""
        try:
            c = _line_code(line)
        except (_LineError, RegionError) as e:
            c = self.next_error
            self.next_error -= 1
            self.problems[c] = (e.column, e.token, e.reason)  # not the exception: its traceback holds frames
            if len(self.memo) >= _MEMO_MAX:
                self.transient.append(c)
        if len(self.memo) < _MEMO_MAX:
            self.memo[line] = c
        return c

    def block(self, offset: int, text: str) -> None:
        lines = text.splitlines()
        get = self.memo.get
        codes = [get(line) for line in lines]
        for k in [k for k, c in enumerate(codes) if c is None]:
            codes[k] = get(lines[k]) if lines[k] in self.memo else self.code(lines[k])
        code = np.fromiter(codes, dtype=np.int64, count=len(codes))
        is_word = code >= 0
        at = np.flatnonzero(is_word)
        if self.n_words + len(at) > self.max_words:
            k = int(at[self.max_words - self.n_words])
            raise _too_long(self.filename, self.n_lines + k, lines[k], self.max_words)
        pieces = np.fromiter(map(len, text.splitlines(keepends=True)), dtype=np.int64, count=len(lines))
        starts = offset + np.concatenate(([0], np.cumsum(pieces)))
        before = self.n_words + np.cumsum(is_word) - is_word  # words before each line
        for k in np.flatnonzero(code <= _MARKER).tolist():
            self.special(int(code[k]), lines[k], self.n_lines + k, int(before[k]))
        self.words.append(code[at].astype(np.uint32))
        self.where.append(self.n_lines + at)
        lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
        self.spans.append((starts[at], starts[at] + lengths[at]))
        self.n_words += len(at)
        self.n_lines += len(lines)
        for c in self.transient:
            del self.problems[c]
        self.transient.clear()

    def special(self, code: int, line: str, index: int, word: int) -> None:
        """A marker line (before word ``word``) or a line with an error."""
        if code == _MARKER:
            _mark(self.recorder, line, word, index, self.filename, self.errors, self.opened)
            return
        column, token, reason = self.problems[code]
        self.errors.append(AsmDiagnostic(self.filename, index + 1, column, token, reason, line))

    def program(self, text: str) -> Program:
        regions = _regions(self.recorder, self.opened, self.filename, self.errors)
        if self.errors:
            raise self.errors.error()
        words = read_only(np.concatenate(self.words) if self.words else np.zeros(0, dtype=np.uint32))
        where = np.concatenate(self.where) if self.where else np.zeros(0, dtype=np.int64)
        starts = np.concatenate([a for a, _ in self.spans]) if self.spans else np.zeros(0, dtype=np.int64)
        ends = np.concatenate([b for _, b in self.spans]) if self.spans else np.zeros(0, dtype=np.int64)
        source = SourceMap(self.filename, where + 1, TextSpans(text, starts, ends))
        return Program.trusted(words, source, self.filename, regions)


#: memo values from this one down are errors (``problems[code]``)
_ERROR = -3


def _too_long(filename: str, index: int, line: str, max_words: int) -> AssemblerError:
    reason = f"a program of more than {max_words} instructions exceeds the limit (raise it with --max-program N)"
    return AssemblerError([AsmDiagnostic(filename, index + 1, 1, "", reason, line)])


def assemble(text: str, filename: str = "<asm>", *, max_words: int = MAX_PROGRAM_WORDS) -> Program:
    """Assemble ``text`` (at most ``max_words`` instructions). Raises :class:`AssemblerError` with the errors of
    the text (region markers included: :mod:`isa.regions`)."""
    state = _Assembly(filename, max_words)
    for offset, block in _blocks(text):
        state.block(offset, block)
    return state.program(text)


def _line_code(line: str) -> int:
    """The word of a line, -1 for a blank or plain comment line, _MARKER for a region marker; raises _LineError
    or RegionError (a malformed marker, or one after an instruction)."""
    encoded = line_word(line)
    marker = parse_marker(line)
    if encoded is not None:
        return encoded
    return -1 if marker is None else _MARKER


def _mark(
    recorder: RegionRecorder, line: str, word: int, index: int, filename: str, errors: _Diagnostics, opened: dict
) -> None:
    """Record the marker of line ``index`` (before word ``word``); an ``@endregion`` without an open region is
    an error of that line."""
    found = parse_marker(line)
    assert found is not None
    name, column = found
    if name is not None:
        recorder.open(name, word, index)
        opened[index] = line
        return
    try:
        recorder.close(word)
    except RegionError as e:
        errors.append(AsmDiagnostic(filename, index + 1, column, REGION_CLOSE, e.reason, line))


def _regions(
    recorder: RegionRecorder, opened: dict[int, str], filename: str, errors: _Diagnostics
) -> tuple[Region, ...]:
    """The recorded regions; a region left open is an error of the line that opened it."""
    for path, index in recorder.unclosed():
        line = opened[index]
        column = line.find(REGION_OPEN) + 1
        reason = f"region {path!r} is never closed (missing {REGION_CLOSE})"
        errors.append(AsmDiagnostic(filename, index + 1, column, REGION_OPEN, reason, line), late=True)
    return () if errors else recorder.regions()


def assemble_file(path: str | Path, *, max_words: int = MAX_PROGRAM_WORDS) -> Program:
    """Assemble a file (UTF-8; a regular file of at most ``MAX_PROGRAM_BYTES``). A file that is not read raises
    AssemblerError at line 0."""
    p = Path(path)
    try:
        data = read_input(p, "assembly file", MAX_PROGRAM_BYTES)
    except InputFileError as exc:
        raise AssemblerError([AsmDiagnostic(str(p), 0, 0, "", exc.reason, "")]) from None
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
    return assemble(text, str(p), max_words=max_words)
