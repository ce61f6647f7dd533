"""Every opcode of the table reaches a core unit branch, has a resource set and a per-instruction test.

Adding an instruction is: its table row (family, operation, operand roles), its unit branch, the
reference's ``op_<MNEMONIC>`` and tests; these checks fail loudly when one of them is forgotten.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from isa.encoding import encode
from isa.table import FAMILIES, INSTRUCTIONS
from plena_sim import core, reference
from plena_sim.config import load_config
from plena_sim.faults import RULE_BY_ID
from plena_sim.memory.state import MachineState
from plena_sim.timing.scoreboard import MAX_RANGES, TimingState, dest_reg_py, resources_py

CFG = load_config(
    overrides={
        "MLEN": 16,
        "VLEN": 16,
        "BLEN": 4,
        "HLEN": 4,
        "BROADCAST_AMOUNT": 4,
        "VECTOR_SRAM_SIZE": 64,
        "MATRIX_SRAM_SIZE": 64,
        "HBM_SIZE": 1 << 16,
        "HBM_M_Prefetch_Amount": 16,
    }
)
IL_OPC = RULE_BY_ID["IL-OPC"].code
TESTS = Path(__file__).resolve().parent


def _zero_word(i) -> int:
    fields = {}
    if i.mnemonic == "C_LOOP_START":
        fields = {"rd": 1, "imm22": 1}
    return encode(i.mnemonic, **fields)


@pytest.mark.parametrize("instr", INSTRUCTIONS, ids=lambda i: i.mnemonic)
@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_every_opcode_reaches_a_unit(instr, backend):
    """All-zero operands: the instruction retires or faults by one of its own rules, never IL-OPC."""
    st = MachineState(CFG)
    run = core.execute if backend == "numba" else reference.execute
    out = run(st, [_zero_word(instr)])
    assert out.fault is None or out.fault[0] != IL_OPC, instr.mnemonic


def test_every_family_is_used_by_the_table():
    assert sorted({i.family for i in INSTRUCTIONS}) == sorted(FAMILIES)


@pytest.mark.parametrize("instr", INSTRUCTIONS, ids=lambda i: i.mnemonic)
def test_every_opcode_has_a_resource_set(instr):
    """Registers 1 in every register field, addresses 0: the §4 read/write sets are not empty and every
    register operand of the table appears in them."""
    cv = TimingState.cfg_vector(CFG)
    rr = np.zeros((MAX_RANGES, 3), dtype=np.int64)
    wr = np.zeros((MAX_RANGES, 3), dtype=np.int64)
    nr, nw = resources_py(instr.opcode, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, cv, rr, wr)
    assert nr + nw > 0, instr.mnemonic
    regs = [o for o in instr.operands if o.kind in ("gp", "f", "a") and o.field in ("rd", "rs1", "rs2")]
    got = {int(x) for x in rr[:nr, 0]} | {int(x) for x in wr[:nw, 0]}
    assert len([r for r in got if r < 40]) >= min(1, len(regs)), instr.mnemonic
    kind, idx = dest_reg_py(instr.opcode, 1, 1)
    assert (kind != 0) == bool(instr.writes or instr.updates), instr.mnemonic


def test_every_mnemonic_has_a_per_instruction_test():
    text = (TESTS / "test_instructions.py").read_text()
    # a mnemonic not inside a longer name (program text in the tests is full of "\\n" escapes)
    missing = [i.mnemonic for i in INSTRUCTIONS if not re.search(rf"(?<![A-Z_]){i.mnemonic}(?![A-Z_])", text)]
    assert not missing, missing
