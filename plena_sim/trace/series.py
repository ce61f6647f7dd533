"""The data series of a trace's plots (one job; no plotting here): ``plena-sim plot`` draws them, ``--json`` prints
them, the tests check them.

Time bins: the run's cycle span ``[start, end)`` (``start`` 0, or the oldest kept record's start when the trace
ring dropped older ones; ``end`` the last record's end) cut into ``min(bins, end - start)`` bins at the integer
edges ``start + k * (end - start) // n`` (widths differ by at most one cycle). Every per-bin figure is an exact
integer, so the bins of a series sum exactly to its total.

* :func:`utilization_series` -- per unit (M V S H C), the cycles of each bin in which the unit was busy: the
  *union* of its records' ``[start, end)`` (so a busy fraction never exceeds 1; in serial mode the records of one
  unit never overlap and the union is their sum, ``Trace.unit_busy()``), and that over the bin's width.
* :func:`bandwidth_series` -- HBM bytes read (``H_PREFETCH_M``, ``H_PREFETCH_V``) and written (``H_STORE_V``)
  per bin: each record's bytes (``RC_HBYTES``: its burst requests x burst bytes) spread uniformly over its
  ``[start, end)`` as integers (the bytes of ``[start, t)`` are ``floor(bytes * (t - start) / cycles)``; a record
  of no cycles puts its bytes into the bin of its start), and bytes per cycle (= GB/s: one accelerator cycle is
  1 ns, timing.md).
* :func:`region_series` -- per code region path, in the order the regions open: the inclusive cycles of its runs
  (:meth:`Trace.region_slices`), its depth (0 top level) and its number of runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from isa.encoding import UNIT_NAMES
from isa.table import BY_OPCODE

from ..timing.scoreboard import RC_END, RC_HBYTES, RC_OP, RC_START, RC_UNIT
from .ring import Trace

__all__ = ["bin_edges", "utilization_series", "bandwidth_series", "region_series", "READ_OPS", "WRITE_OPS"]

#: the DMA mnemonics that read HBM and the one that writes it
READ_OPS = ("H_PREFETCH_M", "H_PREFETCH_V")
WRITE_OPS = ("H_STORE_V",)


def _span(trace: Trace) -> tuple[int, int]:
    r = trace.records
    if not len(r):
        return 0, 0
    start = 0 if trace.dropped == 0 else int(r[:, RC_START].min())
    return start, int(r[:, RC_END].max())


def bin_edges(trace: Trace, bins: int) -> np.ndarray:
    """int64[n + 1]: the edges of the time bins (module docstring); no bins (one edge) for an empty span."""
    if bins < 1:
        raise ValueError(f"bins: {bins} must be >= 1")
    start, end = _span(trace)
    n = min(bins, end - start)
    if n <= 0:
        return np.array([start], dtype=np.int64)
    return start + (np.arange(n + 1, dtype=np.int64) * (end - start)) // n


def _spread(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray, amounts: np.ndarray | None = None) -> np.ndarray:
    """int64 per bin: each interval ``[starts[i], ends[i])`` cut at the bin edges; a piece counts its cycles, or
    with ``amounts`` its share of ``amounts[i]`` (integer, uniform over the interval, the pieces summing to it)."""
    nbins = len(edges) - 1
    out = np.zeros(max(nbins, 0), dtype=np.int64)
    if nbins <= 0 or not len(starts):
        return out
    lo = np.searchsorted(edges, starts, side="right")  # the first edge after each start
    interior = np.maximum(np.searchsorted(edges, ends, side="left") - lo, 0)  # edges strictly inside
    pieces = interior + 1
    rec = np.repeat(np.arange(len(starts)), pieces)
    j = np.arange(int(pieces.sum())) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # piece index in its interval
    last = j == interior[rec]
    s, e, first_edge = starts[rec], ends[rec], lo[rec]
    t0 = np.where(j == 0, s, edges[np.minimum(first_edge + j - 1, nbins)])
    t1 = np.where(last, e, edges[np.minimum(first_edge + j, nbins)])
    if amounts is None:
        values = t1 - t0
    else:
        amount, cycles = amounts[rec], np.maximum(e - s, 1)
        before_end = np.where(last, amount, amount * (t1 - s) // cycles)
        values = before_end - np.where(j == 0, 0, amount * (t0 - s) // cycles)
    np.add.at(out, np.clip(first_edge - 1 + j, 0, nbins - 1), values)
    return out


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint intervals covering the non-empty ``[starts[i], ends[i])``, sorted."""
    keep = ends > starts
    order = np.argsort(starts[keep], kind="stable")
    s, e = starts[keep][order], ends[keep][order]
    if not len(s):
        return s, e
    reach = np.maximum.accumulate(e)
    opens = np.concatenate([[True], s[1:] > reach[:-1]])
    closes = np.concatenate([opens[1:], [True]])
    return s[opens], reach[closes]


def _bin_doc(edges: np.ndarray) -> dict[str, Any]:
    return {"start": int(edges[0]), "end": int(edges[-1]), "edges": edges, "width": np.diff(edges)}


def utilization_series(trace: Trace, bins: int) -> dict[str, Any]:
    """``{"start", "end", "edges", "width", "units": {U: {"busy_cycles": int64[n], "fraction": float64[n]}}}``."""
    edges = bin_edges(trace, bins)
    doc = _bin_doc(edges)
    r = trace.records
    doc["units"] = {}
    for k, unit in enumerate(UNIT_NAMES):
        mine = r[:, RC_UNIT] == k
        busy = _spread(*_union(r[mine, RC_START], r[mine, RC_END]), edges)
        doc["units"][unit] = {"busy_cycles": busy, "fraction": busy / np.maximum(doc["width"], 1)}
    return doc


def _opcodes(mnemonics: tuple[str, ...]) -> list[int]:
    return [op for op, ins in BY_OPCODE.items() if ins.mnemonic in mnemonics]


def bandwidth_series(trace: Trace, bins: int) -> dict[str, Any]:
    """``{"start", "end", "edges", "width", "read_bytes", "write_bytes" (int64[n]), "read_bytes_per_cycle",
    "write_bytes_per_cycle" (float64[n])}``."""
    edges = bin_edges(trace, bins)
    doc = _bin_doc(edges)
    r = trace.records
    for name, ops in (("read", READ_OPS), ("write", WRITE_OPS)):
        mine = np.isin(r[:, RC_OP], _opcodes(ops))
        moved = _spread(r[mine, RC_START], r[mine, RC_END], edges, r[mine, RC_HBYTES])
        doc[f"{name}_bytes"] = moved
        doc[f"{name}_bytes_per_cycle"] = moved / np.maximum(doc["width"], 1)
    return doc


def region_series(trace: Trace) -> dict[str, Any]:
    """``{"paths", "depth", "cycles_inclusive", "runs", "total_cycles"}``: one entry per region path (in the order
    the regions open; a path marked twice is one entry), ``total_cycles`` the span of the trace."""
    paths = list(dict.fromkeys(r.path for r in getattr(trace.program, "regions", ()) or ()))
    cycles = dict.fromkeys(paths, 0)
    runs = dict.fromkeys(paths, 0)
    for s in trace.region_slices():
        cycles[s["path"]] += s["end"] - s["start"]
        runs[s["path"]] += 1
    start, end = _span(trace)
    return {
        "paths": paths,
        "depth": np.array([p.count("/") for p in paths], dtype=np.int64),
        "cycles_inclusive": np.array([cycles[p] for p in paths], dtype=np.int64),
        "runs": np.array([runs[p] for p in paths], dtype=np.int64),
        "total_cycles": end - start,
    }
