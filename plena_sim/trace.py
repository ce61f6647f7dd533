"""Execution traces: decode the Numba core's trace ring, filter, summarise, export, render.

One job: turn the int64 trace records written inside the run loop (layout
:data:`plena_sim.timing.REC_FIELDS`, one record per retired instruction, newest ``capacity`` kept)
into rows a human or a tool can read.

* :class:`Trace` -- ``Trace.from_timing(timing_state, program, cfg)`` (what ``Machine.run(trace=...)``
  returns as ``RunResult.trace``); ``records`` (int64[n, REC_N], oldest first), ``total`` (records
  ever written; ``dropped = total - len(records)``), ``rows()`` -> list of dicts (``seq``, ``pc``,
  ``line``, ``text``, ``op``, ``unit``, ``issue``, ``start``, ``end``, ``cycles``, ``reg`` (e.g.
  ``"gp3: 0x0 -> 0x40"`` or ""), ``regs`` (the same as an object: ``{"gp3": [0, 64]}``, ``{}``), ``mem``
  (e.g. ``"VRAM rows 4..7"``), ``hbm`` (e.g.
  ``"read 0x0..+0x1200 (4608 B)"``)); ``filter(pc=(a, b), ops={..}, units={..}, last=N, around=(pc, N))``;
  ``opcode_summary()``; ``unit_busy()``; ``to_perfetto(stats=None) -> dict`` (Chrome Trace Event
  Format: one thread track per unit M/V/S/H/C with complete "X" events in microseconds = cycles/1000,
  a track ``regions`` with the code regions as nested "X" slices (:meth:`Trace.region_slices`) and a counter
  track ``HBM bandwidth`` in GB/s); ``region_slices()`` -> list of dicts (``path``, ``depth``, ``start``,
  ``end``, ``instructions``).
* :func:`render_table`, :func:`render_summary`, :func:`render_utilization` -- rich renderables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from isa.encoding import UNIT_NAMES
from isa.table import BY_OPCODE

from . import bf16
from .timing import (
    MEM_KIND_NAMES,
    RC_END,
    RC_HADDR,
    RC_HBYTES,
    RC_HSPAN,
    RC_ISSUE,
    RC_M1C,
    RC_M1K,
    RC_M1S,
    RC_OP,
    RC_PC,
    RC_RIDX,
    RC_RKIND,
    RC_RNEW,
    RC_ROLD,
    RC_SEQ,
    RC_START,
    RC_UNIT,
    REC_FIELDS,
    REC_N,
    REG_FP,
    REG_KIND_NAMES,
    REG_NONE,
)

__all__ = ["Trace", "render_table", "render_summary", "render_utilization", "UNIT_ALIASES", "parse_units"]

UNIT_LONG = {"M": "matrix", "V": "vector", "S": "scalar", "H": "dma", "C": "control"}
UNIT_ALIASES = {
    **{v: k for k, v in UNIT_LONG.items()},
    **{k: k for k in UNIT_LONG},
    **{k.lower(): k for k in UNIT_LONG},
}
_TID = {u: k + 1 for k, u in enumerate(UNIT_NAMES)}
_REGIONS_TID = len(UNIT_NAMES) + 1  # the track of the code regions, below the units


def parse_units(text: str) -> set[str]:
    """``"dma,matrix"`` / ``"H,M"`` -> {"H", "M"}; ValueError on an unknown name."""
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part not in UNIT_ALIASES:
            raise ValueError(f"unknown unit {part!r} (known: {', '.join(sorted(UNIT_ALIASES))})")
        out.add(UNIT_ALIASES[part])
    return out


def _reg_change(kind: int, idx: int, old: int, new: int) -> dict[str, list[int] | list[float]]:
    """``{"gp3": [old, new]}`` (an FP register's values decoded from bf16), ``{}`` when none was written."""
    if kind == REG_NONE:
        return {}
    name = REG_KIND_NAMES[kind] + (str(idx) if kind <= 3 else "")
    if kind == REG_FP:
        return {name: [float(bf16.decode_scalar(old)), float(bf16.decode_scalar(new))]}
    return {name: [old, new]}


def _reg_text(change: dict) -> str:
    return "; ".join(
        f"{name}: {old:g} -> {new:g}" if isinstance(old, float) else f"{name}: {old:#x} -> {new:#x}"
        for name, (old, new) in change.items()
    )


def _mem_text(rec) -> str:
    parts = []
    for s in range(2):
        k = int(rec[RC_M1K + 3 * s])
        if k == 0:
            continue
        start, cnt = int(rec[RC_M1S + 3 * s]), int(rec[RC_M1C + 3 * s])
        strided = cnt < 0
        cnt = abs(cnt)
        rng = f"{start}" if cnt == 1 else f"{start}..{start + cnt - 1}"
        parts.append(f"{MEM_KIND_NAMES[k]} {rng}{' (strided)' if strided else ''}")
    return "; ".join(parts)


@dataclass
class Trace:
    records: np.ndarray
    total: int
    capacity: int
    program: object = None
    burst_bytes: int = 64
    mode: str = "serial"

    @classmethod
    def from_timing(cls, tm, program=None, cfg=None) -> Trace:
        return cls(
            tm.trace_records(), int(tm.tcount[0]), tm.trace_capacity, program, int(tm.params.burst_bytes), tm.mode
        )

    def __len__(self) -> int:
        return int(self.records.shape[0])

    @property
    def dropped(self) -> int:
        return self.total - len(self)

    def _source(self, pc: int):
        prog = self.program
        src = getattr(prog, "source", None) if prog is not None else None
        if src is not None and 0 <= pc < len(src):
            s = src[pc]
            return getattr(s, "line", None), str(getattr(s, "text", "")).strip()
        return None, ""

    def row(self, rec) -> dict:
        pc, op, unit = int(rec[RC_PC]), int(rec[RC_OP]), int(rec[RC_UNIT])
        line, text = self._source(pc)
        mnem = BY_OPCODE[op].mnemonic if op in BY_OPCODE else f"op{op}"
        hbm = ""
        if mnem.startswith("H_"):
            kind = "write" if mnem == "H_STORE_V" else "read"
            hbm = f"{kind} {int(rec[RC_HADDR]):#x}..+{int(rec[RC_HSPAN]):#x} ({int(rec[RC_HBYTES])} B)"
        regs = _reg_change(int(rec[RC_RKIND]), int(rec[RC_RIDX]), int(rec[RC_ROLD]), int(rec[RC_RNEW]))
        return {
            "seq": int(rec[RC_SEQ]),
            "pc": pc,
            "line": line,
            "text": text or mnem,
            "op": mnem,
            "unit": UNIT_NAMES[unit] if unit >= 0 else "-",
            "issue": int(rec[RC_ISSUE]),
            "start": int(rec[RC_START]),
            "end": int(rec[RC_END]),
            "cycles": int(rec[RC_END] - rec[RC_START]),
            "reg": _reg_text(regs),
            "regs": regs,
            "mem": _mem_text(rec),
            "hbm": hbm,
            "hbm_bytes": int(rec[RC_HBYTES]),
        }

    def rows(self) -> list[dict]:
        return [self.row(r) for r in self.records]

    def filter(self, pc=None, ops=None, units=None, last=None, around=None) -> Trace:
        """A Trace of the selected records. ``pc`` = (a, b) inclusive range; ``ops`` mnemonics; ``units``
        unit letters; ``around`` = (pc, n): n records either side of the last record at ``pc``;
        ``last`` = keep the newest N after the other filters."""
        r = self.records
        keep = np.ones(len(r), dtype=bool)
        if pc is not None:
            a, b = pc
            keep &= (r[:, RC_PC] >= a) & (r[:, RC_PC] <= b)
        if ops:
            codes = [op for op, i in BY_OPCODE.items() if i.mnemonic in set(ops)]
            keep &= np.isin(r[:, RC_OP], codes)
        if units:
            codes = [UNIT_NAMES.index(u) for u in units]
            keep &= np.isin(r[:, RC_UNIT], codes)
        if around is not None:
            apc, n = around
            hits = np.nonzero(r[:, RC_PC] == apc)[0]
            win = np.zeros(len(r), dtype=bool)
            if len(hits):
                k = int(hits[-1])
                win[max(0, k - n) : k + n + 1] = True
            keep &= win
        sel = r[keep]
        if last is not None:
            sel = sel[-int(last) :] if last > 0 else sel[:0]
        return Trace(sel, self.total, self.capacity, self.program, self.burst_bytes, self.mode)

    def opcode_summary(self) -> list[dict]:
        """Per mnemonic: count, cycles charged (Σ end - start) and share of all charged cycles."""
        r = self.records
        total = int((r[:, RC_END] - r[:, RC_START]).sum()) if len(r) else 0
        out: list[dict[str, Any]] = []
        for op in np.unique(r[:, RC_OP]) if len(r) else []:
            m = r[:, RC_OP] == op
            cyc = int((r[m, RC_END] - r[m, RC_START]).sum())
            out.append(
                {
                    "op": BY_OPCODE[int(op)].mnemonic,
                    "count": int(m.sum()),
                    "cycles": cyc,
                    "share": cyc / total if total else 0.0,
                }
            )
        out.sort(key=lambda d: (-d["cycles"], d["op"]))
        return out

    def span(self) -> tuple[int, int]:
        r = self.records
        if not len(r):
            return 0, 0
        return int(r[:, RC_ISSUE].min()), int(r[:, RC_END].max())

    def unit_busy(self) -> dict:
        r = self.records
        out = {}
        for k, u in enumerate(UNIT_NAMES):
            m = r[:, RC_UNIT] == k
            out[u] = int((r[m, RC_END] - r[m, RC_START]).sum())
        return out

    def counter_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """int64 per record: the run's cycle counter (the largest end so far) before and after it retired. The
        counter before the oldest record is 0 when none was dropped, else that record's start (an estimate)."""
        r = self.records
        if not len(r):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        c0 = 0 if self.dropped == 0 else int(r[0, RC_START])
        after = np.maximum.accumulate(np.concatenate([[c0], r[:, RC_END].astype(np.int64)]))
        return after[:-1], after[1:]

    def region_slices(self) -> list[dict]:
        """The code regions of the program over the records: one slice per *run* of a region (consecutive records
        whose pc lies in the region's words), from the cycle counter before its first record to the counter after
        its last (:meth:`counter_steps`). The counter never decreases, so the slices of nested regions nest and
        those of one level never overlap; the slices of a path sum to its inclusive cycles (all records kept).
        Slices of no cycles are left out. Ordered by start, outer before inner."""
        regions = getattr(self.program, "regions", ()) or ()
        before, after = self.counter_steps()
        pcs = self.records[:, RC_PC] if len(self.records) else np.zeros(0, np.int64)
        out = []
        for r in regions:
            inside = np.concatenate([[False], (pcs >= r.first) & (pcs < r.end), [False]])
            edges = np.flatnonzero(inside[1:] != inside[:-1])  # run k: records edges[2k] .. edges[2k+1] - 1
            for a, b in zip(edges[0::2], edges[1::2], strict=True):
                start, end = int(before[a]), int(after[b - 1])
                if end > start:
                    out.append(
                        {"path": r.path, "depth": r.path.count("/"), "start": start, "end": end, "instructions": b - a}
                    )
        out.sort(key=lambda d: (d["start"], -d["end"], d["depth"]))
        return out

    def _region_events(self) -> list[dict]:
        meta = [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": _REGIONS_TID, "args": {"name": "regions"}},
            {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": _REGIONS_TID, "args": {"sort_index": 0}},
        ]
        return meta + [
            {
                "ph": "X",
                "name": s["path"],
                "cat": "region",
                "pid": 1,
                "tid": _REGIONS_TID,
                "ts": s["start"] / 1000.0,
                "dur": (s["end"] - s["start"]) / 1000.0,
                "args": {"path": s["path"], "instructions": int(s["instructions"]), "cycles": s["end"] - s["start"]},
            }
            for s in self.region_slices()
        ]

    def to_perfetto(self, name: str = "plena-sim") -> dict:
        """Chrome Trace Event Format (JSON object form), loadable by ui.perfetto.dev."""
        ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": name}}]
        for u, tid in _TID.items():
            ev.append(
                {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": f"{u} ({UNIT_LONG[u]})"}}
            )
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
        ev += self._region_events()
        hbm_points = []
        for rec in self.records:
            row = self.row(rec)
            unit = row["unit"]
            if unit == "-":
                continue
            args = {"pc": row["pc"], "seq": row["seq"], "text": row["text"]}
            if row["line"] is not None:
                args["line"] = row["line"]
            for k in ("reg", "mem", "hbm"):
                if row[k]:
                    args[k] = row[k]
            ev.append(
                {
                    "ph": "X",
                    "name": row["op"],
                    "cat": UNIT_LONG[unit],
                    "pid": 1,
                    "tid": _TID[unit],
                    "ts": row["start"] / 1000.0,
                    "dur": row["cycles"] / 1000.0,
                    "args": args,
                }
            )
            if unit == "H" and row["cycles"] > 0:
                hbm_points.append((row["start"], row["end"], row["hbm_bytes"] / row["cycles"]))
        for s, e, bw in hbm_points:
            ev.append(
                {
                    "ph": "C",
                    "name": "HBM bandwidth",
                    "pid": 1,
                    "tid": 0,
                    "ts": s / 1000.0,
                    "args": {"GBps": round(bw, 3)},
                }
            )
            ev.append({"ph": "C", "name": "HBM bandwidth", "pid": 1, "tid": 0, "ts": e / 1000.0, "args": {"GBps": 0}})
        return {
            "traceEvents": ev,
            "displayTimeUnit": "ns",
            "otherData": {
                "timing_mode": self.mode,
                "records": len(self),
                "dropped": self.dropped,
                "time_unit": "1 us in the file = 1000 accelerator cycles",
            },
        }


# ------------------------------------------------------------------------------------------ rendering


#: the columns of the trace table: (header, right-justified, shown without ``wide``)
_COLUMNS = (
    ("#", True, False),
    ("pc", True, True),
    ("line", True, True),
    ("instruction", False, True),
    ("unit", False, True),
    ("issue", True, False),
    ("span", True, False),
    ("cycles", True, True),
    ("registers", False, False),
    ("memory", False, False),
    ("changes", False, True),
)


def _cells(r: dict) -> dict:
    mem = "; ".join(x for x in (r["mem"], r["hbm"]) if x)
    return {
        "#": str(r["seq"]),
        "pc": str(r["pc"]),
        "line": "" if r["line"] is None else str(r["line"]),
        "instruction": r["text"],
        "unit": r["unit"],
        "issue": str(r["issue"]),
        "span": f"{r['start']}..{r['end']}",
        "cycles": str(r["cycles"]),
        "registers": r["reg"],
        "memory": mem,
        "changes": "; ".join(x for x in (r["reg"], mem) if x),
    }


def render_table(trace: Trace, title: str | None = None, wide: bool = False, fault: dict | None = None):
    """rich Table of the trace rows, every cell plain text (an asm comment's ``[/h]`` is not markup).

    Narrow (default, readable at 80 columns): pc, line, instruction, unit, cycles and the changes (registers,
    memory); ``wide``: also the sequence number, issue cycle and cycle span, registers and memory apart. No
    cell is truncated: numbers keep their width, text wraps at spaces. ``fault`` (``pc``, ``line``, ``text``,
    ``message``): the faulting instruction (it does not retire), shown as the last row, highlighted."""
    from rich.table import Table
    from rich.text import Text

    cols = [c for c in _COLUMNS if (c[0] not in ("changes",) if wide else c[2])]
    rows = [_cells(r) for r in trace.rows()]
    if fault is not None:
        rows.append(_fault_cells(fault))
    t = Table(title=title or f"trace ({len(trace)} of {trace.total} instructions)", show_lines=False)
    for name, right, _narrow in cols:
        wraps = name in ("instruction", "registers", "memory", "changes")
        # a number keeps its width; text wraps between words, never inside one (a mnemonic)
        widths = [len(name)] + [max(map(len, r[name].split(" "))) if wraps else len(r[name]) for r in rows]
        t.add_column(
            name, justify="right" if right else "left", min_width=max(widths), no_wrap=not wraps, overflow="fold"
        )
    for k, r in enumerate(rows):
        style = "bold red" if fault is not None and k == len(rows) - 1 else None
        t.add_row(*(Text(r[name]) for name, _r, _n in cols), style=style)
    return t


def _fault_cells(fault: dict) -> dict:
    line = fault.get("line")
    cells = dict.fromkeys(("#", "issue", "span", "cycles", "registers", "unit"), "-")
    cells.update(
        pc=str(fault.get("pc", "")),
        line="" if line is None else str(line),
        instruction=str(fault.get("text") or ""),
        memory=f"FAULT: {fault.get('message', '')}",
    )
    cells["changes"] = cells["memory"]
    return cells


def render_summary(trace: Trace):
    from rich.table import Table

    t = Table(title="per-opcode summary")
    for col in ("opcode", "count", "cycles", "share"):
        t.add_column(col, justify="left" if col == "opcode" else "right")
    for d in trace.opcode_summary():
        t.add_row(d["op"], str(d["count"]), str(d["cycles"]), f"{100 * d['share']:.1f}%")
    return t


def render_utilization(busy: dict, cycles: int, width: int = 30):
    """One bar per unit: busy cycles / total cycles."""
    from rich.table import Table

    t = Table(title=f"unit utilization ({cycles} cycles)")
    for col in ("unit", "busy", "utilization", ""):
        t.add_column(col)
    for u in UNIT_NAMES:
        b = int(busy.get(u, 0))
        frac = b / cycles if cycles else 0.0
        n = int(round(min(frac, 1.0) * width))
        t.add_row(f"{u} ({UNIT_LONG[u]})", str(b), f"{100 * frac:5.1f}%", "█" * n + "·" * (width - n))
    return t


_ = (REC_FIELDS, REC_N)
