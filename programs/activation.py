"""``activation(kind, src, dst, nrows)`` (kernels.md §2.5): SiLU ``x·σ(x)`` and GELU ``x·σ(1.702·x)``.

Layout-agnostic over ``nrows`` consecutive VRAM rows; in place (``dst == src``) is allowed.  One private
scratch row ``t``.  Per row (one hardware loop)::

    [gelu]  V_MUL_VF t, x, fAlpha, 0 ; V_SUB_VF t, t, f0, 0, 1        # t = -1.702 x
    [silu]  V_SUB_VF t, x, f0, 0, 1                                  # t = -x
    V_EXP_V t, t, 0 ; V_ADD_VF t, t, fOne, 0 ; V_RECI_V t, t, 0 ; V_MUL_VV y, x, t, 0

Only the sigmoid form of GELU exists; any other ``kind`` (e.g. ``"gelu_tanh"``) raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import LOOP_COUNT_MAX, Asm, load_imm, region
from .asm import fp as F
from .asm import gp as G
from .common import SLOT, LoopBudget, check_addr, check_disjoint, fail, need_int, need_multiple, out_pointer, take_regs
from .footprint import KernelPlan

__all__ = ["ActivationPlan", "plan_activation", "emit_activation", "KINDS"]

KERNEL = "activation"
KINDS = ("silu", "gelu")


@dataclass(frozen=True)
class ActivationPlan(KernelPlan):
    kind: str
    src_base: int
    dst_base: int
    nrows: int
    t_base: int
    V: int


def plan_activation(
    config: HardwareConfig, *, kind: str, src_base: int, dst_base: int, nrows: int, t_base: int, src_role: str = "input"
) -> ActivationPlan:
    V = config.VLEN
    if kind not in KINDS:
        fail(KERNEL, "kind", repr(kind), f"must be one of {KINDS} (GELU is the sigmoid form only)")
    need_int(KERNEL, "nrows", nrows, 1, LOOP_COUNT_MAX)
    for name, v in (("src_base", src_base), ("dst_base", dst_base), ("t_base", t_base)):
        need_int(KERNEL, name, v, 0)
        need_multiple(KERNEL, name, v, V, "VLEN")
        check_addr(KERNEL, name, v + nrows * V)
    regions = {"src": (src_base // V, nrows, src_role), "t": (t_base // V, 1, "scratch")}
    if dst_base == src_base:
        regions["src"] = (src_base // V, nrows, "inout")
    else:
        regions["dst"] = (dst_base // V, nrows, "output")
    check_disjoint(KERNEL, regions)
    return ActivationPlan(
        kind, src_base, dst_base, nrows, t_base, V, vram_regions=regions, cfg=config, gp_needed=4, fp_needed=2
    )


def emit_activation(asm: Asm, plan: ActivationPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    (gX, gY, gT, gL), (fAlpha, fOne) = take_regs(KERNEL, gp, fp, plan.gp_needed, plan.fp_needed)
    V = plan.V
    lb = LoopBudget(asm, plan.cfg, KERNEL)
    asm.begin(KERNEL, kind=plan.kind, src=plan.src_base, dst=plan.dst_base, nrows=plan.nrows, t=plan.t_base)
    with region(asm, plan.kind):
        asm.comment(f"{KERNEL}: constants")
        asm.S_LD_FP(F(fOne), G(0), SLOT["ONE"])
        if plan.kind == "gelu":
            asm.S_LD_FP(F(fAlpha), G(0), SLOT["ONE"] if mutation_hooks.active("gelu_alpha_one") else SLOT["GELU_ALPHA"])
        load_imm(asm, gX, plan.src_base)
        gY = out_pointer(asm, gX, gY, plan.src_base, plan.dst_base)
        load_imm(asm, gT, plan.t_base)
        asm.comment(f"{KERNEL}: rows loop ({plan.kind})")
        with region(asm, "rows"), lb.loop(gL, plan.nrows, "rows"):
            if plan.kind == "gelu":
                asm.V_MUL_VF(G(gT), G(gX), F(fAlpha), 0)
                asm.V_SUB_VF(G(gT), G(gT), F(0), 0, 1)
            else:
                asm.V_SUB_VF(G(gT), G(gX), F(0), 0, 1)
            asm.V_EXP_V(G(gT), G(gT), 0)
            asm.V_ADD_VF(G(gT), G(gT), F(fOne), 0)
            asm.V_RECI_V(G(gT), G(gT), 0)
            asm.V_MUL_VV(G(gY), G(gX), G(gT), 0)
            asm.S_ADDI_INT(G(gX), G(gX), V)
            if gY != gX:
                asm.S_ADDI_INT(G(gY), G(gY), V)
    asm.end(KERNEL)
