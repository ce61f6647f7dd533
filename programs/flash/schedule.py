"""The kv-tile schedule (kernels.md §3.6): the blocks (batch b, kv group g, q tile i, head batch) in loop
order, the kv tiles each visits (increasing, fully masked tiles cut off) with their additive mask rows, and
the runs the emitters make hardware loops of (equally masked kv tiles, arithmetic runs of mask rows)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import mutation_hooks
from .plan import Block, TileStep
from .problem import Problem
from .state import FpState

__all__ = ["schedule_blocks", "tile_runs", "mask_runs", "block_coords"]


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


def _block_tiles(pb: Problem, q0: int, br: int) -> tuple[TileStep, ...]:
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


def schedule_blocks(pb: Problem, st: FpState, Tq: int, tiles: bool = True) -> tuple[Block, ...]:
    """Every block in loop order (§3.6): batch b, kv group g, q tile i, head batch of ``nh`` heads (``tiles=False``:
    without their kv tiles, for sizing: the HBM and VRAM sizes need only each block's rows)."""
    blocks: list[Block] = []
    for b in range(pb.batch):
        for g in range(pb.hkv):
            for i in range(Tq):
                q0 = i * st.qrows
                br = min(st.qrows, pb.q_len - q0)
                q0m = 0 if mutation_hooks.active("q_tile_index_ignored") else q0
                heads_all = [g * pb.ratio + j for j in range(pb.ratio)]
                for s in range(0, pb.ratio, st.nh):
                    kv = _block_tiles(pb, q0m, br) if tiles else ()
                    blocks.append(Block(b, g, i, q0, br, tuple(heads_all[s : s + st.nh]), kv))
    return tuple(blocks)


def tile_runs(tiles: Sequence[TileStep]) -> list[list[TileStep]]:
    """Consecutive kv tiles with the same mask (the fully visible ones: none), one hardware loop each."""
    runs: list[list[TileStep]] = []
    for ts in tiles:
        if runs and (ts.masked, ts.mask_n) == (runs[-1][0].masked, runs[-1][0].mask_n):
            runs[-1].append(ts)
        else:
            runs.append([ts])
    return runs


def mask_runs(ns: Sequence[int]) -> list[tuple[int, int, int]]:
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


def block_coords(blk: Block) -> tuple[int, int, int, int]:
    """A block's schedule coordinates (b, g, i, first head)."""
    return (blk.b, blk.g, blk.i, blk.heads[0])
