"""Architectural state as plain numpy arrays (isa.md §1), shared by the Numba core and the reference.

One job: own the arrays and their layout. Both backends mutate the same :class:`MachineState` so the
differential tests can compare them array by array.

Layout (all arrays are owned by the state object; the Numba core receives them as arguments):

==============  ======================================  ============================================
name            dtype / shape                           meaning
==============  ======================================  ============================================
``gp``          uint32[16]                              gp0..gp15 (gp0 always 0)
``fp``          uint16[8]                               f0..f7 as bf16 bit patterns (f0 always 0)
``areg``        uint64[8]                               a0..a7 HBM byte addresses
``ctrl``        int64[N_CTRL]                           SCALE, STRIDE, V_MASK, PC (see CTRL_* slots)
``loop_start``  int64[LOOP_CAP]                         loop stack: start pc of each record
``loop_reg``    int64[LOOP_CAP]                         loop stack: counter register of each record
``loop_count``  int64[LOOP_CAP]                         loop stack: instructions this iteration
``vram``        uint16[VECTOR_SRAM_SIZE, VLEN]          bf16 bits; np.zeros maps pages lazily
``mram``        float32[n_tiles, MLEN, MLEN]            exact decoded f32 values
``fp_sram``     uint16[FP_SRAM_SIZE]                    bf16 bits
``int_sram``    uint32[INT_SRAM_SIZE]
``m_accum``     float32[BLEN, BLEN]
``v_accum``     float32[BLEN]
``hm_accum``    float32[BA, MLEN, MLEN]
``hv_accum``    float32[BA, MLEN]
``hbm``         :class:`plena_sim.hbm.storage.Hbm`              sparse byte store (page table + page pool)
==============  ======================================  ============================================

The loop stack depth is ``ctrl[CTRL_LOOP_DEPTH]``. The architecture has no depth limit; the arrays
start at LOOP_CAP records and the machine grows them (and resumes) if a program needs more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..config.hardware import HardwareConfig

if TYPE_CHECKING:
    from ..timing.scoreboard import TimingState

__all__ = [
    "MachineState",
    "CTRL_SCALE",
    "CTRL_STRIDE",
    "CTRL_V_MASK",
    "CTRL_PC",
    "CTRL_LOOP_DEPTH",
    "N_CTRL",
    "LOOP_CAP",
]

CTRL_SCALE = 0
CTRL_STRIDE = 1
CTRL_V_MASK = 2
CTRL_PC = 3
CTRL_LOOP_DEPTH = 4
N_CTRL = 5
LOOP_CAP = 256


class MachineState:
    """All architectural state of one machine, reset values per isa.md §1."""

    def __init__(self, cfg: HardwareConfig, hbm=None):
        from ..hbm.storage import Hbm  # numerics/hbm module (sparse storage)

        self.cfg = cfg
        M, V, B, BA = cfg.MLEN, cfg.VLEN, cfg.BLEN, cfg.BROADCAST_AMOUNT
        self.gp = np.zeros(16, dtype=np.uint32)
        self.fp = np.zeros(8, dtype=np.uint16)
        self.areg = np.zeros(8, dtype=np.uint64)
        self.ctrl = np.zeros(N_CTRL, dtype=np.int64)
        self.ctrl[CTRL_STRIDE] = 1
        self.loop_start = np.zeros(LOOP_CAP, dtype=np.int64)
        self.loop_reg = np.zeros(LOOP_CAP, dtype=np.int64)
        self.loop_count = np.zeros(LOOP_CAP, dtype=np.int64)
        self.vram = np.zeros((cfg.VECTOR_SRAM_SIZE, V), dtype=np.uint16)
        self.mram = np.zeros((cfg.mram_tiles, M, M), dtype=np.float32)
        self.fp_sram = np.zeros(cfg.FP_SRAM_SIZE, dtype=np.uint16)
        self.int_sram = np.zeros(cfg.INT_SRAM_SIZE, dtype=np.uint32)
        self.m_accum = np.zeros((B, B), dtype=np.float32)
        self.v_accum = np.zeros(B, dtype=np.float32)
        self.hm_accum = np.zeros((BA, M, M), dtype=np.float32)
        self.hv_accum = np.zeros((BA, M), dtype=np.float32)
        self.hbm = hbm if hbm is not None else Hbm(cfg.HBM_SIZE)
        #: timing-only bookkeeping (plena_sim.routing, isa TO-DATA): ``taint[0]`` = bitmask of the gp registers
        #: whose value comes from skipped data, ``taint[1]`` = V_TOPK instructions executed this run (the routing
        #: policy's call index), ``taint[2]`` = 1 once some INT SRAM word was marked (sticky: while it and
        #: ``taint[0]`` are 0 nothing is data-derived and the bookkeeping is skipped); ``int_taint[w]`` = 1 when INT
        #: SRAM word w holds such a value. Reset by :meth:`reset_taint` (``Machine.run`` does so unless
        #: ``resume=True``); a functional run never sets them
        self.taint = np.zeros(3, dtype=np.int64)
        self.int_taint = np.zeros(cfg.INT_SRAM_SIZE, dtype=np.uint8)
        #: :class:`plena_sim.timing.scoreboard.TimingState` of the current run (cycles, scoreboard, HBM bank state,
        #: trace ring); created by the first execute, persists across resumed calls, reset by
        #: :meth:`reset_timing` (``Machine.run`` does so unless ``resume=True``)
        self.timing: TimingState | None = None

    def ensure_timing(
        self, mode: str | None = None, trace_capacity: int | None = None, backend: str = "numba"
    ) -> TimingState:
        """The current TimingState, or a fresh one if there is none or the requested timing mode,
        trace capacity or backend kind differs (``None`` = keep the current / default)."""
        from ..timing.scoreboard import TimingState

        t = self.timing
        is_ref = backend == "reference"
        if (
            t is None
            or (mode is not None and t.mode != mode)
            or (trace_capacity is not None and t.trace_capacity != int(trace_capacity))
            or hasattr(t, "py_hstats") != is_ref
        ):
            keep_mode = t.mode if t is not None else "serial"
            keep_cap = t.trace_capacity if t is not None else 0
            t = TimingState(
                self.cfg,
                mode if mode is not None else keep_mode,
                int(trace_capacity) if trace_capacity is not None else keep_cap,
                backend,
            )
            self.timing = t
        return t

    def reset_taint(self) -> None:
        """Forget the timing-only bookkeeping (no data-derived registers or INT SRAM words; V_TOPK count 0)."""
        self.taint[:] = 0
        self.int_taint[:] = 0

    def reset_timing(self) -> None:
        """Forget all timing state (the next execute starts at cycle 0 with a cold HBM)."""
        self.timing = None

    def grow_loop_stack(self) -> None:
        """Double the loop stack capacity (keeps contents)."""
        for name in ("loop_start", "loop_reg", "loop_count"):
            old = getattr(self, name)
            new = np.zeros(old.size * 2, dtype=old.dtype)
            new[: old.size] = old
            setattr(self, name, new)

    @property
    def loop_stack(self) -> list[tuple[int, int, int]]:
        """Active loop records ``(start_pc, reg, count)``, outermost first."""
        d = int(self.ctrl[CTRL_LOOP_DEPTH])
        return [(int(self.loop_start[k]), int(self.loop_reg[k]), int(self.loop_count[k])) for k in range(d)]

    ARRAYS = (
        "gp",
        "fp",
        "areg",
        "ctrl",
        "vram",
        "mram",
        "fp_sram",
        "int_sram",
        "m_accum",
        "v_accum",
        "hm_accum",
        "hv_accum",
    )


class Outcome:
    """What one execution backend reports (the Numba core and the reference return the same thing).

    ``retired``: instructions retired; ``fault``: None or the int64 fault record (faults.py slots);
    ``by_opcode``: int64[64] retired count per opcode; ``cycles``: cycles this call added in the timing mode
    of ``state.timing`` (serial or overlap; totals, busy time, stalls and HBM counters live there);
    ``counters``: dict of extra integer counters (e.g. ``mx_nan``, ``mx_saturated``, ``matrix_macs``);
    ``pc_count`` / ``pc_cycles``: int64[program words], per pc the instructions it retired and the cycles they
    added (the cycle counter after each one's accounting minus before: Σ pc_count = retired, Σ pc_cycles =
    cycles exactly, in every timing mode; an instruction that faults adds nothing); ``pc_extra``:
    int64[program words, timing.X_N], per pc its busy cycles (X_BUSY: occupancy of its pipeline / unit), HBM bytes
    read / written and stall cycles per reason (X_STALL + timing.rtl.STALL_REASONS index).
    """

    __slots__ = ("retired", "fault", "by_opcode", "cycles", "counters", "pc_count", "pc_cycles", "pc_extra")

    def __init__(
        self,
        retired: int,
        fault,
        by_opcode,
        cycles: int,
        counters: dict | None = None,
        pc_count=None,
        pc_cycles=None,
        pc_extra=None,
    ):
        self.retired = int(retired)
        self.fault = None if fault is None else tuple(int(x) for x in fault)
        self.by_opcode = np.asarray(by_opcode, dtype=np.int64)
        self.cycles = int(cycles)
        self.counters = dict(counters or {})
        self.pc_count = np.zeros(0, dtype=np.int64) if pc_count is None else np.asarray(pc_count, dtype=np.int64)
        self.pc_cycles = np.zeros(0, dtype=np.int64) if pc_cycles is None else np.asarray(pc_cycles, dtype=np.int64)
        from ..timing.scoreboard import X_N

        n = self.pc_count.size
        self.pc_extra = np.zeros((n, X_N), dtype=np.int64) if pc_extra is None else np.asarray(pc_extra, dtype=np.int64)

    def __repr__(self) -> str:
        return f"Outcome(retired={self.retired}, fault={self.fault}, cycles={self.cycles}, counters={self.counters})"
