"""The Python API of the simulator: one :class:`Machine` = one configured PLENA accelerator.

One job: wrap the architectural state (:class:`~plena_sim.memory.state.MachineState`) and the two execution
backends behind a small, typed, host-friendly API.

Quick start::

    from plena_sim.machine import Machine
    from plena_sim.config import default_config

    m = Machine(default_config(), backend="numba")   # or backend="reference" (pure Python, slow)
    m.hbm.write(0, image_bytes)                      # sparse HBM (plena_sim.hbm.storage.Hbm)
    m.write_fp_sram(0, [1.0, 0.5])                   # floats, rounded to bf16 (RNE)
    m.fp_sram[2] = 3.0                               # same, through the accessor
    m.int_sram[0:4] = [1, 2, 3, 4]                   # uint32 numpy view
    m.vram.write(0, np.ones((2, m.cfg.VLEN)))        # rows of VLEN floats, bf16-rounded
    m.set_reg("gp1", 64); m.set_reg("f1", 0.5); m.set_reg("a0", 1 << 33)
    res = m.run(program)                             # Program | assembly text | words | Path
    res.cycles, res.instructions, res.stats["by_opcode"]
    m.vram.read(0, rows=2)                           # float32 [2, VLEN]
    m.regs                                           # snapshot dict (see :attr:`Machine.regs`)

State accessors
---------------
* ``m.hbm`` -- the :class:`~plena_sim.hbm.storage.Hbm` (``read(addr, n)``, ``write(addr, data)``,
  ``load_image(bytes, base)``).
* ``m.vram`` -- :class:`VramView`: ``read(addr, rows=1) -> float32[rows, VLEN]`` (``addr`` an element
  address, multiple of VLEN), ``write(addr, values)`` (values ``[rows, VLEN]`` or ``[VLEN]``, rounded
  to bf16), ``bits`` (the raw uint16 array).
* ``m.mram`` -- a float32 ``[tiles, MLEN, MLEN]`` *snapshot* (copy); ``m.write_mram(tile, values)``
  stores exact f32 values into one tile (host preload; programs fill MRAM with H_PREFETCH_M).
* ``m.fp_sram`` -- :class:`FpSramView`: indexing returns float32 values, assignment rounds to bf16;
  ``m.fp_sram.bits`` is the raw uint16 array. ``m.write_fp_sram(addr, values)`` /
  ``m.read_fp_sram(addr, n)`` do the same by range.
* ``m.int_sram`` -- the uint32 numpy array itself (a live view).
* ``m.regs`` -- snapshot dict: ``gp`` (list of 16 ints), ``fp`` (list of 8 floats), ``a`` (list of 8
  ints), ``SCALE``, ``STRIDE``, ``V_MASK``, ``pc``, ``loop_stack`` (list of ``(start_pc, reg, count)``
  outermost first). ``m.set_reg(name, value)`` writes ``gpN``/``fN``/``aN``/``SCALE``/``STRIDE``/
  ``V_MASK`` (writes to gp0/f0 are discarded, as in hardware).
* ``m.state`` -- the underlying :class:`~plena_sim.memory.state.MachineState` (arrays shared with the backends).

Running
-------
``m = Machine(cfg, backend="numba", timing="serial")`` sets the default timing mode;
``m.run(program, max_instructions=None, trace=False, raise_on_fault=True, resume=False, name="<asm>",
timing=None)`` starts at pc 0 with an empty loop stack and a fresh timing state (cycle 0, cold HBM;
``resume=True`` continues from the current pc, loop stack *and* timing state instead, e.g. after a
BUDGET fault) and returns a :class:`RunResult`:

* ``max_instructions``: the work budget (:mod:`plena_sim.limits.budget`; default 10^9): every instruction counts 1,
  each DMA row and each 4096 matrix MACs of an instruction 1 more; the instruction that would exceed it is a
  BUDGET fault (``InstructionBudgetExceeded``). Stop requests (signals, :mod:`plena_sim.limits.stop`) stop a run at an
  instruction boundary within milliseconds: the handler's :class:`~plena_sim.errors.RunStopped` propagates
  with the instructions retired, and ``resume=True`` continues exactly from there.

* ``timing``: ``"serial"`` (timing.md §3, Σ latencies), ``"overlap"`` (§4 scoreboard) or ``"rtl"`` (the
  RTL-calibrated pipelines and hazards of docs/timing.md, data in ``plena_sim/timing/data/rtl_timing_v1.toml``); None =
  the Machine's default. All are computed inside the run loop; H_* latencies come from the HBM bank model
  (:mod:`plena_sim.hbm.timing`) with t0 = the instruction's start / issue cycle.
* ``instructions`` (retired), ``cycles`` (this call, in the selected mode), ``stats`` dict (timing.md
  §6): ``schema``, ``backend``, ``timing_mode``, ``config`` (topology, DC_EN, BMM_SCALE, preset),
  ``instructions``, ``cycles``, ``time_ns``, ``by_opcode`` (mnemonic -> count), ``by_unit`` (M/V/S/H/C
  -> count), ``unit_busy_cycles``, ``unit_utilization``, ``matrix_macs``, ``hbm`` (``read_requests``,
  ``write_requests``, ``bytes_read``, ``bytes_written``, ``payload_bytes_read``,
  ``payload_bytes_written``, ``row_hits``, ``row_misses``, ``row_conflicts``, ``per_channel_requests``,
  ``achieved_bandwidth_GBps``, ``dma_bandwidth_GBps``, ``peak_bandwidth_GBps``), ``mx``
  (``nan_encoded``, ``saturated``), ``overlap`` (overlap mode only: ``stall_unit``, ``stall_data``,
  ``issue_cycles``), ``busy`` / ``stalls`` / ``critical_path`` / ``mac_utilization`` (every model, and
  ``unvalidated`` under rtl: :mod:`plena_sim.timing.stats`), ``host_seconds``, ``sim_cycles_per_second``,
  ``jit_compile_seconds``, ``fault``
  (None or the fault's dict), ``regions`` (one dict per code region path of the program -- ``path``,
  ``instructions``, ``cycles_exclusive``, ``cycles_inclusive``, ``macs``, ``hbm_read_bytes``, ``hbm_write_bytes``,
  ``mac_utilization``, ``busy``, ``stalls`` -- then ``(unlabelled)``: the words in
  no region; the exclusive figures sum exactly to the run's instructions, cycles and MACs, also after a fault;
  :mod:`plena_sim.timing.regions`);
* ``fault``: None, or the :class:`~plena_sim.faults.SimFault` (only with ``raise_on_fault=False``);
* ``trace``: with ``trace=True`` (capacity :data:`DEFAULT_TRACE_CAPACITY`) or ``trace=N`` (ring of the
  newest N records), a :class:`plena_sim.trace.ring.Trace` recorded inside the run loop (both backends,
  identical records); None otherwise (no cost beyond one branch per instruction).

On a fault (default) the typed :class:`~plena_sim.faults.SimFault` subclass is raised with the
statistics so far attached as ``exc.stats`` (and the RunResult as ``exc.result``); the message names
the file:line, the instruction text, the operand register values, the rule and the pc. The state is
as it was just before the faulting instruction; ``m.regs["pc"]`` is the faulting pc.

Backends: ``"numba"`` (``plena_sim.core.execute``, imported lazily on first run) and ``"reference"``
(``plena_sim.reference.execute``). Both have the contract
``execute(state, words, max_instructions) -> Outcome`` and must produce identical state, statistics and
fault records.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

import numpy as np

from isa.encoding import UNIT_NAMES, opcode_units
from isa.program import Program
from isa.table import BY_OPCODE, REGISTER_COUNT

from . import faults as F
from .config.hardware import HardwareConfig, check_program_memory, default_config
from .limits.budget import MAX_BUDGET
from .memory.state import CTRL_LOOP_DEPTH, CTRL_PC, CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK, MachineState, Outcome
from .numerics import bf16
from .routing import Routing
from .timing.scoreboard import check_mode
from .timing.stats import pc_profile, profile_fields, run_profile

__all__ = ["Machine", "RunResult", "VramView", "FpSramView", "BACKENDS", "to_program"]

BACKENDS = ("numba", "reference")
#: trace ring capacity of ``run(trace=True)`` (records; the newest are kept)
DEFAULT_TRACE_CAPACITY = 1 << 16
_UNITS = opcode_units()
_U32 = 0xFFFFFFFF


# ---------------------------------------------------------------------------- views


class VramView:
    """Float access to VRAM rows (element addresses; rows of VLEN)."""

    def __init__(self, state: MachineState):
        self._st = state

    @property
    def bits(self) -> np.ndarray:
        return self._st.vram

    def _row(self, addr: int) -> int:
        V = self._st.cfg.VLEN
        addr = int(addr)
        if addr < 0 or addr % V:
            raise ValueError(f"VRAM address {addr} is not a non-negative multiple of VLEN={V}")
        return addr // V

    def read(self, addr: int, rows: int = 1) -> np.ndarray:
        r0 = self._row(addr)
        if r0 + rows > self._st.vram.shape[0]:
            raise IndexError(f"VRAM rows [{r0}, {r0 + rows}) exceed VECTOR_SRAM_SIZE={self._st.vram.shape[0]}")
        return bf16.decode(self._st.vram[r0 : r0 + rows]).reshape(rows, -1).copy()

    def write(self, addr: int, values) -> None:
        V = self._st.cfg.VLEN
        flat = np.asarray(values, dtype=np.float32)
        if flat.size % V != 0:
            raise ValueError(f"VRAM writes take whole rows of VLEN={V} values")
        vals = flat.reshape(-1, V)
        r0 = self._row(addr)
        if r0 + vals.shape[0] > self._st.vram.shape[0]:
            raise IndexError(f"VRAM rows [{r0}, {r0 + vals.shape[0]}) exceed VECTOR_SRAM_SIZE")
        self._st.vram[r0 : r0 + vals.shape[0]] = bf16.encode(vals)


class FpSramView:
    """FP SRAM as floats: ``view[i]`` -> float32, ``view[i] = x`` stores bf16(x)."""

    def __init__(self, state: MachineState):
        self._st = state

    @property
    def bits(self) -> np.ndarray:
        return self._st.fp_sram

    def __len__(self) -> int:
        return self._st.fp_sram.shape[0]

    def __getitem__(self, idx):
        out = bf16.decode(np.atleast_1d(self._st.fp_sram[idx]))
        return out[0] if np.isscalar(idx) or isinstance(idx, (int, np.integer)) else out

    def __setitem__(self, idx, values) -> None:
        self._st.fp_sram[idx] = bf16.encode(values)

    def __array__(self, dtype=None, copy=None):
        a = bf16.decode(self._st.fp_sram)
        return a if dtype is None else a.astype(dtype)


# ---------------------------------------------------------------------------- results


@dataclass
class RunResult:
    instructions: int
    cycles: int
    stats: dict
    fault: F.SimFault | None = None
    trace: object | None = None  # plena_sim.trace.ring.Trace with run(trace=...)
    outcome: Outcome | None = field(default=None, repr=False)


def to_program(program, name: str = "<asm>") -> Program:
    """A :class:`Program` from a Program, assembly text, a path to a ``.asm`` / ``.mem`` file, or words."""
    if isinstance(program, Program):
        return program
    if isinstance(program, (PathLike,)):
        p = Path(program)
        if p.suffix == ".mem":
            from isa.memfile import read_mem

            return read_mem(p)
        from isa.assembler import assemble_file

        return assemble_file(p)
    if isinstance(program, str):
        from isa.assembler import assemble

        return assemble(program, name)
    words = [int(w) for w in np.asarray(program, dtype=np.int64).reshape(-1)]
    return Program.from_words(words)


def _backend_execute(backend: str):
    if backend == "reference":
        from .reference import execute as reference_execute  # its own name: the backends' signatures may differ

        return reference_execute
    if backend == "numba":
        from .core import execute  # lazy: the JIT backend compiles on first use

        return execute
    raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")


# ---------------------------------------------------------------------------- the machine


class Machine:
    """One PLENA accelerator: configuration + architectural state + an execution backend."""

    def __init__(
        self,
        cfg: HardwareConfig | str | None = None,
        backend: str = "numba",
        *,
        hbm=None,
        timing: str = "serial",
        functional: bool = True,
        routing: Routing | None = None,
    ):
        """``cfg``: a :class:`HardwareConfig`, a hardware preset name (``"v80-128x64"``, see
        :mod:`plena_sim.config.presets`), or None for the reference machine. ``functional=False``: every run is
        timing-only unless ``run(..., functional=True)`` says otherwise; ``routing``: the default MoE routing
        policy of timing-only runs (:mod:`plena_sim.routing`)."""
        if isinstance(cfg, str):
            from .config.presets import load_preset

            cfg = load_preset(cfg)
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
        check_mode(timing)
        self.timing = timing
        self.functional = bool(functional)
        self.routing = routing
        self.cfg = cfg if cfg is not None else default_config()
        self.backend = backend
        self.state = MachineState(self.cfg, hbm=hbm)
        self.vram = VramView(self.state)
        self._fp_view = FpSramView(self.state)

    # ---- memories
    @property
    def hbm(self):
        return self.state.hbm

    @property
    def fp_sram(self) -> FpSramView:
        return self._fp_view

    @property
    def int_sram(self) -> np.ndarray:
        return self.state.int_sram

    @property
    def mram(self) -> np.ndarray:
        return self.state.mram.copy()

    def write_mram(self, tile: int, values) -> None:
        """Store exact float32 values into MRAM tile ``tile`` (shape [MLEN, MLEN])."""
        M = self.cfg.MLEN
        self.state.mram[int(tile)] = np.asarray(values, dtype=np.float32).reshape(M, M)

    def write_fp_sram(self, addr: int, values) -> None:
        vals = np.atleast_1d(np.asarray(values, dtype=np.float32))
        self.state.fp_sram[int(addr) : int(addr) + vals.size] = bf16.encode(vals)

    def read_fp_sram(self, addr: int, n: int = 1) -> np.ndarray:
        return bf16.decode(self.state.fp_sram[int(addr) : int(addr) + int(n)]).copy()

    # ---- registers
    @property
    def regs(self) -> dict:
        st = self.state
        return {
            "gp": [int(x) for x in st.gp],
            "fp": [float(x) for x in bf16.decode(st.fp)],
            "a": [int(x) for x in st.areg],
            "SCALE": int(st.ctrl[CTRL_SCALE]),
            "STRIDE": int(st.ctrl[CTRL_STRIDE]),
            "V_MASK": int(st.ctrl[CTRL_V_MASK]),
            "pc": int(st.ctrl[CTRL_PC]),
            "loop_stack": st.loop_stack,
        }

    def set_reg(self, name: str, value) -> None:
        """Write one register: ``gpN`` (u32), ``fN`` (float -> bf16), ``aN`` (u64), ``SCALE``,
        ``STRIDE``, ``V_MASK`` (u32). Writes to gp0 / f0 are discarded."""
        st = self.state
        if name in ("SCALE", "STRIDE", "V_MASK"):
            slot = {"SCALE": CTRL_SCALE, "STRIDE": CTRL_STRIDE, "V_MASK": CTRL_V_MASK}[name]
            st.ctrl[slot] = int(value) & _U32
            return
        for prefix, kind in (("gp", "gp"), ("f", "f"), ("a", "a")):
            if name.startswith(prefix) and name[len(prefix) :].isdigit():
                idx = int(name[len(prefix) :])
                if idx >= REGISTER_COUNT[kind]:
                    break
                if kind == "gp":
                    if idx:
                        st.gp[idx] = int(value) & _U32
                elif kind == "f":
                    if idx:
                        st.fp[idx] = bf16.encode([value])[0]
                else:
                    st.areg[idx] = int(value) & ((1 << 64) - 1)
                return
        raise ValueError(f"unknown register {name!r}")

    # ---- running
    def run(
        self,
        program,
        max_instructions: int | None = None,
        trace=False,
        raise_on_fault: bool = True,
        resume: bool = False,
        name: str = "<asm>",
        timing: str | None = None,
        functional: bool | None = None,
        routing: Routing | None = None,
    ) -> RunResult:
        """Run ``program`` (see the module docstring). ``functional=False`` (default: the machine's own, see
        ``Machine(functional=...)``): a timing-only run -- the same checks, faults and statistics, no datapath
        (:func:`plena_sim.core.execute`); ``routing``: its MoE routing policy (:mod:`plena_sim.routing`)."""
        functional = self.functional if functional is None else bool(functional)
        routing = self.routing if routing is None else routing
        prog = to_program(program, name)
        check_program_memory(len(prog.words))
        words = np.array(prog.words, dtype=np.uint32)
        budget = 10**9 if max_instructions is None else int(max_instructions)
        if not 0 <= budget <= MAX_BUDGET:
            raise ValueError(
                f"max_instructions={budget} is outside [0, 2^63-1] (the work budget, plena_sim.limits.budget)"
            )
        mode = self.timing if timing is None else timing
        check_mode(mode)
        cap = 0 if trace is False or trace is None else (DEFAULT_TRACE_CAPACITY if trace is True else int(trace))
        st = self.state
        if not resume:
            st.hbm.forget_reads()
            st.ctrl[CTRL_PC] = 0
            st.ctrl[CTRL_LOOP_DEPTH] = 0
            st.loop_start[:] = 0
            st.loop_reg[:] = 0
            st.loop_count[:] = 0
            st.reset_timing()
            st.reset_taint()
        execute = _backend_execute(self.backend)
        jit_seconds = 0.0
        if self.backend == "numba":
            from . import core

            jit_seconds = core.jit_seconds()  # compiles or loads the JIT cache on first use
        t0 = time.perf_counter()
        outcome = execute(st, words, budget, timing=mode, trace_capacity=cap, functional=functional, routing=routing)
        host = time.perf_counter() - t0
        stats = self._stats(outcome, host, jit_seconds, functional, routing)
        stats.update(run_profile(outcome, prog.words, self.cfg, mode, stats["matrix_macs"]))
        stats["regions"] = self._regions(prog, outcome)
        trace_obj = None
        if cap:
            from .trace.ring import Trace

            trace_obj = Trace.from_timing(st.timing, prog, self.cfg)
        fault = None
        if outcome.fault is not None:
            fault = F.make_fault(outcome.fault, prog, state=st)
            fault.stats = stats
            stats["fault"] = fault.to_dict()
        result = RunResult(outcome.retired, outcome.cycles, stats, fault, trace_obj, outcome)
        if fault is not None and raise_on_fault:
            fault.result = result
            raise fault
        return result

    def _regions(self, prog: Program, outcome: Outcome) -> list[dict]:
        """``stats["regions"]`` (:mod:`plena_sim.timing.regions`) of one run of ``prog``."""
        from isa.table import mac_table

        from .timing.regions import pc_macs, region_stats

        cfg = self.cfg
        macs = mac_table(cfg.MLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT)
        per_pc_macs = pc_macs(prog.words, outcome.pc_count, macs)
        profile = pc_profile(prog.words, outcome.pc_extra)

        def fields(sums, cycles: int, region_macs: int) -> dict:
            return profile_fields(sums, cycles, region_macs, cfg)

        return region_stats(prog.regions, outcome.pc_count, outcome.pc_cycles, per_pc_macs, profile, fields)

    def _stats(
        self,
        outcome: Outcome,
        host_seconds: float,
        jit_seconds: float = 0.0,
        functional: bool = True,
        routing: Routing | None = None,
    ) -> dict:
        from .timing.scoreboard import T_LAST_ISSUE, T_STALL_DATA, T_STALL_UNIT

        by_opcode = {BY_OPCODE[op].mnemonic: int(n) for op, n in enumerate(outcome.by_opcode) if n and op in BY_OPCODE}
        by_unit = {u: 0 for u in UNIT_NAMES}
        for op, n in enumerate(outcome.by_opcode):
            if n and _UNITS[op] >= 0:
                by_unit[UNIT_NAMES[_UNITS[op]]] += int(n)
        c = outcome.counters
        tm = self.state.timing
        assert tm is not None, "statistics of a machine that has not run"
        cycles = int(outcome.cycles)
        busy = tm.busy()
        util = {u: (busy[u] / cycles if cycles else 0.0) for u in UNIT_NAMES}
        h = tm.hbm_counts()
        burst = int(tm.params.burst_bytes)
        rd_b = burst * int(h["read_requests"])
        wr_b = burst * int(h["write_requests"])
        cfg = self.cfg
        stats = {
            "schema": "plena-sim-stats/1",
            "backend": self.backend,
            "timing_mode": tm.mode,
            "config": {
                "MLEN": cfg.MLEN,
                "VLEN": cfg.VLEN,
                "BLEN": cfg.BLEN,
                "HLEN": cfg.HLEN,
                "BROADCAST_AMOUNT": cfg.BROADCAST_AMOUNT,
                "DC_EN": int(cfg.DC_EN),
                "BMM_SCALE": float(cfg.BMM_SCALE),
                "HBM_TIMING_PRESET": tm.params.name,
            },
            "instructions": outcome.retired,
            "cycles": cycles,
            "time_ns": cycles,
            "by_opcode": by_opcode,
            "by_unit": by_unit,
            "unit_busy_cycles": busy,
            "unit_utilization": util,
            "matrix_macs": int(c.get("matrix_macs", 0)),
            "hbm": {
                "read_requests": int(h["read_requests"]),
                "write_requests": int(h["write_requests"]),
                "bytes_read": rd_b,
                "bytes_written": wr_b,
                "payload_bytes_read": int(c.get("hbm_payload_read", 0)),
                "payload_bytes_written": int(c.get("hbm_payload_written", 0)),
                "row_hits": int(h["row_hits"]),
                "row_misses": int(h["row_misses"]),
                "row_conflicts": int(h["row_conflicts"]),
                "per_channel_requests": [int(x) for x in h["per_channel_requests"]],
                "achieved_bandwidth_GBps": (rd_b + wr_b) / cycles if cycles else 0.0,
                "dma_bandwidth_GBps": (rd_b + wr_b) / busy["H"] if busy["H"] else 0.0,
                "peak_bandwidth_GBps": float(tm.params.peak_bandwidth_GBps),
            },
            # data counters: unknown in a timing-only run (nothing is encoded)
            "mx": {
                "nan_encoded": int(c.get("mx_nan", 0)) if functional else None,
                "saturated": int(c.get("mx_saturated", 0)) if functional else None,
            },
            "timing_only": not functional,
            "routing": routing.label if routing is not None and not functional else None,
            "host_seconds": host_seconds,
            "sim_cycles_per_second": cycles / host_seconds if host_seconds > 0 else 0.0,
            "jit_compile_seconds": jit_seconds,
            "fault": None,
        }
        if tm.mode == "overlap":
            last = int(tm.ts[T_LAST_ISSUE])
            stats["overlap"] = {
                "stall_unit": int(tm.ts[T_STALL_UNIT]),
                "stall_data": int(tm.ts[T_STALL_DATA]),
                "issue_cycles": last + 1,
            }
        return stats
