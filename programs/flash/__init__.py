"""Flash attention (kernels.md §3) and its QKᵀ stage on its own, ``attention_scores`` (§2.11).

``plan_flash_attention(config, **params) -> FlashPlan`` validates the problem, chooses the path, lays out
VRAM scratch, FP SRAM state and MRAM tiles, computes every HBM address and the slack each input tensor
needs, and fixes the loop schedule (which kv tiles each (batch, group, q tile, head batch) block visits,
which of them need additive −inf mask rows).  ``emit_flash_attention(asm, plan, gp=..., fp=...)`` emits the
program.  The plan is the single source of truth for readback (:meth:`FlashPlan.output_read`,
:meth:`FlashPlan.state_words`, :meth:`FlashPlan.scores_tile_addr`).

Loop order (§3.6, normative): b, g, q tile i, head batch → kv tile t (increasing, fully masked tiles cut
off) → heads; every per-row body is a hardware loop.  The online-softmax state of a block is reset once
before its first kv tile and carried across tiles; ``O *= 1/l`` runs once after the last tile.  The outer
levels are hardware loops too where that pays (:mod:`programs.flash.loops`): runs of consecutive blocks
that differ in one of b, g, i, head batch (with the same rows, masks and heads; the number of fully
visible kv tiles may grow from block to block, e.g. causal q tiles), each run of equally masked kv tiles
of a block, and the heads of a tile; every address is an affine function of the loop counters.  The
dynamic instruction sequence is that of the fully unrolled kernel plus scalar counter arithmetic and loop
instructions.  A loop iteration must stay below MAX_LOOP_INSTRUCTIONS, so a block with more work than that
is emitted on its own (its kv tiles still one loop).

Paths (§3.3): *batched* (``M_BTMM``/``M_BTMV``, legal iff ``d == H``, ``ratio <= BA``, ``BA*H == M``; the
default whenever legal) and *per-head* (``M_TMM``/``M_TMV``).  Head-dim chunks (``d > M``, ``d % M == 0``)
are supported on the per-head path (:data:`SUPPORTS_HEAD_DIM_CHUNKS`).

The modules, one job each:

* :mod:`.plan` -- :class:`FlashPlan` (extends the problem's ``AttentionShape``), :class:`Block`, :class:`TileStep`:
  the plan and every address;
* :mod:`.planner` -- the ``plan_*`` entry points: the steps below in order, then the dry run;
* :mod:`.problem` -- validating the problem (shapes, machine, head-dim chunks, K/V cache, tensors);
* :mod:`.state` -- the path and the online-softmax state in FP SRAM;
* :mod:`.layout` -- VRAM output and scratch, MRAM tiles, HBM allocations;
* :mod:`.schedule` -- the blocks and kv tiles in loop order, mask rows, and the runs made loops;
* :mod:`.loops` -- the hardware-loop machinery (levels, affine loads, instruction counting);
* :mod:`.emit_base` -- what both emitters share: Q staging, K/V prefetch, QKᵀ on both paths;
* :mod:`.emit_flash`, :mod:`.emit_scores` -- the flash-attention and attention_scores emitters;
* :mod:`.emit` -- the ``emit_*`` entry points.
"""

from __future__ import annotations

from .emit import emit_attention_scores, emit_flash_attention
from .plan import FP_NEEDED, GP_NEEDED, Block, FlashPlan, TileStep
from .planner import hbm_requirements, plan_attention_scores, plan_flash_attention, scratch_rows
from .problem import SUPPORTS_HEAD_DIM_CHUNKS

__all__ = [
    "SUPPORTS_HEAD_DIM_CHUNKS",
    "FlashPlan",
    "Block",
    "TileStep",
    "plan_flash_attention",
    "emit_flash_attention",
    "plan_attention_scores",
    "emit_attention_scores",
    "hbm_requirements",
    "scratch_rows",
    "GP_NEEDED",
    "FP_NEEDED",
]
