"""HBM model validation (issue 14, item 3; docs/hbm.md): the microbenchmark table of plena_cli.hbm_bench against
the closed forms of timing.md §5.5, contiguous >= random for the same bytes at every size and channel count,
never above the peak (Ramulator2's HBM2: 32 GB/s per 128-bit channel, 256 GB/s per 8-channel stack, no 50 %
cap), and the FR-FCFS fix of the measured inversion (a bank that must be precharged no longer holds back the
row hits of the other banks of its channel)."""

import pytest

from plena_cli import hbm_bench as B
from plena_sim.hbm.presets import load_preset
from plena_sim.hbm.timing import HbmTimer, PyTimingState, map_address, schedule_py

HBM2 = load_preset("HBM2")


@pytest.fixture(scope="module")
def points():
    return B.measure_points()


def _groups(points):
    out: dict[tuple, list] = {}
    for p in points:
        out.setdefault((p.op, p.state, p.channels, p.nbytes), []).append(p)
    return out


def test_table_covers_every_case(points):
    groups = _groups(points)
    assert set(groups) == {(op, st, ch, n) for op, _ in B.OPS for st in B.STATES for ch in B.CHANNELS for n in B.SIZES}
    per_group = 1 + len(B.PITCHES) + 2 * len(B.SEEDS)
    assert all(len(g) == per_group for g in groups.values())


def test_closed_forms_hold_exactly(points):
    # contiguous, idle: tRCD + (tCL | tCWL) + ceil(n / channels) * tBL  (28 + 2m reads, 18 + 2m writes on HBM2)
    checked = 0
    for p in points:
        if p.closed_form is not None:
            assert p.cycles == p.closed_form, p
            checked += 1
    contiguous_idle = [p for p in points if p.pattern == "contiguous" and p.state == "idle"]
    assert all(p.closed_form is not None for p in contiguous_idle)
    assert checked == len(contiguous_idle) + 1  # + the 366 strided case
    by = {(p.op, p.channels, p.nbytes): p.cycles for p in contiguous_idle}
    assert by["read", 8, 1 << 20] == 28 + 2 * 2048 == 4124
    assert by["write", 8, 1 << 20] == 18 + 2 * 2048
    assert by["read", 1, 1 << 20] == 28 + 2 * 16384
    assert by["read", 8, 256] == 30  # one block per channel: the single cold read
    assert by["write", 8, 256] == 20  # the single cold write


def test_strided_64_rows_match_timing_md_5_2(points):
    # timing.md §5.2: 64 single-block Plain rows, cold: 51 at pitch 4096, 87 at 2^16, 366 at 2^18 ... 2^24
    got = {
        p.pitch: p.cycles
        for p in points
        if (p.op, p.state, p.pattern, p.channels, p.nbytes) == ("read", "idle", "strided", 8, 4096)
    }
    assert got[4096] == 51 and got[1 << 16] == 87 and got[1 << 21] == 366
    assert B.closed_form_strided(HBM2, 1 << 21, 4096, False) == 7 * (34 + 14) + 14 + 14 + 2 == 366


def test_contiguous_at_least_as_fast_as_random(points):
    # the same bytes in random block order never beat the contiguous DMA (idle and warm memory, every size, every
    # channel count); scattered random blocks neither (idle memory: equal footing, every bank closed)
    for key, g in _groups(points).items():
        contig = next(p for p in g if p.pattern == "contiguous")
        for p in g:
            if p.pattern == "random order" or (p.pattern == "random blocks" and p.state == "idle"):
                assert contig.cycles <= p.cycles, (key, contig, p)
                assert contig.gbps >= p.gbps


def test_never_above_peak(points):
    for ch in B.CHANNELS:
        assert B.bench_params(ch).peak_bytes_per_cycle == B.ramulator2_peak_gbps(ch) == 32.0 * ch
    assert B.ramulator2_peak_gbps(8) == 256.0
    for p in points:
        requests = len(B.pattern_blocks(p.pattern, p.nbytes, 64, p.pitch, p.seed))
        assert 64 * requests <= B.bench_params(p.channels).peak_bytes_per_cycle * p.cycles, p
        assert p.gbps <= B.ramulator2_peak_gbps(p.channels)


def test_long_contiguous_reads_approach_peak_without_a_50_percent_cap(points):
    for p in points:
        if p.pattern == "contiguous" and p.nbytes == 1 << 20:
            assert p.gbps >= 0.95 * B.ramulator2_peak_gbps(p.channels), p


def _block(params, channel, bank_group, bank, row, nth=0):
    """The ``nth`` block (from 0) with these DRAM coordinates (timing.md §5.2)."""
    blk = 0
    while True:
        f = map_address(params, blk * params.burst_bytes)
        if (f.channel, f.bank_group, f.bank, f.row) == (channel, bank_group, bank, row):
            if nth == 0:
                return blk
            nth -= 1
        blk += 1


def _hol_case():
    """Channel 0 after a warm read: bank (bg 0, bank 0) holds row 1, bank (bg 1, bank 0) holds row 0. Block a
    (bg 0, row 0: a conflict) is listed before block b (bg 1, row 0: a hit), both in DRAM row 0."""
    x, y = _block(HBM2, 0, 0, 0, 1), _block(HBM2, 0, 1, 0, 0)
    a, b = _block(HBM2, 0, 0, 0, 0), _block(HBM2, 0, 1, 0, 0, nth=1)  # b: another column of y's row
    return [x, y], a, b


@pytest.mark.parametrize("order", ["conflict first", "hit first"])
def test_a_conflict_does_not_hold_back_a_row_hit(order):
    # warm read of x (bg0 row 1) and y (bg1 row 0) at 0: both misses, ACT at 0; y col 14 (row 0 first), x col 16;
    # ends 32; x's bank may precharge at max(ACT + tRAS, col + tRTP) = 34. Then at t0 = 32 the DMA [a, b]:
    # FR-FCFS serves the hit b at 32 (data until 48) while a's bank precharges (34), activates (48) and is ready
    # at 62: a's data ends at 62 + tCL + tBL = 78, latency 46 = (34 - 32) + tRP + tRCD + tCL + tBL -- the
    # conflict alone; the in-order model charged 48 when a was listed first and 46 when b was (the inversion).
    warm, a, b = _hol_case()
    blocks = [a, b] if order == "conflict first" else [b, a]
    timer = HbmTimer(HBM2)
    st = PyTimingState(HBM2)
    assert timer.latency_of_blocks(warm, False, 0) == schedule_py(HBM2, st, warm, False, 0) == 32
    lat = timer.latency_of_blocks(blocks, False, 32)
    assert lat == schedule_py(HBM2, st, blocks, False, 32) == (34 - 32) + 14 + 14 + 14 + 2 == 46
    stats = timer.stats_dict()
    assert (stats["row_misses"], stats["row_hits"], stats["row_conflicts"]) == (2, 1, 1)


@pytest.mark.parametrize(("channels", "nbytes"), [(1, 1024), (2, 1024), (1, 256), (8, 65536)])
def test_python_twin_agrees_on_bench_points(channels, nbytes):
    # the reference interpreter's scheduler (schedule_py) gives the table's numbers too
    params = B.bench_params(channels)
    for pattern, seed in (("contiguous", -1), ("random order", 0)):
        blocks = B.pattern_blocks(pattern, nbytes, 64, 0, seed)
        for warm in (False, True):
            st = PyTimingState(params)
            t0 = schedule_py(params, st, B.warm_traffic(params), False, 0) if warm else 0
            assert schedule_py(params, st, blocks, False, t0) == B.dma_cycles(params, blocks, False, warm)


def test_warm_small_dmas_exact_after_the_fix(points):
    # 1 channel, 256 B at 0, warm: blocks 0..3 in bank groups 0..3 of bank 0, DRAM row 0; the warm read left row 1
    # open in bank groups 0, 2 (conflicts) and row 0 in 1, 3 (hits), and ended at 60 (16 misses: 28 + 2*16).
    # FR-FCFS: the hits go at 60 and 62 while bank groups 0 and 2 precharge (60) and activate (74): their data
    # starts at 88 and 90, so 46 = tRP + tRCD + tCL + 2 tBL (writes: tCWL, 36). The in-order model served block 0
    # (a conflict) first and pushed the hits behind it: 50 / 40, worse than two of the random orders (48 / 38).
    by = {(p.op, p.pattern, p.seed): p.cycles for p in points if (p.state, p.channels, p.nbytes) == ("warm", 1, 256)}
    assert by["read", "contiguous", -1] == 14 + 14 + 14 + 2 * 2 == 46
    assert by["write", "contiguous", -1] == 14 + 14 + 4 + 2 * 2 == 36
    assert [by["read", "random order", s] for s in B.SEEDS] == [46] * len(B.SEEDS)
    assert [by["write", "random order", s] for s in B.SEEDS] == [36] * len(B.SEEDS)
    st = PyTimingState(B.bench_params(1))
    assert schedule_py(B.bench_params(1), st, B.warm_traffic(B.bench_params(1)), False, 0) == 28 + 2 * 16


def test_hbm_bench_command(capsys):
    # plena-sim hbm-bench: the docs tables (markdown) and the points (--json); an unknown preset is a usage error
    import json

    from plena_cli.main import main

    assert main(["hbm-bench", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc) == len(B.measure_points())
    first = doc[0]
    assert (first["op"], first["state"], first["pattern"], first["channels"], first["nbytes"]) == (
        "read",
        "idle",
        "contiguous",
        1,
        256,
    )
    assert first["cycles"] == first["closed_form"] == 14 + 14 + 4 * 2 and first["gbps"] == 256 / 36
    assert main(["hbm-bench"]) == 0
    out = capsys.readouterr().out
    assert out.count("| ch | peak GB/s |") == 4 and "| 8 | 256 | 1 MiB | 4,124 | 4,124 (254.3) |" in out
    assert main(["hbm-bench", "--preset", "NOPE"]) == 2
    assert "unknown preset 'NOPE'" in capsys.readouterr().err
