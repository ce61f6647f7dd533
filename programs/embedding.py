"""``embedding`` (kernels.md §2.9): ``out[t, :] = table[ids[t], :]`` with the ids read at run time.

The table is an HBM activation ``[vocab, hidden]`` with ``Pv − 1`` zero slack rows; the token ids are in INT
SRAM ``[ids_base, ids_base + T)``; out is CBM ``[T, hidden]`` with pitch ``rp(T)``.  Each token's row is
prefetched (``Pv`` rows, ``rstride=1``) into a ``Pv``-row landing zone ``L`` and its first row copied to the
output with the row-copy idiom (``V_MUL_VF dst, L, fOne, 0``: exact, keeps −0).  No VRAM row outside out and
L is written.  Tokens are a hardware loop (index register advanced by 1, out pointer by V); column blocks a
nested hardware loop (HBM offset advanced by ``V*eb``, out pointer by ``pitch*V``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import IMM18_LIMIT, LOOP_COUNT_MAX, Asm, areg, load_imm, region
from .asm import fp as F
from .asm import gp as G
from .common import (
    SLOT,
    U32,
    LoopBudget,
    check_addr,
    check_disjoint,
    fail,
    need_int,
    need_multiple,
    rp,
    step_adder,
    take_regs,
)
from .footprint import KernelPlan
from .hbm_tensors import HbmTensor

__all__ = ["EmbeddingPlan", "plan_embedding", "emit_embedding"]

KERNEL = "embedding"


@dataclass(frozen=True)
class EmbeddingPlan(KernelPlan):
    T: int
    vocab: int
    hidden: int
    table: HbmTensor
    ids_base: int
    out_base: int
    pitch: int
    land_base: int
    V: int
    Pv: int


def plan_embedding(
    config: HardwareConfig,
    *,
    T: int,
    vocab: int,
    hidden: int,
    table: HbmTensor,
    ids_base: int,
    out_base: int,
    land_base: int,
    pitch: int | None = None,
) -> EmbeddingPlan:
    V, Pv = config.VLEN, config.P_V
    need_int(KERNEL, "T", T, 1, LOOP_COUNT_MAX)
    need_int(KERNEL, "vocab", vocab, 1)
    need_int(KERNEL, "hidden", hidden, 1)
    need_multiple(KERNEL, "hidden", hidden, V, "VLEN")
    eb = table.eb
    if vocab * hidden * eb >= U32:
        fail(
            KERNEL,
            "vocab*hidden*eb",
            vocab * hidden * eb,
            f"must be < 2^32 (32-bit HBM offsets): vocab={vocab} must be <= {(U32 - 1) // (hidden * eb)}",
        )
    if (hidden * eb) % table.blk or (V * eb) % table.blk:
        fail(KERNEL, "hidden", hidden, f"row bytes must be a multiple of the MX block bytes {table.blk}")
    if table.row_pitch_elems != hidden:
        fail(KERNEL, "table.row_pitch_elems", table.row_pitch_elems, f"must equal hidden={hidden}")
    need_alloc = (vocab + Pv - 1) * hidden
    if table.alloc_elems < need_alloc:
        fail(KERNEL, "table.alloc_elems", table.alloc_elems, f"must be >= (vocab+Pv-1)*hidden={need_alloc}")
    check_addr(KERNEL, "table offset", need_alloc * eb)
    pitch = rp(config, T) if pitch is None else pitch
    need_int(KERNEL, "pitch", pitch, T)
    need_int(KERNEL, "ids_base", ids_base, 0)
    if ids_base + T > config.INT_SRAM_SIZE:
        fail(
            KERNEL,
            "ids_base",
            ids_base,
            f"+ T={T} exceeds INT_SRAM_SIZE={config.INT_SRAM_SIZE}: T must be "
            f"<= {max(0, config.INT_SRAM_SIZE - ids_base)}",
        )
    if ids_base + T > IMM18_LIMIT:
        fail(
            KERNEL,
            "ids_base",
            ids_base,
            f"+ T must fit the 18-bit S_LD_INT immediate: T must be <= {max(0, IMM18_LIMIT - ids_base)}",
        )
    for name, v in (("out_base", out_base), ("land_base", land_base)):
        need_int(KERNEL, name, v, 0)
        need_multiple(KERNEL, name, v, V, "VLEN")
    nb = hidden // V
    regions = {"out": (out_base // V, nb * pitch, "output"), "land": (land_base // V, Pv, "scratch")}
    for name, (r0, n, _role) in regions.items():
        check_addr(KERNEL, f"{name} region end", (r0 + n) * V)
    check_disjoint(KERNEL, regions)
    # a block step pitch*V past the S_ADDI_INT immediate is kept in a 9th register
    gp_needed = 9 if pitch * V >= IMM18_LIMIT else 8
    return EmbeddingPlan(
        T,
        vocab,
        hidden,
        table,
        ids_base,
        out_base,
        pitch,
        land_base,
        V,
        Pv,
        vram_regions=regions,
        int_range=(ids_base, T),
        hbm_slack={"table": need_alloc},
        cfg=config,
        gp_needed=gp_needed,
        fp_needed=1,
    )


def emit_embedding(asm: Asm, plan: EmbeddingPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    regs, (fOne,) = take_regs(KERNEL, gp, fp, plan.gp_needed, plan.fp_needed)
    gRow, gIdx, gId, gOff, gOut, gOc, gLand, gL = regs[:8]
    gLc = gId  # the id is consumed (S_MUL_INT) before the block loop starts
    V, t, cfg = plan.V, plan.table, plan.cfg
    lb = LoopBudget(asm, cfg, KERNEL)
    step = plan.pitch * V
    direct = mutation_hooks.active("embedding_direct_prefetch")
    row_major = mutation_hooks.active("embedding_out_row_major")  # out[t] as hidden/V consecutive rows
    asm.begin(KERNEL, T=plan.T, vocab=plan.vocab, hidden=plan.hidden, ids=plan.ids_base, out=plan.out_base)
    with region(asm, KERNEL):
        asm.comment(f"{KERNEL}: table SCALE/STRIDE, row bytes, constants")
        load_imm(asm, gRow, t.scale_offset)
        asm.C_SET_SCALE_REG(G(gRow))
        load_imm(asm, gRow, plan.hidden * t.eb)
        asm.C_SET_STRIDE_REG(G(gRow))
        asm.S_LD_FP(F(fOne), G(0), SLOT["ONE"])
        load_imm(asm, gLand, plan.land_base)
        load_imm(asm, gOut, plan.out_base)
        asm.S_ADDI_INT(G(gIdx), G(0), 0)
        next_block = step_adder(asm, regs[8:], step)  # a 9th register holds a step past 2^18
        asm.comment(f"{KERNEL}: tokens loop")
        with region(asm, "gather"), lb.loop(gL, plan.T, "tokens"):
            asm.S_LD_INT(G(gId), G(gIdx), plan.ids_base)
            asm.S_MUL_INT(G(gOff), G(gId), G(gRow))
            asm.S_ADDI_INT(G(gOc), G(gOut), 0)
            with lb.loop(gLc, plan.hidden // V, "column blocks"):
                if direct:
                    asm.H_PREFETCH_V(G(gOc), G(gOff), areg(t.areg), 1, t.prec)
                else:
                    asm.H_PREFETCH_V(G(gLand), G(gOff), areg(t.areg), 1, t.prec)
                    asm.V_MUL_VF(G(gOc), G(gLand), F(fOne), 0)
                asm.S_ADDI_INT(G(gOff), G(gOff), V * t.eb)
                if row_major:
                    asm.S_ADDI_INT(G(gOc), G(gOc), V)
                else:
                    next_block(gOc)
            asm.S_ADDI_INT(G(gIdx), G(gIdx), 1)
            asm.S_ADDI_INT(G(gOut), G(gOut), V * (plan.hidden // V) if row_major else V)
    asm.end(KERNEL)
