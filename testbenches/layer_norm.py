"""layer_norm: two-pass centred ``(x − μ)/sqrt(var + eps)·γ + β`` (kernels.md §2.6; ln tolerance)."""
from __future__ import annotations

from . import rms_norm as _rms

NAME = "layer_norm"
DESCRIPTION = "LayerNorm (two-pass, centred) (x-mu)/sqrt(var+eps)*gamma+beta over CBM rows (ln tolerance)"
DEFAULTS = dict(_rms.DEFAULTS, eps=1e-5, gamma=True, beta=True)
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_h64", {"rows": 1, "hidden": 64}, "default"),
    ("rows9_h1024_inplace", {"rows": 9, "hidden": 1024, "inplace": True}, "default"),
    ("rows4_h4096_nogb", {"rows": 4, "hidden": 4096, "gamma": False, "beta": False}, "default"),
    ("mean_offset", {"offset": 16.0}, "default"),
    ("mean_offset_inplace", {"offset": 16.0, "rows": 9, "inplace": True, "beta": False}, "default"),
    ("small", {"rows": 9, "hidden": 64}, "small"),
    ("small_offset", {"rows": 4, "hidden": 128, "offset": 16.0}, "small"),
]
STRETCH_CASES: list = []
RANGES = dict(_rms.RANGES, beta=[False, True], offset=[0.0, 16.0], cfg=["default", "small"])


def build(params, config):
    return _rms.build_norm("layer_norm", NAME, DEFAULTS, params, config)
