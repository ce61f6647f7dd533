"""embedding: table rows gathered by run-time ids from INT SRAM (kernels.md §2.9); exact."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp
from programs.embedding import emit_embedding, plan_embedding

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "embedding"
DESCRIPTION = "embedding gather out[t] = table[ids[t]] via a landing zone and exact row copies"
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine.
# T = 2*RP-1 tokens fill the output pitch but one row, so a Pv-row prefetch into out spills past it.
DEFAULTS = {
    "vocab": 100,
    "hidden": hw(2, "VLEN"),
    "T": hw(2, "RP", plus=-1),
    "ids_base": 16,
    "scale": 1.0,
    "big_base": False,
    "seed": 0,
}
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("T1_h64", {"T": 1, "hidden": hw(1, "VLEN")}, "default"),
    ("T4_h256", {"T": hw(1, "RP"), "hidden": hw(4, "VLEN")}, "default"),
    ("T33_h128", {"T": hw(8, "RP", plus=1)}, "default"),
    ("small_T7", {"hidden": hw(2, "VLEN")}, "small"),
    ("big_base", {"big_base": True}, "default"),  # issue 21: VRAM past 2^18 with bit 11 set
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "hidden": [hw(1, "VLEN"), hw(2, "VLEN"), hw(4, "VLEN")],
    "T": [1, hw(1, "RP"), hw(2, "RP", plus=-1), hw(8, "RP", plus=1)],
    "big_base": [False, True],
}


def token_ids(rng: np.random.Generator, T: int, vocab: int) -> np.ndarray:
    """Ids that include 0, vocab-1 and a duplicate whenever T allows."""
    ids = rng.integers(0, vocab, size=T)
    special = [0, vocab - 1, int(ids[0])] if T >= 3 else [0, vocab - 1][:T]
    ids[: len(special)] = special[:T]
    if T >= 4:
        ids[3] = ids[2]
    return ids.astype(np.uint32)


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    vocab, hidden, T = p["vocab"], p["hidden"], p["T"]
    V, Pv = config.VLEN, config.P_V
    cb = CaseBuilder(NAME, p, config)
    skip_to_big_base(cb, p, config)
    tab = cb.randn((vocab, hidden), p["scale"])
    tab[0, :3] = -0.0  # exact -0 entries: a +0.0 copy idiom would lose the sign
    tt, TAB = cb.tensor("table", tab, "act", alloc_rows=vocab + Pv - 1)
    ids = token_ids(cb.rng, T, vocab)
    cb.int_words(p["ids_base"], ids)
    pitch = rp(config, T)
    ro = cb.alloc((hidden // V) * pitch)
    rl = cb.alloc(Pv)
    plan = plan_embedding(
        config,
        T=T,
        vocab=vocab,
        hidden=hidden,
        table=tt,
        ids_base=p["ids_base"],
        out_base=ro * V,
        land_base=rl * V,
        pitch=pitch,
    )
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    emit_embedding(asm, plan, gp=GEN_GP, fp=GEN_FP)
    golden = TAB[ids.astype(np.int64)]
    cb.check("output", VramCbm(ro * V, T, hidden, pitch), golden, ("token", "col"), "exact")
    return cb.case(asm)
