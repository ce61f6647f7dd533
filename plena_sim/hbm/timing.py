"""HBM timing model (timing.md §5): address mapping and the per-instruction DMA scheduler.

One job: the latency of one H_* instruction (H_PREFETCH_M, H_PREFETCH_V, H_STORE_V) given the bytes
it touches (memory.md §5.2), the HBM state left by earlier instructions and its start cycle. The
parameters come from a validated preset, :class:`~plena_sim.hbm.presets.TimingParams` (preset files,
loading and validation live in :mod:`plena_sim.hbm.presets`; :func:`timing_params` and
:class:`TimingParams` are importable from here too, for the callers of the scheduler).

Python side
-----------
* :func:`new_timing_state` ``(params) -> (ch_state, bank_state)``; :func:`new_stats` ``(params)``;
  :func:`new_dma_scratch` ``(params, max_blocks) -> (blocks, hset, work)``;
  :func:`max_dma_blocks` ``(cfg, params)``: an upper bound of the blocks of any H_* instruction.
* :func:`map_address` ``(params, addr) -> AddressFields`` (timing.md §5.2, pure Python).
* :func:`dma_geometry` ``(cfg, op, prec) -> DmaGeometry`` and :func:`dma_geometry_table` ``(cfg) ->
  int64[3, 2, G_N]`` (memory.md §5.2 per opcode ``DMA_PREFETCH_M/DMA_PREFETCH_V/DMA_STORE_V`` and
  ``prec`` = f.funct1 in {0, 1}); :func:`dma_row_ranges` and :func:`dma_blocks_py` (pure Python).
* :func:`schedule_py` ``(params, state, blocks, is_write, t0_cycle, stats=None) -> int`` -- the
  pure-Python twin of the scheduler (a clear, independent transcription of §5.3/§5.4 over a
  :class:`PyTimingState`; ``stats`` from :func:`new_stats_py`), used as the test oracle and by the
  reference interpreter; ``PyTimingState.to_arrays()`` gives the Numba layout for comparison.
* :class:`HbmTimer` -- a small Python convenience wrapper owning params, state, stats and scratch.

Numba side (all plain ``@njit(cache=True)`` functions; no allocation)
--------------------------------------------------------------------
``p`` is ``params.as_array()`` (int64[PRM_N]); the ``PRM_*`` slot constants of
:mod:`plena_sim.hbm.presets` index it.

* ``dma_requests(p, base, off0, pitch, rows, elem_len, scale_base, scale_div, scale_mul, scale_len,
  blocks, hset, work, stop) -> n``: fills ``blocks[:n]`` with the distinct ``burst_bytes`` block indices
  (``addr div burst_bytes``) of the instruction in generation order (timing.md §5.3): row i (0 <= i <
  rows) has ``o_i = off0 + i*pitch``, element range ``[base + o_i, +elem_len)`` and, if ``scale_len >
  0``, scale range ``[scale_base + (o_i div scale_div)*scale_mul, +scale_len)`` (``scale_base = base +
  SCALE``); per row the element blocks ascending, then the scale blocks ascending; a block already
  produced is skipped. Returns :data:`DMA_FULL` (-1) if ``blocks`` is too small (``blocks`` content is
  then undefined; ``hset`` is left clean) and :data:`DMA_STOPPED` (-2) when the stop flag ``stop``
  (uint8, :mod:`plena_sim.limits.stop`) is set between two rows (``hset`` clean, nothing else changed).
  Preconditions: every byte address >= 0 (the BD-HBM check ran first); ``hset`` from
  :func:`new_dma_scratch` (all ``EMPTY``; it is restored to all ``EMPTY`` on return, only the used slots
  are touched).
* ``dma_latency(p, ch_state, bank_state, blocks, n_blocks, is_write, t0_cycle, stats, work) ->
  latency_cycles``: schedules the requests ``blocks[:n_blocks]`` (reads if ``is_write == 0``) of one
  instruction starting at accelerator cycle ``t0_cycle`` (timing.md §5.4, with the FR-FCFS service order of
  the erratum in docs/hbm.md: per-bank queues in (row, first appearance) order; the channel serves the
  earliest-listed head whose bank is ready, else the head ready soonest), updates ``ch_state``,
  ``bank_state`` and ``stats`` in place and returns ``max(1, ceil((end - t0) / 1000))``.
  Preconditions: the blocks are distinct (as ``dma_requests`` produces them), ``t0_cycle >= 0``,
  ``n_blocks <= work.shape[1]`` (``blocks``/``work`` from one :func:`new_dma_scratch` call).
* ``dma_blocks(p, geom, base, off0, pitch, scale_reg, blocks, hset, work, stop) -> n``: ``dma_requests``
  of one instruction, with ``geom = dma_geometry_table(cfg)[op, prec]`` (int64[G_N]); ``pitch`` is STRIDE
  if f.rs3 == 1 else ``geom[G_ELEM_LEN]``; ``scale_reg`` = the SCALE register.
* ``dma_instruction(p, geom, base, off0, pitch, scale_reg, t0_cycle, ch_state, bank_state, stats,
  blocks, hset, work, stop) -> latency_cycles`` (``DMA_FULL`` / ``DMA_STOPPED`` as ``dma_requests``,
  nothing changed then): ``dma_blocks`` then ``dma_latency``.
* ``dma_payload_bytes(geom) -> rows * (elem_len + scale_len)``.
* ``block_fields(p, blk) -> (channel, bank_group, column, bank, row)``; ``block_channel(p, blk)``.

Scalar arguments may be any integer type (they are converted to int64 on entry, so a uint32 register
value never turns the arithmetic into float64); ``is_write`` is an integer (0 = read).

Array layouts (all int64, C-contiguous):

* ``ch_state[channels, CH_N]``: ``CH_COL_LAST``, ``CH_BG_LAST`` (-1 = none yet), ``CH_BUS_FREE``.
* ``bank_state[channels, bank_groups*banks_per_group, BK_N]``: bank index ``bg*banks_per_group +
  bank``; ``BK_OPEN_ROW`` (-1 = closed), ``BK_COL_READY``, ``BK_PRE_OK``.
  Times are picoseconds; "-inf" is ``NEG_INF = -2**62`` (adding or subtracting any parameter cannot
  overflow, and every stored time is then overwritten by a value >= t0 >= 0 on first use).
* ``stats[HST_CHANNEL_BASE + channels]``: ``HST_READ_REQUESTS``, ``HST_WRITE_REQUESTS``, ``HST_ROW_HITS``,
  ``HST_ROW_MISSES``, ``HST_ROW_CONFLICTS``, ``HST_DMA_INSTRUCTIONS`` (calls of dma_latency),
  ``HST_DMA_CYCLES`` (sum of returned latencies), then one request count per channel.
* ``blocks[max_blocks]``; ``hset[T]`` with ``T`` a power of two >= 2*max_blocks, filled with ``EMPTY``;
  ``work[W_N, max(max_blocks, channels + 1)]`` (rows ``W_SLOT``, ``W_CH``, ``W_BANK``, ``W_ROW``,
  ``W_ORDER``, ``W_TMP``, ``W_CHSTART``; once the channel sort is done, ``W_SLOT``, ``W_CH`` and ``W_TMP``
  hold the bank queues of the FR-FCFS service; contents are scratch, nothing persists between calls).
* ``geom[G_N]``: ``G_ROWS``, ``G_ELEM_LEN``, ``G_SCALE_DIV``, ``G_SCALE_MUL``, ``G_SCALE_LEN`` (0 =
  Plain), ``G_IS_WRITE``.

Units: t0 = start_cycle x 1000 ps (one accelerator cycle is 1 ns, timing.md header); preset timing
parameters are multiplied by ``tCK_ps``; the result is converted back with a ceiling division by
:data:`ACCEL_CYCLE_PS` = 1000 (not by tCK_ps: the two coincide only for HBM2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from ..limits.polling import stop_requested
from .layout import (  # re-exported: the kernels' slots and the DMA geometry
    BK_COL_READY,
    BK_N,
    BK_OPEN_ROW,
    BK_PRE_OK,
    CH_BG_LAST,
    CH_BUS_FREE,
    CH_COL_LAST,
    CH_N,
    DMA_PREFETCH_M,
    DMA_PREFETCH_V,
    DMA_STORE_V,
    EMPTY,
    G_ELEM_LEN,
    G_IS_WRITE,
    G_N,
    G_ROWS,
    G_SCALE_DIV,
    G_SCALE_LEN,
    G_SCALE_MUL,
    HST_CHANNEL_BASE,
    HST_DMA_CYCLES,
    HST_DMA_INSTRUCTIONS,
    HST_READ_REQUESTS,
    HST_ROW_CONFLICTS,
    HST_ROW_HITS,
    HST_ROW_MISSES,
    HST_WRITE_REQUESTS,
    NEG_INF,
    W_BANK,
    W_CH,
    W_CHSTART,
    W_N,
    W_ORDER,
    W_ROW,
    W_SLOT,
    W_TMP,
    DmaGeometry,
    dma_geometry,
    dma_geometry_table,
    max_dma_blocks,
    range_blocks_bound,
)
from .presets import (
    ACCEL_CYCLE_PS,
    PRM_BANK_GROUPS,
    PRM_BANKS_PER_GROUP,
    PRM_BB,
    PRM_BURST_BYTES,
    PRM_CB,
    PRM_CH_XOR_SHIFT,
    PRM_CH_XOR_TERMS,
    PRM_CHANNELS,
    PRM_GB,
    PRM_KB,
    PRM_TBL_PS,
    PRM_TCCD_L_PS,
    PRM_TCCD_S_PS,
    PRM_TCL_PS,
    PRM_TCWL_PS,
    PRM_TRAS_PS,
    PRM_TRCD_PS,
    PRM_TRP_PS,
    PRM_TRTP_PS,
    PRM_TWR_PS,
    TIMING_KEYS,
    TimingParams,
    timing_params,
)

__all__ = [
    "G_N",
    "NEG_INF",
    "EMPTY",
    "DMA_FULL",
    "DMA_STOPPED",
    "TimingParams",
    "timing_params",
    "AddressFields",
    "DmaGeometry",
    "PyTimingState",
    "HbmTimer",
    "new_timing_state",
    "new_stats",
    "new_dma_scratch",
    "max_dma_blocks",
    "stats_dict",
    "map_address",
    "dma_geometry",
    "dma_geometry_table",
    "dma_row_ranges",
    "dma_blocks_py",
    "schedule_py",
    "new_stats_py",
    "block_fields",
    "block_channel",
    "dma_blocks",
    "dma_requests",
    "dma_latency",
    "dma_instruction",
    "dma_payload_bytes",
    "DMA_PREFETCH_M",
    "DMA_PREFETCH_V",
    "DMA_STORE_V",
]


#: ``dma_requests`` / ``dma_blocks`` / ``dma_instruction`` results that are not a count: the scratch is too small;
#: the stop flag was set (:mod:`plena_sim.limits.stop`)
DMA_FULL = -1
DMA_STOPPED = -2


def _params_of(params) -> TimingParams:
    if isinstance(params, TimingParams):
        return params
    raise TypeError(f"expected TimingParams, got {type(params).__name__}")


# --------------------------------------------------------------------------- state / scratch


def new_timing_state(params: TimingParams) -> tuple[np.ndarray, np.ndarray]:
    """Cold HBM: ``(ch_state int64[channels, CH_N], bank_state int64[channels, banks, BK_N])``."""
    p = _params_of(params)
    ch = np.full((p.channels, CH_N), NEG_INF, dtype=np.int64)
    ch[:, CH_BG_LAST] = -1
    bk = np.full((p.channels, p.banks, BK_N), NEG_INF, dtype=np.int64)
    bk[:, :, BK_OPEN_ROW] = -1
    return ch, bk


def new_stats(params: TimingParams) -> np.ndarray:
    """Zeroed int64[HST_CHANNEL_BASE + channels] statistics vector."""
    return np.zeros(HST_CHANNEL_BASE + _params_of(params).channels, dtype=np.int64)


def stats_dict(stats: np.ndarray) -> dict[str, Any]:
    """Statistics vector -> dict with timing.md §6 ``hbm.*`` names (requests, hits, per channel)."""
    s = [int(x) for x in stats]
    return {
        "read_requests": s[HST_READ_REQUESTS],
        "write_requests": s[HST_WRITE_REQUESTS],
        "row_hits": s[HST_ROW_HITS],
        "row_misses": s[HST_ROW_MISSES],
        "row_conflicts": s[HST_ROW_CONFLICTS],
        "dma_instructions": s[HST_DMA_INSTRUCTIONS],
        "dma_cycles": s[HST_DMA_CYCLES],
        "per_channel_requests": s[HST_CHANNEL_BASE:],
    }


def new_dma_scratch(params: TimingParams, max_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scratch for instructions of at most ``max_blocks`` distinct blocks: ``(blocks, hset, work)``."""
    p = _params_of(params)
    max_blocks = max(1, int(max_blocks))
    size = 16
    while size < 2 * max_blocks:
        size *= 2
    blocks = np.zeros(max_blocks, dtype=np.int64)
    hset = np.full(size, EMPTY, dtype=np.int64)
    work = np.zeros((W_N, max(max_blocks, p.channels + 1)), dtype=np.int64)
    return blocks, hset, work


def dma_row_ranges(
    geom: DmaGeometry, base: int, off0: int, pitch: int, scale_reg: int = 0
) -> list[tuple[int, int, int, int]]:
    """Per row i: ``(elem_start, elem_len, scale_start, scale_len)`` (scale_len 0 for Plain)."""
    out = []
    for i in range(geom.rows):
        o = off0 + i * pitch
        if geom.scale_len > 0:
            s = base + scale_reg + (o // geom.scale_div) * geom.scale_mul
        else:
            s = 0
        out.append((base + o, geom.elem_len, s, geom.scale_len))
    return out


def dma_blocks_py(params: TimingParams, ranges: Sequence[tuple[int, int, int, int]]) -> list[int]:
    """Distinct block indices in generation order (timing.md §5.3) of the byte ranges of the rows."""
    bb = _params_of(params).burst_bytes
    seen: set[int] = set()
    out: list[int] = []
    for es, el, ss, sl in ranges:
        for start, length in ((es, el), (ss, sl)):
            if length <= 0:
                continue
            for blk in range(start // bb, (start + length - 1) // bb + 1):
                if blk not in seen:
                    seen.add(blk)
                    out.append(blk)
    return out


# --------------------------------------------------------------------------- address mapping (§5.2), Python


@dataclass(frozen=True)
class AddressFields:
    channel: int
    bank_group: int
    column: int
    bank: int
    row: int


def map_address(params: TimingParams, addr: int) -> AddressFields:
    """DRAM coordinates of byte address ``addr`` (timing.md §5.2)."""
    p = _params_of(params)
    blk = addr // p.burst_bytes
    cb = p.channels.bit_length() - 1
    gb = p.bank_groups.bit_length() - 1
    kb = (p.row_bytes // p.burst_bytes).bit_length() - 1
    bb = p.banks_per_group.bit_length() - 1
    channel = 0
    for t in range(p.ch_xor_terms):
        channel ^= (blk >> (t * p.ch_xor_shift)) % p.channels
    return AddressFields(
        channel=channel,
        bank_group=(blk >> cb) % p.bank_groups,
        column=(blk >> (cb + gb)) % (1 << kb),
        bank=(blk >> (cb + gb + kb)) % p.banks_per_group,
        row=blk >> (cb + gb + kb + bb),
    )


# --------------------------------------------------------------------------- pure-Python twin (§5.4)


class PyTimingState:
    """HBM state for :func:`schedule_py`: per channel a dict and per bank a dict; -inf is a float."""

    def __init__(self, params: TimingParams):
        p = _params_of(params)
        self.channels = [{"col_last": -math.inf, "bg_last": None, "bus_free": -math.inf} for _ in range(p.channels)]
        self.banks = [
            {
                (g, b): {"open_row": -1, "col_ready": -math.inf, "pre_ok": -math.inf}
                for g in range(p.bank_groups)
                for b in range(p.banks_per_group)
            }
            for _ in range(p.channels)
        ]
        self._bpg = p.banks_per_group

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The same state in the Numba layout (-inf -> NEG_INF, bg_last None -> -1)."""

        def t(x):
            return NEG_INF if x == -math.inf else int(x)

        ch = np.array(
            [[t(c["col_last"]), -1 if c["bg_last"] is None else c["bg_last"], t(c["bus_free"])] for c in self.channels],
            dtype=np.int64,
        ).reshape(len(self.channels), CH_N)
        nb = len(self.banks[0])
        bk = np.zeros((len(self.channels), nb, BK_N), dtype=np.int64)
        for c, banks in enumerate(self.banks):
            for (g, b), s in banks.items():
                bk[c, g * self._bpg + b] = (s["open_row"], t(s["col_ready"]), t(s["pre_ok"]))
        return ch, bk


def _bank_open_py(bank: dict, row: int, t0: float, ps: dict) -> tuple[str, float, float | None]:
    """``(kind, ready, t_act)`` of a request to DRAM ``row`` of ``bank`` (timing.md §5.4; t_act = None on a hit)."""
    if bank["open_row"] == row:
        return "row_hits", bank["col_ready"], None
    if bank["open_row"] == -1:
        t_act = t0
        kind = "row_misses"
    else:
        t_act = max(t0, bank["pre_ok"]) + ps["tRP"]
        kind = "row_conflicts"
    return kind, t_act + ps["tRCD"], t_act


def _pick_py(queues: dict, heads_ready: dict, ch: dict, t0: float, lat: float, ps: dict) -> tuple[int, int]:
    """FR-FCFS: the bank queue whose head is served next -- the earliest-listed head whose bank is ready by
    the time the channel could issue it; if none is, the head with the earliest ready time."""

    def rank(key: tuple[int, int]) -> tuple:
        row, seq = queues[key][0][0], queues[key][0][1]
        ccd = ps["tCCD_L"] if key[0] == ch["bg_last"] else ps["tCCD_S"]
        slot = max(t0, ch["col_last"] + ccd, ch["bus_free"] - lat)
        ready = heads_ready[key]
        return (0, 0, row, seq) if ready <= slot else (1, ready, row, seq)

    return min(queues, key=rank)


def schedule_py(
    params: TimingParams,
    state: PyTimingState,
    blocks: Sequence[int],
    is_write: bool,
    t0_cycle: int,
    stats: dict | None = None,
) -> int:
    """Latency in cycles of one instruction issuing ``blocks`` (distinct block indices in generation
    order) at ``t0_cycle`` -- timing.md §5.3/§5.4 (with the FR-FCFS erratum, docs/hbm.md) transcribed
    literally. Updates ``state`` and, if given, ``stats`` (keys as :func:`stats_dict`)."""
    p = _params_of(params)
    ps = {k: getattr(p, k) * p.tCK_ps for k in TIMING_KEYS}
    t0 = t0_cycle * ACCEL_CYCLE_PS
    by_channel: dict[int, list] = {}
    for seq, blk in enumerate(blocks):
        f = map_address(p, blk * p.burst_bytes)
        by_channel.setdefault(f.channel, []).append((f.row, seq, f.bank_group, f.bank))
    lat = ps["tCWL"] if is_write else ps["tCL"]
    end = t0
    for c in sorted(by_channel):
        ch = state.channels[c]
        queues: dict[tuple[int, int], list] = {}  # per bank, in (row, first appearance) order
        for req in sorted(by_channel[c]):
            queues.setdefault((req[2], req[3]), []).append(req)
        heads_ready = {key: _bank_open_py(state.banks[c][key], q[0][0], t0, ps)[1] for key, q in queues.items()}
        while queues:
            key = _pick_py(queues, heads_ready, ch, t0, lat, ps)
            row, _seq, bg, _b = queues[key].pop(0)
            bank = state.banks[c][key]
            kind, ready, t_act = _bank_open_py(bank, row, t0, ps)
            if t_act is not None:
                bank["open_row"] = row
                bank["col_ready"] = ready
                bank["pre_ok"] = max(bank["pre_ok"], t_act + ps["tRAS"])
            ccd = ps["tCCD_L"] if bg == ch["bg_last"] else ps["tCCD_S"]
            t_col = max(t0, ready, ch["col_last"] + ccd, ch["bus_free"] - lat)
            d_end = t_col + lat + ps["tBL"]
            ch["col_last"], ch["bg_last"], ch["bus_free"] = t_col, bg, d_end
            bank["pre_ok"] = max(bank["pre_ok"], d_end + ps["tWR"] if is_write else t_col + ps["tRTP"])
            end = max(end, d_end)
            if queues[key]:
                heads_ready[key] = _bank_open_py(bank, queues[key][0][0], t0, ps)[1]
            else:
                del queues[key]
            if stats is not None:
                stats[kind] += 1
                stats["per_channel_requests"][c] += 1
    latency = max(1, -(-(end - t0) // ACCEL_CYCLE_PS))
    if stats is not None:
        stats["write_requests" if is_write else "read_requests"] += len(blocks)
        stats["dma_instructions"] += 1
        stats["dma_cycles"] += latency
    return latency


def new_stats_py(params: TimingParams) -> dict[str, Any]:
    """Zeroed statistics dict for :func:`schedule_py`."""
    d = stats_dict(new_stats(params))
    return d


# --------------------------------------------------------------------------- Numba kernels


@njit(cache=True)
def block_channel(p, blk):
    """Channel of block ``blk`` (>= 0): XOR of ch_xor_terms fields (timing.md §5.2)."""
    mask = p[PRM_CHANNELS] - 1
    shift = p[PRM_CH_XOR_SHIFT]
    ch = np.int64(0)
    for t in range(p[PRM_CH_XOR_TERMS]):
        s = t * shift
        if s >= 63:
            break  # blk >> s == 0 for every non-negative int64
        ch ^= (blk >> s) & mask
    return ch


@njit(cache=True)
def block_fields(p, blk):
    """``(channel, bank_group, column, bank, row)`` of block ``blk`` (timing.md §5.2)."""
    cb = p[PRM_CB]
    gb = p[PRM_GB]
    kb = p[PRM_KB]
    bb = p[PRM_BB]
    bg = (blk >> cb) & (p[PRM_BANK_GROUPS] - 1)
    col = (blk >> (cb + gb)) & ((np.int64(1) << kb) - 1)
    bank = (blk >> (cb + gb + kb)) & (p[PRM_BANKS_PER_GROUP] - 1)
    row = blk >> (cb + gb + kb + bb)
    return block_channel(p, blk), bg, col, bank, row


@njit(cache=True)
def _hash_slot(blk, mask):
    h = blk * np.int64(-7046029254386353131)  # 0x9E3779B97F4A7C15 (Fibonacci hashing), wraps
    h ^= (h >> 31) & np.int64(0x1FFFFFFFF)
    return h & mask


@njit(cache=True)
def _add_range(start, length, burst, blocks, n, hset, slots, mask):
    """Append the blocks of ``[start, start+length)`` not seen yet; returns the new n, or ``-1 - n``
    when ``blocks`` (or the table) is full (``n`` = the blocks inserted so far, for clearing)."""
    if length <= 0:
        return n
    cap = blocks.shape[0]
    first = start // burst
    last = (start + length - 1) // burst
    for blk in range(first, last + 1):
        s = _hash_slot(blk, mask)
        while True:
            v = hset[s]
            if v == blk:
                break
            if v == EMPTY:
                if n >= cap or 2 * (n + 1) > hset.shape[0]:
                    return -1 - n
                hset[s] = blk
                slots[n] = s
                blocks[n] = blk
                n += 1
                break
            s = (s + 1) & mask
    return n


@njit(cache=True)
def dma_requests(
    p, base, off0, pitch, rows, elem_len, scale_base, scale_div, scale_mul, scale_len, blocks, hset, work, stop
):
    """Distinct blocks of one H_* instruction in generation order into ``blocks``; returns n, DMA_FULL or
    DMA_STOPPED (``stop`` set between two rows)."""
    base = np.int64(base)  # any integer type in -> int64 arithmetic (never float)
    off0 = np.int64(off0)
    pitch = np.int64(pitch)
    scale_base = np.int64(scale_base)
    scale_div = np.int64(scale_div)
    scale_mul = np.int64(scale_mul)
    scale_len = np.int64(scale_len)
    elem_len = np.int64(elem_len)
    burst = p[PRM_BURST_BYTES]
    mask = hset.shape[0] - 1
    slots = work[W_SLOT]
    n = np.int64(0)
    status = np.int64(0)
    for i in range(rows):
        if stop_requested(stop):
            status = np.int64(DMA_STOPPED)
            break
        o = off0 + i * pitch
        n = _add_range(base + o, elem_len, burst, blocks, n, hset, slots, mask)
        if n >= 0 and scale_len > 0:
            n = _add_range(scale_base + (o // scale_div) * scale_mul, scale_len, burst, blocks, n, hset, slots, mask)
        if n < 0:
            n = -1 - n
            status = np.int64(DMA_FULL)
            break
    for j in range(n):
        hset[slots[j]] = EMPTY
    if status != 0:
        return status
    return n


@njit(cache=True)
def _sort_segment_by_row(order, tmp, rowv, s, e):
    """Stable bottom-up merge sort of ``order[s:e]`` by ``rowv[order[.]]`` (uses ``tmp[s:e]``)."""
    sorted_already = True
    for j in range(s + 1, e):
        if rowv[order[j]] < rowv[order[j - 1]]:
            sorted_already = False
            break
    if sorted_already:
        return
    n = e - s
    src = order
    dst = tmp
    in_tmp = False
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a = lo
            b = mid
            k = lo
            while a < mid and b < hi:
                if rowv[src[s + b]] < rowv[src[s + a]]:
                    dst[s + k] = src[s + b]
                    b += 1
                else:
                    dst[s + k] = src[s + a]
                    a += 1
                k += 1
            while a < mid:
                dst[s + k] = src[s + a]
                a += 1
                k += 1
            while b < hi:
                dst[s + k] = src[s + b]
                b += 1
                k += 1
            lo = hi
        src, dst = dst, src
        in_tmp = not in_tmp
        width *= 2
    if in_tmp:
        for j in range(s, e):
            order[j] = tmp[j]


_LOW32 = np.int64((1 << 32) - 1)
# scratch rows of ``work`` the FR-FCFS service uses once the channel sort is done (W_SLOT, W_CH, W_TMP are dead then)
_W_LINK = W_SLOT  # per position j of a channel segment: (queue k << 32) | (next position of queue k + 1); -1 = served
_W_HEAD = W_CH  # per queue k: its first unserved position (-1 = empty)
_W_READY = W_TMP  # per queue k: the time its head's column access can start (ps); the queue tails while building


@njit(cache=True)
def _bank_queues(work, nch):
    """Split every channel segment of ``W_ORDER`` (each already in (row, first appearance) order) into one queue
    per bank, keeping that order (rows ``_W_LINK``, ``_W_HEAD``; the tails in ``_W_READY``). Queue numbers are
    global and grow with the position of their first request, so channel c owns the queues whose first position
    lies in its segment. Returns the number of queues."""
    order, bankv, start = work[W_ORDER], work[W_BANK], work[W_CHSTART]
    link, head, tail = work[_W_LINK], work[_W_HEAD], work[_W_READY]
    nq = 0
    for c in range(nch):
        k0 = nq
        for j in range(start[c], start[c + 1]):
            bk = bankv[order[j]]
            k = k0
            while k < nq and bankv[order[tail[k]]] != bk:
                k += 1
            if k == nq:
                head[k] = j
                nq += 1
            else:
                link[tail[k]] += j + 1
            link[j] = np.int64(k) << 32
            tail[k] = j
    return nq


@njit(cache=True)
def _ready_time(open_row, col_ready, pre_ok, row, t0, t_rp, t_rcd):
    """Time (ps) a column access to DRAM ``row`` of a bank in state (open_row, col_ready, pre_ok) can start
    (timing.md §5.4: row hit; miss of a closed bank, ACT at t0; conflict, PRE at max(t0, pre_ok) then ACT)."""
    if open_row == row:
        return col_ready
    if open_row == -1:
        return t0 + t_rcd
    return max(t0, pre_ok) + t_rp + t_rcd


@njit(cache=True)
def _slot(bg, bg_last, col_last, bus_free, t0, lat, ccd_s, ccd_l):
    """Earliest time (ps) the channel can issue a column access to bank group ``bg`` (tCCD, the data bus)."""
    ccd = ccd_l if bg == bg_last else ccd_s
    return max(max(t0, col_last + ccd), bus_free - lat)


@njit(cache=True)
def _pick_slow(p, k0, k1, work, col_last, bg_last, bus_free, t0, lat):
    """FR-FCFS when the earliest-listed head is not ready: the earliest-listed head whose bank is ready when the
    channel could issue it; if no head is ready, the one ready soonest (ties: the earliest listed). Queues k0..k1-1."""
    head = work[_W_HEAD]
    hready = work[_W_READY]
    best = -1
    best_ready = False
    best_t = np.int64(0)
    for q in range(k0, k1):
        j = head[q]
        if j < 0:
            continue
        bg = work[W_BANK, work[W_ORDER, j]] >> p[PRM_BB]
        ready = hready[q] <= _slot(bg, bg_last, col_last, bus_free, t0, lat, p[PRM_TCCD_S_PS], p[PRM_TCCD_L_PS])
        if best < 0:
            take = True
        elif ready != best_ready:
            take = ready
        elif ready:
            take = j < head[best]
        else:
            take = hready[q] < best_t or (hready[q] == best_t and j < head[best])
        if take:
            best = q
            best_ready = ready
            best_t = hready[q]
    return best


@njit(cache=True)
def _serve_channels(p, ch_state, bank_state, work, t0, write, stats):
    """Serve every channel's requests (segments ``W_CHSTART`` of ``W_ORDER``) FR-FCFS between its banks (timing.md
    §5.4 with the erratum of docs/hbm.md); updates the channel and bank state and the hit/miss/conflict and
    per-channel counts; returns the end (ps) of the last data transfer. ``first`` is the earliest unserved
    position of the channel: the head of its queue, and the FR-FCFS choice whenever it is ready (fast path)."""
    bb = p[PRM_BB]
    t_rp, t_rcd, t_ras, t_bl = p[PRM_TRP_PS], p[PRM_TRCD_PS], p[PRM_TRAS_PS], p[PRM_TBL_PS]
    ccd_s, ccd_l = p[PRM_TCCD_S_PS], p[PRM_TCCD_L_PS]
    lat = p[PRM_TCWL_PS] if write else p[PRM_TCL_PS]
    after = p[PRM_TWR_PS] if write else p[PRM_TRTP_PS]
    bankv, rowv, order, start = work[W_BANK], work[W_ROW], work[W_ORDER], work[W_CHSTART]
    link, head, hready = work[_W_LINK], work[_W_HEAD], work[_W_READY]
    end = t0
    nq = _bank_queues(work, p[PRM_CHANNELS])
    k1 = 0
    for c in range(p[PRM_CHANNELS]):
        s, e = start[c], start[c + 1]
        k0 = k1
        while k1 < nq and head[k1] < e:  # this channel's queues (their heads are still the first positions)
            k1 += 1
        for k in range(k0, k1):
            bk = bankv[order[head[k]]]
            ob, cr, po = bank_state[c, bk, BK_OPEN_ROW], bank_state[c, bk, BK_COL_READY], bank_state[c, bk, BK_PRE_OK]
            hready[k] = _ready_time(ob, cr, po, rowv[order[head[k]]], t0, t_rp, t_rcd)
        col_last, bg_last, bus_free = ch_state[c, CH_COL_LAST], ch_state[c, CH_BG_LAST], ch_state[c, CH_BUS_FREE]
        first = s
        for _ in range(s, e):
            k = link[first] >> 32
            if hready[k] > _slot(bankv[order[first]] >> bb, bg_last, col_last, bus_free, t0, lat, ccd_s, ccd_l):
                k = _pick_slow(p, k0, k1, work, col_last, bg_last, bus_free, t0, lat)
            j = head[k]
            bk, row, ready = bankv[order[j]], rowv[order[j]], hready[k]
            pre_ok = bank_state[c, bk, BK_PRE_OK]
            open_row = bank_state[c, bk, BK_OPEN_ROW]
            kind = HST_ROW_HITS if open_row == row else (HST_ROW_MISSES if open_row == -1 else HST_ROW_CONFLICTS)
            stats[kind] += 1
            if open_row != row:
                bank_state[c, bk, BK_OPEN_ROW] = row
                bank_state[c, bk, BK_COL_READY] = ready
                pre_ok = max(pre_ok, ready - t_rcd + t_ras)  # t_act + tRAS
            t_col = max(ready, _slot(bk >> bb, bg_last, col_last, bus_free, t0, lat, ccd_s, ccd_l))
            col_last, bg_last, bus_free = t_col, bk >> bb, t_col + lat + t_bl
            pre_ok = max(pre_ok, (bus_free if write else t_col) + after)
            bank_state[c, bk, BK_PRE_OK] = pre_ok
            end = max(end, bus_free)
            # advance queue k, mark j served, move ``first`` past the served positions
            nx = (link[j] & _LOW32) - 1
            link[j] = -1
            head[k] = nx
            if nx >= 0:
                hready[k] = _ready_time(row, ready, pre_ok, rowv[order[nx]], t0, t_rp, t_rcd)
            while first < e and link[first] < 0:
                first += 1
        ch_state[c, CH_COL_LAST], ch_state[c, CH_BG_LAST], ch_state[c, CH_BUS_FREE] = col_last, bg_last, bus_free
        stats[HST_CHANNEL_BASE + c] += e - s
    return end


@njit(cache=True)
def dma_latency(p, ch_state, bank_state, blocks, n_blocks, is_write, t0_cycle, stats, work):
    """Schedule one instruction's requests (timing.md §5.4); returns its latency in cycles."""
    t0_cycle = np.int64(t0_cycle)
    n_blocks = np.int64(n_blocks)
    nch = p[PRM_CHANNELS]
    bpg = p[PRM_BANKS_PER_GROUP]
    write = is_write != 0
    chv = work[W_CH]
    bankv = work[W_BANK]
    rowv = work[W_ROW]
    order = work[W_ORDER]
    tmp = work[W_TMP]
    start = work[W_CHSTART]

    # 1. decode every request; count per channel
    for c in range(nch + 1):
        start[c] = 0
    for i in range(n_blocks):
        ch, bg, _col, bank, row = block_fields(p, blocks[i])
        chv[i] = ch
        bankv[i] = bg * bpg + bank
        rowv[i] = row
        start[ch + 1] += 1
    # 2. stable counting sort by channel, then a stable sort by row inside each channel
    for c in range(nch):
        start[c + 1] += start[c]
    for c in range(nch):
        tmp[c] = start[c]
    for i in range(n_blocks):
        c = chv[i]
        order[tmp[c]] = i
        tmp[c] += 1
    for c in range(nch):
        _sort_segment_by_row(order, tmp, rowv, start[c], start[c + 1])

    # 3. serve each channel: per-bank queues in (row, first appearance) order, FR-FCFS between the banks
    t0 = t0_cycle * ACCEL_CYCLE_PS
    end = _serve_channels(p, ch_state, bank_state, work, t0, write, stats)
    latency = (end - t0 + ACCEL_CYCLE_PS - 1) // ACCEL_CYCLE_PS
    if latency < 1:
        latency = np.int64(1)
    if write:
        stats[HST_WRITE_REQUESTS] += n_blocks
    else:
        stats[HST_READ_REQUESTS] += n_blocks
    stats[HST_DMA_INSTRUCTIONS] += 1
    stats[HST_DMA_CYCLES] += latency
    return latency


@njit(cache=True)
def dma_blocks(p, geom, base, off0, pitch, scale_reg, blocks, hset, work, stop):
    """The distinct blocks of one H_* instruction (``dma_requests`` of its geometry): n, DMA_FULL or DMA_STOPPED."""
    base = np.int64(base)
    return dma_requests(
        p,
        base,
        off0,
        pitch,
        geom[G_ROWS],
        geom[G_ELEM_LEN],
        base + np.int64(scale_reg),
        geom[G_SCALE_DIV],
        geom[G_SCALE_MUL],
        geom[G_SCALE_LEN],
        blocks,
        hset,
        work,
        stop,
    )


@njit(cache=True)
def dma_instruction(
    p, geom, base, off0, pitch, scale_reg, t0_cycle, ch_state, bank_state, stats, blocks, hset, work, stop
):
    """Blocks + schedule of one H_* instruction; latency in cycles, or DMA_FULL / DMA_STOPPED (nothing changed)."""
    n = dma_blocks(p, geom, base, off0, pitch, scale_reg, blocks, hset, work, stop)
    if n < 0:
        return n
    return dma_latency(p, ch_state, bank_state, blocks, n, geom[G_IS_WRITE], t0_cycle, stats, work)


@njit(cache=True)
def dma_payload_bytes(geom):
    """Exact element + scale bytes an instruction of geometry ``geom`` moves (timing.md §6
    ``hbm.payload_bytes_*``; overlapping rows count once per row)."""
    return geom[G_ROWS] * (geom[G_ELEM_LEN] + geom[G_SCALE_LEN])


# --------------------------------------------------------------------------- Python convenience


class HbmTimer:
    """Params + state + stats + scratch of one run, driving the Numba kernels from Python."""

    def __init__(self, params: TimingParams, max_blocks: int = 1024):
        self.params = _params_of(params)
        self.p = self.params.as_array()
        self.ch_state, self.bank_state = new_timing_state(self.params)
        self.stats = new_stats(self.params)
        self._max = 0
        self._ensure(max_blocks)

    def _ensure(self, n: int) -> None:
        if n > self._max:
            self._max = max(n, 2 * self._max)
            self.blocks, self.hset, self.work = new_dma_scratch(self.params, self._max)

    def latency_of_blocks(self, blocks: Sequence[int], is_write: bool, t0_cycle: int) -> int:
        """Schedule already-coalesced block indices (generation order)."""
        arr = np.asarray(blocks, dtype=np.int64)
        self._ensure(len(arr))
        self.blocks[: len(arr)] = arr
        return int(
            dma_latency(
                self.p,
                self.ch_state,
                self.bank_state,
                self.blocks,
                len(arr),
                int(bool(is_write)),
                int(t0_cycle),
                self.stats,
                self.work,
            )
        )

    def instruction(self, geom: DmaGeometry, base: int, off0: int, pitch: int, scale_reg: int, t0_cycle: int) -> int:
        """Latency of one H_* instruction of geometry ``geom`` (see :func:`dma_instruction`)."""
        g = geom.as_array()
        need = geom.rows * (
            range_blocks_bound(geom.elem_len, self.params.burst_bytes)
            + range_blocks_bound(geom.scale_len, self.params.burst_bytes)
        )
        self._ensure(need)
        return int(
            dma_instruction(
                self.p,
                g,
                int(base),
                int(off0),
                int(pitch),
                int(scale_reg),
                int(t0_cycle),
                self.ch_state,
                self.bank_state,
                self.stats,
                self.blocks,
                self.hset,
                self.work,
                np.zeros(1, dtype=np.uint8),  # a stop flag (plena_sim.limits.stop) that is never set
            )
        )

    def stats_dict(self) -> dict[str, Any]:
        return stats_dict(self.stats)
