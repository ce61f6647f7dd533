"""Configuration: the hardware configuration and the named hardware presets.

``hardware`` loads and validates ``plena_settings.toml`` (the packaged default is ``data/plena_settings.toml``)
into a frozen :class:`HardwareConfig`; ``presets`` builds a named machine from ``data/presets/NAME.toml``.
This package re-exports the public names of ``hardware`` (its ``__all__``), so
``from plena_sim.config import load_config, HardwareConfig`` keeps working; everything else (private names,
monkeypatch targets, the presets) lives in the submodules.
"""

from .hardware import (
    LATENCY_KEYS,
    PRECISION_KEYS,
    ConfigError,
    FpType,
    HardwareConfig,
    HostLimits,
    Inconsistency,
    IntType,
    MxType,
    PlainType,
    check_host_limits,
    config_from_document,
    config_toml,
    default_config,
    default_config_text,
    host_memory_limits,
    host_memory_needs,
    inconsistencies,
    inconsistency_message,
    load_config,
    out_of_memory_message,
    parse_override,
)

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
