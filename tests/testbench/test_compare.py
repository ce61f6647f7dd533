"""Harness self-tests (kernels.md §5.1) and the harness mutations of §6.3's last paragraph.

Each harness mutation (the upstream flaws: the 90 % pass rule, fp16 decoding of SRAM dumps, truncation to
the shorter array, goldens rounded to 2 decimals) is a small alternative implementation below; the
self-tests are parameterised over the real implementation and each mutant, and the mutation test asserts
that every mutant makes at least one self-test fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from testbenches import compare as C
from testbenches.compare import bf16_decode, bf16_encode, compare, tolerance
from testbenches.harness import FpWords

# ----------------------------------------------------------------------------- implementations


class Real:
    """The project's comparison and decoding."""

    name = "real"

    @staticmethod
    def compare(sim, golden, **kw):
        return compare(sim, golden, **kw).passed

    @staticmethod
    def decode(bits):
        return bf16_decode(bits)


class Rule90(Real):
    """Upstream: pass if at least 90 % of elements are within 0.2 + 0.2|g|."""

    name = "rule90"

    @staticmethod
    def compare(sim, golden, **kw):
        s, g = np.asarray(sim, float), np.asarray(golden, float)
        if s.shape != g.shape:
            return False
        ok = np.abs(s - g) <= 0.2 + 0.2 * np.abs(g)
        return ok.mean() >= 0.9


class Fp16Decode(Real):
    """Upstream: FP SRAM dump decoded as fp16."""

    name = "fp16"

    @staticmethod
    def decode(bits):
        return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(np.float32)


class Truncate(Real):
    """Upstream: compare only up to the shorter of the two (flattened) arrays."""

    name = "truncate"

    @staticmethod
    def compare(sim, golden, **kw):
        s, g = np.asarray(sim).reshape(-1), np.asarray(golden).reshape(-1)
        n = min(s.size, g.size)
        kw = dict(kw)
        kw["coords"] = ("i",)
        kw.pop("A", None) if kw.get("A") is not None and np.ndim(kw["A"]) else None
        return compare(s[:n], g[:n], **kw).passed


class Round2(Real):
    """Upstream: goldens printed with 2 decimals and parsed back."""

    name = "round2"

    @staticmethod
    def compare(sim, golden, **kw):
        return compare(sim, np.round(np.asarray(golden, float), 2), **kw).passed


IMPLS = [Real, Rule90, Fp16Decode, Truncate, Round2]


# ----------------------------------------------------------------------------- the self-tests


def _data(seed=0, shape=(2, 8, 3, 16)):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(shape)
    s = bf16_decode(bf16_encode(g)).astype(np.float64)  # a faithful bf16 simulation
    return s, g


COORDS = ("batch", "row", "head", "col")
TOL = tolerance("act")


def st_faithful_passes(impl):
    s, g = _data()
    return impl.compare(s, g, coords=COORDS, A=np.abs(g), **TOL.kwargs())


def st_perturbed_fails(impl):
    s, g = _data()
    s = s.copy()
    s[1, 5, 2, 7] += 0.05  # far past eps_a*|g| + eps_g*|g| (~0.016*|g|), well within 0.2
    return not impl.compare(s, g, coords=COORDS, A=np.abs(g), **TOL.kwargs())


def st_nan_fails(impl):
    s, g = _data()
    s = s.copy()
    s[0, 0, 0, 1] = np.nan
    return not impl.compare(s, g, coords=COORDS, A=np.abs(g), **TOL.kwargs())


def st_shape_mismatch_fails(impl):
    # the simulation produced only the first batch: a truncating comparison sees a perfect prefix
    s, g = _data()
    return not impl.compare(s[:1], g, coords=COORDS, A=None, eps_a=0.0, eps_g=2**-7, rho=2**-6)


def st_small_values_judged(impl):
    # a golden of small values (|g| < 0.005 rounds to 0 with 2 decimals) simulated exactly must pass
    rng = np.random.default_rng(3)
    g = bf16_decode(bf16_encode(rng.standard_normal((4, 16)) * 1e-3)).astype(np.float64)
    return impl.compare(g.copy(), g, coords=("row", "col"), A=np.abs(g), **TOL.kwargs())


def st_bf16_patterns(impl):
    bits = np.array([0x3F80, 0xC000, 0x7F80, 0x0001], dtype=np.uint16)
    v = impl.decode(bits)
    return v[0] == 1.0 and v[1] == -2.0 and np.isposinf(v[2]) and v[3] == np.float32(2.0**-133) and v[3] > 0


def st_fp_sram_bf16(impl):
    class FakeFp:
        bits = bf16_encode(np.array([1.5, -0.25, 3.0e10, 1.0e-30], dtype=np.float32))

    class FakeMachine:
        fp_sram = FakeFp()

    got = impl.decode(FakeFp.bits) if impl is not Real else FpWords(0, 4).read(FakeMachine())
    return np.array_equal(
        got,
        np.array(
            [1.5, -0.25, bf16_decode(bf16_encode([3.0e10]))[0], bf16_decode(bf16_encode([1.0e-30]))[0]],
            dtype=np.float32,
        ),
    )


SELF_TESTS = [
    st_faithful_passes,
    st_perturbed_fails,
    st_nan_fails,
    st_shape_mismatch_fails,
    st_small_values_judged,
    st_bf16_patterns,
    st_fp_sram_bf16,
]


@pytest.mark.parametrize("st", SELF_TESTS, ids=lambda f: f.__name__)
def test_self_test_holds_for_the_real_harness(st):
    assert st(Real)


@pytest.mark.parametrize("impl", [Rule90, Fp16Decode, Truncate, Round2], ids=lambda c: c.name)
def test_harness_mutation_is_caught(impl):
    failing = [st.__name__ for st in SELF_TESTS if not st(impl)]
    assert failing, f"harness mutation {impl.name} passes every self-test"


# ----------------------------------------------------------------------------- reports name elements


def test_perturbed_element_is_named():
    s, g = _data()
    s = s.copy()
    s[1, 5, 2, 7] += 0.5
    r = compare(s, g, coords=COORDS, A=np.abs(g), name="output", group_by=("batch", "head"), **TOL.kwargs())
    assert not r.passed and r.n_fail == 1
    assert r.worst["at"] == "(batch=1, row=5, head=2, col=7)"
    assert r.first["at"] == "(batch=1, row=5, head=2, col=7)"
    assert r.group_fail == {"batch=1,head=2": 1}
    line = r.summary()
    assert "1/768 out of tolerance" in line and "(batch=1, row=5, head=2, col=7)" in line


def test_nan_reports_count_and_first():
    s, g = _data()
    s = s.copy()
    s[0, 3, 1, 4] = np.nan
    s[1, 0, 0, 0] = np.inf
    r = compare(s, g, coords=COORDS, A=np.abs(g), **TOL.kwargs())
    assert not r.passed and r.n_nonfinite == 2
    assert r.first_nonfinite == "(batch=0, row=3, head=1, col=4)"


def test_shape_mismatch_reason():
    s, g = _data()
    r = compare(s.reshape(-1), g, coords=COORDS, **TOL.kwargs())
    assert not r.passed and r.reason.startswith("shape mismatch")


def test_rel_rms_bound():
    s, g = _data()
    # a systematic 1.2 % error stays within (2^-12 + 2^-6)|g| per element, but fails rho = 2^-7 (linear)
    lin = tolerance("linear")
    r = compare(g * (1 + 0.012), g, coords=COORDS, A=np.abs(g), **lin.kwargs())
    assert r.n_fail == 0 and not r.passed and "rel_rms" in r.summary()


def test_tau_noise_floor_and_abs_term():
    g = np.array([0.0, 1.0])
    r = compare(np.array([2.0**-26, 1.0]), g, coords=("i",), A=np.array([1.0, 1.0]), eps_a=0, eps_g=0)
    assert r.passed  # within tau = 2^-24 * max(A)
    r = compare(np.array([2.0**-9, 1.0]), g, coords=("i",), **tolerance("flash_m").kwargs())
    assert r.passed  # abs term 2^-8 replaces eps_a*A
    r = compare(np.array([2.0**-7, 1.0]), g, coords=("i",), **tolerance("flash_m").kwargs())
    assert not r.passed


def test_exact_is_bitwise():
    g = np.array([0.0, -0.0, 1.5])
    assert compare(np.array([0.0, -0.0, 1.5]), g, coords=("i",), exact=True).passed
    r = compare(np.array([0.0, 0.0, 1.5]), g, coords=("i",), exact=True)  # -0 became +0
    assert not r.passed and r.first["at"] == "(i=1)"
    assert not compare(np.array([0.0, -0.0, 1.5078125]), g, coords=("i",), exact=True).passed
    gi = np.array([3, 1, 2], dtype=np.uint32)
    assert compare(gi.copy(), gi, coords=("k",), exact=True).passed
    assert not compare(np.array([3, 2, 1], dtype=np.uint32), gi, coords=("k",), exact=True).passed


def test_tolerance_table_rows():
    assert set(C.TOLERANCES) == {
        "linear",
        "ffn_int",
        "ffn",
        "act",
        "rms",
        "ln",
        "softmax",
        "rope",
        "qkt",
        "flash",
        "flash_m",
        "flash_l",
        "ssum",
        "topk",
        "exact",
        "moe",
        "layer_f64",
    }
    t = tolerance("linear", n_chunks=3, bias=True)
    assert t.eps_a == 2**-12 + 3 * 2**-8 and t.eps_g == 2**-6 and t.rho == 2**-7
    t = tolerance("rms", nb=64)
    assert t.eps_a == 0 and t.eps_g == 2**-5 * 3 and not t.uses_A
    t = tolerance("softmax", nb=16)
    assert t.eps_a == 2**-6 * 1.5 and t.eps_g == 2**-5 * 1.5 and t.rho == 2**-5
    t = tolerance("flash", smax_r=np.array([1.0, 6.0]), Tk=4)
    assert np.allclose(t.eps_a, [2**-6, 2**-5]) and math.isclose(t.rho, 2**-6 + 3 * 2**-8)
    assert math.isclose(tolerance("flash_l", Tk=16).eps_g, 2**-5 + 4 * 2**-7)
    assert tolerance("topk").abs_term == 2**-10 and tolerance("flash_m").abs_term == 2**-8
    assert tolerance("exact").exact
    t = tolerance("moe", rho=0.05)
    assert (t.eps_a, t.eps_g, t.rho, t.uses_A) == (1.0, 0.0, 0.05, True)
    t = tolerance("layer_f64")  # the rel-RMS bound alone: every element's own bound is its stage check's
    assert (t.rho, t.abs_term, t.uses_A, t.exact) == (0.05, math.inf, False, False)


def test_moe_bound_composes_the_stage_rows():
    """Two ranks, one element, hand-evaluated from the ffn and topk rows and the bf16 roundings."""
    w = np.array([[0.75, 0.25]])
    f = np.array([[[2.0], [-1.0]]])
    A = np.array([[[4.0], [2.0]]])
    u, u_add = 2**-8, 2**-8 + 2**-23
    e_f = [2**-7 * 4 + 2**-6 * 2 + 2**-24 * 4, 2**-7 * 2 + 2**-6 * 1 + 2**-24 * 2]
    e_w = [2**-10 + 2**-7 * 0.75, 2**-10 + 2**-7 * 0.25]
    mul = [u * (0.75 + e_w[0]) * (2 + e_f[0]), u * (0.25 + e_w[1]) * (1 + e_f[1])]
    b0 = e_w[0] * (2 + e_f[0]) + 0.75 * e_f[0] + mul[0]  # rank 0: inputs and the product's rounding
    before_add = b0 + e_w[1] * (1 + e_f[1]) + 0.25 * e_f[1] + mul[1]
    add = u_add * (abs(0.75 * 2 - 0.25) + before_add)  # the sum's rounding on |S_1| = 1.25 plus the error so far
    bound, rho = C.moe_bound(w, f, A)
    assert bound.shape == (1, 1) and math.isclose(bound[0, 0], before_add + add, rel_tol=1e-12)
    rms = 2**-6 * (1.5 + 0.25) + e_w[0] * (2 + e_f[0]) + e_w[1] * (1 + e_f[1])  # ffn.rho*|w f| + topk terms
    assert math.isclose(rho, (rms + mul[0] + mul[1] + add) / 1.25, rel_tol=1e-12)


def test_a_failure_only_the_rel_rms_bound_sees_names_the_worst_rows_and_columns():
    # every element within a loose envelope, but rows 2 and 5 systematically off: only the aggregate fails
    g = np.ones((8, 6))
    s = g.copy()
    s[2] += 0.04
    s[5, :3] += 0.06
    res = compare(s, g, coords=("row", "col"), eps_g=0.1, rho=0.01)
    assert not res.passed and res.n_fail == 0
    rows = res.rms_worst["row"]
    assert [r["at"] for r in rows[:2]] == ["row=5", "row=2"]
    assert rows[0]["rel_rms"] == pytest.approx(0.06 / np.sqrt(2)) and rows[0]["over"] == pytest.approx(4.2426, 1e-4)
    assert rows[1]["rel_rms"] == pytest.approx(0.04) and rows[1]["over"] == pytest.approx(4.0) and rows[2]["over"] == 0
    cols = res.rms_worst["col"]
    assert [c["at"] for c in cols] == ["col=0", "col=1", "col=2"]
    assert cols[0]["rel_rms"] == pytest.approx(np.sqrt((0.04**2 + 0.06**2) / 8))
    text = res.summary()
    assert "worst row: row=5 rel_rms 0.0424 (4.24x rho), row=2 rel_rms 0.04 (4x rho)" in text, text
    assert "worst col: col=0" in text and "every element within its envelope" in text
    assert text.count("> 0.01") == 1  # the aggregate is named once


def test_an_element_failure_lists_no_rms_slices_when_the_aggregate_passes():
    g = np.ones((8, 6))
    s = g.copy()
    s[3, 4] = 1.5
    res = compare(s, g, coords=("row", "col"), eps_g=0.01, rho=0.5)
    assert not res.passed and res.n_fail == 1 and res.rms_worst is None
