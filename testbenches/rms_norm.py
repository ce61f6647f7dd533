"""rms_norm: ``x / sqrt(mean(x²) + eps) · γ`` (kernels.md §2.6; rms tolerance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp, vector_rows
from programs.hbm_tensors import preload_act
from programs.norms import emit_layer_norm, emit_rms_norm, plan_layer_norm, plan_rms_norm

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "rms_norm"
DESCRIPTION = "RMSNorm x/sqrt(mean(x^2)+eps)*gamma over CBM rows (rms tolerance)"
DEFAULTS = {
    "rows": hw(1, "RP"),
    "hidden": hw(2, "VLEN"),
    "eps": 1e-6,
    "gamma": True,
    "inplace": False,
    "scale": 1.0,
    "offset": 0.0,
    "big_base": False,
    "seed": 0,
}
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_h64", {"rows": 1, "hidden": hw(1, "VLEN")}, "default"),
    ("rows9_h1024_inplace", {"rows": hw(2, "RP", plus=1), "hidden": hw(16, "VLEN"), "inplace": True}, "default"),
    ("rows4_h4096_nogamma", {"rows": hw(1, "RP"), "hidden": hw(64, "VLEN"), "gamma": False}, "default"),
    ("rows9_h128_nogamma_inplace", {"rows": hw(2, "RP", plus=1), "gamma": False, "inplace": True}, "default"),
    ("small", {"rows": hw(2, "RP", plus=1), "hidden": hw(2, "VLEN")}, "small"),
    # issue 21: input magnitude (epsilon placement, max subtraction) and a VRAM base past 2^18 with bit 11 set
    ("scale_1e-4", {"scale": 1e-4}, "default"),
    ("scale_64", {"scale": 64.0}, "default"),
    ("big_base", {"big_base": True}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "hidden": [hw(1, "VLEN"), hw(2, "VLEN"), hw(16, "VLEN"), hw(64, "VLEN")],
    "rows": [1, hw(1, "RP"), hw(2, "RP", plus=1)],
    "gamma": [False, True],
    "inplace": [False, True],
    "scale": [1e-4, 1e-2, 1.0, 8.0, 64.0],
    "big_base": [False, True],
}


def build_norm(
    kind: str, name: str, defaults: Mapping[str, Any], params: Mapping[str, Any], config: HardwareConfig
) -> Case:
    p = resolve_params(dict(defaults, **params), config)
    rows, hidden = p["rows"], p["hidden"]
    V = config.VLEN
    pitch = rp(config, rows)
    ln = kind == "layer_norm"
    cb = CaseBuilder(name, p, config)
    skip_to_big_base(cb, p, config)
    tx, X = cb.tensor("x", p["offset"] + cb.randn((rows, hidden), p["scale"]), "act", alloc_rows=pitch)
    vr = vector_rows(config, hidden)
    tg = tb = None
    gam = np.ones(hidden)
    bet = np.zeros(hidden)
    if p["gamma"]:
        tg, gq = cb.tensor("gamma", cb.randn((hidden // V, V)), "act", alloc_rows=vr)
        gam = gq.reshape(-1)
    if ln and p["beta"]:
        tb, bq = cb.tensor("beta", cb.randn((hidden // V, V)), "act", alloc_rows=vr)
        bet = bq.reshape(-1)
    n = (hidden // V) * pitch
    rx = cb.alloc(n)
    ry = rx if p["inplace"] else cb.alloc(n)
    rt = cb.alloc(1)
    rg = cb.alloc(vr) if tg is not None else None
    rb = cb.alloc(vr) if tb is not None else None
    cb.set_fp(EPS=p["eps"], INV_HIDDEN=1.0 / hidden)
    eps, invh = cb.fp_value("EPS"), cb.fp_value("INV_HIDDEN")
    kw = dict(
        rows=rows,
        hidden=hidden,
        x_base=rx * V,
        pitch=pitch,
        y_base=ry * V,
        t_base=rt * V,
        gamma=tg,
        gamma_base=None if rg is None else rg * V,
    )
    if ln:
        plan = plan_layer_norm(config, beta=tb, beta_base=None if rb is None else rb * V, **kw)
    else:
        plan = plan_rms_norm(config, **kw)
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, tx, rows, hidden, rx * V, pitch, GEN_GP)
    (emit_layer_norm if ln else emit_rms_norm)(asm, plan, gp=GEN_GP, fp=GEN_FP)
    nb = hidden // V
    if ln:
        mu = X.sum(axis=1, keepdims=True) * invh
        xc = X - mu
        sigma = np.sqrt((xc * xc).sum(axis=1, keepdims=True) * invh + eps)
        golden = xc / sigma * gam + bet
        A = np.abs(gam) * (np.abs(xc) + np.abs(mu)) / sigma + np.abs(bet)
        cb.check("output", VramCbm(ry * V, rows, hidden, pitch), golden, ("row", "col"), "ln", A=A, nb=nb)
    else:
        golden = X / np.sqrt((X * X).sum(axis=1, keepdims=True) * invh + eps) * gam
        cb.check("output", VramCbm(ry * V, rows, hidden, pitch), golden, ("row", "col"), "rms", nb=nb)
    return cb.case(asm)


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    return build_norm("rms_norm", NAME, DEFAULTS, params, config)
