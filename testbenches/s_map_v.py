"""s_map_v: per-row reductions into FP SRAM, then ``S_MAP_V_FP`` back to VRAM (kernels.md §4.4).

Variants: ``max`` (V_RED_MAX into FP[16+r], exact), ``sum`` (V_RED_SUM, ssum tolerance), and the masked
forms with ``V_MASK = 0b1010`` (only enabled heads' lanes count).  Both the FP SRAM words and the VRAM rows
written by S_MAP_V_FP are checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.asm import fp as F
from programs.asm import gp as G
from programs.asm import load_imm
from programs.common import rp
from programs.hbm_tensors import ceil_div, preload_act

from .harness import FP_STATE_BASE, GEN_GP, Case, CaseBuilder, CaseSpec, FpWords, VramRows
from .shapes import hw, resolve_params

NAME = "s_map_v"
DESCRIPTION = "V_RED_MAX / V_RED_SUM (plain and masked) into FP SRAM, S_MAP_V_FP back to VRAM"
# one row per FP SRAM word of S_MAP_V_FP: rows = VLEN fills one VRAM map row (testbenches/shapes.py)
DEFAULTS = {"rows": hw(1, "VLEN"), "variant": "max", "mask": 0b1010, "scale": 1.0, "seed": 0}
REQUIRED_CASES = [
    ("max", {}, "default"),
    ("sum", {"variant": "sum"}, "default"),
    ("masked_max", {"variant": "masked_max"}, "default"),
    ("masked_sum", {"variant": "masked_sum"}, "default"),
    ("small_max", {"rows": hw(2, "VLEN")}, "small"),  # two map rows
    ("small_masked_sum", {"rows": hw(2, "VLEN"), "variant": "masked_sum"}, "small"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {"variant": ["max", "sum", "masked_max", "masked_sum"], "rows": [1, hw(1, "VLEN")]}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    rows, var = p["rows"], p["variant"]
    V, H = config.VLEN, config.HLEN
    pitch = rp(config, rows)
    masked = var.startswith("masked")
    is_max = var.endswith("max")
    cb = CaseBuilder(NAME, p, config)
    tx, X = cb.tensor("x", cb.randn((rows, V), p["scale"]), "act", alloc_rows=pitch)
    nmap = ceil_div(rows, V)
    rx = cb.rows(pitch, "x", "input")
    ro = cb.rows(nmap, "map", "output")
    base = FP_STATE_BASE
    if base + nmap * V > config.FP_SRAM_SIZE:
        most = (config.FP_SRAM_SIZE - base) // V * V
        fits = f"must be <= {most}" if most else "cannot fit (not even one map row)"
        raise ValueError(
            f"s_map_v: rows={rows} {fits}: S_MAP_V_FP reads whole VLEN={V} word groups from "
            f"FP[{base}..] inside FP_SRAM_SIZE={config.FP_SRAM_SIZE}"
        )
    asm = cb.asm()
    preload_act(asm, config, tx, rows, V, rx * V, pitch, GEN_GP)
    gX, gI, gL, gM = 1, 2, 3, 4
    fa = 1
    asm.comment(f"s_map_v: {var} per row into FP[{base}+r]")
    if masked:
        load_imm(asm, gM, p["mask"])
        asm.C_SET_V_MASK_REG(G(gM))
    load_imm(asm, gX, rx * V)
    asm.S_ADDI_INT(G(gI), G(0), 0)
    if rows > 1:
        asm.C_LOOP_START(G(gL), rows)
    if is_max:
        asm.S_LD_FP(F(fa), G(0), 0)  # -inf
        asm.V_RED_MAX(F(fa), G(gX), int(masked))
    else:
        asm.S_ADD_FP(F(fa), F(0), F(0))
        asm.V_RED_SUM(F(fa), G(gX), int(masked))
    asm.S_ST_FP(F(fa), G(gI), base)
    asm.S_ADDI_INT(G(gI), G(gI), 1)
    asm.S_ADDI_INT(G(gX), G(gX), V)
    if rows > 1:
        asm.C_LOOP_END(G(gL))
    asm.comment("s_map_v: S_MAP_V_FP back to VRAM")
    for k in range(nmap):
        load_imm(asm, gX, (ro + k) * V)
        asm.S_MAP_V_FP(G(gX), G(0), base + k * V)
    lanes = np.ones(V, dtype=bool)
    if masked:
        heads = np.arange(V) // H
        lanes = np.array([(p["mask"] >> int(h)) & 1 == 1 if h < 32 else False for h in heads])
    if is_max:
        golden = np.where(lanes[None, :], X, -np.inf).max(axis=1)
        tol, A = "exact", None
    else:
        golden = np.where(lanes[None, :], X, 0.0).sum(axis=1)
        tol, A = "ssum", np.where(lanes[None, :], np.abs(X), 0.0).sum(axis=1)
    cb.check("fp_words", FpWords(base, rows), golden, ("row",), tol, A=A)

    def map_words(a: np.ndarray, rows: int = rows) -> np.ndarray:
        return a.reshape(-1)[:rows]

    cb.check("vram_map", VramRows(ro * V, nmap, post=map_words), golden, ("row",), tol, A=A)
    return cb.case(asm)
