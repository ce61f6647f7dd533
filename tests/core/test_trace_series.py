"""The data series of ``plena-sim plot`` (plena_sim.trace.series): exact per-bin values by hand, for hand-written
records and for the traces of small programs run under serial timing, and the bins summing to the totals."""

from __future__ import annotations

import numpy as np
import pytest

from isa import assemble
from isa.encoding import UNIT_NAMES
from isa.regions import Region
from isa.table import BY_OPCODE
from plena_sim.config import default_config
from plena_sim.machine import Machine
from plena_sim.timing.scoreboard import RC_END, RC_HBYTES, RC_ISSUE, RC_OP, RC_PC, RC_START, RC_UNIT, REC_N
from plena_sim.trace.file import SavedProgram
from plena_sim.trace.ring import Trace
from plena_sim.trace.series import bandwidth_series, bin_edges, region_series, utilization_series

OPCODE = {ins.mnemonic: op for op, ins in BY_OPCODE.items()}


def _records(*rows: tuple[str, int, int, int]) -> np.ndarray:
    """``(mnemonic, start, end, hbm bytes)`` -> trace records (pc = row index, issue = start)."""
    r = np.zeros((len(rows), REC_N), dtype=np.int64)
    for k, (mnemonic, start, end, nbytes) in enumerate(rows):
        r[k, RC_PC], r[k, RC_OP], r[k, RC_UNIT] = (
            k,
            OPCODE[mnemonic],
            UNIT_NAMES.index(BY_OPCODE[OPCODE[mnemonic]].unit),
        )
        r[k, RC_ISSUE], r[k, RC_START], r[k, RC_END], r[k, RC_HBYTES] = start, start, end, nbytes
    return r


def _trace(*rows, total=None, program=None, mode="serial") -> Trace:
    recs = _records(*rows)
    return Trace(recs, len(recs) if total is None else total, 1 << 20, program, 64, mode)


def test_bin_edges_are_integers_over_the_span():
    t = _trace(("S_ADDI_INT", 0, 1, 0), ("M_MM", 1, 10, 0))
    assert bin_edges(t, 3).tolist() == [0, 3, 6, 10]  # 0 + k * 10 // 3
    assert bin_edges(t, 100).tolist() == list(range(11))  # never more bins than cycles
    assert bin_edges(_trace(), 5).tolist() == [0]  # no records: no bins
    with pytest.raises(ValueError, match="bins: 0 must be >= 1"):
        bin_edges(t, 0)


def test_span_starts_at_the_oldest_kept_record_when_records_were_dropped():
    t = _trace(("M_MM", 100, 164, 0), ("V_EXP_V", 164, 165, 0), total=50)
    assert bin_edges(t, 5).tolist() == [100, 113, 126, 139, 152, 165]


def test_utilization_by_hand():
    # bins [0, 10), [10, 20), [20, 30): M [2, 12) and [12, 14) -> 8, 4, 0; V [25, 30) -> 0, 0, 5; S [0, 1)
    t = _trace(("S_ADDI_INT", 0, 1, 0), ("M_MM", 2, 12, 0), ("M_MM_WO", 12, 14, 0), ("V_EXP_V", 25, 30, 0))
    s = utilization_series(t, 3)
    assert s["edges"].tolist() == [0, 10, 20, 30] and s["width"].tolist() == [10, 10, 10]
    busy = {u: s["units"][u]["busy_cycles"].tolist() for u in UNIT_NAMES}
    assert busy == {"M": [8, 4, 0], "V": [0, 0, 5], "S": [1, 0, 0], "H": [0, 0, 0], "C": [0, 0, 0]}
    assert s["units"]["M"]["fraction"].tolist() == [0.8, 0.4, 0.0]
    assert s["units"]["V"]["fraction"].tolist() == [0.0, 0.0, 0.5]


def test_utilization_of_overlapping_records_is_their_union():
    # overlap mode: M [0, 10) and [5, 15) in flight together; busy 15 cycles, never above 1 per bin
    t = _trace(("M_MM", 0, 10, 0), ("M_MM", 5, 15, 0), ("M_MM", 15, 15, 0), mode="overlap")
    s = utilization_series(t, 3)
    assert s["units"]["M"]["busy_cycles"].tolist() == [5, 5, 5]
    assert s["units"]["M"]["fraction"].tolist() == [1.0, 1.0, 1.0]


def test_bandwidth_by_hand():
    # bins of 10 over [0, 40): 640 B over [10, 20) in bin 1; 100 B over [15, 25) half each side of 20;
    # 7 B over [18, 21): floor(7 * 2 / 3) = 4 before 20, 3 after; 256 B written over [30, 34); a DMA of no
    # cycles at 40 (the span's end) counts in the last bin
    t = _trace(
        ("H_PREFETCH_V", 10, 20, 640),
        ("H_PREFETCH_M", 15, 25, 100),
        ("H_PREFETCH_V", 18, 21, 7),
        ("S_ADDI_INT", 21, 22, 0),
        ("H_STORE_V", 30, 34, 256),
        ("H_PREFETCH_V", 40, 40, 64),
    )
    s = bandwidth_series(t, 4)
    assert s["edges"].tolist() == [0, 10, 20, 30, 40]
    assert s["read_bytes"].tolist() == [0, 640 + 50 + 4, 50 + 3, 64]
    assert s["write_bytes"].tolist() == [0, 0, 0, 256]
    assert s["read_bytes_per_cycle"].tolist() == [0.0, 69.4, 5.3, 6.4]
    assert s["write_bytes_per_cycle"].tolist() == [0.0, 0.0, 0.0, 25.6]


def test_bandwidth_bins_of_one_cycle_match_a_per_cycle_spread():
    """Each cycle of a DMA of b bytes over d cycles gets floor(b (k + 1) / d) - floor(b k / d): checked cycle by
    cycle against a plain loop."""
    rows = [("H_PREFETCH_V", 3, 10, 1000), ("H_PREFETCH_M", 5, 8, 100), ("H_STORE_V", 9, 16, 321)]
    t = _trace(*rows)
    s = bandwidth_series(t, 1000)
    assert s["edges"].tolist() == list(range(17))
    expect = {"read": [0] * 16, "write": [0] * 16}
    for mnemonic, start, end, nbytes in rows:
        d = end - start
        for k in range(d):
            expect["write" if mnemonic == "H_STORE_V" else "read"][start + k] += nbytes * (k + 1) // d - nbytes * k // d
    assert s["read_bytes"].tolist() == expect["read"] and s["write_bytes"].tolist() == expect["write"]
    assert int(s["read_bytes"].sum()) == 1100 and int(s["write_bytes"].sum()) == 321


#: serial latencies of the reference config (timing.md §2): M_MM 64, M_MM_WO 1, V_EXP_V 1, V_RED_SUM 8, S_* 1
UNITS_PROGRAM = """\
S_ADDI_INT gp1, gp0, 1
; @region matmul
M_MM 0, gp0, gp0
M_MM_WO gp3, gp0, 0
; @endregion
; @region softmax
V_EXP_V gp4, gp0
V_RED_SUM f1, gp0
; @endregion
S_ADD_FP f2, f1, f1
"""


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_utilization_of_a_serial_run_by_hand(backend):
    # serial: S [0, 1), M [1, 65) + [65, 66), V [66, 67) + [67, 75), S [75, 76); 4 bins: edges 0 19 38 57 76
    res = Machine(default_config(), backend=backend, timing="serial").run(assemble(UNITS_PROGRAM), trace=True)
    s = utilization_series(res.trace, 4)
    assert s["edges"].tolist() == [0, 19, 38, 57, 76]
    busy = {u: s["units"][u]["busy_cycles"].tolist() for u in UNIT_NAMES}
    assert busy == {"M": [18, 19, 19, 9], "V": [0, 0, 0, 9], "S": [1, 0, 0, 1], "H": [0, 0, 0, 0], "C": [0] * 4}
    assert {u: sum(b) for u, b in busy.items()} == res.stats["unit_busy_cycles"]
    assert s["units"]["M"]["fraction"].tolist() == [18 / 19, 1.0, 1.0, 9 / 19]
    r = region_series(res.trace)
    assert r["paths"] == ["matmul", "softmax"]
    assert r["cycles_inclusive"].tolist() == [65, 9] and r["runs"].tolist() == [1, 1]
    assert r["depth"].tolist() == [0, 0] and r["total_cycles"] == 76


#: one 4-row H_PREFETCH_V and one 4-row H_STORE_V on the reference machine (VLEN 64, MXFP8: one byte per
#: element, one E8M0 scale per 8 elements, SCALE = 256): 256 element bytes (4 bursts of 64 B) + 32 scale bytes
#: (1 burst) = 5 bursts = 320 B each way
DMA_PROGRAM = """\
S_ADDI_INT gp2, gp0, 256
C_SET_SCALE_REG gp2
H_PREFETCH_V gp3, gp0, a0, 0, 0
V_EXP_V gp4, gp0
H_STORE_V gp3, gp0, a1, 0, 0
"""


@pytest.mark.parametrize("timing", ["serial", "overlap"])
def test_bandwidth_of_a_run_sums_to_the_dma_bytes(timing):
    m = Machine(default_config(), timing=timing)
    m.set_reg("a1", 1 << 20)
    res = m.run(assemble(DMA_PROGRAM), trace=True)
    dma = {r["op"]: r for r in res.trace.rows() if r["unit"] == "H"}
    assert dma["H_PREFETCH_V"]["hbm_bytes"] == 320 and dma["H_STORE_V"]["hbm_bytes"] == 320
    assert res.stats["hbm"]["bytes_read"] == 320 and res.stats["hbm"]["bytes_written"] == 320
    for bins in (1, 3, 7, 10_000):
        s = bandwidth_series(res.trace, bins)
        assert int(s["read_bytes"].sum()) == 320 and int(s["write_bytes"].sum()) == 320
        assert (s["read_bytes"] >= 0).all() and (s["write_bytes"] >= 0).all()
    s = bandwidth_series(res.trace, 10_000)  # one-cycle bins: bytes only inside each DMA's span
    read, write = dma["H_PREFETCH_V"], dma["H_STORE_V"]
    assert np.flatnonzero(s["read_bytes"]).tolist() == list(range(read["start"], read["end"]))
    assert np.flatnonzero(s["write_bytes"]).tolist() == list(range(write["start"], write["end"]))
    u = utilization_series(res.trace, 10_000)
    assert {k: int(v["busy_cycles"].sum()) for k, v in u["units"].items()} == res.stats["unit_busy_cycles"]


def test_region_series_orders_paths_as_they_open_and_sums_runs():
    # regions: outer [0, 3) holding inner [1, 2); a path marked twice ("outer" again at [4, 5)) is one entry;
    # an unreached region has 0 cycles. Counter: 0-1, 1-5, 5-6, 6-8, 8-9
    program = SavedProgram(
        (Region("outer", 0, 3), Region("outer/inner", 1, 2), Region("outer", 4, 5), Region("never", 9, 10))
    )
    t = _trace(
        ("S_ADDI_INT", 0, 1, 0), ("M_MM", 1, 5, 0), ("V_EXP_V", 5, 6, 0), ("S_ADDI_INT", 6, 8, 0),
        ("S_ADDI_INT", 8, 9, 0), program=program,
    )  # fmt: skip
    r = region_series(t)
    assert r["paths"] == ["outer", "outer/inner", "never"]
    assert r["cycles_inclusive"].tolist() == [6 + 1, 4, 0] and r["runs"].tolist() == [2, 1, 0]
    assert r["depth"].tolist() == [0, 1, 0] and r["total_cycles"] == 9
    assert region_series(_trace(("S_ADDI_INT", 0, 1, 0)))["paths"] == []
