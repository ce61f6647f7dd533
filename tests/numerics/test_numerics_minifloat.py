"""Generic minifloat codec (memory.md §3.2/§3.3) against ml_dtypes and hand-computed codes.

Format parameters come from config types: E4M3 is the reference config's MX element type; other
formats are built directly as FpType."""

import math

import ml_dtypes
import numpy as np
import pytest

from plena_sim.config import FpType, default_config
from plena_sim.numerics.formats import (
    FLAG_NAN,
    FLAG_NORMAL,
    FLAG_SATURATED,
    e8m0_decode,
    f32_array_to_bf16_bits,
    minifloat_decode,
    minifloat_decode_array,
    minifloat_decode_table,
    minifloat_encode,
    minifloat_encode_array,
)

E4M3 = default_config().precision["HBM_M_WEIGHT_TYPE"].elem
E5M2 = FpType(True, 5, 2)
ALL_BF16_VALUES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)


def max_normal(f: FpType) -> float:
    return (2 - 2.0**-f.mantissa) * 2.0**f.emax


def enc(x, f: FpType, saturate: bool):
    with np.errstate(invalid="ignore"):  # f32 signalling NaNs become quiet f64 NaNs
        x = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    codes = np.empty(x.size, np.int64)
    flags = np.empty(x.size, np.int64)
    minifloat_encode_array(x, f.exponent, f.mantissa, saturate, codes, flags)
    return codes, flags


def dec(codes, f: FpType):
    out = np.empty(len(codes), np.float64)
    minifloat_decode_array(np.asarray(codes, np.int64), f.exponent, f.mantissa, f.sign, out)
    return out


def test_e4m3_parameters_from_config():
    assert (E4M3.sign, E4M3.exponent, E4M3.mantissa) == (True, 4, 3)
    assert (E4M3.bias, E4M3.emax, max_normal(E4M3)) == (7, 7, 240.0)


def test_e4m3_table_of_memory_md():
    codes = [0x00, 0x80, 0x01, 0x07, 0x08, 0x38, 0x40, 0x77]
    values = [0.0, -0.0, 2.0**-9, 7 * 2.0**-9, 2.0**-6, 1.0, 2.0, 240.0]
    got = dec(codes, E4M3)
    np.testing.assert_array_equal(got, values)
    assert math.copysign(1.0, got[1]) == -1.0
    assert minifloat_decode(0x78, 4, 3, True) == math.inf
    assert all(math.isnan(minifloat_decode(c, 4, 3, True)) for c in range(0x79, 0x80))


def _e4m3_probe_values():
    """All codes' values, every midpoint between neighbours and its f32 neighbours, both signs."""
    finite = dec(np.arange(0x78), E4M3)  # 0 .. 240
    mids = (finite[:-1] + finite[1:]) / 2
    m32 = mids.astype(np.float32)
    probes = np.concatenate(
        [
            finite.astype(np.float32),
            m32,
            np.nextafter(m32, np.float32(0)),
            np.nextafter(m32, np.float32(np.inf)),
            np.float32([2.0**-10, 2.0**-11]),
        ]
    )
    return np.concatenate([probes, -probes])


def _check_e4m3_mx_mode_vs_ml_dtypes(x32):
    """MX element mode == ml_dtypes.float8_e4m3 after clipping to +-240 (memory.md §3.2 note)."""
    x32 = x32[~np.isnan(x32)]
    codes, flags = enc(x32, E4M3, True)
    ref = np.clip(x32, -240, 240).astype(ml_dtypes.float8_e4m3).view(np.uint8)
    np.testing.assert_array_equal(codes, ref.astype(np.int64))
    # flags: saturated exactly where |x| rounds past max_normal (|x| >= 248 = 240 + half an ulp)
    np.testing.assert_array_equal(flags == FLAG_SATURATED, np.abs(x32) >= 248)
    assert np.all((flags == FLAG_NORMAL) | (flags == FLAG_SATURATED))


def test_e4m3_all_in_range_values_and_midpoints():
    _check_e4m3_mx_mode_vs_ml_dtypes(_e4m3_probe_values())


def test_e4m3_every_bf16_pattern():
    # Exhaustive over the values the device actually encodes (VRAM holds bf16).
    _check_e4m3_mx_mode_vs_ml_dtypes(ALL_BF16_VALUES)


def test_e4m3_random_f32():
    rng = np.random.default_rng(7)
    u = rng.integers(0, 1 << 32, size=400_000, dtype=np.uint64).astype(np.uint32)
    wide = u.view(np.float32)
    near = (rng.standard_normal(400_000) * 2.0 ** rng.integers(-14, 10, 400_000)).astype(np.float32)
    _check_e4m3_mx_mode_vs_ml_dtypes(np.concatenate([wide, near]))


def test_e4m3_overflow_saturates_where_ml_dtypes_gives_inf():
    x = np.float32([248.0, -1e6, np.inf, -np.inf, 3.0e38])
    codes, flags = enc(x, E4M3, True)
    # Deliberate difference: MX element mode saturates to +-max_normal (0x77/0xF7) and counts it;
    # ml_dtypes.float8_e4m3 (IEEE-like) overflows to +-Inf (0x78/0xF8).
    assert codes.tolist() == [0x77, 0xF7, 0x77, 0xF7, 0x77], "MX mode saturates instead of producing Inf"
    assert flags.tolist() == [FLAG_SATURATED] * 5
    ml = x.astype(ml_dtypes.float8_e4m3).view(np.uint8)
    assert ml.tolist() == [0x78, 0xF8, 0x78, 0xF8, 0x78], "ml_dtypes overflows to Inf (IEEE-like)"


def test_e4m3_nan_mx_mode_is_zero_code():
    codes, flags = enc(np.float64([np.nan, -np.nan]), E4M3, True)
    # Deliberate difference: MX element mode encodes NaN as 0x00 (counted), ml_dtypes keeps a NaN.
    assert codes.tolist() == [0x00, 0x00] and flags.tolist() == [FLAG_NAN, FLAG_NAN]


@pytest.mark.parametrize("f, mldt", [(E4M3, ml_dtypes.float8_e4m3), (E5M2, ml_dtypes.float8_e5m2)])
def test_plain_mode_matches_ieee_like_ml_dtypes_including_inf(f, mldt):
    rng = np.random.default_rng(11)
    u = rng.integers(0, 1 << 32, size=300_000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([ALL_BF16_VALUES, u.view(np.float32)])
    x = x[~np.isnan(x)]
    codes, flags = enc(x, f, False)
    with np.errstate(over="ignore"):
        ref = x.astype(mldt).view(np.uint8).astype(np.int64)
    np.testing.assert_array_equal(codes, ref)  # Plain (IEEE) mode: overflow -> +-Inf like ml_dtypes
    assert np.all(flags == FLAG_NORMAL)
    # canonical NaN: exponent all ones, mantissa MSB set, sign kept
    c, fl = enc(np.float64([np.nan, -np.nan]), f, False)
    exp_all = ((1 << f.exponent) - 1) << f.mantissa
    top = 1 << (f.mantissa - 1)
    sign = 1 << (f.exponent + f.mantissa)
    assert c.tolist() == [exp_all | top, sign | exp_all | top] and fl.tolist() == [FLAG_NAN, FLAG_NAN]


def test_e5m2_mx_mode_matches_ml_dtypes_after_clipping():
    x = ALL_BF16_VALUES[~np.isnan(ALL_BF16_VALUES)]
    codes, flags = enc(x, E5M2, True)
    mn = max_normal(E5M2)
    assert mn == 57344.0
    ref = np.clip(x, -mn, mn).astype(ml_dtypes.float8_e5m2).view(np.uint8)
    np.testing.assert_array_equal(codes, ref.astype(np.int64))
    assert np.all(codes & 0x7F <= 0x7B)  # never an Inf/NaN code in MX mode


@pytest.mark.parametrize("f, mldt", [(E4M3, ml_dtypes.float8_e4m3), (E5M2, ml_dtypes.float8_e5m2)])
def test_decode_all_codes_matches_ml_dtypes(f, mldt):
    codes = np.arange(256)
    ours = dec(codes, f)
    ref = codes.astype(np.uint8).view(mldt).astype(np.float64)
    assert np.array_equal(ours, ref, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(ours[~np.isnan(ours)]), np.signbit(ref[~np.isnan(ref)]))
    np.testing.assert_array_equal(
        minifloat_decode_table(f.exponent, f.mantissa, f.sign).view(np.uint64), ours.view(np.uint64)
    )


@pytest.mark.parametrize(
    "y, code, flag",
    [
        (1.0, 0x38, 0),
        (1.0625, 0x38, 0),  # tie -> even 1.0
        (1.1875, 0x3A, 0),  # tie -> even 1.25
        (1.96875, 0x40, 0),  # mantissa carry into the exponent
        (5.5 * 2**-9, 0x06, 0),  # subnormal tie -> 6 * 2^-9
        (2**-10, 0x00, 0),  # exactly min_sub/2 -> even 0
        (-(2**-10), 0x80, 0),  # ... keeping the sign
        (1.5 * 2**-10, 0x01, 0),  # above min_sub/2
        (7.5 * 2**-9, 0x08, 0),  # largest subnormal rounds up into min_normal
        (100.0, 0x6C, 0),  # 1.5625 * 2^6 tie -> 1.5 * 2^6 = 96
        (241.0, 0x77, 0),  # rounds to 240, not an overflow
        (-248.0, 0xF7, 1),  # rounds past 240 -> saturated
    ],
)
def test_e4m3_single_values(y, code, flag):
    assert minifloat_encode(y, E4M3.exponent, E4M3.mantissa, True) == (code, flag)


def test_encode_decode_roundtrip_all_codes_generic_formats():
    for f in (E4M3, E5M2, FpType(True, 2, 1), FpType(True, 3, 4), FpType(True, 6, 9), FpType(True, 5, 10)):
        n = 1 << f.bits
        codes = np.arange(n, dtype=np.int64)
        vals = dec(codes, f)
        finite = np.isfinite(vals)
        back, flags = enc(vals[finite], f, True)
        np.testing.assert_array_equal(back, codes[finite], err_msg=f.describe())
        assert np.all(flags == 0)
        back_p, _ = enc(vals[np.isinf(vals)], f, False)
        np.testing.assert_array_equal(back_p, codes[np.isinf(vals)])


def test_e8m7_plain_equals_bf16_rule_and_e8m23_is_identity():
    rng = np.random.default_rng(5)
    u = rng.integers(0, 1 << 32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x = u.view(np.float32)
    codes, _ = enc(x, FpType(True, 8, 7), False)
    np.testing.assert_array_equal(codes, f32_array_to_bf16_bits(x).astype(np.int64))
    nonnan = ~np.isnan(x)
    codes32, _ = enc(x[nonnan], FpType(True, 8, 23), False)
    np.testing.assert_array_equal(codes32, u[nonnan].astype(np.int64))


def test_subnormal_and_overflow_boundaries_generic():
    f = FpType(True, 5, 10)  # f16
    mn = max_normal(f)
    half_ulp_top = 2.0 ** (f.emax - f.mantissa - 1)
    assert minifloat_encode(mn + half_ulp_top, 5, 10, False) == (0x7C00, 0)  # tie at the top -> Inf
    assert minifloat_encode(mn + half_ulp_top, 5, 10, True) == (0x7BFF, 1)  # MX mode saturates
    assert minifloat_encode(np.nextafter(mn + half_ulp_top, 0), 5, 10, False) == (0x7BFF, 0)
    assert minifloat_encode(-math.inf, 5, 10, False) == (0xFC00, 0)
    assert minifloat_encode(2.0**-24, 5, 10, False) == (0x0001, 0)
    assert minifloat_encode(-0.0, 5, 10, False) == (0x8000, 0)


def test_e8m0_decode():
    assert e8m0_decode(0) == 0.0
    assert e8m0_decode(1) == 2.0**-126
    assert e8m0_decode(127) == 1.0
    assert e8m0_decode(0x79) == 2.0**-6
    assert e8m0_decode(254) == 2.0**127
    assert e8m0_decode(255) == math.inf


def _ldexp_decode(code: int, E: int, Mt: int) -> float:
    """memory.md §3.2 decode written with math.ldexp (the definition the bit-built powers of two must equal)."""
    s, e, m = (code >> (E + Mt)) & 1, (code >> Mt) & ((1 << E) - 1), code & ((1 << Mt) - 1)
    bias = (1 << (E - 1)) - 1
    if e == (1 << E) - 1:
        v = math.inf if m == 0 else math.nan
    elif e == 0:
        v = math.ldexp(float(m), 1 - bias - Mt)
    else:
        v = math.ldexp(float(m + (1 << Mt)), e - bias - Mt)
    return -v if s else v


def test_extreme_exponent_formats_decode_and_round_trip():
    """E = 10 and 11 reach powers of two outside the normal float64 exponents (f64 subnormals): every code
    decodes as the ldexp definition and encodes back to itself."""
    for E, Mt in ((11, 0), (11, 2), (10, 3), (8, 23)):
        n = 1 << (1 + E + Mt)
        codes = range(n) if n <= 1 << 15 else np.random.default_rng(E).integers(0, n, 20_000).tolist()
        for c in codes:
            got = minifloat_decode(c, E, Mt, True)
            want = _ldexp_decode(c, E, Mt)
            assert (got == want and math.copysign(1, got) == math.copysign(1, want)) or (got != got and want != want)
            if math.isfinite(want):
                assert minifloat_encode(want, E, Mt, True) == (c, 0), (E, Mt, c)
