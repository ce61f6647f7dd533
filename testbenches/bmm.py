"""bmm: ``Y[b] = A[b] @ W[b]`` (kernels.md §2.3) through ``batched_matmul`` (linear tolerance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp
from programs.hbm_tensors import preload_act
from programs.linear import emit_batched_matmul, plan_batched_matmul

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, VramCbm
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "bmm"
DESCRIPTION = "batched matmul Y[b] = A[b] @ W[b], batches stacked in CBM rows (linear tolerance)"
DEFAULTS = {
    "nb": 4,
    "Mr": hw(1, "MLEN"),
    "K": hw(2, "MLEN"),
    "N": hw(2, "MLEN"),
    "loops": True,
    "scale": 1.0,
    "big_base": False,
    "seed": 0,
}
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("nb1_Mr1", {"nb": 1, "Mr": 1, "K": hw(1, "MLEN"), "N": hw(1, "MLEN")}, "default"),
    ("nb3_Mr7", {"nb": 3, "Mr": hw(2, "BLEN", plus=-1), "K": hw(2, "MLEN"), "N": hw(1, "MLEN")}, "default"),
    (
        "nb3_Mr7_loops",
        {"nb": 3, "Mr": hw(2, "BLEN", plus=-1), "K": hw(1, "MLEN"), "N": hw(2, "MLEN"), "loops": True},
        "default",
    ),
    ("small", {"nb": 3, "Mr": hw(2, "BLEN", plus=-1), "K": hw(2, "MLEN"), "N": hw(2, "MLEN")}, "small"),
    (  # issue 21: VRAM past 2^18 with bit 11 set
        "big_base",
        {"nb": 3, "Mr": hw(2, "BLEN", plus=-1), "K": hw(1, "MLEN"), "N": hw(1, "MLEN"), "big_base": True},
        "default",
    ),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "nb": [1, 3, 4],
    "Mr": [1, hw(2, "BLEN", plus=-1), hw(1, "MLEN")],
    "K": [hw(1, "MLEN"), hw(2, "MLEN")],
    "N": [hw(1, "MLEN"), hw(2, "MLEN")],
    "big_base": [False, True],
}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    nb, Mr, K, N = p["nb"], p["Mr"], p["K"], p["N"]
    V = config.VLEN
    mp = rp(config, Mr)
    pitch = nb * mp
    cb = CaseBuilder(NAME, p, config)
    skip_to_big_base(cb, p, config)
    A = cb.randn((nb, Mr, K), p["scale"])
    Ahost = np.zeros((nb, mp, K))
    Ahost[:, :Mr] = A
    cb.fill_slack(Ahost[:, Mr:])  # each batch's pad rows: finite random (never part of a valid row)
    ta, Aq = cb.tensor("a", Ahost.reshape(nb * mp, K), "act")
    Aq = Aq.reshape(nb, mp, K)[:, :Mr]
    tw, Wq = cb.tensor("w", cb.randn((nb * K, N), 1.0 / np.sqrt(K)), "weight")
    Wq = Wq.reshape(nb, K, N)
    ra = cb.alloc((K // V) * pitch)
    ry = cb.alloc((N // V) * pitch)
    plan = plan_batched_matmul(config, nb=nb, Mr=Mr, K=K, N=N, a_base=ra * V, y_base=ry * V, w=tw, loops=p["loops"])
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, ta, nb * mp, K, ra * V, pitch, GEN_GP)
    emit_batched_matmul(asm, plan, gp=GEN_GP, fp=GEN_FP)
    golden = np.einsum("bmk,bkn->bmn", Aq, Wq)
    env = np.einsum("bmk,bkn->bmn", np.abs(Aq), np.abs(Wq))

    def post(y: np.ndarray, nb: int = nb, mp: int = mp, Mr: int = Mr) -> np.ndarray:
        return y.reshape(nb, mp, -1)[:, :Mr]

    cb.check(
        "output",
        VramCbm(ry * V, pitch, N, pitch, post),
        golden,
        ("batch", "row", "col"),
        "linear",
        A=env,
        n_chunks=1,
        bias=False,
        group_by=("batch",),
    )
    return cb.case(asm)
