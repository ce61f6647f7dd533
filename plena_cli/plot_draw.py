"""The figures of ``plena-sim plot`` (one job: draw the series of :mod:`plena_sim.trace.series`, computing
nothing). matplotlib's object API on the Agg canvas: no display, no pyplot state. Imported only when drawing."""

from __future__ import annotations

from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from isa.encoding import UNIT_NAMES
from plena_sim.trace.ring import UNIT_LONG

__all__ = ["figure"]

#: bars of the regions chart drawn (the costliest; the title says how many were left out)
MAX_REGION_BARS = 60
X_LABEL = "cycle"


def _text(s: str) -> str:
    """A label drawn verbatim: matplotlib reads ``$...$`` as math, so every ``$`` is escaped."""
    return s.replace("$", r"\$")


def figure(kind: str, series: dict[str, Any], title: str) -> Figure:
    """The figure of ``kind`` with ``title`` (drawn verbatim) above it."""
    draw = {"utilization": _utilization, "bandwidth": _bandwidth, "regions": _regions}[kind]
    fig = draw(series)
    fig.suptitle(_text(title), fontsize="medium")
    FigureCanvasAgg(fig)
    return fig


def _utilization(s: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(9, 1.3 * len(UNIT_NAMES) + 0.8), layout="constrained")
    axes = fig.subplots(len(UNIT_NAMES), 1, sharex=True, squeeze=False)[:, 0]
    span = max(s["end"] - s["start"], 1)
    for ax, unit in zip(axes, UNIT_NAMES, strict=True):
        u = s["units"][unit]
        ax.stairs(u["fraction"], s["edges"], fill=True, alpha=0.7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"{unit}\n{UNIT_LONG[unit]}", rotation=0, ha="right", va="center", fontsize="small")
        busy = int(u["busy_cycles"].sum())
        ax.set_title(f"busy {busy:,} cycles ({100 * busy / span:.1f}%)", loc="right", fontsize="x-small", pad=2)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel(f"{X_LABEL} ({len(s['width'])} bins; busy fraction per bin)")
    return fig


def _bandwidth(s: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.subplots()
    for name, color in (("read", "tab:blue"), ("write", "tab:orange")):
        total = int(s[f"{name}_bytes"].sum())
        ax.stairs(s[f"{name}_bytes_per_cycle"], s["edges"], color=color, label=f"{name} ({total:,} B)")
    ax.set_xlabel(f"{X_LABEL} ({len(s['width'])} bins)")
    ax.set_ylabel("HBM bytes/cycle (= GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return fig


def _regions(s: dict[str, Any]) -> Figure:
    rows = list(zip(s["paths"], s["depth"].tolist(), s["cycles_inclusive"].tolist(), strict=True))
    shown = rows
    if len(rows) > MAX_REGION_BARS:
        keep = {p for p, _d, _c in sorted(rows, key=lambda r: -r[2])[:MAX_REGION_BARS]}
        shown = [r for r in rows if r[0] in keep]
    fig = Figure(figsize=(9, 1.2 + 0.3 * max(len(shown), 1)), layout="constrained")
    ax = fig.subplots()
    total = max(int(s["total_cycles"]), 1)
    labels = [_text(p) for p, _d, _c in shown]
    cycles = [c for _p, _d, c in shown]
    bars = ax.barh(range(len(shown)), cycles, color=[f"C{d % 10}" for _p, d, _c in shown])
    ax.bar_label(bars, labels=[f"{c:,} ({100 * c / total:.1f}%)" for c in cycles], fontsize="x-small", padding=2)
    ax.set_yticks(range(len(shown)), labels=labels, fontsize="small")
    ax.invert_yaxis()
    ax.margins(x=0.2)
    left_out = f"; {len(rows) - len(shown)} smaller regions not shown" if len(shown) < len(rows) else ""
    ax.set_xlabel(f"inclusive cycles (of {int(s['total_cycles']):,}{left_out})")
    if not rows:
        ax.text(0.5, 0.5, "the program marks no code regions", transform=ax.transAxes, ha="center", va="center")
    return fig
