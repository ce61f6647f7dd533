"""h_store: scale by 1.5 (slot 8), ``H_STORE_V`` to HBM, prefetch back (kernels.md §4.4); both exact.

Checks: the output tensor's HBM bytes (elements and MX scales) equal the host MX encoding of bf16(1.5·x)
(pad rows included: the store always writes whole Ps-row groups), the re-prefetched VRAM equals
decode(encode(·)), and (generic) no HBM byte outside the output tensor changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from plena_sim.numerics.formats import decode_tensor, encode_tensor
from programs.common import rp
from programs.elementwise import emit_scale_rows, plan_scale_rows
from programs.hbm_tensors import preload_act, store_act

from .compare import bf16_decode, bf16_encode
from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, HbmBytes, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "h_store"
DESCRIPTION = "H_STORE_V round trip: HBM bytes equal the host MX encoding; re-prefetch equals decode(encode)"
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
DEFAULTS = {"rows": hw(1, "RP"), "cols": hw(2, "VLEN"), "factor": 1.5, "scale": 1.0, "big_base": False, "seed": 0}
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("rows1_cols64", {"rows": 1, "cols": hw(1, "VLEN")}, "default"),
    ("rows6_cols256", {"rows": hw(1, "RP", plus=2), "cols": hw(4, "VLEN")}, "default"),
    ("rows4_cols64", {"rows": hw(1, "RP"), "cols": hw(1, "VLEN")}, "default"),
    ("small", {"rows": hw(1, "RP", plus=2), "cols": hw(2, "VLEN")}, "small"),
    ("big_base", {"rows": hw(1, "RP", plus=2), "big_base": True}, "default"),  # issue 21: bit 11 set
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "rows": [1, hw(1, "RP"), hw(1, "RP", plus=2)],
    "cols": [hw(1, "VLEN"), hw(2, "VLEN"), hw(4, "VLEN")],
    "big_base": [False, True],
}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    rows, cols = p["rows"], p["cols"]
    V = config.VLEN
    pitch = rp(config, rows)
    cb = CaseBuilder(NAME, p, config)
    skip_to_big_base(cb, p, config)
    tx, _x = cb.tensor("x", cb.randn((rows, cols), p["scale"]), "act", alloc_rows=pitch)
    to, po = cb.output_tensor("out", pitch, cols, "act")
    cb.set_fp(USER0=p["factor"])
    f = cb.fp_value("USER0")
    n = (cols // V) * pitch
    ra, rb = cb.alloc(n), cb.alloc(n)
    sc = plan_scale_rows(config, nrows=n, src_base=ra * V, dst_base=ra * V, slot=8)
    cb.add_regions({"a": (ra, n, "scratch"), "back": (rb, n, "scratch")})
    asm = cb.asm()
    asm.comment("h_store: load x, scale by FP[8]")
    preload_act(asm, config, tx, rows, cols, ra * V, pitch, GEN_GP)
    emit_scale_rows(asm, sc, gp=GEN_GP, fp=GEN_FP)
    asm.comment("h_store: store to HBM, prefetch back")
    store_act(asm, config, to, pitch, cols, ra * V, pitch, GEN_GP)
    preload_act(asm, config, to, pitch, cols, rb * V, pitch, GEN_GP)
    full = cb.tensors["x"].values[:pitch, :cols]  # the rows a store writes: X and its (random) slack rows
    y = bf16_decode(bf16_encode(full.astype(np.float32) * np.float32(f))).astype(np.float32)
    t = config.hbm_type("HBM_V_ACT_TYPE")
    elem, scale, _ = encode_tensor(y, t)
    expect = np.concatenate([elem, scale]).astype(np.uint8)
    assert expect.size == po.end - po.base
    cb.check("hbm_bytes", HbmBytes(po.base, expect.size), expect, ("byte",), "exact")
    back = decode_tensor(elem, scale, t, (pitch, cols)).astype(np.float64)
    cb.check("prefetched", VramCbm(rb * V, pitch, cols, pitch), back, ("row", "col"), "exact")
    return cb.case(asm)
