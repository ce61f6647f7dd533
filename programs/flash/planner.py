"""Planning flash attention and attention_scores: the public ``plan_*`` entry points and the sizing helpers.

``_plan`` validates the problem (:mod:`.problem`), fixes the path and FP state (:mod:`.state`), lays out
VRAM, MRAM and HBM (:mod:`.layout`) and the loop schedule (:mod:`.schedule`), in that order, builds the
:class:`~programs.flash.plan.FlashPlan` and dry-runs the emitter into a counting sink, so the plan knows its
exact dynamic instruction count (the kernel has no data-dependent control flow) and its largest
hardware-loop iteration, checked against ``MAX_LOOP_INSTRUCTIONS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig

from ..hbm_tensors import HbmTensor, ceil_div
from .emit import emit_kernel
from .layout import check_hbm, check_mram, kv_alloc_elems, plan_vram, q_alloc_elems
from .loops import NullSink, Tracker
from .plan import FP_NEEDED, GP_NEEDED, AttentionShape, FlashPlan
from .problem import check_slots, check_tensors, elem_bytes, validate_problem
from .schedule import schedule_blocks
from .state import plan_fp_state

__all__ = ["plan_flash_attention", "plan_attention_scores", "hbm_requirements", "scratch_rows"]


def _dry_run(plan: FlashPlan) -> None:
    """Emit ``plan`` into a counting sink: its exact dynamic and static instruction counts and largest
    hardware-loop iteration (checked against MAX_LOOP_INSTRUCTIONS) are stored on the plan."""
    tr = Tracker(NullSink(), plan.config.MAX_LOOP_INSTRUCTIONS, plan.kernel)
    emit_kernel(tr, plan, list(range(1, plan.gp_needed + 1)), list(range(1, FP_NEEDED + 1)))
    object.__setattr__(plan, "dynamic_instructions", tr.dynamic)
    object.__setattr__(plan, "static_instructions", tr.static)
    object.__setattr__(plan, "max_loop_iteration", tr.max_iter)


def _plan(
    kernel: str,
    config: HardwareConfig,
    *,
    batch: int,
    hq: int,
    hkv: int,
    d: int,
    q_len: int,
    kv_len: int,
    causal: bool = False,
    q: HbmTensor | None = None,
    k: HbmTensor | None = None,
    v: HbmTensor | None = None,
    kv_layout: str = "bshd",
    kv_capacity: int | None = None,
    kv_row_elems: int | None = None,
    o_base: int = 0,
    o_rows_p: int | None = None,
    scratch_base: int = 0,
    fp_state_base: int = 16,
    mram_tile0: int = 0,
    path: str = "auto",
    qk_slot: int = 5,
    neg_slot: int = 0,
    fp_reserved: Mapping[str, tuple[int, int]] | None = None,
    loops: bool = True,
    dry_run: bool = True,
    kv_chunk_tiles: int | None = None,
    sizing: str = "",
) -> FlashPlan:
    """The plan (module docstring); ``sizing``: a plan for its sizes alone, not to be emitted: ``"hbm"``
    (``hbm_slack``, ``vram_regions``) has its blocks without their kv tiles (the long part of a long-context
    schedule), ``"vram"`` (``vram_regions`` alone) no blocks."""
    shape = AttentionShape(batch, hq, hkv, d, q_len, kv_len, causal, kv_layout)
    pb = validate_problem(kernel, config, shape, kv_capacity=kv_capacity, kv_row_elems=kv_row_elems, path=path)
    eb_q, eb_kv = elem_bytes(pb, q, k, v)
    check_tensors(pb, q, k, v)
    check_slots(kernel, qk_slot, neg_slot)
    st = plan_fp_state(pb, path, fp_state_base, fp_reserved, kv_chunk_tiles)
    Tq = ceil_div(q_len, st.qrows)
    check_mram(pb, mram_tile0)
    vram = plan_vram(pb, st, o_base, o_rows_p, scratch_base, Tq)
    blocks = () if sizing == "vram" else schedule_blocks(pb, st, Tq, tiles=not sizing)
    kv_alloc = kv_alloc_elems(pb)
    q_alloc = q_alloc_elems(pb, st.path, blocks)
    check_hbm(pb, q, k, eb_q, eb_kv, q_alloc, kv_alloc)
    plan = FlashPlan(
        **shape.shape_fields(),
        kernel=kernel,
        config=config,
        kv_capacity=pb.S_cap,
        kv_row_elems=pb.Wp,
        path=st.path,
        decode=pb.decode,
        ratio=pb.ratio,
        nc=pb.nc,
        nh=st.nh,
        qrows=st.qrows,
        Tq=Tq,
        Tk=pb.Tk,
        off=pb.off,
        R=pb.R,
        q=q,
        k=k,
        v=v,
        eb_q=eb_q,
        eb_kv=eb_kv,
        q_alloc_elems=q_alloc,
        kv_alloc_elems=kv_alloc,
        o_base=o_base,
        rows_o_p=vram.rows_o_p,
        o_blocks=vram.o_blocks,
        scratch_base=scratch_base,
        rows=vram.rows,
        vram_regions=vram.regions,
        fp_state_base=st.base,
        fp_state_size=st.size,
        mram_tile0=mram_tile0,
        qk_slot=qk_slot,
        neg_slot=neg_slot,
        blocks=blocks,
        loops=bool(loops),
        chunk_tiles=st.chunk_tiles,
        merge_levels=st.levels,
        gp_needed=GP_NEEDED + 1 if st.levels else GP_NEEDED,
    )
    if dry_run:
        _dry_run(plan)
    return plan


def plan_flash_attention(config: HardwareConfig, **params: Any) -> FlashPlan:
    """Plan flash attention (kernels.md §3).  Parameters (§3.2): ``batch, hq, hkv, d, q_len, kv_len,
    causal, q, k, v, kv_layout, kv_capacity, kv_row_elems, o_base, o_rows_p, scratch_base, fp_state_base,
    mram_tile0, path, qk_slot, neg_slot, fp_reserved, loops``.  ``q``/``k``/``v`` may be omitted to size the
    HBM tensors first (:attr:`FlashPlan.hbm_slack`); such a plan cannot be emitted.  ``head_dim`` is
    accepted as an alias of ``d``."""
    if "head_dim" in params:
        params["d"] = params.pop("head_dim")
    return _plan("flash_attention", config, **params)


def plan_attention_scores(config: HardwareConfig, **params: Any) -> FlashPlan:
    """Plan the QKᵀ stage alone (kernels.md §2.11): the same parameters as flash attention, with
    ``s_out`` (element address of the score tiles) instead of ``o_base``; no FP state, no V."""
    if "head_dim" in params:
        params["d"] = params.pop("head_dim")
    if "s_out" in params:
        params["o_base"] = params.pop("s_out")
    params.pop("v", None)
    params.pop("fp_state_base", None)
    k = params.get("k")
    if k is not None:
        params["v"] = k
    return _plan("attention_scores", config, **params)


def hbm_requirements(config: HardwareConfig, **params: Any) -> dict[str, int]:
    """``alloc_elems`` each input tensor needs (q, k, v), without building the tensors."""
    p = dict(params)
    for name in ("q", "k", "v"):
        p.pop(name, None)
    kernel = p.pop("kernel", "flash_attention")
    if "head_dim" in p:
        p["d"] = p.pop("head_dim")
    if "s_out" in p:
        p["o_base"] = p.pop("s_out")
    return _plan(kernel, config, dry_run=False, sizing="hbm", **p).hbm_slack


def scratch_rows(config: HardwareConfig, **params: Any) -> int:
    """VRAM rows the scratch items take from ``scratch_base`` (without building the tensors or dry-running)."""
    p = dict(params)
    for name in ("q", "k", "v"):
        p.pop(name, None)
    if "head_dim" in p:
        p["d"] = p.pop("head_dim")
    plan = _plan("flash_attention", config, dry_run=False, sizing="vram", **p)
    r0 = plan.scratch_base // plan.V
    ends = [a + n for name, (a, n, role) in plan.vram_regions.items() if role == "scratch"]
    return max(ends, default=r0) - r0


# =========================================================================== emission machinery
