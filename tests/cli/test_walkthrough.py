"""The README's "Inspecting a kernel" walkthrough states facts the commands must show: the failing check locates
its worst element in VRAM, and ``trace --vram`` finds the instructions a mutation dropped (issue 19, item 7)."""

import json

from tests.util.cli import run

CASE = ("--testbench", "flashattn_decode", "--case", "D1")
MUTATED = (*CASE, "--mutation", "mres_not_applied_o")


def test_the_failing_check_names_the_vram_row_and_lane_of_its_elements(capsys):
    code, out, _ = run(capsys, "run", "flashattn_decode", "--case", "D1", "--mutation", "mres_not_applied_o", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["case"] == "D1:mres_not_applied_o" and not doc["passed"]
    worst, first = doc["checks"][0]["worst"], doc["checks"][0]["first"]
    assert (worst["at"], worst["vram_row"], worst["lane"]) == ("(batch=0, row=0, head=1, col=3)", 0, 19)
    assert (first["at"], first["vram_row"], first["lane"]) == ("(batch=0, row=0, head=1, col=0)", 0, 16)
    code, out, _ = run(capsys, "run", "flashattn_decode", "--case", "D1", "--mutation", "mres_not_applied_o")
    assert "worst (batch=0, row=0, head=1, col=3) at VRAM row 0 lane 19" in " ".join(out.replace("│", " ").split())


def _scalings(capsys, *source):
    code, out, err = run(capsys, "trace", *source, "--vram", "0", "--op", "V_MUL_VF", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert all({"space": "vram", "op": "write", "start": 0, "count": 1, "unit": "row"} in r["mem"] for r in rows)
    return [r["line"] for r in rows]


def test_trace_vram_shows_the_rescalings_the_mutation_dropped(capsys):
    assert _scalings(capsys, *MUTATED) == [444, 453, 462, 471]  # the final normalisations only
    good = _scalings(capsys, *CASE)
    # per head and KV tile (the last, partial tile's code apart), then the normalisations
    assert good == [112, 156, 200, 244] * 4 + [316, 363, 410, 457] + [468, 477, 486, 495]
    code, out, _ = run(capsys, "trace", *CASE, "--vram", "0", "--op", "V_MUL_VF", "--last", "8")
    assert code == 0 and "8 of 24 selected instructions" in out


def test_a_mutation_is_an_option_of_testbench_runs_only(capsys, tmp_path):
    prog = tmp_path / "p.asm"
    prog.write_text("S_ADDI_INT gp1, gp0, 1\n")
    code, _, err = run(capsys, "trace", prog, "--mutation", "mres_not_applied_o")
    assert code == 2 and "--mutation: options of --testbench NAME, not of a PROGRAM" in err
    code, _, err = run(capsys, "run", "flashattn_decode", "--mutation", "no_such_bug")
    assert code == 2 and "--mutation: unknown mutation 'no_such_bug'" in err
