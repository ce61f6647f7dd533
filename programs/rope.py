"""``rope`` (kernels.md §2.8), HF ``rotate_half`` convention: ``y = x·cos + rotate_half(x)·sin`` per head.

X is CBM ``[rows, nh*d]``; cos and sin are pre-broadcast HBM tables ``[rows, nh*d]`` loaded with
``preload_act``; Y may equal X.  ``rotate_half([x1, x2]) = [−x2, x1]`` is computed on the device into the
scratch XR (same size as X):

* ``d <= M`` (``M % d == 0``): one MRAM tile ``R`` (block-diagonal ``M/d`` copies of ``Rd``, every entry 0
  or ±1, so MX-exact; built by :func:`rope_rotation_tile`) is prefetched and ``XR = X @ R`` with
  ``M_MM``/``M_MM_WO`` (the single nonzero product per output is exact);
* ``d > M`` (``d % 2M == 0``): a block permutation, ``XR[q] = −X[q+half]`` (``V_SUB_VF xr, x, f0, 0, 1``)
  for ``q < half`` and ``XR[q] = X[q−half]`` (row copy ``V_MUL_VF xr, x, fOne, 0``) for ``q >= half``.

Then per row of every block: ``V_MUL_VV Y, X, COS ; V_MUL_VV t, XR, SIN ; V_ADD_VV Y, Y, t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import IMM18_LIMIT, Asm, areg, load_imm, region
from .asm import fp as F
from .asm import gp as G
from .common import (
    SLOT,
    Index,
    LoopBudget,
    check_addr,
    check_disjoint,
    fail,
    need_int,
    need_multiple,
    take_regs,
)
from .footprint import KernelPlan
from .hbm_tensors import HbmTensor, preload_act, row_pad

__all__ = ["RopePlan", "plan_rope", "emit_rope", "rope_rotation_tile", "SUPPORTS_BLOCK_PATH"]

KERNEL = "rope"
SUPPORTS_BLOCK_PATH = True  # d > M via block permutation (the stretch case d = 128)


def rope_rotation_tile(d: int, M: int) -> np.ndarray:
    """The ``M x M`` tile R with ``x_row @ R = rotate_half(x_row)`` per d-wide head (``M % d == 0``)."""
    if d % 2 or M % d:
        raise ValueError(f"rope_rotation_tile: d={d} must be even and divide M={M}")
    R = np.zeros((M, M))
    h = d // 2
    for base in range(0, d if mutation_hooks.active("rope_rotation_single_head") else M, d):
        for j in range(d):
            if j < h:
                R[base + j + h, base + j] = -1.0
            else:
                R[base + j - h, base + j] = 1.0
    return R


@dataclass(frozen=True)
class RopePlan(KernelPlan):
    rows: int
    nh: int
    d: int
    x_base: int
    pitch: int
    y_base: int
    cos: HbmTensor
    sin: HbmTensor
    cos_base: int
    sin_base: int
    xr_base: int
    t_base: int
    rot: HbmTensor | None
    mram_tile0: int
    V: int
    M: int
    B: int
    nblk: int
    block_path: bool


def plan_rope(
    config: HardwareConfig,
    *,
    rows: int,
    nh: int,
    d: int,
    x_base: int,
    pitch: int,
    y_base: int,
    cos: HbmTensor,
    sin: HbmTensor,
    cos_base: int,
    sin_base: int,
    xr_base: int,
    t_base: int,
    rot: HbmTensor | None = None,
    mram_tile0: int = 0,
) -> RopePlan:
    V, M, B = config.VLEN, config.MLEN, config.BLEN
    need_int(KERNEL, "rows", rows, 1)
    need_int(KERNEL, "nh", nh, 1)
    need_int(KERNEL, "d", d, 2)
    if d % 2:
        fail(KERNEL, "d", d, "must be even")
    if (nh * d) % V:
        fail(KERNEL, "nh*d", nh * d, f"must be a multiple of VLEN={V}")
    block_path = d > M
    if block_path:
        if d % (2 * M):
            fail(KERNEL, "d", d, f"> MLEN={M} must be a multiple of 2*MLEN={2 * M}")
    else:
        if M % d:
            fail(KERNEL, "d", d, f"<= MLEN={M} must divide MLEN")
        if V != M:
            fail(KERNEL, "VLEN", V, f"must equal MLEN={M} (the rotation is a matmul)")
        if rot is None:
            fail(KERNEL, "rot", None, f"(the rotation tile tensor) is required for d={d} <= MLEN={M}")
        need_int(KERNEL, "mram_tile0", mram_tile0, 0)
        if mram_tile0 + 1 > config.mram_tiles:
            fail(KERNEL, "mram_tile0", mram_tile0, f"must be < the MRAM tile count {config.mram_tiles}")
        if config.P_M != M:
            fail(KERNEL, "HBM_M_Prefetch_Amount", config.P_M, f"(effective Pm) must equal MLEN={M}")
        if rot.alloc_elems < M * M:
            fail(KERNEL, "rot.alloc_elems", rot.alloc_elems, f"must be >= MLEN*MLEN={M * M}")
    need_int(KERNEL, "pitch", pitch, 1)
    need_multiple(KERNEL, "pitch", pitch, row_pad(config), "RP")
    if rows > pitch:
        fail(KERNEL, "pitch", pitch, f"must be >= rows={rows}")
    nblk = nh * d // V
    n = nblk * pitch
    for name, v in (
        ("x_base", x_base),
        ("y_base", y_base),
        ("cos_base", cos_base),
        ("sin_base", sin_base),
        ("xr_base", xr_base),
        ("t_base", t_base),
    ):
        need_int(KERNEL, name, v, 0)
        need_multiple(KERNEL, name, v, V, "VLEN")
        check_addr(KERNEL, name, v + n * V)
    for name, t in (("cos", cos), ("sin", sin)):
        if t.row_pitch_elems != nh * d:
            fail(KERNEL, f"{name}.row_pitch_elems", t.row_pitch_elems, f"must equal nh*d={nh * d}")
        if t.alloc_elems < pitch * nh * d:
            fail(KERNEL, f"{name}.alloc_elems", t.alloc_elems, f"must be >= pitch*nh*d={pitch * nh * d}")
    regions = {
        "x": (x_base // V, n, "inout" if x_base == y_base else "input"),
        "cos": (cos_base // V, n, "scratch"),
        "sin": (sin_base // V, n, "scratch"),
        "xr": (xr_base // V, n, "scratch"),
        "t": (t_base // V, 1, "scratch"),
    }
    if y_base != x_base:
        regions["y"] = (y_base // V, n, "output")
    check_disjoint(KERNEL, regions)
    slack = {"cos": pitch * nh * d, "sin": pitch * nh * d}
    if not block_path:
        slack["rot"] = M * M
    # the rotation matmul's pointer step B*V (= B*M) past the S_ADDI_INT immediate is kept in a 9th register
    gp_needed = 9 if (not block_path and B * V >= IMM18_LIMIT) else 8
    return RopePlan(
        rows,
        nh,
        d,
        x_base,
        pitch,
        y_base,
        cos,
        sin,
        cos_base,
        sin_base,
        xr_base,
        t_base,
        None if block_path else rot,
        mram_tile0,
        V,
        M,
        B,
        nblk,
        block_path,
        vram_regions=regions,
        mram_tiles=None if block_path else (mram_tile0, 1),
        hbm_slack=slack,
        cfg=config,
        gp_needed=gp_needed,
        fp_needed=1,
    )


def emit_rope(asm: Asm, plan: RopePlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    regs, (fOne,) = take_regs(KERNEL, gp, fp, plan.gp_needed, plan.fp_needed)
    gX, gY, gA, gB, gT, gL, gL2, gW = regs[:8]
    V, cfg = plan.V, plan.cfg
    lb = LoopBudget(asm, cfg, KERNEL)
    nh, d, pitch = plan.nh, plan.d, plan.pitch
    cols = nh * d
    asm.begin(
        KERNEL, rows=plan.rows, nh=nh, d=d, x=plan.x_base, y=plan.y_base, path="block" if plan.block_path else "matrix"
    )
    with region(asm, KERNEL):
        asm.comment(f"{KERNEL}: load cos and sin tables")
        with region(asm, "load_tables"):
            preload_act(asm, cfg, plan.cos, plan.rows, cols, plan.cos_base, pitch, [gA, gB, gL, gL2, gT])
            preload_act(asm, cfg, plan.sin, plan.rows, cols, plan.sin_base, pitch, [gA, gB, gL, gL2, gT])
        with region(asm, "rotate"):
            if not plan.block_path:
                _rotate_matrix(asm, plan, lb, regs)
            else:
                _rotate_blocks(asm, plan, lb, regs, fOne)
        asm.comment(f"{KERNEL}: Y = X*cos + XR*sin")
        load_imm(asm, gX, plan.x_base)
        load_imm(asm, gA, plan.cos_base)
        load_imm(asm, gB, plan.sin_base)
        load_imm(asm, gW, plan.xr_base)
        load_imm(asm, gT, plan.t_base)
        inplace = plan.y_base == plan.x_base
        if not inplace:
            load_imm(asm, gY, plan.y_base)
        yr = gX if inplace else gY
        with region(asm, "combine"), lb.loop(gL, plan.nblk * pitch, "rows"):
            asm.V_MUL_VV(G(yr), G(gX), G(gA), 0)
            asm.V_MUL_VV(G(gT), G(gX if mutation_hooks.active("rope_xr_reg_is_x") else gW), G(gB), 0)
            if mutation_hooks.active("rope_sign_flipped"):
                asm.V_SUB_VV(G(yr), G(yr), G(gT), 0)
            else:
                asm.V_ADD_VV(G(yr), G(yr), G(gT), 0)
            for r in (gX, gA, gB, gW) + (() if inplace else (gY,)):
                asm.S_ADDI_INT(G(r), G(r), V)
    asm.end(KERNEL)


def _rotate_matrix(asm: Asm, plan: RopePlan, lb: LoopBudget, regs: Sequence[int]) -> None:
    """``XR = X @ R`` block by block (a loop over the column blocks, hardware loops over j and g)."""
    gX, gY, gA, gB, gT, gL, gL2, gW = regs[:8]
    V, M, B = plan.V, plan.M, plan.B
    P = plan.pitch * V
    asm.comment(f"{KERNEL}: rotation tile -> MRAM tile {plan.mram_tile0}; XR = X @ R")
    rot = plan.rot
    assert rot is not None  # plan_rope requires it on the matrix path
    rt = plan.mram_tile0 * M * M
    load_imm(asm, gA, rot.scale_offset)
    asm.C_SET_SCALE_REG(G(gA))
    load_imm(asm, gA, rt)
    asm.H_PREFETCH_M(G(gA), G(0), areg(rot.areg), 0, rot.prec)
    if lb.needs_register(B * V):  # B*V == B*M (the matrix path needs V == M); a 9th register holds it
        lb.hold(regs[8], B * V)
    load_imm(asm, gA, plan.x_base)
    load_imm(asm, gT, plan.xr_base)

    def block(_blk: Index) -> None:
        load_imm(lb.asm, gW, rt)
        with lb.loop(gL, M // B, "column blocks j"):
            lb.asm.S_ADDI_INT(G(gX), G(gA), 0)
            lb.asm.S_ADDI_INT(G(gY), G(gT), 0)
            with lb.loop(gL2, plan.pitch // B, "row blocks g"):
                lb.asm.M_MM(0, G(gW), G(gX))
                lb.asm.M_MM_WO(G(gY), G(0), 0)
                lb.add(gX, B * V)
                lb.add(gY, B * V)
            lb.add(gW, B * V, gL2)
            lb.add(gT, B)
        lb.add(gT, P - M, gL)
        lb.add(gA, P, gL)

    lb.repeat(gB, plan.nblk, "column blocks", block)


def _rotate_blocks(asm: Asm, plan: RopePlan, lb: LoopBudget, regs: Sequence[int], fOne: int) -> None:
    """``XR = rotate_half(X)`` by block permutation, head by head: the first half of a head's XR blocks is
    ``-X`` of its second half, the second half a copy of the first; each half is one contiguous row run."""
    gX, gY, gA, gB, _gT, gL = regs[:6]
    V, d, P = plan.V, plan.d, plan.pitch * plan.V
    half = d // (2 * V)
    run_rows = half * plan.pitch
    asm.comment(f"{KERNEL}: XR = rotate_half(X) by block permutation")
    asm.S_LD_FP(F(fOne), G(0), SLOT["ONE"])
    load_imm(asm, gA, plan.x_base)
    load_imm(asm, gY, plan.xr_base)

    def rows(negate: bool) -> None:
        def row(step: bool) -> None:
            if negate:
                lb.asm.V_SUB_VF(G(gY), G(gX), F(0), 0, 1)
            else:
                lb.asm.V_MUL_VF(G(gY), G(gX), F(fOne), 0)
            lb.add(gX, V)
            lb.add(gY, V)

        lb.run(gL, run_rows, "rows", row)

    def head(_h: Index) -> None:
        lb.offset(gX, gA, half * P)
        rows(negate=True)
        lb.asm.S_ADDI_INT(G(gX), G(gA), 0)
        rows(negate=False)
        lb.add(gA, 2 * half * P, gL)

    lb.repeat(gB, plan.nh, "heads", head)
