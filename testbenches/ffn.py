"""ffn: SwiGLU MLP ``(silu(X·Wg) ⊙ X·Wu)·Wd`` (kernels.md §2.4; ffn tolerance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp
from programs.ffn import (
    emit_ffn_intermediate,
    emit_ffn_swiglu,
    ffn_workspace_rows,
    plan_ffn_intermediate,
    plan_ffn_swiglu,
)
from programs.hbm_tensors import preload_act

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "ffn"
DESCRIPTION = "SwiGLU FFN (silu(X Wg) * X Wu) Wd with SiLU on the gate (ffn tolerance)"
DEFAULTS = {
    "rows": hw(2, "BLEN"),
    "hidden": hw(2, "MLEN"),
    "inter": hw(4, "MLEN"),
    "max_k_tiles": None,
    "alias": False,
    "loops": True,
    "scale": 1.0,
    "big_base": False,
    "seed": 0,
}
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_h64_i128", {"rows": 1, "hidden": hw(1, "MLEN"), "inter": hw(2, "MLEN")}, "default"),
    (
        "rows33_h256_i512",
        {"rows": hw(1, "MLEN", div=2, plus=1), "hidden": hw(4, "MLEN"), "inter": hw(8, "MLEN"), "loops": True},
        "default",
    ),
    ("mkt2", {"max_k_tiles": 2}, "default"),
    ("alias", {"alias": True, "max_k_tiles": 2}, "default"),
    (
        "small",
        {"rows": hw(1, "BLEN", plus=1), "hidden": hw(2, "MLEN"), "inter": hw(4, "MLEN"), "max_k_tiles": 2},
        "small",
    ),
    ("big_base", {"rows": hw(1, "BLEN", plus=1), "big_base": True}, "default"),  # issue 21: bit 11 set
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "hidden": [hw(1, "MLEN"), hw(2, "MLEN"), hw(4, "MLEN")],
    "inter": [hw(2, "MLEN"), hw(4, "MLEN"), hw(8, "MLEN")],
    "rows": [1, hw(2, "BLEN"), hw(1, "MLEN", div=2, plus=1)],
    "max_k_tiles": [None, 2],
    "alias": [False, True],
    "loops": [False, True],
    "big_base": [False, True],
}


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def build_ffn(params: Mapping[str, Any], config: HardwareConfig, *, intermediate: bool, name: str) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    rows, hidden, inter = p["rows"], p["hidden"], p["inter"]
    V = config.VLEN
    pitch = rp(config, rows)
    cb = CaseBuilder(name, p, config)
    skip_to_big_base(cb, p, config)
    tx, X = cb.tensor("x", cb.randn((rows, hidden), p["scale"]), "act", alloc_rows=pitch)
    twg, Wg = cb.tensor("wg", cb.randn((hidden, inter), 1 / np.sqrt(hidden)), "weight")
    twu, Wu = cb.tensor("wu", cb.randn((hidden, inter), 1 / np.sqrt(hidden)), "weight")
    rx = cb.alloc((hidden // V) * pitch)
    nws = ffn_workspace_rows(
        config,
        rows=rows,
        hidden=hidden,
        inter=inter,
        pitch=pitch,
        max_k_tiles=p["max_k_tiles"],
        intermediate_only=intermediate,
    )
    rws = cb.alloc(nws)
    gx, ux = X @ Wg, X @ Wu
    if intermediate:
        plan = plan_ffn_intermediate(
            config,
            rows=rows,
            hidden=hidden,
            inter=inter,
            x_base=rx * V,
            pitch=pitch,
            ws_base=rws * V,
            wg=twg,
            wu=twu,
            max_k_tiles=p["max_k_tiles"],
            loops=p["loops"],
        )
        golden = _silu(gx) * ux
        A = np.abs(gx) * np.abs(ux)
        out_base, out_cols, tol = plan.g_base, inter, "ffn_int"
    else:
        twd, Wd = cb.tensor("wd", cb.randn((inter, hidden), 1 / np.sqrt(inter)), "weight")
        ry = rx if p["alias"] else cb.alloc((hidden // V) * pitch)
        plan = plan_ffn_swiglu(
            config,
            rows=rows,
            hidden=hidden,
            inter=inter,
            x_base=rx * V,
            pitch=pitch,
            y_base=ry * V,
            ws_base=rws * V,
            wg=twg,
            wu=twu,
            wd=twd,
            max_k_tiles=p["max_k_tiles"],
            loops=p["loops"],
        )
        golden = (_silu(gx) * ux) @ Wd
        A = (np.abs(gx) * np.abs(ux)) @ np.abs(Wd)
        out_base, out_cols, tol = ry * V, hidden, "ffn"
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, tx, rows, hidden, rx * V, pitch, GEN_GP)
    (emit_ffn_intermediate if intermediate else emit_ffn_swiglu)(asm, plan, gp=GEN_GP, fp=GEN_FP)
    cb.check("output", VramCbm(out_base, rows, out_cols, pitch), golden, ("row", "col"), tol, A=A)
    return cb.case(asm)


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    return build_ffn(params, config, intermediate=False, name=NAME)
