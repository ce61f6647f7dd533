"""timing.md §2-§5 through the Machine: HBM closed forms, serial sums, the overlap scoreboard,
mode invariants and backend / run-to-run determinism (cycles, counters and trace records)."""

import numpy as np
import pytest

from isa.encoding import OPCODES
from plena_sim.config import default_config, load_config
from plena_sim.limits.budget import work_table
from plena_sim.machine import Machine

CFG = default_config()  # reference config: M = V = 64, BLEN 4, MXFP8, DC_EN = 1, HBM2


def run(prog, timing="serial", backend="numba", cfg=CFG, trace=False, **regs):
    m = Machine(cfg, backend=backend, timing=timing)
    for k, v in regs.items():
        m.set_reg(k, v)
    return m, m.run(prog, trace=trace)


def lat_of(res):
    return [r["cycles"] for r in res.trace.rows()]


# ------------------------------------------------------------------------ HBM closed forms (§5.5)


def test_prefetch_v_cold_then_open_row():
    _, res = run("H_PREFETCH_V gp0, gp0, a0, 0, 0\nH_PREFETCH_V gp0, gp0, a0, 0, 0", trace=True, SCALE=256)
    assert lat_of(res) == [30, 16] and res.cycles == 46
    h = res.stats["hbm"]
    assert h["read_requests"] == 10 and h["row_misses"] == 5 and h["row_hits"] == 5
    assert h["bytes_read"] == 640 and h["payload_bytes_read"] == 2 * 4 * (64 + 8)


def test_store_v_cold():
    _, res = run("H_STORE_V gp0, gp0, a0, 0, 0", SCALE=256)
    assert res.cycles == 20 and res.stats["hbm"]["write_requests"] == 5
    assert res.stats["hbm"]["bytes_written"] == 320


def test_prefetch_m_scale_4096():
    _, res = run("H_PREFETCH_M gp0, gp0, a0, 0, 0", SCALE=4096)
    assert res.cycles == 47 and res.stats["hbm"]["read_requests"] == 72
    assert res.stats["hbm"]["per_channel_requests"] == [9] * 8


def test_row_conflict_after_open_row():
    # a 64 B Plain read at 0, again (hit), then 0x40040 (same bank, other row) at cycle 46: 44
    from plena_sim.hbm import timing as HT

    p = HT.timing_params(CFG)
    st = HT.PyTimingState(p)
    assert HT.schedule_py(p, st, [0], False, 0) == 30
    assert HT.schedule_py(p, st, [0], False, 30) == 16
    assert HT.schedule_py(p, st, [0x00040040 // 64], False, 46) == 44


def test_long_sequential_prefetch_m_reaches_peak():
    cfg = load_config(
        overrides={
            "MLEN": 1024,
            "VLEN": 1024,
            "BLEN": 4,
            "BROADCAST_AMOUNT": 64,
            "HBM_M_Prefetch_Amount": 1024,
            "HBM_V_Prefetch_Amount": 4,
            "HBM_V_Writeback_Amount": 4,
            "MATRIX_SRAM_SIZE": 1024 * 1024,
            "VECTOR_SRAM_SIZE": 64,
        }
    )
    _, res = run("H_PREFETCH_M gp0, gp0, a0, 0, 0", cfg=cfg, SCALE=1 << 20)
    h = res.stats["hbm"]
    assert h["read_requests"] == 18432 and res.cycles == 4636
    frac = h["achieved_bandwidth_GBps"] / h["peak_bandwidth_GBps"]
    assert frac >= 0.95 and abs(frac - 0.994) < 0.001


def _prefetch_stream(offsets_lui):
    lines = []
    for k in offsets_lui:
        lines.append(f"S_LUI_INT gp1, {k}")
        lines.append("H_PREFETCH_M gp0, gp1, a0, 0, 0")
    return "\n".join(lines)


def test_random_rows_slower_than_sequential():
    n = 32
    seq = _prefetch_stream([k for k in range(n)])  # offsets k * 4096
    rng = np.random.default_rng(1)
    rnd = _prefetch_stream([int(x) * 64 for x in rng.permutation(n)])  # offsets in distinct DRAM rows
    _, a = run(seq, SCALE=1 << 26)
    _, b = run(rnd, SCALE=1 << 26)
    assert a.instructions == b.instructions == 2 * n
    assert b.cycles > a.cycles
    assert b.stats["hbm"]["row_conflicts"] > a.stats["hbm"]["row_conflicts"]
    assert a.stats["hbm"]["row_hits"] > b.stats["hbm"]["row_hits"]


# ------------------------------------------------------------------------ serial (§3)

SERIAL_PROG = """\
S_ADDI_INT gp1, gp0, 1024
V_ADD_VV gp1, gp0, gp0
V_RED_SUM f1, gp0
V_RECI_V gp1, gp1
M_MM 0, gp0, gp0
M_MM_WO gp1, gp0, 0
S_EXP_FP f1, f1
V_RED_MAX f0, gp0
C_SET_SCALE_REG gp0
"""
# 1 + 1 + 8 + 2 + 64 + 1 + 1 + 0 + 1 (reference latencies, timing.md §2)
SERIAL_CYCLES = 79


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_serial_is_sum_of_latencies(backend):
    _, res = run(SERIAL_PROG, backend=backend, trace=True)
    assert res.cycles == SERIAL_CYCLES
    assert lat_of(res) == [1, 1, 8, 2, 64, 1, 1, 0, 1]
    assert res.stats["unit_busy_cycles"] == {"M": 65, "V": 11, "S": 2, "H": 0, "C": 1}


# ------------------------------------------------------------------------ overlap (§4)


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_independent_vector_issues_at_cycle_1(backend):
    prog = "M_MM 0, gp0, gp0\nV_ADD_VV gp1, gp1, gp1"
    _, o = run(prog, "overlap", backend, trace=True, gp1=1024)
    _, s = run(prog, "serial", backend, gp1=1024)
    assert [r["issue"] for r in o.trace.rows()] == [0, 1]
    assert o.cycles == 64 and s.cycles == 65
    assert o.stats["overlap"] == {"stall_unit": 0, "stall_data": 0, "issue_cycles": 2}


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_dependent_writeout_waits(backend):
    prog = "M_MM 0, gp0, gp0\nM_MM_WO gp1, gp0, 0"
    _, o = run(prog, "overlap", backend, trace=True, gp1=1024)
    assert [r["issue"] for r in o.trace.rows()] == [0, 64]
    assert o.cycles == 65 == run(prog, "serial", backend, gp1=1024)[1].cycles
    # M_MM_WO is on the busy M unit too: unit_free (64) >= the data term (64) -> a unit stall (§4)
    assert o.stats["overlap"] == {"stall_unit": 63, "stall_data": 0, "issue_cycles": 65}


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_independent_prefetch_overlaps_matrix(backend):
    prog = "M_MM 0, gp0, gp0\nH_PREFETCH_V gp1, gp0, a0, 0, 0"  # VRAM rows 16..19, not read by M_MM
    _, o = run(prog, "overlap", backend, trace=True, gp1=1024, SCALE=256)
    _, s = run(prog, "serial", backend, gp1=1024, SCALE=256)
    assert [(r["issue"], r["end"]) for r in o.trace.rows()] == [(0, 64), (1, 31)]
    assert o.cycles == 64 and s.cycles == 64 + 30


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_dependent_prefetch_does_not_overlap(backend):
    prog = "M_MM 0, gp0, gp0\nH_PREFETCH_V gp0, gp0, a0, 0, 0"  # overwrites rows 0..3 M_MM reads (WAR)
    _, o = run(prog, "overlap", backend, trace=True, SCALE=256)
    _, s = run(prog, "serial", backend, SCALE=256)
    assert [(r["issue"], r["end"]) for r in o.trace.rows()] == [(0, 64), (64, 94)]
    assert o.cycles == s.cycles == 94
    assert o.stats["overlap"]["stall_data"] == 63


def test_unit_conflict_is_a_unit_stall():
    _, o = run("M_MM 0, gp0, gp0\nM_MV 0, gp0, gp0", "overlap", trace=True)
    assert [r["issue"] for r in o.trace.rows()] == [0, 64]
    assert o.stats["overlap"]["stall_unit"] == 63 and o.cycles == 128


def test_dependent_chain_takes_serial_time():
    prog = "\n".join(
        [
            "V_ADD_VV gp1, gp1, gp1",
            "V_EXP_V gp1, gp1",
            "V_RECI_V gp1, gp1",
            "V_RED_SUM f1, gp1",
            "S_EXP_FP f2, f1",
            "S_ST_FP f2, gp0, 3",
            "S_LD_FP f3, gp0, 3",
        ]
    )
    _, o = run(prog, "overlap", gp1=64)
    _, s = run(prog, "serial", gp1=64)
    assert o.cycles == s.cycles == 1 + 1 + 2 + 8 + 1 + 1 + 1


# ------------------------------------------------------------------------ invariants and determinism

LOOP_PROG = """\
S_ADDI_INT gp1, gp0, 256
C_SET_SCALE_REG gp1
S_ADDI_INT gp4, gp0, 1024
C_LOOP_START gp2, 3
  H_PREFETCH_V gp4, gp5, a0, 0, 0
  M_MM 0, gp0, gp0
  V_ADD_VV gp4, gp4, gp4
  V_RED_SUM f1, gp4
  S_ADD_FP f0, f1, f1
  M_MM_WO gp6, gp0, 0
  S_ADDI_INT gp5, gp5, 256
  H_STORE_V gp4, gp5, a0, 0, 0
  S_ST_INT gp5, gp0, 7
  S_LD_INT gp7, gp0, 7
  C_LOOP_START gp3, 2
    V_EXP_V gp4, gp4
    C_BREAK
  C_LOOP_END gp3
C_LOOP_END gp2
V_TOPK gp0, gp4, gp8, 0
"""


def _core_stats(res):
    s = dict(res.stats)
    for k in ("host_seconds", "sim_cycles_per_second", "jit_compile_seconds", "backend"):
        s.pop(k)
    return s


@pytest.mark.parametrize("timing", ["serial", "overlap", "rtl"])
def test_backends_agree_and_runs_repeat(timing):
    regs = {"gp6": 2048, "gp8": 16}
    _, a = run(LOOP_PROG, timing, "numba", trace=True, **regs)
    _, b = run(LOOP_PROG, timing, "numba", trace=True, **regs)
    _, r = run(LOOP_PROG, timing, "reference", trace=True, **regs)
    assert a.fault is None and a.instructions > 30
    assert _core_stats(a) == _core_stats(b) == _core_stats(r)
    assert np.array_equal(a.trace.records, b.trace.records)
    assert np.array_equal(a.trace.records, r.trace.records)


def test_overlap_bounds_and_busy_identical():
    regs = {"gp6": 2048, "gp8": 16}
    _, s = run(LOOP_PROG, "serial", trace=True, **regs)
    _, o = run(LOOP_PROG, "overlap", **regs)
    zero = sum(1 for r in s.trace.rows() if r["cycles"] == 0)
    assert zero > 0
    assert o.cycles <= s.cycles + zero
    assert o.cycles < s.cycles
    for u in "MVSC":
        assert o.stats["unit_busy_cycles"][u] == s.stats["unit_busy_cycles"][u]
    assert s.stats["cycles"] == sum(s.stats["unit_busy_cycles"].values())


def test_timing_state_persists_across_resume():
    m = Machine(CFG)
    m.set_reg("SCALE", 256)
    prog = "H_PREFETCH_V gp0, gp0, a0, 0, 0\nH_PREFETCH_V gp0, gp0, a0, 0, 0"
    one_prefetch = int(work_table(CFG)[OPCODES["H_PREFETCH_V"]])  # the work budget of exactly one (1 + its rows)
    r1 = m.run(prog, max_instructions=one_prefetch, raise_on_fault=False)
    assert r1.fault.rule == "BUDGET" and r1.instructions == 1 and r1.cycles == 30
    r2 = m.run(prog, resume=True)
    assert r2.cycles == 16  # the row opened by the first call is still open
    assert m.run(prog).cycles == 46  # a fresh run starts cold at cycle 0


def test_trace_ring_keeps_newest():
    m = Machine(CFG)
    res = m.run("C_LOOP_START gp1, 100\nS_ADDI_INT gp2, gp2, 1\nC_LOOP_END gp1", trace=16)
    t = res.trace
    assert t.total == res.instructions == 201 and len(t) == 16 and t.dropped == 185
    assert [r["seq"] for r in t.rows()] == list(range(185, 201))


def test_stats_keys():
    _, res = run(SERIAL_PROG, "overlap")
    s = res.stats
    for k in (
        "timing_mode",
        "config",
        "cycles",
        "time_ns",
        "instructions",
        "by_opcode",
        "by_unit",
        "unit_busy_cycles",
        "unit_utilization",
        "matrix_macs",
        "hbm",
        "mx",
        "overlap",
        "host_seconds",
        "sim_cycles_per_second",
        "jit_compile_seconds",
        "fault",
    ):
        assert k in s
    for k in (
        "read_requests",
        "write_requests",
        "bytes_read",
        "bytes_written",
        "payload_bytes_read",
        "payload_bytes_written",
        "row_hits",
        "row_misses",
        "row_conflicts",
        "per_channel_requests",
        "achieved_bandwidth_GBps",
        "dma_bandwidth_GBps",
        "peak_bandwidth_GBps",
    ):
        assert k in s["hbm"]
    assert s["hbm"]["peak_bandwidth_GBps"] == 256
    assert "overlap" not in run(SERIAL_PROG)[1].stats


@pytest.mark.parametrize("timing", ["serial", "overlap"])
def test_tracing_changes_nothing_but_the_trace(timing):
    regs = {"gp6": 2048, "gp8": 16}
    _, off = run(LOOP_PROG, timing, **regs)
    _, on = run(LOOP_PROG, timing, trace=True, **regs)
    assert off.trace is None and on.trace is not None
    assert _core_stats(off) == _core_stats(on)
    rows = on.trace.rows()
    assert rows[-1]["end"] <= on.cycles and max(r["end"] for r in rows) == on.cycles


def test_dma_scratch_overflow_path(monkeypatch):
    import plena_sim.timing.scoreboard as T

    monkeypatch.setattr(T, "SCRATCH_CAP", 8)  # the 72-block instruction needs a one-off scratch
    _, res = run("H_PREFETCH_M gp0, gp0, a0, 0, 0\nH_PREFETCH_M gp0, gp0, a0, 0, 0", trace=True, SCALE=4096)
    assert lat_of(res)[0] == 47 and res.stats["hbm"]["read_requests"] == 144
