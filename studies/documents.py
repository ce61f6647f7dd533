"""The JSON document of one judged testbench run: what ``plena-sim run --json`` prints and ``run --save`` writes
as ``result.json`` (:func:`result_json`), the fault of a run (:func:`fault_json`), the primary check's tolerance
(:func:`tolerance_info`), and the document as its JSON text reads back (:func:`as_printed`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from isa.safetext import json_text

if TYPE_CHECKING:
    from plena_sim.config import HardwareConfig
    from testbenches.harness import Case, Report

__all__ = ["json_default", "as_printed", "fault_json", "result_json", "tolerance_info"]


def json_default(o: object) -> object:
    """JSON of the numpy scalars and arrays in a result document (anything else: its str)."""
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def as_printed(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` as its printed JSON text (``run --json``: strict JSON, keys sorted) reads back: numpy values as
    numbers and lists, a non-finite number as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``."""
    decoded: dict[str, Any] = json.loads(json_text(doc, default=json_default, sort_keys=True))
    return decoded


def fault_json(rep: Report) -> dict[str, Any] | None:
    """The fault of a harness :class:`~testbenches.harness.Report` as JSON (None without one)."""
    f = rep.fault
    if not f:
        return None
    return {
        "kind": f.get("class"),
        "rule": f.get("rule"),
        "pc": f.get("pc"),
        "line": f.get("line"),
        "message": f"{f.get('line')}: {f.get('text')}: {f.get('detail')} [{f.get('rule')}, pc {f.get('pc')}]",
    }


def result_json(
    name: str, params: dict[str, Any], cfg: HardwareConfig, rep: Report, primary_tol: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON document of one run (``primary_tol`` from :func:`tolerance_info`)."""
    return {
        "testbench": name,
        "case": rep.case_id,
        "params": params,
        "hardware": cfg.values(),
        "hw": cfg.preset or None,
        "variant": rep.variant or None,
        "passed": bool(rep.passed) if rep.verdict in ("PASS", "FAIL") else None,  # timing-only: not judged
        "verdict": rep.verdict,
        "timing_only": rep.timing_only,
        "max_abs_err": rep.max_abs,
        "max_rel_err": rep.max_rel,
        "rms_err": rep.rms,
        "rel_rms": rep.rel_rms,
        "worst": rep.worst or None,
        "first": rep.first,
        "failing_elements": rep.n_fail,
        "atol": primary_tol.get("atol"),
        "rtol": primary_tol.get("rtol"),
        "tolerance": primary_tol.get("text"),
        "checks": [c.to_dict() for c in rep.checks],
        "cycles": rep.cycles,
        "instructions": rep.instructions,
        "stats": rep.stats,
        "regions": rep.stats.get("regions") if rep.stats else None,
        "wall_s": rep.wall_time,
        "fault": fault_json(rep),
        "error": rep.error,
    }


def tolerance_info(case: Case | None) -> dict[str, Any]:
    """``atol``/``rtol``/``text`` of the case's primary check ({} without a case or checks)."""
    import numpy as np

    if case is None or not case.checks:
        return {}
    tol = case.checks[0].tol
    if tol.exact:
        return {"atol": 0.0, "rtol": 0.0, "text": tol.describe()}
    ea = float(np.max(tol.eps_a)) if isinstance(tol.eps_a, np.ndarray) else float(tol.eps_a)
    atol = tol.abs_term if not tol.uses_A else ea
    return {
        "atol": atol,
        "rtol": float(tol.eps_g),
        "text": tol.describe() + (" (atol scales the reference envelope A)" if tol.uses_A else ""),
    }
