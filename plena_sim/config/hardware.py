"""Hardware configuration: load the upstream ``plena_settings.toml`` into an immutable object.

One job: turn a TOML file (plus overrides) into a validated, frozen :class:`HardwareConfig`.
Lookup order (memory.md §8): explicit path, env ``PLENA_SETTINGS_TOML``, the packaged default
(a verbatim copy of the upstream reference file). Only one section is read (``TRANSACTIONAL`` by
default); ``[MODE] active`` is ignored. A missing key, a wrong type or a violated constraint is a
:class:`ConfigError` naming the key -- never a silent default.

Strict: a key of the selected section that the simulator does not read (``BMM_SCAEL``, a full-width
``ＭLEN``, an extra ``[TRANSACTIONAL.POWER]`` table, a top-level scalar) is a ConfigError naming it and its
close match; ``allow_unknown=True`` (``--allow-unknown-keys``) ignores such keys instead and records them
in ``HardwareConfig.ignored`` -- the escape hatch for upstream files that carry extra sections. Other
sections of the file (another mode) are not read, so not checked. The file is read only if it is a regular
file of at most 16 MiB nested at most 64 levels deep (:mod:`isa.readers`).
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from isa.readers import MAX_CONFIG_BYTES, InputFileError, parse_toml, read_text_input
from isa.safetext import did_you_mean, printable

from ..errors import KEY_SHOWN, ConfigError
from ..hbm.layout import (
    DMA_PREFETCH_M,
    DMA_PREFETCH_V,
    DMA_STORE_V,
    dma_blocks_by_op,
    dma_scratch_bytes,
    timing_state_bytes,
)
from ..hbm.presets import PRESET_KEYS, check_timing_config, timing_params

__all__ = [
    "ConfigError",
    "FpType",
    "IntType",
    "PlainType",
    "MxType",
    "HardwareConfig",
    "load_config",
    "default_config",
    "config_from_document",
    "default_config_text",
    "parse_override",
    "LATENCY_KEYS",
    "PRECISION_KEYS",
    "Inconsistency",
    "inconsistencies",
    "inconsistency_message",
    "HostLimits",
    "host_memory_limits",
    "host_memory_needs",
    "check_host_limits",
    "out_of_memory_message",
    "config_toml",
]


# --------------------------------------------------------------------------- precision types


@dataclass(frozen=True)
class FpType:
    """Minifloat ``Fp{sign, E, Mt}`` (memory.md §3.2)."""

    sign: bool
    exponent: int
    mantissa: int

    @property
    def bits(self) -> int:
        return int(self.sign) + self.exponent + self.mantissa

    @property
    def bias(self) -> int:
        return (1 << (self.exponent - 1)) - 1

    @property
    def emax(self) -> int:
        return (1 << self.exponent) - 2 - self.bias

    def describe(self) -> str:
        return f"Fp{{sign={str(self.sign).lower()}, E={self.exponent}, M={self.mantissa}}}"


@dataclass(frozen=True)
class IntType:
    width: int

    @property
    def bits(self) -> int:
        return self.width

    def describe(self) -> str:
        return f"Int{self.width}"


@dataclass(frozen=True)
class PlainType:
    """A plain (unscaled) HBM / SRAM type."""

    data: FpType | IntType

    @property
    def is_mx(self) -> bool:
        return False

    @property
    def elem_bytes(self) -> int:
        return self.data.bits // 8

    def describe(self) -> str:
        return f"Plain {self.data.describe()}"


@dataclass(frozen=True)
class MxType:
    """An OCP-MX block type: elements ``elem`` sharing one ``scale`` per ``block`` elements."""

    elem: FpType
    scale: FpType
    block: int

    @property
    def is_mx(self) -> bool:
        return True

    @property
    def elem_bytes(self) -> int:
        return self.elem.bits // 8

    @property
    def scale_bytes(self) -> int:
        return 1

    def describe(self) -> str:
        return f"Mx {{elem={self.elem.describe()}, scale={self.scale.describe()}, block={self.block}}}"


BF16 = FpType(True, 8, 7)
E8M0 = FpType(False, 8, 0)

# --------------------------------------------------------------------------- key catalogue

# (key, required, kind) ; kind: "int" (>=1), "int0" (>=0), "float", "str"
_CONFIG_KEYS: tuple[tuple[str, bool, str], ...] = (
    ("MLEN", True, "int"),
    ("VLEN", True, "int"),
    ("BLEN", True, "int"),
    ("HLEN", True, "int"),
    ("BROADCAST_AMOUNT", True, "int"),
    ("HBM_SIZE", True, "int"),
    ("HBM_WIDTH", False, "int"),
    ("MATRIX_SRAM_SIZE", True, "int0"),
    ("VECTOR_SRAM_SIZE", True, "int0"),
    ("HBM_M_Prefetch_Amount", True, "int"),
    ("HBM_V_Prefetch_Amount", True, "int"),
    ("HBM_V_Writeback_Amount", True, "int"),
    ("DC_EN", True, "int0"),
    ("MAX_LOOP_INSTRUCTIONS", True, "int"),
    ("BMM_SCALE", False, "float"),
    ("FP_SRAM_SIZE", False, "int"),
    ("INT_SRAM_SIZE", False, "int"),
    ("HBM_TIMING_PRESET", False, "str"),
)
_CONFIG_DEFAULTS: dict[str, Any] = {
    "HBM_WIDTH": 512,
    "BMM_SCALE": 1.0,
    "FP_SRAM_SIZE": 1024,
    "INT_SRAM_SIZE": 1024,
    "HBM_TIMING_PRESET": "HBM2",
}
_CONFIG_KIND = {k: kind for k, _, kind in _CONFIG_KEYS}

PRECISION_KEYS: tuple[str, ...] = (
    "MATRIX_SRAM_TYPE",
    "VECTOR_SRAM_TYPE",
    "HBM_M_WEIGHT_TYPE",
    "HBM_M_KV_TYPE",
    "HBM_V_ACT_TYPE",
    "HBM_V_KV_TYPE",
    "HBM_V_INT_TYPE",
    "SCALAR_FP",
)

LATENCY_KEYS: tuple[str, ...] = (
    "SYSTOLIC_PROCESSING_OVERHEAD",
    "VECTOR_ADD_CYCLES",
    "VECTOR_MUL_CYCLES",
    "VECTOR_EXP_CYCLES",
    "VECTOR_PREFIX_SCAN_CYCLES",
    "VECTOR_SHIFT_CYCLES",
    "VECTOR_RECI_CYCLES",
    "VECTOR_MAX_CYCLES",
    "VECTOR_SUM_CYCLES",
    "SCALAR_FP_LONGEST_OPERATE_CYCLES",
    "SCALAR_FP_BASIC_CYCLES",
    "SCALAR_FP_EXP_CYCLES",
    "SCALAR_FP_SQRT_CYCLES",
    "SCALAR_FP_RECI_CYCLES",
    "SCALAR_INT_BASIC_CYCLES",
)
_OPTIONAL_LATENCY_KEYS = ("VECTOR_LONGEST_OPERATE_CYCLES", "VECTOR_BASIC_CYCLES")


_MAX_HBM_SIZE = 1 << 50  # 1 PiB of sparse address space; larger is certainly a typo
_MAX_DMA_ROWS = 1 << 32  # rows per H_* transfer (keeps P_M = ceil(value/MLEN)*MLEN and row offsets in int64)


# --------------------------------------------------------------------------- the config object


@dataclass(frozen=True)
class HardwareConfig:
    """Immutable, validated hardware configuration. Attribute names are the TOML keys."""

    MLEN: int
    VLEN: int
    BLEN: int
    HLEN: int
    BROADCAST_AMOUNT: int
    HBM_SIZE: int
    HBM_WIDTH: int
    MATRIX_SRAM_SIZE: int
    VECTOR_SRAM_SIZE: int
    HBM_M_Prefetch_Amount: int
    HBM_V_Prefetch_Amount: int
    HBM_V_Writeback_Amount: int
    DC_EN: int
    MAX_LOOP_INSTRUCTIONS: int
    BMM_SCALE: float
    FP_SRAM_SIZE: int
    INT_SRAM_SIZE: int
    HBM_TIMING_PRESET: str
    precision: Mapping[str, PlainType | MxType | FpType] = field(repr=False)
    latency: Mapping[str, tuple[int, int]] = field(repr=False)
    hbm_timing: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    section: str = "TRANSACTIONAL"
    source: str = "<builtin>"
    preset: str = ""  # hardware preset name (plena_sim.config.presets), "" if loaded from a file
    #: the unknown keys ``allow_unknown`` ignored (dotted paths), in file order; not part of the machine
    ignored: tuple[str, ...] = field(default=(), compare=False, repr=False)

    # ---- derived quantities
    @property
    def P_M(self) -> int:
        """Rows per H_PREFETCH_M: ``max(M, ceil(value/M)*M)``."""
        m = self.MLEN
        return max(m, -(-self.HBM_M_Prefetch_Amount // m) * m)

    @property
    def P_V(self) -> int:
        return self.HBM_V_Prefetch_Amount

    @property
    def P_W(self) -> int:
        return self.HBM_V_Writeback_Amount

    @property
    def mram_tiles(self) -> int:
        return self.MATRIX_SRAM_SIZE // self.MLEN

    def latency_cycles(self, key: str) -> int:
        """The latency value of ``key`` selected by DC_EN (dc_lib_en if DC_EN != 0)."""
        en, dis = self.latency[key]
        return en if self.DC_EN else dis

    def hbm_type(self, name: str) -> PlainType | MxType:
        t = self.precision[name]
        assert isinstance(t, (PlainType, MxType))
        return t

    def values(self) -> dict[str, Any]:
        """Plain key -> value mapping of every CONFIG key (for printing / JSON)."""
        return {k: getattr(self, k) for k, _, _ in _CONFIG_KEYS}

    def with_overrides(self, overrides: Mapping[str, Any]) -> HardwareConfig:
        """A new validated config with some CONFIG keys replaced."""
        raw = self.values()
        for key, value in overrides.items():
            if key not in _CONFIG_KIND:
                raise ConfigError(str(key) or "<empty>", f"unknown config key (known: {', '.join(_CONFIG_KIND)})")
            raw[key] = _coerce(key, value)
        cfg = replace(self, **raw)
        _validate(cfg)
        return cfg


# --------------------------------------------------------------------------- parsing helpers

_MAX_CONFIG_INT = 1 << 63  # every value must fit the int64 arrays of the Numba core
_MAX_LATENCY = (1 << 32) - 1  # cycles per instruction; 10^9 instructions of it still fit an int64 count


def _shown(v: Any) -> str:
    """``repr(v)`` for a message, kept short (and safe for integers of any size)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 1 << 128:
        return f"{'-' if v < 0 else ''}an integer of {abs(v).bit_length()} bits"
    try:
        r = repr(v)
    except ValueError:  # pragma: no cover - repr of huge nested numbers
        r = f"<{type(v).__name__}>"
    return r if len(r) <= 60 else r[:57] + "..."


def _coerce(key: str, value: Any) -> Any:
    kind = _CONFIG_KIND[key]
    if kind in ("int", "int0"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"must be an integer, got {_shown(value)}")
        lo = 1 if kind == "int" else 0
        if value < lo:
            raise ConfigError(key, f"must be an integer >= {lo}, got {_shown(value)}")
        if value >= _MAX_CONFIG_INT:
            raise ConfigError(key, f"must be an integer < 2^63, got {_shown(value)}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"must be a number, got {_shown(value)}")
        if isinstance(value, int) and abs(value) >= _MAX_CONFIG_INT or not math.isfinite(float(value)):
            raise ConfigError(key, f"must be finite, got {_shown(value)}")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a string, got {_shown(value)}")
    if len(value) > 64:
        raise ConfigError(key, f"must be a name of at most 64 characters, got {_shown(value)}")
    return value


def _table(node: Any, key: str) -> dict:
    if not isinstance(node, dict):
        raise ConfigError(key, f"must be a table, got {type(node).__name__}")
    return node


def _get(tbl: dict, name: str, key: str, typ: type | tuple[type, ...]) -> Any:
    if name not in tbl:
        raise ConfigError(key, f"missing required field '{name}'")
    v = tbl[name]
    if isinstance(v, bool) and typ is int:
        raise ConfigError(key, f"field '{name}' must be an integer, got {_shown(v)}")
    if not isinstance(v, typ):
        tn = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise ConfigError(key, f"field '{name}' must be {tn}, got {_shown(v)}")
    return v


class _KeyCheck:
    """The unknown keys of one document: a ConfigError naming the first (and its close match), or with
    ``allow`` a record of every one (dotted paths). Tables are checked when :meth:`finish` is called (after
    the document was parsed: a wrong value or a missing key is the more precise error), the top level and
    the section's tables at once (:meth:`now`)."""

    def __init__(self, source: str, allow: bool):
        self.source, self.allow = source, allow
        self.ignored: list[str] = []
        self._pending: list[tuple[Mapping, tuple[str, ...], str]] = []

    def check(self, tbl: Mapping, known: Iterable[str], where: str) -> None:
        """Every key of ``tbl`` (the table at dotted path ``where``) must be one of ``known`` (checked later)."""
        self._pending.append((tbl, tuple(known), where))

    def finish(self) -> None:
        for tbl, names, where in self._pending:
            self.now(tbl, names, where)
        self._pending.clear()

    def now(self, tbl: Mapping, known: Iterable[str], where: str, kind: str = "config key") -> None:
        """Every key of ``tbl`` (the table at dotted path ``where``) must be one of ``known``."""
        names = tuple(known)
        for k in tbl:
            if k in names:
                continue
            path = f"{where}.{k}" if where else str(k)
            if self.allow:
                self.ignored.append(path)
                continue
            close = did_you_mean(str(k), names)
            known_here = close or f" (known here: {', '.join(names) or 'none'})"
            raise ConfigError(
                path,
                f"unknown {kind} '{printable(k, KEY_SHOWN)}' in {self.source}{known_here}; keys this simulator does "
                "not read can "
                "be ignored with --allow-unknown-keys",
            )

    @staticmethod
    def hint(tbl: Mapping, missing: str, known: Iterable[str]) -> str:
        """For a missing ``missing``: the unknown key of ``tbl`` that is probably it, misspelt (else "")."""
        names = tuple(known)
        for k in tbl:
            if k not in names and did_you_mean(str(k), (missing,)):
                return f" (the file has {k!r}: a misspelling of {missing!r}?)"
        return ""

    def known(self, tbl: dict, names: Iterable[str]) -> dict:
        """``tbl`` without the keys that :meth:`check` let through unknown."""
        names = tuple(names)
        return {k: v for k, v in tbl.items() if k in names}


_FP_FIELDS = ("type", "sign", "exponent", "mantissa")
_INT_FIELDS = ("type", "width")
_SECTION_TABLES = ("CONFIG", "PRECISION", "LATENCY", "HBM_TIMING")


def _parse_scalar_type(tbl: dict, key: str, keys: _KeyCheck) -> FpType | IntType:
    kind = _get(tbl, "type", key, str)
    if kind in ("Fp", "Int"):
        keys.check(tbl, _FP_FIELDS if kind == "Fp" else _INT_FIELDS, key)
    if kind == "Fp":
        sign = _get(tbl, "sign", key, bool)
        e = _get(tbl, "exponent", key, int)
        m = _get(tbl, "mantissa", key, int)
        if not 1 <= e <= 11:
            raise ConfigError(key, f"exponent must be in 1..11, got {e}")
        if not 0 <= m <= 52:
            raise ConfigError(key, f"mantissa must be in 0..52, got {m}")
        return FpType(sign, e, m)
    if kind == "Int":
        w = _get(tbl, "width", key, int)
        if w not in (8, 16, 32):
            raise ConfigError(key, f"Int width must be 8, 16 or 32, got {w}")
        return IntType(w)
    raise ConfigError(key, f"type must be 'Fp' or 'Int', got {_shown(kind)}")


def _sub_type(tbl: dict, field_name: str, key: str, keys: _KeyCheck) -> FpType | IntType:
    where = f"{key}.{field_name}"
    return _parse_scalar_type(_table(tbl.get(field_name), where), where, keys)


def _parse_precision(name: str, tbl: Any, keys: _KeyCheck) -> PlainType | MxType | FpType | IntType:
    """The parsed type of ``PRECISION.<name>`` (an Int SCALAR_FP parses; :func:`_validate` rejects it)."""
    key = f"PRECISION.{name}"
    tbl = _table(tbl, key)
    if name == "SCALAR_FP":
        return _parse_scalar_type(tbl, key, keys)
    fmt = _get(tbl, "format", key, str)
    if fmt == "Plain":
        keys.check(tbl, ("format", "DATA_TYPE"), key)
        return PlainType(_sub_type(tbl, "DATA_TYPE", key, keys))
    if fmt == "Mx":
        keys.check(tbl, ("format", "block", "ELEM", "SCALE"), key)
        block = _get(tbl, "block", key, int)
        if block < 1:
            raise ConfigError(key, f"block must be >= 1, got {block}")
        elem = _sub_type(tbl, "ELEM", key, keys)
        scale = _sub_type(tbl, "SCALE", key, keys)
        if not isinstance(elem, FpType):
            raise ConfigError(f"{key}.ELEM", "MX with Int elements (MXINT) is not supported")
        if not isinstance(scale, FpType):
            raise ConfigError(f"{key}.SCALE", "scale must be Fp{sign=false, E=8, M=0} (E8M0)")
        return MxType(elem, scale, block)
    raise ConfigError(key, f"format must be 'Plain' or 'Mx', got {_shown(fmt)}")


def _check_precision(name: str, t: Any, cfg_len: int | None) -> None:
    key = f"PRECISION.{name}"
    if name == "SCALAR_FP":
        if t != BF16:
            raise ConfigError(key, f"must be bf16 Fp{{sign=true, E=8, M=7}}, got {t.describe()}")
        return
    if name == "VECTOR_SRAM_TYPE":
        if not (isinstance(t, PlainType) and t.data == BF16):
            raise ConfigError(key, f"must be Plain bf16 Fp{{sign=true, E=8, M=7}}, got {t.describe()}")
        return
    if name == "MATRIX_SRAM_TYPE":
        if not (isinstance(t, PlainType) and isinstance(t.data, FpType)):
            raise ConfigError(key, f"must be a Plain Fp type, got {t.describe()}")
        return
    if name == "HBM_V_INT_TYPE":
        return  # parsed, unused; Int allowed here only
    # the four HBM data types
    if isinstance(t, MxType):
        if not t.elem.sign or t.elem.bits not in (8, 16):
            raise ConfigError(f"{key}.ELEM", f"MX element must be signed Fp of 8 or 16 bits, got {t.elem.describe()}")
        if t.scale != E8M0:
            raise ConfigError(
                f"{key}.SCALE", f"MX scale must be E8M0 Fp{{sign=false, E=8, M=0}}, got {t.scale.describe()}"
            )
        assert cfg_len is not None
        if cfg_len % t.block != 0:
            lname = "MLEN" if name.startswith("HBM_M_") else "VLEN"
            raise ConfigError(f"{key}.block", f"{lname}={cfg_len} is not a multiple of block={t.block}")
        return
    if isinstance(t.data, IntType):
        raise ConfigError(key, "Int types are only accepted for HBM_V_INT_TYPE")
    if not t.data.sign or t.data.bits not in (8, 16, 32):
        raise ConfigError(key, f"Plain HBM type must be signed Fp of 8, 16 or 32 bits, got {t.describe()}")


def _validate(cfg: HardwareConfig) -> None:
    # memory.md §8.1: only these topology rules are load-time; VLEN == MLEN (CF-VM) and
    # BROADCAST_AMOUNT*HLEN == MLEN (CF-BA) are checked by the instructions that need them.
    if cfg.MLEN % cfg.BLEN:
        raise ConfigError("BLEN", f"MLEN={cfg.MLEN} is not a multiple of BLEN={cfg.BLEN}")
    if cfg.VLEN % cfg.HLEN:
        raise ConfigError("HLEN", f"VLEN={cfg.VLEN} is not a multiple of HLEN={cfg.HLEN}")
    for k in ("HBM_M_Prefetch_Amount", "HBM_V_Prefetch_Amount", "HBM_V_Writeback_Amount"):
        if getattr(cfg, k) > _MAX_DMA_ROWS:
            raise ConfigError(k, f"must be at most 2^32 rows per DMA, got {_shown(getattr(cfg, k))}")
    if cfg.HBM_SIZE > _MAX_HBM_SIZE:
        raise ConfigError("HBM_SIZE", f"{cfg.HBM_SIZE} bytes exceeds the modelled maximum 2^50")
    # preset file exists and is valid; [S.HBM_TIMING] keys are preset keys with valid values
    check_timing_config(cfg.HBM_TIMING_PRESET, cfg.hbm_timing)
    for name in PRECISION_KEYS:
        length = cfg.MLEN if name.startswith("HBM_M_") else cfg.VLEN
        _check_precision(name, cfg.precision[name], length)
    check_host_limits(cfg)


# --------------------------------------------------------------------------- host memory limits


@dataclass(frozen=True)
class HostLimits:
    """What this host can give one simulator process (bytes).

    ``dense``: memory that can really be written now -- the least of MemAvailable, what the process's cgroup
    may still take and RLIMIT_AS / RLIMIT_DATA; arrays the simulator writes wholesale must fit in it
    (``dense_source`` names which of them it is). ``allocation``: the largest single lazily-mapped
    (``np.zeros``) array the kernel will grant (overcommit policy, RLIMIT_AS / RLIMIT_DATA).
    ``address_space``: the most the process can map in total."""

    dense: int
    allocation: int
    address_space: int
    dense_source: str = "MemAvailable"


_USER_ADDRESS_SPACE = 1 << 47  # x86-64 / aarch64 (4-level page tables) user space
#: a cgroup v1 limit at least this large is "no limit" (the kernel's default is LONG_MAX, page aligned)
_CGROUP_UNLIMITED = 1 << 60


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[name] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    except OSError:
        pass
    return out


def _read_int(path: Path) -> int | None:
    """The integer in a small kernel file (None if absent, unreadable or ``max``)."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _stat_value(path: Path, name: str) -> int:
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(" ")
            if key == name and value.strip().isdigit():
                return int(value)
    except (OSError, UnicodeDecodeError):
        pass
    return 0


def _cgroup_levels(root: Path, path: str) -> list[Path]:
    """The cgroup directories from the process's own up to ``root`` (``root`` alone if its path is not
    under ``root``: a cgroup namespace mounts the process's own cgroup there)."""
    own = root / path.lstrip("/")
    if not own.is_dir():
        return [root]
    levels = [own]
    while levels[-1] != root and root in levels[-1].parents:
        levels.append(levels[-1].parent)
    return levels


def _cgroup_remaining(levels: list[Path], limit_file: str, usage_file: str, inactive: str) -> tuple[int, str] | None:
    """The least ``limit - (usage - inactive file cache)`` over the levels that have a limit, described."""
    best: tuple[int, str] | None = None
    for d in levels:
        limit = _read_int(d / limit_file)
        if limit is None or limit >= _CGROUP_UNLIMITED:
            continue
        used = max(0, (_read_int(d / usage_file) or 0) - _stat_value(d / "memory.stat", inactive))
        left = max(0, limit - used)
        if best is None or left < best[0]:
            best = (left, f"the cgroup memory limit ({_size(limit)}, {_size(used)} in use)")
    return best


def _cgroup_v2_available(root: Path, path: str) -> tuple[int, str] | None:
    return _cgroup_remaining(_cgroup_levels(root, path), "memory.max", "memory.current", "inactive_file")


def _cgroup_v1_available(root: Path, path: str) -> tuple[int, str] | None:
    levels = _cgroup_levels(root, path)
    return _cgroup_remaining(levels, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def _cgroup_available() -> tuple[int, str] | None:
    """What the process's memory cgroup (v1 or v2) may still take, described; None without a limit."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    found = []
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and not controllers:
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                found.append(_cgroup_v2_available(root, path))
        elif "memory" in controllers.split(","):
            found.append(_cgroup_v1_available(Path("/sys/fs/cgroup/memory"), path))
    limits = [f for f in found if f is not None]
    return min(limits) if limits else None


def _rlimit_space() -> int:
    """The process's address space: the least of the user space, RLIMIT_AS and RLIMIT_DATA."""
    space = _USER_ADDRESS_SPACE
    try:
        import resource

        for lim in (resource.RLIMIT_AS, getattr(resource, "RLIMIT_DATA", resource.RLIMIT_AS)):
            soft = resource.getrlimit(lim)[0]
            if soft != resource.RLIM_INFINITY and soft >= 0:
                space = min(space, soft)
    except (ImportError, OSError, ValueError):
        pass
    return space


def _allocation_limit(info: dict[str, int], total: int) -> int:
    """The largest single allocation the overcommit policy grants."""
    swap = info.get("SwapTotal", 0)
    try:
        with open("/proc/sys/vm/overcommit_memory", encoding="ascii") as fh:
            mode = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        mode = 0
    if mode == 1:  # always overcommit: only the address space limits an allocation
        return _USER_ADDRESS_SPACE
    if mode == 2:  # strict accounting
        return max(0, info.get("CommitLimit", total + swap) - info.get("Committed_AS", 0))
    return total + swap  # heuristic: one allocation may not exceed RAM + swap


def host_memory_limits() -> HostLimits:
    """Probe the host (Linux /proc, the memory cgroup, rlimits; a conservative sysconf fallback elsewhere)."""
    info = _meminfo()
    total = info.get("MemTotal")
    if total is None:
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            total = 1 << 40
    dense, source = info.get("MemAvailable", total), "MemAvailable"
    cgroup = _cgroup_available()
    if cgroup is not None and cgroup[0] < dense:
        dense, source = cgroup
    space = _rlimit_space()
    if space < dense:
        dense, source = space, f"RLIMIT_AS / RLIMIT_DATA ({_size(space)})"
    return HostLimits(dense, min(_allocation_limit(info, total), space), space, source)


def _size(n: int) -> str:
    for unit, shift in (("EiB", 60), ("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def _add(needs: dict[str, tuple[int, str]], key: str, n: int, what: str) -> None:
    """Count ``n`` bytes (``what``) against ``key`` (merged with what the key already has)."""
    if key in needs:
        m, before = needs[key]
        needs[key] = (m + n, f"{before} and {what}")
    else:
        needs[key] = (n, what)


#: the DMA op of each H_* instruction -> its CONFIG key and mnemonic
_DMA_OPS = {
    DMA_PREFETCH_M: ("HBM_M_Prefetch_Amount", "H_PREFETCH_M"),
    DMA_PREFETCH_V: ("HBM_V_Prefetch_Amount", "H_PREFETCH_V"),
    DMA_STORE_V: ("HBM_V_Writeback_Amount", "H_STORE_V"),
}


def _timing_needs(cfg: HardwareConfig, dense: dict[str, tuple[int, str]]) -> None:
    """The HBM timing state (channels x banks) and the DMA block scratch of the largest H_* instruction."""
    params = timing_params(cfg)
    ov = cfg.hbm_timing
    key = next((f"HBM_TIMING.{k}" for k in ("channels", "bank_groups", "banks_per_group") if k in ov), None)
    what = f"the HBM timing state of {params.channels} channels x {params.banks} banks ({cfg.HBM_TIMING_PRESET}"
    _add(dense, key or "HBM_TIMING_PRESET", timing_state_bytes(params), what + (" with [HBM_TIMING])" if ov else ")"))
    blocks = _dma_blocks_that_run(cfg, params)
    op = max(blocks, key=lambda o: blocks[o][1])
    name, mnemonic = _DMA_OPS[op]
    rows, n = blocks[op]
    what = f"the DMA block scratch of one {mnemonic} of {rows} rows ({n} blocks)"
    _add(dense, name, dma_scratch_bytes(n, params.channels), what)


def _dma_blocks_that_run(cfg: HardwareConfig, params: Any) -> dict[int, tuple[int, int]]:
    """op -> (rows, most distinct blocks) of an H_* instruction that can complete: its rows fit the SRAM it
    moves to or from (more rows fault before any work: BD-VROW / BD-MRAM) and its blocks the HBM."""
    fits = {
        DMA_PREFETCH_M: min(cfg.P_M, cfg.mram_tiles * cfg.MLEN),
        DMA_PREFETCH_V: min(cfg.P_V, cfg.VECTOR_SRAM_SIZE),
        DMA_STORE_V: min(cfg.P_W, cfg.VECTOR_SRAM_SIZE),
    }
    all_rows = {DMA_PREFETCH_M: cfg.P_M, DMA_PREFETCH_V: cfg.P_V, DMA_STORE_V: cfg.P_W}
    hbm_blocks = cfg.HBM_SIZE // params.burst_bytes + 2
    out = {}
    for op, n in dma_blocks_by_op(cfg, params).items():
        per_row = n // max(1, all_rows[op])
        out[op] = (fits[op], min(fits[op] * per_row, hbm_blocks))
    return out


def host_memory_needs(cfg: HardwareConfig) -> tuple[dict[str, tuple[int, str]], dict[str, tuple[int, str]]]:
    """Host bytes a machine of ``cfg`` allocates: ``(dense, lazy)``, each ``key -> (bytes, what)``, the key
    being the config key that sizes it (the one a refusal names).

    Dense arrays are written wholesale (cleared, filled), or as a whole by one instruction, and so must exist
    in RAM: the accumulators, FP / INT SRAM, the float64 scratch of the matrix and vector units, the HBM
    timing state, the DMA block scratch. Lazy ones are ``np.zeros`` arrays of which only touched pages cost
    memory (VRAM, MRAM, the HBM page table)."""
    M, V, B, BA = cfg.MLEN, cfg.VLEN, cfg.BLEN, cfg.BROADCAST_AMOUNT
    W = max(M, V)
    dense: dict[str, tuple[int, str]] = {}
    _add(
        dense,
        "MLEN",
        4 * (BA * M * M + BA * M + B * B + B),
        f"accumulators hm_accum [BROADCAST_AMOUNT={BA}, MLEN={M}, MLEN] f32 and hv_accum",
    )
    _add(
        dense,
        "VLEN" if V > M else "MLEN",
        4 * W + 8 * (W + 72) * (W + 8) + 8 * W * W + 9 * W + 16,
        f"the float64 scratch of the matrix and vector units ([W+72, W+8] and [W, W], W = max(MLEN, VLEN) = {W})",
    )
    _add(dense, "FP_SRAM_SIZE", 2 * cfg.FP_SRAM_SIZE, f"FP SRAM of {cfg.FP_SRAM_SIZE} bf16 words")
    _add(dense, "INT_SRAM_SIZE", 4 * cfg.INT_SRAM_SIZE, f"INT SRAM of {cfg.INT_SRAM_SIZE} u32 words")
    _timing_needs(cfg, dense)
    lazy = {
        "VECTOR_SRAM_SIZE": (
            2 * cfg.VECTOR_SRAM_SIZE * cfg.VLEN,
            f"VRAM of {cfg.VECTOR_SRAM_SIZE} rows x VLEN={cfg.VLEN} bf16",
        ),
        "MATRIX_SRAM_SIZE": (4 * cfg.mram_tiles * M * M, f"MRAM of {cfg.mram_tiles} tiles x MLEN={M} x MLEN f32"),
        "HBM_SIZE": (
            -(-cfg.HBM_SIZE // (1 << 16)) * 8,
            f"the HBM page table (8 bytes per 64 KiB page of HBM_SIZE={cfg.HBM_SIZE})",
        ),
    }
    return dense, lazy


def check_host_limits(cfg: HardwareConfig, limits: HostLimits | None = None) -> None:
    """ConfigError (naming the key) if a machine of ``cfg`` could not be allocated on this host.

    Sparse / lazily-mapped storage (HBM pages and their page table, VRAM, MRAM) may be far larger than RAM:
    only what a program touches costs memory. But the arrays the simulator writes wholesale (see
    :func:`host_memory_needs`) must fit into the memory available now, and every array must be mappable at
    all (the largest allocation the kernel grants, the process address space)."""
    lim = limits if limits is not None else host_memory_limits()
    dense, lazy = host_memory_needs(cfg)
    dense_total = sum(n for n, _ in dense.values())
    avail = min(lim.dense, lim.allocation)
    if dense_total > avail:
        key = max(dense, key=lambda k: dense[k][0])
        n, what = dense[key]
        others = f" (all dense arrays: {_size(dense_total)})" if dense_total != n else ""
        source = lim.dense_source if lim.dense <= lim.allocation else "the largest allocation the host grants"
        raise ConfigError(
            key,
            f"{what} needs {_size(n)} of host memory that is written wholesale{others}, "
            f"more than the {_size(avail)} available on this host ({source})",
        )
    for key, (n, what) in lazy.items():
        if n > lim.allocation:
            raise ConfigError(
                key,
                f"{what} needs {_size(n)} of address space; it is mapped lazily (only "
                "touched pages cost memory) but cannot be allocated at all: the largest "
                f"allocation this host grants is {_size(lim.allocation)}",
            )
    everything = dense_total + sum(n for n, _ in lazy.values())
    if everything > lim.address_space:
        key = max(lazy, key=lambda k: lazy[k][0])
        raise ConfigError(
            key,
            f"{lazy[key][1]} needs {_size(lazy[key][0])}; with the other arrays "
            f"({_size(everything)} in all) this exceeds the {_size(lim.address_space)} "
            "address space of this process",
        )


#: host bytes per program instruction while it runs: the core's per-pc int64 tables (opcode, word, 7 fields,
#: latency, unit, C_BREAK target, static-fault flag, budget units, profile count and cycles: 16 x 8 bytes), the
#: uint32 word array and the decode temporaries (measured: ~115 bytes at 5 x 10^7 instructions)
PROGRAM_BYTES_PER_INSTRUCTION = 160
#: smaller programs run without probing the host (one probe reads /proc and the cgroup files)
_PROGRAM_PROBE_BYTES = 1 << 26


def check_program_memory(n_instructions: int, limits: HostLimits | None = None) -> None:
    """MemoryError (what is needed and what the host has) if a program of ``n_instructions`` cannot be run here:
    its per-instruction tables are written wholesale, so they must fit the memory available now (the host is
    probed only for programs needing more than :data:`_PROGRAM_PROBE_BYTES`)."""
    need = int(n_instructions) * PROGRAM_BYTES_PER_INSTRUCTION
    if need <= _PROGRAM_PROBE_BYTES and limits is None:
        return
    lim = limits if limits is not None else host_memory_limits()
    if need > lim.dense:
        raise MemoryError(
            f"a program of {int(n_instructions):,} instructions needs {_size(need)} for the core's "
            f"per-instruction tables, more than the {_size(lim.dense)} available ({lim.dense_source})"
        )


def out_of_memory_message(exc: MemoryError) -> str:
    """The one line of a MemoryError that escaped (the CLI prints it): what failed and what this host has."""
    what = str(exc) or "a memory allocation failed"
    lim = host_memory_limits()
    return (
        f"out of host memory: {what}; this host has {_size(lim.dense)} available ({lim.dense_source}); "
        "use a smaller configuration or workload (plena-sim config shows the machine)"
    )


def _section_of(doc: dict, section: str, source: str, keys: _KeyCheck) -> dict:
    """The section's table; the top level's unknown keys checked (another mode's section and ``[MODE]`` are
    not: they are not read)."""
    if section in doc:
        for k, v in doc.items():
            if k != "MODE" and not isinstance(v, dict):
                keys.now({k: v}, ("MODE", section), "")
        sec = _table(doc[section], section)
        keys.now(sec, _SECTION_TABLES, section)
        return sec
    # "a plain file with just the keys": CONFIG/PRECISION/LATENCY at top level
    if "CONFIG" in doc:
        keys.now(doc, (*_SECTION_TABLES, "MODE"), "")
        return doc
    present = ", ".join(k for k in doc if isinstance(doc[k], dict)) or "none"
    raise ConfigError(section, f"section [{section}] not found in {source} (sections present: {present})")


def _config_values(conf: dict, section: str, source: str, keys: _KeyCheck) -> dict[str, Any]:
    """The CONFIG keys' values (defaults for the optional ones), coerced."""
    raw: dict[str, Any] = {}
    for key, required, _kind in _CONFIG_KEYS:
        if key not in conf:
            if required:
                hint = keys.hint(conf, key, _CONFIG_KIND)
                raise ConfigError(key, f"missing required key [{section}.CONFIG.{key}] in {source}{hint}")
            raw[key] = _CONFIG_DEFAULTS[key]
            continue
        entry = conf[key]
        if isinstance(entry, dict):
            if "value" not in entry:
                raise ConfigError(key, f"[{section}.CONFIG.{key}] has no 'value'{keys.hint(entry, 'value', ())}")
            keys.check(entry, ("value",), f"CONFIG.{key}")
            entry = entry["value"]
        raw[key] = _coerce(key, entry)
    keys.check(conf, _CONFIG_KIND, "CONFIG")
    return raw


def _precisions(prec_tbl: dict, section: str, source: str, keys: _KeyCheck) -> dict:
    precision: dict[str, PlainType | MxType | FpType | IntType] = {}
    for name in PRECISION_KEYS:
        if name not in prec_tbl:
            hint = keys.hint(prec_tbl, name, PRECISION_KEYS)
            raise ConfigError(
                f"PRECISION.{name}", f"missing required precision [{section}.PRECISION.{name}] in {source}{hint}"
            )
        precision[name] = _parse_precision(name, prec_tbl[name], keys)
    keys.check(prec_tbl, PRECISION_KEYS, "PRECISION")
    return precision


def _latencies(lat_tbl: dict, section: str, source: str, keys: _KeyCheck) -> dict[str, tuple[int, int]]:
    names = LATENCY_KEYS + _OPTIONAL_LATENCY_KEYS
    latency = {}
    for name in names:
        key = f"LATENCY.{name}"
        if name not in lat_tbl:
            if name in _OPTIONAL_LATENCY_KEYS:
                continue
            hint = keys.hint(lat_tbl, name, names)
            raise ConfigError(key, f"missing required latency [{section}.LATENCY.{name}] in {source}{hint}")
        t = _table(lat_tbl[name], key)
        pair = []
        for f in ("dc_lib_en", "dc_lib_dis"):
            v = _get(t, f, key, int)
            if not 0 <= v <= _MAX_LATENCY:
                raise ConfigError(key, f"{f} must be an integer in [0, 2^32 - 1] cycles, got {_shown(v)}")
            pair.append(v)
        keys.check(t, ("dc_lib_en", "dc_lib_dis"), key)
        latency[name] = (pair[0], pair[1])
    keys.check(lat_tbl, names, "LATENCY")
    return latency


def _hbm_timing(timing_tbl: dict, keys: _KeyCheck) -> dict[str, float]:
    keys.now(timing_tbl, PRESET_KEYS, "HBM_TIMING", "HBM timing key")
    hbm_timing = {}
    for k, v in keys.known(timing_tbl, PRESET_KEYS).items():
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or abs(v) >= _MAX_CONFIG_INT
            or not math.isfinite(v)
            or v < 0
        ):
            raise ConfigError(f"HBM_TIMING.{k}", f"must be a finite number >= 0, got {_shown(v)}")
        hbm_timing[k] = v
    return hbm_timing


def _from_document(doc: dict, section: str, source: str, allow_unknown: bool = False) -> HardwareConfig:
    keys = _KeyCheck(source, allow_unknown)
    sec = _section_of(doc, section, source, keys)
    raw = _config_values(_table(sec.get("CONFIG", {}), "CONFIG"), section, source, keys)
    precision = _precisions(_table(sec.get("PRECISION", {}), "PRECISION"), section, source, keys)
    latency = _latencies(_table(sec.get("LATENCY", {}), "LATENCY"), section, source, keys)
    hbm_timing = _hbm_timing(_table(sec.get("HBM_TIMING", {}), "HBM_TIMING"), keys)
    keys.finish()
    # not yet validated: an Int SCALAR_FP is rejected by _validate below (_check_precision)
    checked = cast("dict[str, PlainType | MxType | FpType]", precision)
    cfg = HardwareConfig(
        **raw,
        precision=MappingProxyType(checked),
        latency=MappingProxyType(latency),
        hbm_timing=MappingProxyType(hbm_timing),
        section=section,
        source=source,
        ignored=tuple(keys.ignored),
    )
    _validate(cfg)
    return cfg


@dataclass(frozen=True)
class Inconsistency:
    """One rule a matrix kernel needs that ``cfg`` breaks, with the value of ``key`` that satisfies it."""

    key: str
    value: int
    suggested: int
    rule: str


def inconsistencies(cfg: HardwareConfig) -> list[Inconsistency]:
    """What a machine that runs every kernel needs beyond the load-time rules, as keys to change.

    These configs load (memory.md §8.1) and run vector-only programs; matrix instructions fault at run
    time (CF-VM, CF-BA) and the generators refuse them. Each entry names the key that must change
    together with MLEN and the value that makes the machine consistent."""
    M = cfg.MLEN
    out = []
    if cfg.VLEN != M:
        out.append(Inconsistency("VLEN", cfg.VLEN, M, "VLEN must equal MLEN (matrix instructions, CF-VM)"))
    if cfg.BROADCAST_AMOUNT * cfg.HLEN != M:
        if M % cfg.HLEN == 0:
            out.append(
                Inconsistency(
                    "BROADCAST_AMOUNT",
                    cfg.BROADCAST_AMOUNT,
                    M // cfg.HLEN,
                    "BROADCAST_AMOUNT*HLEN must equal MLEN (batched matrix instructions, CF-BA)",
                )
            )
        else:
            h = math.gcd(M, cfg.HLEN)
            out.append(Inconsistency("HLEN", cfg.HLEN, h, f"HLEN must divide MLEN={M} (CF-BA)"))
            out.append(
                Inconsistency(
                    "BROADCAST_AMOUNT", cfg.BROADCAST_AMOUNT, M // h, "BROADCAST_AMOUNT*HLEN must equal MLEN (CF-BA)"
                )
            )
    if cfg.P_M != M:
        out.append(
            Inconsistency(
                "HBM_M_Prefetch_Amount",
                cfg.HBM_M_Prefetch_Amount,
                M,
                f"one H_PREFETCH_M must load one MLEN tile (effective P_M={cfg.P_M})",
            )
        )
    for key in ("HBM_V_Prefetch_Amount", "HBM_V_Writeback_Amount"):
        v = getattr(cfg, key)
        if M % v:
            good = max(d for d in range(1, min(v, M) + 1) if M % d == 0)
            out.append(Inconsistency(key, v, good, "must divide MLEN (row tiles are staged in whole transfers)"))
    return out


def inconsistency_message(cfg: HardwareConfig, changed: Mapping[str, Any] | None = None) -> str | None:
    """One message naming every key that must change together (None if consistent)."""
    bad = inconsistencies(cfg)
    if not bad:
        return None
    what = ", ".join(f"{k}={v}" for k, v in (changed or {}).items())
    head = f"{what}: " if what else ""
    rules = "; ".join(f"{b.key}={b.value} -> {b.suggested} ({b.rule})" for b in bad)
    fix = " ".join(f"--set-hw {k}={v}" for k, v in (changed or {}).items())
    fix = (fix + " " if fix else "") + " ".join(f"--set-hw {b.key}={b.suggested}" for b in bad)
    return f"{head}inconsistent machine for the kernels at MLEN={cfg.MLEN}; change together: {rules}. Consistent: {fix}"


def parse_override(text: str) -> tuple[str, Any]:
    """Parse a CLI ``KEY=VALUE`` override; the value is read as a TOML value (so 1.5, 64, "x")."""
    if "=" not in text:
        raise ConfigError(text or "<empty>", "override must look like KEY=VALUE")
    key, _, value = text.partition("=")
    key = key.strip()
    value = value.strip()
    if key not in _CONFIG_KIND:
        raise ConfigError(key or "<empty>", f"unknown config key (known: {', '.join(_CONFIG_KIND)})")
    try:
        parsed = parse_toml(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value  # a bare word is a string (e.g. HBM_TIMING_PRESET=HBM3)
    except ValueError:  # nested too deeply, or an integer literal of more than 4300 digits
        raise ConfigError(key, f"value {_shown(value)} is not a usable TOML value") from None
    return key, parsed


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def _toml_type(t: FpType | IntType) -> str:
    if isinstance(t, IntType):
        return f'{{ type = "Int", width = {t.width} }}'
    return f'{{ type = "Fp", sign = {_toml_value(t.sign)}, exponent = {t.exponent}, mantissa = {t.mantissa} }}'


def config_toml(cfg: HardwareConfig) -> str:
    """The whole of ``cfg`` as a config file of one section (``cfg.section``): every CONFIG key, precision,
    latency and ``[HBM_TIMING]`` value, so that ``load_config(file, section=cfg.section)`` gives the same
    machine (its ``source`` and ``preset`` aside)."""
    sec = cfg.section
    out = [f"# the effective configuration of {cfg.preset or cfg.source} (plena-sim), section {sec}", ""]
    out += [f"[{sec}.CONFIG]"] + [f"{k} = {_toml_value(v)}" for k, v in cfg.values().items()] + [""]
    for name, t in cfg.precision.items():
        out.append(f"[{sec}.PRECISION.{name}]")
        if isinstance(t, PlainType):
            out += ['format = "Plain"', f"DATA_TYPE = {_toml_type(t.data)}"]
        elif isinstance(t, MxType):
            out += [
                'format = "Mx"',
                f"block = {t.block}",
                f"ELEM = {_toml_type(t.elem)}",
                f"SCALE = {_toml_type(t.scale)}",
            ]
        else:  # SCALAR_FP: the type itself
            out += [line.strip() for line in _toml_type(t).strip("{} ").split(", ")]
        out.append("")
    for name, (en, dis) in cfg.latency.items():
        out += [f"[{sec}.LATENCY.{name}]", f"dc_lib_en = {en}", f"dc_lib_dis = {dis}", ""]
    if cfg.hbm_timing:
        out += [f"[{sec}.HBM_TIMING]"] + [f"{k} = {_toml_value(v)}" for k, v in cfg.hbm_timing.items()] + [""]
    return "\n".join(out)


def default_config_text() -> str:
    return resources.files("plena_sim.config").joinpath("data/plena_settings.toml").read_text(encoding="utf-8")


def load_config(
    path: str | os.PathLike | None = None,
    *,
    section: str = "TRANSACTIONAL",
    overrides: Mapping[str, Any] | None = None,
    allow_unknown: bool = False,
) -> HardwareConfig:
    """Load and validate a configuration.

    ``path`` None -> env ``PLENA_SETTINGS_TOML`` -> the packaged default (upstream reference file); a file
    must be a regular file of at most 16 MiB, nested at most 64 levels deep.
    ``section`` selects the TOML section (``TRANSACTIONAL`` or e.g. ``ANALYTIC``); a plain file with
    ``CONFIG``/``PRECISION``/``LATENCY`` tables at the top level is accepted too.
    ``overrides`` replaces individual CONFIG keys (e.g. ``{"MLEN": 128}``) before validation.
    ``allow_unknown`` ignores (and records in ``ignored``) the keys the simulator does not read instead of
    refusing them.
    """
    origin = "path"  # the key an unreadable file is reported under: where its name came from
    if path is None:
        path, origin = os.environ.get("PLENA_SETTINGS_TOML") or None, "PLENA_SETTINGS_TOML"
    if path is None:
        text, source = default_config_text(), "<builtin plena_settings.toml>"
    else:
        p = Path(path)
        try:
            text = read_text_input(p, "config file", MAX_CONFIG_BYTES)
        except InputFileError as exc:
            raise ConfigError(origin, f"{str(p)!r}: {exc.reason}") from None
        source = str(p)
    try:
        doc = parse_toml(text)
    except ValueError as exc:  # bad syntax, nested too deeply, an integer literal of more than 4300 digits
        raise ConfigError("toml", f"{source}: {exc}") from None
    return config_from_document(doc, section, source, overrides, allow_unknown=allow_unknown)


def _apply_overrides_to_doc(doc: dict, section: str, overrides: Mapping[str, Any]) -> dict:
    import copy

    doc = copy.deepcopy(doc)
    sec = doc.get(section) if section in doc else (doc if "CONFIG" in doc else None)
    if not isinstance(sec, dict):
        return doc  # _from_document reports the missing section
    conf = sec.setdefault("CONFIG", {})
    if not isinstance(conf, dict):
        return doc
    for key, value in overrides.items():
        if key not in _CONFIG_KIND:
            raise ConfigError(str(key) or "<empty>", f"unknown config key (known: {', '.join(_CONFIG_KIND)})")
        conf[key] = {"value": value}
    return doc


def config_from_document(
    doc: dict, section: str, source: str, overrides: Mapping[str, Any] | None = None, *, allow_unknown: bool = False
) -> HardwareConfig:
    """Validate an already parsed settings document (``section`` of it) with ``overrides`` on top."""
    if overrides:
        doc = _apply_overrides_to_doc(doc, section, overrides)
    return _from_document(doc, section, source, allow_unknown)


def default_config() -> HardwareConfig:
    """The built-in default (TRANSACTIONAL section of the packaged reference file), ignoring env."""
    return _from_document(tomllib.loads(default_config_text()), "TRANSACTIONAL", "<builtin plena_settings.toml>")
