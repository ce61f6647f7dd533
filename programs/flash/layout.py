"""Where flash attention's data lies (kernels.md §1.7, §3.4, §3.5): the VRAM output and scratch items, the
MRAM tiles, and how many elements the Q and K/V tensors must allocate (the slack of the last prefetch
included), with the 32-bit address limits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..common import Region, check_disjoint, fail, need_int
from ..hbm_tensors import HbmTensor, ceil_div, round_up, row_pad
from .plan import Block
from .problem import Problem
from .state import FpState

__all__ = ["VramLayout", "plan_vram", "check_mram", "kv_alloc_elems", "q_alloc_elems", "check_hbm"]


_U32 = 1 << 32


class VramLayout(NamedTuple):
    """The VRAM layout (§3.5): output pitch and blocks, scratch item addresses, declared regions."""

    rows_o_p: int
    o_blocks: int
    rows: dict[str, int]
    regions: dict[str, Region]


def check_mram(pb: Problem, mram_tile0: int) -> None:
    """K chunks (and V chunks for flash attention) from ``mram_tile0`` must fit MRAM."""
    need_int(pb.kernel, "mram_tile0", mram_tile0, 0)
    n_tiles = 2 * pb.nc if pb.flash else pb.nc
    if mram_tile0 + n_tiles > pb.cfg.mram_tiles:
        fail(pb.kernel, "mram_tile0", mram_tile0, f"+ {n_tiles} tiles exceeds the {pb.cfg.mram_tiles} MRAM tiles")


def _check_vram_bases(pb: Problem, o_base: int, scratch_base: int) -> None:
    K, V = pb.kernel, pb.cfg.VLEN
    need_int(K, "o_base", o_base, 0)
    need_int(K, "scratch_base", scratch_base, 0)
    if o_base % V:
        fail(K, "o_base" if pb.flash else "s_out", o_base, f"must be a multiple of VLEN={V}")
    if scratch_base % V:
        fail(K, "scratch_base", scratch_base, f"must be a multiple of VLEN={V}")


def _output_rows(pb: Problem, o_rows_p: int | None, Tq: int) -> tuple[int, int, int]:
    """``(rows_o_p, o_blocks, o_rows)``: O is CBM with ``o_blocks`` column blocks of ``rows_o_p`` rows;
    attention_scores writes ``batch*hq*Tq*Tk`` M×M tiles (no pitch, no blocks)."""
    cfg = pb.cfg
    if not pb.flash:
        return 0, 0, pb.batch * pb.hq * Tq * pb.Tk * cfg.MLEN
    RP = row_pad(cfg)
    rows_o_p = round_up(pb.batch * pb.q_len, RP) if o_rows_p is None else o_rows_p
    need_int(pb.kernel, "o_rows_p", rows_o_p, 1)
    if rows_o_p < pb.batch * pb.q_len or rows_o_p % RP:
        fail(pb.kernel, "o_rows_p", rows_o_p, f"must be >= batch*q_len={pb.batch * pb.q_len} and a multiple of {RP}")
    o_blocks = ceil_div(pb.hq * pb.d, cfg.VLEN)
    return rows_o_p, o_blocks, o_blocks * rows_o_p


def _scratch_items(pb: Problem, st: FpState) -> list[tuple[str, int]]:
    """Rows of each scratch item, in layout order (§3.5): NEG, KEEP, MASK, the Q slots, S, PV, the split-KV
    accumulators' O rows."""
    M, V, BA = pb.cfg.MLEN, pb.cfg.VLEN, pb.cfg.BROADCAST_AMOUNT
    batched = st.path == "batched"
    return [
        ("neg", 1 if pb.flash else 0),
        ("keep", 1 if (st.path == "per_head" and pb.d < V) else 0),
        ("mask", M if pb.flash else 0),
        ("q", M if batched else st.nh * pb.nc * M),
        ("s", (BA if pb.decode else BA * M) if batched else M),
        ("pv", pb.nc * M if pb.flash else 0),
        ("merge", st.levels * st.nh * pb.nc * st.qrows),  # split-KV accumulators' O rows (merge.py)
    ]


def _check_vram_fit(
    pb: Problem,
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
        fail(K, "scratch_base", scratch_base, f"scratch rows end at {scratch_end} > VECTOR_SRAM_SIZE={size}")
    if o_base // V + o_rows > size:
        fail(K, "o_base", o_base, f"output rows end at {o_base // V + o_rows} > VECTOR_SRAM_SIZE")
    try:
        check_disjoint(K, regions)
    except ValueError as exc:
        fail(K, "scratch_base", scratch_base, f"(with o_base={o_base}): {str(exc).split(': ', 1)[1]}")
    for name, a in rows_addr.items():
        if a >= _U32:
            fail(K, "scratch_base", scratch_base, f"scratch item {name} at element {a} is not < 2^32")
    if o_base + o_rows * V >= _U32:
        fail(K, "o_base", o_base, "output region must lie below element 2^32")


def plan_vram(pb: Problem, st: FpState, o_base: int, o_rows_p: int | None, scratch_base: int, Tq: int) -> VramLayout:
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
    return VramLayout(rows_o_p, o_blocks, rows_addr, regions)


def kv_alloc_elems(pb: Problem) -> int:
    """Elements K and V must each allocate: the cache, or up to the last element any tile prefetch may
    read (§1.7, §3.4), in whole rows of Wp."""
    M, R, Wp = pb.cfg.MLEN, pb.R, pb.Wp
    base_last = (pb.batch - 1) * pb.S_cap * Wp if pb.kv_layout == "bshd" else (pb.batch - 1) * Wp
    kv_last = base_last + (pb.Tk - 1) * M * R + (pb.hkv - 1) * pb.d + (pb.nc - 1) * M + (M - 1) * R + M - 1
    kv_alloc = max(kv_last + 1, pb.batch * pb.S_cap * Wp)
    return round_up(kv_alloc, Wp)


def q_alloc_elems(pb: Problem, path: str, blocks: Sequence[Block]) -> int:
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


def check_hbm(
    pb: Problem, q: HbmTensor | None, k: HbmTensor | None, eb_q: int, eb_kv: int, q_alloc: int, kv_alloc: int
) -> None:
    """32-bit byte offsets, and tensors that allocate at least what the plan reads."""
    K = pb.kernel
    if kv_alloc * eb_kv >= _U32:
        fail(K, "kv_len", pb.kv_len, f"K/V byte offsets reach {kv_alloc * eb_kv} >= 2^32")
    if q_alloc * eb_q >= _U32:
        fail(K, "q_len", pb.q_len, f"Q byte offsets reach {q_alloc * eb_q} >= 2^32")
    if q is not None and q.alloc_elems < q_alloc:
        fail(
            K,
            "q.alloc_elems",
            q.alloc_elems,
            f"must be >= {q_alloc} (rows, plus the slack of the last Pv-row, V-wide prefetch)",
        )
    if k is not None and k.alloc_elems < kv_alloc:
        fail(
            K, "k.alloc_elems", k.alloc_elems, f"must be >= {kv_alloc} (cache plus the slack of the last tile prefetch)"
        )
