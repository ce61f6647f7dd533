"""Every ```bash block of the README runs as written, each on its own in a fresh directory: every line a command
whose exit code is the one its trailing ``# exit N`` comment says (else 0). ``plena-sim`` is this checkout's CLI.

The quick start (the first block: an install and the whole test suite) is the one block not run here: ``.ci/run``
runs its two commands word for word (checked below).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.util.readme import blocks, commands, quick_start

ROOT = Path(__file__).resolve().parents[1]
BASH = blocks("bash")


def _params() -> list:
    return [pytest.param(line, block, id=f"block{k}-line{line}") for k, (line, block) in enumerate(BASH[1:], start=1)]


def _shim(tmp: Path) -> dict[str, str]:
    """An environment whose ``plena-sim`` is this checkout's ``python -m plena_cli``."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "plena-sim"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m plena_cli "$@"\n')
    shim.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    return dict(os.environ, PATH=path, PYTHONPATH=str(ROOT), COLUMNS="100")


def test_the_readme_has_bash_blocks_and_ci_runs_the_quick_start_as_written():
    assert len(BASH) >= 4
    quick = quick_start()
    assert quick[0].startswith("pip install -e ") and "plena-sim run flashattn_prefill" in quick[0]
    assert quick[1] == "python -m pytest -q"
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert quick[0] in ci_lines  # the install and the main job, as written
    assert ci_lines[-1] == quick[1]  # the README's test command is CI's last step


@pytest.mark.parametrize("line, block", _params())
def test_readme_bash_block_runs_as_written(line, block, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = _shim(tmp_path)
    for cmd, want in commands(block):
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=1800
        )
        assert done.returncode == want, f"README line {line}: {cmd}\nexit {done.returncode}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr
