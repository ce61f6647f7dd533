"""The assembled program: 32-bit words plus a source map (word index -> file, line, text)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import SupportsInt

import numpy as np

__all__ = ["SourceLine", "Program"]


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int  # 1-based line number in ``file`` (for .mem input: the word's line)
    text: str  # the original source text of that line (comments included)

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Program:
    """An immutable program. ``words[i]`` came from ``source[i]``."""

    words: tuple[int, ...]
    source: tuple[SourceLine, ...]
    name: str = "<program>"

    def __post_init__(self) -> None:
        if len(self.words) != len(self.source):
            raise ValueError("words and source map differ in length")

    def __len__(self) -> int:
        return len(self.words)

    def array(self) -> np.ndarray:
        """The words as a uint32 array (a fresh copy)."""
        return np.array(self.words, dtype=np.uint32)

    def location(self, pc: int) -> str:
        """``file:line: text`` of the instruction at ``pc`` (or a note if pc is out of range)."""
        if 0 <= pc < len(self.source):
            s = self.source[pc]
            return f"{s.where()}: {s.text.strip()}"
        return f"{self.name}: pc {pc} (past the end)"

    @classmethod
    def from_words(cls, words: Iterable[SupportsInt], name: str = "<words>") -> Program:
        """A program whose source map is its own disassembly (for .mem input)."""
        from .disasm import disassemble_word

        ws = tuple(int(w) for w in words)
        return cls(ws, tuple(SourceLine(name, k + 1, disassemble_word(w)) for k, w in enumerate(ws)), name)
