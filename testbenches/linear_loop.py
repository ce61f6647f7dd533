"""linear_loop: ``linear`` with ``loops=True``; linear tolerance plus bit-identity with the unrolled form."""
from __future__ import annotations

from . import linear as _linear
from .compare import tolerance
from .harness import Check

NAME = "linear_loop"
DESCRIPTION = "linear with hardware loops (loops=True): linear tolerance + bit-identical to loops=False"
DEFAULTS = dict(_linear.DEFAULTS, rows=4, K=128, N=128, loops=True)
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_K64_N64", {"rows": 1, "K": 64, "N": 64}, "default"),
    ("rows5_bias", {"rows": 5, "K": 128, "N": 384, "bias": True}, "default"),
    ("rows130_K512", {"rows": 130, "K": 512, "N": 64}, "default"),
    ("ksplit_bias", {"rows": 8, "K": 512, "N": 256, "max_k_tiles": 1, "bias": True}, "default"),
    ("big_base", {"big_base": True, "max_k_tiles": 1}, "default"),
    ("small", {"rows": 5, "K": 64, "N": 96, "bias": True, "max_k_tiles": 1}, "small"),
]
STRETCH_CASES: list = []
RANGES = dict(_linear.RANGES)


def build(params, config):
    p = dict(DEFAULTS, **params)
    case = _linear.build(dict(p, loops=True), config, name=NAME)
    companion = _linear.build(dict(p, loops=False), config, name=NAME)
    out = case.checks[0]
    case.checks.append(Check("bit_identical", out.read, None, out.coords, tolerance("exact"),
                             golden_from="output"))
    case.companion = companion
    return case
