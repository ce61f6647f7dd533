"""The flash-attention plan (kernels.md §3): :class:`FlashPlan` and its schedule's :class:`Block` / :class:`TileStep`.

The plan holds everything the emitters and the readback need -- the problem, the path, the VRAM / FP SRAM /
MRAM layout, the HBM tensors and their slack, the blocks in loop order -- and derives every address from it.
It is the single source of truth for readback (:meth:`FlashPlan.output_read`, :meth:`FlashPlan.state_words`,
:meth:`FlashPlan.scores_tile_addr`).  :mod:`programs.flash.planner` builds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig

from .. import mutation_hooks
from ..common import Region
from ..footprint import Footprint
from ..hbm_tensors import HbmTensor, ceil_div

__all__ = ["GP_NEEDED", "FP_NEEDED", "TileStep", "Block", "AttentionShape", "FlashPlan"]


#: general-purpose and FP registers the emitters take
GP_NEEDED = 11
FP_NEEDED = 6


@dataclass(frozen=True)
class TileStep:
    """One kv tile of a block: tile ``t`` covers positions ``c0 .. c0+bc-1``.

    ``mask_n[r]`` (only when ``masked``) is the number of allowed leading columns of row ``r``:
    MASK row r = ``V_SHFT_V(NEG, mask_n[r])``."""

    t: int
    c0: int
    bc: int
    masked: bool
    mask_n: tuple[int, ...] = ()


@dataclass(frozen=True)
class Block:
    """One (batch b, kv group g, q tile i, head batch) pass; ``heads`` are global q-head indices."""

    b: int
    g: int
    i: int
    q0: int
    br: int
    heads: tuple[int, ...]
    tiles: tuple[TileStep, ...]


@dataclass(frozen=True)
class AttentionShape:
    """The attention problem as given (§3.2), which the validated problem and the plan both extend."""

    batch: int
    hq: int
    hkv: int
    d: int
    q_len: int
    kv_len: int
    causal: bool
    kv_layout: str

    def shape_fields(self) -> dict[str, Any]:
        """The shape as keyword arguments (to build a dataclass that extends it)."""
        return {f.name: getattr(self, f.name) for f in fields(AttentionShape)}


@dataclass(frozen=True)
class FlashPlan(AttentionShape):
    kernel: str  # "flash_attention" or "attention_scores"
    config: HardwareConfig = field(repr=False)
    # problem (and the shape's fields)
    kv_capacity: int
    kv_row_elems: int  # Wp
    path: str  # "batched" | "per_head" (resolved)
    decode: bool  # q_len == 1: decode forms (§3.8)
    ratio: int
    nc: int  # head-dim chunks
    nh: int  # heads per head batch
    qrows: int  # query rows per q tile (MLEN unless the FP state needs row groups)
    Tq: int
    Tk: int
    off: int  # kv_len - q_len
    R: int  # K/V row pitch in elements (bshd: Wp; sbhd: batch*Wp)
    # HBM
    q: HbmTensor | None
    k: HbmTensor | None
    v: HbmTensor | None
    eb_q: int
    eb_kv: int
    q_alloc_elems: int  # elements the Q tensor must allocate (slack included)
    kv_alloc_elems: int  # elements each of K and V must allocate
    # on-chip
    o_base: int  # element address of O (flash) / s_out (scores)
    rows_o_p: int
    o_blocks: int
    scratch_base: int
    rows: Mapping[str, int]  # scratch item -> first element address
    vram_regions: Mapping[str, Region]
    fp_state_base: int
    fp_state_size: int
    mram_tile0: int
    qk_slot: int
    neg_slot: int
    blocks: tuple[Block, ...]
    loops: bool = True  # False: blocks, kv tiles and heads unrolled (the reference form)
    #: which levels the emitter makes hardware loops, per set of active fault hooks: found by the dry run
    #: (trial emissions), reused when the program is emitted
    loop_decisions: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    dynamic_instructions: int = 0
    static_instructions: int = 0
    max_loop_iteration: int = 0
    gp_needed: int = GP_NEEDED
    fp_needed: int = FP_NEEDED
    #: split-KV (merge.py): kv tiles per chunk and states per accumulator (0: one chunk), accumulator levels
    chunk_tiles: int = 0
    merge_levels: int = 0

    # ---- derived numbers
    @property
    def M(self) -> int:
        return self.config.MLEN

    @property
    def V(self) -> int:
        return self.config.VLEN

    @property
    def batched(self) -> bool:
        return self.path == "batched"

    @property
    def fp_range(self) -> tuple[int, int]:
        return (self.fp_state_base, self.fp_state_size)

    @property
    def mram_tiles(self) -> tuple[int, int]:
        """(first tile, count): K chunks at ``mram_tile0 + c``, V chunks at ``mram_tile0 + nc + c``."""
        return (self.mram_tile0, 2 * self.nc if self.kernel == "flash_attention" else self.nc)

    @property
    def footprint(self) -> Footprint:
        """The full footprint (kernels.md §1.1): VRAM regions, FP SRAM range, MRAM tiles, HBM allocations."""
        return Footprint(
            vram_regions=dict(self.vram_regions),
            fp_range=self.fp_range if self.fp_state_size else None,
            mram_tiles=self.mram_tiles,
            hbm_slack=self.hbm_slack,
        )

    @property
    def hbm_slack(self) -> dict[str, int]:
        """Elements each input tensor must allocate (``alloc_elems``), slack included (§1.7, §3.4)."""
        return {"q": self.q_alloc_elems, "k": self.kv_alloc_elems, "v": self.kv_alloc_elems}

    @property
    def o_rows(self) -> int:
        return self.batch * self.q_len

    @property
    def o_cols(self) -> int:
        """Logical width of the CBM output: ``round_up(hq*d, V)``."""
        return self.o_blocks * self.V

    @property
    def lane_masked(self) -> bool:
        return self.d < self.V

    # ---- addresses (elements unless stated)
    def kv_base_b(self, b: int) -> int:
        if self.kv_layout == "bshd":
            return b * self.kv_capacity * self.kv_row_elems
        return b * self.kv_row_elems

    def kv_src(self, b: int, t: int, h: int, c: int) -> int:
        """§3.4: element offset of K/V tile t of batch b, kv head h, head-dim chunk c."""
        return self.kv_base_b(b) + t * self.M * self.R + h * self.d + c * self.M

    def kv_elem(self, b: int, s: int, h: int, k: int) -> int:
        """Element offset of (batch b, position s, kv head h, dim k) in the K/V cache."""
        if self.kv_layout == "bshd":
            return (b * self.kv_capacity + s) * self.kv_row_elems + h * self.d + k
        return (s * self.batch + b) * self.kv_row_elems + h * self.d + k

    def kv_cache_rows(self) -> int:
        """Rows of Wp elements the K/V tensor holds (alloc rounded up to whole rows)."""
        return ceil_div(self.kv_alloc_elems, self.kv_row_elems)

    def q_src(self, b: int, pos: int, h0: int, c: int) -> int:
        """Element offset of the Q row of token (b, pos), starting at head h0, chunk c."""
        return (b * self.q_len + pos) * self.hq * self.d + h0 * self.d + c * self.V

    def o_addr(self, h: int, row: int, c: int = 0) -> int:
        """VRAM element address of O row ``row`` (= b*q_len + s) for head h, chunk c (lane 0 of the row)."""
        return self.o_base + (((h * self.d) // self.V + c) * self.rows_o_p + row) * self.V

    def o_lane(self, h: int) -> int:
        return (h * self.d) % self.V

    def lane_mask_bits(self, h: int) -> int:
        H = self.config.HLEN
        lo = self.o_lane(h) // H
        hi = (self.o_lane(h) + self.d) // H - (1 if mutation_hooks.active("lane_mask_one_group_short") else 0)
        return sum(1 << k for k in range(lo, hi))

    def state_words(self, j: int, r: int) -> dict[str, int]:
        """FP SRAM words of head slot j, row r < qrows: m, m_res, l (§3.5 with ``qrows`` for M)."""
        F, Q = self.fp_state_base, self.qrows
        return {"m": F + 3 * Q * j + r, "m_res": F + 3 * Q * j + Q + r, "l": F + 3 * Q * j + 2 * Q + r}

    def scores_tile_addr(self, b: int, h: int, i: int, t: int) -> int:
        """attention_scores: element address of output tile (b, h, i, t) (M×M, row-major rows)."""
        M = self.M
        return self.o_base + (((b * self.hq + h) * self.Tq + i) * self.Tk + t) * M * M

    @property
    def last_block(self) -> Block:
        return self.blocks[-1]

    def expected_kv_prefetches(self) -> list[tuple[int, int, int, int]]:
        """Every H_PREFETCH_M in program order as (gp[rs1] byte offset, STRIDE, SCALE, areg) (§6.4)."""
        assert self.k is not None and self.v is not None
        out = []
        stride = self.R * self.eb_kv
        for blk in self.blocks:
            for ts in blk.tiles:
                for c in range(self.nc):
                    off = self.kv_src(blk.b, ts.t, blk.g, c) * self.eb_kv
                    out.append((off, stride, self.k.scale_offset, self.k.areg))
                    if self.kernel == "flash_attention":
                        out.append((off, stride, self.v.scale_offset, self.v.areg))
        return out

    def output_read(self) -> tuple[tuple[int, int, int, int], Callable[[np.ndarray], np.ndarray]]:
        """(base element, rows, cols, pitch) of the CBM output and a post function giving
        ``O[batch, q_len, hq, d]`` from the ``[batch*q_len, o_cols]`` matrix."""
        B_, S_, hq, d = self.batch, self.q_len, self.hq, self.d

        def post(x: np.ndarray) -> np.ndarray:
            return x[:, : hq * d].reshape(B_, S_, hq, d)

        return (self.o_base, self.o_rows, self.o_cols, self.rows_o_p), post

    def slot_state_base(self, s: int, j: int) -> int:
        """FP SRAM word of split-KV accumulator slot s (level s + 1), head slot j, row 0: m, then l at +qrows."""
        Q = self.qrows
        return self.fp_state_base + 3 * Q * self.nh + (s * self.nh + j) * 2 * Q

    def slot_o_addr(self, s: int, j: int, c: int) -> int:
        """VRAM element address of split-KV accumulator slot s, head slot j, head-dim chunk c, row 0 (the O
        rows hold the head at its lanes)."""
        return self.rows["merge"] + ((s * self.nh + j) * self.nc + c) * self.qrows * self.V

    def describe(self) -> str:
        rows = f" qrows={self.qrows}" if self.qrows != self.M else ""
        if self.merge_levels:
            rows += f" chunk_tiles={self.chunk_tiles} merge_levels={self.merge_levels}"
        return (
            f"batch={self.batch} hq={self.hq} hkv={self.hkv} d={self.d} q_len={self.q_len} "
            f"kv_len={self.kv_len} causal={int(self.causal)} layout={self.kv_layout} "
            f"Wp={self.kv_row_elems} S_cap={self.kv_capacity} path={self.path} nh={self.nh} nc={self.nc}" + rows
        )
