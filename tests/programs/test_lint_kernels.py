"""Lint of the non-attention generators without the simulator (kernels.md §6.4).

Every program built by the §4.4 testbenches over samples of their RANGES is traced by the scalar
interpreter (tests/util/scalar_trace.py): no alignment problem on any VRAM/MRAM/matrix operand, every VRAM
row written lies inside a region the plan declared, and every loop iteration stays below
MAX_LOOP_INSTRUCTIONS.  (Immediate ranges, gp0/f0 destinations and a0..a7 are enforced by Asm and the
assembler on every line.)
"""

from __future__ import annotations

import pytest

import testbenches  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.testbench.catalogue_util import OTHER_TESTBENCHES, range_points
from tests.util import scalar_trace

NEGATIVE = ("L7", "L8", "L9")  # loop programs that must fault; the simulator tests judge them


def _points():
    pts = []
    for tb in OTHER_TESTBENCHES:
        mod = testbenches.get(tb)
        for cid, ov, var in mod.REQUIRED_CASES:
            pts.append((tb, cid, ov, var))
        for k, (ov, var) in enumerate(range_points(mod.RANGES, cap=4, seed=11)):
            if ov.get("program") in NEGATIVE:
                continue
            pts.append(pytest.param(tb, f"r{k}", ov, var, marks=pytest.mark.slow, id=f"{tb}[r{k}]"))
    return pts


POINTS = [p for p in _points() if not (isinstance(p, tuple) and p[0] == "loop" and p[2].get("program") in NEGATIVE)]


@pytest.mark.parametrize(
    "tb,cid,ov,var", POINTS, ids=[f"{p[0]}[{p[1]}]" if isinstance(p, tuple) else p.id for p in POINTS]
)
def test_lint(tb, cid, ov, var):
    mod = testbenches.get(tb)
    cfg = get_config(var)
    case = mod.build(dict(mod.DEFAULTS, **ov), cfg)
    ints = {}
    for base, vals in case.int_preload.items():
        for i, v in enumerate(vals):
            ints[base + i] = int(v)
    tr = scalar_trace.trace(case.program, case.config, int_sram=ints)
    assert not tr.lint, tr.lint[:5]
    declared = set()
    for r0, n, _role in case.regions.values():
        declared |= set(range(r0, r0 + n))
    stray = sorted(tr.vram_rows_written - declared)
    assert not stray, f"VRAM rows written outside the declared regions: {stray[:10]}"
    assert tr.max_loop_iteration < case.config.MAX_LOOP_INSTRUCTIONS
