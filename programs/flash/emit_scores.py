"""The attention_scores emitter (kernels.md §2.11): each head's QKᵀ tiles, scaled, copied to the output."""

from __future__ import annotations

from .. import mutation_hooks
from ..asm import fp, gp, region
from .emit_base import EmitterBase, phase
from .loops import Ix

__all__ = ["ScoresEmitter"]


class ScoresEmitter(EmitterBase):
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

    @phase("kv_tile")
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
