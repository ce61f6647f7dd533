"""``run --save DIR`` is replayable (replay.sh re-runs it with ``plena-sim exec``: the same outputs and cycles) and
``plena-sim diff`` names what differs between two saves (issue 19 item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.util.cli import run

ROOT = Path(__file__).resolve().parents[2]


def _replay(folder: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PLENA_SIM=f"{sys.executable} -m plena_cli", PYTHONPATH=str(ROOT))
    return subprocess.run(
        ["sh", str(folder / "replay.sh")], cwd="/", env=env, capture_output=True, text=True, timeout=600
    )


def _case_on_saved_config(folder: Path, name: str):
    import testbenches
    from plena_sim.config import load_config
    from testbenches.shapes import resolve_params

    mod = testbenches.get(name)
    cfg = load_config(folder / "config.toml")  # section TRANSACTIONAL: the save's own
    return mod.build(resolve_params(dict(mod.DEFAULTS), cfg), cfg), cfg


def test_replay_sh_reproduces_the_saved_run(capsys, tmp_path):
    from plena_sim.machine import Machine
    from plena_sim.numerics import bf16

    saved = tmp_path / "saved"
    code, _out, err = run(capsys, "run", "linear", "--save", saved)
    assert code == 0 and f"wrote {saved}\n" in err
    script = (saved / "replay.sh").read_text()
    assert "plena-sim} exec program.asm" in script and str(tmp_path) not in script  # relative paths only
    assert {"config.toml", "fp_sram.bin", "int_sram.bin", "hbm", "vram"} <= {p.name for p in saved.iterdir()}
    manifest = json.loads((saved / "hbm" / "manifest.json").read_text())
    assert manifest["segments"] and {t["name"] for t in manifest["tensors"]} >= {"x", "w"}
    done = _replay(saved)
    assert done.returncode == 0, done.stderr
    replayed = json.loads((saved / "replay" / "result.json").read_text())
    result = json.loads((saved / "result.json").read_text())
    assert replayed["cycles"] == result["cycles"] and replayed["instructions"] == result["instructions"]
    # the replayed output rows, read back as the testbench reads them, are the saved output, element for element
    case, cfg = _case_on_saved_config(saved, "linear")
    (row, rows, _role) = case.regions["y"]
    dumped = np.load(saved / "replay" / "y.npy")
    assert dumped.shape == (rows, cfg.VLEN)
    m = Machine(cfg)
    m.vram.bits[row : row + rows] = bf16.encode(dumped)
    output = np.asarray(case.checks[0].read.read(m), dtype=np.float32)
    saved_output = np.load(saved / "arrays.npz")["output"]
    assert output.shape == saved_output.shape and np.array_equal(output, saved_output)
    # a save directory that was replayed (it holds replay/) is still the save's own: saving again replaces it
    code, _out, err = run(capsys, "run", "linear", "--save", saved)
    assert code == 0 and not (saved / "replay").exists()


def test_replay_of_flash_attention_matches_its_cycles(capsys, tmp_path):
    saved = tmp_path / "fa"
    code, _out, _err = run(capsys, "run", "flashattn_prefill", "--case", "P9", "--save", saved)
    assert code == 0
    done = _replay(saved)
    assert done.returncode == 0, done.stderr
    replayed = json.loads((saved / "replay" / "result.json").read_text())
    assert replayed["cycles"] == json.loads((saved / "result.json").read_text())["cycles"]
    assert list((saved / "replay").glob("*.npy"))


def test_saved_config_toml_loads_as_the_same_machine(tmp_path):
    import dataclasses

    from plena_sim.config import config_toml, load_config
    from plena_sim.config.presets import load_preset

    for cfg in (load_preset("v80-128x64", {"BMM_SCALE": 0.25}), load_preset("analytic")):
        cfg = dataclasses.replace(cfg, hbm_timing={"tRCD": 14}) if cfg.section == "ANALYTIC" else cfg
        path = tmp_path / f"{cfg.section}.toml"
        path.write_text(config_toml(cfg))
        back = load_config(path, section=cfg.section)
        assert back.values() == cfg.values() and dict(back.precision) == dict(cfg.precision)
        assert dict(back.latency) == dict(cfg.latency) and dict(back.hbm_timing) == dict(cfg.hbm_timing)


def test_diff_names_each_difference(capsys, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run(capsys, "run", "linear", "--save", a)[0] == 0
    assert run(capsys, "run", "linear", "--save", b, "--set", "rows=16", "--set-hw", "BMM_SCALE=0.5")[0] == 0
    code, out, _err = run(capsys, "diff", a, b)
    assert code == 1
    lines = out.splitlines()
    assert "param rows: 8 -> 16" in lines
    assert "config CONFIG.BMM_SCALE: 1.0 -> 0.5" in lines
    ra, rb = (json.loads((d / "result.json").read_text()) for d in (a, b))
    assert any(line.startswith(f"cycles cycles: {ra['cycles']} -> {rb['cycles']} (") for line in lines)
    assert "output output: [8, 256] -> [16, 256] (shape)" in lines
    assert any(line.startswith("program program.asm: ") for line in lines)
    code, out, _err = run(capsys, "diff", a, b, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["identical"] is False
    kinds = {(d["kind"], d["name"]) for d in doc["differences"]}
    assert {("param", "rows"), ("config", "CONFIG.BMM_SCALE"), ("cycles", "cycles"), ("output", "output")} <= kinds
    code, out, _err = run(capsys, "diff", a, a)
    assert code == 0 and out.startswith("identical: ")


def test_diff_reports_the_worst_output_element(capsys, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run(capsys, "run", "linear", "--save", a)[0] == 0
    assert run(capsys, "run", "linear", "--save", b)[0] == 0
    with np.load(b / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["output"] = arrays["output"].copy()
    arrays["output"][3, 7] += 2.0
    arrays["output"][1, 1] += 0.5
    np.savez(b / "arrays.npz", **arrays)
    code, out, _err = run(capsys, "diff", a, b)
    assert code == 1
    (line,) = [x for x in out.splitlines() if x.startswith("output output")]
    assert "2 of 2048 elements differ, worst at [3, 7]: |a - b| = 2" in line


@pytest.mark.parametrize("missing", ["a", "b"])
def test_diff_of_a_directory_without_result_json_is_a_usage_error(capsys, tmp_path, missing):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    other = "b" if missing == "a" else "a"
    (tmp_path / other / "result.json").write_text("{}")
    code, _out, err = run(capsys, "diff", tmp_path / "a", tmp_path / "b")
    assert code == 2 and "result.json" in err
