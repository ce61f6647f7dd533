"""Per-instruction semantics (isa.md §5-§6, memory.md §5), run on both execution backends.

Every expectation is a value worked out by hand from the spec and written out literally (bf16
roundings of transcendental results were cross-checked with ml_dtypes/numpy offline, outside the code
under test). Small config: M = V = 16, B = H = BA = 4, 128 VRAM rows, 4 MRAM tiles (tile t at element
address 256*t).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from simhelpers import MXFP8, PLAIN_BF16, bf16_bytes, fp_bits, machine, small_cfg, with_precision

from plena_sim.config import FpType, PlainType

NAN = float("nan")
INF = float("inf")


def tile_16r_plus_c():
    """T[r][c] = 16*r + c (0..255, exact)."""
    return np.arange(256, dtype=np.float32).reshape(16, 16)


def onehot(*pairs, n=16):
    v = np.zeros(n, dtype=np.float32)
    for idx, val in pairs:
        v[idx] = val
    return v


def row(m, addr):
    return m.vram.read(addr, 1)[0]


def assert_row(m, addr, expected):
    got = row(m, addr)
    np.testing.assert_array_equal(got, np.asarray(expected, dtype=np.float32))


# ============================================================================ matrix unit


def _mm_setup(m):
    m.write_mram(1, tile_16r_plus_c())
    # X rows at VRAM address 512 (rows 32..35): X[i] = e_i + 0.5 e_{i+1}
    for i in range(4):
        m.vram.write(512 + 16 * i, onehot((i, 1.0), (i + 1, 0.5)))


def test_m_mm_row_granular_column_block(backend):
    m = machine(backend)
    _mm_setup(m)
    m.set_reg("gp1", 256 + 4 * 16)  # tile 1, column block c = 4 (row-granular: tb + j*B*M, j = 1)
    m.set_reg("gp2", 512)
    res = m.run("M_MM 0, gp1, gp2")
    # m_accum[i][j] = T[i][4+j] + 0.5*T[i+1][4+j] = 24i + 14 + 1.5j
    np.testing.assert_array_equal(
        m.state.m_accum,
        np.array(
            [[14, 15.5, 17, 18.5], [38, 39.5, 41, 42.5], [62, 63.5, 65, 66.5], [86, 87.5, 89, 90.5]], dtype=np.float32
        ),
    )
    assert res.stats["matrix_macs"] == 4 * 4 * 16
    assert res.cycles == 16  # SPO (0) + MLEN
    # accumulates (no implicit clear)
    m.run("M_MM 0, gp1, gp2")
    assert m.state.m_accum[3, 3] == 181.0


def test_m_mm_wo_writes_and_clears(backend):
    m = machine(backend)
    _mm_setup(m)
    for r in range(8):
        m.vram.write(16 * r, np.full(16, 7.0))
    m.set_reg("gp1", 256 + 64)
    m.set_reg("gp2", 512)
    m.run("M_MM 0, gp1, gp2\nM_MM_WO gp0, gp0, 0")
    assert_row(m, 0, [14, 15.5, 17, 18.5] + [7] * 12)
    assert_row(m, 16, [38, 39.5, 41, 42.5] + [7] * 12)
    assert_row(m, 48, [86, 87.5, 89, 90.5] + [7] * 12)
    assert not m.state.m_accum.any()


def test_m_mm_wo_row_pitch_from_stride_register(backend):
    m = machine(backend)
    _mm_setup(m)
    m.set_reg("gp1", 256 + 64)
    m.set_reg("gp2", 512)
    m.set_reg("gp7", 2)  # row pitch M*2 -> rows 0, 2, 4, 6
    m.set_reg("gp3", 0)
    m.run("M_MM 0, gp1, gp2\nM_MM_WO gp3, gp7, 8")  # addr 8: lanes 8..11
    assert_row(m, 0, [0] * 8 + [14, 15.5, 17, 18.5] + [0] * 4)
    assert_row(m, 32, [0] * 8 + [38, 39.5, 41, 42.5] + [0] * 4)
    assert_row(m, 64, [0] * 8 + [62, 63.5, 65, 66.5] + [0] * 4)
    assert_row(m, 96, [0] * 8 + [86, 87.5, 89, 90.5] + [0] * 4)
    assert not row(m, 16).any() and not row(m, 48).any()


def test_m_mm_wo_stride_zero_last_row_wins(backend):
    m = machine(backend)
    _mm_setup(m)
    m.set_reg("gp1", 256 + 64)
    m.set_reg("gp2", 512)
    m.set_reg("gp7", 0)
    m.run("M_MM 0, gp1, gp2\nM_MM_WO gp0, gp7, 4")
    assert_row(m, 0, [0] * 4 + [86, 87.5, 89, 90.5] + [0] * 8)
    assert not row(m, 16).any()


def test_m_tmm_row_block(backend):
    m = machine(backend)
    _mm_setup(m)
    m.set_reg("gp1", 512)  # vector operand first (roles swapped)
    m.set_reg("gp2", 256 + 4 * 16)  # row block r = 4
    res = m.run("M_TMM 0, gp1, gp2")
    # m_accum[i][j] = T[4+j][i] + 0.5*T[4+j][i+1] = 96.5 + 24j + 1.5i
    np.testing.assert_array_equal(
        m.state.m_accum,
        np.array(
            [[96.5, 120.5, 144.5, 168.5], [98, 122, 146, 170], [99.5, 123.5, 147.5, 171.5], [101, 125, 149, 173]],
            dtype=np.float32,
        ),
    )
    assert res.stats["matrix_macs"] == 256


def test_m_mv_and_m_mv_wo(backend):
    m = machine(backend)
    m.write_mram(1, tile_16r_plus_c())
    m.vram.write(512, onehot((2, 1.0), (3, 0.25)))
    m.vram.write(16, np.full(16, -1.0))
    m.set_reg("gp1", 256 + 8)  # element-granular column offset c = 8
    m.set_reg("gp2", 512)
    m.set_reg("gp3", 16)
    res = m.run("M_MV 0, gp1, gp2\nM_MV_WO gp3, 4")
    # v_accum[j] = T[2][8+j] + 0.25*T[3][8+j] = 54 + 1.25j, written to lanes 4..7 of row 1
    assert_row(m, 16, [-1] * 4 + [54, 55.25, 56.5, 57.75] + [-1] * 8)
    assert not m.state.v_accum.any()
    assert res.stats["matrix_macs"] == 64
    assert res.cycles == 16 + 1


def test_m_tmv_row_block(backend):
    m = machine(backend)
    m.write_mram(1, tile_16r_plus_c())
    m.vram.write(512, onehot((2, 1.0), (3, 0.25)))
    m.set_reg("gp1", 256 + 64)  # row block r = 4 (offset multiple of B*M)
    m.set_reg("gp2", 512)
    m.run("M_TMV 0, gp1, gp2")
    # v_accum[j] = T[4+j][2] + 0.25*T[4+j][3] = 82.75 + 20j
    np.testing.assert_array_equal(m.state.v_accum, np.array([82.75, 102.75, 122.75, 142.75], np.float32))


def _bmm_setup(m):
    m.write_mram(1, tile_16r_plus_c())
    for s in range(16):  # X = identity (16 rows at VRAM address 1024 = row 64)
        m.vram.write(1024 + 16 * s, onehot((s, 1.0)))
    m.set_reg("gp1", 256 + 4)  # head offset h = 4
    m.set_reg("gp2", 1024)


def test_m_bmm_head_layout_and_bmm_scale(backend):
    m = machine(backend, BMM_SCALE=0.5)
    _bmm_setup(m)
    res = m.run("M_BMM 0, gp1, gp2")
    hm = m.state.hm_accum
    # head b uses lanes 4b..4b+3 (contiguous heads); Wh = T[4:8, :]
    # hm[b][s][n] = 0.5*T[4 + s - 4b][n] for 4b <= s < 4b+4, else 0
    assert hm[0, 0, 0] == 32.0  # 0.5*T[4][0] = 0.5*64
    assert hm[1, 5, 3] == 41.5  # 0.5*T[5][3] = 0.5*83
    assert hm[2, 9, 15] == 47.5  # 0.5*T[5][15] = 0.5*95
    assert hm[3, 15, 1] == 56.5  # 0.5*T[7][1] = 0.5*113
    assert hm[0, 5, 3] == 0.0 and hm[3, 3, 0] == 0.0
    assert np.count_nonzero(hm[1]) == 4 * 16  # only rows s = 4..7 of head 1 are non-zero
    assert np.count_nonzero(hm[1, 4:8]) == 4 * 16
    assert res.stats["matrix_macs"] == 4 * 16 * 16 * 4
    # write-out: VROW(addr + (b*M + s)*M) = hm[b][s]; addr = 0 -> VRAM row b*16 + s
    m.run("M_BMM_WO gp0, 0")
    assert row(m, 16 * 21)[3] == 41.5
    assert row(m, 16 * 0)[0] == 32.0
    assert_row(m, 16 * 43, [0.5 * (112 + n) for n in range(16)])  # b=2, s=11: 0.5*T[7][n]
    assert not m.state.hm_accum.any()


def test_m_btmm_shared_k_slice(backend):
    m = machine(backend, BMM_SCALE=0.5)
    _bmm_setup(m)
    m.run("M_BTMM 0, gp1, gp2")
    hm = m.state.hm_accum
    # hm[b][s][n] = 0.5*T[n][4 + s - 4b] for 4b <= s < 4b+4
    assert hm[1, 5, 3] == 26.5  # 0.5*T[3][5] = 0.5*53
    assert hm[3, 15, 2] == 19.5  # 0.5*T[2][7] = 0.5*39
    assert hm[0, 0, 0] == 2.0  # 0.5*T[0][4]
    assert hm[2, 4, 0] == 0.0


def _bmv_setup(m):
    m.write_mram(1, tile_16r_plus_c())
    m.vram.write(512, [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2])
    m.set_reg("gp3", 4)  # moff (rd)
    m.set_reg("gp1", 256)  # mat (rs1): m = 256 + 4 -> h = 4
    m.set_reg("gp2", 512)


def test_m_bmv_and_wo(backend):
    m = machine(backend, BMM_SCALE=0.5)
    _bmv_setup(m)
    res = m.run("M_BMV gp3, gp1, gp2\nM_BMV_WO gp0, 128")
    # hv[b][n] = 0.5*sum_k x[4b+k]*T[4+k][n]: b0 0.5*T[4][n], b1 0.5*T[5][n], b2 0.5*T[6][n], b3 T[7][n]
    assert_row(m, 128, [32 + 0.5 * n for n in range(16)])
    assert_row(m, 144, [40 + 0.5 * n for n in range(16)])
    assert_row(m, 160, [48 + 0.5 * n for n in range(16)])
    assert_row(m, 176, [112 + n for n in range(16)])
    assert res.stats["matrix_macs"] == 4 * 16 * 4
    assert res.cycles == 1 + 1  # SPO+1, then 1
    assert not m.state.hv_accum.any()


def test_m_btmv(backend):
    m = machine(backend, BMM_SCALE=0.5)
    _bmv_setup(m)
    m.run("M_BTMV gp3, gp1, gp2")
    hv = m.state.hv_accum
    # hv[b][n] = 0.5*sum_k x[4b+k]*T[n][4+k]: b0 0.5*T[n][4] = 8n+2, b1 8n+2.5, b2 8n+3, b3 16n+7
    np.testing.assert_array_equal(hv[0], [8 * n + 2 for n in range(16)])
    np.testing.assert_array_equal(hv[1], [8 * n + 2.5 for n in range(16)])
    np.testing.assert_array_equal(hv[3], [16 * n + 7 for n in range(16)])


def test_matrix_dot_product_order_and_rounding(backend):
    """p is a float64 sequential sum from +0.0, rounded once to f32: 2^24 + 1 - 2^24 + ... stays exact in
    f64, while an f32 accumulation would lose the +1."""
    m = machine(backend)
    T = np.zeros((16, 16), np.float32)
    T[0, 0], T[1, 0], T[2, 0] = 2.0**24, 1.0, -(2.0**24)
    m.write_mram(0, T)
    m.vram.write(0, onehot((0, 1.0), (1, 1.0), (2, 1.0)))
    m.run("M_MV 0, gp0, gp0")
    assert m.state.v_accum[0] == 1.0


# ============================================================================ vector unit

A16 = [float(j + 1) for j in range(16)]  # a[j] = j + 1


def _vsetup(m, a=A16, b=None, mask=None):
    m.vram.write(0, a)  # a at row 0
    m.vram.write(16, b if b is not None else [2.0] * 16)  # b at row 1
    m.set_reg("gp1", 0)
    m.set_reg("gp2", 16)
    m.set_reg("gp3", 32)  # destination row 2
    m.set_reg("f1", 0.5)
    m.set_reg("f2", 9.5)
    if mask is not None:
        m.set_reg("gp9", mask)
        return "C_SET_V_MASK_REG gp9\n"
    return ""


# mask 0b0101: heads 0 and 2 (lanes 0-3, 8-11) enabled; lanes 4-7, 12-15 keep a
MASKED_CASES = [
    (
        "V_ADD_VV gp3, gp1, gp2, 1",
        [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18],
        [3, 4, 5, 6, 5, 6, 7, 8, 11, 12, 13, 14, 13, 14, 15, 16],
    ),
    (
        "V_ADD_VF gp3, gp1, f1, 1",
        [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5, 16.5],
        [1.5, 2.5, 3.5, 4.5, 5, 6, 7, 8, 9.5, 10.5, 11.5, 12.5, 13, 14, 15, 16],
    ),
    (
        "V_SUB_VV gp3, gp1, gp2, 1",
        [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
        [-1, 0, 1, 2, 5, 6, 7, 8, 7, 8, 9, 10, 13, 14, 15, 16],
    ),
    (
        "V_SUB_VF gp3, gp1, f1, 1",
        [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5],
        [0.5, 1.5, 2.5, 3.5, 5, 6, 7, 8, 8.5, 9.5, 10.5, 11.5, 13, 14, 15, 16],
    ),
    (
        "V_SUB_VF gp3, gp1, f1, 1, 1",  # rorder != 0: f - a
        [-0.5, -1.5, -2.5, -3.5, -4.5, -5.5, -6.5, -7.5, -8.5, -9.5, -10.5, -11.5, -12.5, -13.5, -14.5, -15.5],
        [-0.5, -1.5, -2.5, -3.5, 5, 6, 7, 8, -8.5, -9.5, -10.5, -11.5, 13, 14, 15, 16],
    ),
    (
        "V_MUL_VV gp3, gp1, gp2, 1",
        [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32],
        [2, 4, 6, 8, 5, 6, 7, 8, 18, 20, 22, 24, 13, 14, 15, 16],
    ),
    (
        "V_MUL_VF gp3, gp1, f1, 1",
        [0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8],
        [0.5, 1, 1.5, 2, 5, 6, 7, 8, 4.5, 5, 5.5, 6, 13, 14, 15, 16],
    ),
    (
        "V_MAX_VF gp3, gp1, f2, 1",  # f2 = 9.5
        [9.5] * 9 + [10, 11, 12, 13, 14, 15, 16],
        [9.5, 9.5, 9.5, 9.5, 5, 6, 7, 8, 9.5, 10, 11, 12, 13, 14, 15, 16],
    ),
    ("V_MIN_VF gp3, gp1, f1, 1", [0.5] * 16, [0.5, 0.5, 0.5, 0.5, 5, 6, 7, 8, 0.5, 0.5, 0.5, 0.5, 13, 14, 15, 16]),
    (
        "V_RECI_V gp3, gp1, 1",
        # 1/(j+1) rounded to bf16: 1, .5, .333984375, .25, .2, .1669921875, .142578125, .125, ...
        [
            1,
            0.5,
            0.333984375,
            0.25,
            0.2001953125,
            0.1669921875,
            0.142578125,
            0.125,
            0.111328125,
            0.10009765625,
            0.0908203125,
            0.08349609375,
            0.0771484375,
            0.0712890625,
            0.06689453125,
            0.0625,
        ],
        [
            1,
            0.5,
            0.333984375,
            0.25,
            5,
            6,
            7,
            8,
            0.111328125,
            0.10009765625,
            0.0908203125,
            0.08349609375,
            13,
            14,
            15,
            16,
        ],
    ),
]


def _case_id(case):
    asm = case[0]
    return asm.split()[0] + ("_rorder" if asm.endswith(", 1, 1") else "")


@pytest.mark.parametrize("asm,unmasked,masked", MASKED_CASES, ids=[_case_id(c) for c in MASKED_CASES])
def test_vector_op_unmasked_and_masked(backend, asm, unmasked, masked):
    # the listed form is masked (rmask 1); the unmasked form has rmask 0
    plain = asm.replace(", 1, 1", ", 0, 1") if asm.endswith(", 1, 1") else asm[: -len(", 1")]
    m = machine(backend)
    pre = _vsetup(m, mask=0b0101)  # V_MASK set, but rmask 0 ignores it
    m.run(pre + plain)
    assert_row(m, 32, unmasked)
    m2 = machine(backend)
    pre = _vsetup(m2, mask=0b0101)
    m2.run(pre + asm)
    assert_row(m2, 32, masked)


def test_v_max_min_vf_nan_and_signed_zero(backend):
    m = machine(backend)
    m.vram.write(0, [1, -2, NAN, -0.0, 0.0, 0.5] + [0] * 10)
    m.set_reg("gp1", 0)
    m.set_reg("gp3", 32)
    m.set_reg("gp4", 48)
    m.set_reg("f1", 0.5)
    m.set_reg("f2", 0.0)
    m.set_reg("f3", NAN)
    m.run("V_MAX_VF gp3, gp1, f1\nV_MIN_VF gp4, gp1, f1")
    got = row(m, 32)
    assert list(got[:2]) == [1, 0.5] and math.isnan(got[2]) and list(got[3:6]) == [0.5, 0.5, 0.5]
    got = row(m, 48)
    assert list(got[:2]) == [0.5, -2] and math.isnan(got[2]) and list(got[3:6]) == [-0.0, 0.0, 0.5]
    # equal values incl. +-0: the result is a
    m.run("V_MAX_VF gp3, gp1, f2\nV_MIN_VF gp4, gp1, f2")
    bits = m.vram.bits
    assert bits[2, 3] == 0x8000 and bits[2, 4] == 0x0000  # max(-0, +0) = a = -0 ; max(+0,+0) = +0
    assert bits[3, 3] == 0x8000 and bits[3, 4] == 0x0000  # min(-0, +0) = a = -0
    # f is NaN -> every lane NaN
    m.run("V_MAX_VF gp3, gp1, f3")
    assert np.isnan(row(m, 32)).all()


def test_v_exp_v_values_clamp_and_mask(backend):
    m = machine(backend)
    a = [0, 1, -1, 2, 100, 0.5, NAN, 0, 100, 100, 100, 100, 1, 1, 1, 1]
    m.vram.write(0, a)
    m.set_reg("gp1", 0)
    m.set_reg("gp3", 32)
    m.run("V_EXP_V gp3, gp1")
    got = row(m, 32)
    assert list(got[:6]) == [1.0, 2.71875, 0.3671875, 7.375, float(np.uint32(0x7EF9 << 16).view(np.float32)), 1.6484375]
    assert math.isnan(got[6])
    assert m.vram.bits[2, 4] == 0x7EF9  # exp(clamp(100) = 88) = 1.6516e38 -> bf16 0x7EF9
    # masked: heads 0, 3 enabled; disabled lanes get a unclamped (100 stays 100)
    m.set_reg("gp9", 0b1001)
    m.run("C_SET_V_MASK_REG gp9\nV_EXP_V gp3, gp1, 1")
    got = row(m, 32)
    assert list(got[4:6]) == [100.0, 0.5] and list(got[8:12]) == [100.0] * 4
    assert list(got[12:]) == [2.71875] * 4 and got[0] == 1.0


def test_v_reci_v_zero_signs(backend):
    m = machine(backend)
    m.vram.write(0, [0.0, -0.0, -0.5, 3] + [1] * 12)
    m.set_reg("gp3", 32)
    m.run("V_RECI_V gp3, gp0")
    assert list(row(m, 32)[:4]) == [INF, -INF, -2.0, 0.333984375]


@pytest.mark.parametrize(
    "shift,expected",
    [
        (3, [0, 0, 0] + list(range(1, 14))),
        (0, list(range(1, 17))),
        (15, [0] * 15 + [1]),
        (16, [0] * 16),
        (0xFFFFFFFF, [0] * 16),
    ],
)
def test_v_shft_v_direction(backend, shift, expected):
    m = machine(backend)
    m.vram.write(0, A16)
    m.set_reg("gp3", 32)
    m.set_reg("gp5", shift)
    m.set_reg("gp9", 0)  # V_MASK = 0: shift is never masked
    m.run("C_SET_V_MASK_REG gp9\nV_SHFT_V gp3, gp0, gp5")
    assert_row(m, 32, expected)


def test_v_red_sum_unmasked_masked_and_f0(backend):
    m = machine(backend)
    m.vram.write(0, A16)
    m.set_reg("f1", 0.5)
    m.set_reg("f2", 0.5)
    m.set_reg("gp9", 0b0110)  # heads 1, 2: lanes 4..11 = 5..12, sum 68
    res = m.run("V_RED_SUM f1, gp0\nC_SET_V_MASK_REG gp9\nV_RED_SUM f2, gp0, 1\nV_RED_SUM f0, gp0")
    # 0.5 + 136 = 136.5 -> bf16 ties to even -> 136 ; 0.5 + 68 = 68.5 exact
    assert m.regs["fp"][1] == 136.0
    assert m.regs["fp"][2] == 68.5
    assert m.regs["fp"][0] == 0.0
    assert res.cycles == 8 + 1 + 8 + 0  # rd = f0: no-op, latency 0
    assert res.stats["by_opcode"]["V_RED_SUM"] == 3


def test_v_red_sum_f0_noop_skips_checks(backend):
    m = machine(backend)
    m.set_reg("gp1", 3)  # misaligned, but f0 makes it a no-op without checks
    res = m.run("V_RED_SUM f0, gp1\nV_RED_MAX f0, gp1")
    assert res.instructions == 2 and res.cycles == 0


def test_v_red_max_mask_nan_and_zero_rules(backend):
    m = machine(backend)
    m.vram.write(0, A16)
    m.vram.write(16, [NAN, -3, -0.0, 0.0] + [-5] * 12)
    m.set_reg("gp2", 16)
    m.set_reg("f1", 3.0)
    m.set_reg("f2", 3.0)
    m.set_reg("f3", 10.0)
    m.set_reg("f4", NAN)
    m.set_reg("f5", 0.0)
    m.set_reg("gp9", 0b0001)  # head 0: lanes 0..3
    m.run(
        "V_RED_MAX f1, gp0\nC_SET_V_MASK_REG gp9\nV_RED_MAX f2, gp0, 1\nV_RED_MAX f3, gp0, 1\n"
        "V_RED_MAX f4, gp2\nV_RED_MAX f5, gp2, 1"
    )
    fp = m.regs["fp"]
    assert fp[1] == 16.0  # unmasked: max over all lanes
    assert fp[2] == 4.0  # masked: lanes 0..3 only (1..4) and fp = 3
    assert fp[3] == 10.0  # fp[rd] larger than the enabled lanes
    assert fp[4] == 0.0 and fp_bits(m, 4) == 0x8000  # NaN fp[rd] and NaN lane ignored; -0 first of the zeros
    assert fp_bits(m, 5) == 0x0000  # fp[rd] = +0 competes with lanes -0, +0: the first (fp[rd]) is kept


def test_v_red_max_all_nan_keeps_fp(backend):
    m = machine(backend)
    m.vram.write(0, [NAN] * 16)
    m.set_reg("f1", NAN)
    m.run("V_RED_MAX f1, gp0")
    assert math.isnan(m.regs["fp"][1])


def test_v_topk_policy0(backend):
    m = machine(backend)
    logits = [0.0] * 32
    logits[0] = NAN  # NaN -> -inf
    logits[5], logits[20] = 2.0, 2.0  # tie: lower index first
    logits[7], logits[31] = 1.0, 1.0
    logits[3] = 0.5
    m.vram.write(64, logits)  # E = 32 > V = 16: two rows (4, 5)
    m.set_reg("gp1", 8)  # FP SRAM destination
    m.set_reg("gp2", 64)
    m.set_reg("gp3", 16)  # INT SRAM destination
    res = m.run("V_TOPK gp1, gp2, gp3, 0")
    assert list(m.int_sram[16:20]) == [5, 20, 7, 31]
    # softmax of [2, 2, 1, 1]: den = 2 + 2*f32(e^-1) = 2.7357588; w = 0.3655293, 0.13447072 -> bf16
    assert list(m.read_fp_sram(8, 4)) == [0.365234375, 0.365234375, 0.134765625, 0.134765625]
    assert m.int_sram[20] == 0 and m.read_fp_sram(12, 1)[0] == 0.0
    assert res.cycles == 4 * 32  # VECTOR_MAX * E


def test_v_topk_policy1_signed_zero_ties(backend):
    m = machine(backend)
    logits = [-1.0] * 128
    logits[100] = -0.0
    logits[9] = 0.0  # -0 == +0: tie -> index 9 before 100
    logits[50] = -0.0
    for r in range(8):
        m.vram.write(16 * r, logits[16 * r : 16 * r + 16])
    m.set_reg("gp3", 0)
    res = m.run("V_TOPK gp0, gp0, gp3, 1")
    assert list(m.int_sram[0:8]) == [9, 50, 100, 0, 1, 2, 3, 4]
    assert res.cycles == 4 * 128


# ============================================================================ scalar FP


def test_scalar_fp_ops(backend):
    m = machine(backend)
    m.set_reg("f1", 1.5)
    m.set_reg("f2", 2.25)
    m.set_reg("f3", 2.0)
    m.set_reg("f4", -1.0)
    m.run("S_ADD_FP f5, f1, f2\nS_SUB_FP f6, f1, f2\nS_MUL_FP f7, f1, f2")
    assert m.regs["fp"][5:8] == [3.75, -0.75, 3.375]
    m.set_reg("f1", 1.0)
    m.set_reg("f2", 3.0)
    m.run("S_EXP_FP f5, f1\nS_RECI_FP f6, f2\nS_SQRT_FP f7, f3")
    assert m.regs["fp"][5:8] == [2.71875, 0.333984375, 1.4140625]
    m.run("S_SQRT_FP f5, f4\nS_RECI_FP f6, f0")
    assert math.isnan(m.regs["fp"][5]) and m.regs["fp"][6] == INF


def test_s_max_fp_rules(backend):
    m = machine(backend)
    m.set_reg("f1", NAN)
    m.set_reg("f2", 1.0)
    m.set_reg("f3", -0.0)
    m.run("S_MAX_FP f4, f1, f2\nS_MAX_FP f5, f2, f1\nS_MAX_FP f6, f3, f0\nS_MAX_FP f7, f0, f3")
    fp = m.regs["fp"]
    assert math.isnan(fp[4])  # NaN in rs1 propagates
    assert fp[5] == 1.0  # NaN in rs2 ignored
    assert fp_bits(m, 6) == 0x8000  # +-0: returns a
    assert fp_bits(m, 7) == 0x0000


def test_scalar_fp_rd0_is_noop_latency0(backend):
    m = machine(backend)
    m.set_reg("f1", 1.0)
    res = m.run("S_ADD_FP f0, f1, f1\nS_EXP_FP f0, f1\nS_ADD_FP f2, f1, f1")
    assert m.regs["fp"][0] == 0.0 and m.regs["fp"][2] == 2.0
    assert res.cycles == 1 and res.instructions == 3


def test_s_ld_st_fp_and_map_v_fp(backend):
    m = machine(backend)
    m.write_fp_sram(0, [float(j) / 4 for j in range(20)])
    m.set_reg("gp1", 2)
    m.set_reg("gp2", 48)
    m.set_reg("f7", -6.5)
    res = m.run(
        "S_LD_FP f1, gp1, 3\nS_ST_FP f7, gp1, 40\nS_ST_FP f0, gp0, 1\nS_LD_FP f0, gp1, 0\nS_MAP_V_FP gp2, gp1, 1"
    )
    assert m.regs["fp"][1] == 1.25  # FPSRAM[5] = 5/4
    assert m.read_fp_sram(42, 1)[0] == -6.5
    assert m.read_fp_sram(1, 1)[0] == 0.0  # f0 stores +0.0
    assert m.regs["fp"][0] == 0.0
    assert_row(m, 48, [(3 + j) / 4 for j in range(16)])
    assert res.cycles == 1 + 1 + 1 + 1 + 16  # S_MAP_V_FP: VLEN


# ============================================================================ scalar INT


def test_scalar_int_wrap(backend):
    m = machine(backend)
    m.set_reg("gp1", 0xFFFFFFFF)
    m.set_reg("gp2", 2)
    m.set_reg("gp3", 65537)
    m.run(
        "S_ADD_INT gp4, gp1, gp2\nS_SUB_INT gp5, gp0, gp2\nS_MUL_INT gp6, gp3, gp3\n"
        "S_ADDI_INT gp7, gp1, 262143\nS_ADDI_INT gp0, gp0, 5\nS_ADD_INT gp0, gp1, gp1"
    )
    gp = m.regs["gp"]
    assert gp[4] == 1
    assert gp[5] == 0xFFFFFFFE
    assert gp[6] == 131073  # 65537^2 = 2^32 + 131073
    assert gp[7] == 262142  # 0xFFFFFFFF + 262143 mod 2^32
    assert gp[0] == 0


def test_s_lui_int_wrap(backend):
    m = machine(backend)
    m.run(
        "S_LUI_INT gp1, 0x3FFFFF\nS_LUI_INT gp2, 0x100001\nS_LUI_INT gp3, 5\n"
        "S_LUI_INT gp4, 0x12\nS_ADDI_INT gp4, gp4, 0x345"
    )
    gp = m.regs["gp"]
    assert gp[1] == 0xFFFFF000  # imm bits 20-21 are lost
    assert gp[2] == 0x00001000
    assert gp[3] == 0x5000
    assert gp[4] == 0x12345


def test_s_ld_st_int(backend):
    m = machine(backend)
    m.int_sram[10] = 0xDEADBEEF
    m.set_reg("gp1", 4)
    m.set_reg("gp2", 77)
    m.run("S_LD_INT gp3, gp1, 6\nS_ST_INT gp2, gp1, 20\nS_LD_INT gp0, gp1, 6")
    assert m.regs["gp"][3] == 0xDEADBEEF and m.int_sram[24] == 77 and m.regs["gp"][0] == 0


# ============================================================================ control


def test_c_set_addr_reg_high_low(backend):
    m = machine(backend)
    m.set_reg("gp1", 3)
    m.set_reg("gp2", 0x10)
    m.set_reg("gp3", 0xFFFFFFFF)
    m.run("C_SET_ADDR_REG a1, gp1, gp2\nC_SET_ADDR_REG a7, gp3, gp3\nC_SET_ADDR_REG a2, gp0, gp2")
    a = m.regs["a"]
    assert a[1] == 3 * 2**32 + 16 == 12884901904
    assert a[7] == 0xFFFFFFFFFFFFFFFF
    assert a[2] == 16


def test_c_set_scale_stride_mask(backend):
    m = machine(backend)
    m.set_reg("gp1", 512)
    m.set_reg("gp2", 4096)
    m.set_reg("gp3", 0xFFFFFFFF)
    assert m.regs["STRIDE"] == 1  # reset value
    m.run("C_SET_SCALE_REG gp1\nC_SET_STRIDE_REG gp2\nC_SET_V_MASK_REG gp3")
    r = m.regs
    assert (r["SCALE"], r["STRIDE"], r["V_MASK"]) == (512, 4096, 0xFFFFFFFF)


def test_nested_loops_distinct_registers(backend):
    m = machine(backend)
    res = m.run("""
        C_LOOP_START gp1, 3
        C_LOOP_START gp2, 4
        S_ADDI_INT gp3, gp3, 1
        S_ADD_INT gp4, gp4, gp2      ; iteration k sees gp2 = 4 - k
        C_LOOP_END gp2
        S_ADD_INT gp5, gp5, gp1      ; outer sees 3, 2, 1
        C_LOOP_END gp1
    """)
    gp = m.regs["gp"]
    assert gp[3] == 12 and gp[4] == 30 and gp[5] == 6
    assert gp[1] == 0 and gp[2] == 0
    assert m.regs["loop_stack"] == []
    assert res.instructions == 1 + 3 * (1 + 4 * 3 + 2) == 46
    assert res.stats["by_opcode"]["C_LOOP_END"] == 3 * 4 + 3


def test_loop_counter_written_by_program(backend):
    m = machine(backend)
    m.run("""
        C_LOOP_START gp1, 5
        S_ADDI_INT gp2, gp2, 1
        S_ADDI_INT gp1, gp0, 1       ; forces exit at the C_LOOP_END
        C_LOOP_END gp1
    """)
    assert m.regs["gp"][2] == 1 and m.regs["gp"][1] == 0


def test_c_break_exits_to_after_matching_loop_end(backend):
    m = machine(backend)
    res = m.run("""
        C_LOOP_START gp1, 10
        S_ADDI_INT gp5, gp5, 1
        C_BREAK
        S_ADDI_INT gp7, gp7, 1
        C_LOOP_END gp1
        S_ADDI_INT gp8, gp0, 9
    """)
    gp = m.regs["gp"]
    assert (gp[5], gp[7], gp[8], gp[1]) == (1, 0, 9, 0)
    assert m.regs["loop_stack"] == []
    assert res.instructions == 4


def test_c_break_inner_loop_continues_outer(backend):
    m = machine(backend)
    m.run("""
        C_LOOP_START gp1, 3
        C_LOOP_START gp2, 5
        S_ADDI_INT gp5, gp5, 1
        C_BREAK
        C_LOOP_END gp2
        S_ADDI_INT gp6, gp6, 1
        C_LOOP_END gp1
    """)
    gp = m.regs["gp"]
    assert (gp[5], gp[6], gp[1], gp[2]) == (3, 3, 0, 0)


def test_program_ending_inside_loop_ends_normally(backend):
    m = machine(backend)
    res = m.run("C_LOOP_START gp1, 4\nS_ADDI_INT gp2, gp0, 1")
    assert res.fault is None and m.regs["loop_stack"] == [(0, 1, 1)]


# ============================================================================ DMA (memory.md §5)


def _mx_act_image(m, base=0, scale_at=128):
    """X[4, 32] MXFP8 at ``base``: element (r, c) = code 0x38 (1.0) if c even else 0x40 (2.0);
    scale of block q = 4r + c//8 is 120 + q, i.e. 2^(4r + c//8 - 7). Scales at base + scale_at."""
    elem = bytes((0x38 if c % 2 == 0 else 0x40) for r in range(4) for c in range(32))
    scales = bytes(120 + q for q in range(16))
    m.hbm.write(base, elem)
    m.hbm.write(base + scale_at, scales)


@pytest.mark.parametrize("base,scale", [(0, 128), (1024, 2048)])
def test_h_prefetch_v_mxfp8_strided_scale_placement(backend, base, scale):
    cfg = with_precision(small_cfg(), HBM_V_ACT_TYPE=MXFP8)
    m = machine(backend, cfg)
    _mx_act_image(m, base, scale)
    m.set_reg("a0", base)
    m.set_reg("gp1", 16)  # columns 16..31
    m.set_reg("gp2", 32)  # row pitch 32 bytes
    m.set_reg("gp3", scale)
    m.set_reg("gp4", 64)  # VRAM rows 4..7
    res = m.run("C_SET_STRIDE_REG gp2\nC_SET_SCALE_REG gp3\nH_PREFETCH_V gp4, gp1, a0, 1, 0")
    # row i: blocks 4i+2, 4i+3 -> scales 2^(4i-5), 2^(4i-4); elements alternate 1, 2
    assert_row(m, 64, [0.03125, 0.0625] * 4 + [0.0625, 0.125] * 4)
    assert_row(m, 80, [0.5, 1.0] * 4 + [1.0, 2.0] * 4)
    assert_row(m, 96, [8.0, 16.0] * 4 + [16.0, 32.0] * 4)
    assert_row(m, 112, [128.0, 256.0] * 4 + [256.0, 512.0] * 4)
    # H_* cost from the HBM model (timing.md §5) at start cycle 2 on a cold memory
    from plena_sim.hbm import timing as HT

    params = HT.timing_params(cfg)
    rows = HT.dma_row_ranges(HT.dma_geometry(cfg, HT.DMA_PREFETCH_V, 0), base, 16, 32, scale)
    lat = HT.schedule_py(params, HT.PyTimingState(params), HT.dma_blocks_py(params, rows), False, 2)
    assert lat >= 30
    assert res.cycles == 1 + 1 + lat


def test_h_prefetch_v_contiguous_when_rstride_not_1(backend):
    cfg = with_precision(small_cfg(), HBM_V_ACT_TYPE=MXFP8)
    m = machine(backend, cfg)
    _mx_act_image(m)
    m.set_reg("gp2", 32)
    m.set_reg("gp3", 128)
    # rstride 2: contiguous, pitch = row bytes = 16 -> rows are the halves of X rows 0 and 1
    m.run("C_SET_STRIDE_REG gp2\nC_SET_SCALE_REG gp3\nH_PREFETCH_V gp0, gp0, a0, 2, 0")
    assert_row(m, 0, [2.0**-7, 2.0**-6] * 4 + [2.0**-6, 2.0**-5] * 4)
    assert_row(m, 16, [2.0**-5, 2.0**-4] * 4 + [2.0**-4, 2.0**-3] * 4)
    assert_row(m, 32, [2.0**-3, 2.0**-2] * 4 + [2.0**-2, 2.0**-1] * 4)


def test_h_prefetch_v_plain_bf16_strided_and_prec_selects_kv(backend):
    cfg = with_precision(small_cfg(), HBM_V_ACT_TYPE=PLAIN_BF16, HBM_V_KV_TYPE=MXFP8)
    m = machine(backend, cfg)
    m.hbm.write(0, bf16_bytes([float(k) for k in range(128)]))  # X[4, 32] bf16, X[r][c] = 32r + c
    m.set_reg("gp1", 32)  # byte offset of column 16
    m.set_reg("gp2", 64)  # pitch 64 bytes = one X row
    m.run("C_SET_STRIDE_REG gp2\nH_PREFETCH_V gp0, gp1, a0, 1, 0")
    for i in range(4):
        assert_row(m, 16 * i, [32.0 * i + 16 + c for c in range(16)])
    # prec = 1 selects HBM_V_KV_TYPE (MXFP8 here): the same bytes now decode as E4M3 with scale bytes
    m.hbm.write(1000, bytes([0x38] * 16))
    m.hbm.write(1000 + 16, bytes([127, 128]))
    m.set_reg("a1", 1000)
    m.set_reg("gp3", 16)
    m.run("C_SET_SCALE_REG gp3\nH_PREFETCH_V gp0, gp0, a1, 2, 1")
    assert_row(m, 0, [1.0] * 8 + [2.0] * 8)


def test_h_prefetch_m_mxfp8_strided_tile(backend):
    cfg = with_precision(small_cfg(), HBM_M_WEIGHT_TYPE=MXFP8)
    m = machine(backend, cfg)
    # W[32, 32] MXFP8 at 0: all element codes 0x38 (1.0); scale of block q = 4r + c//8:
    # 120 + (r % 8) + (c//8) % 2  ->  W[r][c] = 2^(r%8 + (c//8)%2 - 7); scales at SCALE = 1024
    m.hbm.write(0, bytes([0x38] * 1024))
    m.hbm.write(1024, bytes(120 + (r % 8) + (cb % 2) for r in range(32) for cb in range(4)))
    m.set_reg("gp1", 16 * 32 + 16)  # rows 16..31, columns 16..31
    m.set_reg("gp2", 32)
    m.set_reg("gp3", 1024)
    m.set_reg("gp4", 2 * 256)  # MRAM tile 2
    res = m.run("C_SET_STRIDE_REG gp2\nC_SET_SCALE_REG gp3\nH_PREFETCH_M gp4, gp1, a0, 1, 0")
    T = m.mram[2]
    # T[i][j] = W[16+i][16+j] = 2^(i%8 + j//8 - 7)
    assert T[0, 0] == 0.0078125 and T[3, 9] == 0.125 and T[15, 15] == 2.0 and T[9, 2] == 0.015625
    assert T[7, 7] == 1.0 and T[8, 8] == 0.015625
    assert not m.mram[0].any() and not m.mram[1].any() and not m.mram[3].any()
    # H_* cost from the HBM model (timing.md §5) at start cycle 2 on a cold memory
    from plena_sim.hbm import timing as HT

    params = HT.timing_params(cfg)
    rows = HT.dma_row_ranges(HT.dma_geometry(cfg, HT.DMA_PREFETCH_M, 0), 0, 16 * 32 + 16, 32, 1024)
    lat = HT.schedule_py(params, HT.PyTimingState(params), HT.dma_blocks_py(params, rows), False, 2)
    assert lat >= 30
    assert res.cycles == 2 + lat


def test_h_prefetch_m_plain_exact_f32_and_prec(backend):
    f32 = with_precision(small_cfg(), HBM_M_KV_TYPE=PlainType(FpType(True, 8, 23)), HBM_M_WEIGHT_TYPE=MXFP8)
    m = machine(backend, f32)
    vals = np.zeros(256, np.float32)
    vals[0] = 1.0 + 2.0**-20  # not bf16-exact: MRAM keeps the exact f32 value
    vals[17] = -3.0
    m.hbm.write(4096, vals.astype("<f4").tobytes())
    m.set_reg("a2", 4096)
    m.run("H_PREFETCH_M gp0, gp0, a2, 0, 1")  # prec 1 -> KV type (Plain f32), contiguous
    T = m.mram[0]
    assert T[0, 0] == np.float32(1.0 + 2.0**-20) and T[1, 1] == -3.0


def test_h_store_v_mxfp8_spec_blocks_strided(backend):
    cfg = with_precision(small_cfg(), HBM_V_ACT_TYPE=MXFP8)
    m = machine(backend, cfg)
    A = [1.0, -0.5, 0.25, 3.0, -2.0, 0.0, 0.125, 1.5]
    B = [255.0, 1.0625, 1.1875, 1.96875, 0.0107421875, -241.0, 100.0, 0.5]
    C = [0.75, -0.060546875, 2.0**-19, -(2.0**-18), 3 * 2.0**-18, 0.001953125, -0.75, 0.30078125]
    S = [NAN, 1.0, INF, -3.0, 0, 0, 0, 0]
    m.vram.write(0, A + B)
    m.vram.write(16, C + [0.0] * 8)
    m.vram.write(32, S + A)
    m.vram.write(48, [0.0] * 16)
    m.hbm.write(0, bytes([0xEE] * 256))
    m.set_reg("gp1", 16)  # byte offset of column 16
    m.set_reg("gp2", 32)
    m.set_reg("gp3", 128)
    res = m.run("C_SET_STRIDE_REG gp2\nC_SET_SCALE_REG gp3\nH_STORE_V gp0, gp1, a0, 1, 0")
    h = m.hbm.read(0, 256)
    codes_A = [0x68, 0xE0, 0x58, 0x74, 0xF0, 0x00, 0x50, 0x6C]
    codes_B = [0x77, 0x38, 0x3A, 0x40, 0x06, 0xF7, 0x6C, 0x30]
    codes_C = [0x74, 0xD8, 0x00, 0x80, 0x02, 0x30, 0xF4, 0x6A]
    codes_S = [0x00, 0x00, 0x77, 0x80, 0x00, 0x00, 0x00, 0x00]
    assert list(h[16:32]) == codes_A + codes_B
    assert list(h[48:64]) == codes_C + [0] * 8
    assert list(h[80:96]) == codes_S + codes_A
    assert list(h[112:128]) == [0] * 16
    assert list(h[130:132]) == [0x79, 0x7F]  # row 0 scales at 128 + 16//8
    assert list(h[134:136]) == [0x77, 0x00]  # row 1 at 128 + 48//8
    assert list(h[138:140]) == [0xF7, 0x79]
    assert list(h[142:144]) == [0x00, 0x00]
    # untouched bytes keep their value
    for lo, hi in [(0, 16), (32, 48), (64, 80), (96, 112), (128, 130), (132, 134), (136, 138), (140, 142), (144, 256)]:
        assert list(h[lo:hi]) == [0xEE] * (hi - lo), (lo, hi)
    assert res.stats["mx"] == {"nan_encoded": 1, "saturated": 3}  # 255 (1) + Inf (2)


def test_h_store_v_plain_bf16_strided(backend):
    cfg = with_precision(small_cfg(), HBM_V_ACT_TYPE=PLAIN_BF16)
    m = machine(backend, cfg)
    for i in range(4):
        m.vram.write(16 * i, [1.0, -2.0, 0.5] + [float(i)] * 13)
    m.hbm.write(0, bytes([0xEE] * 512))
    m.set_reg("gp2", 100)  # pitch 100 bytes
    m.set_reg("gp1", 6)
    m.run("C_SET_STRIDE_REG gp2\nH_STORE_V gp0, gp1, a0, 1, 0")
    h = m.hbm.read(0, 512)
    for i in range(4):
        o = 6 + 100 * i
        assert list(h[o : o + 6]) == [0x80, 0x3F, 0x00, 0xC0, 0x00, 0x3F]
        tail = {0: [0x00, 0x00], 1: [0x80, 0x3F], 2: [0x00, 0x40], 3: [0x40, 0x40]}[i]
        assert list(h[o + 6 : o + 8]) == tail
        assert list(h[o + 32 : o + 34]) == [0xEE, 0xEE]
    assert list(h[0:6]) == [0xEE] * 6


def test_h_store_then_prefetch_roundtrip_overlapping_rows(backend):
    """STRIDE = 0: every row lands on the same bytes, the last row wins (memory.md §5.5)."""
    cfg = with_precision(small_cfg(), HBM_V_ACT_TYPE=MXFP8)
    m = machine(backend, cfg)
    for i in range(4):
        m.vram.write(16 * i, [float(i + 1)] * 16)
    m.set_reg("gp3", 64)
    m.set_reg("gp5", 128)
    m.run("C_SET_STRIDE_REG gp0\nC_SET_SCALE_REG gp3\nH_STORE_V gp0, gp0, a0, 1, 0\nH_PREFETCH_V gp5, gp0, a0, 1, 0")
    for i in range(4):
        assert_row(m, 128 + 16 * i, [4.0] * 16)


def test_cycles_and_unit_counts(backend):
    m = machine(backend)
    res = m.run(
        "S_ADDI_INT gp1, gp0, 16\nV_ADD_VV gp1, gp0, gp1\nV_RED_SUM f0, gp0\nV_RED_SUM f1, gp0\n"
        "V_RECI_V gp1, gp1\nC_SET_SCALE_REG gp0\nM_MM 0, gp0, gp0"
    )
    assert res.cycles == 1 + 1 + 0 + 8 + 2 + 1 + 16
    assert res.stats["by_unit"] == {"M": 1, "V": 4, "S": 1, "H": 0, "C": 1}
    assert res.stats["by_opcode"] == {
        "S_ADDI_INT": 1,
        "V_ADD_VV": 1,
        "V_RED_SUM": 2,
        "V_RECI_V": 1,
        "C_SET_SCALE_REG": 1,
        "M_MM": 1,
    }


def test_every_instruction_has_a_test_here():
    from pathlib import Path

    from isa.table import INSTRUCTIONS

    text = Path(__file__).read_text()
    missing = [i.mnemonic for i in INSTRUCTIONS if not any(i.mnemonic + end in text for end in (" ", "\n", '"'))]
    assert not missing, missing


def test_nan_operand_propagation_first_operand_wins(backend):
    """Binary f32 ops with NaN operands return the first operand's NaN (sign kept by bf16), else the
    second's -- the project rule that keeps both backends bit-identical (see plena_sim/reference.py)."""
    m = machine(backend)
    m.state.fp[1], m.state.fp[2] = 0x7FC0, 0xFFC0  # +NaN, -NaN
    m.state.vram[0, :] = 0x7FC0
    m.state.vram[1, :] = 0xFFC0
    m.set_reg("gp2", 16)
    m.set_reg("gp3", 32)
    m.set_reg("gp4", 48)
    m.run(
        "S_ADD_FP f3, f1, f2\nS_MUL_FP f4, f2, f1\nS_SUB_FP f5, f7, f2\n"
        "V_ADD_VV gp3, gp0, gp2\nV_SUB_VF gp4, gp0, f2, 0, 1"
    )
    assert [fp_bits(m, i) for i in (3, 4, 5)] == [0x7FC0, 0xFFC0, 0xFFC0]
    assert m.vram.bits[2, 0] == 0x7FC0 and m.vram.bits[3, 0] == 0xFFC0  # f - a: f (-NaN) first
    m.state.fp[6] = 0x7FC0
    m.run("V_RED_SUM f6, gp2")  # fp[rd] + S: fp[rd]'s NaN
    assert fp_bits(m, 6) == 0x7FC0
