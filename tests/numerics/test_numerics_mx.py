"""MX block codec (memory.md §4): worked examples of §4.1, counts, clamping and a round-trip bound."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plena_sim.config import FpType, MxType, default_config
from plena_sim.numerics.formats import decode_tensor, encode_tensor, mx_decode_row, mx_encode_row

MXFP8 = default_config().precision["HBM_M_WEIGHT_TYPE"]  # Mx{E4M3, E8M0, block 8}
E8M0 = MXFP8.scale


def encode_block(values, t=MXFP8):
    x = np.asarray(values, dtype=np.float32)
    elem, scale, counts = encode_tensor(x, t)
    return elem, scale, counts, decode_tensor(elem, scale, t)


def f32_bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32).tolist()


# --------------------------------------------------------------------------- memory.md §4.1

WORKED = {
    "A": (
        [1.0, -0.5, 0.25, 3.0, -2.0, 0.0, 0.125, 1.5],
        0x79,
        "68 E0 58 74 F0 00 50 6C",
        [1.0, -0.5, 0.25, 3.0, -2.0, 0.0, 0.125, 1.5],
        0,
        0,
    ),
    "B": (
        [255.0, 1.0625, 1.1875, 1.96875, 0.0107421875, -241.0, 100.0, 0.5],
        0x7F,
        "77 38 3A 40 06 F7 6C 30",
        [240, 1.0, 1.25, 2.0, 0.01171875, -240, 96, 0.5],
        0,
        1,
    ),
    "C": (
        [0.75, -0.060546875, 2.0**-19, -(2.0**-18), 3 * 2.0**-18, 0.001953125, -0.75, 0.30078125],
        0x77,
        "74 D8 00 80 02 30 F4 6A",
        [0.75, -0.0625, 0.0, -0.0, 2.0**-16, 0.001953125, -0.75, 0.3125],
        0,
        0,
    ),
    "D": ([0.0] * 8, 0x00, "00 00 00 00 00 00 00 00", [0.0] * 8, 0, 0),
    "special": (
        [math.nan, 1.0, math.inf, -3.0, 0.0, 0.0, 0.0, 0.0],
        0xF7,
        "00 00 77 80 00 00 00 00",
        [0.0, 0.0, 0.0, -0.0, 0.0, 0.0, 0.0, 0.0],
        1,
        2,
    ),
}


@pytest.mark.parametrize("name", list(WORKED))
def test_worked_examples(name):
    inputs, scale_code, elem_hex, decoded, nan_count, saturated = WORKED[name]
    elem, scale, counts, dec = encode_block(inputs)
    assert scale.tolist() == [scale_code]
    assert elem.tobytes().hex(" ").upper() == elem_hex
    assert counts.tolist() == [nan_count, saturated]
    if name == "special":
        # +Inf -> FLT_MAX -> saturates to 240 * 2^120 (code 0x77); -3.0 underflows to -0 under that scale
        decoded = list(decoded)
        decoded[2] = 240.0 * 2.0**120
    assert f32_bits(dec) == f32_bits(decoded)  # bit-exact, signs of zero included


def test_worked_example_a_is_exact():
    inputs = WORKED["A"][0]
    _e, _s, _c, dec = encode_block(inputs)
    assert f32_bits(dec) == f32_bits(inputs)


def test_negative_infinity_and_counts_accumulate_over_blocks_and_calls():
    row = np.float32(
        [
            -np.inf,
            1.0,
            0,
            0,
            0,
            0,
            0,
            0,  # block 0: -Inf counts twice
            np.nan,
            np.nan,
            -0.0,
            0,
            0,
            0,
            0,
            0,  # block 1: all-zero + 2 NaN
            300.0,
            1.0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]
    )  # block 2: shared = 8 - 7 = 1
    elem = np.zeros(24, np.uint8)
    scale = np.zeros(3, np.uint8)
    counts = np.array([10, 20], np.int64)
    mx_encode_row(row, 4, 3, 8, elem, scale, counts)
    assert counts.tolist() == [12, 22]
    assert scale.tolist() == [0xF7, 0x00, 0x7F + 1]
    assert elem[:2].tolist() == [0xF7, 0x00]
    assert elem[8:16].tolist() == [0x00, 0x00, 0x80, 0, 0, 0, 0, 0]
    # 300 / 2^1 = 150 = 1.171875 * 2^7 -> nearest E4M3 1.125*2^7 = 144 (code 0x71) -> 288
    assert elem[16] == 0x71
    out = np.empty(24, np.float32)
    mx_decode_row(elem, scale, 4, 3, 8, out)
    assert out[16] == 288.0 and out[0] == -240.0 * 2.0**120


def test_scale_clamped_to_minus_126():
    # amax = 2^-120: floor(log2) - 7 = -127 -> clamped to -126 (code 1); y = 2^-120 * 2^126 = 64
    e, s, c, dec = encode_block([2.0**-120, -(2.0**-121)] + [0.0] * 6)
    assert s.tolist() == [1]
    assert e[:2].tolist() == [0x68, 0xE0]  # 64 = 1.0*2^6 -> (6+7)<<3; -32 -> 0x80|(5+7)<<3
    assert dec[:2].tolist() == [2.0**-120, -(2.0**-121)]
    # f32 subnormal amax: y underflows to 0 under the clamped scale
    e, s, c, dec = encode_block([2.0**-140] + [0.0] * 7)
    assert s.tolist() == [1] and e.tolist() == [0] * 8 and dec.tolist() == [0.0] * 8


def test_sixteen_bit_elements_are_little_endian():
    t = MxType(FpType(True, 5, 10), E8M0, 4)
    e, s, c, dec = encode_block([1.0, -0.5, 0.0, 1.0009765625], t)
    # amax 1.0009765625 -> floor(log2) 0, emax 15 -> shared -15 (code 112); 1.0 -> y = 2^15 -> 0x7800
    assert s.tolist() == [112]
    assert e.tobytes().hex(" ") == "00 78 00 f4 00 00 01 78"
    assert dec.tolist() == [1.0, -0.5, 0.0, 1.0009765625]


def test_decode_scale_255_is_inf_and_0_is_zero():
    elem = np.array([0x38, 0x00, 0xB8, 0x38], np.uint8)
    out = np.empty(4, np.float32)
    mx_decode_row(elem, np.array([255, 0], np.uint8), 4, 3, 2, out)
    assert out[0] == np.inf and np.isnan(out[1])  # 1.0*inf, 0*inf (IEEE)
    assert out[2] == 0.0 and out[3] == 0.0  # scale code 0 -> 0.0


def test_row_length_must_be_multiple_of_block():
    with pytest.raises(ValueError):
        mx_encode_row(
            np.zeros(12, np.float32), 4, 3, 8, np.zeros(12, np.uint8), np.zeros(2, np.uint8), np.zeros(2, np.int64)
        )
    with pytest.raises(ValueError, match="multiple of the MX block"):
        encode_tensor(np.zeros((2, 12), np.float32), MXFP8)


def test_encode_tensor_2d_matches_rowwise():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 32)) * 10).astype(np.float32)
    elem, scale, counts = encode_tensor(x, MXFP8)
    assert elem.size == 160 and scale.size == 20 and counts.tolist() == [0, 0]
    for r in range(5):
        e2, s2, _ = encode_tensor(x[r], MXFP8)
        np.testing.assert_array_equal(elem[r * 32 : (r + 1) * 32], e2)
        np.testing.assert_array_equal(scale[r * 4 : (r + 1) * 4], s2)
    dec = decode_tensor(elem, scale, MXFP8, (5, 32))
    assert dec.shape == (5, 32)


# --------------------------------------------------------------------------- round-trip bound

MX_TYPES = [
    MXFP8,
    MxType(FpType(True, 5, 2), E8M0, 32),  # MXFP8 E5M2
    MxType(FpType(True, 3, 4), E8M0, 16),
    MxType(FpType(True, 5, 10), E8M0, 8),  # 16-bit elements
]


def _check_roundtrip(x: np.ndarray, t: MxType):
    f = t.elem
    k = t.block
    Mt = f.mantissa
    emax, bias = f.emax, f.bias
    max_normal = (2 - 2.0**-Mt) * 2.0**emax
    elem, scale, counts, dec = encode_block(x, t)
    assert counts[0] == 0
    n_sat = 0
    for b in range(x.size // k):
        blk = x[b * k : (b + 1) * k].astype(np.float64)
        amax = float(np.max(np.abs(blk)))
        if amax == 0.0:
            assert scale[b] == 0
            assert f32_bits(dec[b * k : (b + 1) * k]) == f32_bits(blk)
            continue
        shared = min(max(math.frexp(amax)[1] - 1 - emax, -126), 127)
        assert scale[b] == shared + 127
        for j, xv in enumerate(blk):
            d = float(dec[b * k + j])
            y = xv / 2.0**shared
            err = abs(d - xv)
            if y == 0.0:
                assert d == 0.0
                continue
            ey = max(math.frexp(abs(y))[1] - 1, 1 - bias)
            ulp = 2.0 ** (ey - Mt)
            if abs(y) >= max_normal + 2.0 ** (emax - Mt) / 2:  # rounds past max_normal
                n_sat += 1
                assert d == math.copysign(max_normal, xv) * 2.0**shared
                assert err <= 2.0 ** (emax - Mt) * 2.0**shared
            else:
                assert err <= 0.5 * ulp * 2.0**shared, (t.describe(), xv, d, shared)
                assert math.copysign(1.0, d) == math.copysign(1.0, xv)
    assert counts[1] == n_sat


finite_elem = st.one_of(
    st.sampled_from([0.0, -0.0]),
    st.builds(
        lambda m, e, s: s * m * 2.0**e,
        st.floats(1.0, 2.0, exclude_max=True),
        st.integers(-20, 20),
        st.sampled_from([1.0, -1.0]),
    ),
)


@st.composite
def mx_rows(draw):
    t = draw(st.sampled_from(MX_TYPES))
    nblocks = draw(st.integers(1, 3))
    vals = draw(st.lists(finite_elem, min_size=nblocks * t.block, max_size=nblocks * t.block))
    x = np.asarray(vals, dtype=np.float32)
    if draw(st.booleans()):  # a block whose amax is exactly a power of two
        blk = draw(st.integers(0, nblocks - 1))
        pos = draw(st.integers(0, t.block - 1))
        seg = x[blk * t.block : (blk + 1) * t.block]
        seg[pos] = 0.0
        amax = float(np.max(np.abs(seg)))
        p2 = 2.0 ** (math.frexp(amax)[1] if amax else draw(st.integers(-20, 20)))
        seg[pos] = draw(st.sampled_from([p2, -p2]))
    return t, x


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mx_rows())
def test_roundtrip_error_at_most_half_ulp_times_scale(case):
    t, x = case
    _check_roundtrip(x, t)


@pytest.mark.parametrize("t", MX_TYPES, ids=lambda t: t.elem.describe())
def test_roundtrip_power_of_two_amax_is_exact(t):
    k = t.block
    x = np.zeros(k, np.float32)
    x[0] = 2.0**5
    x[1] = -(2.0**3)
    elem, scale, counts, dec = encode_block(x, t)
    assert scale[0] == 5 - t.elem.emax + 127
    f = t.elem
    top = (f.emax + f.bias) << f.mantissa  # 2^emax, mantissa 0
    first = int.from_bytes(elem[: t.elem_bytes].tobytes(), "little")
    assert first == top
    assert dec.tolist() == x.tolist()
    _check_roundtrip(x, t)


def test_roundtrip_fixed_wide_range_block():
    x = np.float32([2.0**20, -(2.0**-20), 3.0, -1.0e-3, 0.0, -0.0, 2.0**19 * 1.97, 7.0])
    _check_roundtrip(x, MXFP8)
