"""``plena-sim plot DIR_OR_TRACE --kind K``: draw a saved trace (``run --save DIR --trace``: ``DIR/trace.npz``).

Kinds (the data: :mod:`plena_sim.trace.series`, exact integers per time bin): ``utilization`` -- per unit (M V S
H C) the busy fraction of each time bin (the union of the unit's instruction spans: never above 1);
``bandwidth`` -- HBM bytes read and written per cycle (= GB/s) in each bin, each DMA's bytes spread uniformly
over its span; ``regions`` -- a horizontal bar per code region path (coloured by its depth): its inclusive
cycles. Default output ``DIR/plot-K.png`` and ``DIR/plot-K.svg`` (a trace file's directory when one is given;
the files belong to the save set: the next ``run --save DIR`` replaces them); ``-o OUT.png|OUT.svg`` writes
that one file. Every file is written atomically and named on stderr. ``--json`` prints the series as one JSON
object and draws nothing. Drawing needs matplotlib (the ``sweep`` extra).
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import EXIT_OK, UsageError
from .options import examples, int_arg
from .paths import distinct_outputs, out_path, write_out
from .render import print_json, warn_truncated, wrote

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.console import Console

    from plena_sim.trace.ring import Trace

__all__ = ["register", "cmd_plot", "plot_series", "KINDS", "PLOT_FILES", "DEFAULT_BINS"]

KINDS = ("utilization", "bandwidth", "regions")
FORMATS = ("png", "svg")
#: the default outputs of every kind (owned by the ``run --save`` set, so a re-save replaces them)
PLOT_FILES = tuple(f"plot-{kind}.{fmt}" for kind in KINDS for fmt in FORMATS)
DEFAULT_BINS = 100
#: how to get matplotlib (README: the install line with the sweep extra)
INSTALL_HINT = "pip install -e '.[sweep]' in the plena-sim checkout"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plot",
        help="plot a saved trace: unit utilization, HBM bandwidth or cycles per code region (PNG, SVG)",
        description="Draw the trace of a run --save DIR --trace directory (or a trace.npz file): --kind "
        "utilization (busy fraction per unit and time bin), bandwidth (HBM bytes per cycle read and written per "
        "time bin) or regions (inclusive cycles per code region). Writes DIR/plot-K.png and DIR/plot-K.svg, or "
        "the one file -o names. Needs matplotlib (the sweep extra) except with --json.",
        **examples(
            "plena-sim plot out/linear --kind utilization     # after: plena-sim run linear --save out/linear --trace",
            "plena-sim plot out/linear --kind bandwidth --bins 40 -o bw.svg",
            "plena-sim plot out/linear/trace.npz --kind regions --json",
        ),
    )
    p.add_argument("target", metavar="DIR_OR_TRACE", help="a run --save DIR --trace directory or its trace.npz")
    p.add_argument("--kind", required=True, choices=KINDS, help="what to plot")
    p.add_argument("-o", "--output", metavar="OUT.png|OUT.svg", help="write this one file (default: DIR/plot-K.*)")
    p.add_argument(
        "--bins", default=str(DEFAULT_BINS), metavar="N", help=f"time bins (utilization, bandwidth; {DEFAULT_BINS})"
    )
    p.add_argument("--json", action="store_true", help="print the data series as one JSON object; draw nothing")
    p.set_defaults(func=cmd_plot)


def cmd_plot(args: argparse.Namespace, out: Console, err: Console) -> int:
    bins = int_arg(args.bins, "--bins")
    if bins < 1:
        raise UsageError(f"--bins: {args.bins!r} must be >= 1")
    if args.json and args.output:
        raise UsageError("-o: --json prints the data series and draws nothing; use one of them")
    trace_path = _trace_path(args.target)
    outputs = [] if args.json else _outputs(args.output, trace_path.parent, args.kind)
    distinct_outputs([("-o" if args.output else "plot", p) for p in outputs], [trace_path])
    if not args.json:
        _require_matplotlib()
    trace = _load(trace_path)
    series = plot_series(trace, args.kind, bins)
    if args.json:
        print_json(out, {"kind": args.kind, "trace": str(trace_path), **_trace_info(trace), **series})
        return EXIT_OK
    from .plot_draw import figure

    fig = figure(args.kind, series, _title(trace_path, trace))
    for path in outputs:
        write_out(path, _figure_bytes(fig, path.suffix[1:].lower()), "-o" if args.output else "plot")
        wrote(err, path)
    if trace.dropped:
        warn_truncated(err, trace, "the plotted trace")
    return EXIT_OK


def plot_series(trace: Trace, kind: str, bins: int) -> dict[str, Any]:
    """The data series of ``kind`` (:mod:`plena_sim.trace.series`)."""
    from plena_sim.trace import series as trace_series

    if kind == "utilization":
        return trace_series.utilization_series(trace, bins)
    if kind == "bandwidth":
        return trace_series.bandwidth_series(trace, bins)
    return trace_series.region_series(trace)


def _trace_path(target: str) -> Path:
    from plena_sim.trace.file import TRACE_FILE

    path = Path(target)
    if path.is_dir():
        if not (path / TRACE_FILE).is_file():
            raise UsageError(
                f"plot: {target!r} holds no {TRACE_FILE} (saved without a trace); "
                f"re-run with --trace: plena-sim run NAME --save {target} --trace"
            )
        return path / TRACE_FILE
    if not path.is_file():
        raise UsageError(f"plot: no such directory or file: {target!r}")
    return path


def _outputs(output: str | None, folder: Path, kind: str) -> list[Path]:
    """The files to write, checked before anything is read."""
    if output is None:
        return [out_path(str(folder / f"plot-{kind}.{fmt}"), "plot") for fmt in FORMATS]
    if Path(output).suffix.lower() not in tuple(f".{fmt}" for fmt in FORMATS):
        raise UsageError(f"-o: {output!r} must end in .png or .svg")
    return [out_path(output, "-o")]


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            f"plot: drawing needs matplotlib, an optional extra ({INSTALL_HINT}); --json prints the data without it"
        ) from None


def _load(path: Path) -> Trace:
    from plena_sim.trace.file import load_trace

    try:
        return load_trace(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"plot: cannot read {str(path)!r}: {exc}") from None


def _trace_info(trace: Trace) -> dict[str, Any]:
    return {"timing_mode": trace.mode, "records": len(trace), "dropped": trace.dropped}


def _title(trace_path: Path, trace: Trace) -> str:
    """``NAME (timing mode)``: the testbench of the save's result.json, else the trace file's name."""
    name = trace_path.name
    try:
        doc = json.loads((trace_path.parent / "result.json").read_text(encoding="utf-8"))
        name = str(doc["testbench"]) if isinstance(doc, dict) and "testbench" in doc else name
    except (OSError, ValueError):
        pass
    dropped = f", oldest {trace.dropped:,} instructions dropped" if trace.dropped else ""
    return f"{name} ({trace.mode}{dropped})"


def _figure_bytes(fig: Figure, fmt: str) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()
