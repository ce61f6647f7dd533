"""``plena-sim trace``: run a program or a testbench with the in-loop trace ring, filter and show the trace."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .errors import EXIT_FAULT, EXIT_OK, UsageError
from .machine_inputs import input_files
from .options import (
    add_capacity_arg,
    add_timing_arg,
    examples,
    int_arg,
)
from .paths import distinct_outputs, out_path, write_perfetto
from .render import (
    compile_core,
    print_fault,
    print_json,
    print_plain,
    render_trace,
    upstream_lines,
    warn_truncated,
    wrote,
)
from .run_source import SourceRun, add_source_args, check_source_args, fault_row, run_source

if TYPE_CHECKING:
    from rich.console import Console

    from plena_sim.trace.ring import Trace

__all__ = ["register", "cmd_trace"]

#: rows shown without a filter or ``--last``
DEFAULT_LAST = 200


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tr = sub.add_parser(
        "trace",
        help="run a program or testbench with tracing and show the trace",
        **examples(
            "plena-sim trace kernel.asm --hbm weights.bin --last 20",
            "plena-sim trace --testbench flashattn_decode --vram 40:4 --op V_EXP_V,M_MM_WO --json",
            "plena-sim trace kernel.asm --pc 10:40 --wide --perfetto trace.json",
        ),
    )
    add_source_args(tr)
    add_timing_arg(tr, help_text=None)
    add_capacity_arg(tr)
    tr.add_argument("--pc", metavar="A:B", help="only pcs A..B (inclusive)")
    tr.add_argument("--op", metavar="OP[,OP]", help="only these mnemonics")
    tr.add_argument("--unit", metavar="U[,U]", help="only these units: dma matrix vector scalar control or H M V S C")
    for flag, form, what in _WATCH_FLAGS:
        tr.add_argument(flag, metavar=form, help=f"only instructions that read or write {what}")
    tr.add_argument(
        "--last", type=int, default=None, metavar="N", help=f"only the last N rows (default {DEFAULT_LAST})"
    )
    tr.add_argument(
        "--around-fault", type=int, default=None, metavar="N", help="the N instructions retired just before the fault"
    )
    tr.add_argument(
        "--wide", action="store_true", help="every column (sequence number, issue, cycle span, registers, memory)"
    )
    tr.add_argument("--perfetto", metavar="OUT.json", help="write the trace as Chrome/Perfetto trace JSON")
    tr.add_argument("--json", action="store_true", help="print the selected rows and stats as one JSON object")
    tr.set_defaults(func=cmd_trace)


#: the watch filters: (flag, metavar, what they select), the trace JSON ``mem[].space`` of each by its flag
_WATCH_FLAGS = (
    ("--vram", "ROW[:N]", "VRAM rows ROW..ROW+N-1 (rows of VLEN elements)"),
    ("--mram", "ADDR[:LEN]", "MRAM elements ADDR..ADDR+LEN-1"),
    ("--fpsram", "ADDR[:LEN]", "FP SRAM words ADDR..ADDR+LEN-1"),
    ("--intsram", "ADDR[:LEN]", "INT SRAM words ADDR..ADDR+LEN-1"),
    ("--hbm-range", "ADDR:LEN", "HBM bytes ADDR..ADDR+LEN-1"),
)
_WATCH_SPACES = {"--vram": "vram", "--mram": "mram", "--fpsram": "fpsram", "--intsram": "intsram", "--hbm-range": "hbm"}


@dataclass
class _Filters:
    pc: tuple[int, int] | None
    ops: set[str] | None
    units: set[str] | None
    watch: dict[str, tuple[int, int]]  # space -> (start, length): see _WATCH_FLAGS

    @property
    def any(self) -> bool:
        return bool(self.pc or self.ops or self.units or self.watch)


@dataclass
class _Traced:
    """The trace of one run, its statistics and its fault (None: it ran to the end)."""

    trace: Trace
    stats: dict[str, Any]
    title: str
    fault_pc: int | None
    fault_text: str | None
    fault_row: dict[str, Any] | None  # the faulting instruction: pc, line, text, message

    @classmethod
    def of(cls, ran: SourceRun) -> _Traced:
        res, fault = ran.result, ran.result.fault
        trace = cast("Trace", res.trace)  # RunResult.trace is typed object | None: a Trace with trace=N
        if fault is None:
            return cls(trace, res.stats, ran.title, None, None, None)
        return cls(trace, res.stats, ran.title, fault.pc, str(fault), fault_row(fault))


def cmd_trace(args: argparse.Namespace, out: Console, err: Console) -> int:
    _check_args(args)
    filters = _filters(args)
    perfetto = out_path(args.perfetto, "--perfetto") if args.perfetto is not None else None
    if perfetto is not None:
        distinct_outputs([("--perfetto", perfetto)], input_files(args))
    compile_core(err, bool(args.json))
    run = _Traced.of(run_source(args, trace=int(args.capacity), check=lambda cfg: _check_watch(filters.watch, cfg)))
    trace = run.trace
    selected = trace.filter(pc=filters.pc, ops=filters.ops, units=filters.units, touching=filters.watch)
    sel = selected.filter(last=_last(args, run, filters))
    if perfetto is not None:
        write_perfetto(perfetto, trace, fault=run.fault_row)
        wrote(err, perfetto)
        if trace.dropped:
            warn_truncated(err, trace, "the Perfetto export")
    faulted = run.fault_text is not None
    if run.fault_text is not None:  # the fault is the headline; statistics are partial
        print_fault(err, run.fault_text)
    if args.json:
        print_json(
            out,
            {
                "rows": [_json_row(r) for r in sel.rows()],
                "summary": trace.opcode_summary(),
                "stats": run.stats,
                "records": len(trace),
                "dropped": trace.dropped,
                "partial": faulted,
                "fault": dict(run.fault_row or {}, message=run.fault_text) if faulted else None,
            },
            sort_keys=True,
        )
        return EXIT_FAULT if faulted else EXIT_OK
    what = f" (partial: faulted at pc {run.fault_pc}, not retired)" if faulted else ""
    shown = f"{len(sel)} of {len(selected)} selected" if len(sel) < len(selected) else f"{len(sel)} of {trace.total}"
    title = f"{run.title}: {shown} instructions{what}"
    render_trace(out, sel, run.stats, title=title, full=trace, wide=args.wide, fault=run.fault_row)
    if trace.dropped:
        warn_truncated(err, trace)
    if not faulted:
        print_plain(out, upstream_lines(run.stats))
    return EXIT_FAULT if faulted else EXIT_OK


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    """A trace row of ``--json``: the register change as ``regs`` and the memory accesses as ``mem`` only
    (structured), not also as text."""
    return {k: v for k, v in row.items() if k not in ("reg", "mem_text", "hbm")}


def _check_args(args: argparse.Namespace) -> None:
    check_source_args(args)
    if args.last is not None and args.last < 1:
        raise UsageError(f"--last: {args.last} must be >= 1")


def _filters(args: argparse.Namespace) -> _Filters:
    from plena_sim.trace.ring import parse_units

    pc_range = None
    if args.pc:
        a, sep, b = args.pc.partition(":")
        if not sep:
            raise UsageError(f"--pc: {args.pc!r} must look like A:B")
        pc_range = (int_arg(a, "--pc A") if a else 0, int_arg(b, "--pc B") if b else 1 << 62)
        if pc_range[0] > pc_range[1]:
            raise UsageError(f"--pc: {args.pc!r} is an empty range (A must be <= B)")
    try:
        units = parse_units(args.unit) if args.unit else None
    except ValueError as exc:
        raise UsageError(f"--unit: {exc}") from None
    return _Filters(pc_range, _mnemonics(args.op) if args.op else None, units, _watch(args))


def _watch(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    """``--vram ROW[:N]`` ... ``--hbm-range ADDR:LEN`` -> {space: (start, length)} (length >= 1)."""
    out = {}
    for flag, form, _what in _WATCH_FLAGS:
        text = getattr(args, flag[2:].replace("-", "_"))
        if text is None:
            continue
        a, sep, n = text.partition(":")
        if not a or (sep and not n) or (flag == "--hbm-range" and not sep):
            raise UsageError(f"{flag}: {text!r} must look like {form}")
        length = int_arg(n, f"{flag} length") if sep else 1
        if length < 1:
            raise UsageError(f"{flag}: {text!r} is an empty range (the length must be >= 1)")
        out[_WATCH_SPACES[flag]] = (int_arg(a, flag), length)
    return out


def _check_watch(watch: dict[str, tuple[int, int]], cfg: Any) -> None:
    """Each watched range must lie inside its memory of the machine ``cfg``."""
    sizes = {
        "vram": (cfg.VECTOR_SRAM_SIZE, "VRAM rows"),
        "mram": (cfg.mram_tiles * cfg.MLEN * cfg.MLEN, "MRAM elements"),
        "fpsram": (cfg.FP_SRAM_SIZE, "FP SRAM words"),
        "intsram": (cfg.INT_SRAM_SIZE, "INT SRAM words"),
        "hbm": (cfg.HBM_SIZE, "HBM bytes"),
    }
    flags = {space: flag for flag, space in _WATCH_SPACES.items()}
    for space, (start, length) in watch.items():
        size, what = sizes[space]
        if start + length > size:
            raise UsageError(
                f"{flags[space]}: {start}..{start + length - 1} is outside the machine's {size} {what} (0..{size - 1})"
            )


def _mnemonics(text: str) -> set[str]:
    from isa.table import BY_MNEMONIC

    ops = {o.strip().upper() for o in text.split(",") if o.strip()}
    bad = sorted(o for o in ops if o not in BY_MNEMONIC)
    if bad:
        raise UsageError(f"--op: unknown mnemonic(s) {', '.join(bad)}")
    return ops


def _last(args: argparse.Namespace, run: _Traced, filters: _Filters) -> int | None:
    """How many of the newest rows to show: ``--around-fault N`` (the N instructions retired just before
    the fault: the faulting one does not retire), else ``--last``, else all filtered rows or 200."""
    if args.around_fault is None:
        if args.last is not None:
            return args.last
        return None if filters.any else DEFAULT_LAST
    if run.fault_pc is None:
        raise UsageError("--around-fault: the run did not fault")
    if args.around_fault < 0:
        raise UsageError(f"--around-fault: {args.around_fault} must be >= 0")
    return args.around_fault if args.last is None else min(args.last, args.around_fault)
