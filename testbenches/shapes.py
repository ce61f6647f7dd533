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
from programs.asm import IMM18_LIMIT

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


#: VRAM element address of a big-base case: past the 18-bit immediate (2^18) with bit 11 set, so every base
#: a generator materialises takes the S_LUI_INT + S_ADDI_INT path with a low part >= 0x800 (a sign-extending
#: LUI/ADDI split, the RISC-V habit, is off by 4096 there)
BIG_BASE_ELEM = IMM18_LIMIT + (1 << 11)


def big_base_row(cfg: HardwareConfig) -> int:
    """The first VRAM row of a big-base case (element :data:`BIG_BASE_ELEM`, a multiple of every VLEN <= 2048)."""
    if BIG_BASE_ELEM % cfg.VLEN:
        raise ValueError(f"big_base: element {BIG_BASE_ELEM} is not a row boundary with VLEN={cfg.VLEN}")
    return BIG_BASE_ELEM // cfg.VLEN


def skip_to_big_base(cb: Any, params: Mapping[str, Any], cfg: HardwareConfig) -> None:
    """With ``params["big_base"]``, let the case builder ``cb`` place every VRAM region from :func:`big_base_row`."""
    if params.get("big_base"):
        cb.skip_to(big_base_row(cfg))
