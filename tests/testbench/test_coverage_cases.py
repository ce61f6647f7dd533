"""Issue 21's coverage cases: each passes on the unmutated kernels at every hardware preset but ``analytic``.

The cases close the holes held-out codegen bugs slipped through: K/V caches with ``kv_capacity > kv_len`` and
batch 2 (bshd and sbhd; padded ``Wp`` with batch 2), BMM_SCALE != 1 on the per-head path, hkv 4 and 8 with
``hq/hkv > 2``, ``q_len % BLEN != 0`` on both paths, input scales 1e-4 .. 64 (flash attention: 1e-4 .. 2, the
``flash_l`` row is calibrated up to 2), VRAM bases past 2^18 with bit 11 set in every generator that takes
addresses, MoE ``T % 4 != 0`` for every policy, and rope with eight heads per rotation tile.

They are required cases, so the catalogue tests run them on the reference machine and the preset tests on
``v80-128x64``/``v80-256x64`` (CI); here ``-m slow`` runs them on ``small`` and ``v80-64x16``, and CI checks the
table itself. ``analytic`` (MLEN 2048) is the paper-scale machine, for the ``PAPER_CASES`` only.
"""

from __future__ import annotations

import pytest

import testbenches
from plena_sim.presets import preset_names
from testbenches.harness import run_case

#: testbench -> the issue 21 case ids (all REQUIRED_CASES)
COVERAGE = {
    "flashattn_prefill": "P12 P13 P14 P15 P16 P17 P18 P19 P20",
    "flashattn_decode": "D8 D9 D10 D11 D12 D13 D14 D15 D16",
    "flashattn_qkt": "capacity_b2 emu025_per_head hkv4_big_base",
    "rms_norm": "scale_1e-4 scale_64 big_base",
    "layer_norm": "scale_1e-4 scale_64 big_base",
    "gelu": "scale_1e-4 scale_64 big_base",
    "silu": "scale_1e-4 scale_64 big_base",
    "softmax": "L100_scale_1e-4 L100_scale_64 big_base",
    "rope": "d8_nh8 big_base",
    "embedding": "big_base",
    "elementwise_add": "big_base",
    "h_store": "big_base",
    "bmm": "big_base",
    "ffn": "big_base",
    "ffn_intermediate": "big_base",
    "linear": "big_base",
    "linear_loop": "big_base",
    "moe_topk": "A_policy0_T7 A_policy1_T7 B_policy0_T5 B_policy1_T7_big_base",
    "moe_layer": "policy0_T7_i64 policy1_T5_big_base",
}
CASES = [(tb, cid) for tb, ids in COVERAGE.items() for cid in ids.split()]
SLOW_PRESETS = ("small", "v80-64x16")


def test_coverage_cases_are_required_cases():
    for tb, cid in CASES:
        assert cid in [c for c, _, _ in testbenches.get(tb).REQUIRED_CASES], f"{tb}[{cid}]"


def test_every_preset_is_covered():
    """Reference machine: the catalogue tests; v80-128x64 / v80-256x64: the preset tests; the rest: below."""
    assert set(preset_names()) == {"transactional", "v80-128x64", "v80-256x64", "analytic", *SLOW_PRESETS}


def test_scale_axis_in_ranges():
    for tb in ("rms_norm", "layer_norm", "gelu", "silu", "softmax"):
        scales = testbenches.get(tb).RANGES["scale"]
        assert min(scales) == 1e-4 and max(scales) == 64.0, tb
    for tb in ("flashattn_prefill", "flashattn_decode"):
        assert min(testbenches.get(tb).RANGES["scale"]) == 1e-4, tb


@pytest.mark.slow
@pytest.mark.parametrize("preset", SLOW_PRESETS)
@pytest.mark.parametrize("tb,cid", CASES, ids=[f"{t}[{c}]" for t, c in CASES])
def test_coverage_case_on_preset(tb, cid, preset):
    rep = run_case(tb, cid, hw=preset)
    assert rep.passed, rep.summary
