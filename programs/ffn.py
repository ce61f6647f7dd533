"""``ffn_swiglu`` and ``ffn_intermediate`` (kernels.md §2.4), HF LLaMA MLP.

``ffn_intermediate``: ``Hm = silu(X@Wg) ⊙ (X@Wu)`` -- SiLU on the **gate** projection.
``ffn_swiglu``: ``Y = Hm @ Wd``.

Workspace (rows from ``ws_base``): G ``(inter/V)*pitch`` rows, U ``(inter/V)*pitch`` rows, the activation's
scratch row ``t``, then the split scratch (``rp(rows)`` rows) when a K split happens in any projection.
Steps: linear(X, Wg -> G); linear(X, Wu -> U); silu(G -> G) over all of G's rows; ``G = G * U`` per row;
``ffn_intermediate`` stops here (result G, or a copy at ``h_base``); ``ffn_swiglu`` continues with
linear(G, Wd -> Y).  Y may equal X (X is consumed before the last step).
``w_runtime_offset_max`` (bytes) gives every projection a run-time W offset: the emitter's ``w_offset_reg``
(or the INT SRAM word at ``w_offset_int``) holds one byte offset added to the Wg, Wu and Wd addresses alike
(e.g. expert ``e`` of stacked MoE weights whose three expert strides are equal, see :mod:`programs.moe`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .activation import ActivationPlan, emit_activation, plan_activation
from .asm import Asm, load_imm, region
from .asm import fp as F
from .asm import gp as G
from .common import SLOT, LoopBudget, Region, check_disjoint, need_int, need_multiple, rp, take_regs
from .footprint import KernelPlan
from .hbm_tensors import HbmTensor
from .linear import LinearPlan, WOffset, emit_linear_core, plan_linear

__all__ = [
    "FfnPlan",
    "plan_ffn_swiglu",
    "plan_ffn_intermediate",
    "emit_ffn_swiglu",
    "emit_ffn_intermediate",
    "ffn_workspace_rows",
]


def ffn_workspace_rows(
    config: HardwareConfig,
    *,
    rows: int,
    hidden: int,
    inter: int,
    pitch: int,
    max_k_tiles: int | None = None,
    intermediate_only: bool = False,
) -> int:
    """Rows of the workspace the plan needs (G, U, t and the split scratch when a split happens)."""
    V, M = config.VLEN, config.MLEN
    T = config.mram_tiles
    mkt = T if max_k_tiles is None else max_k_tiles
    split = -(-hidden // M) > mkt or (not intermediate_only and -(-inter // M) > mkt)
    return 2 * (inter // V) * pitch + 1 + (rp(config, rows) if split else 0)


@dataclass(frozen=True)
class FfnPlan(KernelPlan):
    kernel: str
    rows: int
    hidden: int
    inter: int
    x_base: int
    pitch: int
    y_base: int | None
    ws_base: int
    h_base: int | None
    g_base: int
    u_base: int
    t_base: int
    split_base: int | None
    gate: LinearPlan
    up: LinearPlan
    act: ActivationPlan
    down: LinearPlan | None
    V: int
    mram_tiles: tuple[int, int] = field(kw_only=True)  # always some


def _plan(
    kernel: str,
    config: HardwareConfig,
    *,
    rows: int,
    hidden: int,
    inter: int,
    x_base: int,
    pitch: int,
    y_base: int | None,
    ws_base: int,
    wg: HbmTensor,
    wu: HbmTensor,
    wd: HbmTensor | None,
    max_k_tiles: int | None,
    loops: bool,
    mram_tile0: int,
    h_base: int | None,
    w_runtime_offset_max: int | None = None,
    path: str = "auto",
) -> FfnPlan:
    V, M = config.VLEN, config.MLEN
    need_int(kernel, "rows", rows, 1)
    need_int(kernel, "hidden", hidden, 1)
    need_int(kernel, "inter", inter, 1)
    need_multiple(kernel, "hidden", hidden, M, "MLEN")
    need_multiple(kernel, "inter", inter, M, "MLEN")
    need_int(kernel, "pitch", pitch, 1)
    need_int(kernel, "ws_base", ws_base, 0)
    need_multiple(kernel, "ws_base", ws_base, V, "VLEN")
    ws = 0 if mutation_hooks.active("ffn_workspace_overlap") else ws_base
    inter_only = kernel == "ffn_intermediate"
    n_ws = ffn_workspace_rows(
        config,
        rows=rows,
        hidden=hidden,
        inter=inter,
        pitch=pitch,
        max_k_tiles=max_k_tiles,
        intermediate_only=inter_only,
    )
    n_blk = (inter // V) * pitch
    g_base = ws
    u_base = ws + n_blk * V
    t_base = u_base + n_blk * V
    split = t_base + V if n_ws > 2 * n_blk + 1 else None

    def linear(K: int, N: int, src: int, dst: int, w: HbmTensor) -> LinearPlan:
        """One projection: the row count, pitch, MRAM tiles, K split and loop mode every step shares."""
        return plan_linear(
            config,
            rows=rows,
            K=K,
            N=N,
            x_base=src,
            x_pitch=pitch,
            y_base=dst,
            y_pitch=pitch,
            w=w,
            mram_tile0=mram_tile0,
            max_k_tiles=max_k_tiles,
            split_base=split,
            loops=loops,
            w_runtime_offset_max=w_runtime_offset_max,
            kernel=kernel,
            path=path,
        )

    gate = linear(hidden, inter, x_base, g_base, wg)
    up = linear(hidden, inter, x_base, u_base, wu)
    act = plan_activation(config, kind="silu", src_base=g_base, dst_base=g_base, nrows=n_blk, t_base=t_base)
    down = None
    x_rows = (x_base // V, (hidden // V) * pitch)
    regions: dict[str, Region] = {}
    if not inter_only:
        y_base = need_int(kernel, "y_base", y_base, 0)
        assert wd is not None  # plan_ffn_swiglu always passes the down projection
        down = linear(inter, hidden, g_base, y_base, wd)
        if y_base == x_base:
            regions["x"] = (x_rows[0], x_rows[1], "inout")
        else:
            regions["x"] = (x_rows[0], x_rows[1], "input")
            regions["y"] = (y_base // V, (hidden // V) * pitch, "output")
    else:
        regions["x"] = (x_rows[0], x_rows[1], "input")
        if h_base is not None:
            need_int(kernel, "h_base", h_base, 0)
            need_multiple(kernel, "h_base", h_base, V, "VLEN")
            regions["h"] = (h_base // V, n_blk, "output")
    # the declared workspace is the caller's (a mutated plan writing elsewhere shows up in the footprint)
    if inter_only and h_base is None:
        regions["g"] = (ws_base // V, n_blk, "output")
        regions["ws"] = (ws_base // V + n_blk, n_ws - n_blk, "scratch")
    else:
        regions["ws"] = (ws_base // V, n_ws, "scratch")
    if not mutation_hooks.active("ffn_workspace_overlap"):
        check_disjoint(kernel, regions)
    mram = (mram_tile0, max(p.mram_tiles[1] for p in (gate, up) + ((down,) if down else ())))
    slack = {"wg": gate.hbm_slack["w"], "wu": up.hbm_slack["w"]}
    if down:
        slack["wd"] = down.hbm_slack["w"]
    gp_needed = max(p.gp_needed for p in (gate, up) + ((down,) if down else ()))
    return FfnPlan(
        kernel,
        rows,
        hidden,
        inter,
        x_base,
        pitch,
        y_base,
        ws_base,
        h_base,
        g_base,
        u_base,
        t_base,
        split,
        gate,
        up,
        act,
        down,
        V,
        vram_regions=regions,
        mram_tiles=mram,
        hbm_slack=slack,
        cfg=config,
        gp_needed=gp_needed,
        fp_needed=2,
    )


def plan_ffn_swiglu(
    config: HardwareConfig,
    *,
    rows: int,
    hidden: int,
    inter: int,
    x_base: int,
    pitch: int,
    y_base: int,
    ws_base: int,
    wg: HbmTensor,
    wu: HbmTensor,
    wd: HbmTensor,
    max_k_tiles: int | None = None,
    loops: bool = True,
    mram_tile0: int = 0,
    w_runtime_offset_max: int | None = None,
    path: str = "auto",
) -> FfnPlan:
    """``path``: every projection's matmul form (``"auto"``, ``"gemm"``, ``"gemv"``; :func:`plan_linear`)."""
    return _plan(
        "ffn_swiglu",
        config,
        rows=rows,
        hidden=hidden,
        inter=inter,
        x_base=x_base,
        pitch=pitch,
        y_base=y_base,
        ws_base=ws_base,
        wg=wg,
        wu=wu,
        wd=wd,
        max_k_tiles=max_k_tiles,
        loops=loops,
        mram_tile0=mram_tile0,
        h_base=None,
        w_runtime_offset_max=w_runtime_offset_max,
        path=path,
    )


def plan_ffn_intermediate(
    config: HardwareConfig,
    *,
    rows: int,
    hidden: int,
    inter: int,
    x_base: int,
    pitch: int,
    ws_base: int,
    wg: HbmTensor,
    wu: HbmTensor,
    h_base: int | None = None,
    max_k_tiles: int | None = None,
    loops: bool = True,
    mram_tile0: int = 0,
    w_runtime_offset_max: int | None = None,
) -> FfnPlan:
    return _plan(
        "ffn_intermediate",
        config,
        rows=rows,
        hidden=hidden,
        inter=inter,
        x_base=x_base,
        pitch=pitch,
        y_base=None,
        ws_base=ws_base,
        wg=wg,
        wu=wu,
        wd=None,
        max_k_tiles=max_k_tiles,
        loops=loops,
        mram_tile0=mram_tile0,
        h_base=h_base,
        w_runtime_offset_max=w_runtime_offset_max,
    )


def _emit(asm: Asm, plan: FfnPlan, gp: Sequence[int], fp: Sequence[int], off: WOffset) -> None:
    """``off``: where the run-time W offset is (see :func:`emit_linear_core`)."""
    regs, fregs = take_regs(plan.kernel, gp, fp, plan.gp_needed, plan.fp_needed)
    V = plan.V
    lb = LoopBudget(asm, plan.cfg, plan.kernel)
    asm.begin(
        plan.kernel,
        rows=plan.rows,
        hidden=plan.hidden,
        inter=plan.inter,
        x=plan.x_base,
        y=plan.y_base if plan.y_base is not None else "-",
        ws=plan.ws_base,
    )
    with region(asm, plan.kernel):
        asm.comment(f"{plan.kernel}: step 1 gate G = X @ Wg")
        with region(asm, "gate"):
            emit_linear_core(asm, plan.gate, regs, lb, w_offset_reg=off.reg, w_offset_int=off.int_addr)
        asm.comment(f"{plan.kernel}: step 2 up U = X @ Wu")
        with region(asm, "up"):
            emit_linear_core(asm, plan.up, regs, lb, w_offset_reg=off.reg, w_offset_int=off.int_addr)
        n_blk = (plan.inter // V) * plan.pitch
        act = plan.act
        if mutation_hooks.active("silu_on_up"):
            act = plan_activation(
                plan.cfg, kind="silu", src_base=plan.u_base, dst_base=plan.u_base, nrows=n_blk, t_base=plan.t_base
            )
        asm.comment(f"{plan.kernel}: step 3 silu on the gate projection")
        emit_activation(asm, act, gp=regs[: act.gp_needed], fp=fregs)
        asm.comment(f"{plan.kernel}: step 4 G = G * U")
        gG, gU, gL = regs[0], regs[1], regs[2]
        load_imm(asm, gG, plan.g_base)
        load_imm(asm, gU, plan.u_base)
        with region(asm, "gate_mul_up"), lb.loop(gL, n_blk, "gate*up rows"):
            asm.V_MUL_VV(G(gG), G(gG), G(gU), 0)
            asm.S_ADDI_INT(G(gG), G(gG), V)
            asm.S_ADDI_INT(G(gU), G(gU), V)
        if plan.kernel == "ffn_intermediate" and plan.h_base is not None:
            asm.comment(f"{plan.kernel}: step 5 copy Hm -> h")
            fOne = fregs[0]
            asm.S_LD_FP(F(fOne), G(0), SLOT["ONE"])
            load_imm(asm, gG, plan.g_base)
            load_imm(asm, gU, plan.h_base)
            with region(asm, "copy"), lb.loop(gL, n_blk, "copy rows"):
                asm.V_MUL_VF(G(gU), G(gG), F(fOne), 0)
                asm.S_ADDI_INT(G(gG), G(gG), V)
                asm.S_ADDI_INT(G(gU), G(gU), V)
        if plan.down is not None:
            asm.comment(f"{plan.kernel}: step 6 down Y = Hm @ Wd")
            with region(asm, "down"):
                emit_linear_core(asm, plan.down, regs, lb, w_offset_reg=off.reg, w_offset_int=off.int_addr)
    asm.end(plan.kernel)


def emit_ffn_swiglu(
    asm: Asm,
    plan: FfnPlan,
    *,
    gp: Sequence[int],
    fp: Sequence[int],
    w_offset_reg: int | None = None,
    w_offset_int: int | None = None,
) -> None:
    """``w_offset_reg``: the register holding the run-time W byte offset (iff the plan has one; not in ``gp``'s
    first ``plan.gp_needed``), or ``w_offset_int``: the INT SRAM word holding it."""
    if plan.kernel != "ffn_swiglu":
        raise ValueError(f"emit_ffn_swiglu: plan is for {plan.kernel}")
    _emit(asm, plan, gp, fp, WOffset(w_offset_reg, w_offset_int))


def emit_ffn_intermediate(
    asm: Asm,
    plan: FfnPlan,
    *,
    gp: Sequence[int],
    fp: Sequence[int],
    w_offset_reg: int | None = None,
    w_offset_int: int | None = None,
) -> None:
    if plan.kernel != "ffn_intermediate":
        raise ValueError(f"emit_ffn_intermediate: plan is for {plan.kernel}")
    _emit(asm, plan, gp, fp, WOffset(w_offset_reg, w_offset_int))
