"""A testbench, its parameters and its machine from the command line (``run`` and ``trace --testbench``).

Parameters: the testbench's defaults, then ``--case``'s overrides, then ``--set KEY=VALUE`` (type-checked
against the default), then ``--seed``; shapes in machine units are resolved on the machine. Machine:
``--config FILE`` (with ``--section``), else ``--variant`` (default: the case's) on ``--hw``; then
``--set-hw KEY=VALUE``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .options import add_allow_unknown_arg, add_hw_arg

if TYPE_CHECKING:
    from plena_sim.config import HardwareConfig
    from testbenches.harness import Case

__all__ = ["add_machine_args", "get_testbench", "case_params_and_config", "build_case", "parse_param_value"]


def add_machine_args(p: argparse.ArgumentParser, variant_help: str) -> None:
    """``--variant``, ``--hw``, ``--config``/``--settings``, ``--section``, ``--set-hw`` and ``--seed``."""
    p.add_argument("--variant", default=None, help=variant_help)
    add_hw_arg(p)
    p.add_argument("--config", "--settings", dest="config", metavar="FILE", help="hardware config file")
    p.add_argument("--section", default="TRANSACTIONAL", help="TOML section of --config")
    p.add_argument("--set-hw", action="append", metavar="KEY=VALUE", help="override one hardware key")
    add_allow_unknown_arg(p)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--mutation",
        metavar="NAME",
        help="generate the program with this codegen bug of `plena-sim mutants` injected (to study a failure)",
    )


def get_testbench(name: str) -> ModuleType:
    """The module of testbench ``name`` (UsageError naming the valid ones)."""
    import testbenches

    if name not in testbenches.names():
        raise UsageError(f"unknown testbench {name!r} (valid: {', '.join(testbenches.names())})")
    return testbenches.get(name)


def case_params_and_config(
    mod: ModuleType, name: str, args: argparse.Namespace
) -> tuple[dict[str, Any], HardwareConfig]:
    """Parameters (defaults, then ``--case`` overrides, ``--set``, ``--seed``) and the hardware config
    (``--case``'s variant unless ``--variant``/``--config`` is given; then ``--set-hw``). Sets
    ``args.variant`` to the variant used."""
    from testbenches.shapes import resolve_params

    params = dict(mod.DEFAULTS)
    if args.case:
        overrides, variant = _case(mod, name, args)
        params.update(overrides)
        args.variant = variant
    cfg = _testbench_config(args)
    try:
        params = resolve_params(_testbench_params(mod, params, args.set, args.seed), cfg)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None
    return params, cfg


def build_case(
    mod: ModuleType, name: str, params: dict[str, Any], cfg: HardwareConfig, args: argparse.Namespace
) -> Case:
    """``mod.build(params, cfg)`` labelled with ``--case`` and the variant (a plan error is a UsageError; an invalid
    instruction the generator emitted, :class:`~programs.asm.GeneratorError`, goes on to the error boundary)."""
    from programs.asm import GeneratorError

    try:
        with _mutation(getattr(args, "mutation", None)):
            case = mod.build(params, cfg)
    except GeneratorError:
        raise
    except (ValueError, AssertionError, KeyError) as exc:
        raise UsageError(f"{name}: unsupported parameters: {exc}") from None
    # the label: the --case id; "default" for the testbench's defaults; "custom" once --set / --seed change them
    changed = bool(getattr(args, "set", None)) or getattr(args, "seed", None) is not None
    case.case_id = args.case or ("custom" if changed else "default")
    if getattr(args, "mutation", None):
        case.case_id += f":{args.mutation}"
    case.variant = args.variant or ""
    return case


def _mutation(name: str | None) -> contextlib.AbstractContextManager[None]:
    """``--mutation NAME``: the generators run with that codegen bug injected (UsageError naming the valid ones)."""
    if name is None:
        return contextlib.nullcontext()
    from programs import mutation_hooks
    from testbenches.mutations import MUTATIONS

    if name not in MUTATIONS:
        raise UsageError(f"--mutation: unknown mutation {name!r} (valid: {', '.join(MUTATIONS)})")
    return mutation_hooks.inject(name)


def _case(mod: ModuleType, name: str, args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """``--case``'s parameter overrides and the variant to use (``--variant``/``--config`` win; ``--hw``
    replaces a case's own machine)."""
    from testbenches.harness import cases_of
    from testbenches.variants import fixes_machine

    cases = cases_of(mod)
    if args.case not in cases:
        raise UsageError(f"--case: unknown case {args.case!r} of {name} (valid: {', '.join(cases)})")
    _, overrides, case_variant = cases[args.case]
    variant = args.variant
    if variant is None and not args.config:
        variant = case_variant
        if args.hw is not None and fixes_machine(variant):
            variant = "default"
    return overrides, variant


def parse_param_value(text: str) -> bool | int | float | str | None:
    """A ``--set`` value: true/false, none, int, float, else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text.replace("_", "")) if conv is int else conv(text)
        except ValueError:
            pass
    return text.strip()


def _testbench_params(
    mod: ModuleType, base: dict[str, Any], sets: list[str] | None, seed: int | None
) -> dict[str, Any]:
    """``base`` (defaults + case overrides) with the ``--set`` values and ``--seed`` applied, type-checked."""
    params = dict(base)
    for spec in sets or []:
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set: {spec!r} must look like KEY=VALUE")
        if key not in mod.DEFAULTS:
            raise UsageError(
                f"--set: unknown parameter {key!r} of {mod.__name__.rsplit('.', 1)[-1]} "
                f"(valid: {', '.join(mod.DEFAULTS)})"
            )
        params[key] = _checked_value(key, value, mod.DEFAULTS[key])
    if seed is not None:
        params["seed"] = seed
    return params


def _checked_value(key: str, text: str, default: object) -> bool | int | float | str | None:
    """The ``--set`` value ``text`` of parameter ``key``, of the type of its default."""
    from testbenches.shapes import Hw

    v = parse_param_value(text)
    if isinstance(default, Hw):
        default = 0  # a shape in machine units: an integer
    if isinstance(default, bool) and not isinstance(v, bool):
        raise UsageError(f"--set {key}: expected true or false, got {text!r}")
    if isinstance(default, int) and not isinstance(default, bool) and not isinstance(v, int):
        raise UsageError(f"--set {key}: expected an integer, got {text!r}")
    if isinstance(v, int) and not isinstance(v, bool) and v < 0:
        raise UsageError(f"--set {key}: must be >= 0, got {v}")
    if isinstance(v, float) and not math.isfinite(v):  # nan compares unequal to itself: a vacuous PASS
        raise UsageError(f"--set {key}: expected a finite number, got {text!r}")
    return v


def _testbench_config(args: argparse.Namespace) -> HardwareConfig:
    from plena_sim.config import inconsistency_message, parse_override

    hw = dict(parse_override(s) for s in (args.set_hw or []))
    cfg = _config_file(args, hw) if args.config else _variant_config(args, hw)
    if hw:
        msg = inconsistency_message(cfg, dict(hw))
        if msg is not None:
            raise UsageError(f"--set-hw {msg}")
    return cfg


def _config_file(args: argparse.Namespace, hw: dict[str, Any]) -> HardwareConfig:
    from plena_sim.config import load_config

    if args.variant not in (None, "default"):
        raise UsageError("--config and --variant are mutually exclusive")
    if args.hw is not None:
        raise UsageError("--config and --hw are mutually exclusive (a preset is a whole machine)")
    return load_config(args.config, section=args.section, overrides=hw, allow_unknown=args.allow_unknown_keys)


def _variant_config(args: argparse.Namespace, hw: dict[str, Any]) -> HardwareConfig:
    from testbenches.variants import get_config, variant_names

    variant = args.variant or "default"
    if variant not in variant_names():
        raise UsageError(f"--variant: unknown variant {variant!r} (valid: {', '.join(variant_names())})")
    try:
        return get_config(variant, hw or None, hw=args.hw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
