"""Flags shared by several commands and the parsing of their values (a bad value is a UsageError)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .paths import out_path

if TYPE_CHECKING:
    from isa.program import Program
    from plena_sim.config import HardwareConfig
    from plena_sim.routing import Routing

__all__ = [
    "add_hw_arg",
    "add_config_args",
    "add_allow_unknown_arg",
    "add_max_program_arg",
    "read_program_arg",
    "add_backend_arg",
    "add_timing_arg",
    "timing_only_of",
    "config_from_args",
    "int_arg",
    "split_spec",
    "dump_specs",
    "add_budget_arg",
    "add_capacity_arg",
    "MAX_CAPACITY",
    "examples",
]

#: the largest ``--capacity`` (trace records; each is 160 bytes of host memory)
MAX_CAPACITY = 1 << 32

TIMING_HELP = "cycle accounting (timing.md §3 serial / §4 overlap scoreboard / docs/timing.md rtl: RTL-calibrated)"
#: the timing models (plena_sim.timing.scoreboard.TIMING_MODES; repeated here: importing that module loads numba)
TIMING_CHOICES = ("serial", "overlap", "rtl")


def examples(*lines: str) -> dict[str, Any]:
    """``add_parser`` keywords giving a command's ``--help`` an ``examples:`` section (``lines`` kept as written)."""
    return {
        "epilog": "examples:\n" + "\n".join(f"  {line}" for line in lines),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def add_hw_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hw",
        metavar="NAME",
        default=None,
        help="hardware preset (plena-sim hw lists them; default: the reference machine)",
    )


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``--hw``, ``--config``/``--settings``, ``--section``/``--mode`` and ``--set KEY=VALUE`` (CONFIG keys)."""
    add_hw_arg(p)
    p.add_argument(
        "--config",
        "--settings",
        dest="config",
        metavar="FILE",
        help="plena_settings.toml (default: $PLENA_SETTINGS_TOML, else the built-in reference file)",
    )
    p.add_argument(
        "--section",
        "--mode",
        dest="section",
        default="TRANSACTIONAL",
        help="TOML section to read (default TRANSACTIONAL; e.g. ANALYTIC)",
    )
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one CONFIG key (repeatable)")
    add_allow_unknown_arg(p)


def add_allow_unknown_arg(p: argparse.ArgumentParser) -> None:
    """``--allow-unknown-keys``: the escape hatch of the strict config reader (README: Configuration)."""
    p.add_argument(
        "--allow-unknown-keys",
        action="store_true",
        help="ignore (not refuse) keys of the config file that the simulator does not read (upstream files "
        "with extra sections)",
    )


def _program_limit(text: str) -> int:
    v = int_arg(text, "--max-program")
    if v < 1:
        raise UsageError(f"--max-program: {text!r} must be >= 1")
    return v


def add_max_program_arg(p: argparse.ArgumentParser) -> None:
    """``--max-program N``: the most instructions a program file may hold (default 2^26)."""
    from isa.readers import MAX_PROGRAM_WORDS

    p.add_argument(
        "--max-program",
        type=_program_limit,
        default=MAX_PROGRAM_WORDS,
        metavar="N",
        help=f"most instructions a program file may hold (default 2^26 = {MAX_PROGRAM_WORDS})",
    )


def read_program_arg(path: str, max_words: int) -> Program:
    """The program of a command's PROGRAM argument (a missing file is a UsageError; the reader refuses a file
    that is not a regular file, larger than 1 GiB or of more than ``max_words`` instructions)."""
    from isa import read_program

    if not os.path.lexists(path):
        raise UsageError(f"no such file: {path}")
    return read_program(path, max_words=max_words)


def add_backend_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=("numba", "reference"), default="numba")


def add_timing_arg(
    p: argparse.ArgumentParser, help_text: str | None = TIMING_HELP, *, timing_only: bool = True
) -> None:
    """``--timing``; with ``timing_only`` also ``--timing-only`` and ``--routing`` (:func:`timing_only_of`)."""
    p.add_argument("--timing", choices=TIMING_CHOICES, default="serial", help=help_text)
    if not timing_only:
        return
    p.add_argument(
        "--timing-only",
        action="store_true",
        help="execute the control and address side only: the same cycles and statistics, no datapath "
        "arithmetic, no inputs built where the testbench can avoid it, nothing judged (docs/timing-only.md)",
    )
    p.add_argument(
        "--routing",
        metavar="POLICY",
        help="with --timing-only: the experts a V_TOPK selects (uniform, round-robin, or a FILE of one row of "
        "expert ids per V_TOPK); stated as an assumption in every output",
    )


def timing_only_of(args: argparse.Namespace) -> tuple[bool, Routing | None]:
    """(functional, routing) of ``--timing-only`` / ``--routing`` (a bad routing or --routing without
    --timing-only is a UsageError)."""
    from plena_sim.routing import load_routing

    timing_only = bool(getattr(args, "timing_only", False))
    spec = getattr(args, "routing", None)
    if spec is None:
        return not timing_only, None
    if not timing_only:
        raise UsageError("--routing: only with --timing-only (a functional run computes the routing)")
    try:
        return False, load_routing(spec)
    except ValueError as exc:
        raise UsageError(f"--routing: {exc}") from None


def config_from_args(args: argparse.Namespace) -> HardwareConfig:
    """The :class:`~plena_sim.config.HardwareConfig` of :func:`add_config_args`' flags."""
    from plena_sim.config import parse_override
    from plena_sim.config.presets import resolve_config

    overrides = dict(parse_override(s) for s in (args.set or []))
    return resolve_config(
        args.config,
        hw=args.hw,
        section=args.section,
        overrides=overrides,
        allow_unknown=bool(getattr(args, "allow_unknown_keys", False)),
    )


def int_arg(text: str, what: str) -> int:
    """A non-negative integer flag value (decimal or 0x hex, ``_`` separators allowed)."""
    try:
        v = int(text.replace("_", ""), 0)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not an integer (decimal or 0x hex)") from None
    if v < 0:
        raise UsageError(f"{what}: {text!r} must be >= 0")
    return v


def split_spec(spec: str, what: str, form: str) -> tuple[str, str]:
    """``LEFT=RIGHT`` -> ``(LEFT, RIGHT)``, both non-empty (``form`` names the expected shape)."""
    left, sep, right = spec.partition("=")
    if not sep or not left or not right:
        raise UsageError(f"{what}: {spec!r} must look like {form}")
    return left, right


def dump_specs(specs: list[str] | None, flag: str, form: str) -> list[tuple[int, int, Path]]:
    """Parse ``ADDR:COUNT=PATH`` dump options (validated, paths checked, before anything runs)."""
    parsed: list[tuple[int, int, Path]] = []
    names = form.split("=")[0].split(":")
    for spec in specs or []:
        left, path = split_spec(spec, flag, form)
        a, sep, n = left.partition(":")
        if not sep:
            raise UsageError(f"{flag}: {spec!r} must look like {form}")
        parsed.append((int_arg(a, f"{flag} {names[0]}"), int_arg(n, f"{flag} {names[1]}"), out_path(path, flag)))
    return parsed


def _budget(text: str) -> int:
    from plena_sim.limits.budget import MAX_BUDGET

    value = int_arg(text, "--max-instructions")
    if value > MAX_BUDGET:
        raise UsageError(f"--max-instructions: {text!r} is more than the largest budget 2^63-1 ({MAX_BUDGET})")
    return value


def _capacity(text: str) -> int:
    value = int_arg(text, "--capacity")
    if not 0 < value <= MAX_CAPACITY:
        raise UsageError(f"--capacity: {value} must be > 0 and at most 2^32 ({MAX_CAPACITY}) records")
    return value


def add_capacity_arg(p: argparse.ArgumentParser) -> None:
    """``--capacity N``: the trace ring's records (the newest N instructions are kept), 0 < N <= 2^32."""
    p.add_argument(
        "--capacity",
        type=_capacity,
        default=1 << 16,
        metavar="N",
        help="trace ring capacity: the newest N instructions are kept (default 65536; a truncated trace says so)",
    )


def add_budget_arg(p: argparse.ArgumentParser) -> None:
    """``--max-instructions N``: the run's work budget (plena_sim.limits.budget), 0 <= N <= 2^63-1."""
    p.add_argument(
        "--max-instructions",
        type=_budget,
        default=None,
        metavar="N",
        help="work budget (default 10^9): each instruction, each DMA row and each 4096 matrix MACs count one",
    )
