"""``softmax_rows`` (kernels.md §2.7): ``y[r, :] = softmax(s · x[r, :L])`` over CBM rows.

X and Y are CBM ``[rows, round_up(L, V)]``; Y may equal X; columns ``>= L`` of Y are undefined and columns
``>= L`` of X must be finite.  ``s`` is read from ``scale_slot`` when given (default: no scaling).  When
``L % V != 0`` two scratch rows are built once: ``NEG`` (all −inf, §1.9) and ``MASK = V_SHFT_V(NEG, L % V)``
(0 in lanes ``< L % V``, −inf above), added to the last column block.  Per row (a hardware loop over rows,
nested hardware loops over the full column blocks)::

    fm = -inf; for c: [scale] Y = X*s ; [last & L%V] Y = (Y|X) + MASK ; V_RED_MAX fm, (Y if written else X)
    for c: Y = (Y if written else X) - fm ; Y = exp(Y)
    fsum = 0; for c: V_RED_SUM fsum, Y ; fi = 1/fsum ; for c: Y = Y * fi
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
from .hbm_tensors import ceil_div

__all__ = ["SoftmaxPlan", "plan_softmax", "emit_softmax", "softmax_scratch_rows"]

KERNEL = "softmax_rows"


def softmax_scratch_rows(config: HardwareConfig, L: int) -> int:
    return 2 if L % config.VLEN else 0


@dataclass(frozen=True)
class SoftmaxPlan(KernelPlan):
    rows: int
    L: int
    x_base: int
    pitch: int
    y_base: int
    scratch_base: int | None
    scale_slot: int | None
    V: int
    nb: int
    tail: int


def plan_softmax(
    config: HardwareConfig,
    *,
    rows: int,
    L: int,
    x_base: int,
    pitch: int,
    y_base: int,
    scratch_base: int | None = None,
    scale_slot: int | None = None,
) -> SoftmaxPlan:
    V = config.VLEN
    need_int(KERNEL, "rows", rows, 1, LOOP_COUNT_MAX)
    need_int(KERNEL, "L", L, 1)
    need_int(KERNEL, "pitch", pitch, 1)
    if rows > pitch:
        fail(KERNEL, "pitch", pitch, f"must be >= rows={rows}")
    nb = ceil_div(L, V)
    tail = L % V
    for name, v in (("x_base", x_base), ("y_base", y_base)):
        need_int(KERNEL, name, v, 0)
        need_multiple(KERNEL, name, v, V, "VLEN")
        check_addr(KERNEL, name, v + nb * pitch * V)
    if scale_slot is not None:
        need_int(KERNEL, "scale_slot", scale_slot, 0, config.FP_SRAM_SIZE - 1)
    regions = {"x": (x_base // V, nb * pitch, "inout" if x_base == y_base else "input")}
    if y_base != x_base:
        regions["y"] = (y_base // V, nb * pitch, "output")
    if tail:
        if scratch_base is None:
            fail(KERNEL, "scratch_base", None, f"is required when L={L} is not a multiple of VLEN={V}")
        need_int(KERNEL, "scratch_base", scratch_base, 0)
        need_multiple(KERNEL, "scratch_base", scratch_base, V, "VLEN")
        regions["scratch"] = (scratch_base // V, 2, "scratch")
    check_disjoint(KERNEL, regions)
    return SoftmaxPlan(
        rows,
        L,
        x_base,
        pitch,
        y_base,
        scratch_base if tail else None,
        scale_slot,
        V,
        nb,
        tail,
        vram_regions=regions,
        cfg=config,
        gp_needed=9,
        fp_needed=3,
    )


def emit_softmax(asm: Asm, plan: SoftmaxPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    regs, fregs = take_regs(KERNEL, gp, fp, plan.gp_needed, plan.fp_needed)
    scaled = plan.scale_slot is not None
    asm.begin(
        KERNEL, rows=plan.rows, L=plan.L, x=plan.x_base, y=plan.y_base, scale_slot=plan.scale_slot if scaled else "-"
    )
    with region(asm, KERNEL):
        _emit_body(asm, plan, regs, fregs)
    asm.end(KERNEL)


def _emit_body(asm: Asm, plan: SoftmaxPlan, regs: Sequence[int], fregs: Sequence[int]) -> None:
    """The kernel inside its frame: the tail's NEG / MASK rows, then per row: max, exp, sum, scale."""
    gX, gY, gXc, gYc, gMask, gStep, gL, gLc, gT = regs
    fm, fs, fsum = fregs
    V, nb, cfg = plan.V, plan.nb, plan.cfg
    lb = LoopBudget(asm, cfg, KERNEL)
    masked = bool(plan.tail) and not mutation_hooks.active("softmax_tail_mask_missing")
    fmax = 0 if mutation_hooks.active("softmax_no_max_subtraction") else fm  # exp(x) instead of exp(x - max)
    scaled = plan.scale_slot is not None
    inplace = plan.x_base == plan.y_base
    nfull = nb - 1 if plan.tail else nb
    if plan.tail:
        with region(asm, "mask"):
            asm.comment(f"{KERNEL}: NEG row and MASK({plan.tail}) row")
            assert plan.scratch_base is not None  # plan_softmax sets it whenever there is a tail
            neg, mask = plan.scratch_base, plan.scratch_base + V
            load_imm(asm, gMask, neg)
            load_imm(asm, gT, V)
            asm.V_SHFT_V(G(gMask), G(gMask), G(gT))
            asm.S_LD_FP(F(fm), G(0), SLOT["NEG_INF"])
            asm.V_ADD_VF(G(gMask), G(gMask), F(fm), 0)
            load_imm(asm, gT, plan.tail)
            load_imm(asm, gXc, mask)
            asm.V_SHFT_V(G(gXc), G(gMask), G(gT))
            load_imm(asm, gMask, mask)
    if scaled:
        asm.S_LD_FP(F(fs), G(0), plan.scale_slot)
    step = V if mutation_hooks.active("softmax_block_step_row") else plan.pitch * V  # column block = one row
    load_imm(asm, gStep, step)
    load_imm(asm, gX, plan.x_base)
    gY = out_pointer(asm, gX, gY, plan.x_base, plan.y_base)

    def adv(*rs: int) -> None:
        for r in rs:
            asm.S_ADD_INT(G(r), G(r), G(gStep))

    def ptrs() -> None:
        asm.S_ADDI_INT(G(gXc), G(gX), 0)
        if not inplace:
            asm.S_ADDI_INT(G(gYc), G(gY), 0)

    yc = gXc if inplace else gYc
    both = (gXc,) if inplace else (gXc, gYc)
    asm.comment(f"{KERNEL}: rows loop")
    with lb.loop(gL, plan.rows, "rows"):
        asm.comment(f"{KERNEL}: row max")
        asm.S_LD_FP(F(fm), G(0), SLOT["NEG_INF"])
        ptrs()
        with region(asm, "max"):
            if nfull:
                with lb.loop(gLc, nfull, "max blocks"):
                    if scaled:
                        asm.V_MUL_VF(G(yc), G(gXc), F(fs), 0)
                    asm.V_RED_MAX(F(fm), G(yc if scaled else gXc), 0)
                    adv(*both)
            if plan.tail:
                src = gXc
                if scaled:
                    asm.V_MUL_VF(G(yc), G(gXc), F(fs), 0)
                    src = yc
                if masked:
                    asm.V_ADD_VV(G(yc), G(src), G(gMask), 0)
                    src = yc
                asm.V_RED_MAX(F(fm), G(src), 0)
        asm.comment(f"{KERNEL}: exp(x - max)")
        ptrs()
        with region(asm, "exp"):
            if nfull:
                with lb.loop(gLc, nfull, "exp blocks"):
                    asm.V_SUB_VF(G(yc), G(yc if scaled else gXc), F(fmax), 0, 0)
                    asm.V_EXP_V(G(yc), G(yc), 0)
                    adv(*both)
            if plan.tail:
                asm.V_SUB_VF(G(yc), G(yc if (scaled or masked) else gXc), F(fmax), 0, 0)
                asm.V_EXP_V(G(yc), G(yc), 0)
        asm.comment(f"{KERNEL}: normalise")
        asm.S_ADD_FP(F(fsum), F(0), F(0))
        asm.S_ADDI_INT(G(yc), G(gY), 0)
        with region(asm, "sum"), lb.loop(gLc, nb, "sum blocks"):
            asm.V_RED_SUM(F(fsum), G(yc), 0)
            adv(yc)
        asm.S_RECI_FP(F(fsum), F(fsum))
        asm.S_ADDI_INT(G(yc), G(gY), 0)
        with region(asm, "scale"), lb.loop(gLc, nb, "scale blocks"):
            asm.V_MUL_VF(G(yc), G(yc), F(fsum), 0)
            adv(yc)
        asm.S_ADDI_INT(G(gX), G(gX), V)
        if not inplace:
            asm.S_ADDI_INT(G(gY), G(gY), V)
