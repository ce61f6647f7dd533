"""``plena-sim bench``: run the benchmark suite (:mod:`plena_cli.bench`) and print or return its numbers."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .bench import add_options
from .errors import EXIT_BUG, EXIT_OK, UsageError
from .options import examples
from .render import print_json

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register", "cmd_bench", "cmd_hbm_bench"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    be = sub.add_parser(
        "bench",
        help="run the benchmark suite (speed, JIT, peak RSS; docs/performance.md)",
        **examples("plena-sim bench --quick", "plena-sim bench --only prefill_1k --repeat 5 --json"),
    )
    add_options(be)
    be.set_defaults(func=cmd_bench)
    hb = sub.add_parser(
        "hbm-bench",
        help="HBM microbenchmark: one DMA of N bytes per pattern, channels 1-8 (docs/hbm.md)",
        **examples("plena-sim hbm-bench", "plena-sim hbm-bench --preset HBM3 --json"),
    )
    hb.add_argument("--preset", default="HBM2", help="HBM timing preset (default HBM2)")
    hb.add_argument("--json", action="store_true", help="print every measured point as one JSON document")
    hb.set_defaults(func=cmd_hbm_bench)


def cmd_bench(args: argparse.Namespace, out: Console, err: Console) -> int:
    from . import bench

    only = [x.strip() for o in (args.only or []) for x in o.split(",") if x.strip()] or None
    unknown = [n for n in (only or []) if n not in bench.WORKLOADS]
    if unknown:
        raise UsageError(f"--only: unknown workload(s) {', '.join(unknown)} (valid: {', '.join(bench.WORKLOADS)})")
    if args.repeat is not None and args.repeat < 1:
        raise UsageError("--repeat must be >= 1")
    progress = None if args.json else (lambda s: err.print(f"[dim]bench: {s}[/]"))
    res = bench.run_suite(quick=args.quick, only=only, repeat=args.repeat, cold=args.cold, progress=progress)
    if args.json:
        print_json(out, res)
    else:
        from .bench_report import render

        render(res, out)
    return EXIT_BUG if any("error" in w for w in res["workloads"].values()) else EXIT_OK


def cmd_hbm_bench(args: argparse.Namespace, out: Console, err: Console) -> int:
    from plena_sim.errors import ConfigError

    from . import hbm_bench

    try:
        points = hbm_bench.measure_points(preset=args.preset)
    except ConfigError as exc:
        raise UsageError(f"--preset: {exc}") from None
    if args.json:
        print_json(out, [p.as_dict() for p in points])
    else:
        out.file.write(hbm_bench.markdown_report(points, args.preset))
    return EXIT_OK
