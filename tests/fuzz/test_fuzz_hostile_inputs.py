"""Fuzz: the input classes of issue 20 -- non-regular files (FIFOs, devices, directories, symlinks to them),
oversized and deeply nested files, unknown (and look-alike) config keys, non-finite parameters -- through every
reader and through ``plena-sim``.

Contract: each reader returns at once with its one error type naming the file (nothing blocks, nothing reads a
device, nothing grows with the file's claimed size); an unknown key is a ConfigError naming its dotted path unless
``allow_unknown`` records it; a NaN / Inf parameter is exit 2.

Default CI size: 40 file cases x 9 readers + 120 config documents + 40 parameter sets (``PLENA_FUZZ_SCALE``).
"""

from __future__ import annotations

import os
import random
import threading
import time
import tomllib

import pytest
from fuzzlib import BASE_SEED, count

from isa import AssemblerError, MemFormatError, assemble_file, read_mem
from isa.readers import MAX_CONFIG_BYTES
from plena_sim.config import ConfigError, default_config_text, load_config
from plena_sim.hbm.storage import Hbm
from plena_sim.memory.image import ImageError, load_image, load_raw_image
from plena_sim.memory.sram_io import load_fp_sram_file, load_int_sram_file
from programs.model.presets import ModelPresetError
from programs.model.presets import load as load_model
from studies.sweep.spec import SpecError, load_spec

pytestmark = pytest.mark.fuzz

#: every file reader -> (call, the errors it may raise)
READERS = {
    "mem": (lambda p: read_mem(p), (MemFormatError,)),
    "asm": (lambda p: assemble_file(p), (AssemblerError,)),
    "config": (lambda p: load_config(p), (ConfigError,)),
    "fp_sram": (lambda p: load_fp_sram_file(p, 1024), (ImageError,)),
    "int_sram": (lambda p: load_int_sram_file(p, 1024), (ImageError,)),
    "raw_image": (lambda p: load_raw_image(p, Hbm(1 << 20)), (ImageError,)),
    "manifest": (lambda p: load_image(p.parent / "ok.bin", p), (ImageError,)),
    "sweep_spec": (lambda p: load_spec(p), (SpecError,)),
    "model_preset": (lambda p: load_model(str(p)), (ModelPresetError,)),
}


def _within(fn, seconds: float = 10.0):
    """fn()'s exception (None if it returned); AssertionError if it does not return in time."""
    box: list = []

    def target():
        try:
            fn()
            box.append(None)
        except Exception as exc:  # noqa: BLE001 - returned to the campaign
            box.append(exc)

    threading.Thread(target=target, daemon=True).start()
    deadline = time.monotonic() + seconds
    while not box and time.monotonic() < deadline:
        time.sleep(0.01)
    assert box, "the reader blocked"
    return box[0]


def _hostile_file(r: random.Random, d, name: str):
    """A path that no reader may read: a FIFO, a device, a directory, a symlink to one, or a sparse file
    larger than every limit (the reader must refuse it by its size, never read it)."""
    p = d / name
    what = r.randrange(6)
    if what == 0:
        os.mkfifo(p)
    elif what == 1:
        p.mkdir()
    elif what == 2:
        p.symlink_to(r.choice(["/dev/zero", "/dev/null", "/dev/urandom"]))
    elif what == 3:
        os.mkfifo(d / "target.fifo")
        p.symlink_to(d / "target.fifo")
    else:
        with open(p, "wb") as fh:
            fh.truncate(r.choice([MAX_CONFIG_BYTES + 1, 1 << 31, 1 << 40, (1 << 30) + 1]))
    return p


def test_fuzz_hostile_files_every_reader(tmp_path):
    (tmp_path / "ok.bin").write_bytes(b"\x00" * 64)
    for seed in range(BASE_SEED, BASE_SEED + count(40)):
        r = random.Random(seed)
        for name, (read, errors) in READERS.items():
            d = tmp_path / f"{seed}-{name}"
            d.mkdir()
            if name == "manifest":
                (d / "ok.bin").write_bytes(b"\x00" * 64)
            p = _hostile_file(r, d, f"in.{'toml' if name in ('config', 'sweep_spec', 'model_preset') else 'x'}")
            t0 = time.monotonic()
            exc = _within(lambda read=read, p=p: read(p))
            assert isinstance(exc, errors), (seed, name, p, repr(exc))
            assert time.monotonic() - t0 < 5, (seed, name, "slow refusal")
            assert len(str(exc)) < 1000 and "\x00" not in str(exc), (seed, name, str(exc))


# ------------------------------------------------------------------------------------------- config documents

BASE = default_config_text()
_LOOKALIKES = ["ＭLEN", "MLEN\u200b", "\ufeffMLEN", "Mlen ", "BMM_SCAEL", "HBM_SZE", "X" * 80, "mlen", "VLEN2", "é"]


def _deep_text(r: random.Random) -> str:
    n = r.choice([65, 200, 5000, 20000])
    kind = r.randrange(4)
    if kind == 0:
        return ".".join(["a"] * n) + " = 1\n"
    if kind == 1:
        return "x = " + "[" * n + "]" * n + "\n"
    if kind == 2:
        return "x = " + "{a = " * n + "1" + "}" * n + "\n"
    return "[" + ".".join(['"q"'] * n) + "]\n"


def test_fuzz_deep_documents_are_refused_fast(tmp_path):
    for seed in range(BASE_SEED, BASE_SEED + count(40)):
        r = random.Random(seed)
        p = tmp_path / f"d{seed}.toml"
        text = _deep_text(r)
        p.write_text(text + BASE if r.randrange(2) else BASE + text)
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as ei:
            load_config(p, allow_unknown=True)
        assert ei.value.key == "toml" and "levels" in str(ei.value), (seed, str(ei.value)[:200])
        assert time.monotonic() - t0 < 2, (seed, "slow")


def _unknown_key_doc(r: random.Random) -> tuple[str, str]:
    """The base text with one unknown key somewhere in the TRANSACTIONAL section, and its dotted path."""
    key = r.choice(_LOOKALIKES + [f"K{r.randrange(1000)}"])
    quoted = '"' + key.replace('"', "") + '"'
    where = r.randrange(5)
    if where == 0:
        return BASE + f"\n[TRANSACTIONAL.CONFIG.{quoted}]\nvalue = 1\n", f"CONFIG.{key}"
    if where == 1:
        return BASE + f"\n[TRANSACTIONAL.LATENCY.{quoted}]\ndc_lib_en = 1\ndc_lib_dis = 1\n", f"LATENCY.{key}"
    if where == 2:
        return BASE + f"\n[TRANSACTIONAL.{quoted}]\nv = 1\n", f"TRANSACTIONAL.{key}"
    if where == 3:
        head = "[TRANSACTIONAL.CONFIG.MLEN]\nvalue = 64"
        return BASE.replace(head, f"{head}\n{quoted} = 2"), f"CONFIG.MLEN.{key}"
    return BASE + f"\n[TRANSACTIONAL.HBM_TIMING]\n{quoted} = 3\n", f"HBM_TIMING.{key}"


def test_fuzz_unknown_keys_are_named_or_recorded(tmp_path):
    for seed in range(BASE_SEED, BASE_SEED + count(120)):
        r = random.Random(seed)
        text, path = _unknown_key_doc(r)
        key = path.rsplit(".", 1)[-1] if not path.startswith("TRANSACTIONAL.") else path[len("TRANSACTIONAL.") :]
        if key in ("value",) or key.strip() == "":
            continue
        p = tmp_path / "c.toml"
        p.write_text(text, encoding="utf-8")
        tomllib.loads(text)  # the document itself is valid TOML
        with pytest.raises(ConfigError) as ei:
            load_config(p)
        assert ei.value.key == path.replace('"', ""), (seed, ei.value.key, path)
        assert "unknown" in str(ei.value) and "--allow-unknown-keys" in str(ei.value), seed
        assert "\x00" not in str(ei.value) and "\ufeff" not in str(ei.value), seed
        cfg = load_config(p, allow_unknown=True)
        assert cfg.ignored == (path.replace('"', ""),), (seed, cfg.ignored)
        assert cfg.values() == load_config().values()


# ------------------------------------------------------------------------------------------- parameters

_NON_FINITE = ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "-1e999"]


def test_fuzz_non_finite_parameters_exit_2(capsys):
    from plena_cli.main import main

    for seed in range(BASE_SEED, BASE_SEED + count(40)):
        r = random.Random(seed)
        tb, key = r.choice([("elementwise_add", "scale"), ("softmax", "scale"), ("softmax", "scale_value")])
        code = main(["run", tb, "--set", f"{key}={r.choice(_NON_FINITE)}"])
        err = capsys.readouterr().err
        assert code == 2 and "expected a finite number" in err and "Traceback" not in err, (seed, tb, err)
