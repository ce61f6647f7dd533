"""The oracle's teeth (kernels.md §6.1): every mutation of §6.2/§6.3 and of the second wave (issue 21) is caught
by its exposing cases.

* CI (default run): one exposing case per mutation, the cheapest one (testbenches.mutations.ci_subset).
* ``-m slow``: every listed exposing case of every mutation.
* The blind spot: the seed's bug (K/V tile offset ignored) is invisible with a single kv tile
  (kv_len == MLEN), which is why every exposing case has several tiles.
* With no hook enabled every generator's text is byte-identical (hooks cost nothing when off).
* ``l_reset_skipped`` (flash attention's l not reset per block) is invisible with a zero-filled FP SRAM: the
  stale l is multiplied by exp(-inf - m) ~ 6e-39 on tile 0. It is caught because the harness poisons FP SRAM
  outside the declared inputs with NaN (issue 21, build item 1).
"""

from __future__ import annotations

import pytest

from programs import mutation_hooks
from testbenches import mutations as mut
from testbenches.harness import run_case

ALL = [(h, e) for h in mut.MUTATIONS for e in mut.exposures(h)]


def _params(pairs, prefix=""):
    """pytest params of (hook, exposure) pairs."""
    return [pytest.param(h, e, id=f"{prefix}{h}-{e.label}") for h, e in pairs]


def test_every_hook_is_placed_in_generator_code():
    from pathlib import Path

    src = "\n".join(
        p.read_text()
        for p in (Path(__file__).resolve().parents[2] / "programs").rglob("*.py")
        if p.name != "mutation_hooks.py"
    )
    for h in mut.MUTATIONS:
        assert f'"{h}"' in src, f"hook {h} is not referenced by any generator"


@pytest.mark.slow
@pytest.mark.parametrize("hook,exp", ALL, ids=[f"clean-{h}-{e.label}" for h, e in ALL])
def test_exposing_case_passes_without_the_mutation(hook, exp):
    rep = run_case(exp.testbench, exp.case_id, exp.overrides, exp.variant)
    assert rep.passed, f"{exp.label} must pass without {hook}: {rep.summary}"


def test_table_covers_every_hook_exactly():
    assert set(mut.MUTATIONS) == set(mutation_hooks.HOOKS)
    assert len(mut.MUTATIONS) == len(set(mut.MUTATIONS)) == 55 + 39
    for h in mut.MUTATIONS:
        assert mut.exposures(h), h
        assert mut.DESCRIPTIONS[h]


def test_second_wave_spans_every_bug_class():
    """Issue 21: at least 30 new mutations, each with a bug class; every class of the issue is present."""
    assert len(mut.CLASSES) >= 30 and set(mut.CLASSES) <= set(mut.MUTATIONS)
    classes = {"addressing", "masking", "state init", "precision/scale", "loop bounds", "register reuse"}
    assert classes | {"immediates", "layout"} == set(mut.CLASSES.values())
    for h in mut.CLASSES:  # exposed by required cases only (they pass unmutated on every preset)
        assert all(e.case_id != "custom" for e in mut.exposures(h)), h


@pytest.mark.parametrize("hook,exp", _params(mut.ci_subset()))
def test_mutation_caught_ci_subset(hook, exp):
    rep = mut.run_mutation(hook, exp)
    assert not rep.passed, f"mutation {hook} NOT caught by {exp.label}: {rep.summary}"
    assert mut.how_caught(rep) in ("mismatch", "fault", "assembler", "plan")


@pytest.mark.slow
@pytest.mark.parametrize("hook,exp", _params(ALL))
def test_mutation_caught_every_listed_case(hook, exp):
    rep = mut.run_mutation(hook, exp)
    assert not rep.passed, f"mutation {hook} NOT caught by {exp.label}: {rep.summary}"


def test_blind_spot_single_kv_tile_does_not_expose_the_seed_bug():
    # kv_len == q_len == MLEN: one kv tile, so t*M*R == 0 and the seed's bug changes nothing.
    single = {"q_len": 64, "kv_len": 64}
    clean = run_case("flashattn_prefill", "single-tile", single, "default")
    assert clean.passed, clean.summary
    with mutation_hooks.inject("kv_tile_offset_ignored"):
        mutant = run_case("flashattn_prefill", "single-tile:kv_tile_offset_ignored", single, "default")
    assert mutant.passed, "expected the single-tile case to be blind to the seed bug"
    # ... while the multi-tile default (kv_len = 4*MLEN) exposes it
    with mutation_hooks.inject("kv_tile_offset_ignored"):
        multi = run_case("flashattn_prefill", "P1:kv_tile_offset_ignored", {}, "default")
    assert not multi.passed and mut.how_caught(multi) == "mismatch"


def test_how_caught_classification():
    rep = mut.run_mutation("pv_v_step_blen", mut.exposures("pv_v_step_blen")[0])
    assert mut.how_caught(rep) == "fault" and rep.fault["rule"] == "AL-MM"
    rep = mut.run_mutation("raw_large_immediate", mut.exposures("raw_large_immediate")[0])
    assert mut.how_caught(rep) == "assembler"
    rep = mut.run_mutation("ffn_workspace_overlap", mut.exposures("ffn_workspace_overlap")[0])
    assert mut.how_caught(rep) in ("plan", "mismatch")
