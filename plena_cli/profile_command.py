"""``plena-sim profile``: the per-source-line cycle profile of a program or a testbench's program.

Every source line that holds an instruction, in source order, with how often it ran (executions), the cycles its
instructions added (exclusive: the cycle counter after each one's accounting minus before, summed; the line
cycles sum to the run's cycles exactly, in both timing modes) and its share of the total; the hottest lines are
highlighted. It is the per-pc profile every run keeps (``Outcome.pc_count`` / ``pc_cycles``) summed per line.
``stall_cycles`` is the cycles the line's instructions waited before they issued (every stall reason of
``stats.stalls``: unit busy, operand not ready, hazards, recovery), from the per-pc stall record of the timing
model (``Outcome.pc_extra``); ``serial`` never stalls.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from .errors import EXIT_FAULT, EXIT_OK, UsageError
from .options import add_timing_arg, examples
from .render import compile_core, print_fault, print_json
from .run_source import add_source_args, check_source_args, run_source

if TYPE_CHECKING:
    from rich.console import Console

    from .run_source import SourceRun

__all__ = ["register", "cmd_profile", "line_profile", "LineCost", "STALL_NOTE"]

#: lines highlighted as the hottest (by cycles)
HOTTEST = 5
#: what ``stall_cycles`` holds (``--help``, ``--json``)
STALL_NOTE = (
    "stall_cycles: the cycles the line's instructions waited before issue (every reason of stats.stalls; "
    "0 under serial, which never stalls)"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "profile",
        help="per-source-line profile: executions, cycles (exclusive) and share of every line",
        description="The source listing of a program with, per line, its executions, the cycles its instructions "
        f"added (summing to the run's cycles) and their share; the {HOTTEST} hottest lines highlighted. "
        f"{STALL_NOTE}.",
        **examples(
            "plena-sim profile kernel.asm --hbm weights.bin",
            "plena-sim profile --testbench flashattn_prefill --case P3 --top 20",
            "plena-sim profile --testbench linear --set rows=64 --timing overlap --json",
        ),
    )
    add_source_args(p)
    add_timing_arg(p)
    p.add_argument("--top", type=int, default=None, metavar="N", help="only the N hottest lines (in source order)")
    p.add_argument(
        "--json",
        action="store_true",
        help='one JSON object: {"total_cycles", "lines": [{"line", "text", "executions", "cycles", '
        '"stall_cycles"}]} (line cycles sum to total_cycles)',
    )
    p.set_defaults(func=cmd_profile)


@dataclass(frozen=True)
class LineCost:
    """One source line of a profile."""

    line: int
    text: str
    executions: int
    cycles: int
    stall_cycles: int = 0


def line_profile(ran: SourceRun) -> list[LineCost]:
    """The per-pc profile of ``ran`` summed per source line (lines in source order; a line's executions: the
    most any of its words retired)."""
    import numpy as np

    outcome = ran.result.outcome
    assert outcome is not None, "a RunResult of Machine.run has its Outcome"
    source = ran.program.source
    lines = np.asarray(source.lines, dtype=np.int64)
    if not len(lines):
        return []
    uniq, first, inverse = np.unique(lines, return_index=True, return_inverse=True)
    cycles = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(cycles, inverse, np.asarray(outcome.pc_cycles, dtype=np.int64))
    runs = np.zeros(len(uniq), dtype=np.int64)
    np.maximum.at(runs, inverse, np.asarray(outcome.pc_count, dtype=np.int64))
    stalls = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(stalls, inverse, _pc_stalls(outcome.pc_extra))
    return [
        LineCost(int(uniq[k]), source.text(int(first[k])).strip(), int(runs[k]), int(cycles[k]), int(stalls[k]))
        for k in range(len(uniq))
    ]


def _pc_stalls(pc_extra: Any) -> Any:
    """Stall cycles per pc: the sum of the per-reason stall columns of the per-pc record."""
    import numpy as np

    from plena_sim.timing.rtl import STALL_REASONS
    from plena_sim.timing.scoreboard import X_STALL

    return np.asarray(pc_extra, dtype=np.int64)[:, X_STALL : X_STALL + len(STALL_REASONS)].sum(axis=1)


def cmd_profile(args: argparse.Namespace, out: Console, err: Console) -> int:
    check_source_args(args)
    if args.top is not None and args.top < 1:
        raise UsageError(f"--top: {args.top} must be >= 1")
    compile_core(err, bool(args.json))
    ran = run_source(args)
    costs = line_profile(ran)
    total = int(ran.result.cycles)
    fault = ran.result.fault
    if fault is not None:  # the fault is the headline; the profile is of what retired before it
        print_fault(err, str(fault))
    if args.json:
        print_json(out, _profile_doc(costs, total, fault is not None))
    else:
        out.print(_profile_table(ran.title, costs, total, args.top), soft_wrap=False)
    return EXIT_FAULT if fault is not None else EXIT_OK


def _profile_doc(costs: list[LineCost], total: int, partial: bool) -> dict[str, Any]:
    return {
        "total_cycles": total,
        "lines": [c.__dict__ for c in costs],
        "partial": partial,
        "note": STALL_NOTE,
    }


def _hottest(costs: list[LineCost], n: int) -> set[int]:
    """The source lines of the ``n`` costliest lines (that cost anything)."""
    ranked = sorted((c for c in costs if c.cycles), key=lambda c: (-c.cycles, c.line))
    return {c.line for c in ranked[:n]}


def _profile_table(title: str, costs: list[LineCost], total: int, top: int | None) -> Table:
    hot = _hottest(costs, HOTTEST)
    shown = costs if top is None else [c for c in costs if c.line in _hottest(costs, top)]
    t = Table(title=Text(f"{title}: {total:,} cycles, {len(shown)} of {len(costs)} source lines"))
    for col in ("line", "source", "executions", "cycles", "stalls", "share"):
        t.add_column(col, justify="left" if col == "source" else "right", no_wrap=col != "source", overflow="fold")
    for c in shown:
        share = f"{100 * c.cycles / total:.1f}%" if total else "-"
        style = "bold red" if c.line in hot else ("dim" if not c.executions else None)
        t.add_row(
            str(c.line), Text(c.text), f"{c.executions:,}", f"{c.cycles:,}", f"{c.stall_cycles:,}", share, style=style
        )
    return t
