"""The flash-attention emitter (kernels.md §3.6, §3.7): prologue, state reset, MASK rows, online softmax,
P@V, the O update and the final ``O *= 1/l``, on the batched and the per-head path."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from .. import mutation_hooks
from ..asm import LOOP_COUNT_MAX, fp, gp, region
from ..hbm_tensors import ceil_div
from .emit_base import EmitterBase, phase
from .loops import Ix
from .merge import ChunkTree
from .plan import Block, TileStep
from .schedule import mask_runs

__all__ = ["FlashEmitter"]


class FlashEmitter(EmitterBase):
    def run(self) -> None:
        p, a = self.p, self.a
        a.comment(f"flash_attention begin {p.describe()}")
        with region(a, "flash"):
            self.prologue()
            for run in self.block_runs():
                self.L.repeat("q", self.cQ, run, self.block, "blocks", split=True)
        a.comment("flash_attention end")

    # ---- prologue (§3.6): NEG, KEEP, O zeroing, f_neg, f_qk
    @phase("prologue")
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
                n = min(total - done, LOOP_COUNT_MAX)
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
        tiles = L.first("q").tiles
        if p.merge_levels and len(tiles) > p.chunk_tiles:  # split-KV: chunks merged in a tree (merge.py)
            ChunkTree(self).block(tiles, lambda: self.chunk_tile_levels(lambda ts: self.tile_body(ts, per_tile_reset)))
        else:
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

    @phase("kv_tile")
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

    @phase("reset")
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

    @phase("mask")
    def build_mask(self, ts: TileStep) -> None:
        """MASK row r = V_SHFT_V(NEG, n_r): one row loop per arithmetic run of the n_r."""
        a, p, V = self.a, self.p, self.V
        self.li(self.p1, p.rows["neg"])
        self.li(self.p2, p.rows["mask"])
        held = None  # the value of t0
        for n0, step, rows in mask_runs(ts.mask_n):
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
    @phase("softmax")
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

    @phase("pv")
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
    @phase("rescale")
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
    @phase("normalize")
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
