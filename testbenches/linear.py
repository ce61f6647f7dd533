"""linear: ``Y = X @ W (+ bias)`` (kernels.md §2.2) against the float64 product of the dequantized inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp, vector_rows
from programs.hbm_tensors import preload_act
from programs.linear import emit_linear, plan_linear

from .compare import abs_matmul
from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "linear"
DESCRIPTION = "Y = X @ W (+bias) with MRAM K chunks and bf16 split partial sums (linear tolerance)"
DEFAULTS = {
    "rows": hw(2, "BLEN"),
    "K": hw(2, "MLEN"),
    "N": hw(4, "MLEN"),
    "bias": False,
    "max_k_tiles": None,
    "big_base": False,
    "loops": True,
    "path": "auto",
    "scale": 1.0,
    "seed": 0,
}
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_K64_N64", {"rows": 1, "K": hw(1, "MLEN"), "N": hw(1, "MLEN")}, "default"),
    ("rows5_bias", {"rows": hw(1, "BLEN", plus=1), "K": hw(2, "MLEN"), "N": hw(6, "MLEN"), "bias": True}, "default"),
    ("rows64_K512", {"rows": hw(1, "MLEN"), "K": hw(8, "MLEN"), "N": hw(1, "MLEN")}, "default"),
    ("rows130_N128", {"rows": hw(2, "MLEN", plus=2), "K": hw(1, "MLEN"), "N": hw(2, "MLEN"), "bias": True}, "default"),
    ("ksplit", {"max_k_tiles": 1}, "default"),
    (
        "ksplit_K512_bias",
        {"rows": hw(1, "BLEN", plus=1), "K": hw(8, "MLEN"), "N": hw(1, "MLEN"), "max_k_tiles": 1, "bias": True},
        "default",
    ),
    ("big_base", {"big_base": True, "bias": True, "max_k_tiles": 1}, "default"),
    ("small", {"rows": hw(1, "BLEN", plus=1), "K": hw(2, "MLEN"), "N": hw(3, "MLEN"), "bias": True}, "small"),
    ("small_ksplit", {"rows": hw(2, "BLEN"), "K": hw(4, "MLEN"), "N": hw(2, "MLEN"), "max_k_tiles": 1}, "small"),
    ("gemv_rows1", {"rows": 1, "K": hw(8, "MLEN"), "N": hw(2, "MLEN"), "path": "gemv"}, "default"),
    (
        "gemv_rows3_ksplit_bias",
        {"rows": 3, "K": hw(4, "MLEN"), "N": hw(2, "MLEN"), "max_k_tiles": 1, "bias": True, "path": "gemv"},
        "default",
    ),
    ("gemv_rows1_small", {"rows": 1, "K": hw(2, "MLEN"), "N": hw(3, "MLEN"), "bias": True, "path": "gemv"}, "small"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "rows": [1, hw(1, "BLEN", plus=1), hw(2, "BLEN"), hw(1, "MLEN"), hw(2, "MLEN", plus=2)],
    "K": [hw(1, "MLEN"), hw(2, "MLEN"), hw(8, "MLEN")],
    "N": [hw(1, "MLEN"), hw(4, "MLEN"), hw(6, "MLEN")],
    "bias": [False, True],
    "max_k_tiles": [None, 1],
    "big_base": [False, True],
    "path": ["auto", "gemm", "gemv"],
    "cfg": ["default", "small"],
}


def build(params: Mapping[str, Any], config: HardwareConfig, *, name: str = NAME) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    rows, K, N = p["rows"], p["K"], p["N"]
    V, M = config.VLEN, config.MLEN
    pitch = rp(config, rows)
    cb = CaseBuilder(name, p, config)
    skip_to_big_base(cb, p, config)
    tx, X = cb.tensor("x", cb.randn((rows, K), p["scale"]), "act", alloc_rows=pitch)
    # W as the float32 values the device sees (exact; numpy widens it in the float64 products below)
    tw, W = cb.tensor("w", cb.randn((K, N), 1.0 / np.sqrt(K)), "weight", as_float64=False)
    tbias, bvec = None, None
    if p["bias"]:
        tbias, bvec = cb.tensor(
            "bias", cb.randn((1, N), p["scale"]).reshape(-1, V), "act", alloc_rows=vector_rows(config, N)
        )
        bvec = bvec.reshape(-1)
    rx = cb.alloc((K // V) * pitch)
    ry = cb.alloc((N // V) * pitch)
    rb = cb.alloc(vector_rows(config, N)) if p["bias"] else None
    mkt = p["max_k_tiles"]
    split = cb.alloc(pitch) if (mkt is not None and mkt < -(-K // M)) else None
    plan = plan_linear(
        config,
        rows=rows,
        K=K,
        N=N,
        x_base=rx * V,
        x_pitch=pitch,
        y_base=ry * V,
        y_pitch=pitch,
        w=tw,
        bias=tbias,
        bias_base=None if rb is None else rb * V,
        max_k_tiles=mkt,
        split_base=None if split is None else split * V,
        loops=p["loops"],
        path=p["path"],
    )
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, tx, rows, K, rx * V, pitch, GEN_GP)
    emit_linear(asm, plan, gp=GEN_GP, fp=GEN_FP)
    golden = X @ W
    A = abs_matmul(X, W)
    if bvec is not None:
        golden = golden + bvec[None, :]
        A = A + np.abs(bvec)[None, :]
    cb.check(
        "output",
        VramCbm(ry * V, rows, N, pitch),
        golden,
        ("row", "col"),
        "linear",
        A=A,
        n_chunks=plan.n_chunks,
        bias=p["bias"],
    )
    return cb.case(asm)
