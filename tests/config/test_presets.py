"""Hardware presets (plena_sim/config/data/presets): every key a consistent machine needs, exact values."""

from __future__ import annotations

import pytest

from plena_sim.config import ConfigError, default_config, inconsistencies, inconsistency_message
from plena_sim.config.presets import load_preset, preset_info, preset_names, resolve_config
from plena_sim.machine import Machine

# name: MLEN, VLEN, BLEN, HLEN, BA, P_M, P_V, P_W, MRAM tiles, VECTOR_SRAM_SIZE, HBM GiB, FP, HBM timing
EXPECTED = {
    "transactional": (64, 64, 4, 16, 4, 64, 4, 4, 64, 4194304, 16, 1024, "HBM2"),
    "small": (32, 32, 4, 16, 2, 32, 4, 4, 128, 4194304, 16, 1024, "HBM2"),
    "v80-64x16": (64, 64, 16, 16, 4, 64, 4, 4, 144, 4194304, 32, 1024, "HBM3"),
    "v80-128x64": (128, 128, 64, 16, 8, 128, 8, 8, 72, 4194304, 32, 1024, "HBM3"),
    "v80-256x64": (256, 256, 64, 16, 16, 256, 16, 16, 36, 4194304, 32, 1024, "HBM3"),
    "analytic": (2048, 2048, 128, 128, 16, 2048, 16, 16, 8, 65536, 128, 1024, "HBM2"),
}


def test_preset_list_order():
    assert preset_names() == tuple(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_preset_values(name):
    c = load_preset(name)
    got = (
        c.MLEN,
        c.VLEN,
        c.BLEN,
        c.HLEN,
        c.BROADCAST_AMOUNT,
        c.P_M,
        c.P_V,
        c.P_W,
        c.mram_tiles,
        c.VECTOR_SRAM_SIZE,
        c.HBM_SIZE >> 30,
        c.FP_SRAM_SIZE,
        c.HBM_TIMING_PRESET,
    )
    assert got == EXPECTED[name]
    assert c.preset == name and c.source == f"preset {name}"
    assert inconsistencies(c) == []  # every preset runs every kernel


def test_transactional_is_the_upstream_reference_machine():
    assert load_preset("transactional").values() == default_config().values()
    assert load_preset("transactional").latency == default_config().latency


def test_analytic_keeps_the_upstream_section_but_gets_mram_tiles():
    c = load_preset("analytic")
    assert c.section == "ANALYTIC" and c.MAX_LOOP_INSTRUCTIONS == 10000 and c.MATRIX_SRAM_SIZE == 16384


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_config_value_has_a_source_comment(name):
    info = preset_info(name)
    for line in info.text.splitlines():
        if "=" in line and not line.startswith(("#", "[")) and line.split("=")[0].strip() in info.config:
            assert "#" in line, f"{name}: {line!r} has no source comment"


def test_overrides_and_errors():
    c = load_preset("v80-128x64", {"BMM_SCALE": 0.25})
    assert c.BMM_SCALE == 0.25 and c.MLEN == 128
    with pytest.raises(ConfigError, match="unknown hardware preset 'v99'"):
        load_preset("v99")
    with pytest.raises(ConfigError, match="mutually exclusive"):
        resolve_config("x.toml", hw="small")
    with pytest.raises(ConfigError, match="must be an integer"):
        load_preset("small", {"MLEN": [1, 2]})
    assert resolve_config(hw="small").MLEN == 32
    assert Machine("v80-64x16").cfg.BLEN == 16


def test_one_override_names_every_key_that_must_change():
    c = load_preset("transactional", {"MLEN": 128})
    assert [(b.key, b.value, b.suggested) for b in inconsistencies(c)] == [
        ("VLEN", 64, 128),
        ("BROADCAST_AMOUNT", 4, 8),
    ]
    msg = inconsistency_message(c, {"MLEN": 128})
    assert msg.endswith("Consistent: --set-hw MLEN=128 --set-hw VLEN=128 --set-hw BROADCAST_AMOUNT=8")
    c = load_preset("transactional", {"MLEN": 256, "VLEN": 256, "HBM_V_Prefetch_Amount": 3})
    assert [(b.key, b.suggested) for b in inconsistencies(c)] == [
        ("BROADCAST_AMOUNT", 16),
        ("HBM_V_Prefetch_Amount", 2),
    ]  # P_M = max(M, 64) = 256 already
    c = load_preset("small", {"HBM_M_Prefetch_Amount": 64})  # P_M = 64 = two tiles of 32 rows
    assert [(b.key, b.suggested) for b in inconsistencies(c)] == [("HBM_M_Prefetch_Amount", 32)]
