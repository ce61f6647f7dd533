"""Config files are bounded and strict (issue 20, D5 D7 D19): a regular file of at most 16 MiB nested at most 64
deep (a 20,000-level dotted key is refused from the raw text, fast); an unknown key anywhere in the selected
section is an error naming it with its close match (also through non-ASCII look-alikes); ``allow_unknown``
(``--allow-unknown-keys``) is the escape hatch for upstream files with extra sections."""

from __future__ import annotations

import os
import threading
import time

import pytest

from isa.readers import MAX_CONFIG_BYTES, MAX_TOML_DEPTH
from plena_sim.config import ConfigError, default_config_text, load_config

BASE = default_config_text()


def _with(text: str, tmp_path, name="c.toml"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _error(path, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        load_config(path, **kw)
    return ei.value


# ------------------------------------------------------------------------------------------- D19 unknown keys


def test_misspelt_config_key_names_the_close_match(tmp_path):
    p = _with(BASE + "\n[TRANSACTIONAL.CONFIG.BMM_SCAEL]\nvalue = 0.5\n", tmp_path)
    exc = _error(p)
    assert exc.key == "CONFIG.BMM_SCAEL"
    assert "unknown config key 'BMM_SCAEL'" in str(exc) and "did you mean 'BMM_SCALE'?" in str(exc)
    assert "--allow-unknown-keys" in str(exc)


def test_full_width_lookalike_is_named_with_its_code_point(tmp_path):
    p = _with(BASE + '\n[TRANSACTIONAL.CONFIG."ＭLEN"]\nvalue = 128\n', tmp_path)
    msg = str(_error(p))
    assert "did you mean 'MLEN'?" in msg and "U+FF2D" in msg


@pytest.mark.parametrize(
    "extra,key",
    [
        ("[TRANSACTIONAL.LATENCY.VECTOR_ADD_CYCLESS]\ndc_lib_en = 1\ndc_lib_dis = 1\n", "LATENCY.VECTOR_ADD_CYCLESS"),
        ("[TRANSACTIONAL.PRECISION.SCALAR_FPP]\ntype = 'Fp'\n", "PRECISION.SCALAR_FPP"),
        ("[TRANSACTIONAL.POWER]\nwatts = 3\n", "TRANSACTIONAL.POWER"),
        ("[TRANSACTIONAL.HBM_TIMING]\ntRCDD = 3\n", "HBM_TIMING.tRCDD"),
    ],
)
def test_unknown_tables_and_keys_of_every_part(tmp_path, extra, key):
    exc = _error(_with(BASE + "\n" + extra, tmp_path))
    assert exc.key == key, str(exc)
    assert "unknown" in str(exc)


def test_unknown_field_inside_an_entry(tmp_path):
    text = BASE.replace("[TRANSACTIONAL.CONFIG.MLEN]\nvalue = 64", "[TRANSACTIONAL.CONFIG.MLEN]\nvalue = 64\nvaleu = 3")
    assert text != BASE
    exc = _error(_with(text, tmp_path))
    assert exc.key == "CONFIG.MLEN.valeu" and "did you mean 'value'?" in str(exc)
    head = "[TRANSACTIONAL.LATENCY.SYSTOLIC_PROCESSING_OVERHEAD]\ndc_lib_en = 0\ndc_lib_dis = 0"
    text = BASE.replace(head, head + "\ndc_lib = 1")
    assert text != BASE
    assert _error(_with(text, tmp_path)).key == "LATENCY.SYSTOLIC_PROCESSING_OVERHEAD.dc_lib"
    head = '[TRANSACTIONAL.PRECISION.SCALAR_FP]\ntype = "Fp"'
    text = BASE.replace(head, head + "\nwidth = 8")
    assert _error(_with(text, tmp_path)).key == "PRECISION.SCALAR_FP.width"


def test_escape_hatch_ignores_and_records_unknown_keys(tmp_path):
    p = _with(BASE + "\n[TRANSACTIONAL.POWER]\nwatts = 3\n[TRANSACTIONAL.CONFIG.BMM_SCAEL]\nvalue = 0.5\n", tmp_path)
    cfg = load_config(p, allow_unknown=True)
    assert cfg.BMM_SCALE == 1.0 and cfg.MLEN == 64
    assert cfg.ignored == ("TRANSACTIONAL.POWER", "CONFIG.BMM_SCAEL")
    assert cfg.values() == load_config().values()  # ignoring is not part of the machine


def test_other_sections_and_mode_are_not_checked(tmp_path, reference_toml):
    cfg = load_config(reference_toml)  # the upstream file loads as is, both sections
    assert cfg.ignored == () and cfg.MLEN == 64
    assert load_config(reference_toml, section="ANALYTIC").MLEN == 2048
    p = _with(BASE + "\n[OTHER_MODE.CONFIG.WHATEVER]\nvalue = 1\n", tmp_path)
    assert load_config(p).ignored == ()


def test_top_level_scalar_is_unknown(tmp_path):
    exc = _error(_with("MLEN = 64\n" + BASE, tmp_path))
    assert exc.key == "MLEN" and "unknown config key" in str(exc)


# ------------------------------------------------------------------------------------------- D5 / D7 bounds


def test_config_fifo_device_and_directory_are_refused(tmp_path):
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    box: list = []
    t = threading.Thread(target=lambda: box.append(_error(fifo)), daemon=True)
    t.start()
    t.join(10)
    assert box, "load_config blocked on a FIFO"
    assert box[0].key == "path" and "FIFO (named pipe), not a regular file" in str(box[0])
    assert "character device" in str(_error("/dev/zero"))
    assert "a directory" in str(_error(tmp_path))


def test_config_env_var_is_bounded_too(monkeypatch):
    monkeypatch.setenv("PLENA_SETTINGS_TOML", "/dev/zero")
    t0 = time.monotonic()
    exc = _error(None)
    assert exc.key == "PLENA_SETTINGS_TOML"  # the message names where the path came from
    assert str(exc) == (
        "PLENA_SETTINGS_TOML: '/dev/zero': cannot read config file: a character device, not a regular file"
    )
    assert time.monotonic() - t0 < 5


def test_config_size_limit(tmp_path):
    assert MAX_CONFIG_BYTES == 16 << 20
    p = tmp_path / "big.toml"
    with open(p, "wb") as fh:
        fh.truncate(MAX_CONFIG_BYTES + 1)
    exc = _error(p)
    assert exc.key == "path" and "cannot read config file: 16777217 bytes exceed the limit of 16 MiB" in str(exc)


def test_deep_dotted_key_is_refused_fast(tmp_path):
    """The audit's 48 KB file: a 20,000-level dotted key (68 s and 2.4 GB in tomllib before)."""
    p = _with(".".join(["a"] * 20000) + " = 1\n", tmp_path)
    t0 = time.monotonic()
    exc = _error(p)
    assert time.monotonic() - t0 < 1.0
    assert exc.key == "toml" and "more than 64 parts" in str(exc)


def test_nesting_limit_is_exact(tmp_path):
    assert MAX_TOML_DEPTH == 64
    ok = "x = " + "[" * 64 + "]" * 64 + "\n"  # 64 nested arrays: 64 levels
    assert load_config(_with(ok + BASE, tmp_path), allow_unknown=True).ignored == ("x",)
    deep = "x = " + "[" * 65 + "]" * 65 + "\n"
    exc = _error(_with(deep + BASE, tmp_path), allow_unknown=True)
    assert exc.key == "toml" and "nested more than 64 levels deep (at most 64 levels)" in str(exc)
    dotted = "[" + ".".join(["t"] * 40) + "]\n" + ".".join(["k"] * 30) + " = 1\n"  # 70 levels, no long key
    exc = _error(_with(BASE + dotted, tmp_path), allow_unknown=True)
    assert exc.key == "toml" and "nested more than 64 levels" in str(exc)


def test_dots_and_brackets_inside_strings_do_not_count(tmp_path):
    text = BASE + '\n[OTHER]\nnote = "' + "a." * 200 + '"\nlist = "' + "[" * 200 + '"\n# ' + "[" * 200 + "\n"
    assert load_config(_with(text, tmp_path)).MLEN == 64


def test_a_huge_unknown_key_gives_a_short_message(tmp_path):
    """Found by the fuzz campaign (seed 2707 at PLENA_FUZZ_SCALE=5): a 10,000-character unknown key was echoed in
    full, twice (a 10 KB message); a key is now shown cut to 120 characters (117 and "...")."""
    p = tmp_path / "c.toml"
    long_key = "LATENC" + "9" * 10_000 + "Y"
    p.write_text(default_config_text().replace("[TRANSACTIONAL.LATENCY", f"[TRANSACTIONAL.{long_key}", 1))
    exc = _error(p)
    assert exc.key == f"TRANSACTIONAL.{long_key}"
    assert str(exc).startswith(f"TRANSACTIONAL.LATENC{'9' * 97}...: unknown config key 'LATENC{'9' * 111}...' in")
    assert len(str(exc)) < 600
