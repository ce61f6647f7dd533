"""One point, run on a worker: exactly ``plena-sim run ... --json`` (the ``run`` command's parser and function
behind the CLI's error boundary, :func:`plena_cli.boundary.run_cli`, in-process, its output captured), turned
into the point's row.

Verdict from the exit code: 0 PASS, 1 mismatch, 3 fault, 2 plan error (the message is the CLI's error line),
anything else or an exception: crashed (with the exception). The peak RSS is the process's high-water mark
over the point (Linux: reset before the run through ``/proc/self/clear_refs``; elsewhere the process's
maximum so far).
"""

from __future__ import annotations

import io
import json
import os
import resource
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from .. import testbench_commands
from ..boundary import run_cli
from .spec import Point

__all__ = ["run_point", "derived_columns", "VERDICTS"]

VERDICTS = {0: "PASS", 1: "mismatch", 2: "plan error", 3: "fault"}
STARTED_TOPIC = "plena-sweep-started"


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss_mib(reset: bool) -> float:
    if reset:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
        except OSError:
            pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _announce(point_id: str) -> str:
    """Tell the sweep's driver that this worker started the point (when running under Dask)."""
    where = f"{socket.gethostname()}:{os.getpid()}"
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # not inside a Dask worker (a direct call)
        return where
    where = f"{worker.address} pid {os.getpid()}"
    worker.log_event(STARTED_TOPIC, {"id": point_id, "where": where})  # (Dask adds "worker")
    return where


def derived_columns(cfg: dict[str, Any]) -> dict[str, int]:
    """The hardware cost proxies of a configuration: the MAC array (BLEN x MLEN) and the on-chip SRAM bytes
    (VRAM rows x VLEN bf16, MRAM rows x MLEN bf16, FP SRAM bf16 words, INT SRAM 32-bit words)."""
    sram = (
        2 * cfg["VECTOR_SRAM_SIZE"] * cfg["VLEN"]
        + 2 * cfg["MATRIX_SRAM_SIZE"] * cfg["MLEN"]
        + 2 * cfg["FP_SRAM_SIZE"]
        + 4 * cfg["INT_SRAM_SIZE"]
    )
    return {"mac_array": cfg["BLEN"] * cfg["MLEN"], "sram_bytes": sram}


def _metrics(doc: dict[str, Any]) -> dict[str, Any]:
    stats = doc.get("stats") or {}
    cycles = int(doc.get("cycles") or 0)
    hw = doc.get("hardware") or {}
    macs = int(stats.get("matrix_macs", 0))
    peak = int(hw.get("BLEN", 0)) * int(hw.get("MLEN", 0))
    stalls = {k: int(v) for k, v in (stats.get("overlap") or {}).items() if k.startswith("stall_")}
    failing = [c["name"] for c in doc.get("checks", []) if not c.get("passed")]
    return {
        "cycles": cycles,
        "instructions": int(doc.get("instructions") or 0),
        "macs": macs,
        "mac_utilization": macs / (cycles * peak) if cycles and peak else 0.0,
        "busy": stats.get("unit_busy_cycles"),
        "stalls": stats.get("stalls", stalls),
        "regions": doc.get("regions", stats.get("regions")),
        "result": {"passed": doc.get("passed"), "failing_checks": failing, "error": doc.get("error")},
    }


def _message(code: int, doc: dict[str, Any] | None, err_text: str) -> str:
    if code == 0:
        return ""
    if doc is not None:
        if doc.get("fault"):
            return str(doc["fault"].get("message", doc["fault"]))
        if doc.get("error"):
            return str(doc["error"])
        failing = [c["name"] for c in doc.get("checks", []) if not c.get("passed")]
        return "failing checks: " + ", ".join(failing)
    lines = [ln.strip() for ln in err_text.splitlines() if ln.strip()]
    return lines[-1].removeprefix("error: ") if lines else f"exit code {code}"


def run_point(point: dict[str, Any]) -> dict[str, Any]:
    """Run one point and return its row's values (never raises: a failure is the ``crashed`` verdict)."""
    p = Point.from_dict(point)
    worker = _announce(p.id)
    reset = _reset_peak_rss()
    t0 = time.perf_counter()
    out, err = io.StringIO(), io.StringIO()
    try:
        code = run_cli(p.argv(), (testbench_commands,), files=(out, err))
    except BaseException as exc:  # noqa: BLE001 - a point never takes its worker down with it
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return {"status": "crashed", "message": tb, "wall_s": time.perf_counter() - t0, "worker": worker}
    wall = time.perf_counter() - t0
    text = out.getvalue().strip()
    doc = None
    if code in (0, 1, 3) and text:
        try:
            doc = json.loads(text.splitlines()[-1])
        except json.JSONDecodeError:
            doc = None
    status = VERDICTS.get(code, "crashed") if (doc is not None or code == 2) else "crashed"
    values: dict[str, Any] = {"status": status, "message": _message(code, doc, err.getvalue())}
    if doc is not None:
        values.update(_metrics(doc))
    values.update(wall_s=wall, peak_rss_mib=_peak_rss_mib(reset), worker=worker)
    return values
