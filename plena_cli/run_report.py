"""The rich panel of one testbench run (its JSON document, ``run --json`` and ``result.json``, is
:func:`studies.documents.result_json`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from .render import region_table, resource_tables

if TYPE_CHECKING:
    from rich.console import Console

    from plena_sim.config import HardwareConfig
    from testbenches.harness import Report

__all__ = ["render_hardware", "render_report"]


def render_hardware(out: Console, title: str, cfg: HardwareConfig, params: Mapping[str, Any]) -> None:
    """The machine's shape table and the resolved parameters, printed before a run."""
    hw = Table(title=title)
    for col in ("MLEN", "VLEN", "BLEN", "HLEN", "BA", "Pm/Pv/Ps", "BMM_SCALE"):
        hw.add_column(col, justify="right")
    hw.add_row(
        str(cfg.MLEN),
        str(cfg.VLEN),
        str(cfg.BLEN),
        str(cfg.HLEN),
        str(cfg.BROADCAST_AMOUNT),
        f"{cfg.P_M}/{cfg.P_V}/{cfg.P_W}",
        str(cfg.BMM_SCALE),
    )
    out.print(hw)
    out.print("params: " + ", ".join(f"{k}={v}" for k, v in params.items()), markup=False)


def render_report(out: Console, rep: Report, doc: Mapping[str, Any]) -> None:
    """PASS/FAIL, the primary check's errors and the run's size and unit use, in one panel."""
    status = "[bold green]PASS[/]" if rep.passed else "[bold red]FAIL[/]"
    if rep.verdict != "PASS" and rep.passed:  # a timing-only run: its headline says so
        status = f"[bold yellow]{escape(rep.verdict.upper())}[/]"
    lines = [rep.summary.removeprefix(f"{rep.label}: ").removeprefix("PASS; ")]  # the title and verdict say those
    if rep.verdict != "PASS" and rep.passed:
        lines = ["the control and address side ran exactly; the datapath was skipped, no output exists to judge"]
    if rep.timing_only and (rep.stats or {}).get("routing"):
        lines.append(f"assumed MoE routing: {rep.stats['routing']}")
    if rep.error:
        lines.append(f"error: {rep.error}")
    if rep.checks:
        lines += _check_lines(rep, doc)
    mode = (rep.stats or {}).get("timing_mode")
    timing = f" ({mode} timing)" if mode else ""
    lines.append(f"{rep.instructions:,} instructions, {rep.cycles:,} cycles{timing}, {doc['wall_s']:.2f} s wall")
    lines += _unit_lines(rep.stats)
    if rep.stats and "mac_utilization" in rep.stats:
        lines.append(f"MAC utilization {100 * float(rep.stats['mac_utilization']):.2f}%")
    unval = (rep.stats or {}).get("unvalidated")
    if unval:
        share = 100 * float(unval["share"])
        lines.append(f"unvalidated rtl costs: {unval['cycles']:,} cycles on the critical path ({share:.1f}%)")
    body = f"{status}  " + escape("\n".join(lines))  # every line but the verdict is text, never markup
    out.print(Panel(body, title=escape(rep.label), expand=False), soft_wrap=False)
    for table in resource_tables(rep.stats or {}):
        out.print(table)
    regions = region_table(rep.stats or {})
    if regions is not None:
        out.print(regions)


def _check_lines(rep: Report, doc: Mapping[str, Any]) -> list[str]:
    c0 = rep.checks[0]
    lines = [
        # no max rel err: elementwise |err|/|golden| is meaningless where the golden is near 0 (the tolerance
        # is envelope-based); the rel-RMS is the normalised figure (the JSON keeps max_rel_err)
        f"max abs err {rep.max_abs:.4g}   rms {rep.rms:.4g}   rel rms {rep.rel_rms:.4g}   failing {rep.n_fail}/{c0.n}"
    ]
    if rep.worst:
        w = rep.worst
        lines.append(
            f"worst element ({w.get('at')}): sim={w.get('sim')} golden={w.get('golden')} "
            f"err={w.get('err')} tol={w.get('tol')}"
        )
    lines.append(f"tolerance: {doc.get('tolerance')}")
    for c in rep.checks[1:]:
        lines.append(f"check {c.name}: {'ok' if c.passed else 'FAILED ' + c.reason}")
    return lines


def _unit_lines(stats: Mapping[str, Any]) -> list[str]:
    util = stats.get("unit_utilization") or {}
    if util:
        return [
            f"  {u:>2} {'#' * int(round(40 * min(1.0, float(f)))):<40} {100 * float(f):5.1f}%" for u, f in util.items()
        ]
    busy = stats.get("by_unit") or {}
    if busy:
        return ["  instructions by unit: " + ", ".join(f"{u}={n}" for u, n in busy.items())]
    return []
