"""The post-mortem of a fault (plena_sim/trace/postmortem.py, issue 20 D12): the registers and loop stack as the fault
left them, and exactly the VRAM rows and MRAM tiles the faulting instruction reads or writes (inside the
memories), on both backends."""

from __future__ import annotations

import numpy as np
import pytest
from simhelpers import machine, small_cfg

from isa import assemble
from isa.encoding import encode
from plena_sim.numerics import bf16
from plena_sim.trace.postmortem import fault_state, touched_rows_and_tiles

# M = V = 16, B = 4, VECTOR_SRAM_SIZE = 128 rows, 4 MRAM tiles
PROGRAM = """\
S_ADDI_INT gp1, gp0, 32        ; row 2
S_ADDI_INT gp2, gp0, 83        ; not a row address (AL-VROW): row 5 + 3
S_ADDI_INT gp5, gp0, 7
C_LOOP_START gp4, 2
V_ADD_VV gp1, gp1, gp2
C_LOOP_END gp4
"""


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_a_vector_fault_saves_registers_loop_stack_and_the_rows_it_touches(backend):
    m = machine(backend)
    rows = (np.arange(128 * 16, dtype=np.float32).reshape(128, 16) % 64) - 32
    m.vram.write(0, rows)
    m.set_reg("f3", 1.5)
    m.set_reg("a2", 1 << 40)
    prog = assemble(PROGRAM, "p.asm")
    res = m.run(prog, raise_on_fault=False)
    assert res.fault is not None and res.fault.rule == "AL-VROW" and res.fault.pc == 4
    st = fault_state(m.state, prog, res.fault)
    assert int(st["pc"]) == 4 and int(st["word"]) == prog.words[4]
    assert st["record"].tolist() == list(res.fault.record)
    assert st["gp"].tolist() == [0, 32, 83, 0, 2, 7] + [0] * 10
    assert st["fp"].tolist() == [0, 0, 0, int(bf16.encode(np.float32(1.5))), 0, 0, 0, 0]
    assert st["fp_values"].tolist() == [0, 0, 0, 1.5, 0, 0, 0, 0]
    assert st["areg"].tolist() == [0, 0, 1 << 40, 0, 0, 0, 0, 0]
    assert st["ctrl"].tolist() == m.state.ctrl.tolist() and st["ctrl"][3] == 4 and st["ctrl"][4] == 1
    assert st["loop_start"].tolist() == m.state.loop_start[:1].tolist()
    assert st["loop_reg"].tolist() == [4] and st["loop_count"].tolist() == [0]
    assert st["vram_rows"].tolist() == [2, 5]  # rd and rs1: row 2; rs2: the row holding address 83
    assert np.array_equal(st["vram"], m.state.vram[[2, 5]])
    assert np.array_equal(st["vram_values"], rows[[2, 5]])
    assert st["mram_tiles"].tolist() == [] and st["mram"].shape == (0, 16, 16)


def test_the_rows_and_tiles_of_matrix_and_dma_instructions_are_clipped_to_the_memories():
    cfg = small_cfg()
    gp = np.zeros(16, dtype=np.uint32)
    gp[1], gp[3] = 48, 2 * 256  # vector rows 3..6, MRAM tile 2
    mm = encode("M_MM", rd=0, rs1=3, rs2=1)
    rows, tiles = touched_rows_and_tiles(cfg, mm, gp)
    assert rows.tolist() == [3, 4, 5, 6] and tiles.tolist() == [2]
    gp[3] = 4 * 256  # tile 4: outside the 4 tiles (BD-MTILE), not a row either
    rows, tiles = touched_rows_and_tiles(cfg, mm, gp)
    assert rows.tolist() == [3, 4, 5, 6] and tiles.tolist() == []
    gp[1] = 126 * 16  # rows 126..129: only 126 and 127 exist
    rows, tiles = touched_rows_and_tiles(cfg, mm, gp)
    assert rows.tolist() == [126, 127] and tiles.tolist() == []
    gp[2] = 256  # H_PREFETCH_M into tile 1 (P_M / M tiles)
    pm = encode("H_PREFETCH_M", rd=2, rs1=0, rs2=0)
    rows, tiles = touched_rows_and_tiles(cfg, pm, gp)
    assert rows.tolist() == [] and tiles.tolist() == list(range(1, min(1 + cfg.P_M // cfg.MLEN, 4)))
    assert touched_rows_and_tiles(cfg, 0x3F, gp)[0].tolist() == []  # not an instruction: nothing
