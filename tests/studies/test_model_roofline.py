"""The roofline beside a model run (issue 38 item 4): the compute and HBM bounds of a run and of each stage."""

from __future__ import annotations

import pytest

from studies.model.figures import roofline, run_roofline


def test_bounds_binding_and_attained_fraction():
    # 1,000,000 MACs on a 100-MAC array: 10,000 cycles; 64,000 bytes at 32 B/cycle: 2,000 cycles; 20,000 simulated
    r = roofline(1_000_000, 64_000, 20_000, 100, 32.0, 1e9)
    assert r == {
        "compute_bound_s": pytest.approx(1e-5),
        "memory_bound_s": pytest.approx(2e-6),
        "simulated_s": pytest.approx(2e-5),
        "binding": "compute",
        "attained_fraction": pytest.approx(0.5),
    }
    m = roofline(10, 64_000, 4_000, 100, 32.0, 4e8)  # memory bound 2,000 cycles of 2.5 ns
    assert m["binding"] == "memory" and m["memory_bound_s"] == pytest.approx(5e-6)
    assert m["attained_fraction"] == pytest.approx(0.5)
    assert roofline(0, 0, 0, 100, 32.0, 1e9)["attained_fraction"] is None


def test_a_runs_roofline_and_its_top_level_stages():
    stats = {
        "config": {"MLEN": 16, "BLEN": 4},
        "hbm": {"peak_bandwidth_GBps": 8.0, "bytes_read": 640, "bytes_written": 160},
        "matrix_macs": 6_400,
        "cycles": 400,
        "regions": [
            {"path": "layer/ffn", "macs": 6_400, "hbm_read_bytes": 0, "hbm_write_bytes": 0, "cycles_inclusive": 200},
            {"path": "layer/ffn/inner", "macs": 64, "hbm_read_bytes": 8, "hbm_write_bytes": 0, "cycles_inclusive": 9},
            {"path": "layer/load_x", "macs": 0, "hbm_read_bytes": 640, "hbm_write_bytes": 0, "cycles_inclusive": 160},
        ],
    }
    r = run_roofline(stats, 1e9)
    assert (r["binding"], r["attained_fraction"]) == ("compute", pytest.approx(100 / 400))  # 6400/64 vs 800/8
    assert set(r["stages"]) == {"ffn", "load_x"}  # nested regions are not stages, but count in their stage
    assert r["stages"]["ffn"]["attained_fraction"] == pytest.approx((6_464 / 64) / 200)
    assert r["stages"]["ffn"]["memory_bound_s"] == pytest.approx(1e-9)
    assert r["stages"]["load_x"]["binding"] == "memory" and r["stages"]["load_x"]["attained_fraction"] == 0.5


def test_model_json_has_roofline_unvalidated_share_and_decode_path():
    from studies.model import run_model

    doc = run_model("tiny", timing="rtl", seq=64, timing_only=True)
    for phase in ("prefill", "decode"):
        r = doc["roofline"][phase]
        assert r["simulated_s"] == pytest.approx(doc[f"{phase}_layer_s"])
        assert 0 < r["attained_fraction"] <= 1 and "attention" in r["stages"]
        assert 0 < doc["unvalidated_share"][phase] < 1
    assert doc["decode_path"] == "gemm" and doc["timing_only"] is True


def test_prefill_only_and_decode_only_leave_the_other_side_null():
    from studies.model import run_model

    doc = run_model("tiny", seq=64, timing_only=True, phases=("decode",))
    assert list(doc["runs"]) == ["decode"] and doc["phases"] == ["decode"]
    assert doc["prefill_layer_cycles"] is None and doc["ttft_s"] is None and doc["roofline"]["prefill"] is None
    assert doc["decode_layer_cycles"] > 0 and doc["decode_tokens_per_s"] > 0
    pre = run_model("tiny", seq=64, timing_only=True, phases=("prefill",))
    assert pre["decode_layer_cycles"] is None and pre["decode_tokens_per_s"] is None and pre["ttft_s"] > 0
    both = run_model("tiny", seq=64, timing_only=True)
    assert (both["prefill_layer_cycles"], both["decode_layer_cycles"]) == (
        pre["prefill_layer_cycles"],
        doc["decode_layer_cycles"],
    )


def test_limits_refuse_a_functional_run_beyond_the_machine_with_the_estimate():
    from studies.errors import ModelError
    from studies.model import prepare
    from studies.model.limits import check_limits, functional_estimate

    big = prepare("llama-3.1-8b", hw="v80-128x64", seq=32768, timing="rtl")
    est = functional_estimate(big)
    assert est.elements == 889_217_024  # the prefill layer's HBM tensors (the larger phase)
    with pytest.raises(ModelError) as info:
        check_limits(big, memory=16 << 30)
    text = str(info.value)
    assert "GiB of host memory (this machine has 16.0)" in text and "h of host time" in text
    assert "--timing-only" in text and "--seq" in text and "--force" in text
    assert check_limits(prepare("llama-3.1-8b", hw="v80-128x64", seq=32768, timing_only=True)) is None
    small = check_limits(prepare("tiny", seq=64), memory=16 << 30)
    assert small is not None and small.host_s < 60 and small.peak_bytes < 2 << 30


@pytest.mark.parametrize("path", ["gemm", "gemv"])
def test_the_reported_linear_path_is_the_plans(path):
    from testbenches.harness import run_case

    rep = run_case("decoder_decode", overrides={"linear_path": path}, functional=False)
    assert rep.passed and rep.plan_facts == {"linear_path": path}
