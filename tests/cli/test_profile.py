"""``plena-sim profile``: per source line executions, exclusive cycles (summing to the total) and share (issue 19
item 3)."""

from __future__ import annotations

import json

import pytest

from tests.util.cli import run

PROG = """\
; a comment line holds no instruction
S_ADDI_INT gp1, gp0, 256
C_SET_SCALE_REG gp1
S_ADDI_INT gp2, gp0, 1024

C_LOOP_START gp3, 3
M_MM 0, gp0, gp0
C_LOOP_END gp3
H_PREFETCH_V gp2, gp0, a0, 0, 0 ; [red]x[/red]
"""


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.asm"
    p.write_text(PROG)
    return p


def test_profile_json_of_a_program(capsys, prog):
    code, out, _err = run(capsys, "profile", prog, "--json")
    doc = json.loads(out)
    assert code == 0
    got = [(r["line"], r["executions"], r["cycles"], r["stall_cycles"]) for r in doc["lines"]]
    assert got == [(2, 1, 1, 0), (3, 1, 1, 0), (4, 1, 1, 0), (6, 1, 1, 0), (7, 3, 192, 0), (8, 3, 3, 0), (9, 1, 30, 0)]
    assert doc["total_cycles"] == sum(r["cycles"] for r in doc["lines"]) == 229
    assert doc["lines"][-1]["text"] == "H_PREFETCH_V gp2, gp0, a0, 0, 0 ; [red]x[/red]"
    assert "0 under serial, which never stalls" in doc["note"]


STALLING = """\
S_ADDI_INT gp1, gp0, 256
C_SET_SCALE_REG gp1
S_ADDI_INT gp2, gp0, 1024
C_LOOP_START gp3, 3
M_MM 0, gp0, gp0
C_LOOP_END gp3
H_PREFETCH_V gp2, gp0, a0, 0, 0
V_ADD_VV gp2, gp2, gp2
"""


@pytest.mark.parametrize(
    "timing, want",
    [
        # the M_MM waits for the matrix unit (unit busy); the V_ADD_VV for the prefetched rows
        ("overlap", [(5, 192, 124), (8, 0, 29)]),
        # rtl: the same, plus the HBM->vector hazard (3) and its recovery cycle (1) on the V_ADD_VV
        ("rtl", [(5, 24, 12), (8, 16, 33)]),
    ],
)
def test_profile_stall_cycles_per_line_sum_to_the_run_stalls(capsys, tmp_path, timing, want):
    p = tmp_path / "s.asm"
    p.write_text(STALLING)
    code, out, _err = run(capsys, "profile", p, "--timing", timing, "--json")
    lines = json.loads(out)["lines"]
    code_exec, out_exec, _ = run(capsys, "exec", p, "--timing", timing, "--json")
    assert code == code_exec == 0
    assert [(r["line"], r["cycles"], r["stall_cycles"]) for r in lines if r["stall_cycles"]] == want
    assert sum(r["stall_cycles"] for r in lines) == sum(json.loads(out_exec)["stalls"].values())


def test_profile_table_highlights_the_hottest_lines(capsys, prog, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _err = run(capsys, "profile", prog, "--top", "2")
    assert code == 0 and "229 cycles, 2 of 7 source lines" in " ".join(out.split())
    rows = [[c.strip() for c in line.split("│")[1:7]] for line in out.splitlines() if line.startswith("│")]
    assert rows == [
        ["7", "M_MM 0, gp0, gp0", "3", "192", "0", "83.8%"],
        ["9", "H_PREFETCH_V gp2, gp0, a0, 0, 0 ; [red]x[/red]", "1", "30", "0", "13.1%"],
    ]


def test_profile_of_the_flash_attention_testbench(capsys):
    code, out, _err = run(capsys, "profile", "--testbench", "flashattn_prefill", "--json")
    doc = json.loads(out)
    code_run, out_run, _ = run(capsys, "run", "flashattn_prefill", "--json")
    assert code == 0 and code_run == 0
    assert doc["total_cycles"] == json.loads(out_run)["cycles"] == sum(r["cycles"] for r in doc["lines"])
    assert any(r["text"].startswith("M_") and r["executions"] > 1 for r in doc["lines"])


def test_profile_usage_errors(capsys, prog, ran):
    code, _out, err = run(capsys, "profile", prog, "--top", "0")
    assert code == 2 and "--top" in err
    code, _out, err = run(capsys, "profile", "--testbench", "linear", "--hbm", prog)
    assert code == 2 and "--hbm: the inputs of a PROGRAM" in err
    code, out, _err = run(capsys, "profile", "--json")
    assert code == 2 and "exactly one of PROGRAM or --testbench" in json.loads(out)["error"]
    assert ran == []


def test_the_five_hottest_lines_are_highlighted():
    from plena_cli.profile_command import LineCost, _profile_table

    costs = [LineCost(k, f"S_ADDI_INT gp1, gp1, {k}", 1, c) for k, c in enumerate([5, 0, 9, 1, 7, 3, 2, 8], 1)]
    table = _profile_table("t", costs, sum(c.cycles for c in costs), None)
    styles = [row.style for row in table.rows]
    # cycles 5, 0, 9, 1, 7, 3, 2, 8: the five largest are lines 1, 3, 5, 6, 8
    assert styles == ["bold red", None, "bold red", None, "bold red", "bold red", None, "bold red"]
