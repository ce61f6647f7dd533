"""The numba-free layout of the HBM timing model: state and scratch slots, the DMA geometry of the H_*
instructions (memory.md §5.2) and the host bytes each array takes.

One job: what :mod:`.timing` (the kernels) and the host-memory check of :mod:`plena_sim.config.hardware` must
agree on, in a module that does not import numba (a config is validated before the simulator core is loaded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .presets import TimingParams

# --------------------------------------------------------------------------- state slots

# channel state columns
CH_COL_LAST = 0
CH_BG_LAST = 1
CH_BUS_FREE = 2
CH_N = 3
# bank state columns
BK_OPEN_ROW = 0
BK_COL_READY = 1
BK_PRE_OK = 2
BK_N = 3
# statistics slots
HST_READ_REQUESTS = 0
HST_WRITE_REQUESTS = 1
HST_ROW_HITS = 2
HST_ROW_MISSES = 3
HST_ROW_CONFLICTS = 4
HST_DMA_INSTRUCTIONS = 5
HST_DMA_CYCLES = 6
HST_CHANNEL_BASE = 7
# scratch rows of ``work``
W_SLOT = 0  # dma_requests: hash slot of each distinct block (for clearing)
W_CH = 1  # dma_latency: channel of request i
W_BANK = 2  # bank index bg*banks_per_group + bank of request i
W_ROW = 3  # DRAM row of request i
W_ORDER = 4  # service order (request indices)
W_TMP = 5  # merge-sort buffer
W_CHSTART = 6  # per-channel segment starts (channels + 1 entries)
W_N = 7
# DMA geometry columns and opcodes
G_ROWS = 0
G_ELEM_LEN = 1
G_SCALE_DIV = 2
G_SCALE_MUL = 3
G_SCALE_LEN = 4
G_IS_WRITE = 5
G_N = 6
DMA_PREFETCH_M = 0
DMA_PREFETCH_V = 1
DMA_STORE_V = 2

#: "-inf" for times (ps); |NEG_INF| leaves > 2^62 of headroom below int64 min
NEG_INF = -(1 << 62)
#: empty slot marker of the coalescing hash set (block indices are >= 0)
EMPTY = -(1 << 63)


def timing_state_bytes(params: TimingParams) -> int:
    """Host bytes of the cold HBM state (:func:`~plena_sim.hbm.timing.new_timing_state`) and its statistics."""
    return 8 * (params.channels * CH_N + params.channels * params.banks * BK_N + HST_CHANNEL_BASE + params.channels)


def dma_scratch_bytes(max_blocks: int, channels: int) -> int:
    """Host bytes of a DMA scratch for ``max_blocks`` blocks (:func:`~plena_sim.hbm.timing.new_dma_scratch`,
    and the one-off scratch the run loop makes for a larger instruction)."""
    nb = max(1, int(max_blocks))
    size = 16
    while size < 2 * nb:
        size *= 2
    return 8 * (nb + size + W_N * max(nb, channels + 1))


def range_blocks_bound(length: int, burst: int) -> int:
    """Most blocks a byte range of ``length`` bytes can overlap."""
    return 0 if length <= 0 else (length + burst - 1) // burst + 1


def dma_blocks_by_op(cfg, params: TimingParams) -> dict[int, int]:
    """Upper bound of the distinct blocks of one instruction of each DMA op (either precision) under ``cfg``."""
    table = dma_geometry_table(cfg)
    out = {}
    for op in range(3):
        most = 1
        for prec in range(2):
            g = table[op, prec]
            per_row = range_blocks_bound(int(g[G_ELEM_LEN]), params.burst_bytes) + range_blocks_bound(
                int(g[G_SCALE_LEN]), params.burst_bytes
            )
            most = max(most, int(g[G_ROWS]) * per_row)
        out[op] = most
    return out


def max_dma_blocks(cfg, params: TimingParams) -> int:
    """Upper bound of the distinct blocks of any H_* instruction under ``cfg`` (scratch sizing)."""
    return max(dma_blocks_by_op(cfg, params).values())


@dataclass(frozen=True)
class DmaGeometry:
    """The per-opcode, per-precision byte geometry of an H_* instruction (memory.md §5.2)."""

    rows: int  # P
    elem_len: int  # L * eb  (also the pitch when f.rs3 == 0)
    scale_div: int  # eb * k (MX) ; 1 for Plain
    scale_mul: int  # sb (MX) ; 0 for Plain
    scale_len: int  # (L / k) * sb (MX) ; 0 for Plain
    is_write: bool

    def as_array(self) -> np.ndarray:
        g = np.zeros(G_N, dtype=np.int64)
        g[G_ROWS], g[G_ELEM_LEN], g[G_SCALE_DIV] = self.rows, self.elem_len, self.scale_div
        g[G_SCALE_MUL], g[G_SCALE_LEN], g[G_IS_WRITE] = self.scale_mul, self.scale_len, int(self.is_write)
        return g


def dma_geometry(cfg, op: int, prec: int) -> DmaGeometry:
    """Geometry of ``op`` (DMA_PREFETCH_M / DMA_PREFETCH_V / DMA_STORE_V) with f.funct1 = ``prec``."""
    if op == DMA_PREFETCH_M:
        tname = "HBM_M_WEIGHT_TYPE" if prec == 0 else "HBM_M_KV_TYPE"
        length, rows = cfg.MLEN, cfg.P_M
    elif op in (DMA_PREFETCH_V, DMA_STORE_V):
        tname = "HBM_V_ACT_TYPE" if prec == 0 else "HBM_V_KV_TYPE"
        length, rows = cfg.VLEN, (cfg.P_V if op == DMA_PREFETCH_V else cfg.P_W)
    else:
        raise ValueError(f"unknown DMA op {op!r}")
    t = cfg.hbm_type(tname)
    eb = t.elem_bytes
    if t.is_mx:
        k, sb = t.block, t.scale_bytes
        return DmaGeometry(rows, length * eb, eb * k, sb, (length // k) * sb, op == DMA_STORE_V)
    return DmaGeometry(rows, length * eb, 1, 0, 0, op == DMA_STORE_V)


def dma_geometry_table(cfg) -> np.ndarray:
    """int64[3, 2, G_N]: :func:`dma_geometry` for every (op, prec)."""
    out = np.zeros((3, 2, G_N), dtype=np.int64)
    for op in range(3):
        for prec in range(2):
            out[op, prec] = dma_geometry(cfg, op, prec).as_array()
    return out
