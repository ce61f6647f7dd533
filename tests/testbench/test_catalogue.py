"""Every REQUIRED_CASE of the §4.4 testbenches (other than flash attention) passes end to end.

A simulator fault, assembler error or plan ValueError is a failure (never a skip).  ``-m slow`` adds a
sweep over samples of each testbench's RANGES.
"""

from __future__ import annotations

import zlib

import pytest

import testbenches
from testbenches.harness import run_case
from testbenches.variants import get_config
from tests.testbench.catalogue_util import OTHER_TESTBENCHES, range_points

REQUIRED = [(tb, cid, ov, var) for tb in OTHER_TESTBENCHES for (cid, ov, var) in testbenches.get(tb).REQUIRED_CASES]


@pytest.mark.parametrize("tb,cid,ov,var", REQUIRED, ids=[f"{t}[{c}]" for t, c, _, _ in REQUIRED])
def test_required_case(tb, cid, ov, var):
    rep = run_case(tb, cid, ov, var)
    assert rep.passed, rep.summary


def _stretch():
    out = []
    for tb in OTHER_TESTBENCHES:
        for cid, ov, var in testbenches.get(tb).STRETCH_CASES:
            out.append((tb, cid, ov, var))
    return out


@pytest.mark.parametrize("tb,cid,ov,var", _stretch(), ids=[f"{t}[{c}]" for t, c, _, _ in _stretch()])
def test_stretch_case(tb, cid, ov, var):
    if tb == "rope":
        from programs.rope import SUPPORTS_BLOCK_PATH

        assert SUPPORTS_BLOCK_PATH, "the rope d > MLEN block path is implemented and must stay so"
    rep = run_case(tb, cid, ov, var)
    assert rep.passed, rep.summary


@pytest.mark.parametrize("tb", OTHER_TESTBENCHES)
def test_module_api(tb):
    mod = testbenches.get(tb)
    assert isinstance(mod.DESCRIPTION, str) and mod.DESCRIPTION and "\n" not in mod.DESCRIPTION
    assert isinstance(mod.DEFAULTS, dict) and isinstance(mod.RANGES, dict)
    assert isinstance(mod.STRETCH_CASES, list)
    assert mod.REQUIRED_CASES, "at least one required case"
    ids = [c for c, _, _ in mod.REQUIRED_CASES]
    assert len(ids) == len(set(ids)), "case ids are unique"
    for cid, ov, var in mod.REQUIRED_CASES:
        assert isinstance(ov, dict) and var in ("default", "emu025", "small", "wide")
        assert set(ov) <= set(mod.DEFAULTS), f"{cid}: override keys {set(ov) - set(mod.DEFAULTS)} unknown"
    assert callable(mod.build)
    case = mod.build(dict(mod.DEFAULTS), get_config("default"))
    assert case.checks or case.expect, "every case has at least one check"


def test_registry_lists_every_testbench():
    names = testbenches.names()
    for tb in OTHER_TESTBENCHES:
        assert tb in names
    with pytest.raises(KeyError):
        testbenches.get("no_such_testbench")


def _sweep():
    pts = []
    for tb in OTHER_TESTBENCHES:
        mod = testbenches.get(tb)
        for k, (ov, var) in enumerate(range_points(mod.RANGES, cap=12, seed=zlib.crc32(tb.encode()))):
            pts.append((tb, k, ov, var))
    return pts


@pytest.mark.slow
@pytest.mark.parametrize("tb,k,ov,var", _sweep(), ids=[f"{t}-{k}" for t, k, _, _ in _sweep()])
def test_ranges_sweep(tb, k, ov, var):
    mod = testbenches.get(tb)
    cal = getattr(mod, "calibrated", None)
    if cal is not None and not cal(ov, get_config(var)):
        pytest.skip(mod.UNCALIBRATED)
    rep = run_case(tb, f"sweep{k}", ov, var)
    assert rep.passed, rep.summary
