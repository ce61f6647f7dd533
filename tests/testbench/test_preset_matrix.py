"""Every testbench at its defaults passes on every hardware preset except ``analytic`` (issue: presets).

Defaults are written in units of the machine (testbenches/shapes.py), so one set of defaults fits every
preset; the verdict is the harness's full element-by-element comparison."""

from __future__ import annotations

import pytest

import testbenches
from plena_sim.config.presets import preset_names
from testbenches.harness import run_case

PRESETS = [p for p in preset_names() if p != "analytic"]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", testbenches.names())
def test_defaults_pass_on_preset(name, preset):
    rep = run_case(name, None, hw=preset)
    assert rep.passed, f"{name} on {preset}: {rep.summary or rep.error}"
