"""The online-softmax state in FP SRAM (kernels.md §3.3, §3.5): the path, the heads per head batch and the
q rows per tile whose state (m, m_res, l per row and head) fits, and where that state lies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from plena_sim.config import HardwareConfig

from .. import mutation_hooks
from ..common import check_fp_range, fail, need_int
from ..hbm_tensors import ceil_div
from .merge import chunk_tiles, merge_levels
from .problem import Problem

__all__ = ["FpState", "plan_fp_state"]


def _row_groups(room: int, nh: int, M: int, quantum: int, w: int = 3) -> int:
    """The largest number of q rows (<= M, a multiple of ``quantum`` when one fits) whose online-softmax
    state of ``nh`` heads (3 words per row and head) fits ``room`` FP SRAM words; 0 if none does."""
    rows = min(M, room // (w * nh))
    if rows >= quantum:
        return rows - rows % quantum
    return rows


def _choose_path(
    K: str, cfg: HardwareConfig, path: str, legal: bool, ratio: int, nc: int, room: int, q_len: int, F: int, w: int = 3
) -> tuple[str, int, int]:
    """``(path, nh, qrows)``: the path (§3.3) and how the state is grouped so that it fits FP SRAM.

    Per-head path: head batches of ``nh = min(ratio, room // (3*M))`` heads (§3.5); when not even one
    head's M rows fit, one head and q tiles of ``qrows < M`` rows. Batched path: all ``ratio`` heads,
    q tiles of ``qrows`` rows. ``auto`` takes the batched path whenever it is legal and its state fits
    whole M-row tiles (§3.3); otherwise the path whose score stage needs fewer matrix MACs (the batched
    path recomputes all M rows of M_BTMM for every q-row group).  ``w`` words per q row and head: 3, and 2 per
    split-KV accumulator level; with accumulators a q tile holds at most ``q_len`` rows (decode: one)."""
    M, B, Pv = cfg.MLEN, cfg.BLEN, cfg.P_V
    quantum = B if B <= M else Pv
    rows_needed = min(M, q_len)
    R = M if w == 3 else rows_needed  # the rows of a full q tile's state

    def per_head() -> tuple[int, int]:
        nh = min(ratio, room // (w * R)) if room >= w * R else 0
        if nh >= 1:
            return nh, R
        return 1, _row_groups(room, 1, R, quantum, w)

    def batched() -> tuple[int, int]:
        if w * R * ratio <= room:
            return ratio, R
        return ratio, _row_groups(room, ratio, R, quantum, w)

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
        if b[2] >= rows_needed or b[2] == R or ph[2] < 1 or (b[2] >= 1 and macs(*b) <= macs(*ph)):
            choice = b
        else:
            choice = ph
    the_path, nh, qrows = choice
    if qrows < 1:
        fail(
            K,
            "fp_state_base",
            F,
            f"leaves {room} FP SRAM words: the online-softmax state needs {w} words per "
            f"q row and head (FP_SRAM_SIZE={cfg.FP_SRAM_SIZE}); the largest fp_state_base that fits is "
            f"{cfg.FP_SRAM_SIZE - w}",
        )
    return the_path, nh, qrows


class FpState(NamedTuple):
    """The path (§3.3) and the online-softmax state layout in FP SRAM (§3.5)."""

    path: str  # "batched" | "per_head"
    nh: int  # heads per head batch
    qrows: int  # query rows per q tile
    base: int  # fp_state_base (0 for attention_scores)
    size: int  # words of state (0 for attention_scores)
    chunk_tiles: int = 0  # split-KV (merge.py): kv tiles per chunk, states per accumulator (0: one chunk)
    levels: int = 0  # accumulator levels of the chunk tree (0: no merge)


def _chunking(pb: Problem, kv_chunk_tiles: int | None) -> tuple[int, int]:
    """``(T, levels)`` of split-KV (:mod:`.merge`): T from the datapath format unless ``kv_chunk_tiles`` says
    otherwise (0: never split); ``(0, 0)`` when every block's kv tiles fit one chunk."""
    if not pb.flash:
        return 0, 0
    T = chunk_tiles(pb.cfg) if kv_chunk_tiles is None else need_int(pb.kernel, "kv_chunk_tiles", kv_chunk_tiles, 0)
    if T == 1:
        fail(pb.kernel, "kv_chunk_tiles", T, "must be 0 (never split) or >= 2")
    levels = merge_levels(pb.Tk, T)
    return (T, levels) if levels else (0, 0)


def plan_fp_state(
    pb: Problem,
    path: str,
    fp_state_base: int,
    fp_reserved: Mapping[str, tuple[int, int]] | None,
    kv_chunk_tiles: int | None = None,
) -> FpState:
    """The path and FP state (§3.5, §3.3). attention_scores keeps no state: all ``ratio`` heads, M-row tiles."""
    K, cfg = pb.kernel, pb.cfg
    if not pb.flash:
        the_path = "batched" if (path == "batched" or (path == "auto" and pb.legal)) else "per_head"
        return FpState(the_path, pb.ratio, cfg.MLEN, 0, 0)
    F = fp_state_base
    need_int(K, "fp_state_base", F, 0)
    if mutation_hooks.active("fp_state_overlap"):
        F = 3  # mutation: state over the constants, no range check
    elif F < 16:
        fail(K, "fp_state_base", F, "must be >= 16 (slots 0-15 are constants)")
    room = cfg.FP_SRAM_SIZE - F
    T, levels = _chunking(pb, kv_chunk_tiles)
    w = 3 + 2 * levels  # m, m_res, l; m and l of every accumulator
    the_path, nh, qrows = _choose_path(K, cfg, path, pb.legal, pb.ratio, pb.nc, room, pb.q_len, F, w)
    fp_size = w * qrows * nh
    if not mutation_hooks.active("fp_state_overlap"):
        check_fp_range(K, F, fp_size, cfg, dict(fp_reserved or {}))
    return FpState(the_path, nh, qrows, F, fp_size, T, levels)
