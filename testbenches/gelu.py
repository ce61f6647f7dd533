"""gelu: ``y = x·σ(1.702·x)`` (sigmoid form, kernels.md §2.5) over a CBM activation (act tolerance)."""
from __future__ import annotations

import numpy as np

from programs.activation import emit_activation, plan_activation
from programs.common import rp
from programs.hbm import preload_act

from .harness import GEN_FP, GEN_GP, CaseBuilder, VramCbm

NAME = "gelu"
DESCRIPTION = "GELU (sigmoid approximation x*sigmoid(1.702x)) over CBM rows (act tolerance)"
DEFAULTS = {"rows": 4, "hidden": 128, "scale": 3.0, "inplace": False, "seed": 0}
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_h64", {"rows": 1, "hidden": 64}, "default"),
    ("rows9_h256_inplace", {"rows": 9, "hidden": 256, "inplace": True}, "default"),
    ("rows4_h64_inplace", {"rows": 4, "hidden": 64, "inplace": True}, "default"),
    ("small", {"rows": 9, "hidden": 64}, "small"),
]
STRETCH_CASES: list = []
RANGES = {"rows": [1, 4, 9], "hidden": [64, 128, 256], "inplace": [False, True]}


def build_act(kind: str, name: str, params, config):
    p = dict(DEFAULTS, **params)
    rows, hidden = p["rows"], p["hidden"]
    V = config.VLEN
    pitch = rp(config, rows)
    cb = CaseBuilder(name, p, config)
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


def build(params, config):
    return build_act("gelu", NAME, params, config)
