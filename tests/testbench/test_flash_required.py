"""Flash attention end to end on the machine (Numba backend): every required case P1-P10, D1-D7 and the
flashattn_qkt cases, the stretch case P11, a CI subset of the §4.5 grid, and (``-m slow``) the full grid
(the §6.2 mutation table is in tests/mutations/test_teeth.py).

A simulator fault, an assembler error or a plan ValueError in a required case is a failure, never a skip.
"""

from __future__ import annotations

import itertools

import pytest

import testbenches
from programs import flash as fa
from testbenches.harness import run_case

FLASH = ("flashattn_prefill", "flashattn_decode", "flashattn_qkt")
REQUIRED = [(tb, cid, ov, var) for tb in FLASH for (cid, ov, var) in testbenches.get(tb).REQUIRED_CASES]
STRETCH = [(tb, cid, ov, var) for tb in FLASH for (cid, ov, var) in testbenches.get(tb).STRETCH_CASES]


def _ids(rows):
    return [f"{t}[{c}]" for t, c, _, _ in rows]


@pytest.mark.parametrize("tb,cid,ov,var", REQUIRED, ids=_ids(REQUIRED))
def test_required_case(tb, cid, ov, var):
    rep = run_case(tb, cid, ov, var)
    assert rep.passed, rep.summary
    assert rep.checks[0].n > 0 and rep.fault is None


@pytest.mark.parametrize("tb,cid,ov,var", STRETCH, ids=_ids(STRETCH))
def test_stretch_case(tb, cid, ov, var):
    assert fa.SUPPORTS_HEAD_DIM_CHUNKS, "head-dim chunking is implemented (P11) and must stay so"
    rep = run_case(tb, cid, ov, var)
    assert rep.passed, rep.summary


def test_required_case_budget():
    """kernels.md §3.11: the required flash cases stay under ~300k dynamic instructions (P3 the largest)."""
    rep = run_case("flashattn_prefill", "P3", dict(testbenches.get("flashattn_prefill").REQUIRED_CASES[2][1]))
    assert rep.passed, rep.summary
    assert rep.instructions < 300_000


@pytest.mark.parametrize("tb", FLASH)
def test_module_api(tb):
    mod = testbenches.get(tb)
    assert isinstance(mod.DESCRIPTION, str) and mod.DESCRIPTION and "\n" not in mod.DESCRIPTION
    assert isinstance(mod.DEFAULTS, dict) and isinstance(mod.RANGES, dict)
    assert isinstance(mod.STRETCH_CASES, list) and mod.REQUIRED_CASES
    ids = [c for c, _, _ in mod.REQUIRED_CASES + mod.STRETCH_CASES]
    assert len(ids) == len(set(ids))
    for cid, ov, var in mod.REQUIRED_CASES + mod.STRETCH_CASES:
        assert set(ov) <= set(mod.DEFAULTS), f"{cid}: unknown override keys {set(ov) - set(mod.DEFAULTS)}"
        assert var in ("default", "emu025", "small", "wide")
    assert tb in testbenches.names()


def test_case_ids_match_the_spec():
    """kernels.md §4.5's P1-P10 and D1-D7, then issue 21's coverage cases P12-P20 and D8-D16, then issue 29's
    long-context (split-KV) cases LC1-LC3."""
    pre = [c for c, _, _ in testbenches.get("flashattn_prefill").REQUIRED_CASES]
    dec = [c for c, _, _ in testbenches.get("flashattn_decode").REQUIRED_CASES]
    lc = ["LC1", "LC2", "LC3"]
    assert pre == [f"P{k}" for k in range(1, 11)] + [f"P{k}" for k in range(12, 21)] + lc
    assert dec == [f"D{k}" for k in range(1, 8)] + [f"D{k}" for k in range(8, 17)] + lc
    assert [c for c, _, _ in testbenches.get("flashattn_prefill").STRETCH_CASES] == ["P11"]


# ----------------------------------------------------------------------------- the §4.5 grid

GRID_AXES = dict(
    kv_len=(64, 128, 320, 1024),
    q_len=(1, 64, 100, 256),
    heads=((4, 4), (8, 2), (8, 1)),
    d=(16, 64),
    batch=(1, 2),
    causal=(True, False),
    cache=("strided", "padded"),
)


def _grid_point(kv_len, q_len, heads, d, batch, causal, cache):
    hq, hkv = heads
    if cache == "strided":
        wp = hkv * d
    else:
        wp = 64 if hkv * d < 64 else 1024  # padded: Wp = M where hkv*d < M, else a 1024-wide cache
    tb = "flashattn_decode" if q_len == 1 else "flashattn_prefill"
    ov = dict(kv_len=kv_len, q_len=q_len, hq=hq, hkv=hkv, d=d, batch=batch, causal=causal, Wp=wp)
    return tb, ov


def _grid():
    out = []
    for combo in itertools.product(*GRID_AXES.values()):
        kv_len, q_len, _h, _d, _b, causal, _c = combo
        if causal and q_len > kv_len:
            continue  # causal attention requires q_len <= kv_len (§3.1)
        out.append(combo)
    return out


def _gid(combo):
    kv, q, (hq, hkv), d, b, causal, cache = combo
    return f"kv{kv}-q{q}-h{hq}x{hkv}-d{d}-b{b}-{'causal' if causal else 'full'}-{cache}"


#: a representative CI subset: every value of every axis, both paths, decode and prefill
CI_GRID = [
    (64, 1, (4, 4), 16, 1, True, "strided"),
    (128, 64, (8, 2), 16, 2, True, "padded"),
    (320, 100, (8, 1), 16, 1, False, "strided"),
    (1024, 256, (4, 4), 64, 1, True, "strided"),
    (320, 1, (8, 2), 64, 2, False, "padded"),
    (1024, 1, (8, 1), 16, 2, True, "padded"),
    (128, 100, (4, 4), 64, 2, False, "strided"),
    (320, 256, (8, 2), 16, 1, True, "padded"),
    (1024, 64, (8, 1), 64, 1, False, "padded"),
    (64, 64, (8, 2), 64, 1, True, "strided"),
    (320, 64, (4, 4), 16, 2, False, "padded"),
    (128, 1, (8, 1), 64, 1, False, "strided"),
    (1024, 100, (8, 2), 16, 2, True, "strided"),
    (64, 256, (4, 4), 16, 1, False, "padded"),
    (320, 100, (8, 1), 64, 2, True, "padded"),
    (128, 256, (8, 2), 64, 1, False, "strided"),
]


def _run_grid(combo):
    tb, ov = _grid_point(*combo)
    rep = run_case(tb, _gid(combo), ov, "default")
    assert rep.passed, rep.summary


@pytest.mark.parametrize("combo", CI_GRID, ids=[_gid(c) for c in CI_GRID])
def test_grid_ci_subset(combo):
    _run_grid(combo)


@pytest.mark.slow
@pytest.mark.parametrize("combo", _grid(), ids=[_gid(c) for c in _grid()])
def test_grid_full(combo):
    _run_grid(combo)


# The §6.2 mutation table runs in tests/mutations/test_teeth.py (one table: testbenches.mutations).
