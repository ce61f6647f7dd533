"""The assembled program: 32-bit words plus a source map (word index -> file, line, text).

Both are stored compactly -- no Python object per instruction: the words are one read-only ``uint32``
array; the source map keeps the file name once, one read-only array of line numbers and a *text table*
that produces the text of word ``k`` on request (:class:`TextTable`: one string of all texts plus their
offsets; :class:`TextSpans`: slices of the assembled file's text; :class:`DisassemblyTexts`: the disassembly
of each word; ``isa.memfile.MemTexts``: that of a ``.mem`` file's word; ``isa.plans.SpelledTexts``: spelled
back from the words as a generator wrote them). :class:`SourceLine` objects are made only when asked for.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, SupportsInt, overload

import numpy as np

from .regions import Region
from .safetext import printable

__all__ = ["SourceLine", "SourceMap", "TextTable", "TextSpans", "DisassemblyTexts", "Program", "read_only"]


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int  # 1-based line number in ``file`` (for .mem input: the word's line)
    text: str  # the original source text of that line (comments included)

    def where(self) -> str:
        return f"{self.file}:{self.line}"


class LineTexts(Protocol):
    """The text of each word of a program."""

    def __len__(self) -> int: ...

    def __getitem__(self, k: int) -> str: ...

    def all(self) -> list[str]: ...


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` with its writeable flag cleared (returned for chaining)."""
    a.flags.writeable = False
    return a


def _index_array(values: np.ndarray | Sequence[int]) -> np.ndarray:
    """Non-negative integers as the smallest of int32 / int64 that holds them, read-only."""
    if isinstance(values, np.ndarray) and values.dtype == np.int32 and not values.flags.writeable:
        return values  # already frozen by its owner: no copy
    a = np.asarray(values, dtype=np.int64)
    if a.size and int(a.max()) < 2**31:
        a = a.astype(np.int32)
    return read_only(a)


class TextTable:
    """Texts stored as one string (joined by ``\\n``) and the start offset of each (plus one past the end)."""

    __slots__ = ("_joined", "_starts", "_splittable")

    def __init__(self, texts: Sequence[str]):
        self._joined = "\n".join(texts)
        starts = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1, out=starts[1:])
        self._starts = _index_array(starts)
        #: no text contains a newline (so splitting the joined string gives the texts back)
        self._splittable = self._joined.count("\n") == len(texts) - 1

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, k: int) -> str:
        if k < 0:
            k += len(self)
        return self._joined[self._starts[k] : self._starts[k + 1] - 1]

    def all(self) -> list[str]:
        if not len(self):
            return []
        if self._splittable:
            return self._joined.split("\n")
        bounds = self._starts.tolist()
        return [self._joined[a : b - 1] for a, b in itertools.pairwise(bounds)]

    def same(self, other: object) -> bool:
        return (
            isinstance(other, TextTable)
            and self._joined == other._joined
            and np.array_equal(self._starts, other._starts)
        )


class TextSpans:
    """Texts that are slices ``text[starts[k]:ends[k]]`` of one string (an assembled file's lines)."""

    __slots__ = ("_text", "_starts", "_ends")

    def __init__(self, text: str, starts: np.ndarray, ends: np.ndarray):
        if len(starts) != len(ends):
            raise ValueError("span starts and ends differ in length")
        self._text = text
        self._starts = _index_array(starts)
        self._ends = _index_array(ends)

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, k: int) -> str:
        return self._text[self._starts[k] : self._ends[k]]

    def all(self) -> list[str]:
        text = self._text
        return [text[a:b] for a, b in zip(self._starts.tolist(), self._ends.tolist(), strict=True)]


class DisassemblyTexts:
    """The disassembly of each word (``Program.from_words``), made on request."""

    __slots__ = ("_words",)

    def __init__(self, words: np.ndarray):
        self._words = words

    def __len__(self) -> int:
        return len(self._words)

    def __getitem__(self, k: int) -> str:
        from .disasm import disassemble_word

        return disassemble_word(int(self._words[k]))

    def all(self) -> list[str]:
        from .disasm import disassemble

        return disassemble(self._words.tolist())


class SourceMap(Sequence[SourceLine]):
    """Word index -> :class:`SourceLine` of one file: ``source[k]`` is made on request."""

    __slots__ = ("_file", "_lines", "_texts")

    def __init__(self, file: str, lines: np.ndarray | Sequence[int], texts: LineTexts):
        self._file = file
        self._lines = _index_array(lines)
        self._texts = texts
        if len(self._lines) != len(texts):
            raise ValueError("line numbers and texts differ in length")

    @classmethod
    def from_lines(cls, file: str, lines: np.ndarray | Sequence[int], texts: Sequence[str]) -> SourceMap:
        """The map of word ``k`` to line ``lines[k]`` with text ``texts[k]``."""
        return cls(file, lines, TextTable(texts))

    @property
    def file(self) -> str:
        return self._file

    @property
    def lines(self) -> np.ndarray:
        """The 1-based line number of every word (read-only)."""
        return self._lines

    def line(self, k: int) -> int:
        return int(self._lines[k])

    def text(self, k: int) -> str:
        return self._texts[k]

    def texts(self) -> list[str]:
        """Every word's text, in word order."""
        return self._texts.all()

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, k: int) -> SourceLine: ...

    @overload
    def __getitem__(self, k: slice) -> tuple[SourceLine, ...]: ...

    def __getitem__(self, k: int | slice) -> SourceLine | tuple[SourceLine, ...]:
        if isinstance(k, slice):
            return tuple(self[j] for j in range(*k.indices(len(self))))
        n = len(self)
        if not -n <= k < n:
            raise IndexError("source map index out of range")
        return SourceLine(self._file, int(self._lines[k]), self._texts[k])

    def __iter__(self) -> Iterator[SourceLine]:
        file = self._file
        for line, text in zip(self._lines.tolist(), self._texts.all(), strict=True):
            yield SourceLine(file, line, text)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SourceMap):
            if self._file != other._file or not np.array_equal(self._lines, other._lines):
                return False
            same = getattr(self._texts, "same", None)
            return bool(same and same(other._texts)) or self._texts.all() == other._texts.all()
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SourceMap({self._file!r}, {len(self)} words)"


def _word_array(words: Iterable[SupportsInt] | np.ndarray) -> np.ndarray:
    """A fresh read-only uint32 array of ``words``; ValueError if a word is not a 32-bit value."""
    if isinstance(words, np.ndarray) and words.dtype == np.uint32:
        return read_only(words.reshape(-1).copy())
    if not isinstance(words, (np.ndarray, list, tuple)):
        words = [int(w) for w in words]
    try:
        w64 = np.asarray(words, dtype=np.int64).reshape(-1)
    except OverflowError:
        raise ValueError("program words must be 32-bit values") from None
    if w64.size and (int(w64.min()) < 0 or int(w64.max()) > 0xFFFFFFFF):
        raise ValueError("program words must be 32-bit values")
    return read_only(w64.astype(np.uint32))


class Program:
    """An immutable program. ``words[k]`` came from ``source[k]``.

    ``words`` is a read-only ``uint32`` array; ``source`` a :class:`SourceMap` (a sequence of
    :class:`SourceLine`, also accepted as a tuple/list of them when all name the same file); ``regions`` the
    code regions its source marked (:mod:`isa.regions`), in opening order.
    """

    __slots__ = ("_words", "_source", "_name", "_regions")

    def __init__(
        self,
        words: Iterable[SupportsInt] | np.ndarray,
        source: SourceMap | Sequence[SourceLine],
        name: str = "<program>",
        regions: Iterable[tuple[str, int, int]] = (),
    ):
        self._words = _word_array(words)
        self._source = source if isinstance(source, SourceMap) else _source_map_of(source, name)
        self._name = name
        if len(self._words) != len(self._source):
            raise ValueError("words and source map differ in length")
        self._regions = _region_tuple(regions, len(self._words))

    @classmethod
    def trusted(
        cls, words: np.ndarray, source: SourceMap, name: str, regions: Iterable[tuple[str, int, int]] = ()
    ) -> Program:
        """A program of a read-only uint32 array no one else writes (no copy, no checks but the lengths)."""
        prog = cls.__new__(cls)
        prog._words, prog._source, prog._name = words, source, name
        if words.flags.writeable or words.dtype != np.uint32 or len(words) != len(source):
            raise ValueError("trusted program: words must be a read-only uint32 array as long as the source")
        prog._regions = _region_tuple(regions, len(words))
        return prog

    @property
    def words(self) -> np.ndarray:
        """The words (read-only uint32 array)."""
        return self._words

    @property
    def source(self) -> SourceMap:
        return self._source

    @property
    def name(self) -> str:
        return self._name

    @property
    def regions(self) -> tuple[Region, ...]:
        """The code regions ``(path, first_word, end_word)`` in opening order (``end_word`` exclusive; empty for
        a program without markers and for ``.mem`` input)."""
        return self._regions

    def __len__(self) -> int:
        return len(self._words)

    def array(self) -> np.ndarray:
        """The words as a uint32 array (a fresh, writable copy)."""
        return self._words.copy()

    def location(self, pc: int) -> str:
        """``file:line: text`` of the instruction at ``pc`` (or a note if pc is out of range)."""
        if 0 <= pc < len(self._source):
            s = self._source[pc]
            return f"{printable(s.where())}: {printable(s.text.strip())}"
        return f"{self._name}: pc {pc} (past the end)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        return (
            self._name == other._name
            and np.array_equal(self._words, other._words)
            and self._source == other._source
            and self._regions == other._regions
        )

    def __hash__(self) -> int:
        return hash((self._name, self._words.tobytes()))

    def __repr__(self) -> str:
        return f"Program({self._name!r}, {len(self)} words)"

    @classmethod
    def from_words(cls, words: Iterable[SupportsInt] | np.ndarray, name: str = "<words>") -> Program:
        """A program whose source map is its own disassembly (for .mem input), made on request."""
        ws = _word_array(words)
        return cls.trusted(ws, SourceMap(name, np.arange(1, len(ws) + 1), DisassemblyTexts(ws)), name)


def _region_tuple(regions: Iterable[tuple[str, int, int]], n_words: int) -> tuple[Region, ...]:
    """``regions`` as a tuple of :class:`~isa.regions.Region`; ValueError for one outside the ``n_words`` words."""
    out = tuple(Region(str(p), int(a), int(b)) for p, a, b in regions)
    for r in out:
        if not 0 <= r.first <= r.end <= n_words:
            raise ValueError(f"region {r.path!r} [{r.first}, {r.end}) is not inside the program's {n_words} words")
    return out


def _source_map_of(source: Sequence[SourceLine], name: str) -> SourceMap:
    files = {s.file for s in source}
    if len(files) > 1:
        raise ValueError(f"a program's source map names one file, got {sorted(files)}")
    file = files.pop() if files else name
    return SourceMap.from_lines(file, [s.line for s in source], [s.text for s in source])
