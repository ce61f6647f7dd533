"""HBM timing presets as data (timing.md §5.1) and their validation through the config loader."""

import tomllib
from pathlib import Path

import pytest

import plena_sim.hbm.presets as hp
import plena_sim.hbm.timing as ht
from plena_sim.config import ConfigError, default_config, load_config
from plena_sim.hbm.presets import PRESET_KEYS, PRM_N, available_presets, check_timing_config, load_preset, timing_params
from plena_sim.hbm.timing import (
    NEG_INF,
    HbmTimer,
    map_address,
    max_dma_blocks,
    new_dma_scratch,
    new_stats,
    new_timing_state,
)


def _spec_block() -> str:
    """The normative HBM2 preset file of timing.md §5.1 (shared/ sits beside the repository)."""
    path = Path(__file__).resolve().parents[3] / "shared" / "spec" / "timing.md"
    if not path.exists():
        pytest.fail(f"missing shared spec file {path}")
    text = path.read_text()
    return text.split("The preset file for `HBM2`")[1].split("```toml\n")[1].split("```")[0]


def test_hbm2_file_equals_spec_block():
    spec = tomllib.loads(_spec_block())
    assert dict(hp._read_preset("HBM2")) == spec
    assert set(spec) == {"name", *PRESET_KEYS}


def test_shipped_presets_have_the_same_key_set():
    assert {"HBM2", "HBM3"} <= set(available_presets())
    for name in available_presets():
        raw = dict(hp._read_preset(name))
        assert set(raw) == {"name", *PRESET_KEYS} and raw["name"] == name
        assert load_preset(name).name == name


def test_hbm2_derived_values(hbm2):
    assert hbm2.peak_bytes_per_cycle == 256.0 and hbm2.banks == 16
    a = hbm2.as_array()
    assert a.shape == (PRM_N,) and a.dtype.name == "int64"
    assert a[hp.PRM_CB] == 3 and a[hp.PRM_GB] == 2 and a[hp.PRM_KB] == 5 and a[hp.PRM_BB] == 2
    assert a[hp.PRM_TRCD_PS] == 14000 and a[hp.PRM_TBL_PS] == 2000


def test_hbm3_preset(hbm3):
    assert (hbm3.tCK_ps, hbm3.channels, hbm3.bank_groups, hbm3.banks_per_group) == (625, 16, 4, 4)
    assert hbm3.peak_bytes_per_cycle == pytest.approx(819.2)
    # cold single read 48 tCK = 30 ns; row hit (tCL + tBL) 25 tCK = 15.625 ns -> 16 cycles
    t = HbmTimer(hbm3)
    assert t.latency_of_blocks([0], False, 0) == 30
    assert t.latency_of_blocks([0], False, 30) == 16
    # even spreading of 64-row power-of-two-pitch transfers (4 per channel)
    for k in range(6, 25):
        chans = [map_address(hbm3, i << k).channel for i in range(64)]
        assert sorted(chans.count(c) for c in range(16)) == [4] * 16


def test_hbm3_write_latency_value(hbm3):
    # 32 tCK * 625 ps = 20000 ps -> exactly 20 cycles
    assert HbmTimer(hbm3).latency_of_blocks([0], True, 0) == 20


def test_state_and_scratch_layouts(hbm2, cfg):
    ch, bk = new_timing_state(hbm2)
    assert ch.shape == (8, 3) and bk.shape == (8, 16, 3)
    assert (ch[:, ht.CH_BG_LAST] == -1).all() and (bk[:, :, ht.BK_OPEN_ROW] == -1).all()
    assert (ch[:, ht.CH_COL_LAST] == NEG_INF).all() and (bk[:, :, ht.BK_PRE_OK] == NEG_INF).all()
    assert new_stats(hbm2).shape == (ht.HST_CHANNEL_BASE + 8,)
    blocks, hset, work = new_dma_scratch(hbm2, 100)
    assert blocks.shape == (100,) and hset.shape == (256,) and work.shape == (ht.W_N, 100)
    assert max_dma_blocks(cfg, hbm2) >= 72


def test_config_selects_preset_and_applies_overrides(tmp_path, reference_toml):
    assert timing_params(default_config()).name == "HBM2"
    assert timing_params(default_config().with_overrides({"HBM_TIMING_PRESET": "HBM3"})).tCK_ps == 625
    p = tmp_path / "t.toml"
    p.write_text(reference_toml.read_text() + "\n[TRANSACTIONAL.HBM_TIMING]\ntRCD = 20\nchannels = 16\n")
    tp = timing_params(load_config(p))
    assert (tp.tRCD, tp.channels, tp.tRP) == (20, 16, 14)
    assert HbmTimer(tp).latency_of_blocks([0], False, 0) == 36


BAD_OVERRIDES = [
    ("tFOO = 3", "HBM_TIMING.tFOO", "unknown HBM timing key"),
    ("name = 3", "HBM_TIMING.name", "unknown HBM timing key"),
    ("tRCD = 14.5", "HBM_TIMING.tRCD", "integer"),
    ("tRCD = 14.0", "HBM_TIMING.tRCD", "integer"),
    ("channels = 6", "HBM_TIMING.channels", "power of two"),
    ("channels = 0", "HBM_TIMING.channels", "power of two"),
    ("bank_groups = 3", "HBM_TIMING.bank_groups", "power of two"),
    ("row_bytes = 96", "HBM_TIMING.row_bytes", "row_bytes / burst_bytes"),
    ("burst_bytes = 0", "HBM_TIMING.burst_bytes", "burst_bytes"),
    ("tBL = 0", "HBM_TIMING.tBL", "tBL"),
    ("tCK_ps = 0", "HBM_TIMING.tCK_ps", "tCK_ps"),
    ("ch_xor_terms = 0", "HBM_TIMING.ch_xor_terms", "ch_xor_terms"),
    ("ch_xor_shift = 2", "HBM_TIMING.ch_xor_shift", "log2(channels) = 3"),
    ("channels = 128", "HBM_TIMING.channels", "ch_xor_shift"),  # log2 128 = 7 > shift 6
    ("tRAS = 99999999", "HBM_TIMING.tRAS", "tRAS"),
]


@pytest.mark.parametrize("line,key,text", BAD_OVERRIDES, ids=[b[0] for b in BAD_OVERRIDES])
def test_bad_override_is_config_error_naming_key(tmp_path, reference_toml, line, key, text):
    p = tmp_path / "t.toml"
    p.write_text(reference_toml.read_text() + f"\n[TRANSACTIONAL.HBM_TIMING]\n{line}\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert ei.value.key == key and text in str(ei.value)


def test_unknown_preset():
    for name in ("DDR9", "../HBM2", "", "hbm2"):
        with pytest.raises(ConfigError) as ei:
            check_timing_config(name, {})
        assert ei.value.key == "HBM_TIMING_PRESET" and "unknown preset" in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        load_config(overrides={"HBM_TIMING_PRESET": "DDR9"})
    assert ei.value.key == "HBM_TIMING_PRESET" and "HBM2" in str(ei.value) and "HBM3" in str(ei.value)


GOOD = _spec_block()

BAD_FILES = [
    (GOOD.replace("tRCD = 14\n", ""), "missing key 'tRCD'"),
    (GOOD + "tFAW = 3\n", "unknown key 'tFAW'"),
    (GOOD.replace('name = "HBM2"', 'name = "X"'), "field 'name'"),
    (GOOD.replace("tRCD = 14", "tRCD = 14.0"), "tRCD must be an integer"),
    (GOOD.replace("channels = 8", "channels = 7"), "channels must be a power of two"),
    (GOOD.replace("tRCD = 14", "tRCD = "), "cannot read"),
]


@pytest.mark.parametrize("text,msg", BAD_FILES, ids=[b[1] for b in BAD_FILES])
def test_bad_preset_file(tmp_path, monkeypatch, text, msg):
    (tmp_path / "HBM2.toml").write_text(text)
    monkeypatch.setattr(hp, "_preset_dir", lambda: tmp_path)
    hp._read_preset.cache_clear()
    try:
        with pytest.raises(ConfigError) as ei:
            load_preset("HBM2")
        assert ei.value.key == "HBM_TIMING_PRESET" and msg in str(ei.value)
        with pytest.raises(ConfigError) as ei:
            default_config()
        assert ei.value.key == "HBM_TIMING_PRESET"
    finally:
        monkeypatch.undo()
        hp._read_preset.cache_clear()
    assert load_preset("HBM2").tRCD == 14
