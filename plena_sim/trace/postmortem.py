"""The post-mortem of a faulting run: the machine state a user needs to see why an instruction faulted.

:func:`fault_state` returns named arrays (``numpy.savez`` them as ``state.npz``; ``run --save`` does):

==================  ==================================  ======================================================
name                dtype / shape                       meaning
==================  ==================================  ======================================================
``pc``              int64 (scalar)                      pc of the faulting instruction
``word``            uint32 (scalar)                     its instruction word
``record``          int64[8]                            the raw fault record (:mod:`plena_sim.faults`)
``gp``              uint32[16]                          gp registers (a fault is precise: as before the
                                                        faulting instruction)
``fp``              uint16[8]                           f registers, bf16 bit patterns
``fp_values``       float32[8]                          the same, decoded
``areg``            uint64[8]                           HBM address registers
``ctrl``            int64[5]                            SCALE, STRIDE, V_MASK, PC, loop depth
``loop_start``,     int64[depth]                        the loop stack, outermost first: start pc, counter
``loop_reg``,                                           register, instructions of the current iteration
``loop_count``
``vram_rows``       int64[r]                            the VRAM rows the instruction reads or writes (those
                                                        inside VECTOR_SRAM_SIZE), ascending
``vram``            uint16[r, VLEN]                     their bf16 bits; ``vram_values`` float32, decoded
``mram_tiles``      int64[t]                            the MRAM tiles it reads or writes (inside the MRAM)
``mram``            float32[t, MLEN, MLEN]              their values
==================  ==================================  ======================================================

Which rows and tiles: the instruction's read and write sets of the overlap scoreboard (timing.md §4,
:func:`plena_sim.timing.scoreboard.resources_py`) at the fault's register values -- the operands it would have touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..memory.state import CTRL_LOOP_DEPTH
from ..numerics import bf16

if TYPE_CHECKING:
    from isa.program import Program

    from ..config.hardware import HardwareConfig
    from ..faults import SimFault
    from ..memory.state import MachineState

__all__ = ["fault_state", "touched_rows_and_tiles"]

_SPACE = 1 << 40  # the index-space gap between VRAM rows and MRAM tiles (no u32 operand reaches across it)


def fault_state(state: MachineState, program: Program, fault: SimFault) -> dict[str, np.ndarray]:
    """The post-mortem arrays of ``fault`` (see the module docstring) from the machine ``state`` it left."""
    depth = int(state.ctrl[CTRL_LOOP_DEPTH])
    word = int(program.words[fault.pc]) if 0 <= fault.pc < len(program.words) else 0
    rows, tiles = touched_rows_and_tiles(state.cfg, word, state.gp)
    vram = np.asarray(state.vram[rows]).copy()
    return {
        "pc": np.asarray(fault.pc, dtype=np.int64),
        "word": np.asarray(word, dtype=np.uint32),
        "record": np.asarray(fault.record, dtype=np.int64),
        "gp": state.gp.copy(),
        "fp": state.fp.copy(),
        "fp_values": bf16.decode(state.fp).astype(np.float32),
        "areg": state.areg.copy(),
        "ctrl": state.ctrl.copy(),
        "loop_start": state.loop_start[:depth].copy(),
        "loop_reg": state.loop_reg[:depth].copy(),
        "loop_count": state.loop_count[:depth].copy(),
        "vram_rows": rows,
        "vram": vram,
        "vram_values": bf16.decode(vram).astype(np.float32),
        "mram_tiles": tiles,
        "mram": np.asarray(state.mram[tiles]).copy(),
    }


def touched_rows_and_tiles(cfg: HardwareConfig, word: int, gp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(VRAM rows, MRAM tiles)`` instruction ``word`` reads or writes with registers ``gp``: int64 arrays,
    ascending, only those inside the memories (an out-of-bounds operand touches nothing)."""
    from isa.encoding import decode
    from isa.table import BY_OPCODE

    from ..timing.scoreboard import (
        MAX_RANGES,
        TC_FPW_BASE,
        TC_INTW_BASE,
        TC_MTILE_BASE,
        TC_VROW_BASE,
        TimingState,
        resources_py,
    )

    f = decode(word)
    if f["opcode"] not in BY_OPCODE:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    cv = TimingState.cfg_vector(cfg)
    vb = int(cv[TC_VROW_BASE])
    cv[TC_MTILE_BASE], cv[TC_FPW_BASE], cv[TC_INTW_BASE] = vb + _SPACE, vb + 2 * _SPACE, vb + 3 * _SPACE
    rr = np.zeros((MAX_RANGES, 3), dtype=np.int64)
    wr = np.zeros((MAX_RANGES, 3), dtype=np.int64)
    g_rd, g_rs1, g_rs2 = (int(gp[f[k]]) for k in ("rd", "rs1", "rs2"))
    nr, nw = resources_py(
        f["opcode"], f["rd"], f["rs1"], f["rs2"], f["rs3"], f["funct1"], f["imm18"], g_rd, g_rs1, g_rs2, -1, cv, rr, wr
    )
    idx = [s + k * step for s, n, step in (*rr[:nr].tolist(), *wr[:nw].tolist()) for k in range(n)]
    rows = sorted({i - vb for i in idx if vb <= i < vb + cfg.VECTOR_SRAM_SIZE})
    tiles = sorted({i - vb - _SPACE for i in idx if vb + _SPACE <= i < vb + _SPACE + cfg.mram_tiles})
    return np.asarray(rows, dtype=np.int64), np.asarray(tiles, dtype=np.int64)
