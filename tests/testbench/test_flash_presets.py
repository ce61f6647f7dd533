"""Every flash-attention required case on the V80 tile configurations and ``small``, and the paper-scale
cases on ``analytic`` (issue: generators fit any legal config). ``--hw`` replaces a case's own machine."""

from __future__ import annotations

import pytest

import testbenches
from programs import flash as fa
from testbenches.harness import run_case
from testbenches.variants import get_config
from tests.testbench.catalogue_util import COVERAGE_CASES

FLASH = ("flashattn_prefill", "flashattn_decode", "flashattn_qkt")
#: the §4.5 cases (issue 21's coverage cases run on every preset in tests/testbench/test_coverage_cases.py)
CASES = [
    (tb, cid)
    for tb in FLASH
    for cid, _ov, _var in testbenches.get(tb).REQUIRED_CASES + testbenches.get(tb).STRETCH_CASES
    if (tb, cid) not in COVERAGE_CASES
]
CI_PRESETS = ("v80-128x64", "v80-256x64")
SLOW_PRESETS = ("v80-64x16", "small")


@pytest.mark.parametrize("preset", CI_PRESETS)
@pytest.mark.parametrize("tb, cid", CASES)
def test_flash_case_on_preset(tb, cid, preset):
    rep = run_case(tb, cid, hw=preset)
    assert rep.passed, rep.summary


@pytest.mark.slow
@pytest.mark.parametrize("preset", SLOW_PRESETS)
@pytest.mark.parametrize("tb, cid", CASES)
def test_flash_case_on_preset_slow(tb, cid, preset):
    rep = run_case(tb, cid, hw=preset)
    assert rep.passed, rep.summary


@pytest.mark.parametrize(
    "preset, path, nh, qrows",
    [
        ("transactional", "batched", 4, 64),  # 3*64*4 = 768 words: the reference layout
        ("v80-128x64", "batched", 4, 64),  # 3*128*4 > 1008: q tiles of 64 rows (one BLEN block)
        ("v80-256x64", "batched", 4, 64),
        ("analytic", "per_head", 1, 256),  # batched would need 80-row groups: 26 M_BTMMs per tile
    ],
)
def test_state_fits_fp_sram_at_every_preset(preset, path, nh, qrows):
    cfg = get_config("default", hw=preset)
    d = cfg.HLEN
    plan = fa.plan_flash_attention(
        cfg,
        batch=1,
        hq=16 if preset == "analytic" else 4,
        hkv=4 if preset == "analytic" else 1,
        d=d,
        q_len=2 * cfg.MLEN,
        kv_len=2 * cfg.MLEN,
        causal=True,
        o_base=0,
        scratch_base=(2 * cfg.MLEN + 8) * cfg.VLEN,
        dry_run=False,
    )
    assert (plan.path, plan.nh, plan.qrows) == (path, nh, qrows)
    assert plan.fp_state_base + plan.fp_state_size <= cfg.FP_SRAM_SIZE == 1024


@pytest.mark.slow
@pytest.mark.parametrize("tb", ["flashattn_prefill", "flashattn_decode"])
def test_paper_case_on_analytic(tb):
    rep = run_case(tb, "paper")
    assert rep.passed, rep.summary
    assert rep.variant == "analytic"
