"""Config loading (memory.md §8): upstream file unchanged, defaults, overrides, every ConfigError."""

import math
import re
from dataclasses import FrozenInstanceError

import pytest

from plena_sim.config import (
    ConfigError,
    FpType,
    IntType,
    MxType,
    PlainType,
    default_config,
    load_config,
    parse_override,
)


def test_upstream_file_loads_unchanged_and_equals_builtin(reference_toml):
    up = load_config(reference_toml)
    builtin = default_config()
    assert up.values() == builtin.values()
    assert dict(up.precision) == dict(builtin.precision)
    assert dict(up.latency) == dict(builtin.latency)
    # the packaged default is a verbatim copy of the upstream file
    from plena_sim.config import default_config_text

    assert default_config_text() == reference_toml.read_text()


def test_reference_values(reference_toml):
    c = load_config(reference_toml)
    assert (c.MLEN, c.VLEN, c.BLEN, c.HLEN, c.BROADCAST_AMOUNT) == (64, 64, 4, 16, 4)
    assert c.HBM_SIZE == 17179869184 and c.HBM_WIDTH == 512
    assert (c.MATRIX_SRAM_SIZE, c.VECTOR_SRAM_SIZE) == (4096, 4194304)
    assert (c.P_M, c.P_V, c.P_W, c.mram_tiles) == (64, 4, 4, 64)
    assert (c.DC_EN, c.MAX_LOOP_INSTRUCTIONS) == (1, 100000)
    # project keys and their defaults
    assert (c.BMM_SCALE, c.FP_SRAM_SIZE, c.INT_SRAM_SIZE, c.HBM_TIMING_PRESET) == (1.0, 1024, 1024, "HBM2")
    e4m3 = FpType(True, 4, 3)
    assert c.precision["HBM_M_WEIGHT_TYPE"] == MxType(e4m3, FpType(False, 8, 0), 8)
    assert c.precision["HBM_V_INT_TYPE"] == PlainType(IntType(32))
    assert c.precision["VECTOR_SRAM_TYPE"] == PlainType(FpType(True, 8, 7))
    assert c.latency["VECTOR_SUM_CYCLES"] == (8, 20)
    assert c.latency_cycles("VECTOR_SUM_CYCLES") == 8
    assert c.with_overrides({"DC_EN": 0}).latency_cycles("VECTOR_SUM_CYCLES") == 20
    assert e4m3.bias == 7 and e4m3.emax == 7 and e4m3.bits == 8


def test_analytic_section_loads_with_zero_mram_tiles(reference_toml):
    a = load_config(reference_toml, section="ANALYTIC")
    assert (a.MLEN, a.BLEN, a.MATRIX_SRAM_SIZE, a.mram_tiles, a.MAX_LOOP_INSTRUCTIONS) == (2048, 128, 256, 0, 10000)


def test_config_is_immutable():
    c = default_config()
    with pytest.raises(FrozenInstanceError):
        c.MLEN = 128
    with pytest.raises(TypeError):
        c.precision["SCALAR_FP"] = None


def test_overrides_api_and_cli_syntax():
    c = load_config(overrides={"MLEN": 128, "VLEN": 128, "BROADCAST_AMOUNT": 8, "BMM_SCALE": 0.25})
    assert (c.MLEN, c.VLEN, c.BROADCAST_AMOUNT, c.BMM_SCALE, c.mram_tiles) == (128, 128, 8, 0.25, 32)
    assert parse_override("MLEN=128") == ("MLEN", 128)
    assert parse_override("BMM_SCALE=0.25") == ("BMM_SCALE", 0.25)
    assert parse_override("HBM_TIMING_PRESET=HBM3") == ("HBM_TIMING_PRESET", "HBM3")
    assert default_config().with_overrides({"HBM_TIMING_PRESET": "HBM3"}).HBM_TIMING_PRESET == "HBM3"
    # the default object is unchanged
    assert default_config().MLEN == 64


def test_env_lookup(tmp_path, monkeypatch, reference_toml):
    p = tmp_path / "s.toml"
    p.write_text(
        reference_toml.read_text().replace(
            "[TRANSACTIONAL.CONFIG.MLEN]\nvalue = 64", "[TRANSACTIONAL.CONFIG.MLEN]\nvalue = 64 # env"
        )
    )
    monkeypatch.setenv("PLENA_SETTINGS_TOML", str(p))
    assert load_config().source == str(p)
    assert default_config().source.startswith("<builtin")


def test_plain_file_with_just_the_keys(tmp_path, reference_toml):
    # the TRANSACTIONAL tables without the section prefix, and without the optional keys
    text = reference_toml.read_text()
    body = text[text.index("[TRANSACTIONAL.CONFIG.DC_EN]") :].replace("[TRANSACTIONAL.", "[")
    body = re.sub(r"\[CONFIG\.HBM_WIDTH\]\nvalue = 512\n", "", body)
    p = tmp_path / "plain.toml"
    p.write_text(body)
    c = load_config(p)
    assert c.values() == default_config().values()
    # also "KEY = value" directly instead of a { value = } table
    direct = body.replace("[CONFIG.MLEN]\nvalue = 64\n", "").replace("[CONFIG.VLEN]\nvalue = 64\n", "")
    p.write_text("[CONFIG]\nMLEN = 64\nVLEN = 64\n" + direct)
    assert load_config(p).values() == default_config().values()


def _variant(reference_toml, tmp_path, old, new):
    text = reference_toml.read_text()
    tail = text[text.index("[TRANSACTIONAL.CONFIG.DC_EN]") :]
    assert old in tail, old
    p = tmp_path / "v.toml"
    p.write_text(tail.replace(old, new, 1))
    return p


BAD_FILES = [
    # (old text, new text, key named in the error)
    ("[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 4\n", "", "BLEN"),
    ("[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 4", '[TRANSACTIONAL.CONFIG.BLEN]\nvalue = "4"', "BLEN"),
    ("[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 4", "[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 4.0", "BLEN"),
    ("[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 4", "[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 0", "BLEN"),
    ("[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 4", "[TRANSACTIONAL.CONFIG.BLEN]\nvalue = true", "BLEN"),
    ("[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 4", "[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 3", "BLEN"),
    ("[TRANSACTIONAL.CONFIG.BLEN]\nvalue = 4", "[TRANSACTIONAL.CONFIG.BLEN]\nnot_value = 4", "BLEN"),
    ("[TRANSACTIONAL.CONFIG.HBM_SIZE]", "[TRANSACTIONAL.CONFIG.HBM_SIZE_X]", "HBM_SIZE"),
    (
        "[TRANSACTIONAL.CONFIG.MATRIX_SRAM_SIZE]\nvalue = 4096",
        "[TRANSACTIONAL.CONFIG.MATRIX_SRAM_SIZE]\nvalue = -1",
        "MATRIX_SRAM_SIZE",
    ),
    (
        "[TRANSACTIONAL.CONFIG.MAX_LOOP_INSTRUCTIONS]\nvalue = 100000",
        "[TRANSACTIONAL.CONFIG.MAX_LOOP_INSTRUCTIONS]\nvalue = 0",
        "MAX_LOOP_INSTRUCTIONS",
    ),
    (
        '[TRANSACTIONAL.PRECISION.HBM_M_KV_TYPE]\nformat = "Mx"\nblock = 8',
        '[TRANSACTIONAL.PRECISION.HBM_M_KV_TYPE]\nformat = "Mx"\nblock = 48',
        "PRECISION.HBM_M_KV_TYPE.block",
    ),
    (
        '[TRANSACTIONAL.PRECISION.HBM_V_ACT_TYPE]\nformat = "Mx"',
        '[TRANSACTIONAL.PRECISION.HBM_V_ACT_TYPE]\nformat = "Q"',
        "PRECISION.HBM_V_ACT_TYPE",
    ),
    (
        '[TRANSACTIONAL.PRECISION.HBM_V_ACT_TYPE.ELEM]\ntype = "Fp"',
        '[TRANSACTIONAL.PRECISION.HBM_V_ACT_TYPE.ELEM]\ntype = "Int"\nwidth = 8',
        "PRECISION.HBM_V_ACT_TYPE.ELEM",
    ),
    (
        '[TRANSACTIONAL.PRECISION.HBM_M_WEIGHT_TYPE.SCALE]\ntype = "Fp"\nsign = false\nexponent = 8',
        '[TRANSACTIONAL.PRECISION.HBM_M_WEIGHT_TYPE.SCALE]\ntype = "Fp"\nsign = false\nexponent = 5',
        "PRECISION.HBM_M_WEIGHT_TYPE.SCALE",
    ),
    (
        '[TRANSACTIONAL.PRECISION.SCALAR_FP]\ntype = "Fp"\nsign = true\nexponent = 8\nmantissa = 7',
        '[TRANSACTIONAL.PRECISION.SCALAR_FP]\ntype = "Fp"\nsign = true\nexponent = 5\nmantissa = 10',
        "PRECISION.SCALAR_FP",
    ),
    (
        '[TRANSACTIONAL.PRECISION.VECTOR_SRAM_TYPE.DATA_TYPE]\ntype = "Fp"\nsign = true\nexponent = 8\nmantissa = 7',
        '[TRANSACTIONAL.PRECISION.VECTOR_SRAM_TYPE.DATA_TYPE]\ntype = "Fp"\nsign = true\nexponent = 8\nmantissa = 23',
        "PRECISION.VECTOR_SRAM_TYPE",
    ),
    (
        "[TRANSACTIONAL.PRECISION.HBM_V_INT_TYPE]",
        "[TRANSACTIONAL.PRECISION.HBM_V_INT_TYPE_X]",
        "PRECISION.HBM_V_INT_TYPE",
    ),
    (
        "[TRANSACTIONAL.LATENCY.VECTOR_SUM_CYCLES]\ndc_lib_en = 8",
        "[TRANSACTIONAL.LATENCY.VECTOR_SUM_CYCLES]\ndc_lib_en = -8",
        "LATENCY.VECTOR_SUM_CYCLES",
    ),
    (
        "[TRANSACTIONAL.LATENCY.VECTOR_SUM_CYCLES]\ndc_lib_en = 8\n",
        "[TRANSACTIONAL.LATENCY.VECTOR_SUM_CYCLES]\n",
        "LATENCY.VECTOR_SUM_CYCLES",
    ),
    (
        "[TRANSACTIONAL.LATENCY.SCALAR_INT_BASIC_CYCLES]",
        "[TRANSACTIONAL.LATENCY.SCALAR_INT_BASIC_CYCLES_X]",
        "LATENCY.SCALAR_INT_BASIC_CYCLES",
    ),
]


@pytest.mark.parametrize("old,new,key", BAD_FILES, ids=[b[2] + ":" + b[1][-20:] for b in BAD_FILES])
def test_each_file_error_names_the_key(reference_toml, tmp_path, old, new, key):
    p = _variant(reference_toml, tmp_path, old, new)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert ei.value.key == key
    assert str(ei.value).startswith(key + ":")


BAD_OVERRIDES = [
    ({"BLEN": 128}, "BLEN", "MLEN=64 is not a multiple of BLEN=128"),
    ({"HLEN": 128}, "HLEN", "not a multiple of HLEN=128"),
    (
        {"MLEN": 4, "VLEN": 4, "BLEN": 4, "HLEN": 4, "BROADCAST_AMOUNT": 1},
        "PRECISION.HBM_M_WEIGHT_TYPE.block",
        "MLEN=4 is not a multiple of block=8",
    ),
    ({"BMM_SCALE": math.inf}, "BMM_SCALE", "finite"),
    ({"BMM_SCALE": "x"}, "BMM_SCALE", "number"),
    ({"HBM_TIMING_PRESET": "DDR9"}, "HBM_TIMING_PRESET", "unknown preset"),
    ({"HBM_SIZE": 1 << 60}, "HBM_SIZE", "2^50"),
    ({"FP_SRAM_SIZE": 0}, "FP_SRAM_SIZE", ">= 1"),
    ({"NOPE": 1}, "NOPE", "unknown config key"),
]


# memory.md §8.1: these topologies load; the instructions that need VLEN == MLEN (CF-VM) or
# BROADCAST_AMOUNT*HLEN == MLEN (CF-BA) fault at run time, and no power-of-two rule exists.
ACCEPTED_OVERRIDES = [
    {"VLEN": 128},
    {"MLEN": 128},
    {"MLEN": 128, "VLEN": 128, "HLEN": 16, "BROADCAST_AMOUNT": 4},
    {"BROADCAST_AMOUNT": 2},
    {"MLEN": 48, "VLEN": 48},
    {"MLEN": 96, "VLEN": 96, "BLEN": 12, "HLEN": 24, "BROADCAST_AMOUNT": 4},
]


@pytest.mark.parametrize("ov", ACCEPTED_OVERRIDES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_spec_topologies_load(ov):
    cfg = load_config(overrides=ov)
    assert {k: getattr(cfg, k) for k in ov} == ov
    assert default_config().with_overrides(ov).values() == cfg.values()


@pytest.mark.parametrize("ov,key,text", BAD_OVERRIDES, ids=[b[1] for b in BAD_OVERRIDES])
def test_each_override_error_names_key_and_values(ov, key, text):
    with pytest.raises(ConfigError) as ei:
        load_config(overrides=ov)
    assert ei.value.key == key
    assert text in str(ei.value)
    with pytest.raises(ConfigError):
        default_config().with_overrides(ov)


def test_unreadable_or_malformed_files(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(tmp_path / "nope.toml")
    assert ei.value.key == "path"
    bad = tmp_path / "bad.toml"
    bad.write_text("[TRANSACTIONAL.CONFIG.MLEN\nvalue = 64\n")
    with pytest.raises(ConfigError) as ei:
        load_config(bad)
    assert ei.value.key == "toml"
    bad.write_text("[OTHER.CONFIG.MLEN]\nvalue = 64\n")
    with pytest.raises(ConfigError) as ei:
        load_config(bad)
    assert ei.value.key == "TRANSACTIONAL" and "OTHER" in str(ei.value)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError):
        load_config(bad)


def test_unknown_keys_are_refused_unless_allowed(tmp_path, reference_toml):
    """Issue 20 (D19) changed this: an unknown key was silently ignored; it is now an error naming it, and
    ``allow_unknown`` is the escape hatch that ignores (and records) it."""
    p = tmp_path / "extra.toml"
    p.write_text(reference_toml.read_text() + "\n[TRANSACTIONAL.CONFIG.SOMETHING_NEW]\nvalue = 3\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert ei.value.key == "CONFIG.SOMETHING_NEW" and "unknown config key 'SOMETHING_NEW'" in str(ei.value)
    cfg = load_config(p, allow_unknown=True)
    assert cfg.values() == default_config().values() and cfg.ignored == ("CONFIG.SOMETHING_NEW",)


def test_hbm_timing_table(tmp_path, reference_toml):
    p = tmp_path / "t.toml"
    p.write_text(reference_toml.read_text() + "\n[TRANSACTIONAL.HBM_TIMING]\ntRCD = 14\n")
    assert dict(load_config(p).hbm_timing) == {"tRCD": 14}
    p.write_text(reference_toml.read_text() + "\n[TRANSACTIONAL.HBM_TIMING]\ntRCD = -1\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert ei.value.key == "HBM_TIMING.tRCD"
