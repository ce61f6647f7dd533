"""The layout planner of a composed program: VRAM rows for every buffer over the stages that use it.

A composed program (a decoder layer, a decode step) is a sequence of stages, each one generator. A buffer
is written by one stage and read by later ones: it is *live* from its producer to its last reader (or to
the end of the program when the testbench judges it). :func:`plan_vram` gives every buffer the lowest
rows that no buffer live at the same time holds (first fit in producer order, one guard row after each);
each stage's scratch is one more buffer live during that stage alone, so scratch rows are shared between
stages. :meth:`VramLayout.conflicts` lists every pair of simultaneously live buffers that share a row
(the plan is valid only when it is empty; the tests check it from the plan).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["BufferRequest", "Buffer", "VramLayout", "plan_vram"]


@dataclass(frozen=True)
class BufferRequest:
    """``rows`` VRAM rows written first by stage ``first`` and last used by stage ``last`` (inclusive)."""

    name: str
    rows: int
    first: int
    last: int

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise ValueError(f"buffer {self.name}: rows={self.rows} must be >= 1")
        if self.last < self.first:
            raise ValueError(f"buffer {self.name}: last stage {self.last} precedes its first stage {self.first}")


@dataclass(frozen=True)
class Buffer:
    """A placed buffer: rows ``[row0, row0 + rows)``, live over stages ``[first, last]``."""

    name: str
    row0: int
    rows: int
    first: int
    last: int

    @property
    def end(self) -> int:
        return self.row0 + self.rows

    def live_with(self, other: Buffer) -> bool:
        return self.first <= other.last and other.first <= self.last

    def shares_rows(self, other: Buffer) -> bool:
        return self.row0 < other.end and other.row0 < self.end


@dataclass(frozen=True)
class VramLayout:
    buffers: Mapping[str, Buffer]
    V: int

    def base(self, name: str) -> int:
        """Element address of the buffer's first row."""
        return self.buffers[name].row0 * self.V

    def row0(self, name: str) -> int:
        return self.buffers[name].row0

    @property
    def rows_used(self) -> int:
        """One past the last row any buffer holds."""
        return max((b.end for b in self.buffers.values()), default=0)

    def conflicts(self) -> list[tuple[str, str]]:
        """Every pair of buffers that are live at the same time and share a row (empty for a valid plan)."""
        out = []
        for a, b in itertools.combinations(self.buffers.values(), 2):
            if a.live_with(b) and a.shares_rows(b):
                out.append((a.name, b.name))
        return out


def _first_fit(placed: Iterable[Buffer], req: BufferRequest, start: int) -> int:
    """The lowest row >= ``start`` where ``req`` (plus a guard row) meets no live buffer."""
    row = start
    live = sorted((b for b in placed if b.first <= req.last and req.first <= b.last), key=lambda b: b.row0)
    for b in live:
        if row + req.rows + 1 <= b.row0:
            break
        row = max(row, b.end + 1)
    return row


def plan_vram(requests: Sequence[BufferRequest], V: int, start_row: int = 0) -> VramLayout:
    """Place every request (first fit, in the order of their first stage, then as given)."""
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        raise ValueError(f"plan_vram: buffer names repeat: {names}")
    placed: list[Buffer] = []
    for req in sorted(requests, key=lambda r: r.first):
        row0 = _first_fit(placed, req, start_row)
        placed.append(Buffer(req.name, row0, req.rows, req.first, req.last))
    return VramLayout({b.name: b for b in placed}, V)
