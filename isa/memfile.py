"""The upstream ``.mem`` machine-code format (isa.md §2): one ``0x%08X`` word per line.

The reader is lenient as the spec allows: any whitespace-separated tokens, each 1..8 hex digits with an
optional ``0x``/``0X`` prefix. Anything else is a :class:`MemFormatError` naming the token index, line and
token. An empty file is an empty program.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import SupportsInt

from .fileio import atomic_write
from .program import Program, SourceMap

__all__ = ["MemFormatError", "format_mem", "parse_mem", "read_mem", "write_mem"]

_TOKEN_RE = re.compile(r"^(?:0[xX])?([0-9a-fA-F]{1,8})$")


class MemFormatError(ValueError):
    def __init__(self, file: str, message: str):
        self.file = file
        super().__init__(f"{file}: {message}")


def format_mem(words: Iterable[SupportsInt]) -> str:
    """Text of a .mem file for ``words`` (upper-case hex, 8 digits, one per line)."""
    return "".join(f"0x{int(w) & 0xFFFFFFFF:08X}\n" for w in words)


def parse_mem(text: str, filename: str = "<mem>") -> Program:
    """Parse .mem text into a Program whose source map points at the .mem lines."""
    from .disasm import disassemble_word

    words: list[int] = []
    lines: list[int] = []
    texts: list[str] = []
    index = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        for tok in line.split():
            m = _TOKEN_RE.match(tok)
            if not m:
                shown = tok if len(tok) <= 40 else tok[:37] + "..."
                raise MemFormatError(
                    filename,
                    f"line {lineno}: token {index} {shown!r} is not a 32-bit hex "
                    "word (1..8 hex digits, optional 0x prefix)",
                )
            w = int(m.group(1), 16)
            words.append(w)
            lines.append(lineno)
            texts.append(f"{disassemble_word(w)}   (word 0x{w:08X})")
            index += 1
    return Program(words, SourceMap.from_lines(filename, lines, texts), filename)


def read_mem(path: str | Path) -> Program:
    p = Path(path)
    try:
        data = p.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise MemFormatError(str(p), f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise MemFormatError(
            str(p), f"line {line}: not a text .mem file (non-ASCII byte 0x{data[exc.start]:02X} at offset {exc.start})"
        ) from None
    return parse_mem(text, str(p))


def write_mem(path: str | Path, words: Iterable[SupportsInt]) -> None:
    """Write ``words`` as a .mem file (via a temporary file + rename, so no partial file is left)."""
    atomic_write(path, format_mem(words))
