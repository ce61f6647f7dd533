"""``plena-sim sweep SPEC --out RESULTS`` (run a design-space sweep on Dask), ``plena-sim sweep report RESULTS``
(tables, Pareto fronts, plots, CSV / Parquet exports) and ``plena-sim sweep --example`` (a spec to start from).

See docs/sweeps.md. The sweep itself is :mod:`studies.sweep` (the spec, the engine's ``run_sweep``, the report's
data, plots and exports; imported only by this command: the optional ``sweep`` extra provides Dask, DuckDB and
matplotlib); this command parses the flags, calls it and renders what it returns (:mod:`.sweep_report`).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import EXIT_MISMATCH, EXIT_OK, UsageError
from .options import examples
from .render import print_json, wrote

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]

EXAMPLE = """\
# A plena-sim sweep spec (docs/sweeps.md explains every line): 12 points, 2 of them filtered out.
name = "example"
timing = ["serial", "overlap"]          # the timing models: an axis
seeds = [0]                             # the input seeds: an axis

[hardware]
presets = ["transactional", "small"]    # hardware presets: an axis
[hardware.set]                          # --set-hw keys, each an axis: a list, {start, stop, step} or one value
BLEN = [4, 16, 64]
[hardware.derive]                       # keys computed from each point's machine (named constraints)
BROADCAST_AMOUNT = "MLEN // HLEN"

[[workload]]                            # a testbench (and optionally case = "..."); its --set values are axes
testbench = "linear"
[workload.set]
rows = [16]

[[filter]]                              # drop the points where `when` holds, counting them with the reason
when = "BLEN > MLEN"
reason = "the matrix array is at most MLEN rows tall"
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a design-space sweep on Dask (or: sweep report RESULTS)",
        description="plena-sim sweep SPEC.toml --out RESULTS | sweep report RESULTS [--csv F] [--parquet F] "
        "[--plots DIR] | sweep --example",
        **examples(
            "plena-sim sweep --example > spec.toml",
            "plena-sim sweep spec.toml --out results.sqlite --workers 4",
            "plena-sim sweep report results.sqlite --csv points.csv --plots plots",
        ),
    )
    p.add_argument("spec", nargs="?", help="the sweep spec (TOML), or 'report'")
    p.add_argument("results", nargs="?", help="(sweep report) the results database")
    p.add_argument("--out", metavar="RESULTS", help="the results database (existing: resume)")
    p.add_argument("--workers", type=int, default=None, help="LocalCluster worker processes (default: cores)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run on an existing Dask cluster")
    p.add_argument("--threads", action="store_true", help="LocalCluster with threads in this process")
    p.add_argument("--example", action="store_true", help="print an example spec")
    p.add_argument("--csv", metavar="FILE", help="(report) export every point as CSV")
    p.add_argument("--parquet", metavar="FILE", help="(report) export every point as Parquet")
    p.add_argument("--plots", metavar="DIR", help="(report) write the plots (PNG and SVG) here")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--timing-only",
        action="store_true",
        help="run every point timing-only (the spec's timing_only = true): cycles, no datapath, verdict 'timed'",
    )
    p.set_defaults(func=cmd_sweep)


def _modules(*names: str) -> list[Any]:
    """The sweep modules ``names`` (a missing optional dependency is the user's error, naming the extra)."""
    import importlib

    out = []
    for name in names:
        try:
            out.append(importlib.import_module(f"studies.sweep.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("studies"):
                raise
            raise UsageError(
                f"sweep needs the optional dependencies (pip install -e '.[sweep]'): {exc.name} is missing"
            ) from None
    return out


def cmd_sweep(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.example:
        if args.spec or args.results:
            raise UsageError("sweep --example takes no other argument")
        out.file.write(EXAMPLE)
        return EXIT_OK
    if args.spec == "report":
        return _report(args, out, err)
    if not args.spec or args.results:
        raise UsageError("usage: plena-sim sweep SPEC.toml --out RESULTS (or: sweep report RESULTS, sweep --example)")
    if not args.out:
        raise UsageError("sweep: --out RESULTS is required (the results database; an existing one is resumed)")
    for opt in ("csv", "parquet", "plots"):
        if getattr(args, opt):
            raise UsageError(f"sweep: --{opt} belongs to 'sweep report RESULTS'")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"sweep: --workers {args.workers} must be >= 1")
    if args.scheduler and (args.workers is not None or args.threads):
        raise UsageError("sweep: --scheduler runs on that cluster's workers (no --workers / --threads)")
    spec_mod, engine = _modules("spec", "engine")
    try:
        spec = spec_mod.load_spec(args.spec)
    except spec_mod.SpecError as exc:
        raise UsageError(str(exc)) from None
    if args.timing_only:
        spec = dataclasses.replace(spec, timing_only=True)
    summary = _run(engine, spec, args, err)
    doc = {**summary.to_dict(), "out": str(args.out), "spec": str(args.spec)}
    if args.json:
        print_json(out, doc)
    else:
        _render_summary(out, doc)
    return EXIT_OK if summary.failed == 0 else EXIT_MISMATCH


def _run(engine: Any, spec: Any, args: argparse.Namespace, err: Console) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    db = _results_path(args.out)
    kw = dict(workers=args.workers, scheduler=args.scheduler, processes=not args.threads)
    if args.json:
        return _guard(lambda: engine.run_sweep(spec, db, **kw))
    columns = (
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("starting the cluster ...", total=None)

        def progress(t: dict[str, Any]) -> None:
            text = f"failed {t['failed']}  running {t['running']}  {t['points_per_min']:.0f} points/min"
            bar.update(task, total=t["total"], completed=t["done"], description=text)

        return _guard(lambda: engine.run_sweep(spec, db, progress=progress, **kw))


def _results_path(path: str) -> Path:
    """``--out RESULTS``: the database file, written in place by SQLite (one transaction per point, so a killed
    sweep loses only its running points); checked like every output (a regular file or a new name)."""
    from .paths import out_path

    return out_path(path, "sweep: --out")


def _guard(fn: Any) -> Any:
    """A results file that is not a sweep database, or a cluster that cannot be reached, is the user's error."""
    try:
        return fn()
    except ValueError as exc:
        raise UsageError(f"sweep: {exc}") from None
    except OSError as exc:
        raise UsageError(f"sweep: {exc}") from None


def _render_summary(out: Console, doc: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(f"sweep {doc['spec']} -> {doc['out']}"), show_edge=False)
    for c in ("points", "ran", "skipped", "failed", "filtered", "workers", "wall"):
        t.add_column(c, justify="right")
    t.add_row(
        *(str(doc[k]) for k in ("points", "ran", "skipped", "failed", "filtered", "workers")), f"{doc['wall_s']:.1f} s"
    )
    out.print(t)
    out.print("by status: " + ", ".join(f"{k} {v}" for k, v in sorted(doc["by_status"].items())), markup=False)
    out.print(f"report: plena-sim sweep report {doc['out']}", markup=False)


def _report_outputs(args: argparse.Namespace) -> tuple[Path | None, Path | None, Path | None]:
    """``--csv``, ``--parquet`` and ``--plots``, checked before the report reads anything."""
    from .paths import distinct_outputs, out_dir, out_path

    csv = out_path(args.csv, "--csv") if args.csv is not None else None
    parquet = out_path(args.parquet, "--parquet") if args.parquet is not None else None
    plots = out_dir(args.plots, "--plots") if args.plots is not None else None
    files = [(flag, p) for flag, p in (("--csv", csv), ("--parquet", parquet)) if p is not None]
    distinct_outputs(files, [args.results])
    return csv, parquet, plots


def _report(args: argparse.Namespace, out: Console, err: Console) -> int:
    if not args.results:
        raise UsageError("usage: plena-sim sweep report RESULTS [--csv F] [--parquet F] [--plots DIR] [--json]")
    for opt in ("out", "scheduler", "workers"):
        if getattr(args, opt):
            raise UsageError(f"sweep report: --{opt} belongs to 'sweep SPEC'")
    csv, parquet, plots_dir = _report_outputs(args)
    (report,) = _modules("report")
    try:
        summary = report.summarize(args.results)
        if csv or parquet:
            report.export(args.results, csv=csv, parquet=parquet)
        plots = [str(p) for p in report.plot(args.results, plots_dir)] if plots_dir else []
    except ValueError as exc:
        raise UsageError(f"sweep report: {exc}") from None
    for path in [p for p in (csv, parquet) if p is not None] + plots:
        wrote(err, path)
    if args.json:
        print_json(out, {**summary, "plots": plots})
    else:
        from .sweep_report import render

        render(out, summary)
    return EXIT_OK
