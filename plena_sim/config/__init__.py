"""Configuration: the hardware configuration and the named hardware presets.

``hardware`` loads and validates ``plena_settings.toml`` (the packaged default is ``data/plena_settings.toml``)
into a frozen :class:`HardwareConfig`; ``presets`` builds a named machine from ``data/presets/NAME.toml``.
This package re-exports the public names of ``hardware`` (its ``__all__``), so
``from plena_sim.config import load_config, HardwareConfig`` keeps working; everything else (private names,
monkeypatch targets, the presets) lives in the submodules.
"""

from . import hardware
from .hardware import *  # noqa: F403 - the re-export is exactly hardware.__all__

__all__ = list(hardware.__all__)
