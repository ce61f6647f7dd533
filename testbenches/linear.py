"""linear: ``Y = X @ W (+ bias)`` (kernels.md §2.2) against the float64 product of the dequantized inputs."""
from __future__ import annotations

import numpy as np

from programs.common import rp, vector_rows
from programs.hbm import preload_act
from programs.linear import emit_linear, plan_linear

from .harness import GEN_FP, GEN_GP, CaseBuilder, VramCbm

NAME = "linear"
DESCRIPTION = "Y = X @ W (+bias) with MRAM K chunks and bf16 split partial sums (linear tolerance)"
DEFAULTS = {"rows": 8, "K": 128, "N": 256, "bias": False, "max_k_tiles": None, "big_base": False,
            "loops": False, "scale": 1.0, "seed": 0}
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_K64_N64", {"rows": 1, "K": 64, "N": 64}, "default"),
    ("rows5_bias", {"rows": 5, "K": 128, "N": 384, "bias": True}, "default"),
    ("rows64_K512", {"rows": 64, "K": 512, "N": 64}, "default"),
    ("rows130_N128", {"rows": 130, "K": 64, "N": 128, "bias": True}, "default"),
    ("ksplit", {"max_k_tiles": 1}, "default"),
    ("ksplit_K512_bias", {"rows": 5, "K": 512, "N": 64, "max_k_tiles": 1, "bias": True}, "default"),
    ("big_base", {"big_base": True, "bias": True, "max_k_tiles": 1}, "default"),
    ("small", {"rows": 5, "K": 64, "N": 96, "bias": True}, "small"),
    ("small_ksplit", {"rows": 8, "K": 128, "N": 64, "max_k_tiles": 1}, "small"),
]
STRETCH_CASES: list = []
RANGES = {"rows": [1, 5, 8, 64, 130], "K": [64, 128, 512], "N": [64, 256, 384], "bias": [False, True],
          "max_k_tiles": [None, 1], "big_base": [False, True], "cfg": ["default", "small"]}

BIG_BASE_ROW = 4100          # VRAM element 262400 > 2^18 with V = 64


def build(params, config, *, name: str = NAME):
    p = dict(DEFAULTS, **params)
    rows, K, N = p["rows"], p["K"], p["N"]
    V, M = config.VLEN, config.MLEN
    pitch = rp(config, rows)
    cb = CaseBuilder(name, p, config)
    if p["big_base"]:
        cb.skip_to(BIG_BASE_ROW)
    tx, X = cb.tensor("x", cb.randn((rows, K), p["scale"]), "act", alloc_rows=pitch)
    tw, W = cb.tensor("w", cb.randn((K, N), 1.0 / np.sqrt(K)), "weight")
    tbias, bvec = None, None
    if p["bias"]:
        tbias, bvec = cb.tensor("bias", cb.randn((1, N), p["scale"]).reshape(-1, V), "act",
                                alloc_rows=vector_rows(config, N))
        bvec = bvec.reshape(-1)
    rx = cb.alloc((K // V) * pitch)
    ry = cb.alloc((N // V) * pitch)
    rb = cb.alloc(vector_rows(config, N)) if p["bias"] else None
    mkt = p["max_k_tiles"]
    split = cb.alloc(pitch) if (mkt is not None and -(-K // M) > mkt) else None
    plan = plan_linear(config, rows=rows, K=K, N=N, x_base=rx * V, x_pitch=pitch, y_base=ry * V, y_pitch=pitch,
                       w=tw, bias=tbias, bias_base=None if rb is None else rb * V, max_k_tiles=mkt,
                       split_base=None if split is None else split * V, loops=p["loops"])
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, tx, rows, K, rx * V, pitch, GEN_GP)
    emit_linear(asm, plan, gp=GEN_GP, fp=GEN_FP)
    golden = X @ W
    A = np.abs(X) @ np.abs(W)
    if p["bias"]:
        golden = golden + bvec[None, :]
        A = A + np.abs(bvec)[None, :]
    cb.check("output", VramCbm(ry * V, rows, N, pitch), golden, ("row", "col"), "linear", A=A,
             n_chunks=plan.n_chunks, bias=p["bias"])
    return cb.case(asm)
