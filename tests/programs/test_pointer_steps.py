"""Pointer steps past the 18-bit S_ADDI_INT immediate (kernels.md §1.3) on large machines and pitches.

A loop-carried pointer step of 2^18 or more (``pitch*VLEN`` of a norm or embedding block, ``BLEN*VLEN`` of
the linear and rope matmul loops on the 2048/2048/128 machine) is held in one extra register and added with
``S_ADD_INT``; below 2^18 the text is unchanged (one ``S_ADDI_INT``). Each case runs end to end.
"""

from __future__ import annotations

import re

import pytest

import testbenches
from testbenches.harness import run
from testbenches.shapes import resolve_params
from testbenches.variants import get_config

CASES = [
    # (testbench, overrides, preset): the step past 2^18
    ("layer_norm", {"rows": 4100, "hidden": 128}, "transactional"),  # pitch*V = 4100*64, with beta
    ("rms_norm", {"rows": 4100, "hidden": 128, "inplace": True}, "transactional"),
    ("layer_norm", {"rows": 1030, "hidden": 512, "inplace": True}, "v80-256x64"),
    ("embedding", {"T": 1008}, "v80-256x64"),  # pitch 1024 * V 256 = 2^18
    ("linear_loop", {"rows": 1, "K": 2048, "N": 2048}, "analytic"),  # B*V = 128*2048 = 2^18
    ("rope", {"seq": 1, "d": 2048, "inplace": True}, "analytic"),
]


@pytest.mark.parametrize("tb,ov,preset", CASES, ids=[f"{c[0]}@{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_large_step_runs(tb, ov, preset):
    cfg = get_config("default", hw=preset)
    mod = testbenches.get(tb)
    case = mod.build(resolve_params(dict(mod.DEFAULTS, **ov), cfg), cfg)
    assert re.search(r"^S_ADD_INT (gp\d+), \1, gp\d+$", case.program, re.M), "the step is added from a register"
    rep = run(case)
    assert rep.passed, rep.summary
