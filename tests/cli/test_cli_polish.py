"""Issue 19 item 6: ``run_case`` honours the case id, ``--json`` prints one JSON object even for a usage error,
``list --json`` / ``list NAME``, ``run --capacity`` and truncated-trace warnings, written paths named, ``--help``
examples."""

from __future__ import annotations

import json

import pytest

from plena_cli.main import build_parser
from tests.util.cli import run

PROG = "S_ADDI_INT gp1, gp0, 64\nS_ADDI_INT gp2, gp0, 3\nV_ADD_VV gp2, gp2, gp2\n"


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.asm"
    p.write_text(PROG)
    return p


def test_run_case_honours_the_case_id():
    from testbenches.flashattn_prefill import REQUIRED_CASES
    from testbenches.harness import run_case

    (p9,) = [c for c in REQUIRED_CASES if c[0] == "P9"]
    assert p9[1] == {"hq": 2, "hkv": 1, "q_len": 70, "kv_len": 100} and p9[2] == "small"
    by_id = run_case("flashattn_prefill", "P9")
    explicit = run_case("flashattn_prefill", None, p9[1], "small")
    defaults = run_case("flashattn_prefill", None, None, "small")
    assert by_id.passed and by_id.case_id == "P9" and by_id.variant == "small"
    assert (by_id.cycles, by_id.instructions) == (explicit.cycles, explicit.instructions)
    assert by_id.checks[0].n == explicit.checks[0].n
    assert by_id.checks[0].n != defaults.checks[0].n and by_id.cycles != defaults.cycles


@pytest.mark.parametrize(
    "argv, message",
    [
        (("exec", "missing.asm"), "no such file: missing.asm"),
        (("trace", "missing.asm"), "no such file: missing.asm"),
        (("run", "nope"), "unknown testbench 'nope'"),
        (("run", "linear", "--case", "ZZ"), "unknown case 'ZZ'"),
        (("list", "nope"), "unknown testbench 'nope'"),
        (("config", "--set", "NOPE=1"), "NOPE"),
        (("hw", "nope"), "unknown hardware preset 'nope'"),
        (("model", "nope"), "unknown model 'nope'"),
        (("mutants", "--only", "nope"), "unknown mutation(s) nope"),
        (("bench", "--only", "nope"), "unknown workload(s) nope"),
        (("exec", "x.asm", "--bogus-flag"), "unrecognized arguments: --bogus-flag"),
    ],
)
def test_json_usage_error_is_one_json_object(capsys, argv, message):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 2
    lines = out.splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert list(doc) == ["error"] and message in doc["error"]
    assert message in err  # the red line stays on stderr


def test_json_error_of_a_fault_is_the_commands_own_document(capsys, prog):
    code, out, _err = run(capsys, "exec", prog, "--json")
    doc = json.loads(out)
    assert code == 3 and doc["partial"] is True and "error" not in doc and len(out.splitlines()) == 1


def test_list_json_has_every_case_with_its_parameters(capsys):
    code, out, _err = run(capsys, "list", "--json")
    docs = json.loads(out)
    assert code == 0 and isinstance(docs, list)
    fa = next(d for d in docs if d["name"] == "flashattn_prefill")
    assert set(fa) >= {"name", "description", "params", "cases"}
    assert fa["params"]["q_len"] == "2*MLEN" and fa["params"]["hq"] == 4
    assert "P11" in fa["cases"] and fa["case_kind"]["P11"] == "stretch"
    assert fa["cases"]["P9"] == {**fa["params"], "hq": 2, "hkv": 1, "q_len": 70, "kv_len": 100}
    assert fa["case_variant"]["P9"] == "small"
    code, out, _err = run(capsys, "list", "flashattn_prefill", "--hw", "v80-128x64", "--json")
    (one,) = json.loads(out)
    assert one["params"]["q_len"] == 256 and one["cases"]["P2"]["kv_len"] == 3 * 128 + 8


def test_list_name_shows_every_case(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _err = run(capsys, "list", "flashattn_prefill")
    assert code == 0 and "defaults: batch=1, hq=4" in out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│")}
    assert {"P1", "P9", "P10", "P11", "paper"} <= set(rows)
    assert "stretch" in rows["P11"] and "small" in rows["P9"] and "hq=2, hkv=1, q_len=70, kv_len=100" in rows["P9"]


def test_run_capacity_and_truncation_warnings(capsys, tmp_path):
    pf = tmp_path / "t.json"
    save = tmp_path / "saved"
    code, _out, err = run(capsys, "run", "linear", "--trace", "--capacity", "5", "--perfetto", pf, "--save", save)
    assert code == 0
    doc = json.loads(pf.read_text())
    assert doc["otherData"]["records"] == 5
    total = doc["otherData"]["records"] + doc["otherData"]["dropped"]
    assert f"the Perfetto export holds only the newest 5 of {total:,} instructions" in err
    assert f"the trace holds only the newest 5 of {total:,} instructions" in err
    assert f"--capacity {total} keeps them all" in err
    assert f"wrote {pf}\n" in err and f"wrote {save}\n" in err
    code, _out, err = run(capsys, "run", "linear", "--capacity", "0")
    assert code == 2 and "--capacity" in err


def test_exec_names_every_dump_written(capsys, prog, tmp_path):
    a, b = tmp_path / "v.npy", tmp_path / "h.bin"
    code, _out, err = run(capsys, "exec", prog, "--dump-vram", f"0:1={a}", "--dump-hbm", f"0:16={b}")
    assert code == 3  # gp2 = 3 is not a row: the dumps are the post-mortem
    assert f"wrote {a}\n" in err and f"wrote {b}\n" in err


def test_every_command_help_has_examples():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        text = p.format_help()
        assert "examples:\n" in text, name
        lines = text.split("examples:\n", 1)[1].splitlines()
        assert 2 <= len(lines) <= 3 and all(line.startswith(f"  plena-sim {name}") for line in lines), name


def test_run_panel_is_clean(capsys, monkeypatch):
    """Issue 19 item 6: the run panel names the timing model, prints the counts once, shows no ``array`` repr and
    no max rel err (meaningless where a golden is ~0), and labels the defaults ``[default]``."""
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _err = run(capsys, "run", "flashattn_prefill", "--timing", "overlap")
    doc_code, doc_out, _ = run(capsys, "run", "flashattn_prefill", "--timing", "overlap", "--json")
    doc = json.loads(doc_out)
    assert code == doc_code == 0
    text = " ".join(out.split())
    assert "flashattn_prefill[default]" in text and text.count("PASS") == 1
    assert f"{doc['instructions']:,} instructions, {doc['cycles']:,} cycles (overlap timing)" in text
    assert text.count(f"{doc['instructions']:,}") == 1 and str(doc["instructions"]) not in text
    assert "array" not in text and "max rel err" not in text
    assert "eps_a=0.01562..0.02862 (per element)" in text
    code, out, _err = run(capsys, "run", "softmax", "--set", "seed=3")
    assert code == 0 and "softmax[custom]" in out
