"""Code regions: ``; @region NAME`` opens a region, ``; @endregion`` closes the innermost one.

One job: recognise the two markers in a source line and turn a sequence of them into the regions of a program,
shared by the text assembler (:func:`isa.assembler.assemble`) and ``programs.asm.Asm.program``. A marker is a whole
line comment (``;`` or ``//``) whose first token is ``@region`` (followed by the name: free text, the rest of the
line, not starting with ``(``) or ``@endregion`` (nothing after it). Regions nest; a region is recorded as its
*path* (the names of the open regions, outermost first, joined by ``/``), its first word and its end word (one past
the last; a region without instructions has ``first == end``), in the order the regions open. Every other comment
stays a plain comment (upstream compatibility); a marker in the comment after an instruction is an error (it would
silently mark nothing otherwise).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Region", "RegionError", "RegionRecorder", "parse_marker", "REGION_OPEN", "REGION_CLOSE"]

REGION_OPEN = "@region"
REGION_CLOSE = "@endregion"


class Region(NamedTuple):
    """One region of a program: words ``first`` .. ``end - 1`` (``end`` exclusive)."""

    path: str
    first: int
    end: int


class RegionError(ValueError):
    """A malformed or unbalanced marker: ``column`` (1-based, 0 if not known), the marker ``token`` and ``reason``."""

    def __init__(self, column: int, token: str, reason: str):
        super().__init__(reason)
        self.column, self.token, self.reason = column, token, reason


def _comment_body(line: str) -> tuple[str, int] | None:
    """The text after the comment leader of a whole-line comment and its 0-based column; None otherwise."""
    lead = len(line) - len(line.lstrip())
    for leader in (";", "//"):
        if line.startswith(leader, lead):
            start = lead + len(leader)
            body = line[start:]
            return body.strip(), start + len(body) - len(body.lstrip())
    return None


def parse_marker(line: str) -> tuple[str | None, int] | None:
    """``(name, column)`` of an ``@region NAME`` line, ``(None, column)`` of an ``@endregion`` line, None for any
    other line (the column is 1-based, of the ``@``). Raises :class:`RegionError` for a malformed marker."""
    if "@" not in line:
        return None
    found = _comment_body(line)
    if found is None:
        _refuse_trailing(line)
        return None
    body, col = found
    parts = body.split(None, 1)
    word = parts[0] if parts else ""
    name = parts[1].strip() if len(parts) > 1 else ""
    if word == REGION_CLOSE:
        if name:
            raise RegionError(
                col + 1, REGION_CLOSE, f"{REGION_CLOSE} takes no name (it closes the innermost region), got {name!r}"
            )
        return None, col + 1
    if word != REGION_OPEN:
        return None
    if not name:
        raise RegionError(col + 1, REGION_OPEN, f"{REGION_OPEN} needs a name")
    if name.startswith("("):
        raise RegionError(
            col + 1, REGION_OPEN, f"region name {name!r} must not start with '(' (reserved for '(unlabelled)')"
        )
    return name, col + 1


def _refuse_trailing(line: str) -> None:
    """A marker in the comment after an instruction marks nothing: an error, not a silent plain comment."""
    cut = [k for k in (line.find(";"), line.find("//")) if k >= 0]
    if not cut:
        return
    k = min(cut)
    tail = line[k:].lstrip(";/").split()
    if tail and tail[0] in (REGION_OPEN, REGION_CLOSE):
        raise RegionError(
            k + 1, tail[0], f"{tail[0]} must be on a line of its own (not in the comment after an instruction)"
        )


class RegionRecorder:
    """Collects the markers of one program in line order and gives its regions (or the first balance error)."""

    def __init__(self) -> None:
        self._open: list[tuple[str, int, int]] = []  # (name, slot in _regions, where) of the open regions
        self._regions: list[Region] = []

    def open(self, name: str, word: int, where: int) -> None:
        """A region ``name`` opens before word ``word``; ``where`` (e.g. the line) names the marker in errors."""
        path = "/".join([n for n, _s, _w in self._open] + [name])
        self._open.append((name, len(self._regions), where))
        self._regions.append(Region(path, word, word))

    def close(self, word: int) -> None:
        """The innermost open region ends before word ``word``; RegionError if none is open."""
        if not self._open:
            raise RegionError(0, REGION_CLOSE, f"{REGION_CLOSE} without an open region")
        _name, slot, _where = self._open.pop()
        self._regions[slot] = self._regions[slot]._replace(end=word)

    def unclosed(self) -> list[tuple[str, int]]:
        """``(path, where)`` of every region still open, outermost first."""
        return [(self._regions[slot].path, where) for _n, slot, where in self._open]

    def regions(self) -> tuple[Region, ...]:
        """The regions in opening order; RegionError naming the innermost region still open, if any."""
        left = self.unclosed()
        if left:
            path, _where = left[-1]
            raise RegionError(0, REGION_OPEN, f"region {path!r} is never closed (missing {REGION_CLOSE})")
        return tuple(self._regions)
