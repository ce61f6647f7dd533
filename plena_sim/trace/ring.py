"""Execution traces: decode the Numba core's trace ring, filter, summarise, export, render.

One job: turn the int64 trace records written inside the run loop (layout
:data:`plena_sim.timing.scoreboard.REC_FIELDS`, one record per retired instruction, newest ``capacity`` kept)
into rows a human or a tool can read.

* :class:`Trace` -- ``Trace.from_timing(timing_state, program, cfg)`` (what ``Machine.run(trace=...)``
  returns as ``RunResult.trace``); ``records`` (int64[n, REC_N], oldest first), ``total`` (records
  ever written; ``dropped = total - len(records)``), ``rows()`` -> list of dicts: ``seq``, ``pc``, ``line``,
  ``text``, ``op``, ``unit``, ``eligible`` (the cycle it could have issued: the previous issue + 1), ``issue``,
  ``start``, ``end``, ``cycles``, ``stall`` (``{"cycles", "reason"}``: ``issue - eligible`` and the reason of
  :data:`~plena_sim.timing.rtl.STALL_REASONS` that took most of it, ``"none"``), ``regs`` (``{"gp3": [0, 64]}``,
  ``{}``; ``reg`` the same as text), ``mem`` (every range read or written: ``{"space": vram|mram|fpsram|intsram|hbm,
  "op": read|write, "start", "count", "unit": row|element|word|byte}``, ``"step"`` when strided; the HBM access
  adds ``rows``, ``pitch``, ``row_bytes``, ``moved``; ``mem_text`` / ``hbm`` the same as text), ``values`` (the
  leading values of the first VRAM row / FP SRAM / INT SRAM range written: ``{"space", "start", "values"}``, or
  None), ``hbm_bytes``; ``filter(pc=(a, b), ops={..}, units={..}, last=N, around=(pc, N), touching={space: (start,
  length)})``; ``opcode_summary()``; ``unit_busy()``; ``to_perfetto(name, fault=None) -> dict`` (Chrome Trace
  Event Format: one thread track per unit M/V/S/H/C with complete "X" events in microseconds = cycles/1000,
  a track ``regions`` with the code regions as nested "X" slices (:meth:`Trace.region_slices`), a track ``stalls``
  (one slice per stalled instruction), a fault marker and a counter track ``HBM bandwidth`` in GB/s);
  ``region_slices()`` -> list of dicts (``path``, ``depth``, ``start``, ``end``, ``instructions``).
* :func:`render_table`, :func:`render_summary`, :func:`render_utilization` -- rich renderables.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from isa.encoding import UNIT_NAMES
from isa.table import BY_OPCODE

from ..numerics import bf16
from ..timing.rtl import STALL_REASONS
from ..timing.scoreboard import (
    MEM_INTW,
    MEM_KIND_NAMES,
    MEM_MTILE,
    MEM_NONE,
    MEM_SLOT_N,
    MEM_SLOTS,
    MEM_SPACES,
    MEM_VROW,
    MS_COUNT,
    MS_OP,
    MS_SPACE,
    MS_START,
    MS_STEP,
    RC_END,
    RC_HADDR,
    RC_HBYTES,
    RC_HELEM,
    RC_HPITCH,
    RC_HROWS,
    RC_ISSUE,
    RC_MEM,
    RC_MEM_MORE,
    RC_OP,
    RC_PC,
    RC_RIDX,
    RC_RKIND,
    RC_RNEW,
    RC_ROLD,
    RC_SEQ,
    RC_STALL,
    RC_STALL_REASON,
    RC_START,
    RC_UNIT,
    RC_VAL,
    RC_VCOUNT,
    RC_VSPACE,
    REG_FP,
    REG_KIND_NAMES,
    REG_NONE,
    TC_M,
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


#: the unit of each memory space in the trace JSON (``mem[].unit``)
_SPACE_UNITS = {"vram": "row", "mram": "element", "fpsram": "word", "intsram": "word", "hbm": "byte"}
_OPS = ("read", "write")
#: short stall reasons of the trace table
_STALL_SHORT = {"unit_busy": "unit", "operand_not_ready": "RAW", "write_after_read": "WAR", "recovery": "recovery"}


def _slots(rec):
    """(kind, op, start, count, step) of each used memory slot of a record."""
    out = []
    for k in range(MEM_SLOTS):
        base = RC_MEM + MEM_SLOT_N * k
        kind = int(rec[base + MS_SPACE])
        if kind != MEM_NONE:
            fields = (MS_OP, MS_START, MS_COUNT, MS_STEP)
            out.append((kind, *(int(rec[base + f]) for f in fields)))
    return out


def _hbm_access(rec, mnemonic: str) -> dict | None:
    """The HBM bytes an H_* touched: ``{"space": "hbm", "op", "start", "count" (span), "unit": "byte", "rows",
    "pitch", "row_bytes", "moved"}`` (None for other instructions)."""
    if not mnemonic.startswith("H_"):
        return None
    rows, pitch, elem = int(rec[RC_HROWS]), int(rec[RC_HPITCH]), int(rec[RC_HELEM])
    return {
        "space": "hbm",
        "op": "write" if mnemonic == "H_STORE_V" else "read",
        "start": int(rec[RC_HADDR]),
        "count": (rows - 1) * pitch + elem if rows else 0,
        "unit": "byte",
        "rows": rows,
        "pitch": pitch,
        "row_bytes": elem,
        "moved": int(rec[RC_HBYTES]),
    }


def _mem_objects(rec, mnemonic: str, tile_elems: int) -> list[dict]:
    """The trace JSON ``mem`` list: every SRAM range read or written (reads first), then the HBM access."""
    out = []
    for kind, op, start, count, step in _slots(rec):
        scale = tile_elems if kind == MEM_MTILE else 1
        space = MEM_SPACES[kind]
        obj = {"space": space, "op": _OPS[op], "start": start * scale, "count": count * scale}
        obj["unit"] = _SPACE_UNITS[space]
        if step != 1:
            obj["step"] = step * scale
        out.append(obj)
    hbm = _hbm_access(rec, mnemonic)
    if hbm is not None:
        out.append(hbm)
    return out


def _values(rec) -> dict | None:
    """The leading values the instruction wrote: ``{"space", "start", "values"}`` (bf16 decoded; INT SRAM as
    integers), None when it wrote no VRAM row / FP SRAM / INT SRAM word."""
    kind, n = int(rec[RC_VSPACE]), int(rec[RC_VCOUNT])
    if kind == MEM_NONE:
        return None
    raw = [int(v) for v in rec[RC_VAL : RC_VAL + n]]
    vals: list = raw if kind == MEM_INTW else [float(bf16.decode_scalar(v)) for v in raw]
    start = next(s for k, op, s, _c, _st in _slots(rec) if k == kind and op == 1)
    return {"space": MEM_SPACES[kind], "start": start, "values": vals}


def _range_text(kind: int, start: int, count: int, step: int) -> str:
    name = MEM_KIND_NAMES[kind]
    if count == 1:
        return f"{name[:-1] if name.endswith('s') else name} {start}"
    last = start + (count - 1) * step
    return f"{name} {start}..{last}" + (f" step {step}" if step != 1 else "")


def _mem_text(rec, values: dict | None) -> str:
    """``"read VRAM row 4; write VRAM rows 16..19 = 1.5, 2, 0.25, -1, ..."`` (the values after the first range of their
    space written)."""
    parts, shown = [], False
    for kind, op, start, count, step in dict.fromkeys(_slots(rec)):  # a range read twice is shown once
        text = f"{_OPS[op]} {_range_text(kind, start, count, step)}"
        if op == 1 and values is not None and not shown and MEM_SPACES[kind] == values["space"]:
            shown = True
            text += " = " + ", ".join(f"{v:g}" if isinstance(v, float) else f"{v:#x}" for v in values["values"])
            text += ", ..." if kind == MEM_VROW else ""  # a row holds more (ASCII: no truncation mark)
        parts.append(text)
    if int(rec[RC_MEM_MORE]):
        parts.append(f"+{int(rec[RC_MEM_MORE])} more ranges")
    return "; ".join(parts)


def _hbm_text(hbm: dict | None) -> str:
    if hbm is None:
        return ""
    rows = f"; {hbm['rows']} rows of {hbm['row_bytes']} B every {hbm['pitch']} B" if hbm["rows"] > 1 else ""
    return f"{hbm['op']} HBM {hbm['start']:#x}..+{hbm['count']:#x} ({hbm['moved']} B moved{rows})"


def _stall(rec) -> dict:
    cycles = int(rec[RC_STALL])
    return {"cycles": cycles, "reason": STALL_REASONS[int(rec[RC_STALL_REASON])] if cycles else "none"}


def _stall_text(stall: dict) -> str:
    if not stall["cycles"]:
        return ""
    reason = stall["reason"]
    return f"{stall['cycles']} {_STALL_SHORT.get(reason, reason.removeprefix('hazard_'))}"


def _strided_hits(first, count, step, start: int, length: int) -> np.ndarray:
    """Per range ``first + k * step`` (k < count): whether some index lies in ``[start, start + length)``."""
    step = np.maximum(step, 1)
    k0 = np.maximum(0, -((first - start) // step))  # the first k with first + k * step >= start (ceil division)
    return (count > 0) & (k0 < count) & (first + k0 * step < start + length)


def _hbm_hits(r: np.ndarray, start: int, length: int) -> np.ndarray:
    """Per record: whether its HBM rows (``addr + k * pitch``, ``elem`` bytes each, k < rows) meet the byte range."""
    addr, rows, pitch, elem = (r[:, c] for c in (RC_HADDR, RC_HROWS, RC_HPITCH, RC_HELEM))
    rows = np.where(pitch > 0, rows, np.minimum(rows, 1))  # pitch 0: every row at addr
    pitch = np.maximum(pitch, 1)
    k0 = np.maximum(0, (start - elem - addr) // pitch + 1)  # the first row whose end is past ``start``
    return (rows > 0) & (k0 < rows) & (addr + k0 * pitch < start + length)


@dataclass
class Trace:
    records: np.ndarray
    total: int
    capacity: int
    program: object = None
    burst_bytes: int = 64
    mode: str = "serial"
    tile_elems: int = 1  # MRAM elements per tile (MLEN**2): the unit of --mram and of mem[] of MRAM

    @classmethod
    def from_timing(cls, tm, program=None, cfg=None) -> Trace:
        records, total, burst = tm.trace_records(), int(tm.tcount[0]), int(tm.params.burst_bytes)
        return cls(records, total, tm.trace_capacity, program, burst, tm.mode, int(tm.cv[TC_M]) ** 2)

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
        regs = _reg_change(int(rec[RC_RKIND]), int(rec[RC_RIDX]), int(rec[RC_ROLD]), int(rec[RC_RNEW]))
        values, hbm, stall = _values(rec), _hbm_access(rec, mnem), _stall(rec)
        return {
            "seq": int(rec[RC_SEQ]),
            "pc": pc,
            "line": line,
            "text": text or mnem,
            "op": mnem,
            "unit": UNIT_NAMES[unit] if unit >= 0 else "-",
            "eligible": int(rec[RC_ISSUE]) - stall["cycles"],
            "issue": int(rec[RC_ISSUE]),
            "start": int(rec[RC_START]),
            "end": int(rec[RC_END]),
            "cycles": int(rec[RC_END] - rec[RC_START]),
            "stall": stall,
            "reg": _reg_text(regs),
            "regs": regs,
            "mem": _mem_objects(rec, mnem, self.tile_elems),
            "mem_text": _mem_text(rec, values),
            "values": values,
            "hbm": _hbm_text(hbm),
            "hbm_bytes": int(rec[RC_HBYTES]),
        }

    def rows(self) -> list[dict]:
        return [self.row(r) for r in self.records]

    def filter(self, pc=None, ops=None, units=None, last=None, around=None, touching=None) -> Trace:
        """A Trace of the selected records. ``pc`` = (a, b) inclusive range; ``ops`` mnemonics; ``units``
        unit letters; ``around`` = (pc, n): n records either side of the last record at ``pc``; ``touching`` =
        {space: (start, length)} (spaces ``vram`` rows, ``mram`` elements, ``fpsram`` / ``intsram`` words,
        ``hbm`` bytes): records whose reads or writes intersect any of them; ``last`` = keep the newest N after
        the other filters."""
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
            keep &= self._around(*around)
        if touching:
            keep &= self._touching(touching)
        sel = r[keep]
        if last is not None:
            sel = sel[-int(last) :] if last > 0 else sel[:0]
        return replace(self, records=sel)

    def _around(self, apc: int, n: int) -> np.ndarray:
        r = self.records
        hits = np.nonzero(r[:, RC_PC] == apc)[0]
        win = np.zeros(len(r), dtype=bool)
        if len(hits):
            k = int(hits[-1])
            win[max(0, k - n) : k + n + 1] = True
        return win

    def _touching(self, ranges: dict) -> np.ndarray:
        """Records of which some read or write intersects one of ``ranges`` ({space: (start, length)})."""
        r = self.records
        hit = np.zeros(len(r), dtype=bool)
        for space, (start, length) in ranges.items():
            if space == "hbm":
                hit |= _hbm_hits(r, start, length)
                continue
            kind = MEM_SPACES.index(space)
            if kind == MEM_MTILE:  # elements -> the tiles holding them
                start, length = (
                    start // self.tile_elems,
                    (start + length - 1) // self.tile_elems - start // self.tile_elems + 1,
                )
            for k in range(MEM_SLOTS):
                base = RC_MEM + MEM_SLOT_N * k
                first, count, step = r[:, base + MS_START], r[:, base + MS_COUNT], r[:, base + MS_STEP]
                hit |= (r[:, base + MS_SPACE] == kind) & _strided_hits(first, count, step, start, length)
        return hit

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

    def to_perfetto(self, name: str = "plena-sim", fault: dict | None = None) -> dict:
        """Chrome Trace Event Format (JSON object form), loadable by ui.perfetto.dev. Besides the unit, region and
        bandwidth tracks: a track ``stalls`` with one slice per stalled instruction (from the cycle it could have
        issued to its issue, named by the reason) and, with ``fault`` (``pc``, ``line``, ``text``, ``rule``,
        ``message``, ``cycle``), a global instant marker where the run faulted."""
        ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": name}}]
        stalls: list[dict] = []
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
            for k, key in (("reg", "reg"), ("mem", "mem_text"), ("hbm", "hbm")):
                if row[key]:
                    args[k] = row[key]
            if row["stall"]["cycles"]:
                args["stall"] = row["stall"]
                stalls.append(row)
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
        ev += _stall_events(stalls)
        if fault is not None:
            ev.append(_fault_event(fault, self.span()[1]))
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


_STALLS_TID = _REGIONS_TID + 1  # the track of the stalls, below the regions


def _stall_events(rows: list[dict]) -> list[dict]:
    """The ``stalls`` track: one slice per stalled instruction, [eligible, issue), named by its reason."""
    if not rows:
        return []
    meta = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": _STALLS_TID, "args": {"name": "stalls"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": _STALLS_TID, "args": {"sort_index": _STALLS_TID}},
    ]
    return meta + [
        {
            "ph": "X",
            "name": f"stall: {r['stall']['reason']}",
            "cat": "stall",
            "pid": 1,
            "tid": _STALLS_TID,
            "ts": r["eligible"] / 1000.0,
            "dur": r["stall"]["cycles"] / 1000.0,
            "args": {"pc": r["pc"], "seq": r["seq"], "text": r["text"], **r["stall"]},
        }
        for r in rows
    ]


def _fault_event(fault: dict, last_cycle: int) -> dict:
    """A global instant marker at the cycle the run faulted (``fault["cycle"]``, else the last record's end)."""
    cycle = int(fault.get("cycle", last_cycle))
    args = {k: fault[k] for k in ("pc", "line", "text", "rule", "message") if fault.get(k) is not None}
    label = f"FAULT {fault.get('rule', '')}".strip()
    return {"ph": "i", "s": "g", "name": label, "cat": "fault", "pid": 1, "tid": 0, "ts": cycle / 1000.0, "args": args}


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
    ("stall", True, True),
    ("registers", False, False),
    ("memory", False, False),
    ("changes", False, True),
)


def _cells(r: dict) -> dict:
    mem = "; ".join(x for x in (r["mem_text"], r["hbm"]) if x)
    return {
        "#": str(r["seq"]),
        "pc": str(r["pc"]),
        "line": "" if r["line"] is None else str(r["line"]),
        "instruction": r["text"],
        "unit": r["unit"],
        "issue": str(r["issue"]),
        "span": f"{r['start']}..{r['end']}",
        "cycles": str(r["cycles"]),
        "stall": _stall_text(r["stall"]),
        "registers": r["reg"],
        "memory": mem,
        "changes": "; ".join(x for x in (r["reg"], mem) if x),
    }


def render_table(trace: Trace, title: str | None = None, wide: bool = False, fault: dict | None = None):
    """rich Table of the trace rows, every cell plain text (an asm comment's ``[/h]`` is not markup).

    Narrow (default, readable at 80 columns): pc, line, instruction, unit, cycles, stall (cycles waited before
    issue and the main reason; shown when some row stalled) and the changes (registers, memory ranges read and
    written, the leading values written); ``wide``: also the sequence number, issue cycle and cycle span,
    registers and memory apart. No
    cell is truncated: numbers keep their width, text wraps at spaces. ``fault`` (``pc``, ``line``, ``text``,
    ``message``): the faulting instruction (it does not retire), shown as the last row, highlighted."""
    from rich.table import Table
    from rich.text import Text

    rows = [_cells(r) for r in trace.rows()]
    stalled = any(r["stall"] for r in rows)
    cols = [c for c in _COLUMNS if (c[0] != "changes" if wide else c[2]) and (stalled or c[0] != "stall")]
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
    cells = dict.fromkeys(("#", "issue", "span", "cycles", "stall", "registers", "unit"), "-")
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
