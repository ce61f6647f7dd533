"""Sensitivity of the attention testbenches (issue 21): one added key, one dropped key and one wrong mask lane are
each caught on every listed case (testbenches.sensitivity); without them every listed case passes.

* CI (default run): every sensitivity mutation on the cheap cases (``CI_CASES``); ``-m slow``: on all ``CASES``.
* The count probe's exact ``l_count`` check names the affected rows themselves, not only the aggregate.
"""

from __future__ import annotations

import pytest

from programs import mutation_hooks
from testbenches import mutations as mut
from testbenches import sensitivity as sens
from testbenches.harness import run_case

ALL = [(h, e) for h in sorted(sens.SENS_HOOKS) for e in sens.CASES]
CI = [(h, e) for h in sorted(sens.SENS_HOOKS) for e in sens.CI_CASES]


def test_the_table_names_three_single_key_mutations_apart_from_the_teeth_table():
    assert {"sens_key_added", "sens_key_dropped", "sens_mask_lane"} == sens.SENS_HOOKS
    assert not sens.SENS_HOOKS & set(mut.MUTATIONS) and not sens.SENS_HOOKS & mutation_hooks.HOOKS
    assert set(sens.DESCRIPTIONS) == sens.SENS_HOOKS
    assert all(e in sens.CASES for e in sens.CI_CASES)


@pytest.mark.parametrize("exp", sens.CI_CASES, ids=[e.label for e in sens.CI_CASES])
def test_listed_case_passes_unmutated_with_its_count_probe(exp):
    rep = run_case(exp.testbench, exp.case_id, exp.overrides, exp.variant)
    assert rep.passed, rep.summary
    assert rep.check("l_count").passed and rep.check("l_count").n > 0


@pytest.mark.parametrize("hook,exp", CI, ids=[f"{h}-{e.label}" for h, e in CI])
def test_sensitivity_mutation_caught_ci_cases(hook, exp):
    rep = sens.run_mutation(hook, exp)
    assert not rep.passed, f"{hook} NOT caught by {exp.label}: {rep.summary}"
    assert mut.how_caught(rep) == "mismatch"


@pytest.mark.slow
@pytest.mark.parametrize("hook,exp", ALL, ids=[f"{h}-{e.label}" for h, e in ALL])
def test_sensitivity_mutation_caught_every_listed_case(hook, exp):
    rep = sens.run_mutation(hook, exp)
    assert not rep.passed, f"{hook} NOT caught by {exp.label}: {rep.summary}"


@pytest.mark.parametrize("hook", ["sens_key_added", "sens_key_dropped"])
def test_one_key_fails_every_affected_row_of_the_count_probe(hook):
    # P2: non-causal, kv 200, the last tile a tail (bc 8): every row of the last block is affected
    rep = sens.run_mutation(hook, sens.CASES[1])
    probe = rep.check("l_count")
    assert not probe.passed and probe.n_fail == probe.n == 64, probe.summary()
    assert abs(probe.worst["sim"] - probe.worst["golden"]) == 1.0


def test_one_wrong_lane_fails_exactly_its_row_of_the_count_probe():
    rep = sens.run_mutation("sens_mask_lane", sens.CASES[1])
    probe = rep.check("l_count")
    assert not probe.passed and probe.n_fail == 1 and probe.first["index"] == [0], probe.summary()
    assert probe.first["golden"] - probe.first["sim"] == 1.0


def test_every_sensitivity_hook_is_placed_in_the_flash_generator():
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "programs" / "flash"
    src = "".join(f.read_text() for f in sorted(package.glob("*.py")))
    for h in sens.SENS_HOOKS:
        assert f'"{h}"' in src, h
