"""``router_topk`` (kernels.md §2.12): routed-MoE router = ``linear(X, Wr)`` then ``V_TOPK`` per token.

Policy 0: E = 32 experts, k = 4; policy 1: E = 128, k = 8.  Logits are CBM ``[T, round_up(E, M)]`` (the
router pads E to a multiple of M).  Per token t: ``V_TOPK gp(fp_out + t*k), gp(row_t), gp(int_out + t*k),
policy`` writes the k softmax weights (over the selected logits) to FP SRAM and the k expert indices to INT
SRAM, in rank order.  If E <= V, ``row_t`` is CBM block 0 row t; otherwise the token's ``ceil(E/V)`` blocks
are first copied (row-copy idiom) into consecutive staging rows, because V_TOPK reads consecutive rows.

:func:`plan_topk` / :func:`emit_topk` are step 2 alone (logits already in VRAM);
:func:`plan_router_topk` / :func:`emit_router_topk` are both steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import LOOP_COUNT_MAX, Asm, add_imm, load_imm
from .asm import fp as F
from .asm import gp as G
from .common import (
    FP_STATE_BASE,
    SLOT,
    LoopBudget,
    Region,
    check_addr,
    check_disjoint,
    fail,
    need_int,
    need_multiple,
    take_regs,
)
from .hbm_tensors import HbmTensor, ceil_div, round_up
from .linear import GP_NEEDED as LIN_GP
from .linear import LinearPlan, emit_linear_core, plan_linear

__all__ = ["POLICIES", "TopkPlan", "plan_topk", "emit_topk", "RouterPlan", "plan_router_topk", "emit_router_topk"]

#: policy -> (E experts, k selected)
POLICIES = {0: (32, 4), 1: (128, 8)}


@dataclass(frozen=True)
class TopkPlan:
    T: int
    policy: int
    E: int
    k: int
    logits_base: int
    pitch: int
    fp_out: int
    int_out: int
    stage_base: int | None
    nrow: int
    V: int
    vram_regions: dict[str, Region]
    fp_range: tuple[int, int]
    int_range: tuple[int, int]
    cfg: HardwareConfig = field(repr=False, compare=False)
    kernel: str = "topk"
    gp_needed: int = 6
    fp_needed: int = 1


def plan_topk(
    config: HardwareConfig,
    *,
    T: int,
    policy: int,
    logits_base: int,
    pitch: int,
    fp_out: int,
    int_out: int,
    stage_base: int | None = None,
    kernel: str = "topk",
    logits_role: str = "input",
) -> TopkPlan:
    V = config.VLEN
    if policy not in POLICIES:
        fail(kernel, "policy", policy, f"must be one of {sorted(POLICIES)} (0: E=32,k=4; 1: E=128,k=8)")
    E, k = POLICIES[policy]
    need_int(kernel, "T", T, 1, LOOP_COUNT_MAX)
    need_int(kernel, "pitch", pitch, T)
    need_int(kernel, "logits_base", logits_base, 0)
    need_multiple(kernel, "logits_base", logits_base, V, "VLEN")
    need_int(kernel, "fp_out", fp_out, 0)
    need_int(kernel, "int_out", int_out, 0)
    if fp_out < FP_STATE_BASE:
        fail(kernel, "fp_out", fp_out, f"must be >= {FP_STATE_BASE} (FP SRAM slots 0-15 are constants)")
    if fp_out + T * k > config.FP_SRAM_SIZE:
        fail(
            kernel,
            "fp_out",
            fp_out,
            f"+ T*k={T * k} exceeds FP_SRAM_SIZE={config.FP_SRAM_SIZE}: T must be "
            f"<= {max(0, config.FP_SRAM_SIZE - fp_out) // k}",
        )
    if int_out + T * k > config.INT_SRAM_SIZE:
        fail(
            kernel,
            "int_out",
            int_out,
            f"+ T*k={T * k} exceeds INT_SRAM_SIZE={config.INT_SRAM_SIZE}: T must be "
            f"<= {max(0, config.INT_SRAM_SIZE - int_out) // k}",
        )
    nrow = ceil_div(E, V)
    regions = {"logits": (logits_base // V, nrow * pitch, logits_role)}
    if nrow > 1:
        if stage_base is None:
            fail(kernel, "stage_base", None, f"is required when E={E} > VLEN={V}")
        need_int(kernel, "stage_base", stage_base, 0)
        need_multiple(kernel, "stage_base", stage_base, V, "VLEN")
        regions["stage"] = (stage_base // V, nrow, "scratch")
    for name, (r0, n, _role) in regions.items():
        check_addr(kernel, f"{name} region end", (r0 + n) * V)
    check_disjoint(kernel, regions)
    return TopkPlan(
        T,
        policy,
        E,
        k,
        logits_base,
        pitch,
        fp_out,
        int_out,
        stage_base if nrow > 1 else None,
        nrow,
        V,
        regions,
        (fp_out, T * k),
        (int_out, T * k),
        config,
        kernel,
    )


def _emit_topk_core(asm: Asm, plan: TopkPlan, regs: Sequence[int], fOne: int, lb: LoopBudget) -> None:
    gF, gI, gRow, gL, gS, gTmp = regs[:6]
    V, k = plan.V, plan.k
    swapped = mutation_hooks.active("topk_bases_swapped")
    load_imm(asm, gF, plan.int_out if swapped else plan.fp_out)
    load_imm(asm, gI, plan.fp_out if swapped else plan.int_out)
    load_imm(asm, gRow, plan.logits_base)
    if plan.nrow > 1:
        asm.S_LD_FP(F(fOne), G(0), SLOT["ONE"])
    asm.comment(f"{plan.kernel}: tokens loop (V_TOPK policy {plan.policy}: E={plan.E}, k={k})")
    with lb.loop(gL, plan.T, "tokens"):
        if plan.nrow > 1:
            assert plan.stage_base is not None  # plan_topk requires it when E > VLEN
            for c in range(plan.nrow):
                src = gRow
                if c:
                    add_imm(asm, gTmp, gRow, c * plan.pitch * V, gS)
                    src = gTmp
                load_imm(asm, gS, plan.stage_base + c * V)
                asm.V_MUL_VF(G(gS), G(src), F(fOne), 0)
            load_imm(asm, gS, plan.stage_base)
            asm.V_TOPK(G(gF), G(gS), G(gI), plan.policy)
        else:
            asm.V_TOPK(G(gF), G(gRow), G(gI), plan.policy)
        asm.S_ADDI_INT(G(gF), G(gF), k)
        asm.S_ADDI_INT(G(gI), G(gI), k)
        asm.S_ADDI_INT(G(gRow), G(gRow), V)


def emit_topk(asm: Asm, plan: TopkPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    regs, (fOne,) = take_regs(plan.kernel, gp, fp, plan.gp_needed, plan.fp_needed)
    lb = LoopBudget(asm, plan.cfg, plan.kernel)
    asm.begin(
        plan.kernel, T=plan.T, policy=plan.policy, logits=plan.logits_base, fp_out=plan.fp_out, int_out=plan.int_out
    )
    _emit_topk_core(asm, plan, regs, fOne, lb)
    asm.end(plan.kernel)


@dataclass(frozen=True)
class RouterPlan:
    T: int
    hidden: int
    E: int
    Epad: int
    linear: LinearPlan
    topk: TopkPlan
    vram_regions: dict[str, Region]
    fp_range: tuple[int, int]
    int_range: tuple[int, int]
    mram_tiles: tuple[int, int]
    hbm_slack: dict[str, int]
    cfg: HardwareConfig = field(repr=False, compare=False)
    gp_needed: int = LIN_GP
    fp_needed: int = 1


def plan_router_topk(
    config: HardwareConfig,
    *,
    T: int,
    hidden: int,
    policy: int,
    x_base: int,
    pitch: int,
    wr: HbmTensor,
    logits_base: int,
    fp_out: int,
    int_out: int,
    stage_base: int | None = None,
    mram_tile0: int = 0,
    max_k_tiles: int | None = None,
    split_base: int | None = None,
    loops: bool = True,
) -> RouterPlan:
    k = "router_topk"
    if policy not in POLICIES:
        fail(k, "policy", policy, f"must be one of {sorted(POLICIES)}")
    E, _ = POLICIES[policy]
    Epad = round_up(E, config.MLEN)
    lin = plan_linear(
        config,
        rows=T,
        K=hidden,
        N=Epad,
        x_base=x_base,
        x_pitch=pitch,
        y_base=logits_base,
        y_pitch=pitch,
        w=wr,
        mram_tile0=mram_tile0,
        max_k_tiles=max_k_tiles,
        split_base=split_base,
        loops=loops,
        kernel=k,
    )
    tk = plan_topk(
        config,
        T=T,
        policy=policy,
        logits_base=logits_base,
        pitch=pitch,
        fp_out=fp_out,
        int_out=int_out,
        stage_base=stage_base,
        kernel=k,
        logits_role="output",
    )
    regions = dict(lin.vram_regions)
    regions["y"] = (regions["y"][0], regions["y"][1], "output")
    if "stage" in tk.vram_regions:
        regions["stage"] = tk.vram_regions["stage"]
    check_disjoint(k, regions)
    return RouterPlan(
        T,
        hidden,
        E,
        Epad,
        lin,
        tk,
        regions,
        tk.fp_range,
        tk.int_range,
        lin.mram_tiles,
        lin.hbm_slack,
        config,
        gp_needed=lin.gp_needed,
    )


def emit_router_topk(asm: Asm, plan: RouterPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    regs, (fOne,) = take_regs("router_topk", gp, fp, plan.gp_needed, plan.fp_needed)
    lb = LoopBudget(asm, plan.cfg, "router_topk")
    asm.begin("router_topk", T=plan.T, hidden=plan.hidden, E=plan.E, Epad=plan.Epad, policy=plan.topk.policy)
    asm.comment("router_topk: step 1 logits = X @ Wr")
    emit_linear_core(asm, plan.linear, regs, lb)
    asm.comment("router_topk: step 2 top-k per token")
    _emit_topk_core(asm, plan.topk, regs, fOne, lb)
    asm.end("router_topk")
