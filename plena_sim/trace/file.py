"""A trace on disk (one job): :class:`plena_sim.trace.ring.Trace` as a ``.npz`` file and back.

* :func:`trace_npz_bytes` -- the file's bytes (for an atomic write): ``records`` (int64[n, REC_N], oldest first),
  ``fields`` (the names of the record's columns, :data:`plena_sim.timing.scoreboard.REC_FIELDS`), ``total``,
  ``capacity``, ``mode``, ``burst_bytes``, ``tile_elems`` (MRAM elements per tile), the program's code regions
  (``region_paths``, ``region_first``, ``region_end``) and
  the source of the words the records name (``program_words``, ``source_file``, ``source_pcs``,
  ``source_lines``, ``source_text``: their texts joined by newlines). No pickled object: ``np.load`` with
  ``allow_pickle=False`` reads it.
* :func:`load_trace` -- the Trace of such a file; its ``program`` is a :class:`SavedProgram` (``regions`` and
  ``source``), so ``region_slices()`` and ``rows()`` work as on the trace of the run. A file whose record fields
  differ from this plena-sim's ``REC_FIELDS`` is refused (``ValueError`` naming the difference): its columns
  would be read as the wrong quantities.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from isa.fileio import npz_bytes
from isa.program import SourceMap
from isa.regions import Region

from ..timing.scoreboard import RC_PC, REC_FIELDS
from .ring import Trace

__all__ = ["SavedProgram", "trace_npz_bytes", "load_trace", "TRACE_FILE"]

#: the name of the trace file of a ``run --save DIR --trace`` set
TRACE_FILE = "trace.npz"


@dataclass(frozen=True)
class SavedProgram:
    """What a loaded trace keeps of its program: the code regions and the source of the traced words."""

    regions: tuple[Region, ...] = ()
    source: SourceMap | None = None


def _source_arrays(program: object, pcs: np.ndarray) -> dict[str, Any]:
    source = getattr(program, "source", None)
    if not isinstance(source, SourceMap):
        return {"program_words": np.int64(0), "source_file": np.str_(""), "source_pcs": np.zeros(0, np.int64)}
    used = np.unique(pcs[(pcs >= 0) & (pcs < len(source))])
    return {
        "program_words": np.int64(len(source)),
        "source_file": np.str_(source.file),
        "source_pcs": used.astype(np.int64),
        "source_lines": source.lines[used].astype(np.int64),
        "source_text": np.str_("\n".join(source.text(int(k)) for k in used)),
    }


def trace_npz_bytes(trace: Trace) -> bytes:
    """The ``.npz`` file of ``trace`` (module docstring)."""
    regions = tuple(getattr(trace.program, "regions", ()) or ())
    records = np.asarray(trace.records, dtype=np.int64)
    return npz_bytes(
        {
            "records": records,
            "fields": np.array(REC_FIELDS, dtype=np.str_),
            "total": np.int64(trace.total),
            "capacity": np.int64(trace.capacity),
            "mode": np.str_(trace.mode),
            "burst_bytes": np.int64(trace.burst_bytes),
            "tile_elems": np.int64(trace.tile_elems),
            "region_paths": np.array([r.path for r in regions], dtype=np.str_),
            "region_first": np.array([r.first for r in regions], dtype=np.int64),
            "region_end": np.array([r.end for r in regions], dtype=np.int64),
            **_source_arrays(trace.program, records[:, RC_PC]),
        }
    )


def _check_fields(fields: list[str], path: object) -> None:
    if fields == list(REC_FIELDS):
        return
    missing = [f for f in REC_FIELDS if f not in fields]
    extra = [f for f in fields if f not in REC_FIELDS]
    parts = [f"missing {', '.join(missing)}" if missing else "", f"unknown {', '.join(extra)}" if extra else ""]
    what = "; ".join(p for p in parts if p) or "the same fields in another order"
    raise ValueError(
        f"{path}: the trace records were written with another record layout ({what}); "
        "re-run with this plena-sim to save the trace again"
    )


def _saved_program(npz: Any) -> SavedProgram:
    regions = tuple(
        Region(str(p), int(a), int(b))
        for p, a, b in zip(npz["region_paths"], npz["region_first"], npz["region_end"], strict=True)
    )
    n = int(npz["program_words"])
    if n == 0:
        return SavedProgram(regions)
    pcs = npz["source_pcs"]
    lines = np.zeros(n, dtype=np.int64)
    lines[pcs] = npz["source_lines"]
    texts = [""] * n
    for pc, text in zip(pcs.tolist(), str(npz["source_text"]).split("\n") if len(pcs) else [], strict=True):
        texts[pc] = text
    return SavedProgram(regions, SourceMap.from_lines(str(npz["source_file"]), lines, texts))


def load_trace(path: str | Path, program: object = None) -> Trace:
    """The Trace saved at ``path`` by :func:`trace_npz_bytes`; ``program``, if given, replaces the saved one.
    ValueError for a file that is not such a trace or whose record fields differ from ``REC_FIELDS``."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            _check_fields([str(f) for f in npz["fields"]], path)
            records = np.asarray(npz["records"], dtype=np.int64)
            if records.ndim != 2 or records.shape[1] != len(REC_FIELDS):
                raise ValueError(f"{path}: records of shape {records.shape}, not (n, {len(REC_FIELDS)})")
            return Trace(
                records,
                int(npz["total"]),
                int(npz["capacity"]),
                _saved_program(npz) if program is None else program,
                int(npz["burst_bytes"]),
                str(npz["mode"]),
                int(npz["tile_elems"]),
            )
    except KeyError as exc:
        raise ValueError(f"{path}: not a plena-sim trace file (no {exc.args[0]!r})") from None
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{path}: not a plena-sim trace file ({exc})") from None
