"""``plena-sim timing`` (the effective per-opcode table) and ``--timing rtl`` of ``exec`` (its statistics in the JSON
and the resource / stall tables of the panel)."""

import json

from isa.table import INSTRUCTIONS
from plena_sim.timing.rtl import RESOURCES, STALL_REASONS
from tests.util.cli import run


def _row(doc, mnemonic):
    return next(r for r in doc["opcodes"] if r["mnemonic"] == mnemonic)


def test_timing_rtl_json_table(capsys):
    code, out, err = run(capsys, "timing", "--timing", "rtl", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["timing_mode"] == "rtl" and doc["data_file"] == {"name": "rtl_timing_v1.toml", "version": 1}
    assert doc["config"] == {"MLEN": 64, "VLEN": 64, "BLEN": 4, "BROADCAST_AMOUNT": 4}
    assert _row(doc, "M_MM") == {
        "mnemonic": "M_MM",
        "unit": "matrix",
        "resource": "matrix_compute",
        "ready": 8,
        "done": 8,
        "ii": 8,
        "status": "measured",
    }
    assert (_row(doc, "S_ADD_FP")["ready"], _row(doc, "S_ADD_FP")["done"], _row(doc, "S_ADD_FP")["ii"]) == (9, 10, 10)
    assert (_row(doc, "V_RED_SUM")["ready"], _row(doc, "V_RED_SUM")["ii"]) == (5 + 7 * 7, 1)
    assert _row(doc, "V_TOPK")["ready"] == f"{4 * 32 + 19} / {4 * 128 + 19}"
    assert _row(doc, "H_PREFETCH_V")["ready"] == "HBM" and _row(doc, "S_MAX_FP")["status"] == "declared"
    assert [(h["name"], h["stall"], h["recovery"]) for h in doc["hazards"]] == [
        ("hbm_vector", 3, 1),
        ("reduction_scalar", 5, 1),
        ("sfu_broadcast", 4, 1),
        ("vector_port_write", 2, 1),
    ]
    assert len(doc["opcodes"]) == len(INSTRUCTIONS)


def test_timing_follows_the_hardware_preset_and_the_legacy_table(capsys):
    code, out, _ = run(capsys, "timing", "--timing", "rtl", "--set", "BLEN=16", "--json")
    assert code == 0 and _row(json.loads(out), "M_MM_WO")["ii"] == 45
    code, out, _ = run(capsys, "timing", "--json")  # serial: the legacy latency table of timing.md §2
    doc = json.loads(out)
    assert _row(doc, "M_MM") == {
        "mnemonic": "M_MM",
        "unit": "M",
        "resource": "matrix_compute",
        "ready": 64,
        "done": 64,
        "ii": 64,
        "status": "legacy",
    }
    code, out, _ = run(capsys, "timing", "--timing", "rtl")
    assert code == 0 and "hazards (rtl_timing_v1.toml)" in out and "S_MAP_V_FP" in out


def test_exec_rtl_reports_the_resource_statistics(tmp_path, capsys):
    prog = tmp_path / "p.asm"
    prog.write_text("S_ADDI_INT gp1, gp0, 64\nM_MM 0, gp0, gp0\nM_MM_WO gp1, gp0, 0\nV_ADD_VV gp2, gp1, gp1, 0\n")
    code, out, err = run(capsys, "exec", prog, "--timing", "rtl", "--json")
    assert code == 0, err
    st = json.loads(out)
    assert st["cycles"] == 42 and st["timing_mode"] == "rtl"
    assert st["critical_path"] == dict(zip(RESOURCES, [1, 12, 8, 21, 0, 0, 0, 0], strict=True))
    assert st["busy"] == dict(zip(RESOURCES, [1, 1, 8, 21, 0, 0, 0, 0], strict=True))
    assert st["stalls"] == dict.fromkeys(STALL_REASONS, 0) | {"operand_not_ready": 27}
    assert st["unvalidated"] == {"opcodes": {"M_MM_WO": 1, "S_ADDI_INT": 1}, "cycles": 22, "share": 22 / 42}
    assert st["mac_utilization"] == 1024 / (42 * 256)
    code, out, _ = run(capsys, "exec", prog, "--timing", "rtl")
    lines = [line.strip() for line in out.splitlines()]
    assert code == 0 and "resources" in lines and "stalls" in lines
    assert any(line.startswith("│ matrix_writeout") and "21" in line for line in lines)
