"""`--hw`, `plena-sim hw`, configs that load per memory.md §8.1, and faults as the headline of exec/trace."""

import json

import numpy as np

from tests.util.cli import run


def test_hw_lists_presets_and_shows_sources(capsys):
    code, out, _ = run(capsys, "hw", "--json")
    rows = json.loads(out)
    assert code == 0
    assert [r["name"] for r in rows] == ["transactional", "small", "v80-64x16", "v80-128x64", "v80-256x64", "analytic"]
    assert (rows[3]["MLEN"], rows[3]["BLEN"], rows[3]["BROADCAST_AMOUNT"], rows[3]["P_V"]) == (128, 64, 8, 8)
    code, out, _ = run(capsys, "hw", "v80-256x64")
    assert code == 0 and "board_configs/v80.yaml" in out and "MLEN = 256" in out
    code, out, _ = run(capsys, "hw")
    assert code == 0 and "v80-128x64" in out and "128/128/64" in out
    code, _, err = run(capsys, "hw", "nope")
    assert code == 2 and "unknown hardware preset 'nope'" in err


def test_config_hw_and_set(capsys):
    code, out, _ = run(capsys, "config", "--hw", "v80-128x64", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["preset"] == "v80-128x64"
    assert doc["config"]["MLEN"] == 128 and doc["config"]["BLEN"] == 64 and doc["inconsistencies"] == []
    code, out, err = run(capsys, "config", "--set", "VLEN=128", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["config"]["VLEN"] == 128 and doc["config"]["MLEN"] == 64
    assert doc["inconsistencies"] == [
        {"key": "VLEN", "value": 128, "suggested": 64, "rule": "VLEN must equal MLEN (matrix instructions, CF-VM)"}
    ]
    code, out, err = run(capsys, "config", "--hw", "small", "--set", "BLEN=8")
    assert code == 0 and "note" not in err


def test_vector_program_runs_with_vlen_not_mlen(tmp_path, capsys):
    prog = tmp_path / "v.asm"
    prog.write_text("S_ADDI_INT gp1, gp0, 128\nS_LD_FP f1, gp0, 0\nV_ADD_VF gp1, gp1, f1\nV_ADD_VV gp1, gp1, gp1\n")
    dump = tmp_path / "row.npy"
    code, out, err = run(capsys, "exec", prog, "--set", "VLEN=128", "--fp", "1.5", "--dump-vram", f"128:1={dump}")
    assert code == 0, err
    assert "Simulation completed" in out
    row = np.load(dump)
    assert row.shape == (1, 128) and np.all(row == 3.0)


def test_matrix_op_under_vlen_not_mlen_is_a_cf_vm_fault_headline(tmp_path, capsys):
    prog = tmp_path / "m.asm"
    prog.write_text("S_ADDI_INT gp1, gp0, 1\nM_MM 0, gp0, gp0\n")
    code, out, err = run(capsys, "exec", prog, "--set", "VLEN=128")
    assert code == 3
    assert err.startswith("fault: ")
    assert "m.asm:2: M_MM 0, gp0, gp0" in err and "VLEN=128" in err and "MLEN=64" in err and "CF-VM" in err
    assert "Simulation completed" not in out + err
    assert "partial statistics (faulted at pc 1, not retired)" in out
    code, out, err = run(capsys, "exec", prog, "--set", "VLEN=128", "--json")
    doc = json.loads(out)
    assert code == 3 and doc["partial"] is True and doc["fault"]["rule"] == "CF-VM" and doc["instructions"] == 1
    assert "Simulation completed" not in err


def test_batched_op_with_ba_times_hlen_not_mlen_is_a_cf_ba_fault(tmp_path, capsys):
    prog = tmp_path / "b.asm"
    prog.write_text("M_BTMV 0, gp0, gp0\n")
    code, out, err = run(capsys, "exec", prog, "--hw", "v80-128x64", "--set", "BROADCAST_AMOUNT=4")
    assert code == 3 and "CF-BA" in err and "BROADCAST_AMOUNT" in err
    assert "Simulation completed" not in out + err


def test_trace_fault_is_the_headline(tmp_path, capsys):
    prog = tmp_path / "t.asm"
    prog.write_text("S_ADDI_INT gp1, gp0, 1\nM_MM 0, gp0, gp0\n")
    code, out, err = run(capsys, "trace", prog, "--set", "VLEN=128")
    assert code == 3 and err.startswith("fault: ") and "CF-VM" in err
    assert "partial: faulted at pc 1" in out and "Simulation completed" not in out


def test_run_on_a_preset_passes(capsys):
    code, out, err = run(capsys, "run", "flashattn_decode", "--hw", "v80-128x64", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["passed"] is True, err
    assert doc["hardware"]["MLEN"] == 128 and doc["hardware"]["BLEN"] == 64 and doc["hw"] == "v80-128x64"
