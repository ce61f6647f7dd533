"""Both timing modes on real kernels through the testbench harness (``run(case, timing=...)``)."""

import pytest

import testbenches
from testbenches.harness import run


def _case(name):
    mod = testbenches.get(name)
    from testbenches.variants import get_config

    return mod.build(dict(mod.DEFAULTS), get_config("default"))


@pytest.mark.parametrize("name", ["flashattn_prefill", "linear", "softmax"])
def test_modes_on_testbench(name):
    s = run(_case(name), timing="serial", trace=1 << 18)
    o = run(_case(name), timing="overlap")
    assert s.passed and o.passed, (s.summary, o.summary)
    assert s.stats["timing_mode"] == "serial" and o.stats["timing_mode"] == "overlap"
    assert s.trace.dropped == 0
    zero = sum(1 for r in s.trace.rows() if r["cycles"] == 0)  # zero-latency instructions executed
    assert o.cycles <= s.cycles + zero
    for u in "MVSC":
        assert o.stats["unit_busy_cycles"][u] == s.stats["unit_busy_cycles"][u]
    assert s.cycles == sum(s.stats["unit_busy_cycles"].values())
    assert o.cycles < s.cycles
    assert o.stats["overlap"]["issue_cycles"] >= o.instructions


def test_prefill_trace_through_harness():
    rep = run(_case("flashattn_prefill"), timing="overlap", trace=1 << 12)
    assert rep.trace is not None and len(rep.trace) == 1 << 12 and rep.trace.total == rep.instructions
