"""The results database of a sweep: one SQLite file, one row per point (``points``), stored as points finish.

Why SQLite (stdlib) in WAL mode rather than DuckDB for the live table: a sweep writes from one process while
users read the file from others (``sweep report`` mid-sweep, a notebook); SQLite's write-ahead log lets any
number of readers see every committed point while the writer goes on, and each point is one atomic commit,
so a sweep killed at any moment loses only the points that were running. DuckDB locks a database file to one
writing process (readers in other processes cannot open it meanwhile); it is used for the analytical side
(``sweep report``'s exports to CSV / Parquet).

Statuses: ``pending`` (expanded, not started), ``running`` (a worker started it; ``attempts`` counts starts),
``filtered`` (dropped before running, ``message`` = the reason), and the finished verdicts ``PASS``,
``mismatch``, ``fault``, ``plan error``, ``crashed`` (the run raised, or its worker died too often).
A resumed sweep skips finished points and runs the rest (pending, running = interrupted, crashed).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from isa.safetext import json_text

__all__ = ["FINISHED", "RERUN", "COLUMNS", "Store", "open_readonly", "rows"]

#: verdicts of a finished point (a resumed sweep skips these; ``crashed`` is re-run)
FINISHED = ("PASS", "timed", "mismatch", "fault", "plan error")
#: the statuses of a point that ran as it should: judged PASS, or a timing-only run to the end (``timed``)
SUCCEEDED = ("PASS", "timed")
RERUN = ("pending", "running", "crashed")

#: column -> SQL type; JSON columns hold text
COLUMNS: dict[str, str] = {
    "id": "TEXT PRIMARY KEY",
    "ord": "INTEGER",  # the point's place in the spec's expansion
    "sweep": "TEXT",
    "status": "TEXT",
    "message": "TEXT",
    "attempts": "INTEGER",  # times a worker started it
    "workload": "TEXT",
    "testbench": "TEXT",
    "case_id": "TEXT",
    "params": "TEXT",  # JSON: the --set parameters
    "preset": "TEXT",
    "set_hw": "TEXT",  # JSON: the --set-hw keys (derived ones included)
    "config": "TEXT",  # JSON: the full effective hardware configuration
    "timing": "TEXT",
    "seed": "INTEGER",
    "MLEN": "INTEGER",
    "VLEN": "INTEGER",
    "BLEN": "INTEGER",
    "HLEN": "INTEGER",
    "BROADCAST_AMOUNT": "INTEGER",
    "mac_array": "INTEGER",  # BLEN x MLEN: MACs per cycle of the array (the cost proxy)
    "sram_bytes": "INTEGER",  # total on-chip SRAM bytes (VRAM + MRAM + FP + INT SRAM)
    "cycles": "INTEGER",
    "instructions": "INTEGER",
    "macs": "INTEGER",
    "mac_utilization": "REAL",  # MACs / (cycles x BLEN x MLEN)
    "busy": "TEXT",  # JSON: busy cycles per resource
    "stalls": "TEXT",  # JSON: stall cycles per reason
    "regions": "TEXT",  # JSON: the run's regions (path, instructions, cycles ...)
    "result": "TEXT",  # JSON: the run's summary (checks' verdicts, error)
    "wall_s": "REAL",
    "peak_rss_mib": "REAL",
    "worker": "TEXT",
    "code_version": "TEXT",
    "started_at": "REAL",
    "finished_at": "REAL",
}
JSON_COLUMNS = ("params", "set_hw", "config", "busy", "stalls", "regions", "result")


def _connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
    con = sqlite3.connect(uri, uri=True, timeout=60.0, isolation_level=None, check_same_thread=False)
    con.row_factory = sqlite3.Row
    if not readonly:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
    return con


class Store:
    """The writer side (the sweep's driver process; its threads share one connection under a lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.con = _connect(self.path)
            cols = ", ".join(f'"{k}" {t}' for k, t in COLUMNS.items())
            self.con.execute(f"CREATE TABLE IF NOT EXISTS points ({cols})")
            have = {r[1] for r in self.con.execute("PRAGMA table_info(points)")}
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{path}: not a sweep results database ({exc})") from None
        missing = [k for k in COLUMNS if k not in have]
        if missing:
            raise ValueError(f"{path}: its points table lacks columns {missing} (written by another version)")

    def close(self) -> None:
        self.con.close()

    def _write(self, sql: str, args: Sequence[Any], many: bool = False) -> None:
        """One transaction: ``sql`` with ``args`` (``many``: a list of argument rows)."""
        with self._lock:
            self.con.execute("BEGIN IMMEDIATE")
            try:
                if many:
                    self.con.executemany(sql, args)
                else:
                    self.con.execute(sql, args)
            except BaseException:
                self.con.execute("ROLLBACK")
                raise
            self.con.execute("COMMIT")

    def statuses(self) -> dict[str, str]:
        with self._lock:
            return {r["id"]: r["status"] for r in self.con.execute("SELECT id, status FROM points")}

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Insert points not stored yet (a resumed sweep keeps what it has)."""
        rows = list(rows)
        if not rows:
            return
        keys = list(rows[0])
        sql = f"INSERT OR IGNORE INTO points ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})"
        self._write(sql, [[_sql(r[k], k) for k in keys] for r in rows], many=True)

    def started(self, point_id: str, worker: str) -> None:
        """A worker started the point (an announcement that arrives after its result keeps the verdict)."""
        done = ", ".join(f"'{v}'" for v in FINISHED + ("crashed",))
        self._write(
            "UPDATE points SET attempts = attempts + 1, worker = ?, started_at = ?, "
            f"status = CASE WHEN status IN ({done}) THEN status ELSE 'running' END WHERE id = ?",
            (worker, time.time(), point_id),
        )

    def finish(self, point_id: str, values: Mapping[str, Any]) -> None:
        keys = [k for k in values if k in COLUMNS and k != "id"]
        sets = ", ".join(f'"{k}" = ?' for k in keys)
        self._write(f"UPDATE points SET {sets} WHERE id = ?", [*(_sql(values[k], k) for k in keys), point_id])


def _sql(v: Any, key: str) -> Any:
    return json_text(v, sort_keys=True) if key in JSON_COLUMNS and v is not None else v


def open_readonly(path: str | Path) -> sqlite3.Connection:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: no such results database")
    try:
        con = _connect(p, readonly=True)
        con.execute("SELECT id FROM points LIMIT 1")
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{path}: not a sweep results database ({exc})") from None
    return con


def rows(path: str | Path, where: str = "", args: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Every point (in expansion order) as a dict, JSON columns decoded."""
    con = open_readonly(path)
    try:
        cur = con.execute(f"SELECT * FROM points {where} ORDER BY ord", args)
        out = []
        for r in cur:
            d = dict(r)
            for k in JSON_COLUMNS:
                if d.get(k) is not None:
                    d[k] = json.loads(d[k])
            out.append(d)
        return out
    finally:
        con.close()
