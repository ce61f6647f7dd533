"""The trace table at 80 columns (no truncated mnemonic or number), ``--wide``, the faulting instruction as its
last row, ``trace`` with exec's memory inputs, structured ``regs`` in ``--json``, usage errors (issue 19 item 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rich.console import Console

from plena_sim.machine import Machine
from plena_sim.trace.ring import render_table
from tests.util.cli import run

PROG = """\
S_ADDI_INT gp1, gp0, 256
C_SET_SCALE_REG gp1
S_ADDI_INT gp2, gp0, 1024
H_PREFETCH_V gp2, gp0, a0, 0, 0
S_LD_FP f1, gp0, 3
V_ADD_VV gp2, gp2, gp2
S_ADDI_INT gp3, gp0, 7
V_ADD_VV gp3, gp3, gp3
"""
MNEMONICS = ("S_ADDI_INT", "C_SET_SCALE_REG", "H_PREFETCH_V", "S_LD_FP", "V_ADD_VV")


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.asm"
    p.write_text(PROG)
    return p


def _rendered(wide: bool, fault: dict | None = None) -> str:
    res = Machine().run(PROG, raise_on_fault=False, trace=64)
    con = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    con.print(render_table(res.trace, wide=wide, fault=fault))
    con.file.close()
    return con.export_text()


def test_narrow_table_fits_80_columns_with_every_mnemonic_whole():
    text = _rendered(False, {"pc": 7, "line": 8, "text": "V_ADD_VV gp3, gp3, gp3", "message": "not a row [AL-VROW]"})
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    words = {w for line in lines for w in line.replace("│", " ").split()}
    for m in MNEMONICS:
        assert m in words  # never cut or wrapped inside the mnemonic
    header = next(line for line in lines if line.startswith("┃"))
    cols = [c.strip() for c in header.strip("┃").split("┃")]
    assert cols == ["pc", "line", "instruction", "unit", "cycles", "changes"]
    assert {"0x0..+0x100", "(320", "0x0", "0x400"} <= words  # numbers are not cut either
    starts = [[c.strip() for c in line.split("│")[1:6]] for line in lines if line.startswith("│")]
    starts = [c for c in starts if c[0]]  # the first line of each row
    assert starts[-1] == ["7", "8", "V_ADD_VV gp3, gp3, gp3", "-", "-"] and len(starts) == 8
    changes = [line.split("│")[6].strip() for line in lines if line.startswith("│")]
    assert " ".join(changes[-2:]) == "FAULT: not a row [AL-VROW]"


def test_wide_table_has_every_column():
    header = next(line for line in _rendered(True).splitlines() if line.startswith("┃"))
    cols = [c.strip() for c in header.strip("┃").split("┃")]
    assert cols[:8] == ["#", "pc", "line", "instruction", "unit", "issue", "span", "cycles"]


def test_fault_is_the_last_row_and_json_regs_are_objects(capsys, prog, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run(capsys, "trace", prog)
    assert code == 3
    table = out.split("per-opcode summary")[0]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert rows[-1].split("│")[1].strip() == "7" and "FAULT:" in rows[-1] and "[AL-VROW]" in rows[-1]
    code, out, _err = run(capsys, "trace", prog, "--json")
    doc = json.loads(out)
    assert code == 3
    assert doc["rows"][0]["regs"] == {"gp1": [0, 256]}
    assert doc["rows"][1]["regs"] == {"SCALE": [0, 256]}
    assert doc["rows"][3]["regs"] == {}
    assert all("reg" not in r for r in doc["rows"])
    assert doc["fault"]["pc"] == 7 and doc["fault"]["line"] == 8 and doc["fault"]["text"] == "V_ADD_VV gp3, gp3, gp3"


def test_trace_takes_exec_memory_inputs(capsys, prog, tmp_path):
    fp = tmp_path / "fp.bin"
    code, out, _err = run(capsys, "trace", prog, "--fp", "0,0,0,2.5", "--json")
    assert code == 3 and json.loads(out)["rows"][4]["regs"] == {"f1": [0.0, 2.5]}
    words = np.zeros(1024, np.float16)
    words[3] = -1.5
    fp.write_bytes(words.tobytes())
    code, out, _err = run(capsys, "trace", prog, "--fp-sram", fp, "--json")
    assert code == 3 and json.loads(out)["rows"][4]["regs"] == {"f1": [0.0, -1.5]}
    code, _out, err = run(capsys, "trace", "--testbench", "linear", "--fp", "1")
    assert code == 2 and "--fp: the inputs of a PROGRAM" in err


@pytest.mark.parametrize(
    "flags, message",
    [(("--pc", "10:5"), "empty range"), (("--last", "0"), "must be >= 1"), (("--last", "-4"), "must be >= 1")],
)
def test_empty_selections_are_usage_errors(capsys, prog, ran, flags, message):
    code, _out, err = run(capsys, "trace", prog, *flags)
    assert code == 2 and message in err and ran == []


def test_last_larger_than_the_records_is_not_an_error(capsys, prog):
    code, out, _err = run(capsys, "trace", prog, "--last", "1000", "--json")
    assert code == 3 and len(json.loads(out)["rows"]) == 7


def test_truncated_trace_and_perfetto_say_so(capsys, prog, tmp_path):
    pf = tmp_path / "t.json"
    code, _out, err = run(capsys, "trace", prog, "--capacity", "3", "--perfetto", pf)
    assert code == 3
    assert f"wrote {pf}" in err
    assert "the Perfetto export holds only the newest 3 of 7 instructions" in err
    assert "the trace holds only the newest 3 of 7 instructions" in err and "--capacity 7 keeps them all" in err
