"""bf16 conversions (memory.md §3.1) cross-checked bit-exactly against ml_dtypes.bfloat16."""

import ml_dtypes
import numpy as np
import pytest

from plena_sim.numerics.formats import (
    bf16_bits_array_to_f32,
    bf16_bits_to_f32,
    f32_array_to_bf16_bits,
    f32_to_bf16_bits,
    round_bf16,
    round_bf16_array,
)

ALL_BF16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _is_nan_bits32(u):
    return ((u & 0x7F800000) == 0x7F800000) & ((u & 0x007FFFFF) != 0)


def _spec_nan_bits(u32):
    """memory.md §3.1 NaN rule: ((u >> 16) & 0x8000) | 0x7FC0."""
    return (((u32 >> 16) & 0x8000) | 0x7FC0).astype(np.uint16)


def test_all_bf16_patterns_widen_exactly_like_ml_dtypes():
    ours = bf16_bits_array_to_f32(ALL_BF16).view(np.uint32)
    ref = ALL_BF16.view(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32)
    # bf16 -> f32 is `bits << 16` for every pattern, NaN payloads included.
    np.testing.assert_array_equal(ours, ALL_BF16.astype(np.uint32) << 16)
    np.testing.assert_array_equal(ours, ref)


def test_all_bf16_patterns_narrow_back_to_themselves():
    f = bf16_bits_array_to_f32(ALL_BF16)
    back = f32_array_to_bf16_bits(f)
    u = ALL_BF16.astype(np.uint32) << 16
    nan = _is_nan_bits32(u)
    assert nan.sum() == 2 * 127  # 2 signs x (2^7 - 1) non-zero mantissas
    np.testing.assert_array_equal(back[~nan], ALL_BF16[~nan])
    # NaNs are canonicalised to the quiet NaN 0x7FC0 with the sign kept (our rule, not the payload).
    np.testing.assert_array_equal(back[nan], _spec_nan_bits(u[nan]))


def _random_f32_bits(n, seed):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    # make ties (low 16 bits exactly 0x8000) and near-ties frequent
    k = n // 4
    u[:k] = (u[:k] & 0xFFFF0000) | 0x8000
    u[k : 2 * k] = (u[k : 2 * k] & 0xFFFF0000) | rng.choice(
        np.array([0x7FFF, 0x8001, 0x0000, 0xFFFF], dtype=np.uint32), size=k
    )
    return u


def test_random_f32_round_like_ml_dtypes():
    u = _random_f32_bits(2_000_000, 1)
    x = u.view(np.float32)
    ours = f32_array_to_bf16_bits(x)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = _is_nan_bits32(u)
    np.testing.assert_array_equal(ours[~nan], ref[~nan])
    # NaN: the spec mandates ((u>>16)&0x8000)|0x7FC0.  ml_dtypes is only required to give *a* NaN
    # (its canonicalisation rule is not part of our contract), so we check NaN-ness there and the
    # exact bits against the spec formula.
    np.testing.assert_array_equal(ours[nan], _spec_nan_bits(u[nan]))
    assert np.all(np.isnan(ref[nan].view(ml_dtypes.bfloat16).astype(np.float32)))


def test_spec_formula_on_random_non_nan():
    u = _random_f32_bits(500_000, 2)
    u = u[~_is_nan_bits32(u)]
    expect = ((u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(f32_array_to_bf16_bits(u.view(np.float32)), expect)


@pytest.mark.parametrize(
    "f32_bits, bf16_bits",
    [
        (0x3F800000, 0x3F80),  # 1.0
        (0x3F808000, 0x3F80),  # 1 + 2^-8: tie, even stays
        (0x3F818000, 0x3F82),  # tie, odd rounds up
        (0x3F808001, 0x3F81),  # just above a tie
        (0x7F7FFFFF, 0x7F80),  # FLT_MAX overflows to +Inf
        (0xFF7F8000, 0xFF80),  # tie at the top rounds to -Inf
        (0x7F7F7FFF, 0x7F7F),  # just below the overflow tie
        (0x00018000, 0x0002),  # subnormal tie, odd -> up
        (0x00008000, 0x0000),  # subnormal tie, even -> 0
        (0x80000000, 0x8000),  # -0
        (0x7F800000, 0x7F80),  # +Inf
        (0x7F800001, 0x7FC0),  # signalling NaN -> quiet canonical
        (0xFFC12345, 0xFFC0),  # negative NaN keeps its sign
    ],
)
def test_scalar_examples(f32_bits, bf16_bits):
    x = np.uint32(f32_bits).view(np.float32)
    assert int(f32_to_bf16_bits(x)) == bf16_bits
    r = round_bf16(x)
    assert int(np.float32(r).view(np.uint32)) == bf16_bits << 16
    assert int(np.float32(bf16_bits_to_f32(np.uint16(bf16_bits))).view(np.uint32)) == bf16_bits << 16


def test_round_bf16_array_matches_scalar():
    u = _random_f32_bits(10_000, 3)
    x = u.view(np.float32)
    arr = round_bf16_array(x).view(np.uint32)
    expect = f32_array_to_bf16_bits(x).astype(np.uint32) << 16
    np.testing.assert_array_equal(arr, expect)


# --------------------------------------------------------------------- the host module (plena_sim.numerics.bf16)


def test_host_codec_matches_the_kernels_on_every_pattern():
    """plena_sim.numerics.bf16 (numpy, host side) is bit-identical to the njit kernels: widening of all 65536
    patterns, and narrowing of all of them widened (NaN canonicalisation included)."""
    from plena_sim.numerics import bf16

    f = bf16.decode(ALL_BF16)
    np.testing.assert_array_equal(f.view(np.uint32), bf16_bits_array_to_f32(ALL_BF16).view(np.uint32))
    np.testing.assert_array_equal(bf16.encode(f), f32_array_to_bf16_bits(f))
    ref = ALL_BF16.view(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(f.view(np.uint32), ref)


def test_host_codec_matches_the_kernels_on_random_f32():
    from plena_sim.numerics import bf16

    x = _random_f32_bits(2_000_000, 4).view(np.float32)
    np.testing.assert_array_equal(bf16.encode(x), f32_array_to_bf16_bits(x))
    np.testing.assert_array_equal(bf16.round_values(x).view(np.uint32), round_bf16_array(x).view(np.uint32))


def test_host_codec_shapes_float64_and_scalars():
    from plena_sim.numerics import bf16

    v = np.array([[1.0, 1e300], [-np.nan, 2.0**-140]])  # float64: cast to f32 first (RNE)
    bits = bf16.encode(v)
    assert bits.shape == (2, 2) and bits.dtype == np.uint16
    with np.errstate(over="ignore"):
        f32 = v.astype(np.float32).reshape(-1)
    np.testing.assert_array_equal(bits, f32_array_to_bf16_bits(f32).reshape(2, 2))
    assert bf16.decode(np.array([0x3F80, 0x1_3F80], dtype=np.int64)).tolist() == [1.0, 1.0]  # wraps to 16 bits
    assert bf16.encode_scalar(1.0 + 2.0**-8) == 0x3F80 and bf16.encode_scalar(float("nan")) == bf16.NAN_BITS
    assert bf16.decode_scalar(0xC0A0) == np.float32(-5.0)
