"""elementwise_add: two HBM activations preloaded to VRAM (CBM), ``add_rows``, compared exactly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp
from programs.elementwise import emit_add_rows, plan_add_rows
from programs.hbm_tensors import preload_act

from .compare import bf16_decode, bf16_encode
from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "elementwise_add"
DESCRIPTION = "out = a + b over CBM rows (add_rows); exact bf16(f32(a)+f32(b))"
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
DEFAULTS = {"rows": hw(1, "RP"), "cols": hw(2, "VLEN"), "scale": 1.0, "big_base": False, "seed": 0}
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_cols64", {"rows": 1, "cols": hw(1, "VLEN")}, "default"),
    ("rows9_cols192", {"rows": hw(2, "RP", plus=1), "cols": hw(3, "VLEN")}, "default"),
    ("rows4_cols192", {"rows": hw(1, "RP"), "cols": hw(3, "VLEN")}, "default"),
    ("small", {"rows": hw(2, "RP", plus=1), "cols": hw(2, "VLEN")}, "small"),
    ("big_base", {"rows": hw(2, "RP", plus=1), "big_base": True}, "default"),  # issue 21: bit 11 set
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "rows": [1, hw(1, "RP"), hw(2, "RP", plus=1)],
    "cols": [hw(1, "VLEN"), hw(3, "VLEN")],
    "big_base": [False, True],
}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    rows, cols = p["rows"], p["cols"]
    V = config.VLEN
    rows_p = rp(config, rows)
    cb = CaseBuilder(NAME, p, config)
    skip_to_big_base(cb, p, config)
    ta, a = cb.tensor("a", cb.randn((rows, cols), p["scale"]), "act", alloc_rows=rows_p)
    tb, b = cb.tensor("b", cb.randn((rows, cols), p["scale"]), "act", alloc_rows=rows_p)
    nrows = (cols // V) * rows_p
    ra = cb.rows(nrows, "a", "input")
    rb = cb.rows(nrows, "b", "input")
    ro = cb.rows(nrows, "out", "output")
    plan = plan_add_rows(config, nrows=nrows, a_base=ra * V, b_base=rb * V, out_base=ro * V)
    asm = cb.asm()
    preload_act(asm, config, ta, rows, cols, ra * V, rows_p, GEN_GP)
    preload_act(asm, config, tb, rows, cols, rb * V, rows_p, GEN_GP)
    emit_add_rows(asm, plan, gp=GEN_GP, fp=GEN_FP)
    golden = bf16_decode(bf16_encode(a.astype(np.float32) + b.astype(np.float32))).astype(np.float64)
    cb.check("output", VramCbm(ro * V, rows, cols, rows_p), golden, ("row", "col"), "exact")
    return cb.case(asm)
