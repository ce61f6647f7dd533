"""Per-region statistics of a run (one job): the code regions of a program (:mod:`isa.regions`) summed over the
per-pc profile the backends return (``Outcome.pc_count`` / ``Outcome.pc_cycles``).

For each region path (a path marked several times is summed over its occurrences) and one ``(unlabelled)`` entry
for the words in no region: ``instructions`` and ``macs`` of the words whose innermost region it is (exclusive),
``cycles_exclusive`` of the same words and ``cycles_inclusive`` of every word inside the region (nested ones
included). The exclusive figures of all entries sum exactly to the run's instructions, matrix MACs and cycles.
Order: the paths in the order they first open in the program, ``(unlabelled)`` last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def region_stats(
    regions: Sequence[Region],
    pc_count: np.ndarray,
    pc_cycles: np.ndarray,
    macs: np.ndarray,
    profile: np.ndarray | None = None,
    fields: Callable[[np.ndarray, int, int], dict] | None = None,
) -> list:
    """The region entries (module docstring) of one run; ``macs`` per pc as :func:`pc_macs` gives it. With
    ``profile`` (int64[n, k], more per-pc columns) and ``fields``, each entry also gets ``fields(exclusive sums of
    the profile columns, exclusive cycles, exclusive MACs)``."""
    cols = [np.asarray(a, np.int64) for a in (pc_count, pc_cycles, macs)]
    if profile is not None:
        cols += [np.asarray(profile[:, j], np.int64) for j in range(profile.shape[1])]
    incl_by_path, excl_by_path = _sums(regions, cols)
    out = []
    for path, exc in excl_by_path.items():
        e = _entry(path, exc[0], exc[1], incl_by_path[path][1], exc[2])
        if fields is not None:
            e.update(fields(np.asarray(exc[3:]), int(exc[1]), int(exc[2])))
        out.append(e)
    return out


def _sums(regions: Sequence[Region], cols: list[np.ndarray]) -> tuple[dict, dict]:
    """Per path (first-open order, ``(unlabelled)`` last): the inclusive and the exclusive sums of every column."""
    totals = [int(a.sum()) for a in cols]
    if not regions:
        return {UNLABELLED: totals}, {UNLABELLED: totals}
    prefix = [_prefix(a) for a in cols]
    # inclusive sums of each occurrence, then exclusive = inclusive - its direct children's
    incl = [[int(p[r.end] - p[r.first]) for p in prefix] for r in regions]
    excl = [list(v) for v in incl]
    unlabelled = list(totals)
    for k, parent in enumerate(_parents(regions)):
        rest = excl[parent] if parent >= 0 else unlabelled
        for j in range(len(cols)):
            rest[j] -= incl[k][j]
    incl_by: dict[str, list[int]] = {}
    excl_by: dict[str, list[int]] = {}
    for r, inc, exc in zip(regions, incl, excl, strict=True):
        for acc, v in (
            (incl_by.setdefault(r.path, [0] * len(cols)), inc),
            (excl_by.setdefault(r.path, [0] * len(cols)), exc),
        ):
            for j in range(len(cols)):
                acc[j] += v[j]
    incl_by[UNLABELLED] = unlabelled
    excl_by[UNLABELLED] = unlabelled
    return incl_by, excl_by
