"""The Machine API (plena_sim/machine.py): accessors, program forms, statistics, trace, backends."""

from __future__ import annotations

import numpy as np
import pytest
from simhelpers import machine, small_cfg

from isa.assembler import assemble
from isa.encoding import encode
from plena_sim.machine import Machine


def test_fp_sram_accessor_rounds_to_bf16(backend):
    m = machine(backend)
    m.fp_sram[3] = 1.00390625  # 1 + 2^-8: a tie, rounds to even -> 1.0
    m.fp_sram[4] = 1.005859375  # 1 + 3*2^-9 -> 1.0078125
    assert m.fp_sram[3] == 1.0 and m.fp_sram[4] == 1.0078125
    m.write_fp_sram(10, [0.1, -2.0])
    assert list(m.read_fp_sram(10, 2)) == [0.10009765625, -2.0]
    assert m.fp_sram.bits[11] == 0xC000
    assert list(m.fp_sram[10:12]) == [0.10009765625, -2.0]


def test_vram_write_read_rounds(backend):
    m = machine(backend)
    m.vram.write(32, np.full((2, 16), 1.0 + 2.0**-8 + 2.0**-10))
    got = m.vram.read(32, 2)
    assert got.shape == (2, 16) and (got == 1.0078125).all()
    with pytest.raises(ValueError):
        m.vram.read(3)


def test_regs_snapshot_and_set_reg(backend):
    m = machine(backend)
    m.set_reg("gp0", 5)
    m.set_reg("gp15", 2**32 + 7)
    m.set_reg("f0", 1.0)
    m.set_reg("f7", 0.1)
    m.set_reg("a7", 2**40)
    m.set_reg("SCALE", 9)
    r = m.regs
    assert r["gp"][0] == 0 and r["gp"][15] == 7 and r["fp"][0] == 0.0 and r["fp"][7] == 0.10009765625
    assert r["a"][7] == 2**40 and r["SCALE"] == 9 and r["STRIDE"] == 1 and r["V_MASK"] == 0
    assert r["pc"] == 0 and r["loop_stack"] == []
    with pytest.raises(ValueError):
        m.set_reg("a8", 1)


def test_program_forms(backend, tmp_path):
    text = "S_ADDI_INT gp1, gp0, 5\nS_ADD_INT gp2, gp1, gp1\n"
    words = [encode("S_ADDI_INT", rd=1, imm18=5), encode("S_ADD_INT", rd=2, rs1=1, rs2=1)]
    path = tmp_path / "p.asm"
    path.write_text(text)
    for prog in (text, assemble(text, "x.asm"), words, np.array(words, dtype=np.uint32), path):
        m = machine(backend)
        res = m.run(prog)
        assert res.instructions == 2 and m.regs["gp"][2] == 10


def test_stats_and_trace(backend):
    m = machine(backend)
    res = m.run("C_LOOP_START gp1, 2\nS_ADDI_INT gp2, gp2, 3\nC_LOOP_END gp1", trace=True)
    rows = res.trace.rows()
    assert [t["pc"] for t in rows] == [0, 1, 2, 1, 2]
    assert rows[1]["text"] == "S_ADDI_INT gp2, gp2, 3" and [t["start"] for t in rows] == [0, 1, 2, 3, 4]
    assert [t["reg"] for t in rows][:2] == ["gp1: 0x0 -> 0x2", "gp2: 0x0 -> 0x3"]
    assert res.instructions == 5 and res.cycles == 5
    s = res.stats
    assert s["by_opcode"] == {"C_LOOP_START": 1, "S_ADDI_INT": 2, "C_LOOP_END": 2}
    assert s["by_unit"] == {"M": 0, "V": 0, "S": 2, "H": 0, "C": 3}
    assert s["matrix_macs"] == 0 and s["mx"] == {"nan_encoded": 0, "saturated": 0}
    assert s["backend"] == backend and s["host_seconds"] >= 0 and s["fault"] is None


def test_trace_stops_at_fault(backend):
    m = machine(backend)
    m.set_reg("gp3", 1)
    res = m.run("S_ADDI_INT gp1, gp0, 1\nV_EXP_V gp3, gp0", trace=True, raise_on_fault=False)
    assert len(res.trace) == 1 and res.fault.rule == "AL-VROW" and res.fault.pc == 1


def test_unknown_backend():
    with pytest.raises(ValueError):
        Machine(small_cfg(), backend="verilog")
