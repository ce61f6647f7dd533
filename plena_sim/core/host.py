"""The Python side of the core: build the state tuples, call the run loop, grow arrays it asks for.

One job: :func:`execute` (the backend contract shared with :func:`plena_sim.reference.execute`) and
:func:`warm_up` (compile or load the JIT cache once per process).
"""

from __future__ import annotations

import time
from functools import lru_cache

import numpy as np

from isa.encoding import N_OPCODES, decode_program, encode
from isa.program import Program
from isa.table import TOPK_POLICIES

from ..errors import RunStopped
from ..faults import FAULT_RECORD_LEN, R_IL_OPC
from ..limits.budget import work_table
from ..limits.stop import after_stop, poll_array
from ..limits.stop import current as current_stop_flag
from ..memory.state import CTRL_PC, MachineState, Outcome
from ..routing import Routing, no_routing_array
from ..timing import scoreboard as TM
from ..timing.latency import latency_table
from ..timing.rtl import PC_II, PC_N, rtl_pc_costs, rtl_table
from .common import fault
from .loop import run
from .slots import (
    CFG_B,
    CFG_BA,
    CFG_FPS,
    CFG_FUNC,
    CFG_H,
    CFG_HBM_SIZE,
    CFG_INTS,
    CFG_M,
    CFG_MAXLOOP,
    CFG_NTILES,
    CFG_PM,
    CFG_PV,
    CFG_PW,
    CFG_V,
    CFG_VROWS,
    COUNTER_NAMES,
    FMT_BLOCK,
    FMT_E,
    FMT_EB,
    FMT_MT,
    FMT_MX,
    HBM_TYPES,
    N_CFG,
    N_FMT,
    N_STATS,
    OPND_NONE,
    PENDING_NAMES,
    RUN_FAULT,
    RUN_GROW_LOOP,
    RUN_NEED_PAGES,
    RUN_STATIC,
    RUN_STOP,
    STAT_MACS,
    STAT_RETIRED,
)
from .static import TAB_VALID, WORD_FIELDS, opcode_tables, per_pc, static_fault

__all__ = ["execute", "warm_up", "jit_seconds", "COUNTER_NAMES"]


def _cfg_vector(cfg) -> np.ndarray:
    c = np.zeros(N_CFG, dtype=np.int64)
    c[CFG_M], c[CFG_V], c[CFG_B], c[CFG_H], c[CFG_BA] = cfg.MLEN, cfg.VLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
    c[CFG_VROWS], c[CFG_NTILES] = cfg.VECTOR_SRAM_SIZE, cfg.mram_tiles
    c[CFG_FPS], c[CFG_INTS], c[CFG_HBM_SIZE] = cfg.FP_SRAM_SIZE, cfg.INT_SRAM_SIZE, cfg.HBM_SIZE
    c[CFG_PM], c[CFG_PV], c[CFG_PW] = cfg.P_M, cfg.P_V, cfg.P_W
    c[CFG_MAXLOOP] = cfg.MAX_LOOP_INSTRUCTIONS
    return c


def _formats(cfg) -> np.ndarray:
    fmt = np.zeros((len(HBM_TYPES), N_FMT), dtype=np.int64)
    for t, name in enumerate(HBM_TYPES):
        ty = cfg.hbm_type(name)
        data = ty.elem if ty.is_mx else ty.data
        fmt[t, FMT_MX] = int(ty.is_mx)
        fmt[t, FMT_E], fmt[t, FMT_MT] = data.exponent, data.mantissa
        fmt[t, FMT_BLOCK] = ty.block if ty.is_mx else 1
        fmt[t, FMT_EB] = ty.elem_bytes
    return fmt


def _params(cfg, functional: bool = True) -> tuple:
    """(cfg vector, HBM formats, latency table, MACs per opcode, opcode tables, BMM_SCALE) of ``cfg``; the cfg
    vector's FUNC slot says whether the run is functional (1) or timing-only (0)."""
    tabs = opcode_tables()
    macs = tabs.macs(cfg.MLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT)
    lat = np.ascontiguousarray(latency_table(cfg), dtype=np.int64)
    vec = _cfg_vector(cfg)
    vec[CFG_FUNC] = int(functional)
    return (vec, _formats(cfg), lat, macs, tabs.arrays, float(cfg.BMM_SCALE))


#: V_TOPK scratch sizes (the largest policy)
_MAX_E = max(e for e, _k in TOPK_POLICIES)
_MAX_K = max(k for _e, k in TOPK_POLICIES)


def _scratch(cfg, tos: tuple = ()) -> tuple:
    """The loop's scratch buffers and ``tos``, the timing-only state (taint, INT SRAM flags, routing array: the
    machine state's arrays, not scratch; the run always passes them)."""
    W = max(cfg.MLEN, cfg.VLEN)
    bufs = (
        np.empty(W * 4, dtype=np.uint8),
        np.empty(W, dtype=np.uint8),
        np.empty(W, dtype=np.float32),
        np.zeros(len(PENDING_NAMES), dtype=np.int64),
    )
    return (
        np.empty(W, dtype=np.float32),
        np.empty((W + 72, W + 8), dtype=np.float64),  # matrix unit: X rows, 64 rows of sums; +8: no 4 KiB aliasing
        np.empty((W, W), dtype=np.float64),
        bufs,
        np.empty(_MAX_E, dtype=np.float32),
        np.empty(_MAX_E, dtype=np.bool_),
        np.empty(_MAX_E, dtype=np.int64),  # selections (timing-only routing: a permutation of E)
        np.empty(_MAX_K, dtype=np.float32),
        tos,
    )


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _program(program_words, par: tuple, work: np.ndarray) -> tuple:
    """(opcodes, words, the WORD_FIELDS arrays, facts) of a program: the per-pc facts of :func:`.static.per_pc`
    and the budget units of each pc (``work`` = :func:`plena_sim.limits.budget.work_table` per opcode)."""
    if isinstance(program_words, Program):
        program_words = program_words.words
    dec = decode_program(program_words)
    op, fields = _i64(dec["opcode"]), tuple(_i64(dec[k]) for k in WORD_FIELDS)
    cfg_vec, _fmt, lat, _macs, tabs, _scale = par
    facts = per_pc(op, fields, tabs, lat, TM.UNIT_OF, cfg_vec, np.zeros(FAULT_RECORD_LEN, dtype=np.int64))
    return (op, _i64(dec["word"]), fields, (*facts, work[op]))


def _timing(tm, rpc: np.ndarray) -> tuple:
    hbm_tm = (tm.hp, tm.geom, tm.ch, tm.bank, tm.hstats, tm.blocks, tm.hset, tm.work)
    rr = np.zeros((TM.MAX_RANGES, 3), dtype=np.int64)
    wr = np.zeros((TM.MAX_RANGES, 3), dtype=np.int64)
    rtl = (tm.wcls, rpc, tm.hz)
    return (tm.ts, tm.ready, tm.rdone, tm.cv, TM.UNIT_OF, hbm_tm, tm.tbuf, tm.tcount, rr, wr, rtl)


def _rtl_costs(tm, prog: tuple) -> np.ndarray:
    """The per-pc rtl costs of the program (:func:`plena_sim.timing.rtl.rtl_pc_costs`); a 1-column dummy in the
    other models (the loop never reads it there)."""
    if tm.mode_code != TM.MODE_RTL:
        return np.zeros((PC_N, 1), dtype=np.int64)
    words = prog[2]
    return rtl_pc_costs(rtl_table(tm.cfg), prog[0], words[0], words[3])


def execute(
    state: MachineState,
    program_words,
    max_instructions: int = 10**9,
    timing: str | None = None,
    trace_capacity: int | None = None,
    functional: bool = True,
    routing: Routing | None = None,
) -> Outcome:
    """Run ``program_words`` on ``state`` (from ``state.ctrl[CTRL_PC]``) with the Numba core.

    ``functional=False``: a timing-only run (issue 30, docs/timing-only.md): the control, address and integer side
    executes exactly, every check is made, the cycles are charged as in a functional run; the datapath (vector,
    matrix, FP, MX and the data movement of every memory) is skipped. ``routing``: the MoE routing policy of V_TOPK
    in a timing-only run (:mod:`plena_sim.routing`; None: its results are data-derived, TO-DATA when used).

    Returns an :class:`~plena_sim.memory.state.Outcome`: instructions retired, the fault record (or None),
    retired count per opcode, the cycles this call added (timing.md §3 / §4 for ``timing`` =
    ``"serial"`` / ``"overlap"``; None keeps the mode of ``state.timing``, default serial) and the
    counters :data:`COUNTER_NAMES`. Timing state (cycles, scoreboard, HBM banks, trace ring of
    ``trace_capacity`` records) lives in ``state.timing`` and persists across calls until
    ``state.reset_timing()``. ``state`` is mutated in place (loop-stack arrays and the HBM page pool
    may be replaced by larger ones). ``max_instructions`` is the work budget of :mod:`plena_sim.limits.budget`.

    Stop requests: the loop polls the flag of :func:`plena_sim.limits.stop.current` (every 8192 budget units and between
    the rows of an H_* instruction); when it is set the loop returns at an instruction boundary and the pending
    signal handler runs (a :class:`~plena_sim.errors.RunStopped` it raises gets this call's retired count and
    propagates; the state is then that of the boundary: ``Machine.run(..., resume=True)`` continues exactly)."""
    par = _params(state.cfg, functional)
    prog = _program(program_words, par, work_table(state.cfg))
    route = routing.to_array() if routing is not None else no_routing_array()
    tm = state.ensure_timing(timing, trace_capacity, "numba")
    cyc0 = int(tm.ts[TM.T_CYCLES])
    n_words = len(prog[0])
    pc_arrays = (
        np.zeros(n_words, dtype=np.int64),
        np.zeros(n_words, dtype=np.int64),
        np.zeros((n_words, TM.X_N), np.int64),
    )
    out = (
        np.zeros(N_STATS, dtype=np.int64),
        pc_arrays,
        np.zeros(FAULT_RECORD_LEN, dtype=np.int64),
        np.zeros(1, np.int64),
    )
    rpc = _rtl_costs(tm, prog)
    scr, tim = _scratch(state.cfg, (state.taint, state.int_taint, route)), _timing(tm, rpc)
    try:
        st = _run_to_status(state, prog, par, tim, out, scr, max_instructions, tm.trace_capacity)
    except RunStopped as stop:  # raised by a signal handler when the loop stopped for it
        stop.add_retired(out[0][STAT_RETIRED])
        raise
    if st == RUN_STATIC:
        st = _static_fault(out[2], int(state.ctrl[CTRL_PC]), prog, par)
    stats, (pc_count, pc_cycles, pcx) = out[0], out[1]
    if tm.mode_code == TM.MODE_SERIAL:  # the fixed latencies the loop charged without adding them to pc_cycles
        pc_cycles += pc_count * prog[3][0]
    pcx[:, TM.X_BUSY] += pc_count * (rpc[PC_II] if tm.mode_code == TM.MODE_RTL else prog[3][0])  # fixed busy
    fault = tuple(int(x) for x in out[2]) if st == RUN_FAULT else None
    by_opcode = np.zeros(N_OPCODES, dtype=np.int64)
    np.add.at(by_opcode, prog[0], pc_count)
    stats[STAT_MACS] = int(by_opcode @ par[3])
    counters = {name: int(stats[STAT_MACS + k]) for k, name in enumerate(COUNTER_NAMES)}
    cycles = int(tm.ts[TM.T_CYCLES]) - cyc0
    return Outcome(int(stats[STAT_RETIRED]), fault, by_opcode, cycles, counters, pc_count, pc_cycles, pcx)


def _run_to_status(state: MachineState, prog, par, tim, out, scr, max_work: int, trace_capacity: int) -> int:
    """Call the loop until it returns a final status (done, fault, static): grow the loop stack and the HBM page
    pool it asks for, and let the signal handlers run when it stopped for the stop flag."""
    flag = current_stop_flag()
    stopf = poll_array(flag)
    while True:
        hbm = state.hbm
        regs = (state.gp, state.fp, state.areg, state.ctrl, (state.loop_start, state.loop_reg, state.loop_count))
        mem = (state.vram, state.mram, state.fp_sram, state.int_sram, (hbm.page_index, hbm.pages, hbm.meta))
        accs = (state.m_accum, state.v_accum, state.hm_accum, state.hv_accum)
        st = run(prog, regs, mem, accs, par, tim, out, scr, np.int64(max_work), np.int64(trace_capacity), stopf)
        if st == RUN_GROW_LOOP:
            state.grow_loop_stack()
        elif st == RUN_NEED_PAGES:
            hbm.reserve(int(out[3][0]))
        elif st == RUN_STOP:
            after_stop(flag)
        else:
            return int(st)


def _static_fault(frec: np.ndarray, pc: int, prog: tuple, par: tuple) -> int:
    """The fault record of the word at ``pc``: not an instruction (IL-OPC), or its first failing static check."""
    op, word, words, _facts = prog
    o = int(op[pc])
    if par[4][TAB_VALID][o] == 0:
        return int(fault(frec, R_IL_OPC, pc, OPND_NONE, o, -1, -1, word[pc], 0))
    return int(static_fault(frec, pc, o, words, par[4], par[0]))


def _warm_up_program() -> list[int]:
    return [
        encode("S_ADDI_INT", rd=1, rs1=0, imm18=1),
        encode("C_LOOP_START", rd=2, imm22=2),
        encode("V_ADD_VV", rd=0, rs1=0, rs2=0),
        encode("H_STORE_V", rd=0, rs1=0, rs2=0),
        encode("H_PREFETCH_V", rd=0, rs1=0, rs2=0),
        encode("H_PREFETCH_M", rd=0, rs1=0, rs2=0),
        encode("M_MM", rs1=0, rs2=0),
        encode("M_MM_WO", rd=0, imm18=0),
        encode("C_LOOP_END", rd=2),
    ]


@lru_cache(maxsize=1)
def jit_seconds() -> float:
    """Seconds the first :func:`warm_up` of this process took (JIT compile or cache load)."""
    from ..config.hardware import load_config

    t0 = time.perf_counter()
    cfg = load_config(
        overrides={
            "MLEN": 16,
            "VLEN": 16,
            "BLEN": 4,
            "HLEN": 4,
            "BROADCAST_AMOUNT": 4,
            "VECTOR_SRAM_SIZE": 64,
            "MATRIX_SRAM_SIZE": 64,
            "HBM_SIZE": 1 << 20,
            "HBM_M_Prefetch_Amount": 16,
        }
    )
    state = MachineState(cfg)
    execute(state, _warm_up_program(), timing="serial", trace_capacity=0)
    state.reset_timing()
    state.ctrl[CTRL_PC] = 0
    execute(state, _warm_up_program(), timing="overlap", trace_capacity=4)
    state.reset_timing()
    state.ctrl[CTRL_PC] = 0
    execute(state, _warm_up_program(), timing="rtl", trace_capacity=0)
    return time.perf_counter() - t0


def warm_up(cfg=None) -> float:
    """Compile (or load from the cache) every specialisation of the core; returns :func:`jit_seconds`."""
    return jit_seconds()
