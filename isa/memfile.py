"""The upstream ``.mem`` machine-code format (isa.md §2): one ``0x%08X`` word per line.

The reader is lenient as the spec allows: any whitespace-separated tokens (ASCII whitespace, as ``str.split``
sees it), each 1..8 hex digits with an optional ``0x``/``0X`` prefix. Anything else is a
:class:`MemFormatError` naming the token index, line and token. An empty file is an empty program.

The parse is vectorised (numpy, in pieces of a few MiB): no Python object per word; the text of each word in
the source map (its disassembly) is made on request. A file is read only if it is a regular file of at most
``MAX_PROGRAM_BYTES``, and a program holds at most ``max_words`` instructions (:mod:`isa.readers`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import SupportsInt

import numpy as np

from .fileio import atomic_write
from .program import DisassemblyTexts, Program, SourceMap, read_only
from .readers import MAX_PROGRAM_BYTES, MAX_PROGRAM_WORDS, InputFileError, read_input
from .safetext import printable

__all__ = ["MemFormatError", "MemTexts", "format_mem", "parse_mem", "read_mem", "write_mem"]


class MemFormatError(ValueError):
    def __init__(self, file: str, message: str):
        self.file = file
        super().__init__(f"{printable(file)}: {message}")


def format_mem(words: Iterable[SupportsInt]) -> str:
    """Text of a .mem file for ``words`` (upper-case hex, 8 digits, one per line)."""
    return "".join(f"0x{int(w) & 0xFFFFFFFF:08X}\n" for w in words)


class MemTexts(DisassemblyTexts):
    """The source-map text of each word of a ``.mem`` program (its disassembly and the word), made on request."""

    __slots__ = ()

    def __getitem__(self, k: int) -> str:
        return f"{super().__getitem__(k)}   (word 0x{int(self._words[k]):08X})"

    def all(self) -> list[str]:
        return [self[k] for k in range(len(self))]

    def same(self, other: object) -> bool:
        return isinstance(other, MemTexts) and np.array_equal(self._words, other._words)


# ------------------------------------------------------------------------------------------- the parse

#: ASCII whitespace of ``str.split`` and the line breaks of ``str.splitlines`` (a CR before an LF is not one)
_WS = np.zeros(256, dtype=np.bool_)
_WS[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_BREAK = np.zeros(256, dtype=np.bool_)
_BREAK[[10, 11, 12, 13, 28, 29, 30]] = True
#: hex digit values, 16 for anything else
_HEX = np.full(256, 16, dtype=np.uint8)
for _c in b"0123456789abcdefABCDEF":
    _HEX[_c] = int(chr(_c), 16)
_SHIFTS = np.arange(28, -1, -4, dtype=np.uint32)
#: bytes parsed per piece (bounds the temporaries: ~40 bytes each)
_PIECE = 4 * 1024 * 1024
#: a cut point is searched this far past a piece's nominal end (no valid token is this long)
_CUT_WINDOW = 16


def _cut(b: np.ndarray, target: int) -> tuple[int, bool]:
    """``(end, crosses)`` of the piece that should end at ``target``: the end of ``b`` if that is near, else just
    past the first whitespace byte in ``[target, target + _CUT_WINDOW)`` (never between a CR and its LF), else
    ``target`` itself, ``crosses`` telling that a token (longer than any valid one) runs across it."""
    n = len(b)
    if target + _CUT_WINDOW >= n:
        return n, False
    w = b[target : target + _CUT_WINDOW]
    nxt = np.zeros(len(w), dtype=np.uint8)
    tail = b[target + 1 : target + 1 + len(w)]
    nxt[: len(tail)] = tail
    ok = np.flatnonzero(_WS[w] & ~((w == 13) & (nxt == 10)))
    if ok.size:
        return target + int(ok[0]) + 1, False
    return target, not _WS[b[target - 1]] and not _WS[b[target]]


def _tokens(seg: np.ndarray, crosses: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, ends, words, valid)`` of the tokens of one piece (``crosses``: its last token is cut)."""
    edge = np.diff((~_WS[seg]).view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)
    second = seg[np.minimum(starts + 1, len(seg) - 1)]
    prefixed = (ends - starts >= 2) & (seg[starts] == 48) & ((second | 0x20) == 120)
    first_digit = starts + 2 * prefixed
    digits = ends - first_digit
    bad = np.concatenate(([0], np.cumsum(_HEX[seg] == 16, dtype=np.int64)))
    valid = (digits >= 1) & (digits <= 8) & (bad[ends] == bad[first_digit])
    if crosses and valid.size:
        valid[-1] = False
    pos = ends[:, None] - 8 + np.arange(8)
    nibbles = np.where(pos >= first_digit[:, None], _HEX[seg[np.maximum(pos, 0)]], 0).astype(np.uint32)
    words = (nibbles << _SHIFTS).sum(axis=1, dtype=np.uint32)
    return starts, ends, words, valid


def _line_breaks(seg: np.ndarray) -> np.ndarray:
    """Running count of the line breaks before each byte of ``seg`` (one more entry: the piece's total)."""
    brk = _BREAK[seg]
    brk[:-1] &= ~((seg[:-1] == 13) & (seg[1:] == 10))
    return np.concatenate(([0], np.cumsum(brk, dtype=np.int64)))


def _bad_token(data: bytes, text: bytes | str, start: int, line: int, index: int, filename: str) -> MemFormatError:
    """The error of the token at byte ``start`` (quoted from ``text``: the file's bytes or the parsed string)."""
    end = start
    while end < min(len(data), start + 41) and not _WS[data[end]]:
        end += 1
    tok = text[start:end]
    shown = tok.decode("ascii", "replace") if isinstance(tok, bytes) else tok
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return MemFormatError(
        filename,
        f"line {line}: token {index} {shown!r} is not a 32-bit hex word (1..8 hex digits, optional 0x prefix)",
    )


def _too_long(max_words: int, line: int, filename: str) -> MemFormatError:
    return MemFormatError(
        filename,
        f"line {line}: a program of more than {max_words} instructions exceeds the limit "
        "(raise it with --max-program N)",
    )


def _parse(data: bytes, text: bytes | str, filename: str, max_words: int) -> Program:
    """The program of ASCII ``data``; ``text`` is what error messages quote tokens from (same offsets)."""
    b = np.frombuffer(data, dtype=np.uint8)
    words: list[np.ndarray] = []
    lines: list[np.ndarray] = []
    a, line_base, count = 0, 0, 0
    while a < len(b):
        z, crosses = _cut(b, a + _PIECE)
        seg = b[a:z]
        starts, _ends, piece_words, valid = _tokens(seg, crosses)
        breaks = _line_breaks(seg)
        piece_lines = line_base + 1 + breaks[starts]
        if line_base + int(breaks[-1]) < 2**31 - 1:
            piece_lines = piece_lines.astype(np.int32)
        if not valid.all():
            k = int(np.argmin(valid))
            raise _bad_token(data, text, a + int(starts[k]), int(piece_lines[k]), count + k, filename)
        if count + len(starts) > max_words:
            k = max_words - count
            raise _too_long(max_words, int(piece_lines[k]), filename)
        words.append(piece_words)
        lines.append(piece_lines)
        count += len(starts)
        line_base += int(breaks[-1])
        a = z
    all_words = read_only(np.concatenate(words) if words else np.zeros(0, dtype=np.uint32))
    all_lines = read_only(np.concatenate(lines) if lines else np.zeros(0, dtype=np.int32))
    return Program.trusted(all_words, SourceMap(filename, all_lines, MemTexts(all_words)), filename)


def parse_mem(text: str, filename: str = "<mem>", *, max_words: int = MAX_PROGRAM_WORDS) -> Program:
    """Parse .mem text into a Program whose source map points at the .mem lines (at most ``max_words`` words;
    a non-ASCII character is part of a token, so it is an error)."""
    return _parse(text.encode("ascii", "replace"), text, filename, max_words)


def read_mem(path: str | Path, *, max_words: int = MAX_PROGRAM_WORDS) -> Program:
    """The program of the ``.mem`` file at ``path`` (a regular file of at most ``MAX_PROGRAM_BYTES``)."""
    p = Path(path)
    try:
        data = read_input(p, ".mem program file", MAX_PROGRAM_BYTES)
    except InputFileError as exc:
        raise MemFormatError(str(p), exc.reason) from None
    if not data.isascii():
        at = int(np.argmax(np.frombuffer(data, dtype=np.uint8) >= 128))
        line = data.count(b"\n", 0, at) + 1
        raise MemFormatError(
            str(p), f"line {line}: not a text .mem file (non-ASCII byte 0x{data[at]:02X} at offset {at})"
        )
    return _parse(data, data, str(p), max_words)


def write_mem(path: str | Path, words: Iterable[SupportsInt]) -> None:
    """Write ``words`` as a .mem file (via a temporary file + rename, so no partial file is left)."""
    atomic_write(path, format_mem(words))
