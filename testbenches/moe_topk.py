"""moe_topk: ``V_TOPK`` routing (kernels.md §2.12): indices exact (descending, ties to the lower index),
weights = softmax over the selected logits (topk tolerance).

Variant A: logits [T, E] from HBM (``topk``); variant B: ``router_topk`` with a one-hot X and Wr (E padded to
a multiple of M), so the logits are exactly Wr's rows.  Logits are per-token permutations of distinct
MX-exact values ``±(1 + m/8)·2^e`` (asserted exact and distinct); ``dup`` makes the k-th and (k+1)-th
largest logits equal to exercise the tie rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from plena_sim.config import HardwareConfig
from programs.common import rp
from programs.hbm_tensors import preload_act, round_up
from programs.moe import POLICIES, emit_router_topk, emit_topk, plan_router_topk, plan_topk

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, FpWords, IntWords
from .shapes import skip_to_big_base

NAME = "moe_topk"
DESCRIPTION = "MoE router top-k (V_TOPK): exact indices, softmax weights of the selected logits (topk tol)"
DEFAULTS = {"T": 4, "policy": 0, "variant": "A", "dup": False, "fp_out": 16, "int_out": 0, "big_base": False, "seed": 0}
REQUIRED_CASES = [
    ("A_policy0", {}, "default"),
    ("A_policy1", {"policy": 1}, "default"),
    ("B_policy0", {"variant": "B"}, "default"),
    ("B_policy1", {"variant": "B", "policy": 1, "T": 5}, "default"),
    ("A_policy0_dup", {"dup": True}, "default"),
    ("B_policy1_dup", {"variant": "B", "policy": 1, "dup": True}, "default"),
    ("small_A_policy1", {"policy": 1}, "small"),
    # issue 21: T % 4 != 0 for every policy and variant; the router's VRAM past 2^18 with bit 11 set
    ("A_policy0_T7", {"T": 7}, "default"),
    ("A_policy1_T7", {"policy": 1, "T": 7}, "default"),
    ("B_policy0_T5", {"variant": "B", "T": 5}, "default"),
    ("B_policy1_T7_big_base", {"variant": "B", "policy": 1, "T": 7, "big_base": True}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {"policy": [0, 1], "variant": ["A", "B"], "T": [1, 4, 5, 7], "dup": [False, True], "big_base": [False, True]}


def value_pool() -> np.ndarray:
    """128 distinct MX-exact values ±(1+m/8)·2^e, e in -4..3 (an 8-binade spread keeps every E4M3 element of
    a block normal under one shared scale)."""
    return np.array([s * (1 + m / 8) * 2.0**e for s in (1, -1) for e in range(-4, 4) for m in range(8)])


def make_logits(rng: np.random.Generator, T: int, E: int, k: int, dup: bool) -> np.ndarray:
    pool = value_pool()
    out = np.zeros((T, E))
    for t in range(T):
        vals = rng.choice(pool, size=E, replace=False)
        out[t] = vals
        if dup:
            order = np.argsort(-vals, kind="stable")
            out[t, order[k]] = out[t, order[k - 1]]  # tie across the selection boundary
    return out


def golden_topk(logits: np.ndarray, k: int) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.float64]]:
    idx = np.argsort(-logits, axis=1, kind="stable")[:, :k]  # descending, ties to the lower index
    sel = np.take_along_axis(logits, idx, axis=1)
    e = np.exp(sel - sel[:, :1])
    return idx.astype(np.uint32), e / e.sum(axis=1, keepdims=True)


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = dict(DEFAULTS, **params)
    T, policy = p["T"], p["policy"]
    E, k = POLICIES[policy]
    V, M = config.VLEN, config.MLEN
    cb = CaseBuilder(NAME, p, config)
    skip_to_big_base(cb, p, config)
    logits = make_logits(cb.rng, T, E, k, p["dup"])
    pitch = rp(config, T)
    nrow = -(-E // V)
    if p["variant"] == "A":
        cols = round_up(E, V)
        host = np.zeros((T, cols))
        host[:, :E] = logits
        tl, Lq = cb.tensor("logits", host, "act", alloc_rows=pitch)
        assert np.array_equal(Lq[:, :E], logits), "logits must be MX-exact"
        rl = cb.alloc((cols // V) * pitch)
        rs = cb.alloc(nrow) if nrow > 1 else None
        topk = plan_topk(
            config,
            T=T,
            policy=policy,
            logits_base=rl * V,
            pitch=pitch,
            fp_out=p["fp_out"],
            int_out=p["int_out"],
            stage_base=None if rs is None else rs * V,
        )
        cb.add_regions(topk.vram_regions)
        asm = cb.asm()
        preload_act(asm, config, tl, T, cols, rl * V, pitch, GEN_GP)
        emit_topk(asm, topk, gp=GEN_GP, fp=GEN_FP)
    else:
        hidden = M
        if hidden < T:
            raise ValueError(f"moe_topk: T={T} must be <= hidden={hidden} for one-hot tokens")
        Epad = round_up(E, M)
        x = np.zeros((T, hidden))
        x[np.arange(T), np.arange(T)] = 1.0
        tx, _ = cb.tensor("x", x, "act", alloc_rows=pitch)
        w = np.zeros((hidden, Epad))
        w[:T, :E] = logits
        tw, Wq = cb.tensor("wr", w, "weight")
        assert np.array_equal(Wq[:T, :E], logits), "router weights must be MX-exact"
        rx = cb.alloc((hidden // V) * pitch)
        rl = cb.alloc((Epad // V) * pitch)
        rs = cb.alloc(nrow) if nrow > 1 else None
        router = plan_router_topk(
            config,
            T=T,
            hidden=hidden,
            policy=policy,
            x_base=rx * V,
            pitch=pitch,
            wr=tw,
            logits_base=rl * V,
            fp_out=p["fp_out"],
            int_out=p["int_out"],
            stage_base=None if rs is None else rs * V,
        )
        cb.add_regions(router.vram_regions)
        asm = cb.asm()
        preload_act(asm, config, tx, T, hidden, rx * V, pitch, GEN_GP)
        emit_router_topk(asm, router, gp=GEN_GP, fp=GEN_FP)
    idx, w = golden_topk(logits, k)

    def per_token(a: np.ndarray, T: int = T, k: int = k) -> np.ndarray:
        return a.reshape(T, k)

    cb.check("indices", IntWords(p["int_out"], T * k, post=per_token), idx, ("token", "rank"), "exact")
    cb.check("weights", FpWords(p["fp_out"], T * k, post=per_token), w, ("token", "rank"), "topk")
    return cb.case(asm)
