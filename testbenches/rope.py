"""rope: HF ``x·cos + rotate_half(x)·sin`` with on-device rotate_half (kernels.md §2.8; rope tolerance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp
from programs.hbm_tensors import preload_act
from programs.rope import emit_rope, plan_rope, rope_rotation_tile

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "rope"
DESCRIPTION = "RoPE (HF rotate_half) with an MX-exact rotation tile or block permutation (rope tolerance)"
# head dims in fractions of MLEN (M/d heads share one rotation tile), positions in RP units
# (testbenches/shapes.py); the ids name the values on the reference machine
D16, D32, D64 = hw(1, "MLEN", div=4), hw(1, "MLEN", div=2), hw(1, "MLEN")
SEQ5 = hw(1, "RP", plus=1)
DEFAULTS = {
    "seq": hw(8, "RP"),
    "nh": 4,
    "d": D64,
    "inplace": False,
    "theta": 10000.0,
    "pos0": 0,
    "scale": 1.0,
    "big_base": False,
    "seed": 0,
}
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("d16", {"d": D16}, "default"),
    ("d32_seq5", {"d": D32, "seq": SEQ5}, "default"),
    ("d64_seq1_inplace", {"seq": 1, "inplace": True}, "default"),
    ("d16_seq5_inplace", {"d": D16, "seq": SEQ5, "inplace": True, "nh": 8}, "default"),
    ("small_d16", {"d": D32, "seq": SEQ5}, "small"),  # d = 16 on the small machine
    # issue 21: eight heads per rotation tile (d = M/8) and a VRAM base past 2^18 with bit 11 set
    ("d8_nh8", {"d": hw(1, "MLEN", div=8), "nh": 8, "seq": SEQ5}, "default"),
    ("big_base", {"d": D16, "seq": SEQ5, "big_base": True}, "default"),
]
STRETCH_CASES = [
    ("d128_block", {"d": hw(2, "MLEN"), "nh": 2, "pos0": 100}, "default"),
]
RANGES = {
    "d": [hw(1, "MLEN", div=8), D16, D32, D64],
    "seq": [1, SEQ5, hw(8, "RP")],
    "inplace": [False, True],
    "nh": [4, 8],
    "big_base": [False, True],
}


def rotate_half(x: np.ndarray, d: int) -> np.ndarray:
    shp = x.shape
    x = x.reshape(shp[0], -1, d)
    h = d // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1).reshape(shp)


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    seq, nh, d = p["seq"], p["nh"], p["d"]
    V, M = config.VLEN, config.MLEN
    cols = nh * d
    pitch = rp(config, seq)
    cb = CaseBuilder(NAME, p, config)
    skip_to_big_base(cb, p, config)
    tx, X = cb.tensor("x", cb.randn((seq, cols), p["scale"]), "act", alloc_rows=pitch)
    pos = p["pos0"] + np.arange(seq)[:, None]
    inv = p["theta"] ** (-np.arange(0, d, 2) / d)
    ang = np.concatenate([pos * inv, pos * inv], axis=1)  # [seq, d]
    tc, COS = cb.tensor("cos", np.tile(np.cos(ang), (1, nh)), "act", alloc_rows=pitch)
    ts, SIN = cb.tensor("sin", np.tile(np.sin(ang), (1, nh)), "act", alloc_rows=pitch)
    trot = None
    if d <= M:
        trot, R = cb.tensor("rot", rope_rotation_tile(d, M), "weight")
        assert np.array_equal(R, rope_rotation_tile(d, M)), "rotation tile must be MX-exact"
    n = (cols // V) * pitch
    rx = cb.alloc(n)
    ry = rx if p["inplace"] else cb.alloc(n)
    rc, rs, rxr, rt = cb.alloc(n), cb.alloc(n), cb.alloc(n), cb.alloc(1)
    plan = plan_rope(
        config,
        rows=seq,
        nh=nh,
        d=d,
        x_base=rx * V,
        pitch=pitch,
        y_base=ry * V,
        cos=tc,
        sin=ts,
        cos_base=rc * V,
        sin_base=rs * V,
        xr_base=rxr * V,
        t_base=rt * V,
        rot=trot,
    )
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, tx, seq, cols, rx * V, pitch, GEN_GP)
    emit_rope(asm, plan, gp=GEN_GP, fp=GEN_FP)
    xr = rotate_half(X, d)
    golden = X * COS + xr * SIN
    A = np.abs(X) * np.abs(COS) + np.abs(xr) * np.abs(SIN)

    def post(y: np.ndarray, seq: int = seq, nh: int = nh, d: int = d) -> np.ndarray:
        return y.reshape(seq, nh, d)

    cb.check(
        "output",
        VramCbm(ry * V, seq, cols, pitch, post),
        golden.reshape(seq, nh, d),
        ("pos", "head", "col"),
        "rope",
        A=A.reshape(seq, nh, d),
        group_by=("head",),
    )
    return cb.case(asm)
