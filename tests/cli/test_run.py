"""`plena-sim run` / `plena-sim list`: exit codes, JSON contract, --save artifacts, teeth through the CLI."""

import json

import numpy as np
import pytest

from programs import mutation_hooks
from tests.util.cli import run

JSON_FIELDS = {
    "testbench",
    "params",
    "hardware",
    "passed",
    "max_abs_err",
    "max_rel_err",
    "rms_err",
    "worst",
    "failing_elements",
    "atol",
    "rtol",
    "cycles",
    "instructions",
    "stats",
    "regions",
    "wall_s",
    "fault",
}


def test_run_default_json_and_save(tmp_path, capsys):
    out_dir = tmp_path / "save"
    code, out, err = run(capsys, "run", "flashattn_prefill", "--json", "--save", out_dir)
    assert code == 0, err
    doc = json.loads(out)  # exactly one JSON object on stdout
    assert set(doc) >= JSON_FIELDS
    assert doc["passed"] is True and doc["fault"] is None and doc["failing_elements"] == 0
    assert doc["params"]["kv_len"] == 256 and doc["hardware"]["MLEN"] == 64
    assert doc["instructions"] > 10_000 and doc["cycles"] >= doc["instructions"]
    assert doc["regions"] == doc["stats"]["regions"] and doc["regions"][-1]["path"] == "(unlabelled)"
    assert sum(e["cycles_exclusive"] for e in doc["regions"]) == doc["cycles"]
    assert sum(e["instructions"] for e in doc["regions"]) == doc["instructions"]
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["arrays.npz", "program.asm", "program.mem", "result.json"]  # and the replay set (plena_cli/replay.py)
        + ["config.toml", "replay.sh", "fp_sram.bin", "int_sram.bin", "hbm", "vram"]
    )
    saved = json.loads((out_dir / "result.json").read_text())
    assert saved["passed"] is True and saved["instructions"] == doc["instructions"]
    arrays = np.load(out_dir / "arrays.npz")
    assert arrays["q"].shape == (1, 128, 4, 16)
    assert arrays["k"].shape == (1, 256, 1, 16) and arrays["v"].shape == (1, 256, 1, 16)
    assert arrays["golden"].shape == arrays["output"].shape == (1, 128, 4, 16)
    assert np.allclose(arrays["output"], arrays["golden"], atol=0.05)
    assert (out_dir / "program.mem").read_text().startswith("0x")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["run", "nope"], "unknown testbench 'nope'"),
        (["run", "flashattn_prefill", "--set", "foo=1"], "unknown parameter 'foo'"),
        (["run", "flashattn_prefill", "--set", "kv_len=abc"], "expected an integer"),
        (["run", "flashattn_prefill", "--set", "hq=6", "--set", "hkv=4"], "unsupported parameters"),
        (["run", "flashattn_prefill", "--case", "P99"], "unknown case 'P99'"),
        (["run", "flashattn_prefill", "--variant", "huge"], "unknown variant 'huge'"),
        (
            ["run", "flashattn_prefill", "--set-hw", "MLEN=128"],
            "change together: VLEN=64 -> 128 (VLEN must equal MLEN (matrix instructions, CF-VM)); "
            "BROADCAST_AMOUNT=4 -> 8 (BROADCAST_AMOUNT*HLEN must equal MLEN (batched matrix instructions, CF-BA)). "
            "Consistent: --set-hw MLEN=128 --set-hw VLEN=128 --set-hw BROADCAST_AMOUNT=8",
        ),
        (["run", "flashattn_prefill", "--hw", "nope"], "unknown hardware preset 'nope'"),
        (["run", "linear", "--hw", "v80-64x16", "--variant", "small"], "cannot run on --hw v80-64x16"),
    ],
)
def test_run_usage_errors_exit_2(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert needle in err and "Traceback" not in err


def test_broken_generator_mismatch_exits_1_with_worst_element(capsys):
    with mutation_hooks.inject("kv_tile_offset_ignored"):
        code, out, _ = run(capsys, "run", "flashattn_prefill", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["passed"] is False and doc["failing_elements"] > 0
    assert "batch=" in doc["worst"]["at"] and "head=" in doc["worst"]["at"]


def test_broken_alignment_exits_3_with_located_fault(capsys):
    with mutation_hooks.inject("pv_v_step_blen"):
        code, out, err = run(capsys, "run", "flashattn_prefill")
    assert code == 3
    import re

    assert re.search(
        r"flashattn_prefill\.asm:\d+: M_MM 0, gp\d+, gp\d+: matrix address \d+ \(gp\d+\) is not "
        r"row-granular.*\[AL-MM, pc \d+\]",
        err,
    ), err


def test_list(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line
    code, out, _ = run(capsys, "list")
    assert code == 0 and "flashattn_prefill" in out and "kv_len=4*MLEN," in out
    code, out, _ = run(capsys, "list", "--hw", "v80-128x64")
    assert code == 0 and "q_len=2*MLEN (=256), kv_len=4*MLEN (=512)," in out


def test_mutants_command(capsys):
    code, out, _ = run(capsys, "mutants", "--only", "pv_v_step_blen,store_scale_wrong", "--quick", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["all_caught"] is True
    assert [(r["mutation"], r["how"]) for r in doc["mutants"]] == [
        ("pv_v_step_blen", "fault"),
        ("store_scale_wrong", "mismatch"),
    ]
    code, _, err = run(capsys, "mutants", "--only", "no_such_hook")
    assert code == 2 and "unknown mutation" in err


import testbenches  # noqa: E402

WIDE_HW = [
    "--set-hw",
    "MLEN=128",
    "--set-hw",
    "VLEN=128",
    "--set-hw",
    "BROADCAST_AMOUNT=8",
    "--set-hw",
    "HBM_M_Prefetch_Amount=128",
    "--set-hw",
    "FP_SRAM_SIZE=4096",
]


@pytest.mark.parametrize("name", testbenches.names())
def test_every_catalogue_testbench_passes_at_defaults_via_cli(capsys, name):
    code, out, err = run(capsys, "run", name, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["passed"] is True, (name, doc.get("error"), err[-500:])


@pytest.mark.parametrize("name", ["linear", "rms_norm", "flashattn_prefill"])
def test_mlen_128_via_set_hw(capsys, name):
    code, out, _ = run(capsys, "run", name, *WIDE_HW, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["passed"] is True and doc["hardware"]["MLEN"] == 128


def test_run_panel_shows_the_region_table_when_the_program_has_regions():
    from rich.console import Console

    from plena_cli.run_report import render_report
    from plena_sim.machine import Machine
    from testbenches.harness import Report

    res = Machine().run(
        "; @region body\nS_ADDI_INT gp1, gp0, 1\nS_ADDI_INT gp2, gp0, 1\n; @endregion\nS_ADD_FP f1, f1, f1\n"
    )
    rep = Report("t", "c", passed=True, cycles=res.cycles, instructions=res.instructions, stats=res.stats)
    console = Console(record=True, width=100)
    render_report(console, rep, {"wall_s": 0.0})
    lines = [line.split("│") for line in console.export_text().splitlines() if line.startswith("│ ")]
    rows = {cells[1].strip(): [c.strip() for c in cells[2:6]] for cells in lines if len(cells) == 7}
    assert rows == {"body": ["2", "2", "2", "66.7%"], "(unlabelled)": ["1", "1", "1", "33.3%"]}
    plain = Report("t", "c", passed=True, stats=Machine().run("S_ADD_FP f1, f1, f1").stats)
    console = Console(record=True, width=100)
    render_report(console, plain, {"wall_s": 0.0})
    assert "(unlabelled)" not in console.export_text()


def test_an_invalid_instruction_of_a_generator_exits_4_naming_it_and_the_value(capsys):
    # raw_large_immediate: P10's VRAM addresses >= 2^18 emitted as one S_ADDI_INT -- the generator's bug, not the
    # user's (P10's HBM tensors are small: the testbench's set_addr_regs preamble is not affected)
    with mutation_hooks.inject("raw_large_immediate"):
        code, _, err = run(capsys, "run", "flashattn_prefill", "--case", "P10")
    assert code == 4, err
    assert "generator error: flash_attention: S_ADDI_INT gp" in err and "out of range" in err
    import re

    value = re.search(r"bad value: 'S_ADDI_INT gp\d+, gp0, (\d+)'", err)
    assert value and int(value.group(1)) >= 1 << 18, err
    assert "internal error" not in err and "Traceback" not in err
    with mutation_hooks.inject("raw_large_immediate"):  # P8: the HBM bases already, in the preamble
        code, _, err = run(capsys, "run", "flashattn_prefill", "--case", "P8")
    assert code == 4 and "generator error: set_addr_regs: S_ADDI_INT gp1, gp0, " in err, err


def test_an_unsupported_parameter_still_exits_2(capsys):
    code, _, err = run(capsys, "run", "flashattn_prefill", "--set", "d=48")
    assert code == 2 and "unsupported parameters" in err and "generator error" not in err
