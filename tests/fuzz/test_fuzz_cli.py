"""Fuzz: random command lines (subcommands, flags, values, good / corrupt / missing / NUL-byte paths).

Contract: ``plena_cli.main.main`` returns an exit code -- 0, 2 (usage or input error) or 3 (fault); never 4
(an internal error) and never a Python traceback. Default CI size: 300 command lines.
"""

from __future__ import annotations

import contextlib
import io
import random

import pytest
from fuzzlib import BASE_SEED, SMALL, count

from plena_cli.main import main

pytestmark = pytest.mark.fuzz


def _vocab(d):
    (d / "ok.asm").write_text("S_ADDI_INT gp1, gp0, 5\n")
    (d / "loop.asm").write_text("C_LOOP_START gp1, 4194303\nS_ADDI_INT gp2, gp2, 1\nC_LOOP_END gp1\n")
    (d / "ok.mem").write_text("0x00014062\n")
    (d / "bad.bin").write_bytes(b"\xff" * 7)
    (d / "c.toml").write_text("[X]\n")
    small = [f"{k}={v}" for k, v in SMALL.items()]
    return [
        "asm",
        "disasm",
        "isa",
        "config",
        "exec",
        "exec",
        "--json",
        "--markdown",
        "--addresses",
        "-o",
        str(d / "out.mem"),
        str(d / "ok.asm"),
        str(d / "loop.asm"),
        str(d / "ok.mem"),
        str(d / "bad.bin"),
        str(d / "c.toml"),
        str(d),
        "/nonexistent",
        "--config",
        "--section",
        "ANALYTIC",
        "NOPE",
        "--set",
        "--set",
        *small,
        "MLEN=x",
        "=",
        "FOO=1",
        "--backend",
        "reference",
        "numba",
        "gpu",
        "--hbm",
        "--hbm-at",
        "0=" + str(d / "bad.bin"),
        "--fp-sram",
        "--int-sram",
        "--fp",
        "1,2",
        "--dump-vram",
        "0:1=" + str(d / "v.npy"),
        "--dump-hbm",
        "0:8=" + str(d / "h.bin"),
        "--dump-fp-sram",
        str(d / "f.npy"),
        "--max-instructions",
        "10",
        "-5",
        "abc",
        "",
        "é",
        "\x00x",
        "0:1=a\x00b.npy",
        "/tmp/\x00",
        "--debug",
    ]


def test_fuzz_cli_command_lines(tmp_path):
    vocab = _vocab(tmp_path)
    small_set = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    for seed in range(BASE_SEED, BASE_SEED + count(300)):
        r = random.Random(seed)
        argv = [r.choice(vocab) for _ in range(r.randrange(0, 8))]
        if "exec" in argv and r.randrange(2):
            argv += small_set + ["--max-instructions", "1000"]  # keep big default machines out of most runs
        out, err = io.StringIO(), io.StringIO()
        debug = "--debug" in argv
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
        except SystemExit as exc:  # pragma: no cover - main must return, not exit
            raise AssertionError(f"seed {seed}: main exited ({exc.code}) for {argv!r}") from None
        except Exception as exc:  # noqa: BLE001
            if debug:  # --debug re-raises internal errors: still a bug in any of these command lines
                raise AssertionError(f"seed {seed}: internal error for {argv!r}: {exc!r}") from exc
            raise
        text = out.getvalue() + err.getvalue()
        assert "Traceback" not in text, (seed, argv, text[-500:])
        assert code in (0, 2, 3), (seed, argv, code, err.getvalue()[-500:])
