"""HBM timing model: closed-form expectations of timing.md §5.5, address mapping §5.2, instruction-level
reference values (memory.md §5.2 block lists), Numba and pure-Python twin side by side."""

import numpy as np
import pytest

from plena_sim.hbm.timing import (
    DMA_PREFETCH_M,
    DMA_PREFETCH_V,
    DMA_STORE_V,
    G_N,
    HbmTimer,
    PyTimingState,
    block_fields,
    dma_blocks_py,
    dma_geometry,
    dma_geometry_table,
    dma_row_ranges,
    map_address,
    new_stats_py,
    schedule_py,
)


def both(params, program):
    """Run ``program`` = [(blocks, is_write, t0_cycle)] on the Numba kernels and on the Python twin;
    assert they agree; return the latencies and the stats dict."""
    timer = HbmTimer(params)
    st = PyTimingState(params)
    py_stats = new_stats_py(params)
    lats = []
    for blocks, is_write, t0 in program:
        a = timer.latency_of_blocks(blocks, is_write, t0)
        b = schedule_py(params, st, blocks, is_write, t0, py_stats)
        assert a == b
        lats.append(a)
    assert timer.stats_dict() == py_stats
    ch, bk = st.to_arrays()
    assert np.array_equal(ch, timer.ch_state) and np.array_equal(bk, timer.bank_state)
    return lats, py_stats


def blk(addr):
    return addr // 64


# --------------------------------------------------------------------------- §5.5 request-level cases


def test_single_cold_read_30(hbm2):
    assert both(hbm2, [([0], False, 0)])[0] == [30]  # tRCD + tCL + tBL


def test_row_hit_16_then_conflict_44_at_46(hbm2):
    lats, stats = both(hbm2, [([0], False, 0), ([0], False, 30), ([blk(0x00040040)], False, 46)])
    assert lats == [30, 16, 44]  # tCL + tBL ; tRP + tRCD + tCL + tBL
    assert (stats["row_misses"], stats["row_hits"], stats["row_conflicts"]) == (1, 1, 1)
    assert stats["read_requests"] == 3 and stats["per_channel_requests"][0] == 3


def test_single_cold_write_20(hbm2):
    lats, stats = both(hbm2, [([0], True, 0)])
    assert lats == [20]  # tRCD + tCWL + tBL
    assert stats["write_requests"] == 1 and stats["read_requests"] == 0


def _channel0_alternating_bank_groups(params, n):
    """n distinct blocks of channel 0 (DRAM row 0), consecutive ones in different bank groups."""
    by_bg = {g: [] for g in range(params.bank_groups)}
    for b in range(1 << 13):
        f = map_address(params, b * 64)
        if f.channel == 0 and f.row == 0:
            by_bg[f.bank_group].append(b)
    out = []
    i = 0
    while len(out) < n:
        out.append(by_bg[i % params.bank_groups][i // params.bank_groups])
        i += 1
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 17, 32, 64, 100])
def test_n_requests_one_channel_28_plus_2n(hbm2, n):
    blocks = _channel0_alternating_bank_groups(hbm2, n)
    lats, stats = both(hbm2, [(blocks, False, 0)])
    assert lats == [28 + 2 * n]  # tRCD + tCL + n*tBL
    assert stats["per_channel_requests"][0] == n


def test_64_reads_pitch_2mib_366(hbm2):
    blocks = [blk(i << 21) for i in range(64)]
    # 8 per channel, all in one bank, a new row each: the 4th hash term (t = 3) is needed for that
    for c in range(8):
        fs = [map_address(hbm2, i << 21) for i in range(64) if map_address(hbm2, i << 21).channel == c]
        assert len(fs) == 8 and len({(f.bank_group, f.bank) for f in fs}) == 1 and len({f.row for f in fs}) == 8
    lats, stats = both(hbm2, [(blocks, False, 0)])
    assert lats == [366] == [7 * (34 + 14) + 14 + 14 + 2]
    assert stats["row_conflicts"] == 56 and stats["row_misses"] == 8


def test_without_fourth_hash_term_the_2mib_case_collapses(hbm2):
    from dataclasses import replace

    three = replace(hbm2, ch_xor_terms=3)
    chans = {map_address(three, i << 21).channel for i in range(64)}
    assert len(chans) < 8


# --------------------------------------------------------------------------- §5.2 mapping


def test_mapping_example_0x00040040(hbm2):
    f = map_address(hbm2, 0x00040040)
    assert (f.channel, f.bank_group, f.bank, f.row) == (0, 0, 0, 1)
    g = map_address(hbm2, 0)
    assert (g.channel, g.bank_group, g.bank, g.row) == (0, 0, 0, 0)


def test_mapping_matches_hbm2_bit_description(hbm2):
    rng = np.random.default_rng(1)
    p = hbm2.as_array()
    for a in [int(x) for x in rng.integers(0, 1 << 34, 3000)] + [0, 63, 64, 511, 512, (1 << 34) - 1]:

        def bits(hi, lo, a=a):
            """Bits ``hi..lo`` (inclusive) of address ``a``."""
            return (a >> lo) & ((1 << (hi - lo + 1)) - 1)

        f = map_address(hbm2, a)
        assert f.channel == bits(8, 6) ^ bits(14, 12) ^ bits(20, 18) ^ bits(26, 24)
        assert f.bank_group == bits(10, 9) and f.column == bits(15, 11) and f.bank == bits(17, 16)
        assert f.row == a >> 18
        assert tuple(int(x) for x in block_fields(p, a // 64)) == (f.channel, f.bank_group, f.column, f.bank, f.row)


def test_consecutive_blocks_rotate_over_channels(hbm2):
    for g in range(0, 1 << 20, 4096 + 512):
        assert sorted(map_address(hbm2, g * 512 + 64 * i).channel for i in range(8)) == list(range(8))


@pytest.mark.parametrize("log_pitch", range(6, 25))
def test_power_of_two_pitch_spreads_evenly(hbm2, log_pitch):
    lats, stats = both(hbm2, [([blk(i << log_pitch) for i in range(64)], False, 0)])
    assert stats["per_channel_requests"] == [8] * 8


@pytest.mark.parametrize("log_pitch,expected", [(12, 51), (16, 87), (17, 177)] + [(k, 366) for k in range(18, 25)])
def test_pitch_table(hbm2, log_pitch, expected):
    """64 single-block Plain rows, cold (§5.2): 51 at 4096 B; 87 / 177 / 366 from 2^16 B on."""
    lats, _ = both(hbm2, [([blk(i << log_pitch) for i in range(64)], False, 0)])
    assert lats == [expected]


def test_pitch_table_banks(hbm2):
    for log_pitch, nbanks in ((16, 4), (17, 2), (18, 1), (24, 1)):
        for c in range(8):
            fs = [map_address(hbm2, i << log_pitch) for i in range(64)]
            fs = [f for f in fs if f.channel == c]
            assert len({(f.bank_group, f.bank) for f in fs}) == nbanks


# --------------------------------------------------------------------------- instruction level (memory.md §5.2)


def _instr_blocks(params, cfg, op, scale, prec=0, base=0, off0=0, pitch=None):
    g = dma_geometry(cfg, op, prec)
    return g, dma_blocks_py(params, dma_row_ranges(g, base, off0, g.elem_len if pitch is None else pitch, scale))


def test_reference_geometry(cfg):
    gm = dma_geometry(cfg, DMA_PREFETCH_M, 0)
    gv = dma_geometry(cfg, DMA_PREFETCH_V, 1)
    gw = dma_geometry(cfg, DMA_STORE_V, 0)
    assert (gm.rows, gm.elem_len, gm.scale_div, gm.scale_mul, gm.scale_len, gm.is_write) == (64, 64, 8, 1, 8, False)
    assert (gv.rows, gv.elem_len, gv.scale_len, gv.is_write) == (4, 64, 8, False)
    assert (gw.rows, gw.is_write) == (4, True)
    t = dma_geometry_table(cfg)
    assert t.shape == (3, 2, G_N) and np.array_equal(t[DMA_PREFETCH_M, 1], gm.as_array())


def test_plain_geometry(cfg):
    from dataclasses import replace
    from types import MappingProxyType

    from plena_sim.config import FpType, PlainType

    prec = dict(cfg.precision)
    prec["HBM_V_ACT_TYPE"] = PlainType(FpType(True, 8, 7))
    c2 = replace(cfg, precision=MappingProxyType(prec))
    g = dma_geometry(c2, DMA_PREFETCH_V, 0)
    assert (g.rows, g.elem_len, g.scale_len) == (4, 128, 0)
    assert dma_blocks_py(timing_params_of(c2), dma_row_ranges(g, 0, 0, 128)) == list(range(8))


def timing_params_of(cfg):
    from plena_sim.hbm.timing import timing_params

    return timing_params(cfg)


def test_memory_md_examples_block_lists(hbm2, cfg):
    # X[4, 128] at 0: H_PREFETCH_V at offset 64, STRIDE 128, SCALE 512
    g = dma_geometry(cfg, DMA_PREFETCH_V, 0)
    rr = dma_row_ranges(g, 0, 64, 128, 512)
    assert rr == [(64 + 128 * i, 64, 520 + 16 * i, 8) for i in range(4)]
    assert dma_blocks_py(hbm2, rr) == [1, 8, 3, 5, 7]  # scale blocks coalesce into block 8
    # contiguous H_PREFETCH_M at 0: elements [0, 4096), scales [SCALE, SCALE + 512)
    gm = dma_geometry(cfg, DMA_PREFETCH_M, 0)
    blocks = dma_blocks_py(hbm2, dma_row_ranges(gm, 0, 0, 64, 4096))
    assert sorted(blocks) == list(range(72)) and len(blocks) == 72


def test_h_prefetch_v_30_then_16(hbm2, cfg):
    g, blocks = _instr_blocks(hbm2, cfg, DMA_PREFETCH_V, 256)
    assert blocks == [0, 4, 1, 2, 3]  # row 0: elem 0, scale block 4; rows 1..3
    assert sorted(map_address(hbm2, b * 64).channel for b in blocks) == [0, 1, 2, 3, 4]
    lats, _ = both(hbm2, [(blocks, False, 0), (blocks, False, 30)])
    assert lats == [30, 16]
    t = HbmTimer(hbm2)
    assert t.instruction(g, 0, 0, 64, 256, 0) == 30 and t.instruction(g, 0, 0, 64, 256, 30) == 16


def test_h_store_v_20(hbm2, cfg):
    g, blocks = _instr_blocks(hbm2, cfg, DMA_STORE_V, 256)
    assert len(blocks) == 5
    assert both(hbm2, [(blocks, True, 0)])[0] == [20]
    t = HbmTimer(hbm2)
    assert t.instruction(g, 0, 0, 64, 256, 0) == 20 and t.stats_dict()["write_requests"] == 5


def test_h_prefetch_m_47(hbm2, cfg):
    g, blocks = _instr_blocks(hbm2, cfg, DMA_PREFETCH_M, 4096)
    assert len(blocks) == 72
    lats, stats = both(hbm2, [(blocks, False, 0)])
    assert lats == [47]
    assert stats["per_channel_requests"] == [9] * 8
    t = HbmTimer(hbm2)
    assert t.instruction(g, 0, 0, 64, 4096, 0) == 47
    # 4608 payload bytes in 47 cycles: 38% of peak (latency-bound)
    assert round(4608 / (47 * hbm2.peak_bytes_per_cycle), 2) == 0.38


def test_h_prefetch_m_mlen1024_4636(hbm2, cfg1024):
    g, blocks = _instr_blocks(hbm2, cfg1024, DMA_PREFETCH_M, 1 << 20)
    assert len(blocks) == 18432 and g.rows == 1024  # 1 MiB + 128 KiB
    lats, stats = both(hbm2, [(blocks, False, 0)])
    assert lats == [4636]
    frac = 64 * 18432 / (4636 * hbm2.peak_bytes_per_cycle)
    assert frac >= 0.95 and round(frac, 3) == 0.994
    t = HbmTimer(hbm2)
    assert t.instruction(g, 0, 0, g.elem_len, 1 << 20, 0) == 4636


def test_contiguous_1mib_read_reaches_95_percent(hbm2, hbm3):
    for params in (hbm2, hbm3):
        n = (1 << 20) // 64
        lat = HbmTimer(params).latency_of_blocks(list(range(n)), False, 0)
        assert 64 * n / (lat * params.peak_bytes_per_cycle) >= 0.95


def test_random_rows_slower_than_sequential(hbm2):
    rng = np.random.default_rng(7)
    n = 512
    seq = list(range(n))
    rnd = [int(x) for x in rng.choice(1 << 28, size=n, replace=False)]
    seq_lat = HbmTimer(hbm2).latency_of_blocks(seq, False, 0)
    rnd_lat = HbmTimer(hbm2).latency_of_blocks(rnd, False, 0)
    assert rnd_lat > 2 * seq_lat
    # also warm: repeat after the first pass (sequential becomes row hits, random keeps conflicting)
    t1, t2 = HbmTimer(hbm2), HbmTimer(hbm2)
    s1 = t1.latency_of_blocks(seq, False, 0)
    r1 = t2.latency_of_blocks(rnd, False, 0)
    rnd2 = [int(x) for x in rng.choice(1 << 28, size=n, replace=False)]
    assert t2.latency_of_blocks(rnd2, False, r1) > t1.latency_of_blocks([b + n for b in seq], False, s1)


def test_state_persists_and_later_instruction_does_not_rewind(hbm2):
    # a long read then an immediate single read of a busy channel waits for the bus
    t = HbmTimer(hbm2)
    t.latency_of_blocks(list(range(64)), False, 0)
    assert t.latency_of_blocks([0], False, 1) > 16
    # idle gap: same block as a pure row hit
    assert t.latency_of_blocks([0], False, 10_000) == 16


def test_huge_start_cycle_no_overflow(hbm2):
    for t0 in (0, 1, 10**9, 10**12, 10**15):
        lats, _ = both(hbm2, [([0], False, t0), ([0], False, t0 + 30), ([blk(0x40040)], False, t0 + 46)])
        assert lats == [30, 16, 44]


def test_conflict_waits_for_tras(hbm2):
    # the conflicting ACT may not precharge before ACT + tRAS = 34: 34 + tRP + tRCD + tCL + tBL - 30
    assert both(hbm2, [([0], False, 0), ([blk(0x40040)], False, 30)])[0] == [30, 48]


def test_callable_from_an_njit_run_loop(hbm2, cfg):
    """The kernels compose inside another @njit function (how the core's run loop uses them)."""
    from numba import njit

    from plena_sim.hbm.timing import (
        HST_READ_REQUESTS,
        HST_WRITE_REQUESTS,
        dma_instruction,
        dma_payload_bytes,
        max_dma_blocks,
        new_dma_scratch,
        new_stats,
        new_timing_state,
    )

    @njit
    def loop(p, geoms, ops, offs, ch, bk, stats, blocks, hset, work, out, stop):
        t = np.int64(0)
        payload = np.int64(0)
        for k in range(ops.shape[0]):
            g = geoms[ops[k], 0]
            off = np.uint32(offs[k])
            lat = dma_instruction(
                p, g, np.uint32(0), off, g[1], np.uint32(4096), t, ch, bk, stats, blocks, hset, work, stop
            )
            out[k] = lat
            payload += dma_payload_bytes(g)
            t += lat
        return t, payload

    ops = np.array([DMA_PREFETCH_V, DMA_PREFETCH_V, DMA_STORE_V, DMA_PREFETCH_M], dtype=np.int64)
    offs = np.array([0, 0, 0, 0], dtype=np.int64)
    ch, bk = new_timing_state(hbm2)
    stats = new_stats(hbm2)
    blocks, hset, work = new_dma_scratch(hbm2, max_dma_blocks(cfg, hbm2))
    out = np.zeros(4, dtype=np.int64)
    stop = np.zeros(1, dtype=np.uint8)  # the stop flag (plena_sim.limits.stop), never set
    total, payload = loop(
        hbm2.as_array(), dma_geometry_table(cfg), ops, offs, ch, bk, stats, blocks, hset, work, out, stop
    )
    # same sequence through the Python twin
    st = PyTimingState(hbm2)
    t, expect = 0, []
    for op in ops:
        g = dma_geometry(cfg, int(op), 0)
        lat = schedule_py(hbm2, st, dma_blocks_py(hbm2, dma_row_ranges(g, 0, 0, g.elem_len, 4096)), g.is_write, t)
        expect.append(lat)
        t += lat
    assert out.tolist() == expect and total == t
    assert payload == 3 * 4 * (64 + 8) + 64 * (64 + 8)
    assert stats[HST_READ_REQUESTS] == 5 + 5 + 72 and stats[HST_WRITE_REQUESTS] == 5
