"""Configuration variants of the testbenches, built in memory (kernels.md §4.1).

A variant is a hardware preset (:mod:`plena_sim.config.presets`) plus a few CONFIG overrides.
``get_config(variant, extra=None, hw=None)`` returns the immutable
:class:`~plena_sim.config.HardwareConfig`: the variant's own preset (or ``hw``, default
``transactional``, for the variants that do not fix the machine), then the variant's overrides, then
``extra`` (e.g. ``{"MAX_LOOP_INSTRUCTIONS": 100}``).  Nothing writes a settings file or reads an
environment variable, so cases run in parallel and a user's environment cannot change a verdict.

=========  ==============  =================================================================================
variant    machine         overrides
=========  ==============  =================================================================================
default    ``hw``          none (the reference machine: 64/64/4, HLEN 16, BA 4, Pm 64, Pv=Ps 4)
emu025     ``hw``          BMM_SCALE 0.25 (the upstream emulator's hidden factor)
small      ``small``       none (32/32/4, HLEN 16, BA 2, Pm 32, Pv=Ps 4)
analytic   ``analytic``    none (the paper-scale machine: 2048/2048/128, HLEN 128, BA 16)
wide       transactional   MLEN=VLEN=128, BLEN 8, BROADCAST_AMOUNT 8, Pm 128, Pv=Ps 8, FP_SRAM_SIZE 4096
=========  ==============  =================================================================================

A variant that fixes the machine (``small``, ``analytic``, ``wide``) cannot be combined with another ``hw``
(:func:`machine_of` tells which preset a variant runs on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from plena_sim.config import HardwareConfig
from plena_sim.config.presets import DEFAULT_PRESET, load_preset

__all__ = ["Variant", "VARIANTS", "get_config", "variant_names", "machine_of", "fixes_machine"]


@dataclass(frozen=True)
class Variant:
    preset: str | None  # None: runs on the selected hardware preset
    overrides: Mapping[str, Any]


VARIANTS: Mapping[str, Variant] = MappingProxyType(
    {
        "default": Variant(None, {}),
        "emu025": Variant(None, {"BMM_SCALE": 0.25}),
        "small": Variant("small", {}),
        "analytic": Variant("analytic", {}),
        "wide": Variant(
            DEFAULT_PRESET,
            {
                "MLEN": 128,
                "VLEN": 128,
                "BLEN": 8,
                "BROADCAST_AMOUNT": 8,
                "HBM_M_Prefetch_Amount": 128,
                "HBM_V_Prefetch_Amount": 8,
                "HBM_V_Writeback_Amount": 8,
                "FP_SRAM_SIZE": 4096,
            },
        ),
    }
)


def variant_names() -> tuple[str, ...]:
    return tuple(VARIANTS)


def fixes_machine(variant: str) -> bool:
    return VARIANTS[variant].preset is not None


def machine_of(variant: str, hw: str | None = None) -> str:
    """The preset a variant runs on (``hw`` for the variants that do not fix the machine)."""
    fixed = VARIANTS[variant].preset
    if fixed is not None and hw is not None and hw != fixed:
        raise ValueError(f"variant {variant!r} is its own machine ({fixed}); it cannot run on --hw {hw}")
    return fixed or hw or DEFAULT_PRESET


def get_config(
    variant: str = "default", extra: Mapping[str, Any] | None = None, hw: str | None = None
) -> HardwareConfig:
    """The immutable config of ``variant`` on ``hw`` (plus ``extra`` CONFIG overrides)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r} (known: {', '.join(VARIANTS)})")
    ov = dict(VARIANTS[variant].overrides)
    ov.update(extra or {})
    return load_preset(machine_of(variant, hw), ov)
