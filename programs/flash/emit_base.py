"""What the flash-attention and attention_scores emitters share (kernels.md §3.4, §3.7, §3.8): registers,
the loop levels and block runs, Q staging, the K/V prefetch, and the QKᵀ stage of both paths (batched:
``M_BTMM``/``M_BTMV``; per-head: ``M_TMM``/``M_TMV``, head-dim chunks)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial, wraps
from typing import Any, Concatenate, ParamSpec, TypeVar

from .. import mutation_hooks
from ..asm import add_imm, areg, gp, load_imm, region
from ..hbm_tensors import HbmTensor, ceil_div
from .loops import IterRegs, Ix, Loops, Tracker
from .merge import chunk_tree, tree_signature
from .plan import FP_NEEDED, Block, FlashPlan, TileStep
from .problem import hbm_type_info
from .schedule import block_coords, tile_runs

__all__ = ["EmitterBase", "phase"]


def _dummy_tensors(plan: FlashPlan) -> tuple[HbmTensor, HbmTensor, HbmTensor]:
    eb_kv, blk_kv, _ = hbm_type_info(plan.config, "HBM_M_KV_TYPE")
    eb_q, blk_q, _ = hbm_type_info(plan.config, "HBM_V_ACT_TYPE")
    q = plan.q or HbmTensor(0, plan.q_alloc_elems * eb_q, eb_q, 0, plan.hq * plan.d, plan.q_alloc_elems)
    k = plan.k or HbmTensor(1, plan.kv_alloc_elems * eb_kv, eb_kv, 1, plan.kv_row_elems, plan.kv_alloc_elems)
    v = plan.v or HbmTensor(2, plan.kv_alloc_elems * eb_kv, eb_kv, 1, plan.kv_row_elems, plan.kv_alloc_elems)
    return q, k, v


_E = TypeVar("_E", bound="EmitterBase")
_P = ParamSpec("_P")


def phase(name: str) -> Callable[[Callable[Concatenate[_E, _P], None]], Callable[Concatenate[_E, _P], None]]:
    """Method decorator: every instruction the method emits lies in the region ``name`` (nested in the regions
    open at the call: e.g. ``flash/kv_tile/softmax``); the markers are comments, the words stay the same."""

    def wrap(method: Callable[Concatenate[_E, _P], None]) -> Callable[Concatenate[_E, _P], None]:
        @wraps(method)
        def phased(self: _E, *args: _P.args, **kw: _P.kwargs) -> None:
            with region(self.a, name):
                method(self, *args, **kw)

        return phased

    return wrap


class EmitterBase:
    """Shared pieces of flash attention and attention_scores: Q staging, K/V addressing, scores.

    The code is emitted as nested levels (:class:`~programs.flash.loops.Loops`): consecutive blocks
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
        regs = list(gpr)[: plan.gp_needed]
        (self.t0, self.t1, self.l1, self.cQ, self.p1, self.p2, self.p3, self.p4) = regs[:8]
        (self.cT, self.cH, self.mk) = regs[8:11]
        self.cK = regs[11] if len(regs) > 11 else -1  # the kv-chunk loop counter of split-KV (merge.py)
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
            self._runs[id(blk)] = tile_runs(blk.tiles)
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
        sig: tuple[object, ...] = tuple(
            (r[0].masked, r[0].mask_n, None if k == 0 and not r[0].masked else len(r)) for k, r in enumerate(runs)
        )
        off_grid = tuple(self.p.o_lane(h) % self.B != 0 for h in blk.heads)
        if self.p.merge_levels and len(blk.tiles) > self.p.chunk_tiles:  # split-KV: the whole chunk tree
            sig = tree_signature(chunk_tree(blk.tiles, self.p.chunk_tiles, self.p.merge_levels))
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
        moved = [k for k, (x, y) in enumerate(zip(block_coords(last), block_coords(blk), strict=True)) if x != y]
        if len(moved) != 1:
            return False
        if len(run) == 1:
            return True
        first_moved = [
            k for k, (x, y) in enumerate(zip(block_coords(run[0]), block_coords(run[1]), strict=True)) if x != y
        ]
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

    @phase("stage_q")
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

    @phase("load_kv")
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

    def chunk_run_of(self, ix: Ix, r: int) -> list[TileStep]:
        """The r-th run of equally masked kv tiles of the split-KV chunk at level "k"."""
        return tile_runs(self.L.get("k", ix))[r]

    def chunk_tile_levels(self, body: Callable[[TileStep], None]) -> None:
        """``tile_levels`` over the kv tiles of the split-KV chunk at level "k" (merge.py)."""
        for r, run in enumerate(tile_runs(self.L.first("k"))):
            ts = run[0]
            self.a.comment(f"kv tiles t={ts.t}.. ({len(run)} in the first chunk) c0={ts.c0} masked={int(ts.masked)}")
            self.L.repeat("t", self.cT, partial(self.chunk_run_of, r=r), partial(body, ts), "kv tiles")

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

    @phase("qkt")
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

    @phase("qkt")
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
