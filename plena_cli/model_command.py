"""``plena-sim model``: a model preset's prefill layer and decode step, judged, and what they imply.

``plena-sim model NAME`` (a preset of :mod:`programs.model.presets`, or the path of a ``.toml`` file of the
same form) runs the ``decoder_layer`` testbench (one layer over a prompt of ``--seq`` tokens) and the
``decoder_decode`` testbench (one layer, one new token after a cache of ``--kv`` tokens) through the harness
(:func:`testbenches.harness.run_case`, the code path of ``plena-sim run``), judges both and derives, at the
hardware preset's clock (``clock_mhz``; else 1 GHz, the 1 ns cycles of timing.md):

* ``ttft_s = layers x prefill_layer_cycles / clock_hz`` (the prefill of ``--seq`` tokens through every layer);
* ``decode_tokens_per_s = batch / (layers x decode_layer_cycles / clock_hz)``.

A shape the machine or the generators cannot take is refused (exit 2, the message names the parameter
and the limit); a mismatch is a FAIL (exit 1), a simulator fault a FAIL with exit 3.
``--list`` lists the presets, ``--show`` prints one (``--json``: as JSON).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import EXIT_FAULT, EXIT_MISMATCH, EXIT_OK, UsageError
from .model_report import render_list, render_model
from .options import add_backend_arg, add_hw_arg, add_timing_arg, examples
from .render import compile_core, print_fault, print_json, status
from .run_report import fault_json

if TYPE_CHECKING:
    from rich.console import Console

    from programs.model.presets import ModelPreset
    from testbenches.harness import Report

__all__ = [
    "PREFILL_TESTBENCH",
    "DECODE_TESTBENCH",
    "register",
    "cmd_model",
    "ModelRun",
    "prepare",
    "execute",
    "run_model",
    "clock_of",
    "layer_figures",
    "merge_regions",
]

PREFILL_TESTBENCH = "decoder_layer"
DECODE_TESTBENCH = "decoder_decode"
#: the clock of a hardware preset that names none: timing.md counts cycles of 1 ns
DEFAULT_CLOCK_HZ = 1e9


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "model",
        help="a model preset's prefill layer and decode step: verdicts, cycles, TTFT, tokens/s",
        **examples("plena-sim model --list", "plena-sim model tiny --seq 128", "plena-sim model llama-3.1-8b --show"),
    )
    p.add_argument("name", metavar="NAME", nargs="?", help="a model preset (--list shows them) or a .toml path")
    p.add_argument("--list", action="store_true", help="list the model presets")
    p.add_argument("--show", action="store_true", help="print the preset (its file with the sources)")
    add_hw_arg(p)
    add_timing_arg(p)
    p.add_argument("--seq", type=int, default=256, help="prompt tokens of the prefill layer (default 256)")
    p.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    p.add_argument("--kv", type=int, default=None, help="cache length before the decoded token (default: --seq)")
    p.add_argument("--layers", type=int, default=None, help="layers of the model (default: the preset's)")
    p.add_argument("--seed", type=int, default=None, help="input seed (default: the testbenches')")
    add_backend_arg(p)
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(func=cmd_model)


def cmd_model(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.list:
        if args.name:
            raise UsageError("model: --list takes no NAME")
        return _list(args.json, out)
    if not args.name:
        raise UsageError("model: give a model NAME or a .toml path (plena-sim model --list shows the presets)")
    preset = load_model(args.name)
    if args.show:
        _show(preset, args.json, out)
        return EXIT_OK
    plan = prepare(
        preset,
        hw=args.hw,
        timing=args.timing,
        seq=args.seq,
        batch=args.batch,
        kv=args.kv,
        layers=args.layers,
        seed=args.seed,
        backend=args.backend,
    )
    compile_core(err, args.json)
    with status(err, "running ...", args.json) as spinner:
        doc = execute(plan, progress=None if spinner is None else spinner.update)
    if args.json:
        print_json(out, doc)
    else:
        render_model(out, doc)
    return _exit_code(doc, err, quiet=args.json)


def load_model(name_or_path: str) -> ModelPreset:
    """The model preset (a :class:`~programs.model.presets.ModelPresetError` is the user's error)."""
    from programs.model.presets import ModelPresetError, load

    try:
        return load(name_or_path)
    except ModelPresetError as exc:
        raise UsageError(str(exc)) from None


def _list(as_json: bool, out: Console) -> int:
    from programs.model.presets import load, names

    presets = [load(n) for n in names()]
    if as_json:
        print_json(out, [p.to_dict() for p in presets], indent=2)
    else:
        render_list(out, presets)
    return EXIT_OK


def _show(preset: ModelPreset, as_json: bool, out: Console) -> None:
    if as_json:
        print_json(out, preset.to_dict(), indent=2)
    else:
        out.file.write(preset.text)


# ----------------------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class ModelRun:
    """What ``plena-sim model`` runs: the preset, the machine and every shape, defaults resolved."""

    preset: ModelPreset
    hw: str
    timing: str
    seq: int
    batch: int
    kv: int
    layers: int
    seed: int | None
    backend: str

    def testbench_params(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """``phase -> (testbench, parameters)``: the prefill layer and the decode step."""
        shapes = self.preset.layer_params() | ({} if self.seed is None else {"seed": self.seed})
        return {
            "prefill": (PREFILL_TESTBENCH, {"batch": self.batch, "seq": self.seq, **shapes}),
            "decode": (DECODE_TESTBENCH, {"batch": self.batch, "kv": self.kv, **shapes}),
        }


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
) -> ModelRun:
    """The run of ``model`` (a preset or its name/path) on hardware preset ``hw`` (default: the default
    preset), checked before anything runs: the preset, the machine and both testbenches with every
    parameter (a UsageError / ConfigError naming what is wrong)."""
    from plena_sim.config.presets import DEFAULT_PRESET, preset_info

    preset = load_model(model) if isinstance(model, str) else model
    hw = hw or DEFAULT_PRESET
    preset_info(hw)  # an unknown preset: ConfigError naming the known ones
    kv = seq if kv is None else kv
    layers = preset.layers if layers is None else layers
    for key, value, lo in (("seq", seq, 1), ("batch", batch, 1), ("kv", kv, 0), ("layers", layers, 1)):
        if value < lo:
            raise UsageError(f"model: {key}={value} must be >= {lo}")
    run = ModelRun(preset, hw, timing, seq, batch, kv, layers, seed, backend)
    for tb, params in run.testbench_params().values():
        _check_params(preset, tb, params)
    return run


def run_model(model: ModelPreset | str, **settings: Any) -> dict[str, Any]:
    """``execute(prepare(model, **settings))``: the JSON document of ``plena-sim model --json``."""
    return execute(prepare(model, **settings))


def execute(run: ModelRun, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run and judge the prefill layer and the decode step; the JSON document of ``plena-sim model --json``.
    A shape the testbench refuses (a plan error) is a UsageError."""
    t0 = time.perf_counter()
    runs: dict[str, _Run] = {}
    for phase, (tb, params) in run.testbench_params().items():
        if progress is not None:
            progress(f"{run.preset.name}: {phase} ({tb}) on {run.hw} ...")
        runs[phase] = _judged_run(run, tb, params)
    pre, dec = runs["prefill"].report, runs["decode"].report
    clock_hz, clock_source = clock_of(run.hw)
    doc: dict[str, Any] = {
        "model": run.preset.name,
        "preset": run.preset.to_dict(),
        "verdict": "PASS" if pre.passed and dec.passed else "FAIL",
        "hw": run.hw,
        "timing": run.timing,
        "backend": run.backend,
        "seq": run.seq,
        "batch": run.batch,
        "kv": run.kv,
        "layers": run.layers,
        "clock_hz": clock_hz,
        "clock_source": clock_source,
        "prefill_layer_cycles": pre.cycles,
        "decode_layer_cycles": dec.cycles,
        **layer_figures(run.layers, run.batch, pre.cycles, dec.cycles, clock_hz),
        "regions": merge_regions(pre.stats.get("regions") or [], dec.stats.get("regions") or []),
        "runs": {phase: r.to_json() for phase, r in runs.items()},
    }
    doc["wall_s"] = time.perf_counter() - t0
    return doc


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
            "verdict": "PASS" if rep.passed else "FAIL",
            "cycles": rep.cycles,
            "instructions": rep.instructions,
            "wall_s": rep.e2e_s or rep.wall_time,
            "summary": rep.summary,
            "error": rep.error,
            "fault": fault_json(rep),
        }


def _check_params(preset: ModelPreset, tb: str, params: Mapping[str, Any]) -> None:
    """The testbench exists and takes every parameter (a UsageError naming the first it does not)."""
    mod = _testbench(tb)
    unknown = [k for k in params if k not in mod.DEFAULTS]
    if unknown:
        why = " (a mixture-of-experts layer)" if unknown[0] in ("experts", "top_k") else ""
        raise UsageError(
            f"{preset.name}: testbench {tb} has no parameter {unknown[0]!r}{why}; it takes {', '.join(mod.DEFAULTS)}"
        )


def _judged_run(run: ModelRun, tb: str, params: dict[str, Any]) -> _Run:
    """One run through the harness; a plan error (the shape does not fit) is a UsageError."""
    from testbenches.harness import run_case

    rep = run_case(_testbench(tb), overrides=params, hw=run.hw, backend=run.backend, timing=run.timing)
    if rep.error is not None and rep.error.startswith("plan: "):
        raise UsageError(f"{run.preset.name} on {run.hw}: {tb} refuses the shape: {rep.error[len('plan: ') :]}")
    return _Run(tb, params, rep)


def _testbench(name: str) -> Any:
    import testbenches

    if name not in testbenches.names():
        raise UsageError(f"model: the {name} testbench is not available (plena-sim list shows the testbenches)")
    return testbenches.get(name)


def _exit_code(doc: Mapping[str, Any], err: Console, quiet: bool) -> int:
    if doc["verdict"] == "PASS":
        return EXIT_OK
    faults = [r["fault"] for r in doc["runs"].values() if r["fault"] is not None]
    if not faults:
        return EXIT_MISMATCH
    if not quiet:
        print_fault(err, faults[0]["message"])
    return EXIT_FAULT


# ----------------------------------------------------------------------------------------- the figures


def clock_of(hw: str) -> tuple[float, str]:
    """``(clock_hz, source)``: the preset's ``clock_mhz``, else 1 GHz (the 1 ns cycles of timing.md)."""
    from plena_sim.config.presets import preset_info

    mhz = preset_info(hw).clock_mhz
    if mhz is not None:
        return mhz * 1e6, f"preset {hw}: clock_mhz = {mhz:g}"
    return DEFAULT_CLOCK_HZ, f"timing.md's 1 ns cycles: preset {hw} has no clock_mhz"


def layer_figures(
    layers: int, batch: int, prefill_layer_cycles: int, decode_layer_cycles: int, clock_hz: float
) -> dict[str, float | None]:
    """One layer's time, the TTFT (``layers x`` the prefill layer) and the decode rate (``batch`` tokens per
    step of ``layers x`` the decode layer); the rate is None without decode cycles."""
    step_s = layers * decode_layer_cycles / clock_hz
    return {
        "prefill_layer_s": prefill_layer_cycles / clock_hz,
        "decode_layer_s": decode_layer_cycles / clock_hz,
        "ttft_s": layers * prefill_layer_cycles / clock_hz,
        "decode_step_s": step_s,
        "decode_tokens_per_s": batch / step_s if step_s > 0 else None,
    }


def merge_regions(prefill: Sequence[Mapping[str, Any]], decode: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The regions of both runs, one row per path (prefill's order, then the decode-only paths):
    ``{"path", "prefill": {...} | None, "decode": {...} | None}``, each run's counters without the path."""
    rows: dict[str, dict[str, Any]] = {}
    for phase, regions in (("prefill", prefill), ("decode", decode)):
        for region in regions:
            path = str(region["path"])
            row = rows.setdefault(path, {"path": path, "prefill": None, "decode": None})
            row[phase] = {k: v for k, v in region.items() if k != "path"}
    return list(rows.values())
