"""moe_layer (routed MoE): the construction that makes the routing exact, the composed ``moe`` tolerance at
work, and (``-m slow``) the larger SLOW_CASES.  The required cases run in test_catalogue.py and on the large
presets in test_required_cases_presets.py."""

from __future__ import annotations

import numpy as np
import pytest

from testbenches import moe_layer as tb
from testbenches.compare import is_bf16_exact
from testbenches.harness import run_case
from testbenches.variants import get_config


def test_router_weights_make_exact_distinct_power_of_two_logits():
    rng = np.random.default_rng(0)
    w = tb.router_weights(rng, 64, 128, 128)
    cols = np.flatnonzero(np.any(w != 0, axis=0))
    assert cols.tolist() == list(range(128))  # one nonzero per expert column, none in the padding
    assert np.count_nonzero(w) == 128
    vals = np.abs(w[w != 0])
    assert set(vals.tolist()) <= {0.5, 1.0, 2.0}
    assert np.count_nonzero(w, axis=1).max() == 2  # E = 2*hidden: two experts per hidden row
    x = np.array([[1.625, -0.0390625] + [0.0] * 62])  # E4M3 values times block scales
    assert is_bf16_exact(x @ w)


def test_default_case_checks_every_stage():
    case = tb.build(dict(tb.DEFAULTS), get_config("default"))
    names = [c.name for c in case.checks]
    assert names == ["output", "indices", "weights"]
    out = case.checks[0]
    assert out.tol.name == "moe" and out.A is not None and out.A.shape == out.golden.shape == (4, 64)
    assert np.all(out.A > 0) and 0 < out.tol.rho < 0.1
    assert case.checks[1].tol.exact and case.checks[2].tol.name == "topk"


def test_bit_identical_case_runs_the_other_loop_form():
    case = tb.build(dict(tb.DEFAULTS, T=1, loops=False, bit_identical=True), get_config("default"))
    assert case.companion is not None and "C_LOOP_START" in case.companion.program
    assert case.checks[-1].name == "bit_identical" and case.checks[-1].golden_from == "output"


@pytest.mark.slow
@pytest.mark.parametrize("cid,ov,var", tb.SLOW_CASES, ids=[c[0] for c in tb.SLOW_CASES])
def test_slow_case(cid, ov, var):
    rep = run_case("moe_layer", cid)
    assert rep.passed, rep.summary
    assert rep.variant == var
