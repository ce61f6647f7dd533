"""The rich output of ``plena-sim sweep report``: the summary (:func:`studies.sweep.report.summarize`) as a
headline and tables -- the fastest passing points of every workload with the fronts they are on, and the points
not passing grouped by reason."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.table import Table

from studies.sweep.report import EXAMPLE_IDS, METRIC, size_text, value_text

from .render import add_plain_row

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["render"]

_REASON_WIDTH = 160


def _short(text: str, width: int = _REASON_WIDTH) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def _hw_text(set_hw: Mapping[str, Any] | None) -> str:
    return " ".join(f"{k}={value_text(v)}" for k, v in sorted((set_hw or {}).items())) or "-"


def _fronts_of(summary: Mapping[str, Any], key: str, point_id: str) -> str:
    """Which fronts (``mac``, ``sram``) of its workload a point is on."""
    fronts = (("mac", summary["pareto"]), ("sram", summary["pareto_sram"]))
    return ", ".join(name for name, front in fronts if point_id in front.get(key, ()))


def _best_table(summary: Mapping[str, Any]) -> Table:
    t = Table(title="fastest passing points per workload", title_justify="left")
    for col in ("workload", "#", "id", "preset", "hardware", "cycles", "MAC array", "SRAM", "front"):
        t.add_column(col, justify="right" if col in ("#", "cycles", "MAC array", "SRAM") else "left")
    for key, best in summary["best"].items():
        if not best:
            add_plain_row(t, key, "", "", "", "no passing point", "", "", "", "")
        for k, b in enumerate(best):
            cycles = "" if b[METRIC] is None else f"{b[METRIC]:,}"
            mac = "" if b["mac_array"] is None else str(b["mac_array"])
            hw = _hw_text(b["set_hw"])
            fronts = _fronts_of(summary, key, b["id"])
            add_plain_row(
                t,
                key if k == 0 else "",
                str(k + 1),
                b["id"],
                b["preset"],
                hw,
                cycles,
                mac,
                size_text(b["sram_bytes"]),
                fronts,
            )
        t.add_section()
    return t


def _template(message: str) -> str:
    """A message with its decimal numbers as ``N`` (messages that differ only in values share a template)."""
    return re.sub(r"\b\d+(\.\d+)?\b", "N", message)


def _reason_rows(groups: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[tuple[str, int, str, list[str]]]:
    """``(status, count, reason, example ids)``: a status's messages merged by :func:`_template` (the reason
    is the message itself when only one message has the template), largest groups first."""
    out = []
    for status, by_msg in groups.items():
        merged: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        for msg, g in by_msg.items():
            merged.setdefault(_template(msg), []).append((msg, g))
        for template, members in merged.items():
            ids = [i for _msg, g in members for i in g["ids"]][:EXAMPLE_IDS]
            reason = members[0][0] if len(members) == 1 else template
            out.append((status, sum(g["count"] for _msg, g in members), reason, ids))
    order = {s: k for k, s in enumerate(groups)}
    return sorted(out, key=lambda r: (order[r[0]], -r[1]))


def _reason_table(summary: Mapping[str, Any]) -> Table:
    t = Table(title="points not passing, by reason", title_justify="left")
    for col in ("status", "count", "reason", "example ids"):
        t.add_column(col, justify="right" if col == "count" else "left")
    for groups in (summary["failures"], summary["filtered"]):
        for status, count, reason, ids in _reason_rows(groups):
            add_plain_row(t, status, str(count), _short(reason) or "-", " ".join(ids))
    return t


def render(out: Console, summary: Mapping[str, Any]) -> None:
    """The headline (points by status), the fastest passing points of every workload (with the fronts they
    are on) and, when there are any, the points not passing grouped by reason."""
    counts = ", ".join(f"{n} {s}" for s, n in summary["points"].items()) or "none"
    out.print(f"{summary['total']} points in {len(summary['workloads'])} workloads: {counts}", markup=False)
    out.print(_best_table(summary))
    if summary["failures"] or summary["filtered"]:
        out.print(_reason_table(summary))
