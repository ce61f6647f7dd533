"""softmax: row softmax over the first ``L`` columns, optional scale slot (kernels.md §2.7; softmax tol)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp
from programs.hbm_tensors import preload_act, round_up
from programs.softmax import emit_softmax, plan_softmax, softmax_scratch_rows

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "softmax"
DESCRIPTION = "row softmax over L columns with tail mask and optional scale slot (softmax tolerance)"
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
L100 = hw(1, "VLEN", plus=36)  # a partial last column block (the tail mask)
DEFAULTS = {
    "rows": hw(2, "RP"),
    "L": hw(2, "VLEN"),
    "scaled": False,
    "scale_value": 0.35,
    "inplace": False,
    "scale": 2.0,
    "big_base": False,
    "seed": 0,
}
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("L1", {"L": 1}, "default"),
    ("L64_scaled", {"L": hw(1, "VLEN"), "scaled": True}, "default"),
    ("L100", {"L": L100}, "default"),
    ("L100_scaled_inplace", {"L": L100, "scaled": True, "inplace": True, "rows": hw(1, "RP", plus=1)}, "default"),
    ("L1024_scaled", {"L": hw(16, "VLEN"), "scaled": True, "rows": hw(1, "RP")}, "default"),
    ("small_L100", {"L": hw(3, "VLEN", plus=4), "scaled": True}, "small"),  # L = 100 on the small machine
    # issue 21: input magnitude (a softmax without the max subtraction overflows at 64), a big VRAM base
    ("L100_scale_1e-4", {"L": L100, "scale": 1e-4}, "default"),
    ("L100_scale_64", {"L": L100, "scale": 64.0}, "default"),
    ("big_base", {"L": L100, "scaled": True, "big_base": True}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "L": [1, hw(1, "VLEN"), L100, hw(16, "VLEN")],
    "scaled": [False, True],
    "rows": [1, hw(2, "RP")],
    "inplace": [False, True],
    "scale": [1e-4, 1e-2, 2.0, 8.0, 64.0],
    "big_base": [False, True],
}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    rows, L = p["rows"], p["L"]
    V = config.VLEN
    cols = round_up(L, V)
    pitch = rp(config, rows)
    cb = CaseBuilder(NAME, p, config)
    skip_to_big_base(cb, p, config)
    x = np.zeros((rows, cols))
    x[:, :L] = cb.randn((rows, L), p["scale"])
    tx, X = cb.tensor("x", x, "act", alloc_rows=pitch)
    n = (cols // V) * pitch
    rx = cb.alloc(n)
    ry = rx if p["inplace"] else cb.alloc(n)
    ns = softmax_scratch_rows(config, L)
    rs = cb.alloc(ns) if ns else None
    slot = None
    s = 1.0
    if p["scaled"]:
        cb.set_fp(USER0=p["scale_value"])
        slot, s = 8, cb.fp_value("USER0")
    plan = plan_softmax(
        config,
        rows=rows,
        L=L,
        x_base=rx * V,
        pitch=pitch,
        y_base=ry * V,
        scratch_base=None if rs is None else rs * V,
        scale_slot=slot,
    )
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, tx, rows, cols, rx * V, pitch, GEN_GP)
    emit_softmax(asm, plan, gp=GEN_GP, fp=GEN_FP)
    z = s * X[:, :L]
    zmax = z.max(axis=1, keepdims=True)
    e = np.exp(z - zmax)
    golden = e / e.sum(axis=1, keepdims=True)
    A = golden * (1.0 + np.abs(z - zmax))

    def first_L(y: np.ndarray, L: int = L) -> np.ndarray:
        return y[:, :L]

    cb.check(
        "output", VramCbm(ry * V, rows, cols, pitch, post=first_L), golden, ("row", "col"), "softmax", A=A, nb=plan.nb
    )
    return cb.case(asm)
