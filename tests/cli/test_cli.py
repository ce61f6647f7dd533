"""The CLI skeleton: exit codes, located errors, no tracebacks (issue: foundation)."""

import json
import subprocess
import sys

import pytest

from tests.util.cli import run


def test_asm_three_mistakes_three_located_errors(tmp_path, capsys):
    src = tmp_path / "bad.asm"
    src.write_text("S_ADDI_INT gp1, gp0, 5\nS_ADD_FP gp1, f2, f3\nV_ADD_VV gp1, gp2\nC_LOOP_START gp1, 0\n")
    code, out, err = run(capsys, "asm", str(src), "-o", str(tmp_path / "bad.mem"))
    assert code == 2
    located = [line for line in err.splitlines() if line.strip().startswith(str(src))]
    assert [line.split(":")[1:3] for line in located] == [["2", "10"], ["3", "15"], ["4", "19"]]
    assert "Traceback" not in err
    assert not (tmp_path / "bad.mem").exists()


def test_asm_then_disasm(tmp_path, capsys):
    src = tmp_path / "ok.asm"
    src.write_text("S_ADDI_INT gp1, gp0, 0x80 ; x\nC_LOOP_START gp1, 3\nC_LOOP_END gp1, 0\nM_MV_WO gp1, 0, 16\n")
    code, _, _ = run(capsys, "asm", str(src), "-o", str(tmp_path / "ok.mem"))
    assert code == 0
    assert (tmp_path / "ok.mem").read_text() == "0x00200062\n0x00000C6F\n0x00000070\n0x0004004B\n"
    code, out, _ = run(capsys, "disasm", str(tmp_path / "ok.mem"))
    assert code == 0
    assert out.splitlines() == ["S_ADDI_INT gp1, gp0, 128", "C_LOOP_START gp1, 3", "C_LOOP_END gp1", "M_MV_WO gp1, 16"]
    code, out, _ = run(capsys, "asm", str(src))
    assert out == "0x00200062\n0x00000C6F\n0x00000070\n0x0004004B\n"


def test_disasm_bad_file_exit_2(tmp_path, capsys):
    p = tmp_path / "x.mem"
    p.write_text("0x1 hello\n")
    code, _, err = run(capsys, "disasm", str(p))
    assert code == 2 and "token 1 'hello'" in err and "Traceback" not in err
    code, _, err = run(capsys, "disasm", str(tmp_path / "missing.mem"))
    assert code == 2


def test_config_command(capsys, reference_toml):
    code, out, _ = run(capsys, "config", "--json", "--set", "BMM_SCALE=0.25", "--config", str(reference_toml))
    assert code == 0
    doc = json.loads(out)
    assert doc["config"]["BMM_SCALE"] == 0.25 and doc["config"]["MLEN"] == 64
    assert doc["derived"] == {"P_M": 64, "P_V": 4, "P_W": 4, "mram_tiles": 64}
    assert doc["latency"]["VECTOR_SUM_CYCLES"]["effective"] == 8
    code, out, _ = run(capsys, "config", "--section", "ANALYTIC", "--config", str(reference_toml), "--json")
    assert code == 0 and json.loads(out)["config"]["MLEN"] == 2048
    code, out, _ = run(capsys, "config")
    assert code == 0 and "MLEN" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["config", "--set", "MLEN=66"], "MLEN=66 is not a multiple of BLEN=4"),
        (["config", "--hw", "nope"], "unknown hardware preset 'nope'"),
        (["config", "--hw", "small", "--config", "/nonexistent/x.toml"], "mutually exclusive"),
        (["config", "--set", "NOPE=1"], "unknown config key"),
        (["config", "--set", "MLEN"], "KEY=VALUE"),
        (["config", "--config", "/nonexistent/x.toml"], "cannot read config file"),
        (["bogus"], "invalid choice"),
        (["asm"], "required"),
        (["asm", "/nonexistent.asm"], "no such file"),
    ],
)
def test_usage_errors_exit_2_one_red_line(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err


def test_isa_command_and_markdown(capsys):
    code, out, _ = run(capsys, "isa", "--markdown")
    assert code == 0 and "| 37 | `V_TOPK` |" in out
    code, out, _ = run(capsys, "isa")
    assert code == 0 and "M_MM" in out


def test_console_script_entry_point(tmp_path):
    # the installed console script runs (python -m as a fallback when the script is not on PATH)
    r = subprocess.run([sys.executable, "-m", "plena_cli", "isa", "--markdown"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("# PLENA opcode reference")
