"""layer_norm: two-pass centred ``(x − μ)/sqrt(var + eps)·γ + β`` (kernels.md §2.6; ln tolerance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig

from . import rms_norm as _rms
from .harness import Case, CaseSpec
from .shapes import hw

NAME = "layer_norm"
DESCRIPTION = "LayerNorm (two-pass, centred) (x-mu)/sqrt(var+eps)*gamma+beta over CBM rows (ln tolerance)"
DEFAULTS = dict(_rms.DEFAULTS, eps=1e-5, gamma=True, beta=True)
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_h64", {"rows": 1, "hidden": hw(1, "VLEN")}, "default"),
    ("rows9_h1024_inplace", {"rows": hw(2, "RP", plus=1), "hidden": hw(16, "VLEN"), "inplace": True}, "default"),
    ("rows4_h4096_nogb", {"rows": hw(1, "RP"), "hidden": hw(64, "VLEN"), "gamma": False, "beta": False}, "default"),
    ("mean_offset", {"offset": 16.0}, "default"),
    ("mean_offset_inplace", {"offset": 16.0, "rows": hw(2, "RP", plus=1), "inplace": True, "beta": False}, "default"),
    ("small", {"rows": hw(2, "RP", plus=1), "hidden": hw(2, "VLEN")}, "small"),
    ("small_offset", {"rows": hw(1, "RP"), "hidden": hw(4, "VLEN"), "offset": 16.0}, "small"),
    # issue 21: input magnitude (epsilon placement, max subtraction) and a VRAM base past 2^18 with bit 11 set
    ("scale_1e-4", {"scale": 1e-4}, "default"),
    ("scale_64", {"scale": 64.0}, "default"),
    ("big_base", {"big_base": True}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = dict(_rms.RANGES, beta=[False, True], offset=[0.0, 16.0], cfg=["default", "small"])


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    return _rms.build_norm("layer_norm", NAME, DEFAULTS, params, config)
