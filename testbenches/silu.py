"""silu: ``y = x·σ(x)`` (kernels.md §2.5) over a CBM activation (act tolerance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig

from . import gelu as _gelu
from .harness import Case, CaseSpec

NAME = "silu"
DESCRIPTION = "SiLU x*sigmoid(x) over CBM rows (act tolerance)"
DEFAULTS = dict(_gelu.DEFAULTS)
REQUIRED_CASES = list(_gelu.REQUIRED_CASES)
STRETCH_CASES: list[CaseSpec] = []
RANGES = dict(_gelu.RANGES)


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    return _gelu.build_act("silu", NAME, params, config)
