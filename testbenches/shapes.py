"""Testbench shapes in units of the machine: ``K = hw(2, "MLEN")`` is ``2*MLEN`` on whatever config runs.

One job: let ``DEFAULTS``, ``REQUIRED_CASES`` and ``RANGES`` say a shape once for every hardware preset.
A :class:`Hw` value is resolved against the config a case is built for (:func:`resolve_params`);
plain values pass through unchanged, so resolving twice is harmless.

Units: ``MLEN``, ``VLEN``, ``BLEN``, ``HLEN``, ``BA`` (BROADCAST_AMOUNT), ``PV``/``PW`` (V prefetch /
writeback rows), ``RP`` (the row padding quantum ``lcm(BLEN, PV, PW)``, kernels.md §0).
``hw(n, unit, plus=0, div=1)`` is ``n*unit//div + plus``; ``div`` must divide ``n*unit`` on every
machine it is used on (otherwise resolving raises ``ValueError`` naming the parameter).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from plena_sim.config import HardwareConfig

__all__ = ["Hw", "hw", "resolve", "resolve_params", "describe"]


def _unit_value(cfg: HardwareConfig, unit: str) -> int:
    if unit == "BA":
        return cfg.BROADCAST_AMOUNT
    if unit == "PV":
        return cfg.P_V
    if unit == "PW":
        return cfg.P_W
    if unit == "RP":
        return math.lcm(cfg.BLEN, cfg.P_V, cfg.P_W)
    if unit in ("MLEN", "VLEN", "BLEN", "HLEN"):
        return int(getattr(cfg, unit))
    raise ValueError(f"unknown shape unit {unit!r}")


@dataclass(frozen=True)
class Hw:
    """``n * unit // div + plus`` on the machine a case runs on."""

    n: int
    unit: str
    plus: int = 0
    div: int = 1

    def resolve(self, cfg: HardwareConfig, name: str = "value") -> int:
        whole = self.n * _unit_value(cfg, self.unit)
        if whole % self.div:
            raise ValueError(f"{name}={self} is not an integer with {self.unit}={_unit_value(cfg, self.unit)}")
        return whole // self.div + self.plus

    def __str__(self) -> str:
        s = self.unit if self.n == 1 else f"{self.n}*{self.unit}"
        if self.div != 1:
            s += f"/{self.div}"
        if self.plus:
            s += f"{'+' if self.plus > 0 else '-'}{abs(self.plus)}"
        return s


def hw(n: int, unit: str, plus: int = 0, div: int = 1) -> Hw:
    return Hw(n, unit, plus, div)


def resolve(value: Any, cfg: HardwareConfig, name: str = "value") -> Any:
    """``value`` on ``cfg``: a :class:`Hw` (also inside a list or tuple) becomes an int."""
    if isinstance(value, Hw):
        return value.resolve(cfg, name)
    if isinstance(value, (list, tuple)):
        return type(value)(resolve(v, cfg, name) for v in value)
    return value


def resolve_params(params: Mapping[str, Any], cfg: HardwareConfig) -> dict[str, Any]:
    """Every parameter of ``params`` resolved on ``cfg``."""
    return {k: resolve(v, cfg, k) for k, v in params.items()}


def describe(value: Any, cfg: HardwareConfig | None = None) -> str:
    """``2*MLEN (=128)`` for a :class:`Hw` (with the value on ``cfg``), ``repr`` otherwise."""
    if isinstance(value, Hw):
        return f"{value} (={value.resolve(cfg)})" if cfg is not None else str(value)
    return repr(value)
