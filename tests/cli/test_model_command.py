"""`plena-sim model`: --list / --show, clean errors, the TTFT and tokens/s arithmetic, the region merge, the
command's plumbing through the harness (on stand-in testbenches) and the real decoder-layer runs."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

import testbenches
from programs.model import presets as model_presets
from studies.model import clock_of, layer_figures, merge_regions
from tests.util.cli import run

RUN_FIELDS = {
    "verdict",
    "layers",
    "clock_hz",
    "prefill_layer_cycles",
    "decode_layer_cycles",
    "ttft_s",
    "decode_tokens_per_s",
    "regions",
    "runs",
    "hw",
    "timing",
    "model",
    "preset",
}
RUN_SUMMARY_FIELDS = {"testbench", "params", "verdict", "cycles", "instructions", "wall_s", "summary", "error", "fault"}


def one_clean_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def _json_error(line: str) -> str:
    """What ``--json`` prints on stdout for the usage error of the red line ``line`` (``error: <message>``)."""
    return json.dumps({"error": line.removeprefix("error: ")}) + "\n"


# ----------------------------------------------------------------------------------------- list / show


def test_list_json_has_every_preset_with_exact_values(capsys):
    code, out, _ = run(capsys, "model", "--list", "--json")
    rows = json.loads(out)
    assert code == 0
    assert [r["name"] for r in rows] == list(model_presets.names())
    smol = rows[1]
    assert {k: smol[k] for k in model_presets.SHAPE_KEYS} == {
        "layers": 30,
        "hidden": 576,
        "heads": 9,
        "kv_heads": 3,
        "head_dim": 64,
        "ffn": 1536,
        "rope_theta": 100000.0,
        "rms_eps": 1e-5,
    }
    assert (rows[4]["name"], rows[4]["hidden"], rows[4]["ffn"]) == ("qwen3-32b", 5120, 25600)
    assert "experts" not in smol and (rows[5]["experts"], rows[5]["top_k"]) == (32, 4)
    assert (rows[6]["name"], rows[6]["experts"], rows[6]["top_k"], rows[6]["ffn"]) == ("qwen3-30b-a3b", 128, 8, 768)
    assert {k: rows[7][k] for k in ("name", "layers", "hidden", "ffn", "experts", "top_k")} == {
        "name": "tiny-moe",
        "layers": 2,
        "hidden": 256,
        "ffn": 256,
        "experts": 32,
        "top_k": 4,
    }


def test_list_table(capsys):
    code, out, _ = run(capsys, "model", "--list")
    assert code == 0
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["llama-3.1-8b"] == ["llama-3.1-8b", "32", "4096", "32/8", "128", "14336", "-"]
    assert lines["gpt-oss-20b"] == ["gpt-oss-20b", "24", "2880", "64/8", "64", "2880", "32/4"]
    assert lines["tiny"] == ["tiny", "2", "256", "4/2", "64", "512", "-"]


def test_show_json_and_text(capsys):
    code, out, _ = run(capsys, "model", "qwen3-8b", "--show", "--json")
    assert code == 0
    assert json.loads(out) == {
        "name": "qwen3-8b",
        "description": "Qwen3 8B: dense, GQA 32/8, d 128 (q/k-norm not modelled)",
        "source": "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
        "layers": 36,
        "hidden": 4096,
        "heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "ffn": 12288,
        "rope_theta": 1000000.0,
        "rms_eps": 1e-6,
    }
    code, out, _ = run(capsys, "model", "gpt-oss-20b", "--show")
    assert code == 0 and out == model_presets.load("gpt-oss-20b").text
    assert "num_local_experts" in out and "sliding_window 128" in out


def test_show_a_toml_path(tmp_path, capsys):
    f = tmp_path / "my.toml"
    f.write_text(model_presets.load("tiny").text.replace('name = "tiny"', 'name = "mine"'))
    code, out, _ = run(capsys, "model", f, "--show", "--json")
    assert code == 0 and json.loads(out)["name"] == "mine" and json.loads(out)["hidden"] == 256


# ----------------------------------------------------------------------------------------- clean errors


@pytest.mark.parametrize(
    "argv,message",
    [
        (["model", "nope"], "error: unknown model 'nope' (known: tiny, smollm2-135m, llama-3.1-8b,"),
        (["model", "./missing.toml"], "error: model preset ./missing.toml: cannot read the file: No such file"),
        (["model"], "error: model: give a model NAME or a .toml path (plena-sim model --list shows the presets)"),
        (["model", "tiny", "--list"], "error: model: --list takes no NAME"),
        (["model", "tiny", "--seq", "0"], "error: model: seq=0 must be >= 1"),
        (["model", "tiny", "--batch", "0"], "error: model: batch=0 must be >= 1"),
        (["model", "tiny", "--layers", "0"], "error: model: layers=0 must be >= 1"),
        (["model", "tiny", "--kv", "-1"], "error: model: kv=-1 must be >= 0"),
        (["model", "tiny", "--seq", "x"], "error: plena-sim model: argument --seq: invalid int value: 'x'"),
        (["model", "tiny", "--hw", "nope"], "error: hw: unknown hardware preset 'nope'"),
        (["model", "tiny", "--timing", "fast"], "error: plena-sim model: argument --timing: invalid choice: 'fast'"),
    ],
)
def test_usage_errors_are_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert one_clean_line(err).startswith(message)


@pytest.mark.parametrize(
    "text,message",
    [
        ("layers = [", "not valid TOML: "),
        ("name = 'x'\nvocab = 3\n", "unknown key 'vocab'"),
        ("layers = 2\n", "missing key 'hidden'"),
    ],
)
def test_malformed_toml_is_one_line(tmp_path, capsys, text, message):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    for extra in ([], ["--show"], ["--json"]):
        code, out, err = run(capsys, "model", f, *extra)
        line = one_clean_line(err)
        # --json: stdout holds one JSON object even for an error (issue 19), the message of the red line
        assert code == 2 and out == (_json_error(line) if extra == ["--json"] else "")
        assert line.startswith(f"error: model preset {f}: ") and message in line


def test_bad_key_value_names_it(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text(model_presets.load("tiny").text.replace("kv_heads = 2", "kv_heads = 3"))
    code, _, err = run(capsys, "model", f, "--show")
    assert code == 2
    assert one_clean_line(err) == (
        f"error: model preset {f}: heads=4 must be a multiple of kv_heads=3 (grouped-query attention)"
    )


# ----------------------------------------------------------------------------------------- the figures


def test_layer_figures_arithmetic():
    fig = layer_figures(layers=30, batch=4, prefill_layer_cycles=1_234_567, decode_layer_cycles=8_901, clock_hz=4e8)
    assert fig == {
        "prefill_layer_s": 1_234_567 / 4e8,
        "decode_layer_s": 8_901 / 4e8,
        "ttft_s": 30 * 1_234_567 / 4e8,
        "decode_step_s": 30 * 8_901 / 4e8,
        "decode_tokens_per_s": 4 / (30 * 8_901 / 4e8),
    }
    assert fig["ttft_s"] == pytest.approx(0.09259252500) and fig["decode_tokens_per_s"] == pytest.approx(5991.836)
    fig = layer_figures(layers=2, batch=1, prefill_layer_cycles=1000, decode_layer_cycles=250, clock_hz=1e9)
    assert fig["ttft_s"] == 2e-6 and fig["decode_step_s"] == 5e-7 and fig["decode_tokens_per_s"] == 2e6
    assert layer_figures(2, 1, 1000, 0, 1e9)["decode_tokens_per_s"] is None


def test_clock_of_presets():
    assert clock_of("v80-256x64") == (4e8, "preset v80-256x64: clock_mhz = 400")
    assert clock_of("transactional") == (1e9, "timing.md's 1 ns cycles: preset transactional has no clock_mhz")


def test_merge_regions():
    pre = [
        {"path": "attention", "instructions": 10, "cycles_exclusive": 5, "cycles_inclusive": 50, "macs": 7},
        {"path": "attention/qk", "instructions": 4, "cycles_exclusive": 45, "cycles_inclusive": 45, "macs": 0},
        {"path": "(unlabelled)", "instructions": 1, "cycles_exclusive": 2, "cycles_inclusive": 2, "macs": 0},
    ]
    dec = [
        {"path": "(unlabelled)", "instructions": 3, "cycles_exclusive": 3, "cycles_inclusive": 3, "macs": 0},
        {"path": "kv_append", "instructions": 2, "cycles_exclusive": 9, "cycles_inclusive": 9, "macs": 1},
    ]
    rows = merge_regions(pre, dec)
    assert [r["path"] for r in rows] == ["attention", "attention/qk", "(unlabelled)", "kv_append"]
    assert rows[0] == {
        "path": "attention",
        "prefill": {"instructions": 10, "cycles_exclusive": 5, "cycles_inclusive": 50, "macs": 7},
        "decode": None,
    }
    assert rows[2]["prefill"]["cycles_exclusive"] == 2 and rows[2]["decode"]["cycles_exclusive"] == 3
    assert rows[3]["prefill"] is None and rows[3]["decode"]["macs"] == 1
    assert merge_regions([], []) == []


def test_render_model_region_table():
    from rich.console import Console

    from plena_cli.model_report import render_model

    runs = {
        phase: {"testbench": tb, "verdict": "PASS", "cycles": c, "instructions": 9, "wall_s": 0.5, "summary": ""}
        for phase, tb, c in (("prefill", "decoder_layer", 3_000_000), ("decode", "decoder_decode", 20_000))
    }
    doc = {
        "model": "tiny",
        "preset": model_presets.load("gpt-oss-20b").to_dict(),
        "verdict": "PASS",
        "hw": "v80-64x16",
        "timing": "overlap",
        "seq": 256,
        "batch": 1,
        "kv": 256,
        "layers": 24,
        "clock_hz": 4e8,
        "clock_source": "preset v80-64x16: clock_mhz = 400",
        "prefill_layer_cycles": 3_000_000,
        "decode_layer_cycles": 20_000,
        **layer_figures(24, 1, 3_000_000, 20_000, 4e8),
        "runs": runs,
        "regions": merge_regions(
            [{"path": "attention", "instructions": 1, "cycles_exclusive": 2_999_000, "cycles_inclusive": 2_999_000}],
            [{"path": "(unlabelled)", "instructions": 1, "cycles_exclusive": 20_000, "cycles_inclusive": 20_000}],
        ),
    }
    con = Console(width=100, record=True, highlight=False)
    render_model(con, doc)
    text = con.export_text()
    assert "tiny on v80-64x16 (overlap timing)" in text and "32 experts top-4" in text
    cells = {" ".join(line.strip("│ ").split()[:2]): line.strip("│ ").split()[2:] for line in text.splitlines()}
    assert cells["prefill layer"] == ["PASS", "3,000,000", "7.5", "ms", "9", "0.50", "s"]
    assert cells["decode step"] == ["PASS", "20,000", "50", "us", "9", "0.50", "s"]
    assert "TTFT 180 ms = 24 layers x 3,000,000 cycles (prefill of 256 tokens)" in text
    assert "decode 833 tokens/s = batch 1 per 1.2 ms step (24 layers x 20,000 cycles)" in text
    rows = {
        line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip().startswith(("attention", "("))
    }
    assert rows == {"attention": ["2,999,000", "2,999,000", "-", "-"], "(unlabelled)": ["-", "-", "20,000", "20,000"]}


# ----------------------------------------------------------------------------------------- plumbing (stand-ins)

DECODER_DEFAULTS = {
    "batch": 1,
    "hidden": 256,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 64,
    "ffn": 512,
    "rope_theta": 10000.0,
    "rms_eps": 1e-5,
    "seed": 0,
}


def _stand_in(name: str, length_key: str, spoil=None) -> types.ModuleType:
    """A testbench taking the decoder parameters whose case is an rms_norm over batch x length rows (the
    harness runs and judges it for real); ``spoil(case)`` may break it."""
    from testbenches import rms_norm

    mod = types.ModuleType(f"testbenches._stand_in_{name}")
    mod.NAME = name
    mod.DEFAULTS = {length_key: 1, **DECODER_DEFAULTS}
    mod.REQUIRED_CASES = []

    def build(params, cfg):
        rows = params["batch"] * (params["seq"] if length_key == "seq" else 1)
        case = rms_norm.build(
            {"rows": rows, "hidden": params["hidden"], "eps": params["rms_eps"], "seed": params["seed"]}, cfg
        )
        case.testbench = name
        if spoil is not None:
            spoil(case)
        return case

    mod.build = build
    return mod


@pytest.fixture
def stand_ins(monkeypatch):
    """Install stand-in decoder_layer / decoder_decode testbenches; returns a function to spoil one."""

    def install(prefill_spoil=None, decode_spoil=None):
        for name, key, spoil in (("decoder_layer", "seq", prefill_spoil), ("decoder_decode", "kv", decode_spoil)):
            mod = _stand_in(name, key, spoil)
            monkeypatch.setitem(sys.modules, mod.__name__, mod)
            monkeypatch.setitem(testbenches.TESTBENCHES, name, mod.__name__.rsplit(".", 1)[1])

    install()
    return install


def test_plumbing_json_contract(stand_ins, capsys):
    code, out, err = run(capsys, "model", "tiny", "--seq", "8", "--batch", "2", "--kv", "5", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) >= RUN_FIELDS
    assert doc["verdict"] == "PASS" and doc["model"] == "tiny" and doc["hw"] == "transactional"
    assert (doc["timing"], doc["seq"], doc["batch"], doc["kv"], doc["layers"]) == ("serial", 8, 2, 5, 2)
    assert doc["clock_hz"] == 1e9 and "has no clock_mhz" in doc["clock_source"]
    pre, dec = doc["runs"]["prefill"], doc["runs"]["decode"]
    assert set(pre) == set(dec) == RUN_SUMMARY_FIELDS
    assert pre["testbench"] == "decoder_layer" and dec["testbench"] == "decoder_decode"
    assert pre["params"] == {
        "batch": 2,
        "seq": 8,
        **{k: v for k, v in DECODER_DEFAULTS.items() if k not in ("batch", "seed")},
    }
    assert dec["params"]["kv"] == 5 and "seq" not in dec["params"] and "seed" not in dec["params"]
    assert pre["verdict"] == dec["verdict"] == "PASS" and pre["error"] is None and pre["fault"] is None
    assert doc["prefill_layer_cycles"] == pre["cycles"] > dec["cycles"] == doc["decode_layer_cycles"] > 0
    assert doc["ttft_s"] == 2 * doc["prefill_layer_cycles"] / 1e9
    assert doc["decode_tokens_per_s"] == 2 / (2 * doc["decode_layer_cycles"] / 1e9)
    assert doc["preset"] == model_presets.load("tiny").to_dict()


def test_plumbing_hw_clock_layers_seed(stand_ins, capsys):
    code, out, err = run(
        capsys, "model", "tiny", "--seq", "4", "--hw", "v80-64x16", "--layers", "7", "--seed", "3", "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["hw"] == "v80-64x16" and doc["clock_hz"] == 4e8 and doc["layers"] == 7
    assert doc["ttft_s"] == 7 * doc["prefill_layer_cycles"] / 4e8
    assert doc["decode_tokens_per_s"] == 1 / (7 * doc["decode_layer_cycles"] / 4e8)
    assert doc["runs"]["prefill"]["params"]["seed"] == 3 and doc["runs"]["decode"]["params"]["seed"] == 3


def test_plumbing_rich_output(stand_ins, capsys):
    code, out, err = run(capsys, "model", "tiny", "--seq", "4")
    assert code == 0, err
    assert "PASS" in out and "tiny on transactional (serial timing)" in out
    assert "prefill layer   PASS" in out and "decode step     PASS" in out
    assert "TTFT " in out and "= 2 layers x " in out and "tokens/s = batch 1 per" in out
    assert "clock 1 GHz (timing.md's 1 ns cycles: preset transactional has no clock_mhz)" in out


def test_plumbing_refusal_names_the_parameter(stand_ins, tmp_path, capsys):
    f = tmp_path / "odd.toml"
    f.write_text(model_presets.load("tiny").text.replace("hidden = 256", "hidden = 96"))
    code, out, err = run(capsys, "model", f, "--seq", "4", "--json")
    assert code == 2 and out == _json_error(one_clean_line(err))
    assert one_clean_line(err) == (
        "error: tiny on transactional: decoder_layer refuses the shape: "
        "rms_norm: hidden=96 must be a multiple of VLEN=64"
    )


def test_plumbing_mismatch_is_fail(stand_ins, capsys):
    def spoil(case):
        case.checks[0].golden = np.asarray(case.checks[0].golden) + 1.0

    stand_ins(decode_spoil=spoil)
    code, out, err = run(capsys, "model", "tiny", "--seq", "4", "--json")
    doc = json.loads(out)
    assert code == 1, err
    assert doc["verdict"] == "FAIL" and doc["runs"]["prefill"]["verdict"] == "PASS"
    assert doc["runs"]["decode"]["verdict"] == "FAIL" and "decoder_decode[custom]: " in doc["runs"]["decode"]["summary"]
    code, out, _ = run(capsys, "model", "tiny", "--seq", "4")
    assert code == 1 and "FAIL" in out and "decoder_decode[custom]: " in out


def test_plumbing_fault_is_fail_with_exit_3(stand_ins, capsys):
    def spoil(case):
        case.max_instructions = 3

    stand_ins(prefill_spoil=spoil)
    code, out, err = run(capsys, "model", "tiny", "--seq", "4", "--json")
    doc = json.loads(out)
    assert code == 3 and doc["verdict"] == "FAIL"
    assert doc["runs"]["prefill"]["fault"]["kind"] == "InstructionBudgetExceeded"
    code, out, err = run(capsys, "model", "tiny", "--seq", "4")
    assert code == 3 and err.startswith("fault: ") and "work budget exhausted" in err


def test_plumbing_moe_needs_a_testbench_that_takes_experts(stand_ins, capsys):
    """A testbench without ``experts`` (a stand-in here) refuses a MoE preset (the real ones take it:
    test_tiny_moe_model_runs_the_routed_experts)."""
    code, out, err = run(capsys, "model", "gpt-oss-20b", "--json")
    assert code == 2 and out == _json_error(one_clean_line(err))
    line = one_clean_line(err)
    assert line.startswith(
        "error: gpt-oss-20b: testbench decoder_layer has no parameter 'experts' (a mixture-of-experts layer); it takes"
    )


def test_missing_testbench_is_refused_before_compiling(monkeypatch, capsys):
    monkeypatch.delitem(testbenches.TESTBENCHES, "decoder_layer", raising=False)
    code, out, err = run(capsys, "model", "tiny")
    assert code == 2 and out == ""
    assert one_clean_line(err) == (
        "error: model: the decoder_layer testbench is not available (plena-sim list shows the testbenches)"
    )


# ----------------------------------------------------------------------------------------- the real layers


def test_tiny_model_runs(capsys):
    code, out, err = run(capsys, "model", "tiny", "--seq", "128", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "PASS" and doc["layers"] == 2 and doc["clock_hz"] == 1e9
    pre, dec = doc["runs"]["prefill"], doc["runs"]["decode"]
    assert pre["verdict"] == dec["verdict"] == "PASS"
    assert pre["params"]["seq"] == 128 and dec["params"]["kv"] == 128
    assert doc["prefill_layer_cycles"] == pre["cycles"] > doc["decode_layer_cycles"] == dec["cycles"] > 0
    assert doc["ttft_s"] == doc["layers"] * doc["prefill_layer_cycles"] / doc["clock_hz"]
    assert doc["decode_tokens_per_s"] == 1 / (doc["layers"] * doc["decode_layer_cycles"] / doc["clock_hz"])
    paths = [r["path"] for r in doc["regions"]]
    assert "(unlabelled)" in paths and len(paths) > 1
    for phase in ("prefill", "decode"):
        rows = [r[phase] for r in doc["regions"] if r[phase] is not None]
        assert sum(r["cycles_exclusive"] for r in rows) == doc[f"{phase}_layer_cycles"]
        assert sum(r["instructions"] for r in rows) == doc["runs"][phase]["instructions"]


def test_tiny_moe_model_runs_the_routed_experts(capsys):
    """A MoE preset runs both layers with its routed-MoE FFN stage: verdicts and the exact TTFT arithmetic."""
    code, out, err = run(capsys, "model", "tiny-moe", "--seq", "16", "--kv", "40", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "PASS" and doc["layers"] == 2 and doc["clock_hz"] == 1e9
    pre, dec = doc["runs"]["prefill"], doc["runs"]["decode"]
    assert pre["verdict"] == dec["verdict"] == "PASS" and pre["error"] is None and dec["fault"] is None
    for r in (pre, dec):
        assert (r["params"]["experts"], r["params"]["top_k"], r["params"]["ffn"]) == (32, 4, 256)
    assert pre["params"]["seq"] == 16 and dec["params"]["kv"] == 40
    assert doc["prefill_layer_cycles"] == pre["cycles"] > doc["decode_layer_cycles"] == dec["cycles"] > 0
    assert doc["ttft_s"] == 2 * pre["cycles"] / 1e9 and doc["prefill_layer_s"] == pre["cycles"] / 1e9
    assert doc["decode_step_s"] == 2 * dec["cycles"] / 1e9
    assert doc["decode_tokens_per_s"] == 1 / (2 * dec["cycles"] / 1e9)
    code, out, err = run(capsys, "model", "tiny-moe", "--seq", "16", "--kv", "40")
    assert code == 0 and "32 experts top-4" in out and "TTFT " in out


@pytest.mark.parametrize("hw", ["small", "v80-64x16", "v80-128x64", "v80-256x64"])
def test_tiny_moe_fits_every_preset_but_analytic(hw, capsys):
    code, out, err = run(capsys, "model", "tiny-moe", "--hw", hw, "--seq", "5", "--kv", "9", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "PASS" and doc["ttft_s"] == 2 * doc["prefill_layer_cycles"] / doc["clock_hz"]


def test_moe_expert_pair_outside_the_policies_is_refused(tmp_path, capsys):
    f = tmp_path / "moe16.toml"
    f.write_text(model_presets.load("tiny-moe").text.replace("experts = 32", "experts = 16"))
    code, out, err = run(capsys, "model", f, "--seq", "4")
    assert code == 2 and out == ""
    assert one_clean_line(err) == (
        "error: tiny-moe on transactional: decoder_layer refuses the shape: decoder_layer: experts/top_k=16/4 "
        "must be a V_TOPK policy: (experts, top_k) one of [(32, 4), (128, 8)] (or both 0: a dense FFN)"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name,layers", [("gpt-oss-20b", 24), ("qwen3-30b-a3b", 48)])
def test_moe_presets_run_on_the_default_preset(name, layers, capsys):
    """``plena-sim model gpt-oss-20b --seq 64`` / ``qwen3-30b-a3b --seq 64`` pass on transactional (minutes:
    every (token, rank) is a one-row expert SwiGLU of the real widths)."""
    code, out, err = run(capsys, "model", name, "--seq", "64", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "PASS" and doc["layers"] == layers and doc["hw"] == "transactional"
    assert doc["ttft_s"] == layers * doc["prefill_layer_cycles"] / 1e9
    assert doc["decode_tokens_per_s"] == 1 / (layers * doc["decode_layer_cycles"] / 1e9)


@pytest.mark.parametrize("hw", ["transactional", "small", "v80-64x16", "v80-128x64", "v80-256x64"])
def test_tiny_model_fits_every_preset_but_analytic(hw, capsys):
    code, out, err = run(capsys, "model", "tiny", "--hw", hw, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "PASS" and doc["hw"] == hw
    assert doc["clock_hz"] == (4e8 if hw.startswith("v80") else 1e9)
    assert doc["ttft_s"] == 2 * doc["prefill_layer_cycles"] / doc["clock_hz"]


def test_tiny_model_is_refused_on_analytic(capsys):
    code, out, err = run(capsys, "model", "tiny", "--hw", "analytic")
    assert code == 2 and out == ""
    assert "tiny on analytic: decoder_layer refuses the shape: " in one_clean_line(err)


def test_smollm2_is_refused_where_hidden_is_not_a_multiple_of_mlen(capsys):
    code, out, err = run(capsys, "model", "smollm2-135m", "--hw", "v80-256x64", "--seq", "256")
    assert code == 2 and out == ""
    line = one_clean_line(err)
    assert "smollm2-135m on v80-256x64: decoder_layer refuses the shape: " in line and "576" in line and "256" in line


def test_tiny_model_rich_output(capsys):
    code, out, err = run(capsys, "model", "tiny", "--seq", "128")
    assert code == 0, err
    assert "PASS" in out and "TTFT" in out and "tokens/s" in out and "(unlabelled)" in out


@pytest.mark.slow
def test_smollm2_acceptance(capsys):
    """The issue's acceptance: ``plena-sim model smollm2-135m --seq 256`` passes (under a minute on 2 cores)."""
    import time

    t0 = time.perf_counter()
    code, out, err = run(capsys, "model", "smollm2-135m", "--seq", "256", "--json")
    wall = time.perf_counter() - t0
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "PASS" and doc["layers"] == 30
    assert doc["ttft_s"] == 30 * doc["prefill_layer_cycles"] / 1e9
    assert doc["decode_tokens_per_s"] == 1 / (30 * doc["decode_layer_cycles"] / 1e9)
    assert wall < 60
