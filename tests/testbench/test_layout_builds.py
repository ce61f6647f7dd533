"""Layout-only builds (issue 30): ``build_layout`` gives the program and the HBM placements of ``build`` with no
input values, so a timing-only run of it has the functional run's statistics (tests/core/test_timing_only.py)."""

from __future__ import annotations

import pytest

import testbenches
from testbenches.harness import cases_of, run_case
from testbenches.shapes import resolve_params
from testbenches.variants import fixes_machine, get_config

FLASH = ("flashattn_prefill", "flashattn_decode")


def _placements(case):
    return {k: (p.base, p.row_pitch, p.scale_reg, p.end) for k, p in case.tensors.items()}


def _required(tbs):
    return [(tb, cid) for tb in tbs for cid, _ov, _var in testbenches.get(tb).REQUIRED_CASES]


@pytest.mark.parametrize("tb,cid", _required(FLASH), ids=lambda x: str(x))
@pytest.mark.parametrize("hw", (None, "v80-128x64"))
def test_flash_layout_build_is_the_build_without_values(tb, cid, hw):
    mod = testbenches.get(tb)
    _c, over, variant = cases_of(mod)[cid]
    cfg = get_config("default" if hw and fixes_machine(variant) else variant, hw=hw)
    params = resolve_params(dict(mod.DEFAULTS, **over), cfg)
    try:
        full = mod.build(dict(params), cfg)
    except (ValueError, AssertionError) as exc:  # a shape the machine refuses: the layout build refuses it too
        with pytest.raises(type(exc)):
            mod.build_layout(dict(params), cfg)
        return
    lay = mod.build_layout(dict(params), cfg)
    assert lay.program == full.program
    assert _placements(lay) == _placements(full)
    assert lay.layout_only and not lay.checks and not lay.hbm_segments and not lay.inputs


def test_layout_case_runs_only_timing_only():
    rep = run_case("flashattn_decode", "D3", functional=False)
    assert rep.passed and rep.verdict == "not judged (timing-only)" and rep.cycles > 0
    mod = testbenches.get("flashattn_decode")
    cfg = get_config("default")
    lay = mod.build_layout(resolve_params(dict(mod.DEFAULTS), cfg), cfg)
    from testbenches.harness import run

    refused = run(lay)
    assert not refused.passed and refused.error == "plan: a layout-only case has no inputs: it runs only timing-only"
