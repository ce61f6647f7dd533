"""Every REQUIRED_CASE of the §4.4 testbenches (other than flash attention) on the large v80 presets.

The shapes of the defaults and of the required cases are written in units of the machine
(testbenches/shapes.py), so each case scales with the preset it runs on; a case variant that fixes its own
machine (``small``) is replaced by the preset (``run_case(..., hw=P)``). Every case must PASS the harness's
full comparison. A case that cannot fit a preset would be listed in ``CANNOT_FIT`` with the parameter and
the largest value that fits, and its plan error must name both (it is never skipped); no required case
needs that today. Shapes that truly cannot fit (``TOO_BIG``) check the same plan-error rule directly.
"""

from __future__ import annotations

import re

import pytest

import testbenches
from testbenches.harness import run_case
from tests.testbench.catalogue_util import COVERAGE_CASES, OTHER_TESTBENCHES

PRESETS = ("v80-128x64", "v80-256x64")

#: (testbench, case id, preset) -> (parameter, largest value that fits) for a required case that cannot fit
CANNOT_FIT: dict[tuple[str, str, str], tuple[str, int]] = {}

#: shapes past a preset's capacity: (testbench, overrides, preset, parameter, largest value that fits)
TOO_BIG = [
    ("embedding", {"T": 1009}, "v80-256x64", "T", 1008),  # ids in INT SRAM [16, 16+T)
    ("s_map_v", {"rows": 769}, "v80-256x64", "rows", 768),  # whole V-word groups in FP SRAM
    ("linear", {"max_k_tiles": 37}, "v80-256x64", "max_k_tiles", 36),  # 36 MRAM tiles of 256x256
    ("moe_topk", {"T": 127, "policy": 1}, "v80-128x64", "T", 126),  # T*k weights in FP SRAM [16, 1024)
]


def _cases():
    out = []
    for tb in OTHER_TESTBENCHES:
        for cid, _ov, _var in testbenches.get(tb).REQUIRED_CASES:
            if (tb, cid) in COVERAGE_CASES:
                continue  # issue 21's coverage cases: every preset in test_coverage_cases.py (-m slow)
            for preset in PRESETS:
                out.append(pytest.param(tb, cid, preset, id=f"{tb}[{cid}]@{preset}"))
    return out


def assert_names_largest(rep, param: str, most: int) -> None:
    """The run failed with a plan error naming ``param`` and the largest value that fits."""
    assert not rep.passed and rep.error and rep.error.startswith("plan: "), rep.summary
    assert re.search(rf"\b{re.escape(param)}\b.*(<=|at most) {most}\b", rep.error), rep.error


@pytest.mark.parametrize("tb,cid,preset", _cases())
def test_required_case_on_preset(tb, cid, preset):
    rep = run_case(tb, cid, hw=preset)
    if (tb, cid, preset) in CANNOT_FIT:
        assert_names_largest(rep, *CANNOT_FIT[(tb, cid, preset)])
        return
    assert rep.passed, rep.summary


@pytest.mark.parametrize("tb,ov,preset,param,most", TOO_BIG, ids=[f"{t[0]}-{t[3]}@{t[2]}" for t in TOO_BIG])
def test_shape_that_cannot_fit_names_the_largest_value(tb, ov, preset, param, most):
    assert_names_largest(run_case(tb, "too_big", ov, hw=preset), param, most)
    fits = run_case(tb, "largest", dict(ov, **{param: most}), hw=preset)
    assert fits.passed, fits.summary
