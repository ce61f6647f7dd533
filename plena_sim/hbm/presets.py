"""HBM timing presets (timing.md §5.1): read, validate and patch one preset into :class:`TimingParams`.

One job: turn ``plena_sim/hbm/data/<NAME>.toml`` (selected by ``HBM_TIMING_PRESET``) plus the
``[S.HBM_TIMING]`` overrides into a frozen, validated :class:`TimingParams`. Timing is tables of
parameters, not code (Ramulator-2 style): ``HBM2`` = timing.md §5.1 verbatim; ``HBM3`` = project
decision, documented in the file. The scheduler that uses the parameters is :mod:`plena_sim.hbm.timing`.

* :data:`PRESET_KEYS` -- the normative key set of a preset (plus ``name``), in parameter-vector order;
  :data:`TIMING_KEYS` -- the ones that are timing parameters in HBM clock cycles.
* :func:`available_presets` ``() -> tuple[str, ...]``; :func:`load_preset` ``(name, overrides) ->
  TimingParams``; :func:`check_timing_config` ``(preset, overrides) -> TimingParams`` (what config.py
  calls; raises :class:`~plena_sim.errors.ConfigError` naming ``HBM_TIMING_PRESET`` for a bad or
  unknown preset file, ``HBM_TIMING.<key>`` for a bad override); :func:`timing_params` ``(cfg)``.
* :class:`TimingParams` -- frozen; one attribute per preset key, ``name``, ``peak_bytes_per_cycle``
  (B per 1 ns accelerator cycle = GB/s), ``as_array() -> int64[PRM_N]`` (the vector the Numba
  scheduler indexes by the ``PRM_*`` slots below).
* :data:`ACCEL_CYCLE_PS` -- picoseconds per accelerator cycle (1000: one cycle is 1 ns).
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = [
    "PRESET_KEYS",
    "TIMING_KEYS",
    "ACCEL_CYCLE_PS",
    "TimingParams",
    "available_presets",
    "load_preset",
    "check_timing_config",
    "timing_params",
]

# --------------------------------------------------------------------------- preset keys and slots

#: normative preset keys (timing.md §5.1), in parameter-vector order; a preset file also has ``name``
PRESET_KEYS: tuple[str, ...] = (
    "tCK_ps",
    "channels",
    "bank_groups",
    "banks_per_group",
    "row_bytes",
    "burst_bytes",
    "tBL",
    "tCL",
    "tCWL",
    "tRCD",
    "tRP",
    "tRAS",
    "tCCD_S",
    "tCCD_L",
    "tRTP",
    "tWR",
    "ch_xor_shift",
    "ch_xor_terms",
)
#: the preset keys that are timing parameters (HBM clock cycles; ``PRM_*_PS`` holds them in ps)
TIMING_KEYS = ("tBL", "tCL", "tCWL", "tRCD", "tRP", "tRAS", "tCCD_S", "tCCD_L", "tRTP", "tWR")

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
PRM_CB = 18  # log2 channels
PRM_GB = 19  # log2 bank_groups
PRM_KB = 20  # log2 (row_bytes / burst_bytes)
PRM_BB = 21  # log2 banks_per_group
PRM_BANKS = 22  # bank_groups * banks_per_group
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

#: picoseconds per accelerator cycle (1 GHz, timing.md header): t0 = start_cycle * ACCEL_CYCLE_PS
ACCEL_CYCLE_PS = 1000

# validation limits (keep every product well inside int64; none binds a realistic preset)
_MAX_TIMING = 1 << 20  # cycles per timing parameter
_MAX_TCK_PS = 1 << 20  # ps per HBM clock
_MAX_COUNT = 1 << 12  # channels, bank groups, banks per group
_MAX_ROW_BURSTS = 1 << 16  # row_bytes / burst_bytes
_MAX_BURST = 1 << 16  # burst_bytes
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
        for k, slot in zip(TIMING_KEYS, range(PRM_TBL_PS, PRM_TWR_PS + 1), strict=True):
            a[slot] = getattr(self, k) * self.tCK_ps
        return a


def _preset_dir():
    return resources.files("plena_sim.hbm").joinpath("data")


def available_presets() -> tuple[str, ...]:
    """Names of the presets shipped with the package (``data/hbm/<NAME>.toml``), sorted."""
    names = []
    for entry in _preset_dir().iterdir():
        n = entry.name
        if n.endswith(".toml") and entry.is_file():
            names.append(n[:-5])
    return tuple(sorted(names))


@functools.cache
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
    for k in TIMING_KEYS:
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
        yield (
            "row_bytes",
            (f"row_bytes / burst_bytes must be a power of two in [1, {_MAX_ROW_BURSTS}], got {rb} / {bb}"),
        )
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
        involved = (
            {k} | ({"channels"} if k == "ch_xor_shift" else set()) | ({"burst_bytes"} if k == "row_bytes" else set())
        )
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
