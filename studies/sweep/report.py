"""``plena-sim sweep report``'s data: what a sweep's results database holds, as a summary, Pareto fronts, plots
and exports. Read-only: every function opens the database read-only (a report works mid-sweep).

A *workload* (:func:`workload_key`) is a testbench with its case, parameters and timing model; the points of
one workload differ only in hardware (and seed: a workload's seeds are pooled). Per workload:

- :func:`pareto`: the PASS points on the front of cycles vs a cost proxy (``mac_array`` = BLEN x MLEN or
  ``sram_bytes``), both minimised;
- :func:`summarize`: the ``--json`` document (counts, fronts, the fastest points, failures by reason; the
  command line prints it as tables);
- :func:`plot_data` / :func:`plot`: cycles vs both cost proxies with the front marked, and a heat map of
  cycles when the points form a two-axis grid over hardware keys; :func:`plot` draws exactly
  :func:`plot_data`'s content (matplotlib, Agg, no display);
- :func:`export`: every row to CSV and / or Parquet through an in-memory DuckDB (JSON columns as text).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isa.fileio import OutputError, atomic_path, atomic_stream, make_output_dir

from . import store

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "workload_key",
    "pareto",
    "summarize",
    "plot_data",
    "plot",
    "export",
    "size_text",
    "value_text",
    "COSTS",
    "STATUS_ORDER",
    "METRIC",
    "EXAMPLE_IDS",
]

Row = Mapping[str, Any]

STATUS_ORDER = ("PASS", "timed", "mismatch", "fault", "plan error", "crashed", "filtered", "pending", "running")
FAILED = ("mismatch", "fault", "plan error", "crashed")
#: the cost proxies a front is computed against: column -> axis label
COSTS = {"mac_array": "MAC array (BLEN x MLEN)", "sram_bytes": "on-chip SRAM (VRAM + MRAM + FP + INT)"}
METRIC = "cycles"
#: the hardware columns a heat map's axes are looked for in (before the other --set-hw keys, then the preset)
HW_COLUMNS = ("MLEN", "VLEN", "BLEN", "HLEN", "BROADCAST_AMOUNT")
BEST_PER_WORKLOAD = 3
EXAMPLE_IDS = 3
_STEM_WIDTH = 100
_ANNOTATE_CELLS = 144  # heat maps up to this many cells print each cell's cycles


# =========================================================================== workloads and fronts


def value_text(v: Any) -> str:
    """A parameter's or hardware key's value as text (``true`` / ``false`` for a bool)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _decoded(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v


def workload_key(row: Row) -> str:
    """``testbench[case] k=v .. / timing`` (parameters sorted by name), e.g.
    ``flashattn_prefill[P1] kv_len=256 q_len=128 / serial``."""
    params = _decoded(row.get("params")) or {}
    name = str(row["testbench"]) + (f"[{row['case_id']}]" if row.get("case_id") else "")
    return " ".join([name, *(f"{k}={value_text(params[k])}" for k in sorted(params))]) + f" / {row['timing']}"


def _by_workload(rows: Iterable[Row]) -> dict[str, list[Row]]:
    """The rows of each workload, workloads in order of first appearance."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(workload_key(r), []).append(r)
    return groups


def _order(r: Row) -> tuple[int, str]:
    return (r.get("ord") or 0, str(r["id"]))


def _measured(rows: Iterable[Row], cost: str, metric: str) -> list[Row]:
    """The PASS rows that have both values, in expansion order."""
    return [r for r in rows if r["status"] in store.SUCCEEDED and r.get(cost) is not None and r.get(metric) is not None]


def _front(rows: Iterable[Row], cost: str, metric: str) -> list[Row]:
    """The non-dominated PASS rows, in ascending cost (then metric, then expansion order).

    Ascending cost groups: a group's rows at its lowest metric are on the front iff that metric is below every
    strictly cheaper row's (rows of equal cost and higher metric are dominated)."""
    ranked = sorted(_measured(rows, cost, metric), key=lambda r: (r[cost], r[metric], *_order(r)))
    front: list[Row] = []
    best = math.inf
    for _cost, same_cost in itertools.groupby(ranked, key=lambda r: r[cost]):
        group = list(same_cost)
        lowest = group[0][metric]
        if lowest < best:
            front += [r for r in group if r[metric] == lowest]
            best = lowest
    return front


def pareto(rows: Iterable[Row], cost: str = "mac_array", metric: str = METRIC) -> dict[str, list[str]]:
    """Per workload (every workload of ``rows``, possibly with an empty front), the ids of the PASS points on
    the front of ``metric`` vs ``cost`` (both minimised; equal points are all on it), in ascending cost."""
    return {key: [r["id"] for r in _front(group, cost, metric)] for key, group in _by_workload(rows).items()}


# =========================================================================== the summary


def _count(rows: Iterable[Row]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    known = [s for s in STATUS_ORDER if s in counts]
    return {s: counts[s] for s in known + sorted(set(counts) - set(known))}


def _reasons(rows: Iterable[Row]) -> dict[str, dict[str, dict[str, Any]]]:
    """``status -> message -> {count, ids}`` (the first ids in expansion order; messages by count, then text)."""
    grouped: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        grouped.setdefault(r["status"], {}).setdefault(r.get("message") or "", []).append(r["id"])
    return {
        status: {
            msg: {"count": len(ids), "ids": ids[:EXAMPLE_IDS]}
            for msg, ids in sorted(grouped[status].items(), key=lambda kv: (-len(kv[1]), kv[0]))
        }
        for status in sorted(grouped, key=lambda s: STATUS_ORDER.index(s) if s in STATUS_ORDER else len(STATUS_ORDER))
    }


def _fastest(rows: Iterable[Row]) -> list[dict[str, Any]]:
    def rank(r: Row) -> tuple[Any, ...]:
        return (r[METRIC], r.get("mac_array") or 0, r.get("sram_bytes") or 0, *_order(r))

    ranked = sorted(_measured(rows, METRIC, METRIC), key=rank)  # the PASS rows with cycles
    keys = ("id", "preset", "set_hw", METRIC, "mac_array", "sram_bytes")
    return [{k: r.get(k) for k in keys} for r in ranked[:BEST_PER_WORKLOAD]]


def summarize(path: str | Path) -> dict[str, Any]:
    """Everything ``sweep report --json`` prints: ``total``, ``points`` (counts by status), ``workloads``
    (per workload: points and counts by status), ``pareto`` / ``pareto_sram`` (the fronts against
    ``mac_array`` / ``sram_bytes``), ``best`` (per workload the fastest PASS points), ``failures`` (the
    failed verdicts by status, then message) and ``filtered`` (the dropped points by reason)."""
    rows = store.rows(path)
    groups = _by_workload(rows)
    return {
        "total": len(rows),
        "points": _count(rows),
        "workloads": {k: {"points": len(g), "by_status": _count(g)} for k, g in groups.items()},
        "pareto": pareto(rows, "mac_array"),
        "pareto_sram": pareto(rows, "sram_bytes"),
        "best": {k: _fastest(g) for k, g in groups.items()},
        "failures": _reasons(r for r in rows if r["status"] in FAILED),
        "filtered": _reasons(r for r in rows if r["status"] == "filtered"),
    }


# =========================================================================== sizes


def size_text(n: int | None) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (``512 KiB``, ``1.5 MiB``)."""
    if n is None:
        return ""
    value, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.4g} {unit}"


# =========================================================================== plot data


def _stems(keys: Iterable[str]) -> dict[str, str]:
    """A distinct file-name stem (letters, digits, ``._-``) per workload key; a stem that is truncated or
    already taken gets the key's hash."""
    stems: dict[str, str] = {}
    for key in keys:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_.") or "workload"
        if len(stem) > _STEM_WIDTH or stem in stems.values():
            stem = stem[:_STEM_WIDTH] + "-" + hashlib.sha256(key.encode()).hexdigest()[:8]
        stems[key] = stem
    return stems


def _panel(rows: Sequence[Row], cost: str) -> dict[str, Any]:
    """One cost proxy's series: every PASS point and the front (ascending cost)."""
    points = _measured(rows, cost, METRIC)
    front = _front(rows, cost, METRIC)
    return {
        "cost": cost,
        "ids": [r["id"] for r in points],
        "x": [r[cost] for r in points],
        "y": [r[METRIC] for r in points],
        "front": [r["id"] for r in front],
        "front_x": [r[cost] for r in front],
        "front_y": [r[METRIC] for r in front],
    }


def _hardware(r: Row) -> dict[str, Any]:
    """The machine of a point: its preset, its --set-hw keys and the hardware columns."""
    return {
        "preset": r.get("preset"),
        **(r.get("set_hw") or {}),
        **{k: r[k] for k in HW_COLUMNS if r.get(k) is not None},
    }


def _determined(machines: Sequence[Mapping[str, Any]], by: Sequence[str], key: str) -> bool:
    """Whether ``key``'s value is a function of the values of ``by`` over ``machines``."""
    values: dict[tuple[Any, ...], set[Any]] = {}
    for m in machines:
        values.setdefault(tuple(m.get(k) for k in by), set()).add(m.get(key))
    return all(len(v) == 1 for v in values.values())


def _grid_axes(machines: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """The two hardware keys the machines vary along, if they vary along exactly two: keys in the order of
    :data:`HW_COLUMNS`, the other --set-hw keys (sorted), the preset; a key whose value follows from the
    keys kept before it (a derived ``BROADCAST_AMOUNT = MLEN // HLEN``) is no axis of its own."""
    others = sorted({k for m in machines for k in m} - set(HW_COLUMNS) - {"preset"})
    kept: list[str] = []
    for key in (*HW_COLUMNS, *others, "preset"):
        if len({m.get(key) for m in machines}) > 1 and not _determined(machines, kept, key):
            kept.append(key)
    return (kept[0], kept[1]) if len(kept) == 2 else None


def _axis_values(values: Iterable[Any]) -> list[Any]:
    def rank(v: Any) -> tuple[int, Any]:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (0, v)
        return (1, "" if v is None else value_text(v))

    return sorted(set(values), key=rank)


def _heatmap(rows: Sequence[Row]) -> dict[str, Any] | None:
    """Cycles over the grid of the workload's points (filtered ones aside); a cell holds its fastest PASS
    point (None: no PASS point there). None when the points form no two-axis grid or nothing passed."""
    placed = [r for r in rows if r["status"] != "filtered"]
    machines = [_hardware(r) for r in placed]
    axes = _grid_axes(machines)
    if axes is None:
        return None
    x_key, y_key = axes
    xs, ys = _axis_values(m.get(x_key) for m in machines), _axis_values(m.get(y_key) for m in machines)
    cells: list[list[int | None]] = [[None] * len(xs) for _ in ys]
    ids: list[list[str | None]] = [[None] * len(xs) for _ in ys]
    for r, m in zip(placed, machines, strict=True):
        i, j = ys.index(m.get(y_key)), xs.index(m.get(x_key))
        ok = r["status"] in store.SUCCEEDED and r.get(METRIC) is not None
        if ok and (cells[i][j] is None or r[METRIC] < cells[i][j]):
            cells[i][j], ids[i][j] = r[METRIC], r["id"]
    if all(c is None for line in cells for c in line):
        return None
    return {
        "kind": "heatmap",
        "metric": METRIC,
        "x_key": x_key,
        "y_key": y_key,
        "x": xs,
        "y": ys,
        "cells": cells,
        "ids": ids,
    }


def plot_data(path: str | Path) -> dict[str, dict[str, Any]]:
    """What :func:`plot` draws, per figure (keyed by its file stem): ``-pareto`` figures (``panels``: per cost
    proxy the PASS points' ``ids``/``x``/``y`` and the front's ``front``/``front_x``/``front_y``) and
    ``-heatmap`` figures (``x_key``/``y_key``, their values ``x``/``y``, ``cells[i][j]`` = the cycles at
    ``y[i]``, ``x[j]`` or None, ``ids`` alike). Workloads without a PASS point have no figure."""
    groups = _by_workload(store.rows(path))
    stems = _stems(groups)
    figures: dict[str, dict[str, Any]] = {}
    for key, rows in groups.items():
        if not _measured(rows, METRIC, METRIC):
            continue
        panels = [_panel(rows, cost) for cost in COSTS]
        figures[f"{stems[key]}-pareto"] = {"kind": "pareto", "workload": key, "metric": METRIC, "panels": panels}
        grid = _heatmap(rows)
        if grid is not None:
            figures[f"{stems[key]}-heatmap"] = {**grid, "workload": key}
    return figures


# =========================================================================== drawing


def _log2_axis(axis: Any, label: Callable[[int], str]) -> None:
    """A log2 scale with labelled ticks at 2^k (the 1.5 x 2^k ticks unlabelled: their labels would collide)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.axes.set_xscale("log", base=2)
    axis.set_major_locator(LogLocator(base=2, subs=(1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: label(round(v))))
    axis.set_minor_locator(LogLocator(base=2, subs=(1.5,)))
    axis.set_minor_formatter(NullFormatter())


def _draw_pareto(fig: Figure, data: Mapping[str, Any]) -> None:
    axes = fig.subplots(1, len(data["panels"]), sharey=True, squeeze=False)[0]
    for ax, panel in zip(axes, data["panels"], strict=True):
        ax.scatter(panel["x"], panel["y"], s=20, color="0.6", label="PASS points", zorder=2)
        ax.plot(
            panel["front_x"],
            panel["front_y"],
            "o-",
            color="tab:red",
            drawstyle="steps-post",
            label="Pareto front",
            zorder=3,
        )
        if panel["x"] and min(panel["x"]) > 0:
            _log2_axis(ax.xaxis, size_text if panel["cost"] == "sram_bytes" else str)
        ax.set_xlabel(COSTS[panel["cost"]])
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(data["metric"])
    axes[0].legend(loc="best", fontsize="small")
    fig.suptitle(data["workload"], fontsize="medium")


def _draw_heatmap(fig: Figure, data: Mapping[str, Any]) -> None:
    import numpy as np

    ax = fig.subplots()
    grid = np.array([[np.nan if c is None else c for c in line] for line in data["cells"]], dtype=float)
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(data["x"])), labels=[value_text(v) for v in data["x"]])
    ax.set_yticks(range(len(data["y"])), labels=[value_text(v) for v in data["y"]])
    ax.set_xlabel(data["x_key"])
    ax.set_ylabel(data["y_key"])
    fig.colorbar(image, ax=ax, label=data["metric"])
    if grid.size <= _ANNOTATE_CELLS:
        low, high = float(np.nanmin(grid)), float(np.nanmax(grid))
        for (i, j), c in np.ndenumerate(grid):
            if not np.isnan(c):
                bright = high > low and (c - low) / (high - low) > 0.6  # viridis' bright end: dark text
                shade = "k" if bright else "w"
                ax.text(j, i, f"{int(c):,}", ha="center", va="center", fontsize="x-small", color=shade)
    ax.set_title(data["workload"], fontsize="medium")


def _figure(data: Mapping[str, Any]) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if data["kind"] == "pareto":
        fig = Figure(figsize=(5.5 * len(data["panels"]), 4.5), layout="constrained")
        _draw_pareto(fig, data)
    else:
        fig = Figure(
            figsize=(max(4.5, 1.5 + 0.9 * len(data["x"])), max(3.5, 1.5 + 0.5 * len(data["y"]))), layout="constrained"
        )
        _draw_heatmap(fig, data)
    FigureCanvasAgg(fig)  # the Agg canvas: no display, no pyplot state
    return fig


def _require(module: str, purpose: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ValueError(f"{purpose} needs the {module} package (pip install {module})")


def plot(path: str | Path, out_dir: str | Path) -> list[Path]:
    """Draw :func:`plot_data`'s figures into ``out_dir`` (created if missing; its parent must exist, as for every
    output), each as ``STEM.png`` and ``STEM.svg``, each written atomically; the paths written, in order."""
    _require("matplotlib", "plotting a sweep")
    figures = plot_data(path)
    try:
        make_output_dir(out_dir)
    except OutputError as exc:
        raise ValueError(f"{out_dir}: cannot create the plot directory: {exc}") from None
    out = Path(out_dir)
    written: list[Path] = []
    for stem, data in figures.items():
        fig = _figure(data)
        for fmt in ("png", "svg"):
            target = out / f"{stem}.{fmt}"
            try:
                with atomic_stream(target) as fh:
                    fig.savefig(fh, format=fmt, dpi=120, metadata={"Date": None} if fmt == "svg" else None)
            except OutputError as exc:
                raise ValueError(f"{target}: cannot write the plot: {exc}") from None
            written.append(target)
    return written


# =========================================================================== exports

_DUCK_TYPES = {"TEXT": "VARCHAR", "INTEGER": "BIGINT", "REAL": "DOUBLE"}


def _raw_rows(path: str | Path) -> list[tuple[Any, ...]]:
    """Every row as stored (JSON columns as text), columns in :data:`store.COLUMNS` order, in expansion order."""
    con = store.open_readonly(path)
    try:
        cols = ", ".join(f'"{k}"' for k in store.COLUMNS)
        return [tuple(r) for r in con.execute(f'SELECT {cols} FROM points ORDER BY "ord", "id"')]
    finally:
        con.close()


def _copy(con: Any, target: str | Path, options: str, what: str) -> None:
    """DuckDB's COPY into a temporary file renamed over ``target`` (:func:`isa.fileio.atomic_path`)."""
    import duckdb

    try:
        with atomic_path(target) as tmp:
            quoted = str(tmp).replace("'", "''")
            con.execute(f"COPY points TO '{quoted}' ({options})")
    except (duckdb.Error, OutputError) as exc:
        raise ValueError(f"{target}: cannot write the {what} export: {exc}") from None


def export(path: str | Path, csv: str | Path | None = None, parquet: str | Path | None = None) -> None:
    """Write every row (all :data:`store.COLUMNS`, in expansion order, JSON columns as their text) to a CSV
    file (with a header; NULL = empty field) and / or a Parquet file, through an in-memory DuckDB."""
    if csv is None and parquet is None:
        raise ValueError("export: name a CSV or a Parquet file")
    _require("duckdb", "exporting a sweep")
    import duckdb
    import numpy as np

    raw = _raw_rows(path)
    con = duckdb.connect(":memory:")
    try:
        con.register("raw", {k: np.array([r[i] for r in raw], dtype=object) for i, k in enumerate(store.COLUMNS)})
        typed = ", ".join(f'CAST("{k}" AS {_DUCK_TYPES[t.split()[0]]}) AS "{k}"' for k, t in store.COLUMNS.items())
        con.execute(f"CREATE TABLE points AS SELECT {typed} FROM raw")
        if csv is not None:
            _copy(con, csv, "FORMAT csv, HEADER", "CSV")
        if parquet is not None:
            _copy(con, parquet, "FORMAT parquet", "Parquet")
    finally:
        con.close()
