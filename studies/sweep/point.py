"""One point, run on a worker: exactly ``plena-sim run ... --json`` (the point's :class:`~studies.sweep.spec.Point`
as a :class:`~studies.testbench_run.CaseRequest`, run by :func:`studies.testbench_run.run_json`, its document
read back as the command prints it), turned into the point's row.

Verdict and message as the command gives them (its exit code and its error line): PASS (exit 0), mismatch
(1: the failing checks, or the run's error), fault (3: the fault's message), plan error (2: a request the
library refuses or an input error of the floors below, :func:`studies.errors.input_error_types`, or the host's
memory running out; the message is the command's error line), crashed (anything else: a generator's invalid
instruction, an internal error, a stop request, with the line the command prints). The peak RSS is the
process's high-water mark over the point (Linux: reset before the run through ``/proc/self/clear_refs``;
elsewhere the process's maximum so far).
"""

from __future__ import annotations

import os
import resource
import socket
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..documents import as_printed
from ..errors import input_error_types
from .spec import Point

if TYPE_CHECKING:
    from plena_sim.routing import Routing

__all__ = ["run_point", "derived_columns", "STARTED_TOPIC"]

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


def _message(status: str, doc: dict[str, Any]) -> str:
    if status in ("PASS", "timed"):
        return ""
    if doc.get("fault"):
        return str(doc["fault"].get("message", doc["fault"]))
    if doc.get("error"):
        return str(doc["error"])
    failing = [c["name"] for c in doc.get("checks", []) if not c.get("passed")]
    return "failing checks: " + ", ".join(failing)


def _last_line(text: str) -> str:
    """The last non-blank line of an error the command prints (``error: `` dropped, as the row keeps it)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1].removeprefix("error: ") if lines else ""


def _refused(exc: BaseException) -> tuple[str, str] | None:
    """``(verdict, message)`` of a run that raised, as the command reports it, or None for a crash of the run
    itself (the point is then ``crashed`` with the exception)."""
    from isa import AssemblerError
    from plena_sim.config import out_of_memory_message
    from plena_sim.errors import RunStopped
    from plena_sim.faults import SimFault
    from programs.asm import GeneratorError

    if isinstance(exc, AssemblerError):  # the count, then the located diagnostics: the last line is the message
        count = f"error: {exc.count} assembler error" + ("s" if exc.count != 1 else "")
        return "plan error", _last_line("\n".join([count, *exc.lines()]))
    if isinstance(exc, input_error_types()):
        return "plan error", _last_line(f"error: {exc}")
    if isinstance(exc, MemoryError):
        return "plan error", _last_line(f"error: {out_of_memory_message(exc)}")
    if isinstance(exc, SimFault):
        return "fault", str(exc)
    if isinstance(exc, GeneratorError):
        return "crashed", _last_line(f"generator error: {exc.generator}: {exc.detail} (bad value: {exc.value!r})")
    if isinstance(exc, (KeyboardInterrupt, RunStopped)):
        line = getattr(exc, "line", None)
        if callable(line):  # the command line's own stop requests (SIGINT, SIGTERM, --timeout) say what they were
            return "crashed", str(line())
        retired = getattr(exc, "retired", None)
        return "crashed", "interrupted (SIGINT)" + ("" if retired is None else f", {retired:,} instructions retired")
    if isinstance(exc, Exception):
        return "crashed", _last_line(
            f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback; please report it)"
        )
    return None


def _run(p: Point) -> dict[str, Any]:
    """The point's verdict, message and metrics (raises only what the command would not survive either)."""
    from ..testbench_run import run_json

    try:
        ran = run_json(p.request(), timing=p.timing, functional=not p.timing_only, routing=_routing(p.routing))
    except BaseException as exc:  # noqa: BLE001 - classified as the command's error boundary does
        verdict = _refused(exc)
        if verdict is None:
            raise
        status, message = verdict
        if status != "fault":
            return {"status": status, "message": message}
        doc = {"error": message}  # the command's one JSON object for an error raised mid-run
        return {"status": status, "message": message, **_metrics(doc)}
    doc = as_printed(ran.doc)
    rep = ran.report
    status = "PASS" if rep.passed else "fault" if rep.fault is not None else "mismatch"
    if status == "PASS" and rep.verdict != "PASS":  # timing-only: ran to the end, nothing judged
        status = "timed"
    return {"status": status, "message": _message(status, doc), **_metrics(doc)}


def _routing(spec: str | None) -> Routing | None:
    from plena_sim.routing import load_routing

    return None if spec is None else load_routing(spec)


def run_point(point: dict[str, Any]) -> dict[str, Any]:
    """Run one point and return its row's values (never raises: a failure is the ``crashed`` verdict)."""
    p = Point.from_dict(point)
    worker = _announce(p.id)
    reset = _reset_peak_rss()
    t0 = time.perf_counter()
    try:
        values = _run(p)
    except BaseException as exc:  # noqa: BLE001 - a point never takes its worker down with it
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return {"status": "crashed", "message": tb, "wall_s": time.perf_counter() - t0, "worker": worker}
    wall = time.perf_counter() - t0
    values.update(wall_s=wall, peak_rss_mib=_peak_rss_mib(reset), worker=worker)
    return values
