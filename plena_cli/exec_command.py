"""``plena-sim exec``: run a program (.asm or .mem) with raw memory images, dump memories, print statistics."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from .errors import EXIT_FAULT, EXIT_OK, UsageError
from .interrupts import add_timeout_arg
from .machine_inputs import add_memory_args, input_files, loaded_machine
from .options import (
    add_backend_arg,
    add_budget_arg,
    add_config_args,
    add_max_program_arg,
    add_timing_arg,
    config_from_args,
    dump_specs,
    examples,
    read_program_arg,
)
from .paths import distinct_outputs, out_path, save_npy, write_hbm_dump
from .render import compile_core, print_fault, print_json, print_plain, run_summary, upstream_lines, warn, wrote

if TYPE_CHECKING:
    from rich.console import Console

    from plena_sim.config import HardwareConfig
    from plena_sim.machine import Machine

__all__ = ["register", "cmd_exec"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = sub.add_parser(
        "exec",
        help="run a program (.asm or .mem) with raw memory images",
        **examples(
            "plena-sim exec kernel.asm --hbm weights.bin --fp 1.0,0.5",
            "plena-sim exec kernel.mem --hw small --dump-vram 0:4=out.npy --json",
            "plena-sim exec kernel.asm --timing overlap --max-instructions 1000000",
        ),
    )
    e.add_argument("program", metavar="PROGRAM")
    add_config_args(e)
    add_backend_arg(e)
    add_memory_args(e)
    e.add_argument("--dump-vram", action="append", metavar="ADDR:ROWS=OUT.npy", help="save VRAM rows")
    e.add_argument("--dump-fp-sram", metavar="OUT.npy", help="save FP SRAM (float32)")
    e.add_argument("--dump-hbm", action="append", metavar="ADDR:LEN=OUT.bin", help="save HBM bytes")
    add_budget_arg(e)
    add_max_program_arg(e)
    add_timeout_arg(e)
    add_timing_arg(e)
    e.add_argument("--json", action="store_true", help="print one JSON object (run statistics)")
    e.set_defaults(func=cmd_exec)


@dataclass
class _Dumps:
    """The memory dumps asked for, validated against the machine before anything runs."""

    vram: list[tuple[int, int, Path]]
    hbm: list[tuple[int, int, Path]]
    fp_sram: Path | None


def cmd_exec(args: argparse.Namespace, out: Console, err: Console) -> int:
    cfg = config_from_args(args)
    prog = read_program_arg(args.program, args.max_program)
    dumps = _dumps(args, cfg)
    m = loaded_machine(args, cfg)
    compile_core(err, args.json)
    loaded_end = m.state.hbm.high_water
    res = m.run(prog, max_instructions=args.max_instructions, raise_on_fault=False)
    unwritten = m.state.hbm.unwritten_read
    if unwritten is not None:
        warn(err, _unwritten_text(unwritten, loaded_end))
    _write_dumps(m, dumps)  # even after a fault (post-mortem), each atomically
    for path in [p for _a, _n, p in dumps.vram + dumps.hbm] + ([dumps.fp_sram] if dumps.fp_sram else []):
        wrote(err, path)
    fault = res.fault
    faulted = fault is not None
    if fault is not None:  # the fault is the headline; statistics are partial
        print_fault(err, str(fault))
    if args.json:
        doc = dict(
            res.stats,
            program=str(args.program),
            partial=faulted,
            fault=dict(fault.to_dict(), message=str(fault)) if fault is not None else None,
            hbm_unwritten_read=unwritten,
        )
        print_json(out, doc, sort_keys=True)
    else:
        title = (
            f"plena-sim exec {args.program}: partial statistics (faulted at pc {fault.pc}, not retired)"
            if fault is not None
            else f"plena-sim exec {args.program}"
        )
        run_summary(res, out, escape(title))
    if not faulted:  # with --json the upstream lines go to stderr
        print_plain(err if args.json else out, upstream_lines(res.stats))
    return EXIT_FAULT if faulted else EXIT_OK


def _unwritten_text(addr: int, loaded_end: int) -> str:
    """The warning of a run whose DMA read HBM bytes that nothing wrote (they read as 0)."""
    loaded = f"the images loaded end at {loaded_end:#x}" if loaded_end else "no --hbm image was loaded"
    return (
        f"the program read HBM byte {addr:#x}, which no --hbm image or store wrote: it read as 0 ({loaded}; "
        "this is the first such read)"
    )


def _dumps(args: argparse.Namespace, cfg: HardwareConfig) -> _Dumps:
    d = _Dumps(
        vram=dump_specs(args.dump_vram, "--dump-vram", "ADDR:ROWS=OUT.npy"),
        hbm=dump_specs(args.dump_hbm, "--dump-hbm", "ADDR:LEN=OUT.bin"),
        fp_sram=out_path(args.dump_fp_sram, "--dump-fp-sram") if args.dump_fp_sram is not None else None,
    )
    outputs = [("--dump-vram", p) for _a, _n, p in d.vram] + [("--dump-hbm", p) for _a, _n, p in d.hbm]
    if outputs + ([("--dump-fp-sram", d.fp_sram)] if d.fp_sram else []) and getattr(args, "timing_only", False):
        raise UsageError("--dump-*: a timing-only run computes no data (VRAM, HBM and FP SRAM keep their inputs)")
    distinct_outputs(outputs + ([("--dump-fp-sram", d.fp_sram)] if d.fp_sram else []), input_files(args))
    for addr, rows, _ in d.vram:
        if addr % cfg.VLEN or addr // cfg.VLEN + rows > cfg.VECTOR_SRAM_SIZE:
            raise UsageError(
                f"--dump-vram: rows [{addr}, +{rows}) are not whole VRAM rows inside "
                f"VECTOR_SRAM_SIZE={cfg.VECTOR_SRAM_SIZE} (VLEN={cfg.VLEN})"
            )
    for addr, n, _ in d.hbm:
        if addr + n > cfg.HBM_SIZE:
            raise UsageError(f"--dump-hbm: [{addr}, +{n}) exceeds HBM_SIZE={cfg.HBM_SIZE}")
    return d


def _write_dumps(m: Machine, dumps: _Dumps) -> None:
    import numpy as np

    for addr, rows, path in dumps.vram:
        save_npy(path, m.vram.read(addr, rows), "--dump-vram")
    for addr, n, path in dumps.hbm:
        write_hbm_dump(path, m.hbm, addr, n)
    if dumps.fp_sram is not None:
        save_npy(dumps.fp_sram, np.asarray(m.fp_sram, dtype=np.float32), "--dump-fp-sram")
