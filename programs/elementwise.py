"""``add_rows`` (kernels.md §2.10): ``out_i = a_i + b_i`` over ``nrows`` consecutive VRAM rows.

One hardware loop with three pointers advancing by V. Any layout works as long as a, b and out share it;
``out`` may equal ``a`` or ``b`` (in place).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import LOOP_COUNT_MAX, Asm, load_imm, region
from .asm import gp as G
from .common import check_addr, check_disjoint, check_loop, need_int, need_multiple, out_pointer, take_regs
from .footprint import KernelPlan

__all__ = ["AddRowsPlan", "plan_add_rows", "emit_add_rows", "ScaleRowsPlan", "plan_scale_rows", "emit_scale_rows"]

KERNEL = "add_rows"


@dataclass(frozen=True)
class AddRowsPlan(KernelPlan):
    nrows: int
    a_base: int
    b_base: int
    out_base: int
    V: int
    loop_body: int = 5


def plan_add_rows(config: HardwareConfig, *, nrows: int, a_base: int, b_base: int, out_base: int) -> AddRowsPlan:
    V = config.VLEN
    need_int(KERNEL, "nrows", nrows, 1, LOOP_COUNT_MAX)
    for name, v in (("a_base", a_base), ("b_base", b_base), ("out_base", out_base)):
        need_int(KERNEL, name, v, 0)
        need_multiple(KERNEL, name, v, V, "VLEN")
        check_addr(KERNEL, name, v + nrows * V)
    a0, b0, o0 = a_base // V, b_base // V, out_base // V
    regions = {"a": (a0, nrows, "input"), "b": (b0, nrows, "input")}
    allowed = []
    if out_base == a_base:
        regions["a"] = (a0, nrows, "inout")
    elif out_base == b_base:
        regions["b"] = (b0, nrows, "inout")
    else:
        regions["out"] = (o0, nrows, "output")
    if a_base == b_base:
        allowed.append(("a", "b"))
        regions.pop("b")
    check_disjoint(KERNEL, regions, allowed)
    plan = AddRowsPlan(nrows, a_base, b_base, out_base, V, vram_regions=regions, cfg=config, gp_needed=4, fp_needed=0)
    check_loop(KERNEL, "rows", plan.loop_body, config)
    return plan


def emit_add_rows(asm: Asm, plan: AddRowsPlan, *, gp: Sequence[int], fp: Sequence[int] = ()) -> None:
    (gA, gB, gO, gC), _ = take_regs(KERNEL, gp, fp, plan.gp_needed, plan.fp_needed)
    V = plan.V
    asm.begin(KERNEL, nrows=plan.nrows, a=plan.a_base, b=plan.b_base, out=plan.out_base)
    with region(asm, KERNEL):
        load_imm(asm, gA, plan.a_base)
        load_imm(asm, gB, plan.b_base)
        load_imm(asm, gO, plan.out_base)
        asm.comment("add_rows: rows loop")
        asm.C_LOOP_START(G(gC), plan.nrows)
        asm.V_ADD_VV(G(gO), G(gA), G(gB), 0)
        asm.S_ADDI_INT(G(gA), G(gA), V)
        asm.S_ADDI_INT(G(gB), G(gB), V)
        if not mutation_hooks.active("add_dst_not_advancing"):
            asm.S_ADDI_INT(G(gO), G(gO), V)
        asm.C_LOOP_END(G(gC))
    asm.end(KERNEL)


# --------------------------------------------------------------------------- scale_rows


@dataclass(frozen=True)
class ScaleRowsPlan(KernelPlan):
    nrows: int
    src_base: int
    dst_base: int
    slot: int
    V: int
    loop_body: int = 4


def plan_scale_rows(config: HardwareConfig, *, nrows: int, src_base: int, dst_base: int, slot: int) -> ScaleRowsPlan:
    """``dst_i = src_i * FP[slot]`` over ``nrows`` rows (one hardware loop); in place allowed."""
    k = "scale_rows"
    V = config.VLEN
    need_int(k, "nrows", nrows, 1, LOOP_COUNT_MAX)
    need_int(k, "slot", slot, 0, config.FP_SRAM_SIZE - 1)
    for name, v in (("src_base", src_base), ("dst_base", dst_base)):
        need_int(k, name, v, 0)
        need_multiple(k, name, v, V, "VLEN")
        check_addr(k, name, v + nrows * V)
    regions = {"src": (src_base // V, nrows, "inout" if src_base == dst_base else "input")}
    if src_base != dst_base:
        regions["dst"] = (dst_base // V, nrows, "output")
    check_disjoint(k, regions)
    plan = ScaleRowsPlan(nrows, src_base, dst_base, slot, V, vram_regions=regions, cfg=config, gp_needed=3, fp_needed=1)
    check_loop(k, "rows", plan.loop_body, config)
    return plan


def emit_scale_rows(asm: Asm, plan: ScaleRowsPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    (gS, gD, gC), (fS,) = take_regs("scale_rows", gp, fp, plan.gp_needed, plan.fp_needed)
    from .asm import fp as F

    V = plan.V
    asm.begin("scale_rows", nrows=plan.nrows, src=plan.src_base, dst=plan.dst_base, slot=plan.slot)
    with region(asm, "scale_rows"):
        asm.S_LD_FP(F(fS), G(0), plan.slot)
        load_imm(asm, gS, plan.src_base)
        gD = out_pointer(asm, gS, gD, plan.src_base, plan.dst_base)
        if plan.nrows > 1:
            asm.C_LOOP_START(G(gC), plan.nrows)
        asm.V_MUL_VF(G(gD), G(gS), F(fS), 0)
        asm.S_ADDI_INT(G(gS), G(gS), V)
        if gD != gS:
            asm.S_ADDI_INT(G(gD), G(gD), V)
        if plan.nrows > 1:
            asm.C_LOOP_END(G(gC))
    asm.end("scale_rows")
