"""Configuration variants of the testbenches, built in memory (kernels.md §4.1).

``get_config(variant, extra=None)`` returns an immutable :class:`~plena_sim.config.HardwareConfig`
from the packaged reference file plus the variant's overrides (and optional ``extra`` overrides, e.g.
``{"MAX_LOOP_INSTRUCTIONS": 100}``).  Nothing writes a settings file or an environment variable, so cases
run in parallel.  The packaged default is used explicitly (``$PLENA_SETTINGS_TOML`` is ignored) so that a
user's environment cannot change what a testbench judges.

=========  ===========================================================================================
variant    overrides
=========  ===========================================================================================
default    MLEN=VLEN=64, BLEN 4, HLEN 16, BROADCAST_AMOUNT 4, Pm 64, Pv=Ps 4, BMM_SCALE 1.0
emu025     default with BMM_SCALE 0.25
small      MLEN=VLEN=32, BLEN 4, HLEN 16, BROADCAST_AMOUNT 2, Pm 32, Pv=Ps 4
wide       MLEN=VLEN=128, BLEN 8, HLEN 16, BROADCAST_AMOUNT 8, Pm 128, Pv=Ps 8, FP_SRAM_SIZE 4096
=========  ===========================================================================================
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from plena_sim.config import HardwareConfig, default_config

__all__ = ["VARIANTS", "get_config", "variant_names"]

_DEFAULT = {"MLEN": 64, "VLEN": 64, "BLEN": 4, "HLEN": 16, "BROADCAST_AMOUNT": 4,
            "HBM_M_Prefetch_Amount": 64, "HBM_V_Prefetch_Amount": 4, "HBM_V_Writeback_Amount": 4,
            "BMM_SCALE": 1.0}

VARIANTS: Mapping[str, Mapping[str, Any]] = {
    "default": dict(_DEFAULT),
    "emu025": {**_DEFAULT, "BMM_SCALE": 0.25},
    "small": {**_DEFAULT, "MLEN": 32, "VLEN": 32, "BLEN": 4, "HLEN": 16, "BROADCAST_AMOUNT": 2,
              "HBM_M_Prefetch_Amount": 32, "HBM_V_Prefetch_Amount": 4, "HBM_V_Writeback_Amount": 4},
    "wide": {**_DEFAULT, "MLEN": 128, "VLEN": 128, "BLEN": 8, "HLEN": 16, "BROADCAST_AMOUNT": 8,
             "HBM_M_Prefetch_Amount": 128, "HBM_V_Prefetch_Amount": 8, "HBM_V_Writeback_Amount": 8,
             "FP_SRAM_SIZE": 4096},
}


def variant_names() -> tuple[str, ...]:
    return tuple(VARIANTS)


@lru_cache(maxsize=None)
def _base() -> HardwareConfig:
    return default_config()


@lru_cache(maxsize=64)
def _cached(variant: str, extra: tuple) -> HardwareConfig:
    ov = dict(VARIANTS[variant])
    ov.update(dict(extra))
    return _base().with_overrides(ov)


def get_config(variant: str = "default", extra: Mapping[str, Any] | None = None) -> HardwareConfig:
    """The immutable config of ``variant`` (plus ``extra`` CONFIG overrides)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r} (known: {', '.join(VARIANTS)})")
    return _cached(variant, tuple(sorted((extra or {}).items())))
