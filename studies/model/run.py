"""The model run: what it runs (:class:`ModelRun`, checked by :func:`prepare` before anything runs), the two
judged testbench runs and their JSON document (:func:`execute`), both in one call (:func:`run_model`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..documents import fault_json
from ..errors import ModelError
from .figures import clock_of, layer_figures, merge_regions, run_roofline

if TYPE_CHECKING:
    from plena_sim.routing import Routing
    from programs.model.presets import ModelPreset
    from testbenches.harness import Report

__all__ = ["PREFILL_TESTBENCH", "DECODE_TESTBENCH", "ModelRun", "load_model", "prepare", "execute", "run_model"]

#: the two runs of a model, in order
PHASES = ("prefill", "decode")
PREFILL_TESTBENCH = "decoder_layer"
DECODE_TESTBENCH = "decoder_decode"


def load_model(name_or_path: str) -> ModelPreset:
    """The model preset (its :class:`~programs.model.presets.ModelPresetError` is a ModelError, the same text)."""
    from programs.model.presets import ModelPresetError, load

    try:
        return load(name_or_path)
    except ModelPresetError as exc:
        raise ModelError(str(exc)) from None


@dataclass(frozen=True)
class ModelRun:
    """What a model run runs: the preset, the machine and every shape, defaults resolved."""

    preset: ModelPreset
    hw: str
    timing: str
    seq: int
    batch: int
    kv: int
    layers: int
    seed: int | None
    backend: str
    #: a timing-only run (issue 30): layout-only builds, no inputs, nothing judged
    timing_only: bool = False
    #: its MoE routing policy (a mixture-of-experts preset without one gets ``uniform``, stated in the output)
    routing: Routing | None = None
    #: which runs: the prefill layer, the decode step, or both (``--prefill-only`` / ``--decode-only``)
    phases: tuple[str, ...] = PHASES

    def testbench_params(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """``phase -> (testbench, parameters)``: the prefill layer and the decode step."""
        shapes = self.preset.layer_params() | ({} if self.seed is None else {"seed": self.seed})
        both = {
            "prefill": (PREFILL_TESTBENCH, {"batch": self.batch, "seq": self.seq, **shapes}),
            "decode": (DECODE_TESTBENCH, {"batch": self.batch, "kv": self.kv, **shapes}),
        }
        return {phase: both[phase] for phase in self.phases}


def prepare(
    model: ModelPreset | str,
    *,
    hw: str | None = None,
    timing: str = "serial",
    seq: int = 256,
    batch: int = 1,
    kv: int | None = None,
    layers: int | None = None,
    seed: int | None = None,
    backend: str = "numba",
    timing_only: bool = False,
    routing: Routing | None = None,
    phases: tuple[str, ...] = PHASES,
) -> ModelRun:
    """The run of ``model`` (a preset or its name/path) on hardware preset ``hw`` (default: the default
    preset), checked before anything runs: the preset, the machine and both testbenches with every
    parameter (a ModelError / ConfigError naming what is wrong). ``timing_only``: cycles without the datapath
    (a MoE preset's routing defaults to ``uniform``). ``phases``: the runs to make (a subset of :data:`PHASES`)."""
    from plena_sim.config.presets import DEFAULT_PRESET, preset_info

    preset = load_model(model) if isinstance(model, str) else model
    hw = hw or DEFAULT_PRESET
    preset_info(hw)  # an unknown preset: ConfigError naming the known ones
    kv = seq if kv is None else kv
    layers = preset.layers if layers is None else layers
    for key, value, lo in (("seq", seq, 1), ("batch", batch, 1), ("kv", kv, 0), ("layers", layers, 1)):
        if value < lo:
            raise ModelError(f"model: {key}={value} must be >= {lo}")
    if timing_only and routing is None and preset.experts:
        from plena_sim.routing import Routing

        routing = Routing("uniform")
    if not phases or any(p not in PHASES for p in phases):
        raise ModelError(f"model: phases {list(phases)} must be a non-empty subset of {list(PHASES)}")
    routing = routing if timing_only else None
    run = ModelRun(preset, hw, timing, seq, batch, kv, layers, seed, backend, timing_only, routing, tuple(phases))
    for tb, params in run.testbench_params().values():
        _check_params(preset, tb, params)
    return run


def run_model(
    model: ModelPreset | str,
    *,
    hw: str | None = None,
    timing: str = "serial",
    seq: int = 256,
    batch: int = 1,
    kv: int | None = None,
    layers: int | None = None,
    seed: int | None = None,
    backend: str = "numba",
    progress: Callable[[str], None] | None = None,
    timing_only: bool = False,
    routing: Routing | None = None,
    phases: tuple[str, ...] = PHASES,
) -> dict[str, Any]:
    """``execute(prepare(model, ...))``: the JSON document of ``plena-sim model --json`` (see :mod:`studies.model`;
    ``kv`` defaults to ``seq``, ``layers`` to the preset's)."""
    run = prepare(
        model,
        hw=hw,
        timing=timing,
        seq=seq,
        batch=batch,
        kv=kv,
        layers=layers,
        seed=seed,
        backend=backend,
        timing_only=timing_only,
        routing=routing,
        phases=phases,
    )
    return execute(run, progress=progress)


def execute(run: ModelRun, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run and judge the prefill layer and the decode step (``progress(text)`` is told before each); the JSON
    document of ``plena-sim model --json``. A shape the testbench refuses (a plan error) is a ModelError."""
    t0 = time.perf_counter()
    runs: dict[str, _Run] = {}
    for phase, (tb, params) in run.testbench_params().items():
        if progress is not None:
            progress(f"{run.preset.name}: {phase} ({tb}) on {run.hw} ...")
        runs[phase] = _judged_run(run, tb, params)
    pre, dec = (runs[p].report if p in runs else None for p in PHASES)
    clock_hz, clock_source = clock_of(run.hw)
    doc: dict[str, Any] = {
        "model": run.preset.name,
        "preset": run.preset.to_dict(),
        "verdict": _verdict([r.report for r in runs.values()]),
        "timing_only": run.timing_only,
        "routing": run.routing.label if run.routing is not None else None,
        "phases": list(run.phases),
        "hw": run.hw,
        "timing": run.timing,
        "backend": run.backend,
        "seq": run.seq,
        "batch": run.batch,
        "kv": run.kv,
        "layers": run.layers,
        "clock_hz": clock_hz,
        "clock_source": clock_source,
        "prefill_layer_cycles": None if pre is None else pre.cycles,
        "decode_layer_cycles": None if dec is None else dec.cycles,
        **layer_figures(run.layers, run.batch, _cycles(pre), _cycles(dec), clock_hz),
        "roofline": {p: run_roofline(runs[p].report.stats or {}, clock_hz) if p in runs else None for p in PHASES},
        "unvalidated_share": {p: _unvalidated_share(runs[p].report) if p in runs else None for p in PHASES},
        "decode_path": dec.plan_facts.get("linear_path") if dec is not None else None,
        "regions": merge_regions(*((r.stats.get("regions") or []) if r is not None else [] for r in (pre, dec))),
        "runs": {phase: r.to_json() for phase, r in runs.items()},
    }
    doc["wall_s"] = time.perf_counter() - t0
    return doc


def _unvalidated_share(rep: Report) -> float | None:
    """The share of the rtl critical path from costs the RTL did not measure (None outside rtl)."""
    unval = (rep.stats or {}).get("unvalidated")
    return float(unval["share"]) if unval else None


def _verdict(reports: list[Report]) -> str:
    """PASS / FAIL of the judged runs; timing-only runs that ran as expected are not judged."""
    if all(r.passed for r in reports):
        verdicts = {r.verdict for r in reports}
        return verdicts.pop() if len(verdicts) == 1 else "PASS"
    return "FAIL"


def _cycles(rep: Report | None) -> int | None:
    return None if rep is None else rep.cycles


@dataclass(frozen=True)
class _Run:
    """One judged testbench run."""

    testbench: str
    params: dict[str, Any]
    report: Report

    def to_json(self) -> dict[str, Any]:
        rep = self.report
        return {
            "testbench": self.testbench,
            "params": dict(self.params),
            "verdict": rep.verdict,
            "cycles": rep.cycles,
            "instructions": rep.instructions,
            "wall_s": rep.e2e_s or rep.wall_time,
            "summary": rep.summary,
            "error": rep.error,
            "fault": fault_json(rep),
        }


def _check_params(preset: ModelPreset, tb: str, params: Mapping[str, Any]) -> None:
    """The testbench exists and takes every parameter (a ModelError naming the first it does not)."""
    mod = _testbench(tb)
    unknown = [k for k in params if k not in mod.DEFAULTS]
    if unknown:
        why = " (a mixture-of-experts layer)" if unknown[0] in ("experts", "top_k") else ""
        raise ModelError(
            f"{preset.name}: testbench {tb} has no parameter {unknown[0]!r}{why}; it takes {', '.join(mod.DEFAULTS)}"
        )


def _judged_run(run: ModelRun, tb: str, params: dict[str, Any]) -> _Run:
    """One run through the harness; a plan error (the shape does not fit) is a ModelError."""
    from testbenches.harness import run_case

    rep = run_case(
        _testbench(tb),
        overrides=params,
        hw=run.hw,
        backend=run.backend,
        timing=run.timing,
        functional=not run.timing_only,
        routing=run.routing,
    )
    if rep.error is not None and rep.error.startswith("plan: "):
        raise ModelError(f"{run.preset.name} on {run.hw}: {tb} refuses the shape: {rep.error[len('plan: ') :]}")
    return _Run(tb, params, rep)


def _testbench(name: str) -> Any:
    import testbenches

    if name not in testbenches.names():
        raise ModelError(f"model: the {name} testbench is not available (plena-sim list shows the testbenches)")
    return testbenches.get(name)
