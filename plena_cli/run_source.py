"""What ``trace`` and ``profile`` run: a program file (with exec's memory inputs) or a testbench case.

``PROGRAM`` runs on the machine of ``--hw`` / ``--config`` / ``--set KEY=VALUE`` (CONFIG keys) with the HBM
images and SRAM preloads of :mod:`.machine_inputs`; ``--testbench NAME [--case ID] [--set K=V]`` builds the
case (``--set`` then sets its parameters, ``--set-hw`` the machine's keys) and runs its program on the machine
the harness prepares (:func:`testbenches.harness.prepare_machine`), without judging it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .interrupts import add_timeout_arg
from .machine_inputs import add_memory_args, loaded_machine, memory_inputs_given
from .options import (
    add_backend_arg,
    add_budget_arg,
    add_max_program_arg,
    config_from_args,
    read_program_arg,
    timing_only_of,
)
from .testbench_args import add_machine_args, build_case, case_params_and_config, get_testbench

if TYPE_CHECKING:
    from isa.program import Program
    from plena_sim.config import HardwareConfig as Config
    from plena_sim.faults import SimFault
    from plena_sim.machine import RunResult

__all__ = ["add_source_args", "check_source_args", "run_source", "SourceRun", "fault_row"]


def add_source_args(p: argparse.ArgumentParser) -> None:
    """``PROGRAM`` | ``--testbench NAME [--case ID]``, ``--set``, the machine, memory inputs, backend, budget."""
    p.add_argument("program", metavar="PROGRAM", nargs="?", help=".asm or .mem program")
    p.add_argument("--testbench", metavar="NAME", help="a testbench's program instead of a program file")
    p.add_argument("--case", metavar="ID", help="a required/stretch case id of --testbench")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="testbench parameter with --testbench, else a CONFIG key override (repeatable)",
    )
    add_machine_args(p, "hardware variant of --testbench")
    add_memory_args(p)
    add_backend_arg(p)
    add_budget_arg(p)
    add_max_program_arg(p)
    add_timeout_arg(p)


def check_source_args(args: argparse.Namespace) -> None:
    """Exactly one of PROGRAM and ``--testbench``; memory inputs only with a PROGRAM."""
    if (args.program is None) == (args.testbench is None):
        raise UsageError(f"{args.command}: give exactly one of PROGRAM or --testbench NAME")
    memory = memory_inputs_given(args)
    if args.testbench and memory:
        raise UsageError(f"{', '.join(memory)}: the inputs of a PROGRAM, not of --testbench (it builds its own)")
    case_flags = {"--case": args.case, "--mutation": args.mutation, "--seed": args.seed, "--variant": args.variant}
    given = [flag for flag, value in case_flags.items() if value is not None]
    if args.program is not None and given:
        raise UsageError(f"{', '.join(given)}: options of --testbench NAME, not of a PROGRAM")


@dataclass
class SourceRun:
    """One run of a program file or a testbench's program: its result, its program and a title naming it."""

    result: RunResult
    program: Program
    title: str
    cfg: Config


def run_source(args: argparse.Namespace, trace: int = 0, check: Callable[[Config], None] | None = None) -> SourceRun:
    """Run what the arguments name (``trace``: the trace ring's capacity, 0 none), faults returned, not raised;
    ``check(cfg)`` is called with the machine's config before the run (it raises UsageError on a bad flag)."""
    check = check or (lambda _cfg: None)
    return _run_testbench(args, trace, check) if args.testbench else _run_program(args, trace, check)


def _run_program(args: argparse.Namespace, trace: int, check: Callable[[Config], None]) -> SourceRun:
    args.set = list(args.set or []) + list(args.set_hw or [])
    cfg = config_from_args(args)
    check(cfg)
    prog = read_program_arg(args.program, args.max_program)
    m = loaded_machine(args, cfg)
    res = m.run(prog, max_instructions=args.max_instructions, raise_on_fault=False, trace=trace)
    return SourceRun(res, prog, f"{args.program} ({_mode(args)})", cfg)


def _run_testbench(args: argparse.Namespace, trace: int, check: Callable[[Config], None]) -> SourceRun:
    from testbenches.harness import prepare_machine

    mod = get_testbench(args.testbench)
    params, cfg = case_params_and_config(mod, args.testbench, args)
    check(cfg)
    functional, routing = timing_only_of(args)
    case = build_case(mod, args.testbench, params, cfg, args, functional)
    prog = case.assembled()
    m = prepare_machine(case, args.backend)
    res = m.run(
        prog,
        max_instructions=args.max_instructions or case.max_instructions,
        trace=trace,
        raise_on_fault=False,
        name=f"{case.testbench}.asm",
        timing=args.timing,
        functional=functional,
        routing=routing,
    )
    return SourceRun(res, prog, f"{args.testbench} [{case.case_id}] ({_mode(args)})", cfg)


def _mode(args: argparse.Namespace) -> str:
    """The run's timing model, and ``timing-only`` when it is."""
    return f"{args.timing}, timing-only" if getattr(args, "timing_only", False) else args.timing


def fault_row(fault: SimFault | dict[str, Any]) -> dict[str, Any]:
    """The faulting instruction as a row of a trace: pc, source line number, text, rule and the message (from the
    fault or its ``to_dict()``, as a testbench report holds it)."""
    d = fault if isinstance(fault, dict) else fault.to_dict()
    tail = str(d.get("line", "")).rpartition(":")[2]
    line = int(tail) if tail.isdigit() else None
    message = f"{d.get('detail')} [{d.get('rule')}]"
    return {"pc": d.get("pc"), "line": line, "text": d.get("text"), "rule": d.get("rule"), "message": message}
