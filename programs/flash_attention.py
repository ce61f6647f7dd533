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
levels are hardware loops too where that pays (:mod:`programs.flash_loops`): runs of consecutive blocks
that differ in one of b, g, i, head batch (with the same rows, masks and heads; the number of fully
visible kv tiles may grow from block to block, e.g. causal q tiles), each run of equally masked kv tiles
of a block, and the heads of a tile; every address is an affine function of the loop counters.  The
dynamic instruction sequence is that of the fully unrolled kernel plus scalar counter arithmetic and loop
instructions.  A loop iteration must stay below MAX_LOOP_INSTRUCTIONS, so a block with more work than that
is emitted on its own (its kv tiles still one loop).

Paths (§3.3): *batched* (``M_BTMM``/``M_BTMV``, legal iff ``d == H``, ``ratio <= BA``, ``BA*H == M``; the
default whenever legal) and *per-head* (``M_TMM``/``M_TMV``).  Head-dim chunks (``d > M``, ``d % M == 0``)
are supported on the per-head path (:data:`SUPPORTS_HEAD_DIM_CHUNKS`).

The plan dry-runs the emitter into a counting sink, so it knows the exact dynamic instruction count
(:attr:`FlashPlan.dynamic_instructions`; the kernel has no data-dependent control flow) and the largest
hardware-loop iteration, which it checks against ``MAX_LOOP_INSTRUCTIONS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial, wraps
from typing import Any, Concatenate, NamedTuple, NoReturn, ParamSpec, TypeVar

import numpy as np

from plena_sim.config import HardwareConfig, MxType

from . import mutation_hooks
from .asm import LOOP_COUNT_MAX, Asm, add_imm, areg, fp, gp, load_imm, region
from .common import Footprint, Region, check_disjoint, check_fp_range, take_regs
from .flash_loops import IterRegs, Ix, Loops, NullSink, Tracker
from .hbm_tensors import HbmTensor, ceil_div, round_up, row_pad

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

#: §3.9 stretch goal: head dims d > MLEN (d % MLEN == 0) through head-dim chunks, per-head path only
SUPPORTS_HEAD_DIM_CHUNKS = True

GP_NEEDED = 11
FP_NEEDED = 6
_U32 = 1 << 32
_LOOP_COUNT_MAX = LOOP_COUNT_MAX  # the imm22 field (isa table)


def _fail(kernel: str, param: str, value: object, rule: str) -> NoReturn:
    raise ValueError(f"{kernel}: {param}={value} {rule}")


# =========================================================================== the plan


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
class FlashPlan:
    kernel: str  # "flash_attention" or "attention_scores"
    config: HardwareConfig = field(repr=False)
    # problem
    batch: int
    hq: int
    hkv: int
    d: int
    q_len: int
    kv_len: int
    causal: bool
    kv_layout: str
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

    def describe(self) -> str:
        rows = f" qrows={self.qrows}" if self.qrows != self.M else ""
        return (
            f"batch={self.batch} hq={self.hq} hkv={self.hkv} d={self.d} q_len={self.q_len} "
            f"kv_len={self.kv_len} causal={int(self.causal)} layout={self.kv_layout} "
            f"Wp={self.kv_row_elems} S_cap={self.kv_capacity} path={self.path} nh={self.nh} nc={self.nc}" + rows
        )


def _kv_type_info(cfg: HardwareConfig) -> tuple[int, int, bool]:
    t = cfg.hbm_type("HBM_M_KV_TYPE")
    eb = t.elem_bytes
    blk = t.block * eb if isinstance(t, MxType) else 1
    return eb, blk, isinstance(t, MxType)


def _act_type_info(cfg: HardwareConfig) -> tuple[int, int, bool]:
    t = cfg.hbm_type("HBM_V_ACT_TYPE")
    eb = t.elem_bytes
    blk = t.block * eb if isinstance(t, MxType) else 1
    return eb, blk, isinstance(t, MxType)


def _row_groups(room: int, nh: int, M: int, quantum: int) -> int:
    """The largest number of q rows (<= M, a multiple of ``quantum`` when one fits) whose online-softmax
    state of ``nh`` heads (3 words per row and head) fits ``room`` FP SRAM words; 0 if none does."""
    rows = min(M, room // (3 * nh))
    if rows >= quantum:
        return rows - rows % quantum
    return rows


def _choose_path(
    K: str, cfg: HardwareConfig, path: str, legal: bool, ratio: int, nc: int, room: int, q_len: int, F: int
) -> tuple[str, int, int]:
    """``(path, nh, qrows)``: the path (§3.3) and how the state is grouped so that it fits FP SRAM.

    Per-head path: head batches of ``nh = min(ratio, room // (3*M))`` heads (§3.5); when not even one
    head's M rows fit, one head and q tiles of ``qrows < M`` rows. Batched path: all ``ratio`` heads,
    q tiles of ``qrows`` rows. ``auto`` takes the batched path whenever it is legal and its state fits
    whole M-row tiles (§3.3); otherwise the path whose score stage needs fewer matrix MACs (the batched
    path recomputes all M rows of M_BTMM for every q-row group)."""
    M, B, Pv = cfg.MLEN, cfg.BLEN, cfg.P_V
    quantum = B if B <= M else Pv
    rows_needed = min(M, q_len)

    def per_head() -> tuple[int, int]:
        nh = min(ratio, room // (3 * M)) if room >= 3 * M else 0
        if nh >= 1:
            return nh, M
        return 1, _row_groups(room, 1, M, quantum)

    def batched() -> tuple[int, int]:
        if 3 * M * ratio <= room:
            return ratio, M
        return ratio, _row_groups(room, ratio, M, quantum)

    def macs(kind: str, nh: int, qrows: int) -> int:
        tiles = ceil_div(q_len, max(qrows, 1))
        if kind == "batched":  # one M_BTMM (BA*M*M*H = M^3 MACs) per q tile
            return tiles * M**3
        return ratio * tiles * ceil_div(min(qrows, q_len), B) * B * M * M * nc

    if path == "per_head" or (path == "auto" and not legal):
        choice = ("per_head",) + per_head()
    elif path == "batched":
        choice = ("batched",) + batched()
    else:
        b, ph = ("batched",) + batched(), ("per_head",) + per_head()
        if b[2] >= rows_needed or b[2] == M or ph[2] < 1 or (b[2] >= 1 and macs(*b) <= macs(*ph)):
            choice = b
        else:
            choice = ph
    the_path, nh, qrows = choice
    if qrows < 1:
        _fail(
            K,
            "fp_state_base",
            F,
            f"leaves {room} FP SRAM words: the online-softmax state needs 3 words per "
            f"q row and head (FP_SRAM_SIZE={cfg.FP_SRAM_SIZE}); the largest fp_state_base that fits is "
            f"{cfg.FP_SRAM_SIZE - 3}",
        )
    return the_path, nh, qrows


def _int(kernel: str, name: str, v: object, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(kernel, name, repr(v), "must be an integer")
    if v < lo:
        _fail(kernel, name, v, f"must be >= {lo}")
    return v


# --------------------------------------------------------------------------- planning steps
# ``_plan`` runs these in order; each raises on the first rule it finds broken, so the order of the steps
# (and of the checks inside them) fixes which error a bad parameter set reports.


@dataclass(frozen=True)
class _Problem:
    """A validated attention problem (§3.2): shapes, K/V cache geometry, and what follows from them."""

    kernel: str
    cfg: HardwareConfig
    batch: int
    hq: int
    hkv: int
    d: int
    q_len: int
    kv_len: int
    causal: bool
    kv_layout: str
    S_cap: int  # kv_capacity
    Wp: int  # kv_row_elems
    ratio: int  # hq // hkv
    nc: int  # head-dim chunks
    legal: bool  # the batched path is legal here (§3.3)

    @property
    def flash(self) -> bool:
        return self.kernel == "flash_attention"

    @property
    def decode(self) -> bool:
        return self.q_len == 1

    @property
    def R(self) -> int:
        """K/V row pitch in elements (bshd: Wp; sbhd: batch*Wp)."""
        return self.Wp if self.kv_layout == "bshd" else self.batch * self.Wp

    @property
    def off(self) -> int:
        return self.kv_len - self.q_len

    @property
    def Tk(self) -> int:
        return ceil_div(self.kv_len, self.cfg.MLEN)


class _FpState(NamedTuple):
    """The path (§3.3) and the online-softmax state layout in FP SRAM (§3.5)."""

    path: str  # "batched" | "per_head"
    nh: int  # heads per head batch
    qrows: int  # query rows per q tile
    base: int  # fp_state_base (0 for attention_scores)
    size: int  # words of state (0 for attention_scores)


class _Vram(NamedTuple):
    """The VRAM layout (§3.5): output pitch and blocks, scratch item addresses, declared regions."""

    rows_o_p: int
    o_blocks: int
    rows: dict[str, int]
    regions: dict[str, Region]


def _check_shapes(
    K: str, batch: int, hq: int, hkv: int, d: int, q_len: int, kv_len: int, causal: bool, kv_layout: str, path: str
) -> None:
    for name, val in (("batch", batch), ("hq", hq), ("hkv", hkv), ("d", d), ("q_len", q_len), ("kv_len", kv_len)):
        _int(K, name, val)
    if not isinstance(causal, bool):
        _fail(K, "causal", repr(causal), "must be a bool")
    if kv_layout not in ("bshd", "sbhd"):
        _fail(K, "kv_layout", repr(kv_layout), "must be 'bshd' or 'sbhd'")
    if path not in ("auto", "batched", "per_head"):
        _fail(K, "path", repr(path), "must be 'auto', 'batched' or 'per_head'")
    if hq % hkv:
        _fail(K, "hq", hq, f"must be a multiple of hkv={hkv}")


def _check_machine(K: str, cfg: HardwareConfig) -> None:
    """The machine shape flash attention needs (§3.10)."""
    M, V, Pv, Pm = cfg.MLEN, cfg.VLEN, cfg.P_V, cfg.P_M
    if V != M:
        _fail(K, "VLEN", V, f"must equal MLEN={M}")
    if Pm != M:
        _fail(K, "HBM_M_Prefetch_Amount", Pm, f"(effective P_M) must equal MLEN={M}")
    if M % Pv:
        _fail(K, "HBM_V_Prefetch_Amount", Pv, f"must divide MLEN={M}")


def _head_dim_chunks(K: str, cfg: HardwareConfig, d: int) -> int:
    """The number of head-dim chunks ``nc`` (§3.9): 1 for ``d <= M``, else ``d // M``."""
    M, V, H = cfg.MLEN, cfg.VLEN, cfg.HLEN
    if d % H:
        _fail(K, "head_dim", d, f"must be a multiple of HLEN={H}")
    if d <= M:
        if V % d:
            _fail(K, "head_dim", d, f"must divide VLEN={V} or be a multiple of it")
        return 1
    if d % M:
        _fail(K, "head_dim", d, f"must divide VLEN={V} or be a multiple of it")
    if not SUPPORTS_HEAD_DIM_CHUNKS:
        raise ValueError(f"head_dim={d} > MLEN={M} requires head-dim chunking (not implemented)")
    return d // M


def _batched_legal(K: str, cfg: HardwareConfig, d: int, ratio: int, path: str) -> bool:
    """Whether the batched path is legal (§3.3); asking for it where it is not is an error."""
    M, H, BA = cfg.MLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
    legal = d == H and ratio <= BA and BA * H == M
    if path == "batched" and not legal:
        why = []
        if d != H:
            why.append(f"head_dim={d} != HLEN={H}")
        if ratio > BA:
            why.append(f"ratio=hq/hkv={ratio} > BROADCAST_AMOUNT={BA}")
        if BA * H != M:
            why.append(f"BROADCAST_AMOUNT*HLEN={BA * H} != MLEN={M}")
        _fail(K, "path", "'batched'", "is illegal here: " + ", ".join(why))
    return legal


def _kv_cache_shape(
    K: str, q_len: int, kv_len: int, causal: bool, hkv: int, d: int, kv_capacity: int | None, kv_row_elems: int | None
) -> tuple[int, int]:
    """``(S_cap, Wp)``: positions per batch and elements per row of the K/V cache (defaults: kv_len, hkv*d)."""
    if causal and q_len > kv_len:
        _fail(K, "q_len", q_len, f"must be <= kv_len={kv_len} when causal")
    S_cap = kv_len if kv_capacity is None else kv_capacity
    _int(K, "kv_capacity", S_cap)
    if S_cap < kv_len:
        _fail(K, "kv_capacity", S_cap, f"must be >= kv_len={kv_len}")
    Wp = hkv * d if kv_row_elems is None else kv_row_elems
    _int(K, "kv_row_elems", Wp)
    if Wp < hkv * d:
        _fail(K, "kv_row_elems", Wp, f"(Wp) must be >= hkv*d={hkv * d}")
    return S_cap, Wp


def _problem(
    kernel: str,
    cfg: HardwareConfig,
    *,
    batch: int,
    hq: int,
    hkv: int,
    d: int,
    q_len: int,
    kv_len: int,
    causal: bool,
    kv_layout: str,
    kv_capacity: int | None,
    kv_row_elems: int | None,
    path: str,
) -> _Problem:
    """Validate the shapes against the rules of §3.2, §3.3, §3.9 and §3.10 that need no tensor or layout."""
    _check_shapes(kernel, batch, hq, hkv, d, q_len, kv_len, causal, kv_layout, path)
    ratio = hq // hkv
    _check_machine(kernel, cfg)
    nc = _head_dim_chunks(kernel, cfg, d)
    legal = _batched_legal(kernel, cfg, d, ratio, path)
    S_cap, Wp = _kv_cache_shape(kernel, q_len, kv_len, causal, hkv, d, kv_capacity, kv_row_elems)
    return _Problem(kernel, cfg, batch, hq, hkv, d, q_len, kv_len, causal, kv_layout, S_cap, Wp, ratio, nc, legal)


def _check_mx_alignment(pb: _Problem, eb_q: int, blk_q: int, mx_q: bool, eb_kv: int, blk_kv: int, mx_kv: bool) -> None:
    """MX-typed rows and heads must start on whole MX blocks (§3.4)."""
    K, d, Wp = pb.kernel, pb.d, pb.Wp
    if mx_kv:
        if (Wp * eb_kv) % blk_kv:
            _fail(K, "kv_row_elems", Wp, f"(Wp*eb_kv={Wp * eb_kv}) must be a multiple of the MX block bytes {blk_kv}")
        if (d * eb_kv) % blk_kv:
            _fail(K, "head_dim", d, f"(d*eb_kv={d * eb_kv}) must be a multiple of the MX block bytes {blk_kv}")
    if mx_q:
        if (d * eb_q) % blk_q:
            _fail(K, "head_dim", d, f"(d*eb_act={d * eb_q}) must be a multiple of the MX block bytes {blk_q}")
        if (pb.hq * d * eb_q) % blk_q:
            _fail(K, "hq", pb.hq, f"(hq*d*eb_act={pb.hq * d * eb_q}) must be a multiple of the MX block bytes {blk_q}")


def _elem_bytes(pb: _Problem, q: HbmTensor | None, k: HbmTensor | None, v: HbmTensor | None) -> tuple[int, int]:
    """``(eb_q, eb_kv)``: bytes per element of Q and of K/V -- the tensors' own when given, else those of the
    config's HBM types -- once the MX alignment rules hold."""
    eb_kv, blk_kv, mx_kv = _kv_type_info(pb.cfg)
    eb_q, blk_q, mx_q = _act_type_info(pb.cfg)
    for t_, name in ((q, "q"), (k, "k"), (v, "v")):
        if t_ is not None and not isinstance(t_, HbmTensor):
            _fail(pb.kernel, name, repr(t_), "must be an HbmTensor")
    if q is not None:
        eb_q, blk_q = q.eb, q.blk
        mx_q = q.block > 0
    if k is not None:
        eb_kv, blk_kv = k.eb, k.blk
        mx_kv = k.block > 0
    _check_mx_alignment(pb, eb_q, blk_q, mx_q, eb_kv, blk_kv, mx_kv)
    return eb_q, eb_kv


def _check_tensors(pb: _Problem, q: HbmTensor | None, k: HbmTensor | None, v: HbmTensor | None) -> None:
    """K and V come together with one layout and one SCALE; the row pitches are Wp (K/V) and hq*d (Q)."""
    K, Wp = pb.kernel, pb.Wp
    if k is not None or v is not None:
        if k is None or v is None:
            _fail(K, "v" if v is None else "k", None, "k and v must be given together")
        if k.scale_offset != v.scale_offset:
            _fail(K, "v.scale_offset", v.scale_offset, f"must equal k.scale_offset={k.scale_offset} (shared SCALE)")
        k_layout = (k.eb, k.prec, k.row_pitch_elems, k.alloc_elems, k.block)
        v_layout = (v.eb, v.prec, v.row_pitch_elems, v.alloc_elems, v.block)
        if k_layout != v_layout:
            _fail(K, "v", v, f"must have the same layout as k={k}")
        if k.row_pitch_elems != Wp:
            _fail(K, "k.row_pitch_elems", k.row_pitch_elems, f"must equal kv_row_elems (Wp)={Wp}")
    if q is not None and q.row_pitch_elems != pb.hq * pb.d:
        _fail(K, "q.row_pitch_elems", q.row_pitch_elems, f"must equal hq*d={pb.hq * pb.d}")


def _check_slots(K: str, qk_slot: int, neg_slot: int) -> None:
    for name, slot in (("qk_slot", qk_slot), ("neg_slot", neg_slot)):
        _int(K, name, slot, 0)
        if slot >= 16:
            _fail(K, name, slot, "must be a constant slot < 16")


def _fp_state(
    pb: _Problem, path: str, fp_state_base: int, fp_reserved: Mapping[str, tuple[int, int]] | None
) -> _FpState:
    """The path and FP state (§3.5, §3.3). attention_scores keeps no state: all ``ratio`` heads, M-row tiles."""
    K, cfg = pb.kernel, pb.cfg
    if not pb.flash:
        the_path = "batched" if (path == "batched" or (path == "auto" and pb.legal)) else "per_head"
        return _FpState(the_path, pb.ratio, cfg.MLEN, 0, 0)
    F = fp_state_base
    _int(K, "fp_state_base", F, 0)
    if mutation_hooks.active("fp_state_overlap"):
        F = 3  # mutation: state over the constants, no range check
    elif F < 16:
        _fail(K, "fp_state_base", F, "must be >= 16 (slots 0-15 are constants)")
    room = cfg.FP_SRAM_SIZE - F
    the_path, nh, qrows = _choose_path(K, cfg, path, pb.legal, pb.ratio, pb.nc, room, pb.q_len, F)
    fp_size = 3 * qrows * nh
    if not mutation_hooks.active("fp_state_overlap"):
        check_fp_range(K, F, fp_size, cfg, dict(fp_reserved or {}))
    return _FpState(the_path, nh, qrows, F, fp_size)


def _check_mram(pb: _Problem, mram_tile0: int) -> None:
    """K chunks (and V chunks for flash attention) from ``mram_tile0`` must fit MRAM."""
    _int(pb.kernel, "mram_tile0", mram_tile0, 0)
    n_tiles = 2 * pb.nc if pb.flash else pb.nc
    if mram_tile0 + n_tiles > pb.cfg.mram_tiles:
        _fail(pb.kernel, "mram_tile0", mram_tile0, f"+ {n_tiles} tiles exceeds the {pb.cfg.mram_tiles} MRAM tiles")


def _check_vram_bases(pb: _Problem, o_base: int, scratch_base: int) -> None:
    K, V = pb.kernel, pb.cfg.VLEN
    _int(K, "o_base", o_base, 0)
    _int(K, "scratch_base", scratch_base, 0)
    if o_base % V:
        _fail(K, "o_base" if pb.flash else "s_out", o_base, f"must be a multiple of VLEN={V}")
    if scratch_base % V:
        _fail(K, "scratch_base", scratch_base, f"must be a multiple of VLEN={V}")


def _output_rows(pb: _Problem, o_rows_p: int | None, Tq: int) -> tuple[int, int, int]:
    """``(rows_o_p, o_blocks, o_rows)``: O is CBM with ``o_blocks`` column blocks of ``rows_o_p`` rows;
    attention_scores writes ``batch*hq*Tq*Tk`` M×M tiles (no pitch, no blocks)."""
    cfg = pb.cfg
    if not pb.flash:
        return 0, 0, pb.batch * pb.hq * Tq * pb.Tk * cfg.MLEN
    RP = row_pad(cfg)
    rows_o_p = round_up(pb.batch * pb.q_len, RP) if o_rows_p is None else o_rows_p
    _int(pb.kernel, "o_rows_p", rows_o_p)
    if rows_o_p < pb.batch * pb.q_len or rows_o_p % RP:
        _fail(pb.kernel, "o_rows_p", rows_o_p, f"must be >= batch*q_len={pb.batch * pb.q_len} and a multiple of {RP}")
    o_blocks = ceil_div(pb.hq * pb.d, cfg.VLEN)
    return rows_o_p, o_blocks, o_blocks * rows_o_p


def _scratch_items(pb: _Problem, st: _FpState) -> list[tuple[str, int]]:
    """Rows of each scratch item, in layout order (§3.5): NEG, KEEP, MASK, the Q slots, S, PV."""
    M, V, BA = pb.cfg.MLEN, pb.cfg.VLEN, pb.cfg.BROADCAST_AMOUNT
    batched = st.path == "batched"
    return [
        ("neg", 1 if pb.flash else 0),
        ("keep", 1 if (st.path == "per_head" and pb.d < V) else 0),
        ("mask", M if pb.flash else 0),
        ("q", M if batched else st.nh * pb.nc * M),
        ("s", (BA if pb.decode else BA * M) if batched else M),
        ("pv", pb.nc * M if pb.flash else 0),
    ]


def _check_vram_fit(
    pb: _Problem,
    o_base: int,
    o_rows: int,
    scratch_base: int,
    scratch_end: int,
    rows_addr: Mapping[str, int],
    regions: Mapping[str, Region],
) -> None:
    """Output and scratch inside VRAM, pairwise disjoint, every address below 2^32."""
    K, V, size = pb.kernel, pb.cfg.VLEN, pb.cfg.VECTOR_SRAM_SIZE
    if scratch_end > size:
        _fail(K, "scratch_base", scratch_base, f"scratch rows end at {scratch_end} > VECTOR_SRAM_SIZE={size}")
    if o_base // V + o_rows > size:
        _fail(K, "o_base", o_base, f"output rows end at {o_base // V + o_rows} > VECTOR_SRAM_SIZE")
    try:
        check_disjoint(K, regions)
    except ValueError as exc:
        _fail(K, "scratch_base", scratch_base, f"(with o_base={o_base}): {str(exc).split(': ', 1)[1]}")
    for name, a in rows_addr.items():
        if a >= _U32:
            _fail(K, "scratch_base", scratch_base, f"scratch item {name} at element {a} is not < 2^32")
    if o_base + o_rows * V >= _U32:
        _fail(K, "o_base", o_base, "output region must lie below element 2^32")


def _vram_layout(pb: _Problem, st: _FpState, o_base: int, o_rows_p: int | None, scratch_base: int, Tq: int) -> _Vram:
    """The output region at ``o_base`` and the scratch items packed from ``scratch_base`` (§3.5)."""
    V = pb.cfg.VLEN
    _check_vram_bases(pb, o_base, scratch_base)
    rows_o_p, o_blocks, o_rows = _output_rows(pb, o_rows_p, Tq)
    rows_addr: dict[str, int] = {}
    regions: dict[str, Region] = {}
    regions["o" if pb.flash else "s_out"] = (o_base // V, o_rows, "output")
    r = scratch_base // V
    for name, n in _scratch_items(pb, st):
        rows_addr[name] = r * V
        if n:
            regions[name] = (r, n, "scratch")
        r += n
    _check_vram_fit(pb, o_base, o_rows, scratch_base, r, rows_addr, regions)
    return _Vram(rows_o_p, o_blocks, rows_addr, regions)


def _past_causal_edge(c0: int, q0: int, br: int, off: int) -> bool:
    """Whether kv tile ``c0..`` and every later one are fully masked for q rows ``q0 .. q0+br-1``."""
    if mutation_hooks.active("causal_break_early"):
        return c0 >= q0 + off
    return c0 > q0 + br - 1 + off


def _flash_tile(t: int, c0: int, bc: int, M: int, q0: int, br: int, off: int, causal: bool) -> TileStep:
    """Kv tile ``t`` of flash attention with its additive mask rows: the tail (``bc < M``) and the causal
    edge allow ``mask_n[r]`` leading columns of row r."""
    bcm = M if mutation_hooks.active("tail_mask_missing") else bc
    masked = bcm < M or (causal and q0 + off - c0 + 1 < M)
    ns: tuple[int, ...] = ()
    if masked:
        if causal:
            extra = 2 if mutation_hooks.active("causal_mask_plus_one") else 1  # one future key allowed per row
            ns = tuple(max(0, min(q0 + rr + off - c0 + extra, bcm)) for rr in range(br))
            if mutation_hooks.active("causal_mask_rows_shared"):
                ns = ns[:1] * br  # every row gets row 0's mask
        else:
            ns = (bcm,) * br
        ns = _sensitivity_mutation(ns, M)
    return TileStep(t, c0, bc, masked, ns)


def _sensitivity_mutation(ns: tuple[int, ...], M: int) -> tuple[int, ...]:
    """The mask row counts under a sensitivity hook (mutation_hooks.SENS_HOOKS), else ``ns`` itself."""
    if mutation_hooks.active("sens_key_added"):
        return tuple(min(n + 1, M) for n in ns)
    if mutation_hooks.active("sens_key_dropped"):
        return tuple(max(n - 1, 0) for n in ns)
    if mutation_hooks.active("sens_mask_lane"):
        return (ns[0] - 1 if ns[0] >= 2 else ns[0] + 1,) + ns[1:]
    return ns


def _block_tiles(pb: _Problem, q0: int, br: int) -> tuple[TileStep, ...]:
    """The kv tiles a block of q rows ``q0 .. q0+br-1`` visits, increasing, fully masked tiles cut off."""
    M = pb.cfg.MLEN
    causal = pb.causal and not mutation_hooks.active("causal_ignored")
    off = 0 if mutation_hooks.active("causal_offset_zero") else pb.off
    n_tiles = pb.kv_len // M if mutation_hooks.active("tail_tile_dropped") else pb.Tk
    tiles = []
    for t in range(n_tiles):
        c0 = t * M
        bc = min(M, pb.kv_len - c0)
        if not pb.flash:
            tiles.append(TileStep(t, c0, bc, False, ()))
            continue
        if causal and _past_causal_edge(c0, q0, br, off):
            break
        tiles.append(_flash_tile(t, c0, bc, M, q0, br, off, causal))
    return tuple(tiles)


def _schedule(pb: _Problem, st: _FpState, Tq: int) -> tuple[Block, ...]:
    """Every block in loop order (§3.6): batch b, kv group g, q tile i, head batch of ``nh`` heads."""
    blocks: list[Block] = []
    for b in range(pb.batch):
        for g in range(pb.hkv):
            for i in range(Tq):
                q0 = i * st.qrows
                br = min(st.qrows, pb.q_len - q0)
                q0m = 0 if mutation_hooks.active("q_tile_index_ignored") else q0
                heads_all = [g * pb.ratio + j for j in range(pb.ratio)]
                for s in range(0, pb.ratio, st.nh):
                    blocks.append(Block(b, g, i, q0, br, tuple(heads_all[s : s + st.nh]), _block_tiles(pb, q0m, br)))
    return tuple(blocks)


def _kv_alloc(pb: _Problem) -> int:
    """Elements K and V must each allocate: the cache, or up to the last element any tile prefetch may
    read (§1.7, §3.4), in whole rows of Wp."""
    M, R, Wp = pb.cfg.MLEN, pb.R, pb.Wp
    base_last = (pb.batch - 1) * pb.S_cap * Wp if pb.kv_layout == "bshd" else (pb.batch - 1) * Wp
    kv_last = base_last + (pb.Tk - 1) * M * R + (pb.hkv - 1) * pb.d + (pb.nc - 1) * M + (M - 1) * R + M - 1
    kv_alloc = max(kv_last + 1, pb.batch * pb.S_cap * Wp)
    return round_up(kv_alloc, Wp)


def _q_alloc(pb: _Problem, path: str, blocks: Sequence[Block]) -> int:
    """Elements Q must allocate: its rows, or up to the last element of the last staging prefetch
    (Pv rows, V wide), in whole rows of hq*d."""
    V, Pv = pb.cfg.VLEN, pb.cfg.P_V
    q_last = 0
    q_pitch = pb.hq * pb.d
    for blk in blocks:
        h0s = [blk.heads[0]] if path == "batched" else list(blk.heads)
        for h0 in h0s:
            for c in range(pb.nc):
                npf = ceil_div(blk.br, Pv)
                o = (blk.b * pb.q_len + blk.q0 + (npf - 1) * Pv) * q_pitch + h0 * pb.d + c * V
                q_last = max(q_last, o + (Pv - 1) * q_pitch + V - 1)
    return round_up(max(q_last + 1, pb.batch * pb.q_len * q_pitch), q_pitch)


def _check_hbm(
    pb: _Problem, q: HbmTensor | None, k: HbmTensor | None, eb_q: int, eb_kv: int, q_alloc: int, kv_alloc: int
) -> None:
    """32-bit byte offsets, and tensors that allocate at least what the plan reads."""
    K = pb.kernel
    if kv_alloc * eb_kv >= _U32:
        _fail(K, "kv_len", pb.kv_len, f"K/V byte offsets reach {kv_alloc * eb_kv} >= 2^32")
    if q_alloc * eb_q >= _U32:
        _fail(K, "q_len", pb.q_len, f"Q byte offsets reach {q_alloc * eb_q} >= 2^32")
    if q is not None and q.alloc_elems < q_alloc:
        _fail(
            K,
            "q.alloc_elems",
            q.alloc_elems,
            f"must be >= {q_alloc} (rows, plus the slack of the last Pv-row, V-wide prefetch)",
        )
    if k is not None and k.alloc_elems < kv_alloc:
        _fail(
            K, "k.alloc_elems", k.alloc_elems, f"must be >= {kv_alloc} (cache plus the slack of the last tile prefetch)"
        )


def _dry_run(plan: FlashPlan) -> None:
    """Emit ``plan`` into a counting sink: its exact dynamic and static instruction counts and largest
    hardware-loop iteration (checked against MAX_LOOP_INSTRUCTIONS) are stored on the plan."""
    tr = Tracker(NullSink(), plan.config.MAX_LOOP_INSTRUCTIONS, plan.kernel)
    _emit(tr, plan, list(range(1, GP_NEEDED + 1)), list(range(1, FP_NEEDED + 1)))
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
) -> FlashPlan:
    pb = _problem(
        kernel,
        config,
        batch=batch,
        hq=hq,
        hkv=hkv,
        d=d,
        q_len=q_len,
        kv_len=kv_len,
        causal=causal,
        kv_layout=kv_layout,
        kv_capacity=kv_capacity,
        kv_row_elems=kv_row_elems,
        path=path,
    )
    eb_q, eb_kv = _elem_bytes(pb, q, k, v)
    _check_tensors(pb, q, k, v)
    _check_slots(kernel, qk_slot, neg_slot)
    st = _fp_state(pb, path, fp_state_base, fp_reserved)
    Tq = ceil_div(q_len, st.qrows)
    _check_mram(pb, mram_tile0)
    vram = _vram_layout(pb, st, o_base, o_rows_p, scratch_base, Tq)
    blocks = _schedule(pb, st, Tq)
    kv_alloc = _kv_alloc(pb)
    q_alloc = _q_alloc(pb, st.path, blocks)
    _check_hbm(pb, q, k, eb_q, eb_kv, q_alloc, kv_alloc)
    plan = FlashPlan(
        kernel=kernel,
        config=config,
        batch=batch,
        hq=hq,
        hkv=hkv,
        d=d,
        q_len=q_len,
        kv_len=kv_len,
        causal=causal,
        kv_layout=kv_layout,
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
    return _plan(kernel, config, dry_run=False, **p).hbm_slack


def scratch_rows(config: HardwareConfig, **params: Any) -> int:
    """VRAM rows the scratch items take from ``scratch_base`` (without building the tensors or dry-running)."""
    p = dict(params)
    for name in ("q", "k", "v"):
        p.pop(name, None)
    if "head_dim" in p:
        p["d"] = p.pop("head_dim")
    plan = _plan("flash_attention", config, dry_run=False, **p)
    r0 = plan.scratch_base // plan.V
    ends = [a + n for name, (a, n, role) in plan.vram_regions.items() if role == "scratch"]
    return max(ends, default=r0) - r0


# =========================================================================== emission machinery


def _emit(tr: Tracker, plan: FlashPlan, gpr: Sequence[int], fpr: Sequence[int]) -> None:
    if plan.kernel == "flash_attention":
        _FlashEmitter(tr, plan, gpr, fpr).run()
    else:
        _ScoresEmitter(tr, plan, gpr, fpr).run()


def _dummy_tensors(plan: FlashPlan) -> tuple[HbmTensor, HbmTensor, HbmTensor]:
    eb_kv, blk_kv, _ = _kv_type_info(plan.config)
    eb_q, blk_q, _ = _act_type_info(plan.config)
    q = plan.q or HbmTensor(0, plan.q_alloc_elems * eb_q, eb_q, 0, plan.hq * plan.d, plan.q_alloc_elems)
    k = plan.k or HbmTensor(1, plan.kv_alloc_elems * eb_kv, eb_kv, 1, plan.kv_row_elems, plan.kv_alloc_elems)
    v = plan.v or HbmTensor(2, plan.kv_alloc_elems * eb_kv, eb_kv, 1, plan.kv_row_elems, plan.kv_alloc_elems)
    return q, k, v


def _tile_runs(tiles: Sequence[TileStep]) -> list[list[TileStep]]:
    """Consecutive kv tiles with the same mask (the fully visible ones: none), one hardware loop each."""
    runs: list[list[TileStep]] = []
    for ts in tiles:
        if runs and (ts.masked, ts.mask_n) == (runs[-1][0].masked, runs[-1][0].mask_n):
            runs[-1].append(ts)
        else:
            runs.append([ts])
    return runs


def _mask_runs(ns: Sequence[int]) -> list[tuple[int, int, int]]:
    """The MASK row counts ``ns`` as runs ``(first n, step >= 0, rows)`` of arithmetic progressions."""
    runs = []
    r = 0
    while r < len(ns):
        step = ns[r + 1] - ns[r] if r + 1 < len(ns) else 0
        k = r + 1
        if step >= 0:
            while k < len(ns) and ns[k] - ns[k - 1] == step:
                k += 1
        runs.append((ns[r], max(step, 0) if k > r + 1 else 0, k - r))
        r = k
    return runs


def _coords(blk: Block) -> tuple[int, int, int, int]:
    """A block's schedule coordinates (b, g, i, first head)."""
    return (blk.b, blk.g, blk.i, blk.heads[0])


_E = TypeVar("_E", bound="_Base")
_P = ParamSpec("_P")


def _phase(name: str) -> Callable[[Callable[Concatenate[_E, _P], None]], Callable[Concatenate[_E, _P], None]]:
    """Method decorator: every instruction the method emits lies in the region ``name`` (nested in the regions
    open at the call: e.g. ``flash/kv_tile/softmax``); the markers are comments, the words stay the same."""

    def wrap(method: Callable[Concatenate[_E, _P], None]) -> Callable[Concatenate[_E, _P], None]:
        @wraps(method)
        def phased(self: _E, *args: _P.args, **kw: _P.kwargs) -> None:
            with region(self.a, name):
                method(self, *args, **kw)

        return phased

    return wrap


class _Base:
    """Shared pieces of flash attention and attention_scores: Q staging, K/V addressing, scores.

    The code is emitted as nested levels (:class:`~programs.flash_loops.Loops`): consecutive blocks
    ``"q"``, the kv tiles of a run of equally masked tiles ``"t"``, the heads ``"h"``; every number that
    depends on them is a function of the index assignment ``ix`` (``self.blk(ix)``, ``self.tile(ix)``,
    ``self.head(ix)``).  Registers: ``t0 t1`` scratch (t1 also the count of a variable loop), ``l1`` the
    row-loop counter, ``p1 p2 p3`` pointers, ``p4`` the spare of large steps and of the counter
    arithmetic, ``cQ cT cH`` the block / kv-tile / head loop counters, ``mk`` a heads loop's lane mask."""

    def __init__(self, tr: Tracker, plan: FlashPlan, gpr: Sequence[int], fpr: Sequence[int]):
        self.a = tr
        self.p = plan
        cfg = plan.config
        self.M, self.V, self.B, self.H, self.BA = cfg.MLEN, cfg.VLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
        self.Pv = cfg.P_V
        regs = list(gpr)[:GP_NEEDED]
        (self.t0, self.t1, self.l1, self.cQ, self.p1, self.p2, self.p3, self.p4) = regs[:8]
        (self.cT, self.cH, self.mk) = regs[8:]
        (self.f_neg, self.f_qk, self.f_old, self.f_m, self.f_t, self.f_l) = list(fpr)[:FP_NEEDED]
        memo = plan.loop_decisions.setdefault(mutation_hooks.enabled(), {})
        self.L = Loops(tr, IterRegs(tmp=self.p4, t0=self.t0, mask=self.mk, vcount=self.t1), plan.loops, memo)
        self.q, self.k, self.v = _dummy_tensors(plan)
        self._runs: dict[int, list[list[TileStep]]] = {}

    # ---- small helpers
    def li(self, r: int, value: int) -> None:
        load_imm(self.a, r, value)

    def addi(self, dst: int, src: int, value: int) -> None:
        """``dst = src + value``: one S_ADDI_INT, or through the spare register when value >= 2^18
        (pointer steps of B*V, B*M, M*M at large MLEN)."""
        add_imm(self.a, dst, src, value, self.p4)

    def load(self, dst: int, fn: Callable[[Ix], int]) -> None:
        """``gp[dst] = fn(ix)`` in every iteration of the open levels."""
        self.L.load(dst, fn)

    def blk(self, ix: Ix) -> Block:
        return self.L.get("q", ix)

    def tile(self, ix: Ix) -> TileStep:
        return self.L.get("t", ix)

    def head(self, ix: Ix) -> tuple[int, int]:
        """(head slot j, q head h)."""
        return self.L.get("h", ix)

    def tile_runs(self, blk: Block) -> list[list[TileStep]]:
        if id(blk) not in self._runs:
            self._runs[id(blk)] = _tile_runs(blk.tiles)
        return self._runs[id(blk)]

    def heads_of(self, ix: Ix) -> list[tuple[int, int]]:
        return list(enumerate(self.blk(ix).heads))

    def run_of(self, ix: Ix, r: int) -> list[TileStep]:
        """The r-th run of equally masked kv tiles of the block."""
        return self.tile_runs(self.blk(ix))[r]

    def slot_of(self, ix: Ix, c: int = 0) -> int:
        """The Q slot of the head, chunk c."""
        return self.qslot(self.head(ix)[0], c)

    def s_of(self, ix: Ix) -> int:
        """The head's score rows."""
        return self.s_row(self.head(ix)[0])

    def kv_of(self, ix: Ix, c: int) -> int:
        """The K/V HBM byte offset of the kv tile, chunk c."""
        return self.kv_offset(self.blk(ix), self.tile(ix).t, c)

    def ktile(self, c: int) -> int:
        return (self.p.mram_tile0 + c) * self.M * self.M

    def vtile(self, c: int) -> int:
        return (self.p.mram_tile0 + self.p.nc + c) * self.M * self.M

    def set_scale_stride(self, scale: int | None, stride: int | None) -> None:
        if scale is not None:
            self.li(self.t0, scale)
            self.a.C_SET_SCALE_REG(gp(self.t0))
        if stride is not None:
            self.li(self.t0, stride)
            self.a.C_SET_STRIDE_REG(gp(self.t0))

    def qslot(self, j: int, c: int) -> int:
        """VRAM element address of the Q slot of head slot j, chunk c."""
        M, V = self.M, self.V
        if self.p.batched:
            return self.p.rows["q"]
        return self.p.rows["q"] + (j * self.p.nc + c) * M * V

    # ---- the blocks
    def _shape(self, blk: Block) -> tuple[Any, ...]:
        """What two blocks of one block loop must share: rows, heads, off-grid heads, the kv tile runs
        (masks and lengths; the length of a leading run of fully visible tiles may differ)."""
        runs = self.tile_runs(blk)
        sig = tuple(
            (r[0].masked, r[0].mask_n, None if k == 0 and not r[0].masked else len(r)) for k, r in enumerate(runs)
        )
        off_grid = tuple(self.p.o_lane(h) % self.B != 0 for h in blk.heads)
        return (blk.br, len(blk.heads), sig, off_grid)

    def _lead(self, blk: Block) -> int:
        runs = self.tile_runs(blk)
        return 0 if runs[0][0].masked else len(runs[0])

    def _joins(self, run: Sequence[Block], blk: Block) -> bool:
        """Whether ``blk`` continues the block run ``run``: same shape, one schedule coordinate moving
        (the same one as in the run so far), and the leading visible tiles growing steadily."""
        last = run[-1]
        if self._shape(blk) != self._shape(last):
            return False
        moved = [k for k, (x, y) in enumerate(zip(_coords(last), _coords(blk), strict=True)) if x != y]
        if len(moved) != 1:
            return False
        if len(run) == 1:
            return True
        first_moved = [k for k, (x, y) in enumerate(zip(_coords(run[0]), _coords(run[1]), strict=True)) if x != y]
        return moved == first_moved and self._lead(blk) - self._lead(last) == self._lead(run[1]) - self._lead(run[0])

    def block_runs(self) -> list[list[Block]]:
        runs: list[list[Block]] = []
        for blk in self.p.blocks:
            if runs and self._joins(runs[-1], blk):
                runs[-1].append(blk)
            else:
                runs.append([blk])
        return runs

    def block_comment(self, what: str) -> None:
        blk = self.L.first("q")
        self.a.comment(
            f"{what} b={blk.b} g={blk.g} i={blk.i} heads={','.join(map(str, blk.heads))} "
            f"q0={blk.q0} br={blk.br} tiles={len(blk.tiles)}" + (" (first of a hw loop)" if self.L.looped("q") else "")
        )

    def heads_loopable(self) -> bool:
        """A heads loop needs every head of the block on the same side of the B grid (``shift``)."""
        flags = {self.p.o_lane(h) % self.B != 0 for h in self.L.first("q").heads}
        return len(flags) == 1

    # ---- Q staging (§3.4): SCALE/STRIDE <- Q, Pv-row prefetches, KEEP lane zeroing
    def staged_heads(self, ix: Ix) -> list[tuple[int, int]]:
        """The heads whose Q rows are staged (the group's first on the batched path)."""
        blk = self.blk(ix)
        return [(0, blk.heads[0])] if self.p.batched else list(enumerate(blk.heads))

    def q_src(self, ix: Ix, c: int) -> int:
        p, blk = self.p, self.blk(ix)
        _j, h = self.head(ix)
        q0 = 0 if mutation_hooks.active("q_tile_index_ignored") else blk.q0
        g_off = blk.g * p.ratio if mutation_hooks.active("q_group_offset_doubled") else 0  # column 2*g*ratio*d
        b = 0 if mutation_hooks.active("q_batch_offset_missing") else blk.b
        return p.q_src(b, q0, h + g_off, c) * p.eb_q

    @_phase("stage_q")
    def stage_q(self) -> None:
        p, a, L = self.p, self.a, self.L
        V, Pv = self.V, self.Pv
        q_heads = p.hkv if mutation_hooks.active("q_stride_kv_row") else p.hq  # Q pitch taken from the K/V row
        self.set_scale_stride(self.q.scale_offset, q_heads * p.d * p.eb_q)
        br = L.first("q").br
        npf = ceil_div(br, Pv)

        def prefetch() -> None:
            for c in range(p.nc):
                self.load(self.t0, partial(self.slot_of, c=c))
                self.load(self.t1, partial(self.q_src, c=c))
                with a.loop(self.l1, npf, "q prefetch"):
                    a.H_PREFETCH_V(gp(self.t0), gp(self.t1), areg(self.q.areg), 1, self.q.prec)
                    if npf > 1:
                        self.addi(self.t0, self.t0, Pv * V)
                        add_imm(a, self.t1, self.t1, Pv * p.hq * p.d * p.eb_q, self.p1)

        def keep() -> None:
            self.load(self.p1, self.slot_of)
            with a.loop(self.l1, br, "keep"):
                a.V_MUL_VV(gp(self.p1), gp(self.p1), gp(self.p2))
                a.S_ADDI_INT(gp(self.p1), gp(self.p1), V)

        L.repeat("h", self.cH, self.staged_heads, prefetch, "q staging heads")
        if p.path == "per_head" and p.d < V and not mutation_hooks.active("q_lanes_not_zeroed"):
            self.li(self.p2, p.rows["keep"])
            L.repeat("h", self.cH, self.staged_heads, keep, "keep heads")

    # ---- K/V prefetch of tile t (§3.4)
    def kv_offset(self, blk: Block, t: int, c: int) -> int:
        p = self.p
        M = 64 if mutation_hooks.active("hardcoded_tile_64") else self.M
        base_b = 0 if mutation_hooks.active("batch_base_missing") else p.kv_base_b(blk.b)
        if mutation_hooks.active("kv_capacity_ignored") and p.kv_layout == "bshd":
            base_b = blk.b * p.kv_len * p.kv_row_elems  # batch pitch kv_len instead of kv_capacity positions
        if mutation_hooks.active("sbhd_base_uses_capacity") and p.kv_layout == "sbhd":
            base_b = blk.b * p.kv_capacity * p.kv_row_elems  # the bshd batch base on a sequence-major cache
        pitch = p.kv_row_elems if mutation_hooks.active("tile_step_not_batch_aware") else p.R
        step = 0 if mutation_hooks.active("kv_tile_offset_ignored") else t * M * pitch
        g_head = blk.g * p.ratio if mutation_hooks.active("kv_head_offset_ratio") else blk.g  # q head, not kv head
        return (base_b + step + g_head * p.d + c * self.M) * p.eb_kv

    def kv_scale_stride(self) -> None:
        p = self.p
        scale = None if mutation_hooks.active("stale_scale") else self.k.scale_offset
        stride = None if mutation_hooks.active("stale_stride") else p.R * p.eb_kv
        self.set_scale_stride(scale, stride)

    @_phase("load_kv")
    def prefetch_kv(self, with_v: bool) -> None:
        a = self.a
        rs = 0 if mutation_hooks.active("contiguous_kv_prefetch") else 1
        for c in range(self.p.nc):
            self.load(self.t1, partial(self.kv_of, c=c))
            self.li(self.t0, self.ktile(c))
            a.H_PREFETCH_M(gp(self.t0), gp(self.t1), areg(self.k.areg), rs, self.k.prec)
            if with_v:
                self.li(self.t0, self.vtile(c))
                a.H_PREFETCH_M(gp(self.t0), gp(self.t1), areg(self.v.areg), rs, self.v.prec)

    def tile_levels(self, body: Callable[[TileStep], None]) -> None:
        """``body(first tile)`` over every kv tile of the block, one level per run of equally masked tiles."""
        for r, run in enumerate(self.tile_runs(self.L.first("q"))):
            ts = run[0]
            self.a.comment(f"kv tiles t={ts.t}.. ({len(run)} in the first block) c0={ts.c0} masked={int(ts.masked)}")
            self.L.repeat("t", self.cT, partial(self.run_of, r=r), partial(body, ts), "kv tiles")

    # ---- scores (§3.7, §3.8)
    def s_row(self, j: int) -> int:
        """Element address of head slot j's score tile (prefill) or row (decode)."""
        p, M, V = self.p, self.M, self.V
        S = p.rows["s"]
        if not p.batched:
            return S
        if p.decode:
            return S + j * (M * M if mutation_hooks.active("decode_s_stride_tile") else V)
        return S + j * M * M

    @_phase("qkt")
    def scores_batched(self) -> None:
        a, p = self.a, self.p
        self.li(self.p1, self.ktile(0))
        self.li(self.p2, self.qslot(0, 0))
        self.li(self.p3, p.rows["s"])
        if p.decode:
            a.M_BTMV(gp(0), gp(self.p1), gp(self.p2))
            a.M_BMV_WO(gp(self.p3), 0)
        else:
            a.M_BTMM(0, gp(self.p1), gp(self.p2))
            a.M_BMM_WO(gp(self.p3), 0)

    def chunk_operands(self, kq: int, qq: int, c: int) -> tuple[int, int]:
        """(K, Q) operand registers of head-dim chunk c: ``kq``/``qq`` themselves for c = 0, else t0/t1
        loaded with ``+c*M*M`` / ``+c*M*V``."""
        if not c:
            return kq, qq
        self.addi(self.t0, kq, c * self.M * self.M)
        self.addi(self.t1, qq, c * self.M * self.V)
        return self.t0, self.t1

    @_phase("qkt")
    def scores_per_head(self, br: int) -> None:
        """Head slot j's scores into S (M×M prefill rows < ceil(br/B)*B, or one decode row)."""
        a, p = self.a, self.p
        M, V, B, nc = self.M, self.V, self.B, p.nc
        S = p.rows["s"]
        nkb = M // B
        self.load(self.p1, self.slot_of)
        if p.decode:
            self.li(self.p2, self.ktile(0))
            self.li(self.p3, S)
            for jb in range(nkb):
                for c in range(nc):
                    kq, qq = self.chunk_operands(self.p2, self.p1, c)
                    if mutation_hooks.active("tmv_operands_swapped"):
                        a.M_TMV(0, gp(qq), gp(kq))
                    else:
                        a.M_TMV(0, gp(kq), gp(qq))
                a.M_MV_WO(gp(self.p3), jb * B)
                if jb + 1 < nkb:
                    self.addi(self.p2, self.p2, B * M)
            return
        sum_blocks = mutation_hooks.active("qkt_sum_key_blocks")
        self.li(self.p3, S)
        n_rb = br // B if mutation_hooks.active("scores_row_blocks_floor") else ceil_div(br, B)
        with a.loop(self.l1, n_rb, "scores row blocks"):
            self.li(self.p2, self.ktile(0))
            for jb in range(nkb):
                for c in range(nc):
                    kq, qq = self.chunk_operands(self.p2, self.p1, c)
                    a.M_TMM(0, gp(qq), gp(kq))
                if not sum_blocks:
                    a.M_MM_WO(gp(self.p3), gp(0), jb * B)
                if jb + 1 < nkb:
                    self.addi(self.p2, self.p2, B * M)
            if sum_blocks:
                a.M_MM_WO(gp(self.p3), gp(0), 0)
            self.addi(self.p1, self.p1, B * V)
            self.addi(self.p3, self.p3, B * V)


class _FlashEmitter(_Base):
    def run(self) -> None:
        p, a = self.p, self.a
        a.comment(f"flash_attention begin {p.describe()}")
        with region(a, "flash"):
            self.prologue()
            for run in self.block_runs():
                self.L.repeat("q", self.cQ, run, self.block, "blocks", split=True)
        a.comment("flash_attention end")

    # ---- prologue (§3.6): NEG, KEEP, O zeroing, f_neg, f_qk
    @_phase("prologue")
    def prologue(self) -> None:
        p, a = self.p, self.a
        V = self.V
        if not mutation_hooks.active("f_neg_not_loaded"):
            a.S_LD_FP(fp(self.f_neg), gp(0), p.neg_slot)
        self.li(self.t0, V)
        self.li(self.p1, p.rows["neg"])
        if not mutation_hooks.active("neg_row_not_zeroed"):
            a.V_SHFT_V(gp(self.p1), gp(self.p1), gp(self.t0))
        a.V_ADD_VF(gp(self.p1), gp(self.p1), fp(self.f_neg), 0)
        if p.path == "per_head" and p.d < V:
            a.S_LD_FP(fp(self.f_t), gp(0), 3)  # fOne borrows f_t
            self.li(self.p2, p.rows["keep"])
            if not mutation_hooks.active("keep_row_not_zeroed"):
                a.V_SHFT_V(gp(self.p2), gp(self.p2), gp(self.t0))
            a.V_ADD_VF(gp(self.p2), gp(self.p2), fp(self.f_t), 0)
            self.li(self.t1, self.H if mutation_hooks.active("keep_width_hlen") else p.d)
            a.V_SHFT_V(gp(self.p2), gp(self.p2), gp(self.t1))
            a.V_SUB_VF(gp(self.p2), gp(self.p2), fp(self.f_t), 0, 1)
        if not mutation_hooks.active("o_not_zeroed"):
            total = p.o_blocks * p.rows_o_p
            self.li(self.p1, p.o_base)
            done = 0
            while done < total:
                n = min(total - done, _LOOP_COUNT_MAX)
                with a.loop(self.l1, n, "zero O"):
                    a.V_SHFT_V(gp(self.p1), gp(self.p1), gp(self.t0))
                    a.S_ADDI_INT(gp(self.p1), gp(self.p1), V)
                done += n
        a.S_LD_FP(fp(self.f_qk), gp(0), p.qk_slot)
        corrected = p.batched or mutation_hooks.active("per_head_bmm_scale_applied")
        if corrected and not mutation_hooks.active("bmm_scale_uncorrected"):
            a.S_LD_FP(fp(self.f_t), gp(0), 6)  # INV_BMM_SCALE borrows f_t
            a.S_MUL_FP(fp(self.f_qk), fp(self.f_qk), fp(self.f_t))
            if mutation_hooks.active("bmm_scale_applied_twice"):
                a.S_MUL_FP(fp(self.f_qk), fp(self.f_qk), fp(self.f_t))

    # ---- per-head numbers (head slot j, q head h of level "h")
    def st(self, ix: Ix) -> int:
        """FP state base of head slot j: m at +0, m_res at +qrows, l at +2*qrows (§3.5)."""
        return self.p.fp_state_base + 3 * self.p.qrows * self.head(ix)[0]

    def lane(self, ix: Ix) -> int:
        return self.p.o_lane(self.head(ix)[1])

    def off_grid(self) -> bool:
        """The WO column offset must be a multiple of B: a head whose lanes start off that grid (d < B, or
        lane % B != 0) is written at lane 0 and shifted to its lanes afterwards (exact copy)."""
        return self.p.o_lane(self.L.first("h")[1]) % self.B != 0

    def o_addr(self, ix: Ix, c: int) -> int:
        blk, (_j, h) = self.blk(ix), self.head(ix)
        p, row = self.p, blk.b * self.p.q_len + blk.q0
        if mutation_hooks.active("o_row_pitch_unpadded"):  # CBM block pitch batch*q_len instead of rp(batch*q_len)
            h = self._o_head(blk, h)
            return p.o_base + (((h * p.d) // self.V + c) * p.o_rows + row) * self.V
        return p.o_addr(self._o_head(blk, h), row, c)

    def pv_dst(self, ix: Ix) -> int:
        """Where P@V of the head is written: at its lanes, or at lane 0 when it is off the B grid."""
        lane0 = self.off_grid() or mutation_hooks.active("pv_lane_dropped")
        return self.p.rows["pv"] + (0 if lane0 else self.lane(ix))

    def lane_bits(self, ix: Ix) -> int:
        return self.p.lane_mask_bits(self.head(ix)[1])

    def lane_mask(self) -> Callable[[Ix], int] | None:
        """The heads' lane masks (d < V), else None."""
        return self.lane_bits if self.p.lane_masked else None

    # ---- one (b, g, i, head batch) block
    def block(self) -> None:
        p, L = self.p, self.L
        self.block_comment("block")
        self.stage_q()
        per_tile_reset = mutation_hooks.active("state_reset_per_tile")
        if not per_tile_reset:
            self.reset_state()
        self.kv_scale_stride()
        self.tile_levels(lambda ts: self.tile_body(ts, per_tile_reset))
        if not mutation_hooks.active("normalize_per_tile"):
            L.repeat(
                "h",
                self.cH,
                self.heads_of,
                self.normalize,
                "normalize heads",
                mask=self.lane_mask(),
                loop_ok=self.heads_loopable(),
            )
        del p

    @_phase("kv_tile")
    def tile_body(self, ts: TileStep, reset: bool) -> None:
        """One kv tile (``ts`` its structure): (state reset under the mutation,) MASK rows, K/V prefetch,
        scores, every head."""
        p = self.p
        if reset:
            self.reset_state()
        if ts.masked:
            self.build_mask(ts)
        self.prefetch_kv(with_v=True)
        if p.batched:
            self.scores_batched()
        self.L.repeat(
            "h",
            self.cH,
            self.heads_of,
            lambda: self.head_tile(ts),
            "heads",
            loop_ok=self.heads_loopable(),
            mask=self.lane_mask(),
        )

    def head_tile(self, ts: TileStep) -> None:
        br = self.L.first("q").br
        if not self.p.batched:
            self.scores_per_head(br)
        self.softmax(br, ts.masked)
        self.pv(br)
        self.o_update()
        if mutation_hooks.active("normalize_per_tile"):
            self.normalize()

    @_phase("reset")
    def reset_state(self) -> None:
        a, p, Q = self.a, self.p, self.p.qrows
        blk = self.L.first("q")
        self.li(self.p1, p.fp_state_base)
        with a.loop(self.l1, blk.br, "state reset"):
            for j in range(len(blk.heads)):
                if not mutation_hooks.active("m_reset_skipped"):
                    a.S_ST_FP(fp(self.f_neg), gp(self.p1), 3 * Q * j)
                if not mutation_hooks.active("l_reset_skipped"):
                    a.S_ST_FP(fp(0), gp(self.p1), 3 * Q * j + 2 * Q)
            a.S_ADDI_INT(gp(self.p1), gp(self.p1), 1)

    @_phase("mask")
    def build_mask(self, ts: TileStep) -> None:
        """MASK row r = V_SHFT_V(NEG, n_r): one row loop per arithmetic run of the n_r."""
        a, p, V = self.a, self.p, self.V
        self.li(self.p1, p.rows["neg"])
        self.li(self.p2, p.rows["mask"])
        held = None  # the value of t0
        for n0, step, rows in _mask_runs(ts.mask_n):
            if held is None or n0 < held:
                self.li(self.t0, n0)
            elif n0 > held:
                a.S_ADDI_INT(gp(self.t0), gp(self.t0), n0 - held)
            with a.loop(self.l1, rows, "mask rows"):
                a.V_SHFT_V(gp(self.p2), gp(self.p1), gp(self.t0))
                a.S_ADDI_INT(gp(self.p2), gp(self.p2), V)
                if step:
                    a.S_ADDI_INT(gp(self.t0), gp(self.t0), step)
            held = n0 + rows * step

    # ---- online softmax (§3.7) over rows < br of head slot j
    @_phase("softmax")
    def softmax(self, br: int, masked: bool) -> None:
        a, p, V = self.a, self.p, self.V
        step = 64 if mutation_hooks.active("hardcoded_tile_64") else V
        Q = p.qrows
        gS, gSt, gMask = self.p1, self.p2, self.p3
        self.load(gS, self.s_of)
        self.load(gSt, self.st)
        if masked:
            self.li(gMask, p.rows["mask"])
        with a.loop(self.l1, br, "softmax rows"):
            if not mutation_hooks.active("qk_scale_missing"):
                a.V_MUL_VF(gp(gS), gp(gS), fp(self.f_qk), 0)
            if masked:
                a.V_ADD_VV(gp(gS), gp(gS), gp(gMask), 0)
                a.S_ADDI_INT(gp(gMask), gp(gMask), V)
            a.S_LD_FP(fp(self.f_old), gp(gSt), 0)
            a.S_ADD_FP(fp(self.f_m), fp(self.f_old), fp(0))
            a.V_RED_MAX(fp(self.f_m), gp(gS), 0)
            a.S_SUB_FP(fp(self.f_t), fp(self.f_old), fp(self.f_m))
            a.S_EXP_FP(fp(self.f_t), fp(self.f_t))
            a.S_ST_FP(fp(self.f_t), gp(gSt), Q)
            a.S_ST_FP(fp(self.f_m), gp(gSt), 0)
            a.V_SUB_VF(gp(gS), gp(gS), fp(self.f_m), 0, 0)
            a.V_EXP_V(gp(gS), gp(gS), 0)
            f_l = self.f_t if mutation_hooks.active("l_reg_aliases_mres") else self.f_l  # l loaded over m_res
            a.S_LD_FP(fp(f_l), gp(gSt), 2 * Q)
            if not mutation_hooks.active("mres_not_applied_l"):
                a.S_MUL_FP(fp(f_l), fp(f_l), fp(self.f_t))
            a.V_RED_SUM(fp(f_l), gp(gS), 0)
            a.S_ST_FP(fp(f_l), gp(gSt), 2 * Q)
            if br > 1:
                a.S_ADDI_INT(gp(gS), gp(gS), step)
                a.S_ADDI_INT(gp(gSt), gp(gSt), 1)

    # ---- P@V (§3.7, §3.8) of head slot j (q head h) into PV at the head's lanes
    def p_rows(self, ix: Ix) -> int:
        j = self.head(ix)[0]
        if self.p.batched:
            return self.s_row(j)
        return self.p.rows["s"] + (j * self.M * self.M if mutation_hooks.active("per_head_p_offset") else 0)

    @_phase("pv")
    def pv(self, br: int) -> None:
        a, p = self.a, self.p
        M, V, B, nc, d = self.M, self.V, self.B, p.nc, p.d
        shift = self.off_grid()
        gP, gVt, gPV = self.p1, self.p2, self.p3
        self.load(gP, self.p_rows)
        self.load(gPV, self.pv_dst)
        if p.decode:
            step = B * M if mutation_hooks.active("mv_v_step_row") else B
            for c in range(nc):
                self.li(gVt, self.vtile(c))
                njb = ceil_div(min(d - c * M, M), B)
                for jb in range(njb):
                    a.M_MV(0, gp(gVt), gp(gP))
                    a.M_MV_WO(gp(gPV), c * M * V + jb * B)
                    if jb + 1 < njb:
                        self.addi(gVt, gVt, step)
            if shift:
                self.shift_pv_rows(1)
            return
        step = B if mutation_hooks.active("pv_v_step_blen") else B * M
        n_rb = br // B if mutation_hooks.active("pv_row_blocks_floor") else ceil_div(br, B)
        with a.loop(self.l1, n_rb, "pv row blocks"):
            self.li(gVt, self.vtile(0))
            for c in range(nc):
                njb = ceil_div(min(d - c * M, M), B)
                for jb in range(njb):
                    a.M_MM(0, gp(gVt), gp(gP))
                    a.M_MM_WO(gp(gPV), gp(0), c * M * V + jb * B)
                    if not (c + 1 == nc and jb + 1 == njb):
                        self.addi(gVt, gVt, step)
            self.addi(gP, gP, B * V)
            self.addi(gPV, gPV, B * V)
        if shift:
            self.shift_pv_rows(br)

    def shift_pv_rows(self, br: int) -> None:
        """PV rows < br (one chunk: a head off the B grid has d < M) moved ``lane`` lanes up (V_SHFT_V)."""
        a = self.a
        self.li(self.p3, self.p.rows["pv"])
        self.load(self.t0, self.lane)
        with a.loop(self.l1, br, "pv lane shift"):
            a.V_SHFT_V(gp(self.p3), gp(self.p3), gp(self.t0))
            if br > 1:
                a.S_ADDI_INT(gp(self.p3), gp(self.p3), self.V)

    def _o_head(self, blk: Block, h: int) -> int:
        return h - blk.g * self.p.ratio if mutation_hooks.active("o_group_offset_missing") else h

    # ---- O = diag(m_res)·O + PV (§3.7)
    @_phase("rescale")
    def o_update(self) -> None:
        a, p, M, V = self.a, self.p, self.M, self.V
        br = self.L.first("q").br
        mk = 1 if p.lane_masked else 0
        if mk:
            self.L.set_mask()
        no_mres = mutation_hooks.active("mres_not_applied_o")
        gO, gPV, gSt = self.p1, self.p2, self.p3
        for c in range(p.nc):
            self.load(gO, partial(self.o_addr, c=c))
            self.li(gPV, p.rows["pv"] + c * M * V)
            if not no_mres:
                self.load(gSt, self.st)
            with a.loop(self.l1, br, "o update rows"):
                if not no_mres:
                    a.S_LD_FP(fp(self.f_t), gp(gSt), p.qrows)
                    a.V_MUL_VF(gp(gO), gp(gO), fp(self.f_t), mk)
                a.V_ADD_VV(gp(gO), gp(gO), gp(gPV), mk)
                if br > 1:
                    a.S_ADDI_INT(gp(gO), gp(gO), V)
                    a.S_ADDI_INT(gp(gPV), gp(gPV), V)
                    if not no_mres:
                        a.S_ADDI_INT(gp(gSt), gp(gSt), 1)

    # ---- O *= 1/l once after the last kv tile (§3.7)
    @_phase("normalize")
    def normalize(self) -> None:
        a, p, V = self.a, self.p, self.V
        br = self.L.first("q").br
        mk = 1 if p.lane_masked else 0
        if mk and not mutation_hooks.active("normalize_mask_stale"):
            self.L.set_mask()
        gO, gSt = self.p1, self.p3
        for c in range(p.nc):
            self.load(gO, partial(self.o_addr, c=c))
            self.load(gSt, self.st)
            n_rows = br // self.B * self.B if mutation_hooks.active("normalize_rows_floor_blen") else br
            with a.loop(self.l1, n_rows, "normalize rows"):
                a.S_LD_FP(fp(self.f_l), gp(gSt), 2 * p.qrows)
                a.S_RECI_FP(fp(self.f_t), fp(self.f_l))
                a.V_MUL_VF(gp(gO), gp(gO), fp(self.f_t), mk)
                if br > 1:
                    a.S_ADDI_INT(gp(gO), gp(gO), V)
                    a.S_ADDI_INT(gp(gSt), gp(gSt), 1)


class _ScoresEmitter(_Base):
    """attention_scores (§2.11): stage Q, prefetch K, scores, copy rows < br of each head's tile."""

    def run(self) -> None:
        p, a = self.p, self.a
        a.comment(f"attention_scores begin {p.describe()}")
        with region(a, "attn_scores"):
            self.scores_run()
        a.comment("attention_scores end")

    def scores_run(self) -> None:
        p, a = self.p, self.a
        if p.path == "per_head" and p.d < self.V:
            a.S_LD_FP(fp(self.f_t), gp(0), 3)
            self.li(self.t0, self.V)
            self.li(self.p2, p.rows["keep"])
            a.V_SHFT_V(gp(self.p2), gp(self.p2), gp(self.t0))
            a.V_ADD_VF(gp(self.p2), gp(self.p2), fp(self.f_t), 0)
            self.li(self.t1, p.d)
            a.V_SHFT_V(gp(self.p2), gp(self.p2), gp(self.t1))
            a.V_SUB_VF(gp(self.p2), gp(self.p2), fp(self.f_t), 0, 1)
        corrected = p.batched or mutation_hooks.active("per_head_bmm_scale_applied")
        a.S_LD_FP(fp(self.f_qk), gp(0), 6 if corrected else 3)
        for run in self.block_runs():
            self.L.repeat("q", self.cQ, run, self.block, "blocks", split=True)

    def block(self) -> None:
        self.block_comment("block")
        self.stage_q()
        self.kv_scale_stride()
        self.tile_levels(lambda ts: self.scores_tile())

    @_phase("kv_tile")
    def scores_tile(self) -> None:
        """One kv tile: K prefetch, scores, each head's rows < br copied (scaled) to its output tile."""
        p = self.p
        self.prefetch_kv(with_v=False)
        if p.batched:
            self.scores_batched()
        self.L.repeat("h", self.cH, self.heads_of, self.scores_head, "heads", loop_ok=False)

    def out_of(self, ix: Ix) -> int:
        """The head's output tile of the kv tile."""
        blk = self.blk(ix)
        return self.p.scores_tile_addr(blk.b, self.head(ix)[1], blk.i, self.tile(ix).t)

    def scores_head(self) -> None:
        p, a = self.p, self.a
        br = self.L.first("q").br
        if not p.batched:
            self.scores_per_head(br)
        self.load(self.p1, self.s_of)
        self.load(self.p2, self.out_of)
        with a.loop(self.l1, br, "copy rows"):
            a.V_MUL_VF(gp(self.p2), gp(self.p1), fp(self.f_qk), 0)
            if br > 1:
                a.S_ADDI_INT(gp(self.p1), gp(self.p1), self.V)
                a.S_ADDI_INT(gp(self.p2), gp(self.p2), self.V)


# =========================================================================== public emitters


def _check_bound(kernel: str, plan: FlashPlan) -> None:
    if plan.q is None or plan.k is None or plan.v is None:
        raise ValueError(f"{kernel}: the plan has no q/k tensors (planned for sizing only); plan again with q=, k=, v=")


def emit_flash_attention(asm: Asm, plan: FlashPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    """Emit the flash-attention program of ``plan`` into ``asm`` using the registers ``gp``/``fp``."""
    if plan.kernel != "flash_attention":
        raise ValueError(f"flash_attention: plan is for {plan.kernel}")
    _check_bound("flash_attention", plan)
    gpr, fpr = take_regs("flash_attention", gp, fp, GP_NEEDED, FP_NEEDED)
    tr = Tracker(asm, plan.config.MAX_LOOP_INSTRUCTIONS, "flash_attention")
    _emit(tr, plan, gpr, fpr)


def emit_attention_scores(asm: Asm, plan: FlashPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    """Emit attention_scores (§2.11) of ``plan`` into ``asm``."""
    if plan.kernel != "attention_scores":
        raise ValueError(f"attention_scores: plan is for {plan.kernel}")
    _check_bound("attention_scores", plan)
    gpr, fpr = take_regs("attention_scores", gp, fp, GP_NEEDED, FP_NEEDED)
    tr = Tracker(asm, plan.config.MAX_LOOP_INSTRUCTIONS, "attention_scores")
    _emit(tr, plan, gpr, fpr)
