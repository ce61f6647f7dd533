"""The sweep spec (TOML) and its expansion into points.

A spec names axes; the points are their product, in a fixed order: hardware preset x ``[hardware.set]``
values x workload (each with its ``set`` axes) x timing model x seed. An axis is a list, a range table
``{start, stop, step}`` (stop inclusive) or one value. ``[hardware.derive]`` computes keys from the point's
machine (``BROADCAST_AMOUNT = "MLEN // HLEN"``). ``[[filter]]`` tables drop the points where ``when`` holds,
with their ``reason``; a point whose machine does not validate is dropped with the config error. Expressions
are arithmetic and comparisons over the point's machine keys and workload parameters (:mod:`.expr`).

A workload is a testbench (``testbench``, optional ``case``, ``set``), or a model layer (``model`` = a model
preset, ``kind`` = ``"prefill"`` / ``"decode"``; ``set`` takes ``seq``/``batch``/``kv``): the
``decoder_layer`` / ``decoder_decode`` testbench with the preset's shape.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isa.readers import MAX_CONFIG_BYTES, InputFileError, parse_toml, read_text_input
from isa.safetext import did_you_mean, printable

from . import expr

if TYPE_CHECKING:
    from ..testbench_run import CaseRequest

__all__ = ["SpecError", "Point", "Filtered", "Workload", "SweepSpec", "load_spec", "parse_spec", "EXAMPLE"]

TIMINGS = ("serial", "overlap", "rtl")
_TOP_KEYS = {"name", "timing", "timing_only", "routing", "seeds", "hardware", "workload", "filter", "backend"}
_HW_KEYS = {"presets", "set", "derive"}
_WL_KEYS = {"testbench", "case", "model", "kind", "set", "label"}
_MODEL_SET = {"seq", "batch", "kv"}
_MODEL_SHAPE = ("hidden", "heads", "kv_heads", "head_dim", "ffn", "rope_theta", "rms_eps")


class SpecError(ValueError):
    """A spec that cannot be used (the message names the file, the key and the value)."""


@dataclass(frozen=True)
class Workload:
    label: str
    testbench: str
    case: str | None
    axes: Mapping[str, tuple[Any, ...]]  # --set parameters: name -> values
    fixed: Mapping[str, Any] = field(default_factory=dict)  # parameters every point gets (a model's shape)


@dataclass(frozen=True)
class Point:
    """One run: the same as ``plena-sim run TESTBENCH [--case C] --hw PRESET --set-hw K=V.. --set K=V..
    --timing T --seed S --json``."""

    preset: str
    set_hw: Mapping[str, Any]
    workload: str
    testbench: str
    case: str | None
    params: Mapping[str, Any]
    timing: str
    seed: int
    order: int = 0
    #: a timing-only run (issue 30; ``routing``: its MoE routing policy, ``uniform`` / ``round-robin`` / a file)
    timing_only: bool = False
    routing: str | None = None

    @property
    def id(self) -> str:
        """A stable id of what the point runs (not of where or when)."""
        return hashlib.sha256(json.dumps(self.key(), sort_keys=True).encode()).hexdigest()[:16]

    def key(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "set_hw": dict(self.set_hw),
            "testbench": self.testbench,
            "case": self.case,
            "params": dict(self.params),
            "timing": self.timing,
            "seed": self.seed,
            **({"timing_only": True, "routing": self.routing} if self.timing_only else {}),
        }

    def argv(self) -> list[str]:
        """The ``plena-sim`` command line of the point."""
        out = ["run", self.testbench] + (["--case", self.case] if self.case else [])
        out += ["--hw", self.preset]
        for k, v in self.set_hw.items():
            out += ["--set-hw", f"{k}={v}"]
        for k, v in self.params.items():
            out += ["--set", f"{k}={_cli_value(v)}"]
        if self.timing_only:
            out += ["--timing-only"] + (["--routing", self.routing] if self.routing else [])
        return out + ["--timing", self.timing, "--seed", str(self.seed), "--json"]

    def request(self) -> CaseRequest:
        """The testbench request of :meth:`argv`'s command line (the same ``--set`` / ``--set-hw`` texts); the
        timing model is the run's own (``timing``)."""
        from ..testbench_run import CaseRequest

        return CaseRequest(
            testbench=self.testbench,
            case=self.case,
            set=[f"{k}={_cli_value(v)}" for k, v in self.params.items()],
            hw=self.preset,
            set_hw=[f"{k}={v}" for k, v in self.set_hw.items()],
            seed=self.seed,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.key(), "workload": self.workload, "order": self.order}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Point:
        return cls(
            d["preset"], d["set_hw"], d["workload"], d["testbench"], d["case"], d["params"], d["timing"], d["seed"],
            d.get("order", 0), bool(d.get("timing_only", False)), d.get("routing"),
        )  # fmt: skip


@dataclass(frozen=True)
class Filtered:
    point: Point
    reason: str


def _cli_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@dataclass(frozen=True)
class SweepSpec:
    name: str
    origin: str
    presets: tuple[str, ...]
    set_hw: Mapping[str, tuple[Any, ...]]
    derive: Mapping[str, str]
    workloads: tuple[Workload, ...]
    timings: tuple[str, ...]
    seeds: tuple[int, ...]
    filters: tuple[tuple[str, str], ...]  # (when, reason)
    timing_only: bool = False
    routing: str | None = None

    def expand(self) -> tuple[list[Point], list[Filtered]]:
        """Every point of the product, in order, split into the ones to run and the ones filtered out."""
        run: list[Point] = []
        dropped: list[Filtered] = []
        for k, point in enumerate(self._product()):
            point = Point(**{**point.__dict__, "order": k})
            verdict = self._check(point)
            if isinstance(verdict, Filtered):
                dropped.append(verdict)
            else:
                run.append(verdict)
        return run, dropped

    def _product(self) -> Iterator[Point]:
        hw_names = list(self.set_hw)
        for preset in self.presets:
            for hw_vals in itertools.product(*(self.set_hw[k] for k in hw_names)):
                set_hw = dict(zip(hw_names, hw_vals, strict=True))
                for wl in self.workloads:
                    names = list(wl.axes)
                    for vals in itertools.product(*(wl.axes[k] for k in names)):
                        params = {**wl.fixed, **dict(zip(names, vals, strict=True))}
                        for timing in self.timings:
                            for seed in self.seeds:
                                yield Point(
                                    preset, set_hw, wl.label, wl.testbench, wl.case, params, timing, seed,
                                    timing_only=self.timing_only, routing=self.routing,
                                )  # fmt: skip

    def _check(self, point: Point) -> Point | Filtered:
        """The point with its derived hardware keys, or why it is dropped."""
        from plena_sim.config.presets import load_preset
        from plena_sim.errors import ConfigError

        try:
            base = load_preset(point.preset, point.set_hw).values()
            set_hw = dict(point.set_hw)
            for key, formula in self.derive.items():
                set_hw[key] = expr.evaluate(formula, {**base, **set_hw})
            cfg = load_preset(point.preset, set_hw)
        except ConfigError as exc:
            return Filtered(point, f"config: {exc}")
        except expr.ExprError as exc:
            return Filtered(point, f"derive: {exc}")
        point = Point(**{**point.__dict__, "set_hw": set_hw})
        names = {**cfg.values(), **point.params, "timing": point.timing, "seed": point.seed}
        for when, reason in self.filters:
            try:
                if expr.evaluate(when, names):
                    return Filtered(point, reason)
            except expr.ExprError as exc:
                return Filtered(point, f"filter {when!r}: {exc}")
        return point


# =========================================================================== parsing


def load_spec(path: str | Path) -> SweepSpec:
    """The spec in the file at ``path`` (a regular file of at most 16 MiB, nested at most 64 deep)."""
    try:
        text = read_text_input(path, "sweep spec", MAX_CONFIG_BYTES)
    except InputFileError as exc:
        raise SpecError(str(exc)) from None
    return parse_spec(text, str(path))


def parse_spec(text: str, origin: str = "<spec>") -> SweepSpec:
    try:
        doc = parse_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: not valid TOML: {exc}") from None
    except ValueError as exc:  # nested too deeply, or an integer literal of more than 4300 digits
        raise SpecError(f"{origin}: {exc}") from None
    return _Parser(origin).spec(doc)


class _Parser:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, key: str, value: object, rule: str) -> SpecError:
        return SpecError(f"{printable(self.origin)}: {printable(key)} = {value!r}: {rule}")

    def table(self, doc: Any, key: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(doc, dict):
            raise self.fail(key, doc, "must be a table")
        unknown = sorted(set(doc) - allowed)
        if unknown:
            close = did_you_mean(unknown[0], sorted(allowed))
            raise self.fail(
                f"{key}.{unknown[0]}" if key else unknown[0],
                doc[unknown[0]],
                f"unknown key{close or ''} (known: {', '.join(sorted(allowed))})",
            )
        return doc

    def anytable(self, doc: Any, key: str) -> dict[str, Any]:
        """A table whose keys are the user's names."""
        if not isinstance(doc, dict):
            raise self.fail(key, doc, "must be a table")
        return doc

    def axes(self, doc: Any, key: str) -> dict[str, tuple[Any, ...]]:
        return {k: self.axis(f"{key}.{k}", v) for k, v in self.anytable(doc, key).items()}

    def expression(self, text: str, key: str) -> None:
        try:
            expr.check(text, f"{self.origin}: {key}")
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def axis(self, key: str, v: Any) -> tuple[Any, ...]:
        """A list, a ``{start, stop, step}`` range (stop inclusive) or one value."""
        if isinstance(v, list):
            if not v:
                raise self.fail(key, v, "an axis needs at least one value")
            for x in v:
                self.scalar(key, x)
            return tuple(v)
        if isinstance(v, dict):
            r = self.table(v, key, {"start", "stop", "step"})
            try:
                start, stop, step = int(r["start"]), int(r["stop"]), int(r.get("step", 1))
            except (KeyError, TypeError, ValueError):
                raise self.fail(key, v, "a range needs integer start and stop (and step)") from None
            if step < 1 or stop < start:
                raise self.fail(key, v, "a range needs step >= 1 and stop >= start")
            return tuple(range(start, stop + 1, step))
        return (self.scalar(key, v),)

    def scalar(self, key: str, v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            raise self.fail(key, v, "must be a finite number (nan / inf make no parameter)")
        if isinstance(v, (bool, int, float, str)):
            return v
        raise self.fail(key, v, "must be a number, a bool or a string")

    def names(self, key: str, v: Any, known: tuple[str, ...]) -> tuple[str, ...]:
        vals = self.axis(key, v)
        for x in vals:
            if x not in known:
                raise self.fail(key, x, f"unknown (known: {', '.join(known)})")
        return tuple(vals)

    def spec(self, doc: dict[str, Any]) -> SweepSpec:
        from plena_sim.config.presets import preset_names

        self.table(doc, "", _TOP_KEYS)
        hw = self.table(doc.get("hardware", {}), "hardware", _HW_KEYS)
        presets = self.names("hardware.presets", hw.get("presets", ["transactional"]), preset_names())
        set_hw = self.axes(hw.get("set", {}), "hardware.set")
        derive = {}
        for k, v in self.anytable(hw.get("derive", {}), "hardware.derive").items():
            if not isinstance(v, str):
                raise self.fail(f"hardware.derive.{k}", v, "must be an expression string")
            self.expression(v, f"hardware.derive.{k}")
            derive[k] = v
        wls = doc.get("workload")
        if not isinstance(wls, list) or not wls:
            raise self.fail("workload", wls, "at least one [[workload]] table is required")
        workloads = tuple(self.workload(k, w) for k, w in enumerate(wls))
        labels = [w.label for w in workloads]
        if len(set(labels)) != len(labels):
            raise self.fail("workload.label", labels, "workload labels must be distinct")
        filters = []
        flist = doc.get("filter", [])
        if not isinstance(flist, list):
            raise self.fail("filter", flist, "must be [[filter]] tables")
        for n, item in enumerate(flist):
            f = self.table(item, f"filter[{n}]", {"when", "reason"})
            when = f.get("when")
            if not isinstance(when, str):
                raise self.fail(f"filter[{n}].when", when, "must be an expression string")
            self.expression(when, f"filter[{n}].when")
            filters.append((when, str(f.get("reason", when))))
        seeds = self.axis("seeds", doc.get("seeds", [0]))
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise self.fail("seeds", list(seeds), "seeds are integers >= 0")
        return SweepSpec(
            name=str(doc.get("name", Path(self.origin).stem)),
            origin=self.origin,
            presets=presets,
            set_hw=set_hw,
            derive=derive,
            workloads=workloads,
            timings=self.names("timing", doc.get("timing", ["serial"]), TIMINGS),
            seeds=tuple(int(s) for s in seeds),
            filters=tuple(filters),
            timing_only=self.flag("timing_only", doc.get("timing_only", False)),
            routing=self.routing(doc.get("routing")),
        )

    def flag(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, value, "must be true or false")
        return value

    def routing(self, value: Any) -> str | None:
        """A routing policy name or a file path (checked now: a bad file fails the spec, not every point)."""
        if value is None:
            return None
        from plena_sim.routing import load_routing

        if not isinstance(value, str):
            raise self.fail("routing", value, "must be uniform, round-robin or a file path")
        try:
            load_routing(value)
        except ValueError as exc:
            raise self.fail("routing", value, str(exc)) from None
        return value

    def workload(self, k: int, w: Any) -> Workload:
        import testbenches

        key = f"workload[{k}]"
        w = self.table(w, key, _WL_KEYS)
        axes = self.axes(w.get("set", {}), f"{key}.set")
        if "model" in w:
            return self.model_workload(key, w, axes)
        tb = w.get("testbench")
        if tb not in testbenches.names():
            raise self.fail(f"{key}.testbench", tb, f"unknown testbench (known: {', '.join(testbenches.names())})")
        mod = testbenches.get(tb)
        case = w.get("case")
        if case is not None:
            from testbenches.harness import cases_of

            if case not in cases_of(mod):
                raise self.fail(f"{key}.case", case, f"not a case of {tb} (known: {', '.join(cases_of(mod))})")
        if "seed" in axes:
            raise self.fail(f"{key}.set.seed", axes["seed"], "the input seed is the top-level axis seeds = [...]")
        for n in axes:
            if n not in mod.DEFAULTS:
                raise self.fail(f"{key}.set.{n}", axes[n], f"{tb} has no parameter {n!r}")
        label = str(w.get("label", tb + (f"[{case}]" if case else "")))
        return Workload(label, tb, case, axes)

    def model_workload(self, key: str, w: dict[str, Any], axes: dict[str, tuple[Any, ...]]) -> Workload:
        from programs.model import presets as mp

        kind = w.get("kind", "prefill")
        if kind not in ("prefill", "decode"):
            raise self.fail(f"{key}.kind", kind, "must be 'prefill' or 'decode'")
        try:
            preset = mp.load(str(w["model"]))
        except mp.ModelPresetError as exc:
            raise SpecError(f"{self.origin}: {key}.model: {exc}") from None
        for n in axes:
            if n not in _MODEL_SET:
                raise self.fail(
                    f"{key}.set.{n}", axes[n], f"a model workload sets only {', '.join(sorted(_MODEL_SET))}"
                )
        shape = {
            k: getattr(preset, k) for k in ("hidden", "heads", "kv_heads", "head_dim", "ffn", "rope_theta", "rms_eps")
        }
        if kind == "decode" and "seq" in axes:
            raise self.fail(f"{key}.set.seq", axes["seq"], "a decode workload takes kv (the cache length), not seq")
        if kind == "prefill" and "kv" in axes:
            raise self.fail(f"{key}.set.kv", axes["kv"], "a prefill workload takes seq, not kv")
        tb = "decoder_layer" if kind == "prefill" else "decoder_decode"
        label = str(w.get("label", f"{preset.name}/{kind}"))
        return Workload(label, tb, None, axes, fixed=shape)


EXAMPLE = """\
"""
