"""v_shift_v: ``V_SHFT_V`` zero-fill shifts (kernels.md §4.4); exact.

``out[j] = a[j - s]`` for ``j >= s`` else +0, for shifts {0, 1, 2, H-1, H, V-1, V, V+36} over 4 HBM rows
({0, 1, 2, 15, 16, 63, 64, 100} on the reference machine), plus a host-preloaded row holding NaN and ±Inf
shifted by V and by the largest shift (when it is >= V), which must give all zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.asm import gp as G
from programs.asm import load_imm
from programs.hbm_tensors import preload_act

from .harness import GEN_GP, Case, CaseBuilder, CaseSpec, VramRows
from .shapes import hw, resolve_params

NAME = "v_shift_v"
DESCRIPTION = "V_SHFT_V zero-fill shifts incl. s >= V and a NaN/Inf source row (exact)"
# shifts around HLEN and VLEN (testbenches/shapes.py): {0,1,2,15,16,63,64,100} on the reference machine
DEFAULTS = {
    "rows": 4,
    "shifts": (
        0,
        1,
        2,
        hw(1, "HLEN", plus=-1),
        hw(1, "HLEN"),
        hw(1, "VLEN", plus=-1),
        hw(1, "VLEN"),
        hw(1, "VLEN", plus=36),
    ),
    "scale": 1.0,
    "seed": 0,
}
REQUIRED_CASES = [
    ("default", {}, "default"),
    # {0,1,2,15,16,63,64,100} on the small machine: shifts of 2*VLEN and past it
    (
        "small",
        {
            "shifts": (
                0,
                1,
                2,
                hw(1, "HLEN", plus=-1),
                hw(1, "HLEN"),
                hw(2, "VLEN", plus=-1),
                hw(2, "VLEN"),
                hw(3, "VLEN", plus=4),
            )
        },
        "small",
    ),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {"rows": [4], "shifts": [DEFAULTS["shifts"]]}


def shift_row(a: np.ndarray, s: int) -> np.ndarray:
    out = np.zeros_like(a)
    if s < a.shape[-1]:
        out[..., s:] = a[..., : a.shape[-1] - s]
    return out


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    rows, shifts = p["rows"], tuple(p["shifts"])
    V, Pv = config.VLEN, config.P_V
    rows_p = -(-rows // Pv) * Pv
    cb = CaseBuilder(NAME, p, config)
    src = cb.randn((rows, V), p["scale"])
    src[0, 1] = -0.0
    tx, X = cb.tensor("x", src, "act", alloc_rows=rows_p)
    rx = cb.rows(rows_p, "x", "input")
    bad = np.linspace(-3, 3, V)
    bad[::4] = np.nan
    bad[1::4] = np.inf
    bad[2::4] = -np.inf
    rbad = cb.rows(1, "special", "input")
    cb.vram_preload(rbad, bad)
    big = sorted({s for s in (V, max(shifts)) if s >= V})  # the NaN/Inf row: V and the largest shift
    n_out = len(shifts) * rows + len(big)
    ro = cb.rows(n_out, "out", "output")
    asm = cb.asm()
    preload_act(asm, config, tx, rows, V, rx * V, rows_p, GEN_GP)
    gS, gA, gD = 1, 2, 3
    golden = []
    k = 0
    for s in shifts:
        asm.comment(f"v_shift_v: shift {s}")
        load_imm(asm, gS, s)
        for r in range(rows):
            load_imm(asm, gA, (rx + r) * V)
            load_imm(asm, gD, (ro + k) * V)
            asm.V_SHFT_V(G(gD), G(gA), G(gS))
            golden.append(shift_row(X[r], s))
            k += 1
    for s in big:
        asm.comment(f"v_shift_v: NaN/Inf row shifted by {s} >= V")
        load_imm(asm, gS, s)
        load_imm(asm, gA, rbad * V)
        load_imm(asm, gD, (ro + k) * V)
        asm.V_SHFT_V(G(gD), G(gA), G(gS))
        golden.append(np.zeros(V))
        k += 1
    cb.check("output", VramRows(ro * V, n_out), np.array(golden), ("out_row", "lane"), "exact")
    return cb.case(asm)
