"""The memory inputs of a program run (``exec``, ``trace`` / ``profile PROGRAM``): HBM images, FP / INT SRAM
preloads, VRAM rows.

``--hbm FILE`` (at address 0), ``--hbm-at ADDR=FILE`` (repeatable), ``--fp-sram FILE`` (f16), ``--fp V1,V2,...``
or ``--fp-sram-bits FILE`` (bf16 bit patterns), ``--int-sram FILE`` and ``--vram-at ROW=FILE`` (bf16 bit
patterns, repeatable): :func:`add_memory_args` registers them, :func:`loaded_machine` builds the
:class:`~plena_sim.machine.Machine` with them in place.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .errors import UsageError
from .options import int_arg, split_spec, timing_only_of

if TYPE_CHECKING:
    from plena_sim.config import HardwareConfig
    from plena_sim.machine import Machine

__all__ = ["add_memory_args", "memory_inputs_given", "input_files", "loaded_machine", "MEMORY_FLAGS"]

#: the flags of :func:`add_memory_args` (their ``args`` attribute names)
MEMORY_FLAGS = ("hbm", "hbm_at", "fp_sram", "fp", "fp_sram_bits", "int_sram", "vram_at")


def add_memory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hbm", metavar="FILE", help="raw HBM image placed at address 0")
    p.add_argument("--hbm-at", action="append", metavar="ADDR=FILE", help="raw image at ADDR (repeatable)")
    p.add_argument("--fp-sram", metavar="FILE", help="FP SRAM preload (upstream f16 little-endian)")
    p.add_argument("--fp", metavar="V1,V2,...", help="FP SRAM preload values (rounded to bf16)")
    p.add_argument("--fp-sram-bits", metavar="FILE", help="FP SRAM preload as bf16 bit patterns (u16 LE, exact)")
    p.add_argument("--int-sram", metavar="FILE", help="INT SRAM preload (u32 little-endian)")
    p.add_argument(
        "--vram-at", action="append", metavar="ROW=FILE", help="VRAM rows from ROW: bf16 bit patterns (u16 LE)"
    )


def memory_inputs_given(args: argparse.Namespace) -> list[str]:
    """The memory flags given on the command line (as ``--flag``)."""
    return ["--" + f.replace("_", "-") for f in MEMORY_FLAGS if getattr(args, f, None) is not None]


def input_files(args: argparse.Namespace) -> list[str | None]:
    """Every file a program run reads (an output must not be one of them)."""
    images = [spec.partition("=")[2] for spec in (args.hbm_at or []) + (args.vram_at or [])]
    return [args.program, args.hbm, args.fp_sram, args.fp_sram_bits, args.int_sram, args.config, *images]


def loaded_machine(args: argparse.Namespace, cfg: HardwareConfig) -> Machine:
    """A Machine with the HBM images, the SRAM preloads and the VRAM rows of the command line."""
    from plena_sim.machine import Machine
    from plena_sim.memory.image import load_raw_image
    from plena_sim.memory.sram_io import (
        fp_sram_from_values,
        load_bf16_words_file,
        load_fp_sram_file,
        load_int_sram_file,
    )

    functional, routing = timing_only_of(args)
    m = Machine(cfg, backend=args.backend, timing=args.timing, functional=functional, routing=routing)
    placed = [(0, args.hbm)] if args.hbm else []
    for spec in args.hbm_at or []:
        a, path = split_spec(spec, "--hbm-at", "ADDR=FILE")
        placed.append((int_arg(a, "--hbm-at ADDR"), path))
    for base, path in placed:
        load_raw_image(path, m.hbm, base)
    fp_given = [
        f for f, v in (("--fp-sram", args.fp_sram), ("--fp", args.fp), ("--fp-sram-bits", args.fp_sram_bits)) if v
    ]
    if len(fp_given) > 1:
        raise UsageError(f"{' and '.join(fp_given)} are mutually exclusive (one FP SRAM preload)")
    if args.fp_sram:
        m.fp_sram.bits[:] = load_fp_sram_file(args.fp_sram, cfg.FP_SRAM_SIZE)
    if args.fp is not None:
        m.fp_sram.bits[:] = fp_sram_from_values(_fp_values(args.fp), cfg.FP_SRAM_SIZE)
    if args.fp_sram_bits:
        words = load_bf16_words_file(args.fp_sram_bits, cfg.FP_SRAM_SIZE)
        m.fp_sram.bits[:] = 0
        m.fp_sram.bits[: words.size] = words
    if args.int_sram:
        m.int_sram[:] = load_int_sram_file(args.int_sram, cfg.INT_SRAM_SIZE)
    for spec in args.vram_at or []:
        _load_vram_rows(m, spec)
    return m


def _load_vram_rows(m: Machine, spec: str) -> None:
    """``--vram-at ROW=FILE``: whole VRAM rows of bf16 bit patterns from row ROW."""
    from plena_sim.memory.sram_io import load_bf16_words_file

    row_text, path = split_spec(spec, "--vram-at", "ROW=FILE")
    row, vlen, rows_total = int_arg(row_text, "--vram-at ROW"), m.cfg.VLEN, m.cfg.VECTOR_SRAM_SIZE
    if row >= rows_total:
        raise UsageError(f"--vram-at: row {row} is outside VECTOR_SRAM_SIZE={rows_total} rows")
    words = load_bf16_words_file(path, (rows_total - row) * vlen, "VRAM")
    if words.size % vlen:
        raise UsageError(f"--vram-at: {path} holds {words.size} words, not whole rows of VLEN={vlen}")
    m.vram.bits[row : row + words.size // vlen] = words.reshape(-1, vlen)


def _fp_values(text: str) -> list[float]:
    items = text.split(",")
    if any(not v.strip() for v in items):
        raise UsageError(f"--fp: {text!r} has an empty item (give V1,V2,... with a number between every comma)")
    try:
        return [float(v) for v in items]
    except ValueError:
        raise UsageError(f"--fp: {text!r} is not a comma-separated list of numbers") from None
