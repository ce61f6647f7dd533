"""The GEMV form of ``linear`` (M_MV per row + M_MV_WO, issue 38 item 1): path choice, bit-identity with GEMM,
cycles, and the decoder decode step with either form."""

from __future__ import annotations

import numpy as np
import pytest

import testbenches
from plena_sim.config.presets import load_preset
from programs.linear import choose_path
from testbenches.harness import prepare_machine, run
from testbenches.shapes import hw, resolve_params
from testbenches.variants import get_config


def _build(tb: str, preset: str, **over):
    mod = testbenches.get(tb)
    cfg = get_config("default", hw=preset)
    return mod.build(resolve_params(dict(mod.DEFAULTS, **over), cfg), cfg)


def _outputs(case) -> list[np.ndarray]:
    m = prepare_machine(case)
    m.run(case.assembled())
    return [np.asarray(c.read.read(m)) for c in case.checks]


def _program_ops(case) -> set[str]:
    return {line.split()[0] for line in str(case.program).splitlines() if line.strip().startswith("M_")}


def test_auto_path_follows_the_matrix_cost_of_both_timing_models():
    ref, v80 = load_preset("transactional"), load_preset("v80-128x64")
    # reference: M_MM costs M_MV's 64 serial cycles and 8 rtl cycles (vs 68): GEMM always
    assert choose_path("linear", ref, 1, "auto", 1) == "gemm"
    # v80-128x64: rtl M_MM 68 + M_MM_WO 141 vs M_MV 132 + M_MV_WO 4, serial a tie: GEMV up to 2 K tiles
    assert [choose_path("linear", v80, 1, "auto", nk) for nk in (1, 2, 3, 32)] == ["gemv", "gemv", "gemm", "gemm"]
    assert choose_path("linear", v80, 3, "auto", 1) == "gemm"
    assert choose_path("linear", v80, 64, "gemv", 1) == "gemv"  # forced
    with pytest.raises(ValueError, match="path"):
        choose_path("linear", v80, 1, "gemx", 1)


@pytest.mark.parametrize(
    "over",
    [
        {"rows": 1, "K": hw(8, "MLEN"), "N": hw(2, "MLEN")},
        {"rows": 3, "K": hw(4, "MLEN"), "N": hw(2, "MLEN"), "max_k_tiles": 1, "bias": True},
        {"rows": 3, "K": hw(2, "MLEN"), "N": hw(1, "MLEN"), "loops": False},
    ],
)
def test_gemv_and_gemm_linear_outputs_are_bit_identical(over):
    """Per element both forms compute the same float64 dot product per K tile, round it to f32 and add it to an f32
    accumulator in ascending K tiles, then round to bf16 once (isa.md §5): identical bits."""
    outs = []
    for path in ("gemv", "gemm"):
        case = _build("linear", "transactional", path=path, **over)
        rep = run(case)
        assert rep.passed, rep.summary
        assert ("M_MV" in _program_ops(case)) == (path == "gemv")
        outs.append(_outputs(case))
    assert all(np.array_equal(a, b) for a, b in zip(*outs, strict=True))


def test_decode_linear_cycles_on_v80():
    """Measured (serial, rtl) cycles of one rows=1 linear on v80-128x64 (timing only): serial equal (M_MM and
    M_MV both MLEN cycles), rtl GEMV slower at K=1024 (8 K tiles: 8*132+4 vs 8*68+141 per column block)."""
    got = {}
    for path in ("gemm", "gemv"):
        for timing in ("serial", "rtl"):
            rep = testbenches.harness.run_case(
                "linear",
                overrides={"rows": 1, "K": 1024, "N": 256, "path": path},
                hw="v80-128x64",
                timing=timing,
                functional=False,
            )
            got[path, timing] = rep.cycles
    assert got == {("gemm", "serial"): 6907, ("gemv", "serial"): 6907, ("gemm", "rtl"): 5069, ("gemv", "rtl"): 6707}


def test_decoder_decode_same_outputs_with_gemv_and_gemm_linears():
    """tiny dims, batch 1, reference machine: the same output bits; serial cycles equal (64867: M_MM and M_MV cost
    MLEN each, M_MM_WO and M_MV_WO 1), rtl GEMV slower (the rtl M_MM is BLEN + 4 = 8 cycles, M_MV MLEN + 4 = 68)."""
    outs, cycles = [], {}
    for path in ("gemv", "gemm"):
        case = _build("decoder_decode", "transactional", batch=1, linear_path=path)
        rep = run(case)
        assert rep.passed, rep.summary
        cycles[path, "serial"] = rep.cycles
        outs.append(_outputs(case))  # every judged value (the real rows; GEMV leaves the padding rows alone)
        rtl = testbenches.harness.run_case(
            "decoder_decode", overrides={"batch": 1, "linear_path": path}, timing="rtl", functional=False
        )
        cycles[path, "rtl"] = rtl.cycles
    assert len(outs[0]) > 1 and all(np.array_equal(a, b) for a, b in zip(*outs, strict=True))
    assert cycles == {
        ("gemv", "serial"): 64867,
        ("gemm", "serial"): 64867,
        ("gemv", "rtl"): 68481,
        ("gemm", "rtl"): 38338,
    }
