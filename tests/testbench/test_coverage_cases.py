"""Issue 21's coverage cases: each passes on the unmutated kernels at every hardware preset but ``analytic``.

The cases close the holes held-out codegen bugs slipped through: K/V caches with ``kv_capacity > kv_len`` and
batch 2 (bshd and sbhd; padded ``Wp`` with batch 2), BMM_SCALE != 1 on the per-head path, hkv 4 and 8 with
``hq/hkv > 2``, ``q_len % BLEN != 0`` on both paths, input scales 1e-4 .. 64 (flash attention: 1e-4 .. 2, the
``flash_l`` row is calibrated up to 2), VRAM bases past 2^18 with bit 11 set in every generator that takes
addresses, MoE ``T % 4 != 0`` for every policy, and rope with eight heads per rotation tile.

They are required cases, so the catalogue tests run them on the reference machine in CI; to keep the catalogue's
CI time, the preset tests leave them out and ``-m slow`` runs them here on every other preset (CI checks the
table itself). ``analytic`` (MLEN 2048) is the paper-scale machine, for the ``PAPER_CASES`` only.
"""

from __future__ import annotations

import pytest

import testbenches
from plena_sim.config.presets import preset_names
from testbenches.harness import run_case
from tests.testbench.catalogue_util import COVERAGE_CASES as CASES

SLOW_PRESETS = ("small", "v80-64x16", "v80-128x64", "v80-256x64")


def test_coverage_cases_are_required_cases():
    for tb, cid in CASES:
        assert cid in [c for c, _, _ in testbenches.get(tb).REQUIRED_CASES], f"{tb}[{cid}]"


def test_every_preset_is_covered():
    """The reference machine (transactional): the catalogue tests; every other preset but analytic: below."""
    assert set(preset_names()) == {"transactional", "analytic", *SLOW_PRESETS}


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
