"""Per-region statistics of a run (one job): the code regions of a program (:mod:`isa.regions`) summed over the
per-pc profile the backends return (``Outcome.pc_count`` / ``Outcome.pc_cycles``).

For each region path (a path marked several times is summed over its occurrences) and one ``(unlabelled)`` entry
for the words in no region: ``instructions`` and ``macs`` of the words whose innermost region it is (exclusive),
``cycles_exclusive`` of the same words and ``cycles_inclusive`` of every word inside the region (nested ones
included). The exclusive figures of all entries sum exactly to the run's instructions, matrix MACs and cycles.
Order: the paths in the order they first open in the program, ``(unlabelled)`` last.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from isa.encoding import MASK_OPCODE, SHIFT_OPCODE
from isa.regions import Region

__all__ = ["UNLABELLED", "region_stats", "pc_macs"]

#: the entry of the words in no region (a name a region cannot have: region names never start with "(")
UNLABELLED = "(unlabelled)"


def pc_macs(words: np.ndarray, pc_count: np.ndarray, macs_of_opcode: Sequence[int]) -> np.ndarray:
    """int64 per pc: the matrix MACs its retired instructions did (``pc_count`` x the MACs of its opcode)."""
    opcode = (np.asarray(words, dtype=np.int64) >> SHIFT_OPCODE) & MASK_OPCODE
    return pc_count * np.asarray(macs_of_opcode, dtype=np.int64)[opcode]


def _prefix(a: np.ndarray) -> np.ndarray:
    out = np.zeros(a.size + 1, dtype=np.int64)
    np.cumsum(a, out=out[1:])
    return out


def _inside(r: Region, outer: Region) -> bool:
    """``r`` is nested in ``outer`` (the path says so: an empty region at the end of another is not inside it)."""
    return r.path.startswith(outer.path + "/") and outer.first <= r.first and r.end <= outer.end


def _parents(regions: Sequence[Region]) -> list[int]:
    """Index of each region's innermost enclosing region (-1 at the top level); regions in opening order."""
    parents: list[int] = []
    open_: list[int] = []  # indices of the regions enclosing the current one, outermost first
    for k, r in enumerate(regions):
        while open_ and not _inside(r, regions[open_[-1]]):
            open_.pop()
        parents.append(open_[-1] if open_ else -1)
        open_.append(k)
    return parents


def _entry(path: str, instructions: int, excl: int, incl: int, macs: int) -> dict:
    return {
        "path": path,
        "instructions": int(instructions),
        "cycles_exclusive": int(excl),
        "cycles_inclusive": int(incl),
        "macs": int(macs),
    }


def region_stats(regions: Sequence[Region], pc_count: np.ndarray, pc_cycles: np.ndarray, macs: np.ndarray) -> list:
    """The region entries (module docstring) of one run; ``macs`` per pc as :func:`pc_macs` gives it."""
    per_pc = (np.asarray(pc_count, np.int64), np.asarray(pc_cycles, np.int64), np.asarray(macs, np.int64))
    totals = [int(a.sum()) for a in per_pc]
    if not regions:
        return [_entry(UNLABELLED, totals[0], totals[1], totals[1], totals[2])]
    prefix = [_prefix(a) for a in per_pc]
    # inclusive (count, cycles, macs) of each occurrence, then exclusive = inclusive - its direct children's
    incl = [[int(p[r.end] - p[r.first]) for p in prefix] for r in regions]
    excl = [list(v) for v in incl]
    unlabelled = list(totals)
    for k, parent in enumerate(_parents(regions)):
        rest = excl[parent] if parent >= 0 else unlabelled
        for j in range(3):
            rest[j] -= incl[k][j]
    by_path: dict[str, list[int]] = {}  # path -> [count, cycles excl, cycles incl, macs], first-open order
    for r, inc, exc in zip(regions, incl, excl, strict=True):
        acc = by_path.setdefault(r.path, [0, 0, 0, 0])
        for j, v in enumerate((exc[0], exc[1], inc[1], exc[2])):
            acc[j] += v
    out = [_entry(path, *acc) for path, acc in by_path.items()]
    out.append(_entry(UNLABELLED, unlabelled[0], unlabelled[1], unlabelled[1], unlabelled[2]))
    return out
