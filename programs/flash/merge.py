"""Split-KV flash attention (docs/numerics.md): a block's kv tiles in chunks of at most ``T`` tiles, each with its
own online-softmax state (m, l, O), merged into accumulators that each gather at most ``T`` states: a tree of
fan-in ``T`` whose every merge combines two states (rescale both by exp(m_i - m), add).

Why: the running sum ``l`` (FP SRAM) and the unnormalised output ``O`` (VRAM) are held in the datapath's format
(bf16) and gain one contribution per step.  Once an accumulator holds ``n`` contributions of similar size, the next
one loses its ``log2(n)`` lowest significant bits to rounding, and the sum stagnates.  With at most
``T = 2^floor(p/2)`` contributions per accumulator (:func:`chunk_tiles`; ``p`` significand bits, bf16: 8, T = 16)
every contribution keeps at least half of its bits, and the relative rounding error an accumulator adds is at
most ``(T - 1) * 2^-p``; the tree has ``ceil(log_T(tiles))`` levels.

Layout.  The working state P is the kernel's own (§3.5: m / m_res / l words from ``st``, O at ``o_addr``);
accumulator ``A_s`` (``s = 1 .. levels``) holds, per head slot, m / l words (:meth:`FlashPlan.slot_state_base`,
l at +qrows) and O rows with the head's lanes (:meth:`FlashPlan.slot_o_addr`).  Program per block: for every
group of ``T`` chunks (a hardware loop over chunks of equal structure): reset P, the chunk's kv tiles, ``A_1 (+)=
P``; every ``T`` groups ``A_2 (+)= A_1``, and so on; at the end P = A_levels and the usual ``O *= 1/l``.  An
accumulator starts empty (m = -inf, l = 0, O = 0): merging into it gives the other state exactly (its weight is
exp(-88) ~ 6e-39, times l = 0 and O = 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from plena_sim.config import FpType, HardwareConfig, MxType, PlainType

from ..asm import fp, gp, region

if TYPE_CHECKING:
    from .emit_flash import FlashEmitter
    from .loops import Ix
    from .plan import TileStep

__all__ = ["accumulator_precision", "chunk_tiles", "merge_levels", "split_end_aligned", "ChunkTree"]

_T = TypeVar("_T")


def accumulator_precision(cfg: HardwareConfig) -> int:
    """Significand bits ``p`` (the implicit bit included) of the format l and O accumulate in: the vector SRAM's
    element type (bf16: 8)."""
    t = cfg.precision["VECTOR_SRAM_TYPE"]
    data = t.data if isinstance(t, PlainType) else t.elem if isinstance(t, MxType) else t
    if not isinstance(data, FpType):
        raise ValueError(f"flash_attention: VECTOR_SRAM_TYPE {t.describe()} is not a floating-point format")
    return int(data.mantissa) + 1


def chunk_tiles(cfg: HardwareConfig) -> int:
    """Contributions one accumulator may gather: ``2^floor(p/2)`` (bf16: 16 kv tiles per chunk, 16 states per
    merge accumulator)."""
    return 1 << (accumulator_precision(cfg) // 2)


def split_end_aligned(items: Sequence[_T], per: int) -> list[list[_T]]:
    """``items`` in groups of ``per``, aligned to the end: the first group holds the remainder.  For kv tiles this
    puts the last chunk's first tile at least ``per - 1`` tiles before the causal edge, so every q row sees a key
    in the first tile of every chunk (its running max never stays -inf)."""
    if len(items) <= per:
        return [list(items)]
    first = len(items) % per or per
    return [list(items[:first])] + [list(items[k : k + per]) for k in range(first, len(items), per)]


def merge_levels(n_tiles: int, per: int) -> int:
    """Accumulator levels a block of ``n_tiles`` kv tiles needs (0: one chunk, no merge)."""
    levels, n = 0, n_tiles
    while per and n > per:
        n = -(-n // per)
        levels += 1
    return levels


class Tree(NamedTuple):
    """A block's chunk tree: ``level`` 0 is one chunk (its tiles); level s > 0 groups at most T subtrees."""

    level: int
    chunk: tuple[TileStep, ...]
    subtrees: tuple[Tree, ...]


def chunk_tree(tiles: Sequence[TileStep], per: int, levels: int) -> Tree:
    """The tree of ``levels`` accumulator levels over ``tiles`` (end-aligned at every level)."""
    nodes = [Tree(0, tuple(ch), ()) for ch in split_end_aligned(tiles, per)]
    for s in range(1, levels + 1):
        nodes = [Tree(s, (), tuple(g)) for g in split_end_aligned(nodes, per)]
    assert len(nodes) == 1
    return nodes[0]


def chunk_signature(chunk: Sequence[TileStep]) -> tuple[tuple[bool, tuple[int, ...], int], ...]:
    """What two chunks of one chunk loop must share: their runs of equally masked tiles (mask rows, lengths)."""
    runs: list[list[TileStep]] = []
    for ts in chunk:
        if runs and (ts.masked, ts.mask_n) == (runs[-1][0].masked, runs[-1][0].mask_n):
            runs[-1].append(ts)
        else:
            runs.append([ts])
    return tuple((r[0].masked, r[0].mask_n, len(r)) for r in runs)


def tree_signature(tree: Tree) -> tuple[object, ...]:
    if tree.level == 0:
        return chunk_signature(tree.chunk)
    return (tree.level, tuple(tree_signature(t) for t in tree.subtrees))


def _runs(items: list[_T], key: Callable[[_T], object]) -> list[list[_T]]:
    """Consecutive items with equal ``key``."""
    runs: list[list[_T]] = []
    for it in items:
        if runs and key(it) == key(runs[-1][0]):
            runs[-1].append(it)
        else:
            runs.append([it])
    return runs


class _State(NamedTuple):
    """Where a state lives: its m word and O row (head-dim chunk c) as functions of the loop indices, and the
    offset of its l word from its m word."""

    m: Callable[[Ix], int]
    l_off: int
    o: Callable[[int, Ix], int]  # (head-dim chunk c, indices)


class ChunkTree:
    """Emits a block's chunked kv loop (see the module docstring) for the flash-attention emitter ``e``."""

    def __init__(self, e: FlashEmitter):
        self.e = e

    # ---- the states
    def working(self) -> _State:
        e, Q = self.e, self.e.p.qrows
        return _State(e.st, 2 * Q, lambda c, ix: e.o_addr(ix, c))

    def acc(self, s: int) -> _State:
        p, e = self.e.p, self.e

        def base(ix: Ix) -> int:
            return p.slot_state_base(s - 1, e.head(ix)[0])

        return _State(base, p.qrows, lambda c, ix: p.slot_o_addr(s - 1, e.head(ix)[0], c))

    # ---- the block
    def block(self, tiles: Sequence[TileStep], body: Callable[[], None]) -> None:
        """The block's kv tiles as the chunk tree; ``body`` emits the kv tiles of the chunk at level "k"."""
        p = self.e.p
        tree = chunk_tree(tiles, p.chunk_tiles, p.merge_levels)
        self.subtree(tree, body)
        with region(self.e.a, "merge"):
            self.heads(partial(self.copy, self.acc(tree.level), self.working()), "result to the working state")

    def subtree(self, tree: Tree, body: Callable[[], None]) -> None:
        """Accumulator ``A_s`` of ``tree`` (level s) from its subtrees: level 1 a chunk loop, level 2 a loop
        over runs of equal level-1 groups (counted in the block-loop register when the block is not looped),
        higher levels unrolled (more than T^3 kv tiles)."""
        s = tree.level
        if s == 1:
            self.level1(lambda ix: tree, body)
            return
        with region(self.e.a, "merge"):
            self.heads(partial(self.empty, self.acc(s)), f"empty accumulator {s}")
        if s > 2:
            for sub in tree.subtrees:
                self.subtree(sub, body)
                self.merge_up(s)
            return
        e = self.e
        for run in _runs(list(tree.subtrees), tree_signature):
            e.L.repeat("g", e.cQ, run, partial(self.group, body), "chunk groups", loop_ok=not e.L.looped("q"))

    def group(self, body: Callable[[], None]) -> None:
        """One level-1 group of the level-2 loop, then ``A_2 (+)= A_1``."""
        self.level1(lambda ix: self.e.L.get("g", ix), body)
        self.merge_up(2)

    def merge_up(self, s: int) -> None:
        with region(self.e.a, "merge"):
            self.heads(partial(self.merge, self.acc(s), self.acc(s - 1)), f"merge accumulator {s - 1}")

    def level1(self, node_of: Callable[[Ix], Tree], body: Callable[[], None]) -> None:
        """Empty ``A_1``, then its chunks: one hardware loop per run of equally structured chunks (reset P, the
        chunk's kv tiles, ``A_1 (+)= P``)."""
        e = self.e
        with region(e.a, "merge"):
            self.heads(partial(self.empty, self.acc(1)), "empty accumulator 1")
        first = node_of(e.L.first_ix())
        k0 = 0
        for run in _runs(list(first.subtrees), lambda t: chunk_signature(t.chunk)):
            lo, hi = k0, k0 + len(run)
            k0 = hi

            def chunks(ix: Ix, lo: int = lo, hi: int = hi) -> list[tuple[TileStep, ...]]:
                return [t.chunk for t in node_of(ix).subtrees[lo:hi]]

            e.L.repeat("k", e.cK, chunks, partial(self.chunk, body), "kv chunks")

    def chunk(self, body: Callable[[], None]) -> None:
        e = self.e
        e.reset_state()
        body()
        with region(e.a, "merge"):
            self.heads(partial(self.merge, self.acc(1), self.working()), "merge chunk")

    def heads(self, body: Callable[[], None], what: str) -> None:
        e = self.e
        e.L.repeat("h", e.cH, e.heads_of, body, what, mask=e.lane_mask(), loop_ok=e.heads_loopable())

    # ---- one head, rows < br
    def empty(self, dst: _State) -> None:
        """m = -inf, l = 0, O = 0 (every lane of the slot's rows: they belong to this head alone)."""
        e = self.e
        a, br = e.a, e.L.first("q").br
        gM, gO = e.p3, e.p1
        e.load(gM, dst.m)
        with a.loop(e.l1, br, "empty state rows"):
            a.S_ST_FP(fp(e.f_neg), gp(gM), 0)
            a.S_ST_FP(fp(0), gp(gM), e.p.qrows)
            if br > 1:
                a.S_ADDI_INT(gp(gM), gp(gM), 1)
        e.li(e.t0, e.V)
        for c in range(e.p.nc):
            e.load(gO, partial(dst.o, c))
            with a.loop(e.l1, br, "empty O rows"):
                a.V_SHFT_V(gp(gO), gp(gO), gp(e.t0))
                if br > 1:
                    a.S_ADDI_INT(gp(gO), gp(gO), e.V)

    def merge(self, dst: _State, src: _State) -> None:
        """dst <- dst (+) src: m = max(m_d, m_s), a = exp(m_d - m), b = exp(m_s - m), l = a*l_d + b*l_s,
        O = a*O_d + b*O_s.  a is kept in the working state's m_res word, b in src's m word (src is spent)."""
        e = self.e
        a, Q, br = e.a, e.p.qrows, e.L.first("q").br
        gD, gS, gW = e.p2, e.t0, e.p3
        e.load(gD, dst.m)
        e.load(gS, src.m)
        e.load(gW, e.st)
        dl, sl = dst.l_off, src.l_off
        with a.loop(e.l1, br, "merge state rows"):
            a.S_LD_FP(fp(e.f_m), gp(gD), 0)
            a.S_LD_FP(fp(e.f_old), gp(gS), 0)
            a.S_MAX_FP(fp(e.f_t), fp(e.f_m), fp(e.f_old))
            a.S_ST_FP(fp(e.f_t), gp(gD), 0)
            a.S_SUB_FP(fp(e.f_m), fp(e.f_m), fp(e.f_t))
            a.S_EXP_FP(fp(e.f_m), fp(e.f_m))
            a.S_SUB_FP(fp(e.f_old), fp(e.f_old), fp(e.f_t))
            a.S_EXP_FP(fp(e.f_old), fp(e.f_old))
            a.S_ST_FP(fp(e.f_m), gp(gW), Q)
            a.S_ST_FP(fp(e.f_old), gp(gS), 0)
            a.S_LD_FP(fp(e.f_l), gp(gD), dl)
            a.S_MUL_FP(fp(e.f_l), fp(e.f_l), fp(e.f_m))
            a.S_LD_FP(fp(e.f_t), gp(gS), sl)
            a.S_MUL_FP(fp(e.f_t), fp(e.f_t), fp(e.f_old))
            a.S_ADD_FP(fp(e.f_l), fp(e.f_l), fp(e.f_t))
            a.S_ST_FP(fp(e.f_l), gp(gD), dl)
            if br > 1:
                for g in (gD, gS, gW):
                    a.S_ADDI_INT(gp(g), gp(g), 1)
        self._rows(dst, src, merge=True)

    def copy(self, src: _State, dst: _State) -> None:
        """dst <- src: m and l words, O rows (``O + 0``: exact) at the head's lanes."""
        e = self.e
        a, br = e.a, e.L.first("q").br
        gS, gD = e.t0, e.p3
        e.load(gS, src.m)
        e.load(gD, dst.m)
        sl, dl = src.l_off, dst.l_off
        with a.loop(e.l1, br, "copy state rows"):
            a.S_LD_FP(fp(e.f_m), gp(gS), 0)
            a.S_ST_FP(fp(e.f_m), gp(gD), 0)
            a.S_LD_FP(fp(e.f_l), gp(gS), sl)
            a.S_ST_FP(fp(e.f_l), gp(gD), dl)
            if br > 1:
                a.S_ADDI_INT(gp(gS), gp(gS), 1)
                a.S_ADDI_INT(gp(gD), gp(gD), 1)
        self._rows(dst, src, merge=False)

    def _rows(self, dst: _State, src: _State, merge: bool) -> None:
        """The O rows of every head-dim chunk: O_d = a*O_d + b*O_s (b overwriting O_s first), or O_d = O_s (+ 0;
        lane-masked: O_d = O_d * 0 + O_s, in place, since a masked op writes rs1 into the disabled lanes)."""
        e = self.e
        a, p, V, br = e.a, e.p, e.V, e.L.first("q").br
        mk = 1 if p.lane_masked else 0
        if mk:
            e.L.set_mask()
        gD, gS, gW, gB = e.p1, e.p2, e.p3, e.t0
        for c in range(p.nc):
            e.load(gD, partial(dst.o, c))
            e.load(gS, partial(src.o, c))
            if merge:
                e.load(gW, e.st)
                e.load(gB, src.m)
            with a.loop(e.l1, br, "merge O rows" if merge else "copy O rows"):
                if merge:
                    a.S_LD_FP(fp(e.f_m), gp(gW), p.qrows)
                    a.S_LD_FP(fp(e.f_old), gp(gB), 0)
                    a.V_MUL_VF(gp(gD), gp(gD), fp(e.f_m), mk)
                    a.V_MUL_VF(gp(gS), gp(gS), fp(e.f_old), mk)
                    a.V_ADD_VV(gp(gD), gp(gD), gp(gS), mk)
                elif mk:  # a masked op's disabled lanes take rs1: stay in place on dst (its other heads' lanes)
                    a.V_MUL_VF(gp(gD), gp(gD), fp(0), mk)
                    a.V_ADD_VV(gp(gD), gp(gD), gp(gS), mk)
                else:
                    a.V_ADD_VF(gp(gD), gp(gS), fp(0), 0)
                if br > 1:
                    a.S_ADDI_INT(gp(gD), gp(gD), V)
                    a.S_ADDI_INT(gp(gS), gp(gS), V)
                    if merge:
                        a.S_ADDI_INT(gp(gW), gp(gW), 1)
                        a.S_ADDI_INT(gp(gB), gp(gB), 1)
