"""Randomised checks of the HBM timing model: Numba kernels == pure-Python twin, invariants of timing.md
§5.5 (peak never exceeded, cold read >= 30), coalescing == memory.md §5.2 reference, determinism."""

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plena_sim.hbm.presets import load_preset
from plena_sim.hbm.timing import (
    EMPTY,
    HbmTimer,
    PyTimingState,
    block_fields,
    dma_blocks_py,
    dma_requests,
    map_address,
    new_dma_scratch,
    new_stats_py,
    schedule_py,
)

HBM2 = load_preset("HBM2")
HBM3 = load_preset("HBM3")
TINY = load_preset(
    "HBM2",
    {"channels": 2, "bank_groups": 2, "banks_per_group": 2, "row_bytes": 256, "ch_xor_shift": 1, "ch_xor_terms": 3},
)
ODD = load_preset(
    "HBM2",
    {"tCCD_L": 0, "tRAS": 1, "tRP": 0, "tWR": 0, "tCL": 1, "tCWL": 0, "tBL": 3, "tCK_ps": 777, "ch_xor_terms": 20},
)
PRESETS = [HBM2, HBM3, TINY, ODD]

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

block_near = st.integers(0, 1 << 13)
block_far = st.integers(0, 1 << 44)
instruction = st.tuples(
    st.lists(st.one_of(block_near, block_near, block_far), min_size=0, max_size=80, unique=True),
    st.booleans(),
    st.integers(0, 300),  # gap to the previous instruction's start
)
programs = st.lists(instruction, min_size=1, max_size=6)


def run_numba(params, program):
    t = HbmTimer(params, max_blocks=8)
    t0 = 0
    lats = []
    for blocks, w, gap in program:
        t0 += gap
        lats.append(t.latency_of_blocks(blocks, w, t0))
    return lats, t


def run_py(params, program):
    s = PyTimingState(params)
    stats = new_stats_py(params)
    t0 = 0
    lats = []
    for blocks, w, gap in program:
        t0 += gap
        lats.append(schedule_py(params, s, blocks, w, t0, stats))
    return lats, s, stats


@settings(max_examples=300, **SETTINGS)
@given(st.sampled_from(range(len(PRESETS))), programs)
def test_numba_equals_python_twin(which, program):
    params = PRESETS[which]
    lats_n, timer = run_numba(params, program)
    lats_p, state, stats = run_py(params, program)
    assert lats_n == lats_p
    assert timer.stats_dict() == stats
    ch, bk = state.to_arrays()
    assert np.array_equal(ch, timer.ch_state)
    assert np.array_equal(bk, timer.bank_state)
    assert (
        stats["row_hits"] + stats["row_misses"] + stats["row_conflicts"]
        == stats["read_requests"] + stats["write_requests"]
        == sum(len(b) for b, _, _ in program)
    )


@settings(max_examples=150, **SETTINGS)
@given(st.sampled_from(range(len(PRESETS))), programs)
def test_peak_never_exceeded_and_latency_at_least_one(which, program):
    params = PRESETS[which]
    lats, _ = run_numba(params, program)
    for (blocks, _w, _g), lat in zip(program, lats, strict=True):
        assert lat >= 1
        # burst_bytes * requests <= peak * latency, in exact integer form
        assert len(blocks) * params.tBL * params.tCK_ps <= params.channels * 1000 * lat


@settings(max_examples=100, **SETTINGS)
@given(st.lists(st.one_of(block_near, block_far), min_size=1, max_size=200, unique=True), st.integers(0, 10**9))
def test_cold_read_at_least_30(blocks, t0):
    for params in (HBM2, HBM3):
        t = HbmTimer(params)
        assert t.latency_of_blocks(blocks, False, t0) >= 30
        assert len(blocks) * 64 <= params.peak_bytes_per_cycle * t.latency_of_blocks(blocks, False, t0 + 5)


@settings(max_examples=50, **SETTINGS)
@given(st.sampled_from(range(len(PRESETS))), programs)
def test_deterministic(which, program):
    params = PRESETS[which]
    a, ta = run_numba(params, program)
    b, tb = run_numba(params, program)
    assert a == b and np.array_equal(ta.stats, tb.stats)
    assert np.array_equal(ta.ch_state, tb.ch_state) and np.array_equal(ta.bank_state, tb.bank_state)


geometry = st.fixed_dictionaries(
    {
        "base": st.integers(0, 1 << 20),
        "off0": st.integers(0, 1 << 16),
        "pitch": st.one_of(st.just(0), st.integers(0, 1 << 14), st.sampled_from([64, 128, 4096, 1 << 16])),
        "rows": st.integers(1, 70),
        "elem_len": st.integers(1, 300),
        "scale_base": st.integers(0, 1 << 22),
        "scale_div": st.integers(1, 32),
        "scale_mul": st.integers(0, 2),
        "scale_len": st.one_of(st.just(0), st.integers(1, 40)),
    }
)


def _ranges(g):
    out = []
    for i in range(g["rows"]):
        o = g["off0"] + i * g["pitch"]
        s = g["scale_base"] + (o // g["scale_div"]) * g["scale_mul"]
        out.append((g["base"] + o, g["elem_len"], s, g["scale_len"]))
    return out


#: the stop flag of dma_requests (plena_sim.limits.stop), never set
NO_STOP = np.zeros(1, dtype=np.uint8)


def _call(params, g, cap):
    blocks, hset, work = new_dma_scratch(params, cap)
    n = dma_requests(
        params.as_array(),
        g["base"],
        g["off0"],
        g["pitch"],
        g["rows"],
        g["elem_len"],
        g["scale_base"],
        g["scale_div"],
        g["scale_mul"],
        g["scale_len"],
        blocks,
        hset,
        work,
        NO_STOP,
    )
    return int(n), blocks, hset


@settings(max_examples=300, **SETTINGS)
@given(st.sampled_from([HBM2, TINY]), geometry)
def test_dma_requests_equals_reference_coalescing(params, g):
    expected = dma_blocks_py(params, _ranges(g))
    bound = g["rows"] * (
        (g["elem_len"] + params.burst_bytes - 1) // params.burst_bytes
        + 1
        + (g["scale_len"] + params.burst_bytes - 1) // params.burst_bytes
        + 1
    )
    assert len(expected) <= bound
    n, blocks, hset = _call(params, g, bound)
    assert n == len(expected) and blocks[:n].tolist() == expected
    assert (hset == EMPTY).all()  # cleaned for the next call
    if len(expected) > 1:  # too small: -1, table still clean
        n, _, hset = _call(params, g, len(expected) - 1)
        assert n == -1 and (hset == EMPTY).all()


def test_dma_requests_reuses_scratch_across_calls():
    blocks, hset, work = new_dma_scratch(HBM2, 256)
    p = HBM2.as_array()
    for base in (0, 64, 0, 1 << 30, 0):
        n = dma_requests(p, base, 0, 0, 64, 64, 0, 8, 1, 0, blocks, hset, work, NO_STOP)  # 64 x the same row
        assert n == 1 and blocks[0] == base // 64 and (hset == EMPTY).all()


@settings(max_examples=200, **SETTINGS)
@given(st.sampled_from(PRESETS + [replace(HBM3, ch_xor_terms=64, ch_xor_shift=63)]), st.integers(0, (1 << 56) - 1))
def test_block_fields_match_map_address(params, blk):
    f = map_address(params, blk * params.burst_bytes)
    got = tuple(int(x) for x in block_fields(params.as_array(), blk))
    assert got == (f.channel, f.bank_group, f.column, f.bank, f.row)
