"""Long-context flash attention (issue 29): split-KV chunks merged in a tree.

The chunk arithmetic of programs/flash/merge.py by hand; the required LC cases really split (and LC3 reaches a
second accumulator level); caches of at most one chunk emit the unchunked program word for word; under
``-m slow`` every SLOW_CASE of both flash testbenches PASSes on the reference machine and on v80-128x64 with an
output rel-RMS of at most 0.02 against float64, and the old single-chunk scheme fails at 32k keys (the check has
teeth there)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import testbenches
from isa import assemble
from programs.flash import plan_flash_attention
from programs.flash.merge import (
    Tree,
    accumulator_precision,
    chunk_tiles,
    chunk_tree,
    merge_levels,
    split_end_aligned,
)
from testbenches.harness import cases_of, run_case
from testbenches.shapes import resolve_params
from testbenches.variants import get_config

FLASH = ("flashattn_decode", "flashattn_prefill")


def test_chunk_length_follows_the_datapath_precision():
    cfg = get_config("default")
    assert accumulator_precision(cfg) == 8  # bf16: 7 fraction bits + the implicit one
    assert chunk_tiles(cfg) == 16  # 2^floor(8/2)


def test_end_aligned_split_puts_the_remainder_first():
    assert split_end_aligned(list(range(10)), 4) == [[0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    assert split_end_aligned(list(range(8)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split_end_aligned(list(range(3)), 4) == [[0, 1, 2]]


@pytest.mark.parametrize("tiles,levels", [(1, 0), (16, 0), (17, 1), (256, 1), (257, 2), (4096, 2), (4097, 3)], ids=str)
def test_merge_levels_bound_every_accumulator_by_T(tiles, levels):
    assert merge_levels(tiles, 16) == levels


def _fan_ins(t: Tree) -> list[int]:
    if t.level == 0:
        return [len(t.chunk)]
    return [len(t.subtrees)] + [f for s in t.subtrees for f in _fan_ins(s)]


def test_chunk_tree_gathers_at_most_T_per_accumulator_and_keeps_the_order():
    tiles = list(range(2 * 16 * 16 + 5))  # 517 tiles, T = 16: 2 accumulator levels
    tree = chunk_tree(tiles, 16, merge_levels(len(tiles), 16))
    assert tree.level == 2 and max(_fan_ins(tree)) <= 16

    def leaves(t: Tree) -> list[int]:
        return list(t.chunk) if t.level == 0 else [x for s in t.subtrees for x in leaves(s)]

    assert leaves(tree) == tiles
    assert [len(s.subtrees) for s in tree.subtrees] == [1, 16, 16]  # level-1 groups, the remainder first
    assert len(tree.subtrees[0].subtrees[0].chunk) == 5  # the first chunk holds the remainder


def _plan_of(tb: str, cid: str, hw: str | None = None) -> Any:
    mod = testbenches.get(tb)
    _, over, variant = cases_of(mod)[cid]
    cfg = get_config(variant, hw=hw)
    case = mod.build(resolve_params(dict(mod.DEFAULTS, **over), cfg), cfg)
    return case.plan


@pytest.mark.parametrize("tb", FLASH)
def test_required_long_context_cases_split_and_merge(tb):
    assert _plan_of(tb, "LC1").merge_levels == 1
    assert _plan_of(tb, "LC2").merge_levels == 1
    assert _plan_of(tb, "LC3").merge_levels == 2  # kv_chunk_tiles small: a second accumulator level


def _words(tb: str, hw: str | None, **over: Any) -> tuple[np.ndarray, Any]:
    mod = testbenches.get(tb)
    cfg = get_config("default", hw=hw)
    case = mod.build(resolve_params(dict(mod.DEFAULTS, **over), cfg), cfg)
    prog = case.program
    text = prog if isinstance(prog, str) else prog.text()
    return assemble(text, tb).words, case.plan


@pytest.mark.parametrize("hw", [None, "v80-128x64"])
@pytest.mark.parametrize("tb", FLASH)
def test_a_cache_of_one_chunk_emits_the_unsplit_program(tb, hw):
    """kv_len = 16 tiles (C keys) with the derived chunk length and with splitting off: the same words; one
    key more (17 tiles), and the program is split and holds the merges."""
    M = get_config("default", hw=hw).MLEN
    shape = dict(batch=1, q_len=M if tb == "flashattn_prefill" else 1)
    a, plan_a = _words(tb, hw, kv_len=16 * M, **shape)
    b, _ = _words(tb, hw, kv_len=16 * M, kv_chunk_tiles=0, **shape)
    assert plan_a.merge_levels == 0 and np.array_equal(a, b)
    c, plan_c = _words(tb, hw, kv_len=16 * M + 1, **shape)
    d, _ = _words(tb, hw, kv_len=16 * M + 1, kv_chunk_tiles=0, **shape)
    assert plan_c.merge_levels == 1 and len(c) > len(d)


def test_split_kv_plans_name_the_fp_sram_limit():
    """A state that cannot fit FP SRAM names fp_state_base and the words a row and head needs (3 + 2*levels)."""
    cfg = get_config("default")
    with pytest.raises(ValueError, match=r"fp_state_base.*needs 7 words per q row and head"):
        plan_flash_attention(
            cfg, batch=1, hq=1, hkv=1, d=cfg.HLEN, q_len=1, kv_len=300 * cfg.MLEN, fp_state_base=cfg.FP_SRAM_SIZE - 6
        )


# ----------------------------------------------------------------------------------------- slow: long contexts


def _slow_cases() -> list[tuple[str, str, str | None]]:
    return [
        (tb, cid, hw) for tb in FLASH for cid, _o, _v in testbenches.get(tb).SLOW_CASES for hw in (None, "v80-128x64")
    ]


@pytest.mark.slow
@pytest.mark.parametrize("tb,cid,hw", _slow_cases(), ids=lambda x: str(x))
def test_long_context_cases_pass_within_2_percent(tb, cid, hw):
    rep = run_case(tb, cid, hw=hw)
    assert rep.passed, rep.summary
    out = next(c for c in rep.checks if c.name == "output")
    assert out.rel_rms <= 0.02


@pytest.mark.slow
def test_the_unsplit_scheme_fails_at_32k_keys():
    """The bf16 running sum stagnates without chunks: the same case with kv_chunk_tiles=0 fails its checks."""
    rep = run_case("flashattn_decode", "L32k", {"kv_chunk_tiles": 0})
    assert not rep.passed
    out = next(c for c in rep.checks if c.name == "output")
    assert out.rel_rms > 0.1
