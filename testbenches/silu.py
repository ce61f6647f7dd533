"""silu: ``y = x·σ(x)`` (kernels.md §2.5) over a CBM activation (act tolerance)."""
from __future__ import annotations

from . import gelu as _gelu

NAME = "silu"
DESCRIPTION = "SiLU x*sigmoid(x) over CBM rows (act tolerance)"
DEFAULTS = dict(_gelu.DEFAULTS)
REQUIRED_CASES = list(_gelu.REQUIRED_CASES)
STRETCH_CASES: list = []
RANGES = dict(_gelu.RANGES)


def build(params, config):
    return _gelu.build_act("silu", NAME, params, config)
