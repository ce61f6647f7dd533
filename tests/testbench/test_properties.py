"""Property-based generator tests (issue: the oracle's teeth, item 5).

Hypothesis draws parameter combinations from each testbench's documented RANGES and runs them end to end
on the machine; every drawn combination the plan accepts must PASS. Combinations that break a documented
constraint (the plan raises ValueError naming the parameter, e.g. hkv not dividing hq, or a row outside
a kernel's calibrated tolerance) are rejected, not counted. Bounded in CI (PLENA_PROP_EXAMPLES, default
2 per testbench); raise it for a larger campaign.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import testbenches
from testbenches.harness import run
from testbenches.variants import get_config

EXAMPLES = int(os.environ.get("PLENA_PROP_EXAMPLES", "2"))


@pytest.mark.parametrize("name", testbenches.names())
def test_random_valid_shapes_pass(name):
    mod = testbenches.get(name)
    keys = sorted(mod.RANGES)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(st.fixed_dictionaries({k: st.sampled_from(list(mod.RANGES[k])) for k in keys}))
    def prop(draw):
        ov = dict(draw)
        variant = ov.pop("cfg", "default")
        cfg = get_config(variant)
        cal = getattr(mod, "calibrated", None)
        if cal is not None and not cal(ov, cfg):
            reject()
        params = dict(mod.DEFAULTS, **ov)
        try:
            case = mod.build(params, cfg)
        except ValueError:
            reject()
        case.case_id = "prop"
        case.variant = variant
        rep = run(case)
        ran.append(ov)
        assert rep.passed, f"{name} {ov} @{variant}: {rep.summary}"

    ran: list[dict] = []
    prop()
    assert ran, f"{name}: no drawn RANGES combination was valid"
