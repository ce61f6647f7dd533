"""The public API of ``plena_sim`` (plena_sim/__init__.py): its names resolve, lazily (PEP 562), to the very objects
of their defining modules; ``import plena_sim`` alone imports no Numba (the JIT cache location is chosen first);
``plena_sim.config`` re-exports the public names of ``plena_sim.config.hardware``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import plena_sim

ROOT = Path(__file__).resolve().parents[1]

PUBLIC = {
    "Machine": "plena_sim.machine",
    "RunResult": "plena_sim.machine",
    "load_config": "plena_sim.config.hardware",
    "default_config": "plena_sim.config.hardware",
    "HardwareConfig": "plena_sim.config.hardware",
    "load_preset": "plena_sim.config.presets",
    "preset_names": "plena_sim.config.presets",
    "SimFault": "plena_sim.faults",
}


@pytest.mark.parametrize(("name", "module"), sorted(PUBLIC.items()))
def test_a_public_name_is_its_defining_modules_object(name, module):
    assert getattr(plena_sim, name) is getattr(importlib.import_module(module), name)


def test_the_from_import_form():
    from plena_sim import (
        HardwareConfig,
        Machine,
        RunResult,
        SimFault,
        default_config,
        load_config,
        load_preset,
        preset_names,
    )
    from plena_sim.config.hardware import HardwareConfig as HC
    from plena_sim.faults import SimFault as SF
    from plena_sim.machine import Machine as M
    from plena_sim.machine import RunResult as RR

    assert (HardwareConfig, Machine, RunResult, SimFault) == (HC, M, RR, SF)
    assert isinstance(default_config(), HardwareConfig) and "small" in preset_names()
    assert isinstance(load_preset("small"), HardwareConfig) and callable(load_config)


def test_all_and_dir_list_the_public_names_and_nothing_else_is_made_up():
    assert sorted(plena_sim.__all__) == sorted(PUBLIC)
    assert set(PUBLIC) <= set(dir(plena_sim))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = plena_sim.no_such_name  # type: ignore[attr-defined]


def test_config_package_reexports_the_hardware_module():
    import plena_sim.config as config
    from plena_sim.config import hardware

    assert sorted(config.__all__) == sorted(hardware.__all__)
    for name in hardware.__all__:
        assert getattr(config, name) is getattr(hardware, name), name


def _fresh(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


NUMBA_LOADED = "import sys; print(sorted(m for m in sys.modules if m == 'numba' or m.startswith('numba.')))"


@pytest.mark.parametrize("stmt", ["import plena_sim", "import plena_sim.config", "import plena_sim.errors"])
def test_importing_the_package_loads_no_numba(stmt):
    out = _fresh(f"{stmt}\n{NUMBA_LOADED}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_first_public_access_imports_its_module():
    out = _fresh(
        "import sys, plena_sim\n"
        "assert 'plena_sim.machine' not in sys.modules\n"
        "m = plena_sim.Machine\n"
        "assert 'plena_sim.machine' in sys.modules and vars(plena_sim)['Machine'] is m\n"
    )
    assert out.returncode == 0, out.stderr
