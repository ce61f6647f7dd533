"""HBM timing model (timing.md §5): presets as data, address mapping, per-instruction DMA scheduler.

One job: the latency of one H_* instruction (H_PREFETCH_M, H_PREFETCH_V, H_STORE_V) given the bytes
it touches (memory.md §5.2), the HBM state left by earlier instructions and its start cycle.
Timing is tables of parameters, not code (Ramulator-2 style): a preset is a TOML file in
``plena_sim/data/hbm/<NAME>.toml`` (``HBM2`` = timing.md §5.1 verbatim; ``HBM3`` = project decision,
documented in the file), selected by ``HBM_TIMING_PRESET`` and patched key by key by ``[S.HBM_TIMING]``.

Python side
-----------
* :data:`PRESET_KEYS` -- the normative key set of a preset (plus ``name``).
* :func:`available_presets` ``() -> tuple[str, ...]``; :func:`load_preset` ``(name, overrides) ->
  TimingParams``; :func:`check_timing_config` ``(preset, overrides) -> TimingParams`` (what config.py
  calls; raises :class:`~plena_sim.config.ConfigError` naming ``HBM_TIMING_PRESET`` for a bad or
  unknown preset file, ``HBM_TIMING.<key>`` for a bad override); :func:`timing_params` ``(cfg)``.
* :class:`TimingParams` -- frozen; one attribute per preset key, ``name``, ``peak_bytes_per_cycle``
  (B per 1 ns accelerator cycle = GB/s), ``as_array() -> int64[PRM_N]``.
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
``p`` is ``params.as_array()`` (int64[PRM_N]); the slot constants below index it.

* ``dma_requests(p, base, off0, pitch, rows, elem_len, scale_base, scale_div, scale_mul, scale_len,
  blocks, hset, work) -> n``: fills ``blocks[:n]`` with the distinct ``burst_bytes`` block indices
  (``addr div burst_bytes``) of the instruction in generation order (timing.md §5.3): row i (0 <= i <
  rows) has ``o_i = off0 + i*pitch``, element range ``[base + o_i, +elem_len)`` and, if ``scale_len >
  0``, scale range ``[scale_base + (o_i div scale_div)*scale_mul, +scale_len)`` (``scale_base = base +
  SCALE``); per row the element blocks ascending, then the scale blocks ascending; a block already
  produced is skipped. Returns -1 if ``blocks`` is too small (``blocks`` content is then undefined;
  ``hset`` is left clean). Preconditions: every byte address >= 0 (the BD-HBM check ran first);
  ``hset`` from :func:`new_dma_scratch` (all ``EMPTY``; it is restored to all ``EMPTY`` on return, only
  the used slots are touched).
* ``dma_latency(p, ch_state, bank_state, blocks, n_blocks, is_write, t0_cycle, stats, work) ->
  latency_cycles``: schedules the requests ``blocks[:n_blocks]`` (reads if ``is_write == 0``) of one
  instruction starting at accelerator cycle ``t0_cycle`` (timing.md §5.4), updates ``ch_state``,
  ``bank_state`` and ``stats`` in place and returns ``max(1, ceil((end - t0) / 1000))``.
  Preconditions: the blocks are distinct (as ``dma_requests`` produces them), ``t0_cycle >= 0``,
  ``n_blocks <= work.shape[1]`` (``blocks``/``work`` from one :func:`new_dma_scratch` call).
* ``dma_instruction(p, geom, base, off0, pitch, scale_reg, t0_cycle, ch_state, bank_state, stats,
  blocks, hset, work) -> latency_cycles`` (-1 if ``blocks`` is too small): both of the above for one
  instruction, with ``geom = dma_geometry_table(cfg)[op, prec]`` (int64[G_N]); ``pitch`` is STRIDE if
  f.rs3 == 1 else ``geom[G_ELEM_LEN]``; ``scale_reg`` = the SCALE register.
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
* ``stats[ST_CHANNEL_BASE + channels]``: ``ST_READ_REQUESTS``, ``ST_WRITE_REQUESTS``, ``ST_ROW_HITS``,
  ``ST_ROW_MISSES``, ``ST_ROW_CONFLICTS``, ``ST_DMA_INSTRUCTIONS`` (calls of dma_latency),
  ``ST_DMA_CYCLES`` (sum of returned latencies), then one request count per channel.
* ``blocks[max_blocks]``; ``hset[T]`` with ``T`` a power of two >= 2*max_blocks, filled with ``EMPTY``;
  ``work[W_N, max(max_blocks, channels + 1)]`` (rows ``W_SLOT``, ``W_CH``, ``W_BANK``, ``W_ROW``,
  ``W_ORDER``, ``W_TMP``, ``W_CHSTART``; contents are scratch, nothing persists between calls).
* ``geom[G_N]``: ``G_ROWS``, ``G_ELEM_LEN``, ``G_SCALE_DIV``, ``G_SCALE_MUL``, ``G_SCALE_LEN`` (0 =
  Plain), ``G_IS_WRITE``.

Units: t0 = start_cycle x 1000 ps (one accelerator cycle is 1 ns, timing.md header); preset timing
parameters are multiplied by ``tCK_ps``; the result is converted back with a ceiling division by
:data:`ACCEL_CYCLE_PS` = 1000 (not by tCK_ps: the two coincide only for HBM2).
"""
from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from numba import njit

from .config import ConfigError

__all__ = [
    "PRESET_KEYS", "ACCEL_CYCLE_PS", "NEG_INF", "EMPTY",
    "TimingParams", "AddressFields", "DmaGeometry", "PyTimingState", "HbmTimer",
    "available_presets", "load_preset", "check_timing_config", "timing_params",
    "new_timing_state", "new_stats", "new_dma_scratch", "max_dma_blocks", "stats_dict",
    "map_address", "dma_geometry", "dma_geometry_table", "dma_row_ranges", "dma_blocks_py",
    "schedule_py", "new_stats_py", "block_fields", "block_channel", "dma_requests", "dma_latency", "dma_instruction",
    "dma_payload_bytes", "DMA_PREFETCH_M", "DMA_PREFETCH_V", "DMA_STORE_V",
]

# --------------------------------------------------------------------------- preset keys and slots

#: normative preset keys (timing.md §5.1), in parameter-vector order; a preset file also has ``name``
PRESET_KEYS: tuple[str, ...] = (
    "tCK_ps", "channels", "bank_groups", "banks_per_group", "row_bytes", "burst_bytes",
    "tBL", "tCL", "tCWL", "tRCD", "tRP", "tRAS", "tCCD_S", "tCCD_L", "tRTP", "tWR",
    "ch_xor_shift", "ch_xor_terms",
)
_TIMING_KEYS = ("tBL", "tCL", "tCWL", "tRCD", "tRP", "tRAS", "tCCD_S", "tCCD_L", "tRTP", "tWR")

# parameter vector slots: the raw preset values ...
PRM_TCK_PS = 0
PRM_CHANNELS = 1
PRM_BANK_GROUPS = 2
PRM_BANKS_PER_GROUP = 3
PRM_ROW_BYTES = 4
PRM_BURST_BYTES = 5
PRM_TBL = 6
PRM_TCL = 7
PRM_TCWL = 8
PRM_TRCD = 9
PRM_TRP = 10
PRM_TRAS = 11
PRM_TCCD_S = 12
PRM_TCCD_L = 13
PRM_TRTP = 14
PRM_TWR = 15
PRM_CH_XOR_SHIFT = 16
PRM_CH_XOR_TERMS = 17
# ... then derived values: field widths of §5.2, bank count, and every timing parameter in ps
PRM_CB = 18          # log2 channels
PRM_GB = 19          # log2 bank_groups
PRM_KB = 20          # log2 (row_bytes / burst_bytes)
PRM_BB = 21          # log2 banks_per_group
PRM_BANKS = 22       # bank_groups * banks_per_group
PRM_TBL_PS = 23
PRM_TCL_PS = 24
PRM_TCWL_PS = 25
PRM_TRCD_PS = 26
PRM_TRP_PS = 27
PRM_TRAS_PS = 28
PRM_TCCD_S_PS = 29
PRM_TCCD_L_PS = 30
PRM_TRTP_PS = 31
PRM_TWR_PS = 32
PRM_N = 33

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
ST_READ_REQUESTS = 0
ST_WRITE_REQUESTS = 1
ST_ROW_HITS = 2
ST_ROW_MISSES = 3
ST_ROW_CONFLICTS = 4
ST_DMA_INSTRUCTIONS = 5
ST_DMA_CYCLES = 6
ST_CHANNEL_BASE = 7
# scratch rows of ``work``
W_SLOT = 0       # dma_requests: hash slot of each distinct block (for clearing)
W_CH = 1         # dma_latency: channel of request i
W_BANK = 2       # bank index bg*banks_per_group + bank of request i
W_ROW = 3        # DRAM row of request i
W_ORDER = 4      # service order (request indices)
W_TMP = 5        # merge-sort buffer
W_CHSTART = 6    # per-channel segment starts (channels + 1 entries)
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
_DMA_OPS = ("H_PREFETCH_M", "H_PREFETCH_V", "H_STORE_V")

#: picoseconds per accelerator cycle (1 GHz, timing.md header): t0 = start_cycle * ACCEL_CYCLE_PS
ACCEL_CYCLE_PS = 1000
#: "-inf" for times (ps); |NEG_INF| leaves > 2^62 of headroom below int64 min
NEG_INF = -(1 << 62)
#: empty slot marker of the coalescing hash set (block indices are >= 0)
EMPTY = -(1 << 63)

# validation limits (keep every product well inside int64; none binds a realistic preset)
_MAX_TIMING = 1 << 20           # cycles per timing parameter
_MAX_TCK_PS = 1 << 20           # ps per HBM clock
_MAX_COUNT = 1 << 12            # channels, bank groups, banks per group
_MAX_ROW_BURSTS = 1 << 16       # row_bytes / burst_bytes
_MAX_BURST = 1 << 16            # burst_bytes
_MAX_XOR_TERMS = 64

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _is_pow2(v: int) -> bool:
    return v >= 1 and (v & (v - 1)) == 0


# --------------------------------------------------------------------------- parameters

@dataclass(frozen=True)
class TimingParams:
    """A validated HBM timing preset (with overrides applied). Attribute names are the preset keys."""
    name: str
    tCK_ps: int
    channels: int
    bank_groups: int
    banks_per_group: int
    row_bytes: int
    burst_bytes: int
    tBL: int
    tCL: int
    tCWL: int
    tRCD: int
    tRP: int
    tRAS: int
    tCCD_S: int
    tCCD_L: int
    tRTP: int
    tWR: int
    ch_xor_shift: int
    ch_xor_terms: int

    @property
    def banks(self) -> int:
        """Banks per channel."""
        return self.bank_groups * self.banks_per_group

    @property
    def peak_bytes_per_cycle(self) -> float:
        """``channels * burst_bytes / (tBL * tCK)`` in B per accelerator cycle (= GB/s)."""
        return self.channels * self.burst_bytes * ACCEL_CYCLE_PS / (self.tBL * self.tCK_ps)

    @property
    def peak_bandwidth_GBps(self) -> float:
        return self.peak_bytes_per_cycle

    def values(self) -> dict[str, Any]:
        """``name`` plus every preset key -> value."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def as_array(self) -> np.ndarray:
        """The int64[PRM_N] parameter vector the Numba kernels index by the ``PRM_*`` slots."""
        a = np.zeros(PRM_N, dtype=np.int64)
        for i, k in enumerate(PRESET_KEYS):
            a[i] = getattr(self, k)
        a[PRM_CB] = self.channels.bit_length() - 1
        a[PRM_GB] = self.bank_groups.bit_length() - 1
        a[PRM_KB] = (self.row_bytes // self.burst_bytes).bit_length() - 1
        a[PRM_BB] = self.banks_per_group.bit_length() - 1
        a[PRM_BANKS] = self.banks
        for k, slot in zip(_TIMING_KEYS, range(PRM_TBL_PS, PRM_TWR_PS + 1)):
            a[slot] = getattr(self, k) * self.tCK_ps
        return a


def _preset_dir():
    return resources.files("plena_sim").joinpath("data", "hbm")


def available_presets() -> tuple[str, ...]:
    """Names of the presets shipped with the package (``data/hbm/<NAME>.toml``), sorted."""
    names = []
    for entry in _preset_dir().iterdir():
        n = entry.name
        if n.endswith(".toml") and entry.is_file():
            names.append(n[:-5])
    return tuple(sorted(names))


@functools.lru_cache(maxsize=None)
def _read_preset(name: str) -> tuple[tuple[str, Any], ...]:
    """Raw key/value pairs of preset ``name`` (cached; the file is package data)."""
    key = "HBM_TIMING_PRESET"
    known = available_presets()
    if not isinstance(name, str) or not _NAME_RE.match(name) or name not in known:
        raise ConfigError(key, f"unknown preset {name!r} (known: {', '.join(known)})")
    entry = _preset_dir().joinpath(f"{name}.toml")
    try:
        doc = tomllib.loads(entry.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(key, f"preset {name!r}: cannot read {name}.toml: {exc}") from None
    return tuple(doc.items())


def _check_int(key: str, v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, int):
        return f"must be an integer, got {v!r}"
    return None


def _constraint_errors(vals: Mapping[str, int]) -> Iterable[tuple[str, str]]:
    """(key, message) for every violated constraint of a complete, integer-valued key set."""
    for k in _TIMING_KEYS:
        lo = 1 if k == "tBL" else 0
        if not lo <= vals[k] <= _MAX_TIMING:
            yield k, f"must be an integer in [{lo}, {_MAX_TIMING}] HBM cycles, got {vals[k]}"
    if not 1 <= vals["tCK_ps"] <= _MAX_TCK_PS:
        yield "tCK_ps", f"must be an integer in [1, {_MAX_TCK_PS}] ps, got {vals['tCK_ps']}"
    for k in ("channels", "bank_groups", "banks_per_group"):
        if not _is_pow2(vals[k]) or vals[k] > _MAX_COUNT:
            yield k, f"must be a power of two in [1, {_MAX_COUNT}], got {vals[k]}"
    bb, rb = vals["burst_bytes"], vals["row_bytes"]
    if not 1 <= bb <= _MAX_BURST:
        yield "burst_bytes", f"must be an integer in [1, {_MAX_BURST}], got {bb}"
    elif rb < 1 or rb % bb or not _is_pow2(rb // bb) or rb // bb > _MAX_ROW_BURSTS:
        yield "row_bytes", (f"row_bytes / burst_bytes must be a power of two in [1, {_MAX_ROW_BURSTS}], "
                            f"got {rb} / {bb}")
    if not 1 <= vals["ch_xor_terms"] <= _MAX_XOR_TERMS:
        yield "ch_xor_terms", f"must be an integer in [1, {_MAX_XOR_TERMS}], got {vals['ch_xor_terms']}"
    ch = vals["channels"]
    cb = ch.bit_length() - 1 if _is_pow2(ch) else 0
    if not cb <= vals["ch_xor_shift"] <= 63:
        yield "ch_xor_shift", f"must be an integer in [log2(channels) = {cb}, 63], got {vals['ch_xor_shift']}"


def load_preset(name: str, overrides: Mapping[str, Any] | None = None) -> TimingParams:
    """Load preset ``name`` from the package data and apply ``overrides`` (preset key -> int).

    Raises ConfigError: key ``HBM_TIMING_PRESET`` for an unknown preset or a defect of the preset
    file itself, key ``HBM_TIMING.<k>`` for an unknown override key or a bad override value (also when
    the override breaks a constraint that involves other keys)."""
    pkey = "HBM_TIMING_PRESET"
    raw = dict(_read_preset(name))
    where = f"preset {name!r} ({name}.toml)"
    if raw.get("name") != name:
        raise ConfigError(pkey, f"{where}: field 'name' must be {name!r}, got {raw.get('name')!r}")
    for k in raw:
        if k != "name" and k not in PRESET_KEYS:
            raise ConfigError(pkey, f"{where}: unknown key {k!r}")
    for k in PRESET_KEYS:
        if k not in raw:
            raise ConfigError(pkey, f"{where}: missing key {k!r}")
        msg = _check_int(k, raw[k])
        if msg:
            raise ConfigError(pkey, f"{where}: {k} {msg}")
    ov = dict(overrides or {})
    for k, v in ov.items():
        okey = f"HBM_TIMING.{k}"
        if k not in PRESET_KEYS:
            raise ConfigError(okey, f"unknown HBM timing key {k!r} (known: {', '.join(PRESET_KEYS)})")
        msg = _check_int(k, v)
        if msg:
            raise ConfigError(okey, msg)
    vals = {k: (ov[k] if k in ov else raw[k]) for k in PRESET_KEYS}
    for k, msg in _constraint_errors(vals):
        # blame an override if one of the keys of this constraint was overridden, else the file
        involved = {k} | ({"channels"} if k == "ch_xor_shift" else set()) \
            | ({"burst_bytes"} if k == "row_bytes" else set())
        blamed = [x for x in (k, *sorted(involved - {k})) if x in ov]
        if blamed:
            raise ConfigError(f"HBM_TIMING.{blamed[0]}", f"{k} {msg}")
        raise ConfigError(pkey, f"{where}: {k} {msg}")
    return TimingParams(name=name, **vals)


def check_timing_config(preset: str, overrides: Mapping[str, Any] | None = None) -> TimingParams:
    """Validate ``HBM_TIMING_PRESET`` and the ``[S.HBM_TIMING]`` overrides (config.py calls this)."""
    return load_preset(preset, overrides)


def timing_params(cfg) -> TimingParams:
    """The timing parameters of a :class:`~plena_sim.config.HardwareConfig`."""
    return load_preset(cfg.HBM_TIMING_PRESET, cfg.hbm_timing)


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
    """Zeroed int64[ST_CHANNEL_BASE + channels] statistics vector."""
    return np.zeros(ST_CHANNEL_BASE + _params_of(params).channels, dtype=np.int64)


def stats_dict(stats: np.ndarray) -> dict[str, Any]:
    """Statistics vector -> dict with timing.md §6 ``hbm.*`` names (requests, hits, per channel)."""
    s = [int(x) for x in stats]
    return {
        "read_requests": s[ST_READ_REQUESTS], "write_requests": s[ST_WRITE_REQUESTS],
        "row_hits": s[ST_ROW_HITS], "row_misses": s[ST_ROW_MISSES],
        "row_conflicts": s[ST_ROW_CONFLICTS], "dma_instructions": s[ST_DMA_INSTRUCTIONS],
        "dma_cycles": s[ST_DMA_CYCLES], "per_channel_requests": s[ST_CHANNEL_BASE:],
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


def _range_blocks_bound(length: int, burst: int) -> int:
    """Most blocks a byte range of ``length`` bytes can overlap."""
    return 0 if length <= 0 else (length + burst - 1) // burst + 1


def max_dma_blocks(cfg, params: TimingParams) -> int:
    """Upper bound of the distinct blocks of any H_* instruction under ``cfg`` (scratch sizing)."""
    p = _params_of(params)
    best = 1
    table = dma_geometry_table(cfg)
    for op in range(3):
        for prec in range(2):
            g = table[op, prec]
            per_row = (_range_blocks_bound(int(g[G_ELEM_LEN]), p.burst_bytes)
                       + _range_blocks_bound(int(g[G_SCALE_LEN]), p.burst_bytes))
            best = max(best, int(g[G_ROWS]) * per_row)
    return best


# --------------------------------------------------------------------------- DMA geometry (memory.md §5.2)

@dataclass(frozen=True)
class DmaGeometry:
    """The per-opcode, per-precision byte geometry of an H_* instruction (memory.md §5.2)."""
    rows: int            # P
    elem_len: int        # L * eb  (also the pitch when f.rs3 == 0)
    scale_div: int       # eb * k (MX) ; 1 for Plain
    scale_mul: int       # sb (MX) ; 0 for Plain
    scale_len: int       # (L / k) * sb (MX) ; 0 for Plain
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


def dma_row_ranges(geom: DmaGeometry, base: int, off0: int, pitch: int,
                   scale_reg: int = 0) -> list[tuple[int, int, int, int]]:
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
        self.channels = [{"col_last": -math.inf, "bg_last": None, "bus_free": -math.inf}
                         for _ in range(p.channels)]
        self.banks = [{(g, b): {"open_row": -1, "col_ready": -math.inf, "pre_ok": -math.inf}
                       for g in range(p.bank_groups) for b in range(p.banks_per_group)}
                      for _ in range(p.channels)]
        self._bpg = p.banks_per_group

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The same state in the Numba layout (-inf -> NEG_INF, bg_last None -> -1)."""
        def t(x):
            return NEG_INF if x == -math.inf else int(x)
        ch = np.array([[t(c["col_last"]), -1 if c["bg_last"] is None else c["bg_last"], t(c["bus_free"])]
                       for c in self.channels], dtype=np.int64).reshape(len(self.channels), CH_N)
        nb = len(self.banks[0])
        bk = np.zeros((len(self.channels), nb, BK_N), dtype=np.int64)
        for c, banks in enumerate(self.banks):
            for (g, b), s in banks.items():
                bk[c, g * self._bpg + b] = (s["open_row"], t(s["col_ready"]), t(s["pre_ok"]))
        return ch, bk


def schedule_py(params: TimingParams, state: PyTimingState, blocks: Sequence[int], is_write: bool,
                t0_cycle: int, stats: dict | None = None) -> int:
    """Latency in cycles of one instruction issuing ``blocks`` (distinct block indices in generation
    order) at ``t0_cycle`` -- timing.md §5.3/§5.4 transcribed literally. Updates ``state`` and, if
    given, ``stats`` (keys as :func:`stats_dict`)."""
    p = _params_of(params)
    ps = {k: getattr(p, k) * p.tCK_ps for k in _TIMING_KEYS}
    t0 = t0_cycle * ACCEL_CYCLE_PS
    reqs = []
    for seq, blk in enumerate(blocks):
        f = map_address(p, blk * p.burst_bytes)
        reqs.append((f.channel, f.row, seq, f.bank_group, f.bank))
    by_channel: dict[int, list] = {}
    for r in reqs:
        by_channel.setdefault(r[0], []).append(r)
    end = t0
    for c in sorted(by_channel):
        ch = state.channels[c]
        for _c, row, _seq, bg, b in sorted(by_channel[c], key=lambda r: (r[1], r[2])):
            bank = state.banks[c][(bg, b)]
            if bank["open_row"] == row:
                kind = "row_hits"
                ready = bank["col_ready"]
            else:
                if bank["open_row"] == -1:
                    kind = "row_misses"
                    t_act = t0
                else:
                    kind = "row_conflicts"
                    t_pre = max(t0, bank["pre_ok"])
                    t_act = t_pre + ps["tRP"]
                ready = t_act + ps["tRCD"]
                bank["open_row"] = row
                bank["col_ready"] = ready
                bank["pre_ok"] = max(bank["pre_ok"], t_act + ps["tRAS"])
            lat = ps["tCWL"] if is_write else ps["tCL"]
            ccd = ps["tCCD_L"] if bg == ch["bg_last"] else ps["tCCD_S"]
            t_col = max(t0, ready, ch["col_last"] + ccd, ch["bus_free"] - lat)
            d_end = t_col + lat + ps["tBL"]
            ch["col_last"], ch["bg_last"], ch["bus_free"] = t_col, bg, d_end
            bank["pre_ok"] = max(bank["pre_ok"], d_end + ps["tWR"] if is_write else t_col + ps["tRTP"])
            end = max(end, d_end)
            if stats is not None:
                stats[kind] += 1
                stats["per_channel_requests"][c] += 1
    latency = max(1, -(-(end - t0) // ACCEL_CYCLE_PS))
    if stats is not None:
        stats["write_requests" if is_write else "read_requests"] += len(reqs)
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
            break                      # blk >> s == 0 for every non-negative int64
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
    h = blk * np.int64(-7046029254386353131)      # 0x9E3779B97F4A7C15 (Fibonacci hashing), wraps
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
def dma_requests(p, base, off0, pitch, rows, elem_len, scale_base, scale_div, scale_mul, scale_len,
                 blocks, hset, work):
    """Distinct blocks of one H_* instruction in generation order into ``blocks``; returns n or -1."""
    base = np.int64(base)                  # any integer type in -> int64 arithmetic (never float)
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
    full = False
    for i in range(rows):
        o = off0 + i * pitch
        n = _add_range(base + o, elem_len, burst, blocks, n, hset, slots, mask)
        if n >= 0 and scale_len > 0:
            n = _add_range(scale_base + (o // scale_div) * scale_mul, scale_len, burst,
                           blocks, n, hset, slots, mask)
        if n < 0:
            n = -1 - n
            full = True
            break
    for j in range(n):
        hset[slots[j]] = EMPTY
    if full:
        return np.int64(-1)
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


@njit(cache=True)
def dma_latency(p, ch_state, bank_state, blocks, n_blocks, is_write, t0_cycle, stats, work):
    """Schedule one instruction's requests (timing.md §5.4); returns its latency in cycles."""
    t0_cycle = np.int64(t0_cycle)
    n_blocks = np.int64(n_blocks)
    nch = p[PRM_CHANNELS]
    bpg = p[PRM_BANKS_PER_GROUP]
    write = is_write != 0
    t_bl = p[PRM_TBL_PS]
    t_rcd = p[PRM_TRCD_PS]
    t_rp = p[PRM_TRP_PS]
    t_ras = p[PRM_TRAS_PS]
    t_ccd_s = p[PRM_TCCD_S_PS]
    t_ccd_l = p[PRM_TCCD_L_PS]
    lat = p[PRM_TCWL_PS] if write else p[PRM_TCL_PS]
    after = p[PRM_TWR_PS] if write else p[PRM_TRTP_PS]
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

    # 3. serve each channel in (row, first appearance) order
    t0 = t0_cycle * ACCEL_CYCLE_PS
    end = t0
    hits = np.int64(0)
    misses = np.int64(0)
    conflicts = np.int64(0)
    for c in range(nch):
        s = start[c]
        e = start[c + 1]
        if s == e:
            continue
        col_last = ch_state[c, CH_COL_LAST]
        bg_last = ch_state[c, CH_BG_LAST]
        bus_free = ch_state[c, CH_BUS_FREE]
        for j in range(s, e):
            i = order[j]
            bk = bankv[i]
            bg = bk // bpg
            row = rowv[i]
            open_row = bank_state[c, bk, BK_OPEN_ROW]
            pre_ok = bank_state[c, bk, BK_PRE_OK]
            if open_row == row:
                ready = bank_state[c, bk, BK_COL_READY]
                hits += 1
            else:
                if open_row == -1:
                    t_act = t0
                    misses += 1
                else:
                    t_act = max(t0, pre_ok) + t_rp
                    conflicts += 1
                ready = t_act + t_rcd
                bank_state[c, bk, BK_OPEN_ROW] = row
                bank_state[c, bk, BK_COL_READY] = ready
                pre_ok = max(pre_ok, t_act + t_ras)
            ccd = t_ccd_l if bg == bg_last else t_ccd_s
            t_col = max(max(t0, ready), max(col_last + ccd, bus_free - lat))
            d_end = t_col + lat + t_bl
            col_last = t_col
            bg_last = bg
            bus_free = d_end
            if write:
                pre_ok = max(pre_ok, d_end + after)
            else:
                pre_ok = max(pre_ok, t_col + after)
            bank_state[c, bk, BK_PRE_OK] = pre_ok
            if d_end > end:
                end = d_end
        ch_state[c, CH_COL_LAST] = col_last
        ch_state[c, CH_BG_LAST] = bg_last
        ch_state[c, CH_BUS_FREE] = bus_free
        stats[ST_CHANNEL_BASE + c] += e - s

    latency = (end - t0 + ACCEL_CYCLE_PS - 1) // ACCEL_CYCLE_PS
    if latency < 1:
        latency = np.int64(1)
    if write:
        stats[ST_WRITE_REQUESTS] += n_blocks
    else:
        stats[ST_READ_REQUESTS] += n_blocks
    stats[ST_ROW_HITS] += hits
    stats[ST_ROW_MISSES] += misses
    stats[ST_ROW_CONFLICTS] += conflicts
    stats[ST_DMA_INSTRUCTIONS] += 1
    stats[ST_DMA_CYCLES] += latency
    return latency


@njit(cache=True)
def dma_instruction(p, geom, base, off0, pitch, scale_reg, t0_cycle, ch_state, bank_state, stats,
                    blocks, hset, work):
    """Blocks + schedule of one H_* instruction; latency in cycles, or -1 if ``blocks`` is too small."""
    base = np.int64(base)
    n = dma_requests(p, base, off0, pitch, geom[G_ROWS], geom[G_ELEM_LEN], base + np.int64(scale_reg),
                     geom[G_SCALE_DIV], geom[G_SCALE_MUL], geom[G_SCALE_LEN], blocks, hset, work)
    if n < 0:
        return np.int64(-1)
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
        self.blocks[:len(arr)] = arr
        return int(dma_latency(self.p, self.ch_state, self.bank_state, self.blocks, len(arr),
                               int(bool(is_write)), int(t0_cycle), self.stats, self.work))

    def instruction(self, geom: DmaGeometry, base: int, off0: int, pitch: int, scale_reg: int,
                    t0_cycle: int) -> int:
        """Latency of one H_* instruction of geometry ``geom`` (see :func:`dma_instruction`)."""
        g = geom.as_array()
        need = geom.rows * (_range_blocks_bound(geom.elem_len, self.params.burst_bytes)
                            + _range_blocks_bound(geom.scale_len, self.params.burst_bytes))
        self._ensure(need)
        return int(dma_instruction(self.p, g, int(base), int(off0), int(pitch), int(scale_reg),
                                   int(t0_cycle), self.ch_state, self.bank_state, self.stats,
                                   self.blocks, self.hset, self.work))

    def stats_dict(self) -> dict[str, Any]:
        return stats_dict(self.stats)
