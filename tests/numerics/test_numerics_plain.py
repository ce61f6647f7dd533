"""Plain HBM types (memory.md §3.4): bf16, f16 (vs numpy.float16), f32, and an 8-bit plain type."""

import ml_dtypes
import numpy as np
import pytest

from plena_sim.config import FpType, PlainType, default_config
from plena_sim.numerics.formats import (
    decode_tensor,
    encode_tensor,
    f32_array_to_bf16_bits,
    plain_decode_row,
    plain_encode_row,
)

BF16 = default_config().precision["VECTOR_SRAM_TYPE"]  # Plain Fp{true, 8, 7}
F16 = PlainType(FpType(True, 5, 10))
F32 = PlainType(FpType(True, 8, 23))
E4M3_PLAIN = PlainType(FpType(True, 4, 3))


def random_f32(n, seed):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    near = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 20, n)).astype(np.float32)
    return np.concatenate([u.view(np.float32), near])


def _nan_mask_f32(x):
    return np.isnan(x)


def test_bf16_plain_encode_is_bf16_rule_and_roundtrips():
    assert BF16.data == FpType(True, 8, 7)
    x = random_f32(200_000, 1)
    elem, scale, counts = encode_tensor(x, BF16)
    assert scale.size == 0 and counts.tolist() == [0, 0]
    np.testing.assert_array_equal(elem.view("<u2"), f32_array_to_bf16_bits(x))
    dec = decode_tensor(elem, None, BF16)
    np.testing.assert_array_equal(dec.view(np.uint32), elem.view("<u2").astype(np.uint32) << 16)
    # decode -> encode of every bf16 pattern is the identity except NaN canonicalisation
    allb = np.arange(1 << 16, dtype=np.uint32).astype("<u2")
    d = decode_tensor(allb.view(np.uint8), None, BF16)
    e2, _, _ = encode_tensor(d, BF16)
    nan = np.isnan(d)
    np.testing.assert_array_equal(e2.view("<u2")[~nan], allb[~nan])
    assert set(e2.view("<u2")[nan].tolist()) == {0x7FC0, 0xFFC0}


def test_f16_encode_matches_numpy_float16_bit_exact():
    probes = np.float32(
        [
            65504,
            65519.99,
            65520,
            70000,
            1e9,
            np.inf,
            -np.inf,
            -65520,
            2.0**-24,
            2.0**-25,
            2.0**-25 * 1.0000001,
            3 * 2.0**-26,
            -0.0,
            1 + 2.0**-11,
        ]
    )
    x = np.concatenate([probes, random_f32(300_000, 2)])
    elem, _, _ = encode_tensor(x, F16)
    ours = elem.view("<u2")
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    nan = _nan_mask_f32(x)
    np.testing.assert_array_equal(ours[~nan], ref[~nan])  # overflow -> +-Inf included
    assert ours[:8].tolist() == [0x7BFF, 0x7BFF, 0x7C00, 0x7C00, 0x7C00, 0x7C00, 0xFC00, 0xFC00]
    # NaN: canonical quiet NaN with the sign (numpy may keep payload bits; our rule is §3.2's)
    signs = np.signbit(x[nan])
    np.testing.assert_array_equal(ours[nan], np.where(signs, 0xFE00, 0x7E00).astype(np.uint16))


def test_f16_decode_all_codes_matches_numpy():
    codes = np.arange(1 << 16, dtype=np.uint32).astype("<u2")
    ours = decode_tensor(codes.view(np.uint8), None, F16)
    ref = codes.view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(ours.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])
    assert np.all(np.isnan(ours[nan]))
    np.testing.assert_array_equal(np.signbit(ours[nan]), np.signbit(ref[nan]))
    # NaN payload is left-aligned into the f32 mantissa (f16 0x7E01 -> f32 0x7FC02000)
    assert ours.view(np.uint32)[0x7E01] == 0x7FC02000


def test_f16_roundtrip_of_all_finite_codes():
    codes = np.arange(1 << 16, dtype=np.uint32).astype("<u2")
    vals = decode_tensor(codes.view(np.uint8), None, F16)
    fin = ~np.isnan(vals)
    back, _, _ = encode_tensor(vals[fin], F16)
    np.testing.assert_array_equal(back.view("<u2"), codes[fin])


def test_f32_encode_is_identity_and_decode_is_reinterpretation():
    x = random_f32(200_000, 3)
    elem, _, _ = encode_tensor(x, F32)
    u = x.view(np.uint32)
    nan = np.isnan(x)
    np.testing.assert_array_equal(elem.view("<u4")[~nan], u[~nan])
    # NaN -> canonical quiet NaN with sign (memory.md §3.2 Plain mode)
    np.testing.assert_array_equal(elem.view("<u4")[nan], (u[nan] & 0x80000000) | 0x7FC00000)
    raw = np.random.default_rng(4).integers(0, 256, 4000, dtype=np.uint64).astype(np.uint8)
    dec = decode_tensor(raw, None, F32)
    np.testing.assert_array_equal(dec.view(np.uint32), raw.view("<u4"))


def test_plain_e4m3_bytes_match_ml_dtypes_ieee():
    x = np.float32([1.0, -240.0, 248.0, -1000.0, 2.0**-10, 0.0107421875])
    elem, _, _ = encode_tensor(x, E4M3_PLAIN)
    assert elem.tolist() == [0x38, 0xF7, 0x78, 0xF8, 0x00, 0x06]
    np.testing.assert_array_equal(elem, x.astype(ml_dtypes.float8_e4m3).view(np.uint8))
    dec = decode_tensor(elem, None, E4M3_PLAIN)
    assert dec.tolist() == [1.0, -240.0, np.inf, -np.inf, 0.0, 0.01171875]


def test_kernel_width_checks():
    with pytest.raises(ValueError):
        plain_encode_row(np.zeros(4, np.float32), 5, 10, 1, np.zeros(8, np.uint8))
    with pytest.raises(ValueError):
        plain_decode_row(np.zeros(4, np.uint8), 5, 10, 2, np.zeros(4, np.float32))


def test_wrappers_reject_int_and_odd_types():
    from plena_sim.config import IntType

    with pytest.raises(ValueError, match="Int"):
        encode_tensor(np.zeros(4, np.float32), PlainType(IntType(32)))
    with pytest.raises(ValueError, match="8, 16 or 32"):
        encode_tensor(np.zeros(4, np.float32), PlainType(FpType(True, 4, 2)))
