"""One testbench case as ``plena-sim run NAME ... --json`` runs it: a :class:`CaseRequest` (the run command's
flags, as values), its parameters and machine, the case built, run through the harness and judged, and its JSON
document (:func:`studies.documents.result_json`).

Parameters: the testbench's defaults, then the case's overrides, then the ``set`` ``KEY=VALUE`` texts
(type-checked against the default), then the seed; shapes in machine units are resolved on the machine.
Machine: a config file (``config``, with ``section``), else the ``variant`` (default: the case's) on the
hardware preset ``hw``; then the ``set_hw`` ``KEY=VALUE`` keys. A request that cannot be met is a
:class:`~studies.errors.CaseError` naming the flag of the same name and the value.

:func:`run_case` runs a resolved case (the command line wraps it with its progress display, ``--save`` and the
trace outputs); :func:`run_json` is the whole of ``run --json`` for a caller that wants only the judged run (a
sweep's worker, :mod:`studies.sweep.point`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .documents import result_json, tolerance_info
from .errors import CaseError

if TYPE_CHECKING:
    from plena_sim.config import HardwareConfig
    from plena_sim.routing import Routing
    from testbenches.harness import Case, Report

__all__ = [
    "CaseRequest",
    "CaseRun",
    "get_testbench",
    "case_params_and_config",
    "build_case",
    "run_case",
    "run_json",
    "parse_param_value",
]


@dataclass
class CaseRequest:
    """What ``plena-sim run TESTBENCH`` is asked for, each field the value of the flag of its name (``set`` and
    ``set_hw``: the ``KEY=VALUE`` texts of the repeated ``--set`` / ``--set-hw``). :func:`case_params_and_config`
    sets ``variant`` to the variant it used."""

    testbench: str
    case: str | None = None
    set: list[str] = field(default_factory=list)
    variant: str | None = None
    hw: str | None = None
    config: str | None = None
    section: str = "TRANSACTIONAL"
    set_hw: list[str] = field(default_factory=list)
    allow_unknown_keys: bool = False
    seed: int | None = None
    mutation: str | None = None


@dataclass
class CaseRun:
    """One built, run and judged case: the case, the harness's report and the run's JSON document."""

    case: Case
    report: Report
    doc: dict[str, Any]


def get_testbench(name: str) -> ModuleType:
    """The module of testbench ``name`` (CaseError naming the valid ones)."""
    import testbenches

    if name not in testbenches.names():
        raise CaseError(f"unknown testbench {name!r} (valid: {', '.join(testbenches.names())})")
    return testbenches.get(name)


def case_params_and_config(mod: ModuleType, req: CaseRequest) -> tuple[dict[str, Any], HardwareConfig]:
    """Parameters (defaults, then ``case`` overrides, ``set``, ``seed``) and the hardware config (``case``'s
    variant unless ``variant``/``config`` is given; then ``set_hw``). Sets ``req.variant`` to the variant used."""
    from testbenches.shapes import resolve_params

    params = dict(mod.DEFAULTS)
    if req.case:
        overrides, variant = _case(mod, req)
        params.update(overrides)
        req.variant = variant
    cfg = _testbench_config(req)
    try:
        params = resolve_params(_testbench_params(mod, params, req.set, req.seed), cfg)
    except ValueError as exc:
        raise CaseError(f"{req.testbench}: {exc}") from None
    return params, cfg


def build_case(
    mod: ModuleType, params: dict[str, Any], cfg: HardwareConfig, req: CaseRequest, functional: bool = True
) -> Case:
    """``mod.build(params, cfg)`` labelled with the case id and the variant (a plan error is a CaseError; an
    invalid instruction the generator emitted, :class:`~programs.asm.GeneratorError`, is raised as it is); for a
    timing-only run (``functional=False``) the testbench's layout-only build when it has one."""
    from programs.asm import GeneratorError
    from testbenches.harness import build_for

    try:
        with _mutation(req.mutation):
            case = build_for(mod, params, cfg, functional)
    except GeneratorError:
        raise
    except (ValueError, AssertionError, KeyError) as exc:
        raise CaseError(f"{req.testbench}: unsupported parameters: {exc}") from None
    # the label: the case id; "default" for the testbench's defaults; "custom" once set / seed change them
    changed = bool(req.set) or req.seed is not None
    case.case_id = req.case or ("custom" if changed else "default")
    if req.mutation:
        case.case_id += f":{req.mutation}"
    case.variant = req.variant or ""
    return case


def run_case(
    mod: ModuleType,
    params: dict[str, Any],
    cfg: HardwareConfig,
    req: CaseRequest,
    *,
    backend: str = "numba",
    timing: str = "serial",
    trace: bool | int = False,
    keep_artifacts: bool = True,
    progress: Callable[[str], None] | None = None,
    functional: bool = True,
    routing: Routing | None = None,
) -> CaseRun:
    """Build, simulate and judge the case (``progress(text)`` is told when the build is done); its result
    document's ``wall_s`` is the wall time of all three. ``trace``: the trace ring's capacity (False: none);
    ``keep_artifacts``: the report keeps the run's files (:func:`testbenches.harness.run`). ``functional=False``:
    timing-only (``routing``: the MoE routing policy), nothing judged."""
    from testbenches.harness import run

    t0 = time.perf_counter()
    case = build_case(mod, params, cfg, req, functional)
    if progress is not None:
        progress("assemble + simulate + compare ..." if functional else "assemble + simulate (timing-only) ...")
    rep = run(
        case,
        backend=backend,
        timing=timing,
        trace=trace,
        keep_artifacts=keep_artifacts,
        functional=functional,
        routing=routing,
    )
    derived = {k: v for k, v in case.params.items() if k not in params}  # what the build derived (e.g. positions)
    doc = result_json(req.testbench, {**params, **derived}, cfg, rep, tolerance_info(case))
    doc["wall_s"] = time.perf_counter() - t0
    return CaseRun(case, rep, doc)


def run_json(
    req: CaseRequest,
    *,
    backend: str = "numba",
    timing: str = "serial",
    functional: bool = True,
    routing: Routing | None = None,
) -> CaseRun:
    """``plena-sim run ... --json`` without its outputs: the testbench and its case resolved, the simulator's
    compiled code loaded, the case built, run and judged (artifacts kept in memory, as the command keeps them)."""
    from plena_sim import core

    mod = get_testbench(req.testbench)
    params, cfg = case_params_and_config(mod, req)
    core.warm_up()
    return run_case(mod, params, cfg, req, backend=backend, timing=timing, functional=functional, routing=routing)


def _mutation(name: str | None) -> contextlib.AbstractContextManager[None]:
    """``mutation``: the generators run with that codegen bug injected (CaseError naming the valid ones)."""
    if name is None:
        return contextlib.nullcontext()
    from programs import mutation_hooks
    from testbenches.mutations import MUTATIONS

    if name not in MUTATIONS:
        raise CaseError(f"--mutation: unknown mutation {name!r} (valid: {', '.join(MUTATIONS)})")
    return mutation_hooks.inject(name)


def _case(mod: ModuleType, req: CaseRequest) -> tuple[dict[str, Any], str | None]:
    """``case``'s parameter overrides and the variant to use (``variant``/``config`` win; ``hw`` replaces a
    case's own machine)."""
    from testbenches.harness import cases_of
    from testbenches.variants import fixes_machine

    cases = cases_of(mod)
    if req.case not in cases:
        raise CaseError(f"--case: unknown case {req.case!r} of {req.testbench} (valid: {', '.join(cases)})")
    _, overrides, case_variant = cases[req.case]
    variant = req.variant
    if variant is None and not req.config:
        variant = case_variant
        if req.hw is not None and fixes_machine(variant):
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


def _testbench_params(mod: ModuleType, base: dict[str, Any], sets: list[str], seed: int | None) -> dict[str, Any]:
    """``base`` (defaults + case overrides) with the ``set`` values and ``seed`` applied, type-checked."""
    params = dict(base)
    for spec in sets:
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CaseError(f"--set: {spec!r} must look like KEY=VALUE")
        if key not in mod.DEFAULTS:
            raise CaseError(
                f"--set: unknown parameter {key!r} of {mod.__name__.rsplit('.', 1)[-1]} "
                f"(valid: {', '.join(mod.DEFAULTS)})"
            )
        params[key] = _checked_value(key, value, mod.DEFAULTS[key])
    if seed is not None:
        params["seed"] = seed
    return params


def _checked_value(key: str, text: str, default: object) -> bool | int | float | str | None:
    """The ``set`` value ``text`` of parameter ``key``, of the type of its default."""
    from testbenches.shapes import Hw

    v = parse_param_value(text)
    if isinstance(default, Hw):
        default = 0  # a shape in machine units: an integer
    if isinstance(default, bool) and not isinstance(v, bool):
        raise CaseError(f"--set {key}: expected true or false, got {text!r}")
    if isinstance(default, int) and not isinstance(default, bool) and not isinstance(v, int):
        raise CaseError(f"--set {key}: expected an integer, got {text!r}")
    if isinstance(v, int) and not isinstance(v, bool) and v < 0:
        raise CaseError(f"--set {key}: must be >= 0, got {v}")
    if isinstance(v, float) and not math.isfinite(v):  # nan compares unequal to itself: a vacuous PASS
        raise CaseError(f"--set {key}: expected a finite number, got {text!r}")
    return v


def _testbench_config(req: CaseRequest) -> HardwareConfig:
    from plena_sim.config import inconsistency_message, parse_override

    hw = dict(parse_override(s) for s in req.set_hw)
    cfg = _config_file(req, hw) if req.config else _variant_config(req, hw)
    if hw:
        msg = inconsistency_message(cfg, dict(hw))
        if msg is not None:
            raise CaseError(f"--set-hw {msg}")
    return cfg


def _config_file(req: CaseRequest, hw: dict[str, Any]) -> HardwareConfig:
    from plena_sim.config import load_config

    if req.variant not in (None, "default"):
        raise CaseError("--config and --variant are mutually exclusive")
    if req.hw is not None:
        raise CaseError("--config and --hw are mutually exclusive (a preset is a whole machine)")
    return load_config(req.config, section=req.section, overrides=hw, allow_unknown=req.allow_unknown_keys)


def _variant_config(req: CaseRequest, hw: dict[str, Any]) -> HardwareConfig:
    from testbenches.variants import get_config, variant_names

    variant = req.variant or "default"
    if variant not in variant_names():
        raise CaseError(f"--variant: unknown variant {variant!r} (valid: {', '.join(variant_names())})")
    try:
        return get_config(variant, hw or None, hw=req.hw)
    except ValueError as exc:
        raise CaseError(str(exc)) from None
