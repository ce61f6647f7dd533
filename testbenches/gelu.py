"""gelu: ``y = x·σ(1.702·x)`` (sigmoid form, kernels.md §2.5) over a CBM activation (act tolerance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.activation import emit_activation, plan_activation
from programs.common import rp
from programs.hbm_tensors import preload_act

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "gelu"
DESCRIPTION = "GELU (sigmoid approximation x*sigmoid(1.702x)) over CBM rows (act tolerance)"
DEFAULTS = {"rows": hw(1, "RP"), "hidden": hw(2, "VLEN"), "scale": 3.0, "inplace": False, "big_base": False, "seed": 0}
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_h64", {"rows": 1, "hidden": hw(1, "VLEN")}, "default"),
    ("rows9_h256_inplace", {"rows": hw(2, "RP", plus=1), "hidden": hw(4, "VLEN"), "inplace": True}, "default"),
    ("rows4_h64_inplace", {"rows": hw(1, "RP"), "hidden": hw(1, "VLEN"), "inplace": True}, "default"),
    ("small", {"rows": hw(2, "RP", plus=1), "hidden": hw(2, "VLEN")}, "small"),
    # issue 21: input magnitude (epsilon placement, max subtraction) and a VRAM base past 2^18 with bit 11 set
    ("scale_1e-4", {"scale": 1e-4}, "default"),
    ("scale_64", {"scale": 64.0}, "default"),
    ("big_base", {"big_base": True}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "rows": [1, hw(1, "RP"), hw(2, "RP", plus=1)],
    "hidden": [hw(1, "VLEN"), hw(2, "VLEN"), hw(4, "VLEN")],
    "scale": [1e-4, 1e-2, 3.0, 8.0, 64.0],
    "big_base": [False, True],
    "inplace": [False, True],
}


def build_act(kind: str, name: str, params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    rows, hidden = p["rows"], p["hidden"]
    V = config.VLEN
    pitch = rp(config, rows)
    cb = CaseBuilder(name, p, config)
    skip_to_big_base(cb, p, config)
    tx, X = cb.tensor("x", cb.randn((rows, hidden), p["scale"]), "act", alloc_rows=pitch)
    n = (hidden // V) * pitch
    rx = cb.alloc(n)
    ry = rx if p["inplace"] else cb.alloc(n)
    rt = cb.alloc(1)
    plan = plan_activation(config, kind=kind, src_base=rx * V, dst_base=ry * V, nrows=n, t_base=rt * V)
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, tx, rows, hidden, rx * V, pitch, GEN_GP)
    emit_activation(asm, plan, gp=GEN_GP, fp=GEN_FP)
    alpha = cb.fp_value("GELU_ALPHA") if kind == "gelu" else 1.0
    golden = X / (1.0 + np.exp(-alpha * X))
    cb.check("output", VramCbm(ry * V, rows, hidden, pitch), golden, ("row", "col"), "act", A=np.abs(X))
    return cb.case(asm)


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    return build_act("gelu", NAME, params, config)
