"""linear_loop: ``linear`` with ``loops=True``; linear tolerance plus bit-identity with the unrolled form.

``max_loop`` (when set) lowers the machine's MAX_LOOP_INSTRUCTIONS, so the looped form must unroll the
levels whose iterations no longer fit (K chunks, output tiles) while keeping the inner hardware loops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig

from . import linear as _linear
from .compare import tolerance
from .harness import Case, CaseSpec, Check
from .shapes import hw, resolve_params

NAME = "linear_loop"
DESCRIPTION = "linear with hardware loops (loops=True): linear tolerance + bit-identical to loops=False"
DEFAULTS = dict(_linear.DEFAULTS, rows=hw(1, "BLEN"), K=hw(2, "MLEN"), N=hw(2, "MLEN"), loops=True, max_loop=None)
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_K64_N64", {"rows": 1, "K": hw(1, "MLEN"), "N": hw(1, "MLEN")}, "default"),
    (
        "gemv_rows3_ksplit_bias",
        {"rows": 3, "K": hw(4, "MLEN"), "N": hw(2, "MLEN"), "max_k_tiles": 1, "bias": True, "path": "gemv"},
        "default",
    ),
    ("rows5_bias", {"rows": hw(1, "BLEN", plus=1), "K": hw(2, "MLEN"), "N": hw(6, "MLEN"), "bias": True}, "default"),
    ("rows130_K512", {"rows": hw(2, "MLEN", plus=2), "K": hw(8, "MLEN"), "N": hw(1, "MLEN")}, "default"),
    (
        "ksplit_bias",
        {"rows": hw(2, "BLEN"), "K": hw(8, "MLEN"), "N": hw(4, "MLEN"), "max_k_tiles": 1, "bias": True},
        "default",
    ),
    ("big_base", {"big_base": True, "max_k_tiles": 1}, "default"),
    (
        "budget200_ksplit_bias",
        {
            "rows": hw(1, "MLEN"),
            "K": hw(3, "MLEN"),
            "N": hw(2, "MLEN"),
            "max_k_tiles": 1,
            "bias": True,
            "max_loop": 200,
        },
        "default",
    ),
    (
        "small",
        {"rows": hw(1, "BLEN", plus=1), "K": hw(2, "MLEN"), "N": hw(3, "MLEN"), "bias": True, "max_k_tiles": 1},
        "small",
    ),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = dict(_linear.RANGES)


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    if p["max_loop"] is not None:
        config = config.with_overrides({"MAX_LOOP_INSTRUCTIONS": p["max_loop"]})
    case = _linear.build(dict(p, loops=True), config, name=NAME)
    companion = _linear.build(dict(p, loops=False), config, name=NAME)
    out = case.checks[0]
    case.checks.append(Check("bit_identical", out.read, None, out.coords, tolerance("exact"), golden_from="output"))
    case.companion = companion
    return case
