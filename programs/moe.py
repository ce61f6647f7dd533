"""``router_topk`` (kernels.md §2.12): routed-MoE router = ``linear(X, Wr)`` then ``V_TOPK`` per token.

Policy 0: E = 32 experts, k = 4; policy 1: E = 128, k = 8.  Logits are CBM ``[T, round_up(E, M)]`` (the
router pads E to a multiple of M).  Per token t: ``V_TOPK gp(fp_out + t*k), gp(row_t), gp(int_out + t*k),
policy`` writes the k softmax weights (over the selected logits) to FP SRAM and the k expert indices to INT
SRAM, in rank order.  If E <= V, ``row_t`` is CBM block 0 row t; otherwise the token's ``ceil(E/V)`` blocks
are first copied (row-copy idiom) into consecutive staging rows, because V_TOPK reads consecutive rows.

:func:`plan_topk` / :func:`emit_topk` are step 2 alone (logits already in VRAM);
:func:`plan_router_topk` / :func:`emit_router_topk` are both steps.

:func:`plan_moe_layer` / :func:`emit_moe_layer` are the whole routed-MoE layer
``out[t] = sum_r w[t,r] * FFN_{idx[t,r]}(X[t])`` (SwiGLU experts, :mod:`programs.ffn`):

1. ``moe/router``: logits = ``linear(X, Wr)`` over every token (E padded to a multiple of M);

then per token chunk (:func:`moe_chunk_tokens`: the most tokens whose routing fits FP/INT SRAM, at most
``chunk``; T is limited only by VRAM), tokens ``row0 .. row0+C-1``:

2. ``moe/topk``: ``V_TOPK`` per token of the chunk: weights -> FP SRAM ``[fp_out, +C*k)``, indices -> INT SRAM
   ``[int_out, +C*k)``, rank order (each chunk overwrites the previous one's);
3. per rank r (unrolled, k copies) a pass over the chunk's tokens t -- one hardware loop when one pass fits
   MAX_LOOP_INSTRUCTIONS (:meth:`~programs.common.LoopBudget.repeat`; its counter is the last register, every
   address is computed from it: :meth:`~programs.common.LoopBudget.affine`), else unrolled -- of

   * ``moe/expert_ffn``: token t's row is copied (row-copy idiom) into the one-row CBM ``xs``; ``S_LD_INT``
     loads the index ``INT[int_out + t*k + r]``, ``S_MUL_INT`` makes it the byte offset ``index *
     expert_stride``, ``S_ST_INT`` puts it in the INT SRAM word ``offset_int = int_out + C*k``, which every
     output column tile of the FFN's projections loads and adds to its Wg / Wu / Wd prefetches (so no register
     holds it across the FFN: the FFN's 11 registers and the token counter are the 12 a generator may take;
     the MX scales follow from the element offset, memory.md §5.1); the SwiGLU FFN runs on ``xs`` into the
     one-row CBM ``ys``;
   * ``moe/combine``: ``S_LD_FP`` the routing weight ``FP[fp_out + t*k + r]``, ``ys *= w`` (``V_MUL_VF``),
     ``out[t] += ys`` (rank 0 writes ``out[t] = w*ys``), one bf16 rounding per step, ranks in order.

The ranks are the outer level (rather than the tokens) so that a loop iteration holds one FFN, not k: a
nested (token, rank) loop would need a second counter live across the FFN, a 13th register.  ``loops=False``
is the reference form: the same operations on the same addresses in the same order (the addresses as
constants, the tokens unrolled), so both forms give bit-identical results.

Every expert's Wg ``[hidden, inter]``, Wu ``[hidden, inter]`` and Wd ``[inter, hidden]`` is stacked in one HBM
tensor each (expert e's rows start at row ``e*hidden`` resp. ``e*inter``), so the three expert strides are the
same ``hidden*inter*eb`` bytes.  The workspace (:func:`moe_workspace_rows`) holds, from ``ws_base``: the
logits ``[T, Epad]`` (pitch ``pitch``), the V_TOPK staging rows (E > VLEN), the router's split scratch (a K
split), ``xs`` and ``ys`` (``hidden/V`` blocks of RP rows each) and the FFN workspace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import LOOP_COUNT_MAX, Asm, add_imm, load_imm, region
from .asm import fp as F
from .asm import gp as G
from .common import (
    FP_STATE_BASE,
    SLOT,
    Index,
    LoopBudget,
    Region,
    check_addr,
    check_disjoint,
    fail,
    need_int,
    need_multiple,
    rp,
    take_regs,
)
from .ffn import FfnPlan, emit_ffn_swiglu, ffn_workspace_rows, plan_ffn_swiglu
from .footprint import KernelPlan
from .hbm_tensors import HbmTensor, ceil_div, round_up, row_pad
from .linear import LinearPlan, emit_linear_core, plan_linear

__all__ = [
    "POLICIES",
    "TopkPlan",
    "plan_topk",
    "emit_topk",
    "RouterPlan",
    "plan_router_topk",
    "emit_router_topk",
    "MoeLayerPlan",
    "plan_moe_layer",
    "emit_moe_layer",
    "moe_workspace_rows",
    "moe_chunk_tokens",
]

#: policy -> (E experts, k selected)
POLICIES = {0: (32, 4), 1: (128, 8)}


@dataclass(frozen=True)
class TopkPlan(KernelPlan):
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
    kernel: str = "topk"
    row0: int = 0  # the first token's row of the logits (a token chunk of a longer logits block)


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
    row0: int = 0,
) -> TopkPlan:
    """Top-k of the logit rows ``row0 .. row0+T-1`` (outputs for token ``t`` at ``fp_out/int_out + t*k``)."""
    V = config.VLEN
    if policy not in POLICIES:
        fail(kernel, "policy", policy, f"must be one of {sorted(POLICIES)} (0: E=32,k=4; 1: E=128,k=8)")
    E, k = POLICIES[policy]
    need_int(kernel, "T", T, 1, LOOP_COUNT_MAX)
    need_int(kernel, "row0", row0, 0)
    need_int(kernel, "pitch", pitch, row0 + T)
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
        kernel,
        row0,
        vram_regions=regions,
        fp_range=(fp_out, T * k),
        int_range=(int_out, T * k),
        cfg=config,
        gp_needed=6,
        fp_needed=1,
    )


def _emit_topk_core(asm: Asm, plan: TopkPlan, regs: Sequence[int], fOne: int, lb: LoopBudget) -> None:
    gF, gI, gRow, gL, gS, gTmp = regs[:6]
    V, k = plan.V, plan.k
    swapped = mutation_hooks.active("topk_bases_swapped")
    load_imm(asm, gF, plan.int_out if swapped else plan.fp_out)
    load_imm(asm, gI, plan.fp_out if swapped else plan.int_out)
    load_imm(asm, gRow, plan.logits_base + plan.row0 * V)
    if plan.nrow > 1:
        asm.S_LD_FP(F(fOne), G(0), SLOT["ONE"])
    asm.comment(f"{plan.kernel}: tokens loop (V_TOPK policy {plan.policy}: E={plan.E}, k={k})")
    tokens = plan.T // 4 * 4 if mutation_hooks.active("topk_tokens_multiple_of_4") else plan.T
    with lb.loop(gL, tokens, "tokens"):
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
        asm.S_ADDI_INT(G(gRow), G(gRow), plan.pitch * V if mutation_hooks.active("topk_row_step_pitch") else V)


def emit_topk(asm: Asm, plan: TopkPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    regs, (fOne,) = take_regs(plan.kernel, gp, fp, plan.gp_needed, plan.fp_needed)
    lb = LoopBudget(asm, plan.cfg, plan.kernel)
    asm.begin(
        plan.kernel, T=plan.T, policy=plan.policy, logits=plan.logits_base, fp_out=plan.fp_out, int_out=plan.int_out
    )
    with region(asm, plan.kernel):
        _emit_topk_core(asm, plan, regs, fOne, lb)
    asm.end(plan.kernel)


@dataclass(frozen=True)
class RouterPlan(KernelPlan):
    T: int
    hidden: int
    E: int
    Epad: int
    linear: LinearPlan
    topk: TopkPlan


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
        vram_regions=regions,
        fp_range=tk.fp_range,
        int_range=tk.int_range,
        mram_tiles=lin.mram_tiles,
        hbm_slack=lin.hbm_slack,
        cfg=config,
        gp_needed=lin.gp_needed,
        fp_needed=1,
    )


def emit_router_topk(asm: Asm, plan: RouterPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    regs, (fOne,) = take_regs("router_topk", gp, fp, plan.gp_needed, plan.fp_needed)
    lb = LoopBudget(asm, plan.cfg, "router_topk")
    asm.begin("router_topk", T=plan.T, hidden=plan.hidden, E=plan.E, Epad=plan.Epad, policy=plan.topk.policy)
    with region(asm, "router_topk"):
        asm.comment("router_topk: step 1 logits = X @ Wr")
        with region(asm, "router"):
            emit_linear_core(asm, plan.linear, regs, lb)
        asm.comment("router_topk: step 2 top-k per token")
        with region(asm, "topk"):
            _emit_topk_core(asm, plan.topk, regs, fOne, lb)
    asm.end("router_topk")


# --------------------------------------------------------------------------- moe_layer

MOE = "moe_layer"


def _router_splits(config: HardwareConfig, hidden: int, mram_tile0: int, max_k_tiles: int | None) -> bool:
    mkt = config.mram_tiles - mram_tile0 if max_k_tiles is None else max_k_tiles
    return ceil_div(hidden, config.MLEN) > mkt


def _workspace_parts(
    config: HardwareConfig,
    *,
    T: int,
    hidden: int,
    inter: int,
    policy: int,
    pitch: int,
    mram_tile0: int = 0,
    max_k_tiles: int | None = None,
) -> dict[str, int]:
    """The workspace's sub-regions in order: name -> rows (0 for a part the shape does not need)."""
    V, RP = config.VLEN, row_pad(config)
    if policy not in POLICIES:
        fail(MOE, "policy", policy, f"must be one of {sorted(POLICIES)} (0: E=32,k=4; 1: E=128,k=8)")
    E, _ = POLICIES[policy]
    nrow = ceil_div(E, V)
    need_multiple(MOE, "hidden", need_int(MOE, "hidden", hidden, 1), config.MLEN, "MLEN")
    return {
        "logits": (round_up(E, config.MLEN) // V) * pitch,
        "topk_stage": nrow if nrow > 1 else 0,
        "router_split": rp(config, T) if _router_splits(config, hidden, mram_tile0, max_k_tiles) else 0,
        "xs": (hidden // V) * RP,
        "ys": (hidden // V) * RP,
        "ffn_ws": ffn_workspace_rows(config, rows=1, hidden=hidden, inter=inter, pitch=RP, max_k_tiles=max_k_tiles),
    }


def moe_workspace_rows(
    config: HardwareConfig,
    *,
    T: int,
    hidden: int,
    inter: int,
    policy: int,
    pitch: int,
    mram_tile0: int = 0,
    max_k_tiles: int | None = None,
) -> int:
    """VRAM rows of the moe_layer workspace (logits, V_TOPK staging, router split, xs, ys, FFN workspace)."""
    return sum(
        _workspace_parts(
            config,
            T=T,
            hidden=hidden,
            inter=inter,
            policy=policy,
            pitch=pitch,
            mram_tile0=mram_tile0,
            max_k_tiles=max_k_tiles,
        ).values()
    )


@dataclass(frozen=True)
class MoeLayerPlan(KernelPlan):
    T: int
    hidden: int
    inter: int
    E: int
    k: int
    x_base: int
    pitch: int
    out_base: int
    ws_base: int
    xs_base: int
    ys_base: int
    xs_pitch: int
    expert_stride: int  # bytes from expert e to e+1 in Wg, Wu and Wd alike
    router: LinearPlan  # logits = X @ Wr, every token at once
    topk: tuple[TopkPlan, ...]  # one per token chunk (tokens topk[c].row0 ..)
    ffn: FfnPlan
    chunk: int  # tokens per chunk (the last one may be shorter)
    fp_out: int  # FP SRAM [fp_out, +chunk*k): the chunk's routing weights
    int_out: int  # INT SRAM [int_out, +chunk*k): the chunk's expert indices
    offset_int: int  # INT SRAM word holding the selected expert's byte offset (read by the FFN)
    loops: bool
    V: int
    fp_range: tuple[int, int] = field(kw_only=True)  # always some
    int_range: tuple[int, int] = field(kw_only=True)  # always some

    @property
    def policy(self) -> int:
        return self.topk[0].policy


def _expert_stride(E: int, hidden: int, inter: int, wg: HbmTensor, wu: HbmTensor, wd: HbmTensor) -> int:
    """The byte stride of one expert, equal in the three stacked tensors (one offset serves all)."""
    tensors = (("wg", wg), ("wu", wu), ("wd", wd))
    for name, t in tensors:
        if t.alloc_elems < E * hidden * inter:
            fail(
                MOE,
                f"{name}.alloc_elems",
                t.alloc_elems,
                f"must be >= E*hidden*inter={E * hidden * inter} ({E} experts)",
            )
    strides = {name: hidden * inter * t.eb for name, t in tensors}
    if len(set(strides.values())) != 1:
        fail(MOE, "wd.eb", wd.eb, f"the expert strides {strides} must be equal (Wg, Wu and Wd of one precision)")
    stride = strides["wg"]
    check_addr(MOE, f"expert offset (E-1)*stride with E={E}", (E - 1) * stride)
    return stride


def _layout(
    V: int, parts: dict[str, int], *, x_base: int, out_base: int, ws_base: int, rows: int
) -> tuple[dict[str, int], dict[str, Region]]:
    """(element base of every workspace part, the VRAM regions: x, out and the non-empty parts), checked:
    aligned bases, 32-bit addresses, pairwise disjoint."""
    for name, v in (("x_base", x_base), ("out_base", out_base), ("ws_base", ws_base)):
        need_int(MOE, name, v, 0)
        need_multiple(MOE, name, v, V, "VLEN")
    row = ws_base // V
    base: dict[str, int] = {}
    for name, n in parts.items():
        base[name] = row * V
        row += n
    regions: dict[str, Region] = {"x": (x_base // V, rows, "input"), "out": (out_base // V, rows, "output")}
    regions.update({name: (base[name] // V, n, "scratch") for name, n in parts.items() if n})
    for name, (r0, n, _role) in regions.items():
        check_addr(MOE, f"{name} region end", (r0 + n) * V)
    check_disjoint(MOE, regions)
    return base, regions


def moe_chunk_tokens(
    config: HardwareConfig, *, T: int, k: int, fp_out: int, int_out: int, chunk: int | None = None
) -> int:
    """Tokens per chunk: at most ``chunk`` (and T), as many as leave their ``k`` routing weights in FP SRAM from
    ``fp_out`` and their ``k`` expert indices plus the expert-offset word in INT SRAM from ``int_out``."""
    need_int(MOE, "fp_out", fp_out, 0)
    need_int(MOE, "int_out", int_out, 0)
    if fp_out < FP_STATE_BASE:
        fail(MOE, "fp_out", fp_out, f"must be >= {FP_STATE_BASE} (FP SRAM slots 0-15 are constants)")
    fp_room = (config.FP_SRAM_SIZE - fp_out) // k
    int_room = (config.INT_SRAM_SIZE - int_out - 1) // k
    if fp_room < 1:
        fail(
            MOE,
            "fp_out",
            fp_out,
            f"leaves no room for one token's k={k} routing weights: must be "
            f"<= FP_SRAM_SIZE-k={config.FP_SRAM_SIZE - k}",
        )
    if int_room < 1:
        fail(
            MOE,
            "int_out",
            int_out,
            f"leaves no room for one token's k={k} expert indices and the expert-offset word: must be "
            f"<= INT_SRAM_SIZE-k-1={config.INT_SRAM_SIZE - k - 1}",
        )
    tokens = min(T, fp_room, int_room)
    if chunk is not None:
        tokens = min(tokens, need_int(MOE, "chunk", chunk, 1))
    return tokens


def plan_moe_layer(
    config: HardwareConfig,
    *,
    T: int,
    hidden: int,
    inter: int,
    policy: int,
    x_base: int,
    pitch: int,
    out_base: int,
    ws_base: int,
    wr: HbmTensor,
    wg: HbmTensor,
    wu: HbmTensor,
    wd: HbmTensor,
    fp_out: int = FP_STATE_BASE,
    int_out: int = 0,
    mram_tile0: int = 0,
    max_k_tiles: int | None = None,
    loops: bool = True,
    chunk: int | None = None,
) -> MoeLayerPlan:
    """X ``[T, hidden]`` (CBM, pitch ``pitch``) -> out ``[T, hidden]`` (CBM, pitch ``pitch``); ``wr``
    ``[hidden, Epad]``; ``wg``/``wu`` ``[E*hidden, inter]``, ``wd`` ``[E*inter, hidden]`` (stacked experts).
    ``chunk``: at most this many tokens per chunk (default: as many as FP/INT SRAM hold)."""
    V = config.VLEN
    need_int(MOE, "T", T, 1)
    need_multiple(MOE, "inter", need_int(MOE, "inter", inter, 1), config.MLEN, "MLEN")
    need_int(MOE, "pitch", pitch, T)
    need_multiple(MOE, "pitch", pitch, row_pad(config), "RP (lcm(BLEN, Pv, Ps))")
    parts = _workspace_parts(
        config,
        T=T,
        hidden=hidden,
        inter=inter,
        policy=policy,
        pitch=pitch,
        mram_tile0=mram_tile0,
        max_k_tiles=max_k_tiles,
    )
    E, k = POLICIES[policy]
    C = moe_chunk_tokens(config, T=T, k=k, fp_out=fp_out, int_out=int_out, chunk=chunk)
    base, regions = _layout(V, parts, x_base=x_base, out_base=out_base, ws_base=ws_base, rows=(hidden // V) * pitch)
    router = plan_linear(
        config,
        rows=T,
        K=hidden,
        N=round_up(E, config.MLEN),
        x_base=x_base,
        x_pitch=pitch,
        y_base=base["logits"],
        y_pitch=pitch,
        w=wr,
        mram_tile0=mram_tile0,
        max_k_tiles=max_k_tiles,
        split_base=base["router_split"] if parts["router_split"] else None,
        loops=loops,
        kernel=MOE,
    )
    topk = tuple(
        plan_topk(
            config,
            T=min(C, T - t0),
            policy=policy,
            logits_base=base["logits"],
            pitch=pitch,
            fp_out=fp_out,
            int_out=int_out,
            stage_base=base["topk_stage"] if parts["topk_stage"] else None,
            kernel=MOE,
            logits_role="output",
            row0=t0,
        )
        for t0 in range(0, T, C)
    )
    stride = _expert_stride(E, hidden, inter, wg, wu, wd)
    RP = row_pad(config)
    ffn = plan_ffn_swiglu(
        config,
        rows=1,
        hidden=hidden,
        inter=inter,
        x_base=base["xs"],
        pitch=RP,
        y_base=base["ys"],
        ws_base=base["ffn_ws"],
        wg=wg,
        wu=wu,
        wd=wd,
        max_k_tiles=max_k_tiles,
        loops=loops,
        mram_tile0=mram_tile0,
        w_runtime_offset_max=(E - 1) * stride,
    )
    gp_own = max(router.gp_needed, ffn.gp_needed, topk[0].gp_needed)
    return MoeLayerPlan(
        T,
        hidden,
        inter,
        E,
        k,
        x_base,
        pitch,
        out_base,
        ws_base,
        base["xs"],
        base["ys"],
        RP,
        stride,
        router,
        topk,
        ffn,
        C,
        fp_out,
        int_out,
        int_out + C * k,
        loops,
        V,
        vram_regions=regions,
        fp_range=(fp_out, C * k),
        int_range=(int_out, C * k + 1),
        mram_tiles=(mram_tile0, max(router.mram_tiles[1], ffn.mram_tiles[1])),
        hbm_slack={"wr": router.hbm_slack["w"], **{n: ffn.hbm_slack[n] for n in ("wg", "wu", "wd")}},
        cfg=config,
        gp_needed=gp_own + int(loops),  # + the token loop's counter
        fp_needed=max(topk[0].fp_needed, ffn.fp_needed),
    )


def _label(t: Index) -> str:
    return str(t) if isinstance(t, int) else "t"


def _copy_blocks(lb: LoopBudget, plan: MoeLayerPlan, regs: Sequence[int], op: Callable[[], None]) -> None:
    """``op()`` once per column block of a token's row, stepping gA (``pitch`` rows: X / out) and gB
    (``xs_pitch`` rows: xs / ys) one block on."""
    gA, gB, gL, gTmp = regs[:4]
    V = plan.V

    def block(step: bool) -> None:
        op()
        if step:
            lb.add(gA, plan.pitch * V, gTmp)
            lb.add(gB, plan.xs_pitch * V, gTmp)

    lb.run(gL, plan.hidden // V, "token blocks", block, step_last=False)


def _stage_token(lb: LoopBudget, plan: MoeLayerPlan, row: int, t: Index, regs: Sequence[int], fOne: int) -> None:
    """xs = X[row + t] (row-copy idiom, every column block)."""
    gX, gXs, _gL, gTmp = regs[:4]
    lb.asm.comment(f"{MOE}: token {row}+{_label(t)}: X -> xs")
    lb.asm.S_LD_FP(F(fOne), G(0), SLOT["ONE"])
    lb.affine(gX, plan.x_base + row * plan.V, [(t, plan.V)], gTmp)
    load_imm(lb.asm, gXs, plan.xs_base)
    _copy_blocks(lb, plan, regs, lambda: lb.asm.V_MUL_VF(G(gXs), G(gX), F(fOne), 0))


def _expert_offset(lb: LoopBudget, plan: MoeLayerPlan, t: Index, r: int, regs: Sequence[int]) -> None:
    """INT[offset_int] = INT[int_out + t*k + r] * expert_stride: the byte offset of the selected expert's
    weights, which the FFN adds to every Wg / Wu / Wd prefetch."""
    gOff, gTmp = regs[:2]
    asm = lb.asm
    if mutation_hooks.active("expert_index_ignored"):
        load_imm(asm, gOff, 0)
    else:
        row_bytes = plan.inter * plan.ffn.gate.w.eb
        stride = row_bytes if mutation_hooks.active("expert_stride_row") else plan.expert_stride
        lb.affine(gOff, plan.int_out + r, [(t, plan.k)], gTmp)
        asm.S_LD_INT(G(gOff), G(gOff), 0)
        load_imm(asm, gTmp, stride)
        asm.S_MUL_INT(G(gOff), G(gOff), G(gTmp))
    load_imm(asm, gTmp, plan.offset_int)
    asm.S_ST_INT(G(gOff), G(gTmp), 0)


def _combine(lb: LoopBudget, plan: MoeLayerPlan, row: int, t: Index, r: int, regs: Sequence[int], fW: int) -> None:
    """out[row + t] (+)= w[t,r] * ys: the first rank writes, later ranks add (one bf16 rounding per step)."""
    gO, gY, _gL, gTmp = regs[:4]
    asm = lb.asm
    asm.comment(f"{MOE}: token {row}+{_label(t)} rank {r}: out {'=' if r == 0 else '+='} w * ys")
    lb.affine(gO, plan.fp_out + r, [(t, plan.k)], gTmp)
    asm.S_LD_FP(F(fW), G(gO), 0)
    lb.affine(gO, plan.out_base + row * plan.V, [(t, plan.V)], gTmp)
    load_imm(asm, gY, plan.ys_base)

    def op() -> None:
        if r == 0:
            lb.asm.V_MUL_VF(G(gO), G(gY), F(fW), 0)
        else:
            lb.asm.V_MUL_VF(G(gY), G(gY), F(fW), 0)
            lb.asm.V_ADD_VV(G(gO), G(gO), G(gY), 0)

    _copy_blocks(lb, plan, regs, op)


def _expert_pass(
    lb: LoopBudget, plan: MoeLayerPlan, tk: TopkPlan, r: int, regs: Sequence[int], fregs: Sequence[int], t: Index
) -> None:
    """Token ``tk.row0 + t``, rank ``r``: stage the row, the selected expert's offset, its FFN, the combine."""
    with region(lb.asm, "moe/expert_ffn"):
        _stage_token(lb, plan, tk.row0, t, regs, fregs[1])
        lb.asm.comment(f"{MOE}: rank {r}: expert offset, FFN xs -> ys")
        _expert_offset(lb, plan, t, r, regs)
        sink = cast(Asm, lb.asm)  # the Asm, or the counting stand-in while the pass is measured
        emit_ffn_swiglu(sink, plan.ffn, gp=regs, fp=fregs, w_offset_int=plan.offset_int)
    with region(lb.asm, "moe/combine"):
        _combine(lb, plan, tk.row0, t, r, regs, fregs[0])


def emit_moe_layer(asm: Asm, plan: MoeLayerPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    """Router over every token, then per token chunk: V_TOPK, and per rank r a pass over the chunk's tokens
    (a hardware loop with ``loops`` when one pass fits MAX_LOOP_INSTRUCTIONS, counter: the last register)."""
    regs, fregs = take_regs(MOE, gp, fp, plan.gp_needed, plan.fp_needed)
    own, gTok = (regs[:-1], regs[-1]) if plan.loops else (regs, 0)
    lb = LoopBudget(asm, plan.cfg, MOE)
    asm.begin(
        MOE,
        T=plan.T,
        hidden=plan.hidden,
        inter=plan.inter,
        E=plan.E,
        k=plan.k,
        policy=plan.policy,
        x=plan.x_base,
        out=plan.out_base,
        ws=plan.ws_base,
        chunk=plan.chunk,
    )
    with region(asm, "moe/router"):
        emit_linear_core(asm, plan.router, own, lb)
    for tk in plan.topk:
        with region(asm, "moe/topk"):
            asm.comment(f"{MOE}: tokens {tk.row0}..{tk.row0 + tk.T - 1}: top-k")
            _emit_topk_core(asm, tk, own, fregs[0], lb)
        for r in range(plan.k):

            def body(t: Index, tk: TopkPlan = tk, r: int = r) -> None:
                _expert_pass(lb, plan, tk, r, own, fregs, t)

            n_tok = tk.T // 4 * 4 if mutation_hooks.active("moe_tokens_floor_4") else tk.T
            if plan.loops:
                lb.repeat(gTok, n_tok, "tokens", body)
            else:
                for t in range(n_tok):
                    body(t)
    asm.end(MOE)
