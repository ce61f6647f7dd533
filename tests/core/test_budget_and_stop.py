"""The work budget (plena_sim.limits.budget), the O(1) runaway guard and stop requests (plena_sim.limits.stop), on
both backends (issue 20: D4, D20).

* the budget counts each DMA row and each 4096 matrix MACs besides the instruction, both backends fault at the same
  instruction with the same record, and a huge H_* is refused before it moves a row;
* the runaway guard keeps the spec's records and faults (isa.md §6.6) at every depth, and a loop stack of 200,000
  records costs linear time (before: every record was incremented on every instruction, 19.7 s);
* a signal stops a Numba run between instructions -- also between the rows of one H_* instruction -- with the
  instructions retired, and a resumed run ends in exactly the state of an uninterrupted one.
"""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest
from simhelpers import machine, small_cfg
from test_lockstep import diff_outcomes, diff_states

from isa.assembler import assemble
from isa.encoding import OPCODES, encode
from isa.table import mac_table
from plena_sim import core, reference
from plena_sim.config import load_config
from plena_sim.errors import RunStopped
from plena_sim.faults import R_BUDGET
from plena_sim.limits import stop
from plena_sim.limits.budget import MACS_PER_UNIT, work_table
from plena_sim.machine import Machine
from plena_sim.memory.state import MachineState

# ------------------------------------------------------------------------------------------ the work budget


def test_work_table_counts_rows_and_macs():
    cfg = small_cfg(HBM_V_Prefetch_Amount=8, HBM_V_Writeback_Amount=3)
    work = work_table(cfg)
    macs = mac_table(cfg.MLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT)
    assert work[OPCODES["S_ADDI_INT"]] == 1 and work[OPCODES["V_ADD_VV"]] == 1
    assert work[OPCODES["H_PREFETCH_V"]] == 1 + 8 and work[OPCODES["H_STORE_V"]] == 1 + 3
    assert work[OPCODES["H_PREFETCH_M"]] == 1 + cfg.P_M == 1 + 16
    for name in ("M_MM", "M_BMM", "M_TMM", "M_MV"):
        assert work[OPCODES[name]] == 1 + macs[OPCODES[name]] // MACS_PER_UNIT
    big = load_config(overrides={"MLEN": 512, "VLEN": 512, "BLEN": 32, "HLEN": 128, "BROADCAST_AMOUNT": 4})
    assert work_table(big)[OPCODES["M_MM"]] == 1 + 512 * 32 * 32 // 4096 == 129


PROGRAM = "S_ADDI_INT gp1, gp0, 16\nH_PREFETCH_V gp1, gp0, a0, 0, 0\nS_ADDI_INT gp2, gp0, 1\nV_ADD_VV gp1, gp1, gp1\n"


@pytest.mark.parametrize(
    "budget, retired, record_tail",
    [
        (0, 0, (0, -1, 0, 0, 0)),  # VALUE retired, INDEX, LIMIT, X6 units beyond 1/instruction, X7 the next's extra
        (1, 1, (1, -1, 1, 0, 8)),  # the H_PREFETCH_V needs 9 units, 0 are left
        (9, 1, (1, -1, 9, 0, 8)),  # 8 left: still one short
        (10, 2, (2, -1, 10, 8, 0)),  # the prefetch ran (10 units used): the next S_ADDI_INT needs one more
        (11, 3, (3, -1, 11, 8, 0)),
    ],
)
def test_budget_counts_dma_rows_identically_on_both_backends(budget, retired, record_tail):
    cfg = small_cfg(HBM_V_Prefetch_Amount=8)
    recs = []
    for backend in ("reference", "numba"):
        res = machine(backend, cfg).run(PROGRAM, budget, raise_on_fault=False)
        assert res.fault is not None and res.fault.rule == "BUDGET" and res.instructions == retired
        recs.append(res.fault.record)
        assert f"max_instructions={budget}" in str(res.fault) and "work budget exhausted" in str(res.fault)
    assert recs[0] == recs[1] == (R_BUDGET, retired, -1, *record_tail)  # pc == retired (straight-line code)
    res = machine("numba", cfg).run(PROGRAM, 12)
    assert res.fault is None and res.instructions == 4


def test_budget_counts_matrix_macs():
    cfg = small_cfg()  # M_BMM: BA*M*M*H = 4 * 16 * 16 * 4 = 4096 MACs = one unit more
    bmm = encode("M_BMM", rs1=0, rs2=0)
    assert int(work_table(cfg)[OPCODES["M_BMM"]]) == 2
    for backend in ("reference", "numba"):
        res = machine(backend, cfg).run([bmm] * 3, 5, raise_on_fault=False)
        assert res.fault is not None and res.fault.rule == "BUDGET" and res.instructions == 2
        assert res.fault.record[6:] == (2, 1)
        assert machine(backend, cfg).run([bmm] * 3, 6).fault is None


def test_huge_dma_is_refused_by_the_budget_before_it_moves_a_row():
    """D4. Before: --max-instructions 50 let one H_PREFETCH_V of 4 M rows run (~24 s, 2 GB): it is 4 M + 1 units."""
    cfg = load_config(overrides={"HBM_V_Prefetch_Amount": 4194304})
    m = Machine(cfg)
    m.run("S_ADDI_INT gp1, gp0, 1\n")  # JIT / cache load outside the clock
    t0 = time.perf_counter()
    res = m.run("H_PREFETCH_V gp0, gp0, a0, 0, 0\n", max_instructions=50, raise_on_fault=False)
    assert time.perf_counter() - t0 < 1.0
    assert res.fault is not None and res.fault.rule == "BUDGET" and res.instructions == 0
    assert res.fault.record == (R_BUDGET, 0, -1, 0, -1, 50, 0, 4194304)
    assert "the next instruction needs 4194305" in str(res.fault)


def test_budget_out_of_range_is_a_value_error():
    with pytest.raises(ValueError, match="max_instructions"):
        Machine(small_cfg()).run("S_ADDI_INT gp1, gp0, 1\n", max_instructions=1 << 63)


# ------------------------------------------------------------------------------------------ the runaway guard

#: loop-stack programs whose records are reset, removed out of order, broken out of and overrun
LOOP_PROGRAMS = {
    "outer reset with an inner record left": [
        "C_LOOP_START gp1, 3",
        "C_LOOP_START gp2, 2",
        "S_ADDI_INT gp5, gp5, 1",
        "C_LOOP_END gp1",  # the outer record iterates while gp2's record stays on the stack
    ],
    "end of a non-top record": [
        "C_LOOP_START gp1, 2",
        "C_LOOP_START gp2, 5",
        "C_LOOP_START gp3, 2",
        "S_ADDI_INT gp5, gp5, 1",
        "C_LOOP_END gp2",
        "C_LOOP_END gp3",
        "C_LOOP_END gp1",
    ],
    "break": [
        "C_LOOP_START gp1, 4",
        "C_LOOP_START gp2, 9",
        "S_ADDI_INT gp5, gp5, 1",
        "C_BREAK",
        "C_LOOP_END gp2",
        "C_LOOP_END gp1",
    ],
    "inner runaway": ["C_LOOP_START gp1, 2", "C_LOOP_START gp2, 3"]
    + ["S_ADDI_INT gp5, gp5, 1"] * 40
    + ["C_LOOP_END gp2", "C_LOOP_END gp1"],
    "outer runaway": ["C_LOOP_START gp1, 2"]
    + ["C_LOOP_START gp2, 9", "S_ADDI_INT gp5, gp5, 1", "C_LOOP_END gp2"] * 2
    + ["C_LOOP_END gp1"],
    "deep stack past LOOP_CAP": [f"C_LOOP_START gp{1 + k % 15}, 2" for k in range(300)]
    + ["S_ADDI_INT gp5, gp5, 1"] * 30,
}


@pytest.mark.parametrize("maxloop", [3, 17, 40, 1000])
@pytest.mark.parametrize("name", list(LOOP_PROGRAMS))
def test_runaway_guard_matches_the_reference(name, maxloop):
    cfg = small_cfg(MAX_LOOP_INSTRUCTIONS=maxloop)
    words = assemble("\n".join(LOOP_PROGRAMS[name]) + "\n").words
    for budget in (10_000, 7, 25):
        s_ref, s_jit = MachineState(cfg), MachineState(cfg)
        o_ref = reference.execute(s_ref, words, budget)
        o_jit = core.execute(s_jit, words, budget)
        assert not diff_outcomes(o_ref, o_jit) + diff_states(s_ref, s_jit), (name, maxloop, budget)
        assert s_ref.loop_stack == s_jit.loop_stack


def test_deep_loop_stack_costs_linear_time():
    """D20. Before: 200,000 nested C_LOOP_START took 19.7 s (every record incremented on every instruction)."""
    n = 200_000
    words = [encode("C_LOOP_START", rd=1 + k % 15, imm22=2) for k in range(n)]
    m = Machine(small_cfg(MAX_LOOP_INSTRUCTIONS=10**12))
    m.run(words[:3])
    t0 = time.perf_counter()
    res = m.run(words)
    took = time.perf_counter() - t0
    assert res.fault is None and res.instructions == n
    stack = m.regs["loop_stack"]
    assert len(stack) == n
    assert stack == [(k, 1 + k % 15, n - 1 - k) for k in range(n)]  # record k counted every later instruction
    assert took < 4.0, f"{took:.2f} s"


# ------------------------------------------------------------------------------------------ stop requests


class _Stop(RunStopped):
    pass


class _Alarm:
    """SIGALRM every ``period`` seconds raising :class:`_Stop`, with the stop flag installed (main thread)."""

    def __init__(self, period: float):
        self.period = period

    def __enter__(self):
        def handler(signum, frame):
            raise _Stop()

        self.previous = signal.signal(signal.SIGALRM, handler)
        self.flag = stop.StopFlag.create()
        assert self.flag is not None
        self.watch = stop.watching(self.flag)
        self.watch.__enter__()
        signal.setitimer(signal.ITIMER_REAL, self.period, self.period)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.watch.__exit__(None, None, None)
        self.flag.close()
        signal.signal(signal.SIGALRM, self.previous)


#: DMA-heavy loop: 64-row H_PREFETCH_V / H_STORE_V (MX encode + decode), vector work, many iterations
STOP_PROGRAM = """\
S_ADDI_INT gp1, gp0, 64
S_ADDI_INT gp6, gp0, 1024
C_SET_SCALE_REG gp6
C_LOOP_START gp2, 120
H_PREFETCH_V gp0, gp0, a0, 0, 0
V_ADD_VV gp1, gp0, gp1
V_MUL_VV gp1, gp1, gp1
H_STORE_V gp1, gp0, a0, 0, 0
S_ADDI_INT gp7, gp7, 3
C_LOOP_END gp2
"""


def _stop_cfg():
    return load_config(
        overrides={
            "HBM_V_Prefetch_Amount": 4096,
            "HBM_V_Writeback_Amount": 4096,
            "VECTOR_SRAM_SIZE": 8192,
            "HBM_SIZE": 1 << 24,  # diff_states compares every byte
        }
    )


@pytest.mark.parametrize("timing", ["serial", "overlap"])
def test_stopped_and_resumed_runs_end_exactly_like_an_uninterrupted_one(timing):
    cfg = _stop_cfg()
    whole = Machine(cfg, timing=timing)
    whole.vram.write(0, np.linspace(-3, 3, 64 * 64, dtype=np.float32).reshape(64, 64))
    pieces = Machine(cfg, timing=timing)
    pieces.state.vram[:] = whole.state.vram
    t0 = time.perf_counter()
    assert whole.run(STOP_PROGRAM).fault is None
    period = max((time.perf_counter() - t0) / 7, 0.005)  # several stops per run, most inside an H_* instruction
    stops_in_runs = 0
    with _Alarm(period):
        resume = False
        while True:
            try:
                res = pieces.run(STOP_PROGRAM, resume=resume)
                break
            except _Stop as exc:  # raised in the run (with its retired count) or around it
                stops_in_runs += exc.retired is not None
                resume = True
    assert stops_in_runs >= 2 and res.fault is None
    assert not diff_states(whole.state, pieces.state)
    assert np.array_equal(whole.state.timing.ts, pieces.state.timing.ts)
    assert whole.state.timing.hbm_counts() == pieces.state.timing.hbm_counts()
    assert pieces.state.loop_stack == whole.state.loop_stack == []


def test_a_flag_set_by_a_signal_that_asks_for_no_stop_is_rearmed():
    """A signal whose handler does not raise (here SIGALRM recording itself) stops the loop for nothing: the run
    re-arms the flag and goes on to the same end."""
    cfg = _stop_cfg()
    seen = []
    previous = signal.signal(signal.SIGALRM, lambda s, f: seen.append(s))
    flag = stop.StopFlag.create()
    assert flag is not None
    try:
        with stop.watching(flag):
            signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
            res = Machine(cfg).run(STOP_PROGRAM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        flag.close()
        signal.signal(signal.SIGALRM, previous)
    ref = Machine(cfg).run(STOP_PROGRAM)
    assert seen and res.instructions == ref.instructions and res.cycles == ref.cycles
    assert res.stats["hbm"] == ref.stats["hbm"] and res.stats["mx"] == ref.stats["mx"]
