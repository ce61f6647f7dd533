"""Fuzz: random command lines (subcommands, flags, values, good / corrupt / missing / NUL-byte paths).

Contract: ``plena_cli.main.main`` returns an exit code -- 0, 2 (usage or input error) or 3 (fault); never 4
(an internal error) and never a Python traceback. Output flags also get hostile targets (a device node, a FIFO, a
directory, symlinks to them, dangling and looping symlinks): each is left exactly as it was and no temporary file
is left beside it. Default CI size: 300 command lines.
"""

from __future__ import annotations

import contextlib
import io
import random

import pytest
from fuzzlib import BASE_SEED, SMALL, count

from plena_cli.main import main
from tests.util.hostile import hostile_targets, leftovers, snapshot

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


def _hostile_outputs(targets):
    """An output flag with a hostile target, as one vocabulary item (two tokens: a bare FIFO or a symlink to
    /dev/full must never be drawn as an input, whose reader would block or never end)."""
    out = []
    for t in map(str, targets.values()):
        out += [("-o", t), ("--dump-fp-sram", t), ("--dump-hbm", "0:8=" + t), ("--dump-vram", "0:1=" + t)]
    return out


def test_fuzz_cli_command_lines(tmp_path):
    targets = hostile_targets(tmp_path / "hostile")
    before = {k: snapshot(p) for k, p in targets.items()}
    vocab = _vocab(tmp_path) + _hostile_outputs(targets)
    small_set = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    for seed in range(BASE_SEED, BASE_SEED + count(300)):
        r = random.Random(seed)
        argv = []
        for _ in range(r.randrange(0, 8)):
            item = r.choice(vocab)
            argv += list(item) if isinstance(item, tuple) else [item]
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
        assert {k: snapshot(p) for k, p in targets.items()} == before, (seed, argv)
        assert leftovers(tmp_path / "hostile") == [], (seed, argv)


def test_fuzz_cli_hostile_output_targets(tmp_path):
    """Valid ``asm`` / ``exec`` command lines with one to three outputs, some hostile: any hostile target makes the
    command exit 2 before it writes anything (the good outputs of the same line are not written either)."""
    targets = hostile_targets(tmp_path / "hostile")
    before = {k: snapshot(p) for k, p in targets.items()}
    (tmp_path / "ok.asm").write_text("S_ADDI_INT gp1, gp0, 64\nV_ADD_VV gp1, gp1, gp1\n")
    hostile = _hostile_outputs(targets)
    small_set = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    for seed in range(BASE_SEED, BASE_SEED + count(60)):
        r = random.Random(seed)
        good = tmp_path / f"good{seed}.out"
        if r.randrange(3) == 0:
            argv = ["asm", str(tmp_path / "ok.asm"), *r.choice([t for t in hostile if t[0] == "-o"])]
        else:
            outs = [r.choice([t for t in hostile if t[0] != "-o"]) for _ in range(r.randrange(1, 3))]
            outs.insert(r.randrange(len(outs) + 1), ("--dump-hbm", f"0:8={good}"))
            argv = ["exec", str(tmp_path / "ok.asm"), *small_set, *[tok for o in outs for tok in o]]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        assert code == 2 and "Traceback" not in err.getvalue(), (seed, argv, code, err.getvalue()[-500:])
        assert not good.exists(), (seed, argv)
        assert {k: snapshot(p) for k, p in targets.items()} == before, (seed, argv)
        assert leftovers(tmp_path / "hostile") == [] and leftovers(tmp_path) == [], (seed, argv)
