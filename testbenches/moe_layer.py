"""moe_layer: routed MoE ``out[t] = sum_r w[t,r] * SwiGLU_{idx[t,r]}(X[t])`` (programs/moe.py ``moe_layer``).

Stages and their checks (the golden follows the device's quantization points; nothing is stored to HBM):

* router logits ``X @ Wr``: Wr has one nonzero per expert column, ``±2^u`` (u in -1..1) at a random hidden
  row, so every logit is a signed power-of-two multiple of one MX-decoded X element: the bf16 logits the device
  stores equal the float64 golden exactly (asserted), and the selection cannot depend on rounding (ties, which
  E4M3 inputs make possible, follow the tie rule on both sides);
* V_TOPK: the indices in INT SRAM **exact**; the weights in FP SRAM with the ``topk`` row (softmax over the
  selected logits, float64).  The layer routes the tokens in chunks that fit FP/INT SRAM (``chunk`` caps the
  chunk; default: as many tokens as fit), each chunk overwriting the previous one's, so these two checks cover
  the last chunk's tokens; every token's routing is in the output check;
* expert FFN and combine: the float64 SwiGLU of each selected expert (its rows of the stacked Wg / Wu / Wd) on
  the dequantized token row, weighted by the golden weights and summed; every output element with the ``moe``
  row, whose bound :func:`testbenches.compare.moe_bound` composes from the ``ffn`` row (each expert output),
  the ``topk`` row (each weight) and the bf16 roundings of the combine.

``bit_identical`` also runs the other loop form (``loops`` flipped) and requires the output bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.common import rp
from programs.hbm_tensors import preload_act, round_up
from programs.moe import POLICIES, emit_moe_layer, moe_workspace_rows, plan_moe_layer

from .compare import is_bf16_exact, moe_bound, tolerance
from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, CaseSpec, Check, FpWords, IntWords, VramCbm
from .moe_topk import golden_topk
from .shapes import hw, resolve_params, skip_to_big_base

NAME = "moe_layer"
DESCRIPTION = "routed MoE: router linear, V_TOPK, per selected expert SwiGLU FFN, weighted combine (moe tolerance)"
DEFAULTS = {
    "T": 4,
    "hidden": hw(1, "MLEN"),
    "inter": hw(2, "MLEN"),
    "policy": 0,
    "max_k_tiles": None,
    "loops": True,
    "bit_identical": False,
    "scale": 1.0,
    "fp_out": 16,
    "int_out": 0,
    "chunk": None,
    "big_base": False,
    "seed": 0,
}
# shapes in machine units (testbenches/shapes.py); the ids name their values on the reference machine
REQUIRED_CASES = [
    ("default", {}, "default"),
    ("policy1_T3_i64", {"policy": 1, "T": 3, "inter": hw(1, "MLEN")}, "default"),
    ("h128_ksplit_T5", {"T": 5, "hidden": hw(2, "MLEN"), "inter": hw(1, "MLEN"), "max_k_tiles": 1}, "default"),
    ("unrolled_bits", {"T": 2, "loops": False, "bit_identical": True, "max_k_tiles": 1}, "default"),
    ("sram_offsets", {"T": 3, "fp_out": 100, "int_out": 7, "seed": 3}, "default"),
    ("small_policy1", {"policy": 1, "T": 5, "inter": hw(1, "MLEN")}, "small"),
    ("chunks_p1_T3_c2", {"T": 3, "chunk": 2, "policy": 1, "inter": hw(1, "MLEN"), "seed": 4}, "default"),
    ("chunks_bits", {"T": 3, "chunk": 2, "inter": hw(1, "MLEN"), "bit_identical": True}, "default"),
    # issue 21: T % 4 != 0 for policy 0 without a K split; VRAM past 2^18 with bit 11 set
    ("policy0_T7_i64", {"T": 7, "inter": hw(1, "MLEN")}, "default"),
    ("policy1_T5_big_base", {"policy": 1, "T": 5, "inter": hw(1, "MLEN"), "big_base": True}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
#: larger cases, run under ``-m slow`` (tests/testbench/test_moe_layer.py)
SLOW_CASES = [
    ("T16_h128_i256", {"T": 16, "hidden": hw(2, "MLEN"), "inter": hw(4, "MLEN")}, "default"),
    ("T64_h256_i512", {"T": 64, "hidden": hw(4, "MLEN"), "inter": hw(8, "MLEN")}, "default"),
    (
        "policy1_T100_h128_mkt2",
        {"policy": 1, "T": 100, "hidden": hw(2, "MLEN"), "inter": hw(4, "MLEN"), "max_k_tiles": 2},
        "default",
    ),
    ("policy1_T32_bits", {"policy": 1, "T": 32, "bit_identical": True, "seed": 5}, "default"),
    ("small_T24_h64_i128", {"T": 24, "hidden": hw(2, "MLEN"), "inter": hw(4, "MLEN"), "policy": 1}, "small"),
    ("T256_two_chunks", {"T": 256}, "default"),
    ("policy1_T130_two_chunks", {"policy": 1, "T": 130, "inter": hw(1, "MLEN"), "seed": 2}, "default"),
]
RANGES = {
    "T": [1, 4, 5],
    "policy": [0, 1],
    "hidden": [hw(1, "MLEN"), hw(2, "MLEN")],
    "inter": [hw(1, "MLEN"), hw(2, "MLEN")],
    "max_k_tiles": [None, 1],
    "loops": [True, False],
    "chunk": [None, 1, 2],
    "cfg": ["default", "small"],
}


def router_weights(rng: np.random.Generator, hidden: int, E: int, Epad: int) -> np.ndarray:
    """``Wr [hidden, Epad]``: column e < E holds one ``±2^u`` (u in -1..1) at row ``perm[e % hidden]``."""
    w = np.zeros((hidden, Epad))
    rows = rng.permutation(hidden)[np.arange(E) % hidden]
    w[rows, np.arange(E)] = rng.choice([-1.0, 1.0], E) * 2.0 ** rng.integers(-1, 2, E)
    return w


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


#: expert e's ``(Wg [hidden, inter], Wu [hidden, inter], Wd [inter, hidden])``
ExpertWeights = Callable[[int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def stacked_experts(Wg: np.ndarray, Wu: np.ndarray, Wd: np.ndarray) -> ExpertWeights:
    """Expert e of stacked tensors: rows ``e*hidden..`` of Wg/Wu and ``e*inter..`` of Wd."""
    hidden, inter = Wd.shape[1], Wg.shape[1]

    def weights(e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return Wg[e * hidden : (e + 1) * hidden], Wu[e * hidden : (e + 1) * hidden], Wd[e * inter : (e + 1) * inter]

    return weights


def expert_outputs(X: np.ndarray, idx: np.ndarray, weights: ExpertWeights) -> tuple[np.ndarray, np.ndarray]:
    """(f, A) ``[T, k, hidden]``: the float64 SwiGLU of expert ``idx[t,r]`` on ``X[t]`` and its ffn envelope
    ``(|x@Wg|*|x@Wu|)@|Wd|``, the expert's weights from ``weights(e)``."""
    T, k = idx.shape
    f = np.zeros((T, k, X.shape[1]))
    A = np.zeros((T, k, X.shape[1]))
    for t in range(T):
        for r in range(k):
            wg, wu, wd = (w.astype(np.float64) for w in weights(int(idx[t, r])))
            gx, ux = X[t] @ wg, X[t] @ wu
            f[t, r] = (_silu(gx) * ux) @ wd
            A[t, r] = (np.abs(gx) * np.abs(ux)) @ np.abs(wd)
    return f, A


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = resolve_params(dict(DEFAULTS, **params), config)
    case = _build(p, config)
    if p["bit_identical"]:
        case.companion = _build(dict(p, loops=not p["loops"]), config)
        out = case.checks[0]
        case.checks.append(Check("bit_identical", out.read, None, out.coords, tolerance("exact"), golden_from="output"))
    return case


def _build(p: dict[str, Any], config: HardwareConfig) -> Case:
    T, hidden, inter, policy = p["T"], p["hidden"], p["inter"], p["policy"]
    if policy not in POLICIES:
        raise ValueError(f"moe_layer: policy={policy} must be one of {sorted(POLICIES)}")
    E, k = POLICIES[policy]
    V, M = config.VLEN, config.MLEN
    Epad = round_up(E, M)
    pitch = rp(config, T)
    cb = CaseBuilder(NAME, p, config)
    skip_to_big_base(cb, p, config)
    tx, X = cb.tensor("x", cb.randn((T, hidden), p["scale"]), "act", alloc_rows=pitch)
    wr_host = router_weights(cb.rng, hidden, E, Epad)
    twr, Wr = cb.tensor("wr", wr_host, "weight")
    experts = {}
    for name, rows, cols in (("wg", hidden, inter), ("wu", hidden, inter), ("wd", inter, hidden)):
        experts[name] = cb.tensor(name, cb.randn((E * rows, cols), 1 / np.sqrt(rows)), "weight", as_float64=False)
    logits = X @ Wr[:, :E]
    assert np.array_equal(Wr, wr_host), "the router weights must be MX-exact"
    assert is_bf16_exact(logits), "the router logits must be exact in bf16 (the values the device stores)"
    rx = cb.alloc((hidden // V) * pitch)
    ro = cb.alloc((hidden // V) * pitch)
    nws = moe_workspace_rows(
        config, T=T, hidden=hidden, inter=inter, policy=policy, pitch=pitch, max_k_tiles=p["max_k_tiles"]
    )
    rws = cb.alloc(nws)
    plan = plan_moe_layer(
        config,
        T=T,
        hidden=hidden,
        inter=inter,
        policy=policy,
        x_base=rx * V,
        pitch=pitch,
        out_base=ro * V,
        ws_base=rws * V,
        wr=twr,
        wg=experts["wg"][0],
        wu=experts["wu"][0],
        wd=experts["wd"][0],
        fp_out=p["fp_out"],
        int_out=p["int_out"],
        max_k_tiles=p["max_k_tiles"],
        loops=p["loops"],
        chunk=p["chunk"],
    )
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    preload_act(asm, config, tx, T, hidden, rx * V, pitch, GEN_GP)
    emit_moe_layer(asm, plan, gp=GEN_GP, fp=GEN_FP)
    idx, w = golden_topk(logits, k)
    f, A = expert_outputs(X, idx, stacked_experts(experts["wg"][1], experts["wu"][1], experts["wd"][1]))
    bound, rho = moe_bound(w, f, A)

    last = plan.topk[-1]  # the chunk whose routing stays in the SRAMs
    n, sl = last.T, slice(last.row0, last.row0 + last.T)

    def per_token(a: np.ndarray, n: int = n, k: int = k) -> np.ndarray:
        return a.reshape(n, k)

    golden = np.einsum("tr,trc->tc", w, f)
    cb.check("output", VramCbm(ro * V, T, hidden, pitch), golden, ("token", "col"), "moe", A=bound, rho=rho)
    cb.check("indices", IntWords(p["int_out"], n * k, post=per_token), idx[sl], ("token", "rank"), "exact")
    cb.check("weights", FpWords(p["fp_out"], n * k, post=per_token), w[sl], ("token", "rank"), "topk")
    return cb.case(asm, plan=plan)
