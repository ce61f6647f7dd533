"""The command line under hostile inputs (issue 20, D5 D6 D11 D13 D25 D26): device and FIFO inputs exit 2 at once
(a real subprocess: nothing may block), NaN / Inf testbench parameters are usage errors, ``--json`` output is
strict JSON, a BOM or NUL byte is escaped in messages, a huge number of assembler errors is cut to 100 and counted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from isa.safetext import finite_json, json_text
from tests.util.cli import run

ROOT = Path(__file__).resolve().parents[2]


def _cli(*argv, env=None, timeout=60):
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "plena_cli", *map(str, argv)], capture_output=True, text=True, env=full, timeout=timeout
    )


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.asm"
    p.write_text("S_ADDI_INT gp1, gp0, 64\nV_ADD_VV gp1, gp1, gp1\n")
    return p


# ------------------------------------------------------------------------------------------- D5


def test_devices_and_fifos_exit_2_without_blocking(tmp_path, prog):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    cases = [
        (["disasm", "/dev/zero"], {}, "character device, not a regular file"),
        (["disasm", fifo], {}, "FIFO (named pipe), not a regular file"),
        (["exec", prog, "--fp-sram", "/dev/zero"], {}, "character device, not a regular file"),
        (["exec", prog, "--int-sram", fifo], {}, "FIFO (named pipe), not a regular file"),
        (["exec", prog, "--hbm", fifo], {}, "FIFO (named pipe), not a regular file"),
        (["config"], {"PLENA_SETTINGS_TOML": "/dev/zero"}, "character device, not a regular file"),
        (["config", "--config", fifo], {}, "FIFO (named pipe), not a regular file"),
    ]
    for argv, env, needle in cases:
        r = _cli(*argv, env=env, timeout=60)  # a blocked reader fails the test by the timeout
        assert r.returncode == 2, (argv, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr, (argv, r.stderr)


# ------------------------------------------------------------------------------------------- D11 D26


@pytest.fixture(scope="module")
def many_errors(tmp_path_factory):
    src = tmp_path_factory.mktemp("asm") / "bad.asm"
    src.write_text("".join(f"S_ADDI_INT gp1, gp0, {300000 + i}\n" for i in range(200_000)))
    return src, _cli("asm", src, timeout=300)


def test_many_errors_print_at_most_100(many_errors):
    src, r = many_errors
    assert r.returncode == 2
    located = [line for line in r.stderr.splitlines() if line.strip().startswith(str(src))]
    assert len(located) == 100 and len(r.stderr) < 20_000
    assert f"{src}:100:22:" in r.stderr  # a location, not rich's ":100:" emoji


def test_many_errors_print_the_count(many_errors):
    _src, r = many_errors
    assert "200000 assembler errors" in r.stderr and "... and 199900 more errors" in r.stderr


def test_bom_and_nul_are_escaped_on_the_command_line(tmp_path, capsys):
    src = tmp_path / "bom.asm"
    src.write_bytes(b"\xef\xbb\xbfS_ADDI_INT gp1, gp0, 64\nS_ADDI_INT gp1, gp0, 6\x004\n")
    code, _, err = run(capsys, "asm", src)
    assert code == 2 and "\ufeff" not in err and "\x00" not in err
    assert "\\ufeffS_ADDI_INT" in err and "6\\x004" in err
    code, _, err = run(capsys, "config", "--set", "ML\x00EN=3")
    assert code == 2 and "\x00" not in err and "ML\\x00EN" in err


# ------------------------------------------------------------------------------------------- D13


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
def test_non_finite_testbench_parameters_are_usage_errors(capsys, value):
    code, _, err = run(capsys, "run", "elementwise_add", "--set", f"scale={value}")
    assert code == 2, err
    assert "--set scale: expected a finite number" in err and "Traceback" not in err


def test_finite_float_parameter_still_runs(capsys):
    code, _, err = run(capsys, "run", "elementwise_add", "--set", "scale=0.5")
    assert code == 0, err


def test_nan_in_a_sweep_spec_is_refused(tmp_path):
    from studies.sweep.spec import SpecError, parse_spec

    with pytest.raises(SpecError, match="must be a finite number"):
        parse_spec('[[workload]]\ntestbench = "elementwise_add"\nset = {scale = [1.0, nan]}\n')


# ------------------------------------------------------------------------------------------- D25


def test_json_output_is_strict():
    doc = {"a": float("nan"), "b": [float("inf"), -math.inf, 1.5], "c": {"d": (2.0, float("nan"))}}
    text = json_text(doc, sort_keys=True)
    assert text == '{"a": "NaN", "b": ["Infinity", "-Infinity", 1.5], "c": {"d": [2.0, "NaN"]}}'
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict token {c}"))
    deep: list = []
    node = deep
    for _ in range(100_000):  # no recursion
        node.append([])
        node = node[0]
    node.append(float("nan"))
    assert finite_json(deep) is not deep


def test_print_json_never_writes_nan_tokens(capsys, monkeypatch):
    from plena_cli import render

    class _Out:
        def __init__(self):
            import io

            self.file = io.StringIO()

    out = _Out()
    import numpy as np

    render.print_json(out, {"x": np.float32("nan"), "y": np.array([np.inf, 1.0])})  # type: ignore[arg-type]
    assert json.loads(out.file.getvalue()) == {"x": "NaN", "y": ["Infinity", 1.0]}


def test_an_escaped_memory_error_names_what_failed_and_what_the_host_has():
    """D22 at the CLI boundary: one line from out_of_memory_message, exit 2, no guessed config key."""
    import io

    from rich.console import Console

    from plena_cli.boundary import _unexpected_failure

    buf = io.StringIO()
    code = _unexpected_failure(MemoryError(), Console(file=buf, width=200))
    text = buf.getvalue()
    assert code == 2 and "out of host memory: a memory allocation failed" in text and "available" in text
    assert "VECTOR_SRAM_SIZE" not in text and "()" not in text
