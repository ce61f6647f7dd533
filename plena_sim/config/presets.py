"""Hardware presets: named, complete machines as package data (``plena_sim/config/data/presets/NAME.toml``).

One job: turn a preset name (plus ``--set-hw`` style overrides) into a validated
:class:`~plena_sim.config.HardwareConfig`, and pick between a preset and a config file.

A preset file has a ``[preset]`` table (``name``, ``description``, ``order`` in listings, ``base``: the
section of the packaged upstream ``plena_settings.toml`` that supplies PRECISION, LATENCY and every key
the preset does not list; optionally ``clock_mhz``, the board's clock: informational, the simulator counts
cycles, ``plena-sim model`` turns them into time with it) and a ``[CONFIG]`` table of ``KEY = value``
lines, each with its source in a comment. Optional ``[LATENCY.X]`` tables replace whole latency entries of
the base section.
"""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from ..errors import ConfigError
from .hardware import HardwareConfig, config_from_document, default_config_text, load_config

__all__ = ["DEFAULT_PRESET", "PresetInfo", "preset_names", "preset_info", "load_preset", "resolve_config"]

DEFAULT_PRESET = "transactional"


@dataclass(frozen=True)
class PresetInfo:
    name: str
    description: str
    base: str
    config: Mapping[str, Any]  # the CONFIG keys the preset sets (the rest come from ``base``)
    text: str  # the file, comments included (its sources)
    clock_mhz: float | None = None  # the board's clock, if the preset names one (informational)


def _preset_dir():
    return resources.files("plena_sim.config").joinpath("data/presets")


@cache
def preset_names() -> tuple[str, ...]:
    order = {}
    for p in _preset_dir().iterdir():
        if p.name.endswith(".toml"):
            order[p.name[:-5]] = tomllib.loads(p.read_text(encoding="utf-8"))["preset"].get("order", 99)
    return tuple(sorted(order, key=lambda n: (order[n], n)))


@cache
def preset_info(name: str) -> PresetInfo:
    if name not in preset_names():
        raise ConfigError("hw", f"unknown hardware preset {name!r} (known: {', '.join(preset_names())})")
    text = _preset_dir().joinpath(f"{name}.toml").read_text(encoding="utf-8")
    doc = tomllib.loads(text)
    meta = doc["preset"]
    clock = meta.get("clock_mhz")
    return PresetInfo(
        name=name,
        description=meta["description"],
        base=meta["base"],
        config=dict(doc.get("CONFIG", {})),
        text=text,
        clock_mhz=None if clock is None else float(clock),
    )


@cache
def _preset_document(name: str) -> dict:
    """The packaged upstream document with the preset's keys written into its base section."""
    info = preset_info(name)
    doc = tomllib.loads(default_config_text())
    sec = doc[info.base]
    for key, value in info.config.items():
        sec["CONFIG"][key] = {"value": value}
    extra = tomllib.loads(info.text)
    for key, entry in extra.get("LATENCY", {}).items():
        sec["LATENCY"][key] = entry
    return doc


def _load(name: str, overrides: Mapping[str, Any]) -> HardwareConfig:
    info = preset_info(name)
    doc = copy.deepcopy(_preset_document(name))
    cfg = config_from_document(doc, info.base, f"preset {name}", overrides)
    return replace(cfg, preset=name)


@lru_cache(maxsize=128)
def _load_cached(name: str, overrides: tuple) -> HardwareConfig:
    return _load(name, dict(overrides))


def load_preset(name: str = DEFAULT_PRESET, overrides: Mapping[str, Any] | None = None) -> HardwareConfig:
    """The validated, immutable config of preset ``name`` with ``overrides`` (CONFIG keys) on top."""
    preset_info(name)  # unknown name -> ConfigError
    items = tuple(sorted((overrides or {}).items(), key=lambda kv: str(kv[0])))
    try:
        hash(items)
    except TypeError:  # a list / table value: validation rejects it
        return _load(name, dict(items))
    return _load_cached(name, items)


def resolve_config(
    path: str | os.PathLike | None = None,
    *,
    hw: str | None = None,
    section: str = "TRANSACTIONAL",
    overrides: Mapping[str, Any] | None = None,
    allow_unknown: bool = False,
) -> HardwareConfig:
    """A config from exactly one source: preset ``hw``, or a file (``path`` / ``$PLENA_SETTINGS_TOML`` /
    the packaged reference file, as :func:`~plena_sim.config.load_config`, ``allow_unknown`` passed on);
    ``overrides`` on top."""
    if hw is not None:
        if path is not None:
            raise ConfigError("hw", "--hw and --config are mutually exclusive (a preset is a whole machine)")
        return load_preset(hw, overrides)
    return load_config(path, section=section, overrides=overrides, allow_unknown=allow_unknown)
