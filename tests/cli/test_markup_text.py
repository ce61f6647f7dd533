"""User text that looks like rich markup (``[/h]``, ``[red]``, ``O[b,h]``) is printed as it is, by every command
that prints user text (issue 19 item 1): asm source and comments, file names, messages, the opcode table."""

from __future__ import annotations

import json

import pytest

from tests.util.cli import run

COMMENT = "; O[b,h] q[i] [/h] [bold]"
PROG = f"""\
S_ADDI_INT gp1, gp0, 256 {COMMENT}
C_SET_SCALE_REG gp1
S_ADDI_INT gp2, gp0, 1024
H_PREFETCH_V gp2, gp0, a0, 0, 0
S_ADDI_INT gp3, gp0, 7 ; [red]x[/red]
V_ADD_VV gp3, gp3, gp3
"""


@pytest.fixture
def prog(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    p = tmp_path / "[red]x.asm"
    p.write_text(PROG)
    return p


def test_trace_prints_comments_and_file_name_verbatim(capsys, prog):
    code, out, err = run(capsys, "trace", prog)
    assert code == 3  # V_ADD_VV gp3 = 7: not a VRAM row
    assert "O[b,h] q[i] [/h] [bold]" in out
    assert "S_ADDI_INT gp3, gp0, 7 ; [red]x[/red]" in out
    assert "[red]x.asm (serial)" in out
    assert "fault: " in err and "[red]x.asm:6: V_ADD_VV gp3, gp3, gp3" in err


def test_exec_title_keeps_the_file_name(capsys, prog):
    code, out, err = run(capsys, "exec", prog)
    assert code == 3
    assert "plena-sim exec " in out and "[red]x.asm: partial statistics" in out
    assert "[red]x.asm:6: V_ADD_VV" in err


def test_asm_and_disasm_keep_the_file_name(capsys, prog, tmp_path):
    mem = tmp_path / "[bold]o.mem"
    code, _out, err = run(capsys, "asm", prog, "-o", mem)
    assert code == 0 and f"6 instructions -> {mem}" in err
    code, out, _err = run(capsys, "disasm", mem)
    assert code == 0 and out.splitlines()[0] == "S_ADDI_INT gp1, gp0, 256"


def test_config_title_keeps_the_file_name(capsys, tmp_path, monkeypatch):
    from plena_sim.config import default_config_text

    monkeypatch.setenv("COLUMNS", "300")
    cfg = tmp_path / "[red]c.toml"
    cfg.write_text(default_config_text())
    code, out, _err = run(capsys, "config", "--config", cfg)
    assert code == 0 and f"from {cfg}" in out


def test_isa_keeps_bracketed_text(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line
    code, out, _err = run(capsys, "isa")
    assert code == 0
    ld = next(line for line in out.splitlines() if " S_LD_FP " in line)
    assert "f_d = FPSRAM[gp_base + imm]" in ld
    vmask = [line for line in out.splitlines() if "[rmask]" in line]
    assert len(vmask) > 5


def test_assembler_error_keeps_the_token(capsys, tmp_path):
    bad = tmp_path / "[red]b.asm"
    bad.write_text("S_ADDI_INT gp1, gp0, [/h]\n")
    code, _out, err = run(capsys, "asm", bad)
    assert code == 2 and "[red]b.asm:1:" in err and "[/h]" in err


def test_trace_json_keeps_text(capsys, prog):
    code, out, _err = run(capsys, "trace", prog, "--json")
    doc = json.loads(out)
    assert code == 3 and doc["rows"][0]["text"] == f"S_ADDI_INT gp1, gp0, 256 {COMMENT}"


def test_profile_prints_source_text_verbatim(capsys, prog):
    code, out, err = run(capsys, "profile", prog)
    assert code == 3 and "O[b,h] q[i] [/h] [bold]" in out and "[red]x.asm (serial)" in out
    assert "S_ADDI_INT gp3, gp0, 7 ; [red]x[/red]" in out


def test_diff_prints_parameter_values_verbatim(capsys, tmp_path):
    for name, value in (("a", "[red]a"), ("b", "[/h]b")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps({"params": {"tag": value}, "cycles": 1}))
    code, out, _err = run(capsys, "diff", tmp_path / "a", tmp_path / "b")
    assert code == 1 and "param tag: [red]a -> [/h]b" in out
