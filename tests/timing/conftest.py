"""Fixtures of the HBM timing tests (timing.md §5)."""

import pytest

from plena_sim.config import default_config
from plena_sim.hbm.presets import load_preset, timing_params


@pytest.fixture(scope="session")
def cfg():
    return default_config()


@pytest.fixture(scope="session")
def hbm2(cfg):
    return timing_params(cfg)


@pytest.fixture(scope="session")
def hbm3():
    return load_preset("HBM3")


@pytest.fixture(scope="session")
def cfg1024(cfg):
    """MLEN = VLEN = P_M = 1024 (timing.md §5.5 large H_PREFETCH_M case)."""
    return cfg.with_overrides({"MLEN": 1024, "VLEN": 1024, "HBM_M_Prefetch_Amount": 1024, "BROADCAST_AMOUNT": 64})
