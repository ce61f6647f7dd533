"""Timing-only runs of the reference interpreter (issue 30): ``reference.execute(..., functional=False)``.

Each program runs twice from the same filled machine state, functionally and timing-only. Every timing
statistic must agree, the integer side (gp, address and control registers, loops, INT SRAM) must end the same,
and the timing-only run must leave the data (f registers, FP SRAM, VRAM, MRAM, accumulators, HBM) exactly as it
found it while the functional run changes it. Expected integer results sit beside the instruction that produces
them (``; expect gp5 = 24``: the final value, checked after both runs).

Data-derived values (V_TOPK results without a routing policy) are followed through the integer side and fault
TO-DATA where they would become an address, a count or a control value.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pytest
from simhelpers import small_cfg

import testbenches
from isa.assembler import assemble
from isa.encoding import encode
from isa.table import BY_MNEMONIC, INSTRUCTIONS, TOPK_POLICIES
from plena_sim import faults as F
from plena_sim import reference
from plena_sim.memory.state import CTRL_PC, CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK, MachineState, Outcome
from plena_sim.numerics import bf16
from plena_sim.routing import Routing
from plena_sim.timing import scoreboard as T
from plena_sim.timing.latency import topk_experts
from testbenches.harness import prepare_machine
from testbenches.shapes import hw
from testbenches.variants import get_config

_DATA = ("fp", "fp_sram", "vram", "mram", "m_accum", "v_accum", "hm_accum", "hv_accum")
_INTEGER = ("gp", "areg", "ctrl", "int_sram", "loop_start", "loop_reg", "loop_count")
_CTRL = {"SCALE": CTRL_SCALE, "STRIDE": CTRL_STRIDE, "V_MASK": CTRL_V_MASK}
#: the timing part of a trace record: all but the written register's values and the leading SRAM values
_TRACE_TIMING = [k for k in range(T.RC_VAL) if k not in (T.RC_ROLD, T.RC_RNEW)]


# ============================================================================= running and comparing


def filled_state() -> MachineState:
    """The small machine (M = V = 16, B = H = BA = 4, MXFP8 HBM) with every memory holding known non-zero data."""
    rng = np.random.default_rng(30)
    st = MachineState(small_cfg())
    st.fp[1:] = bf16.encode(rng.uniform(-2, 2, 7))
    st.fp_sram[...] = bf16.encode(rng.uniform(-2, 2, st.fp_sram.shape))
    st.vram[...] = bf16.encode(rng.uniform(-2, 2, st.vram.shape))
    st.mram[...] = rng.uniform(-1, 1, st.mram.shape).astype(np.float32)
    for name in ("m_accum", "v_accum", "hm_accum", "hv_accum"):
        getattr(st, name)[...] = rng.uniform(-1, 1, getattr(st, name).shape).astype(np.float32)
    st.int_sram[...] = rng.integers(0, 8, st.int_sram.shape)
    st.hbm.write(0, rng.integers(0x30, 0x48, 32768).astype(np.uint8))  # moderate E4M3 codes and E8M0 scales
    return st


class Pair(NamedTuple):
    before: MachineState
    func: MachineState
    tonly: MachineState
    out_func: Outcome
    out_tonly: Outcome


def run_pair(text: str, timing: str = "serial", routing: Routing | None = None) -> Pair:
    """``text`` run functionally and timing-only, each on a fresh :func:`filled_state`."""
    prog = assemble(text, "timing_only.asm")
    before, func, tonly = filled_state(), filled_state(), filled_state()
    out_func = reference.execute(func, prog, timing=timing)
    out_tonly = reference.execute(tonly, prog, timing=timing, functional=False, routing=routing)
    return Pair(before, func, tonly, out_func, out_tonly)


def run_tonly(text: str, st: MachineState | None = None, routing: Routing | None = None, **kw) -> Outcome:
    st = st if st is not None else filled_state()
    return reference.execute(st, assemble(text, "timing_only.asm"), functional=False, routing=routing, **kw)


def assert_same_timing(a: Outcome, b: Outcome) -> None:
    assert (b.retired, b.fault, b.cycles) == (a.retired, a.fault, a.cycles)
    for name in ("by_opcode", "pc_count", "pc_cycles", "pc_extra"):
        assert np.array_equal(getattr(b, name), getattr(a, name)), name
    for name in ("matrix_macs", "hbm_payload_read", "hbm_payload_written"):
        assert b.counters[name] == a.counters[name], name
    assert b.counters["mx_nan"] == b.counters["mx_saturated"] == 0


def assert_same_integer_state(a: MachineState, b: MachineState) -> None:
    for name in _INTEGER:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32) if a.dtype == np.float32 else a


def changed(before: MachineState, after: MachineState) -> set[str]:
    """The data arrays ``after`` holds differently (bit for bit); ``hbm``: the page table or the mapped pages'
    bytes (both runs map pages in the order they write), ``hbm_book``: the high water or the first read past it."""
    out = {n for n in _DATA if not np.array_equal(_bits(getattr(before, n)), _bits(getattr(after, n)))}
    a, b = before.hbm, after.hbm
    used = max(a.pages_used, b.pages_used)
    if not (np.array_equal(a.page_index, b.page_index) and np.array_equal(a.pages[:used], b.pages[:used])):
        out.add("hbm")
    if not np.array_equal(a.meta, b.meta):
        out.add("hbm_book")
    return out


def value_of(st: MachineState, name: str) -> int:
    """``gp5``, ``a2``, ``int[40]``, ``SCALE`` / ``STRIDE`` / ``V_MASK``."""
    if name.startswith("gp"):
        return int(st.gp[int(name[2:])])
    if name.startswith("int["):
        return int(st.int_sram[int(name[4:-1])])
    if name.startswith("a"):
        return int(st.areg[int(name[1:])])
    return int(st.ctrl[_CTRL[name]])


def expectations(text: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r";\s*expect\s+(\S+)\s*=\s*(\d+)", text)}


def assert_expected(text: str, *states: MachineState) -> None:
    want = expectations(text)
    assert want, "a program of this file states its expected values"
    for st in states:
        assert {k: value_of(st, k) for k in want} == want


def topk_shape(policy: int) -> tuple[int, int]:
    """(E, K) of a V_TOPK policy."""
    return int(topk_experts(policy)), TOPK_POLICIES[policy][1]


# ======================================================================= executed exactly: sint, intmem, loop, creg

INTEGER_PROGRAM = """
S_ADDI_INT gp1, gp0, 7          ; expect gp1 = 7
S_LUI_INT gp2, 3                ; expect gp2 = 12288
S_SUB_INT gp3, gp1, gp2         ; expect gp3 = 4294955015
S_ADDI_INT gp5, gp0, 0
C_LOOP_START gp6, 3             ; expect gp6 = 0
C_LOOP_START gp7, 4             ; expect gp7 = 0
S_ADDI_INT gp5, gp5, 2          ; expect gp5 = 24
C_LOOP_END gp7
C_LOOP_END gp6
S_MUL_INT gp4, gp1, gp5         ; expect gp4 = 168
C_LOOP_START gp8, 10            ; expect gp8 = 0
S_ADDI_INT gp9, gp9, 5          ; expect gp9 = 5
C_BREAK
S_ADDI_INT gp9, gp9, 100
C_LOOP_END gp8
S_ST_INT gp1, gp0, 40           ; expect int[40] = 7
S_LD_INT gp10, gp0, 40
S_ADD_INT gp10, gp10, gp5       ; expect gp10 = 31
S_ST_INT gp10, gp1, 50          ; expect int[57] = 31
C_SET_ADDR_REG a2, gp1, gp5     ; expect a2 = 30064771096
C_SET_SCALE_REG gp5             ; expect SCALE = 24
C_SET_STRIDE_REG gp1            ; expect STRIDE = 7
C_SET_V_MASK_REG gp2            ; expect V_MASK = 12288
"""


@pytest.mark.parametrize("timing", ["serial", "overlap", "rtl"])
def test_integer_side_runs_exactly(timing):
    p = run_pair(INTEGER_PROGRAM, timing)
    assert p.out_tonly.fault is None and p.out_tonly.retired == 47
    assert_same_timing(p.out_func, p.out_tonly)
    assert_same_integer_state(p.func, p.tonly)
    assert_expected(INTEGER_PROGRAM, p.func, p.tonly)
    assert changed(p.before, p.func) == changed(p.before, p.tonly) == set()
    assert p.tonly.taint.tolist() == [0, 0, 0] and not p.tonly.int_taint.any()


# ============================================================================= skipped after their checks

FP_SCALAR_PROGRAM = """
S_ADDI_INT gp1, gp0, 8          ; expect gp1 = 8
S_ADDI_INT gp2, gp0, 32         ; expect gp2 = 32
S_ADD_FP f1, f2, f3
S_MUL_FP f4, f1, f5
S_EXP_FP f6, f2
S_RECI_FP f7, f3
S_LD_FP f5, gp1, 3
S_ST_FP f2, gp1, 9
S_MAP_V_FP gp2, gp1, 16
"""

VECTOR_PROGRAM = """
S_ADDI_INT gp1, gp0, 16         ; expect gp1 = 16
S_ADDI_INT gp2, gp0, 32
S_ADDI_INT gp3, gp0, 48         ; expect gp3 = 48
S_ADDI_INT gp4, gp0, 3
V_ADD_VV gp3, gp1, gp2, 0
V_SUB_VF gp3, gp3, f1, 0, 1
V_MUL_VF gp3, gp3, f2, 0
V_MAX_VF gp3, gp3, f3, 0
V_EXP_V gp2, gp1, 0
V_RECI_V gp2, gp2, 0
V_SHFT_V gp1, gp3, gp4          ; expect gp4 = 3
V_RED_SUM f4, gp2, 0
V_RED_MAX f5, gp3, 0
"""

MATRIX_PROGRAM = """
S_ADDI_INT gp1, gp0, 256        ; expect gp1 = 256
S_ADDI_INT gp2, gp0, 64
S_ADDI_INT gp3, gp0, 512
S_ADDI_INT gp4, gp0, 1024       ; expect gp4 = 1024
S_ADDI_INT gp5, gp0, 4
M_MM 0, gp1, gp2
M_TMM 0, gp2, gp1
M_MM_WO gp3, gp0, 0
M_MV 0, gp1, gp2
M_TMV 0, gp1, gp2
M_MV_WO gp3, 4
M_BMM 0, gp1, gp2
M_BTMM 0, gp1, gp2
M_BMM_WO gp4, 0
M_BMV gp5, gp1, gp2
M_BTMV gp5, gp1, gp2
M_BMV_WO gp3, 16                ; expect gp5 = 4
"""

DMA_PROGRAM = """
S_ADDI_INT gp1, gp0, 512        ; expect gp1 = 512
S_ADDI_INT gp2, gp0, 256
S_ADDI_INT gp3, gp0, 1024
S_LUI_INT gp4, 2                ; expect gp4 = 8192
C_SET_ADDR_REG a1, gp0, gp4     ; expect a1 = 8192
S_ADDI_INT gp5, gp0, 4096
C_SET_SCALE_REG gp5             ; expect SCALE = 4096
S_LUI_INT gp6, 10               ; expect gp6 = 40960
S_LUI_INT gp7, 11
H_PREFETCH_M gp1, gp3, a1, 0, 0
H_PREFETCH_V gp2, gp3, a1, 0, 0
H_STORE_V gp2, gp6, a1, 0, 0
H_PREFETCH_V gp2, gp7, a1, 0, 0 ; past the high water: a functional run notes it
"""

# (program, data the functional run changes)
SKIPPED = {
    "fp_scalar": (FP_SCALAR_PROGRAM, {"fp", "fp_sram", "vram"}),
    "vector": (VECTOR_PROGRAM, {"fp", "vram"}),
    "matrix": (MATRIX_PROGRAM, {"vram", "m_accum", "v_accum", "hm_accum", "hv_accum"}),
    "dma": (DMA_PROGRAM, {"mram", "vram", "hbm", "hbm_book"}),
}


@pytest.mark.parametrize("name", list(SKIPPED))
def test_datapath_is_skipped(name):
    text, func_changes = SKIPPED[name]
    p = run_pair(text)
    assert p.out_tonly.fault is None and p.out_tonly.retired == len(assemble(text).words)
    assert_same_timing(p.out_func, p.out_tonly)
    assert_same_integer_state(p.func, p.tonly)
    assert_expected(text, p.func, p.tonly)
    assert changed(p.before, p.func) == func_changes
    assert changed(p.before, p.tonly) == set()


def test_dma_counts_the_payload_it_does_not_move():
    """P rows of L one-byte MXFP8 elements plus L/8 scale bytes each: M 16 x (16 + 2), V and W 4 x (16 + 2)."""
    p = run_pair(DMA_PROGRAM)
    assert p.out_tonly.counters["hbm_payload_read"] == 16 * 18 + 2 * 4 * 18
    assert p.out_tonly.counters["hbm_payload_written"] == 4 * 18
    assert p.tonly.hbm.unwritten_read is None and p.func.hbm.unwritten_read is not None


def test_matrix_counts_its_macs():
    """M_MM / M_TMM: B*B*M, M_MV / M_TMV: B*M, M_BMM / M_BTMM: BA*M*M*H, M_BMV / M_BTMV: BA*M*H (M 16, B H BA 4)."""
    p = run_pair(MATRIX_PROGRAM)
    assert p.out_tonly.counters["matrix_macs"] == 2 * (4 * 4 * 16 + 4 * 16 + 4 * 16 * 16 * 4 + 4 * 16 * 4)


# ============================================================================= V_TOPK

TOPK_PROGRAM = """
S_ADDI_INT gp1, gp0, 16         ; expect gp1 = 16
S_ADDI_INT gp2, gp0, 32
S_ADDI_INT gp3, gp0, 8          ; expect gp3 = 8
V_TOPK gp1, gp2, gp3, 0
"""


def test_topk_without_routing_marks_its_words_data_derived():
    p = run_pair(TOPK_PROGRAM)
    assert_same_timing(p.out_func, p.out_tonly)
    assert_expected(TOPK_PROGRAM, p.func, p.tonly)
    assert changed(p.before, p.func) == {"fp_sram"} and changed(p.before, p.tonly) == set()
    assert not np.array_equal(p.func.int_sram, p.before.int_sram)
    assert np.array_equal(p.tonly.int_sram, p.before.int_sram)
    assert np.flatnonzero(p.tonly.int_taint).tolist() == [8, 9, 10, 11]  # K = 4 words from gp3
    assert p.tonly.taint.tolist() == [0, 0, 1]  # no register holds one yet; no routing call; a word marked
    assert not p.func.int_taint.any() and p.func.taint.tolist() == [0, 0, 0]


ROUTED_PROGRAM = """
S_ADDI_INT gp1, gp0, 16
S_ADDI_INT gp2, gp0, 32
S_ADDI_INT gp3, gp0, 8
S_ADDI_INT gp6, gp0, 16
V_TOPK gp1, gp2, gp3, 0
S_ADDI_INT gp3, gp0, 20
V_TOPK gp1, gp2, gp3, 1
S_LD_INT gp4, gp0, 9
S_MUL_INT gp5, gp4, gp6
V_ADD_VV gp5, gp5, gp5, 0
S_LD_INT gp7, gp0, 27
S_MUL_INT gp7, gp7, gp6
V_EXP_V gp7, gp7, 0
C_SET_SCALE_REG gp4
"""


def test_topk_result_used_as_an_address_faults_without_routing():
    before = filled_state()
    st = filled_state()
    out = run_tonly(ROUTED_PROGRAM, st)
    gp5 = int(before.int_sram[9]) * 16  # the (unchanged) INT SRAM word times a VRAM row
    assert out.fault == (F.R_TO_DATA, 9, F.OPERAND_INDEX["rd"], gp5, -1, -1, 5, 0)
    assert out.retired == 9 and int(st.ctrl[CTRL_PC]) == 9
    assert int(st.taint[0]) == (1 << 4) | (1 << 5)
    fault = F.make_fault(out.fault, assemble(ROUTED_PROGRAM, "timing_only.asm"), state=st)
    assert isinstance(fault, F.DataDependenceFault) and fault.rule == "TO-DATA"
    assert f"gp5 = {gp5} (field rd)" in str(fault) and "V_TOPK result" in str(fault)


@pytest.mark.parametrize("routing", [Routing("round-robin"), Routing("uniform", seed=1)], ids=lambda r: r.label)
def test_topk_with_routing_runs_to_the_end(routing):
    st = filled_state()
    out = run_tonly(ROUTED_PROGRAM, st, routing)
    assert out.fault is None and out.retired == 14
    first, second = routing.experts(0, *topk_shape(0)), routing.experts(1, *topk_shape(1))
    assert st.int_sram[8:12].tolist() == first and st.int_sram[20:28].tolist() == second
    assert value_of(st, "gp4") == first[1] and value_of(st, "SCALE") == first[1]
    assert value_of(st, "gp7") == second[7] * 16
    assert st.taint.tolist() == [0, 2, 0] and not st.int_taint.any()
    assert changed(filled_state(), st) == set()


def test_round_robin_selections_are_known():
    st = filled_state()
    run_tonly(ROUTED_PROGRAM, st, Routing("round-robin"))
    assert st.int_sram[8:12].tolist() == [0, 1, 2, 3]  # call 0, K = 4 of E = 32
    assert st.int_sram[20:28].tolist() == [8, 9, 10, 11, 12, 13, 14, 15]  # call 1, K = 8 of E = 128


def test_routing_call_index_and_taint_persist_across_calls():
    st = filled_state()
    run_tonly("S_ADDI_INT gp3, gp0, 8\nV_TOPK gp0, gp0, gp3, 0", st, Routing("round-robin"))
    st.ctrl[CTRL_PC] = 0
    run_tonly("S_ADDI_INT gp3, gp0, 8\nV_TOPK gp0, gp0, gp3, 0", st, Routing("round-robin"))
    assert st.int_sram[8:12].tolist() == [4, 5, 6, 7] and int(st.taint[1]) == 2
    st.ctrl[CTRL_PC] = 0
    run_tonly("V_TOPK gp0, gp0, gp0, 0\nS_LD_INT gp4, gp0, 1", st)
    st.ctrl[CTRL_PC] = 0
    out = run_tonly("C_SET_STRIDE_REG gp4", st)
    assert out.fault == (F.R_TO_DATA, 0, F.OPERAND_INDEX["rd"], int(st.gp[4]), -1, -1, 4, 0)


# ============================================================================= taint propagation

PROPAGATION_PROGRAM = """
S_ADDI_INT gp1, gp0, 2
V_TOPK gp0, gp0, gp0, 0
S_LD_INT gp4, gp0, 1
S_ADD_INT gp6, gp4, gp1
S_ADDI_INT gp8, gp4, 1
S_ADDI_INT gp8, gp1, 1
S_MUL_INT gp0, gp4, gp4
S_ST_INT gp6, gp1, 30
S_LD_INT gp9, gp0, 32
S_ST_INT gp1, gp0, 0
S_LD_INT gp10, gp0, 0
S_ADDI_INT gp11, gp4, 0
C_LOOP_START gp11, 2
C_LOOP_END gp11
V_RED_SUM f0, gp4, 0
"""


def test_data_derived_values_may_be_moved_and_stored():
    st = filled_state()
    out = run_tonly(PROPAGATION_PROGRAM, st)
    assert out.fault is None and out.retired == 16
    # gp4 (loaded), gp6 (gp4 + gp1), gp9 (stored and reloaded); gp8, gp10, gp11 overwritten from clean values
    assert int(st.taint[0]) == (1 << 4) | (1 << 6) | (1 << 9)
    assert np.flatnonzero(st.int_taint).tolist() == [1, 2, 3, 32]  # word 0 was overwritten with gp1
    assert int(st.gp[9]) == int(st.gp[6]) == int(st.gp[4]) + 2


@pytest.mark.parametrize(
    ("use", "operand", "reg"),
    [
        ("S_LD_INT gp1, gp9, 0", "rs1", 9),
        ("S_ST_INT gp1, gp6, 0", "rs1", 6),
        ("C_SET_ADDR_REG a0, gp1, gp9", "rs2", 9),
        ("C_LOOP_END gp4", "rd", 4),
        ("H_PREFETCH_V gp0, gp6, a0, 0, 0", "rs1", 6),
        ("V_RED_MAX f1, gp4, 0", "rs1", 4),
        ("M_BMV gp9, gp0, gp6", "rd", 9),
    ],
)
def test_propagated_values_fault_where_used(use, operand, reg):
    st = filled_state()
    out = run_tonly(PROPAGATION_PROGRAM + use, st)
    assert out.retired == 16  # 15 words, C_LOOP_END twice
    assert out.fault == (F.R_TO_DATA, 15, F.OPERAND_INDEX[operand], int(st.gp[reg]), -1, -1, reg, 0)


# ============================================================================= TO-DATA: where it is checked


def _guarded(instr) -> tuple[str, ...]:
    if instr.family == "sint":
        return ()
    return ("rs1",) if instr.family == "intmem" else instr.gp_reads


def _word_with(instr, field: str, reg: int) -> int:
    """``instr`` with gp ``reg`` in ``field``, gp0 in its other gp fields, f1 / a0 / 0 in the rest."""
    fields = {o.field: 0 for o in instr.operands if o.field is not None}
    fields.update({o.field: 1 for o in instr.operands if o.kind == "f"})
    fields[field] = reg
    return encode(instr.mnemonic, **fields)


GUARDED_CASES = [(i.mnemonic, field) for i in INSTRUCTIONS for field in _guarded(i)]


@pytest.mark.parametrize(("mnemonic", "field"), GUARDED_CASES, ids=[f"{m}-{f}" for m, f in GUARDED_CASES])
def test_every_register_read_is_guarded(mnemonic, field):
    instr = BY_MNEMONIC[mnemonic]
    st = filled_state()
    st.gp[5], st.taint[0] = 3, 1 << 5
    out = reference.execute(st, [_word_with(instr, field, 5)], functional=False)
    assert out.fault == (F.R_TO_DATA, 0, F.OPERAND_INDEX[field], 3, -1, -1, 5, 0)
    assert out.retired == 0 and int(st.taint[0]) == 1 << 5


@pytest.mark.parametrize(
    ("text", "retired", "taint"),
    [
        ("S_ADD_INT gp1, gp5, gp5", 1, (1 << 5) | (1 << 1)),  # propagates
        ("S_LUI_INT gp5, 1", 1, 0),  # overwritten with a constant
        ("S_ST_INT gp5, gp0, 3", 1, 1 << 5),  # a stored value may be data-derived
        ("C_LOOP_START gp5, 2\nC_LOOP_END gp5", 3, 0),  # the count comes from the immediate
        ("V_RED_SUM f0, gp5, 0", 1, 1 << 5),  # a no-op reads nothing
        ("S_ADD_FP f1, f2, f3", 1, 1 << 5),
    ],
)
def test_reads_that_need_no_clean_value(text, retired, taint):
    st = filled_state()
    st.gp[5], st.taint[0] = 3, 1 << 5
    out = run_tonly(text, st)
    assert out.fault is None and out.retired == retired
    assert int(st.taint[0]) == taint


def test_operands_are_checked_in_field_order():
    for text, operand, reg in (("V_ADD_VV gp5, gp4, gp4, 0", "rd", 5), ("V_ADD_VV gp1, gp4, gp5, 0", "rs1", 4)):
        st = filled_state()
        st.gp[4], st.gp[5], st.taint[0] = 17, 3, (1 << 4) | (1 << 5)
        assert run_tonly(text, st).fault == (F.R_TO_DATA, 0, F.OPERAND_INDEX[operand], int(st.gp[reg]), -1, -1, reg, 0)


@pytest.mark.parametrize(
    ("word", "rule"),
    [
        (encode("V_ADD_VF", rd=5, rs1=5, rs2=9), "IL-FREG"),  # static checks first
        (encode("M_BTMM", rd=3, rs1=5, rs2=0), "IL-BRD"),
        (encode("H_STORE_V", rd=5, rs1=0, rs2=9), "IL-AREG"),
        (encode("V_ADD_VV", rd=5, rs1=0, rs2=0), "TO-DATA"),  # then TO-DATA, before AL-VROW (gp5 = 3)
        (encode("C_LOOP_END", rd=5), "TO-DATA"),  # before LP-NOMATCH
        (encode("S_LD_INT", rd=1, rs1=5, imm18=70), "TO-DATA"),  # before BD-INTS
    ],
)
def test_check_order(word, rule):
    st = filled_state()
    st.gp[5], st.taint[0] = 3, 1 << 5
    out = reference.execute(st, [word], functional=False)
    assert F.RULE_BY_CODE[out.fault[0]].id == rule


def test_budget_comes_before_to_data():
    st = filled_state()
    st.taint[0] = 1 << 5
    out = run_tonly("V_ADD_VV gp5, gp0, gp0, 0", st, max_instructions=0)
    assert F.RULE_BY_CODE[out.fault[0]].id == "BUDGET"


def test_a_functional_run_ignores_and_keeps_the_taint():
    st = filled_state()
    st.taint[:] = (0xFFFE, 5, 1)
    st.int_taint[:] = 1
    out = reference.execute(st, assemble(ROUTED_PROGRAM + "\nS_LD_INT gp9, gp0, 3"))
    assert out.fault is None
    assert st.taint.tolist() == [0xFFFE, 5, 1] and st.int_taint.all()


# ============================================================================= real programs, every timing model

# (testbench, parameters) on the small preset: DMA, matrix and vector units; H_STORE_V
BENCHES = [
    ("ffn", {"rows": hw(1, "BLEN", plus=1), "hidden": hw(2, "MLEN"), "inter": hw(4, "MLEN"), "max_k_tiles": 2}),
    ("h_store", {}),
]


def _bench_run(case, timing: str, functional: bool, routing: Routing | None = None):
    m = prepare_machine(case, "reference")
    prog = case.assembled()
    budget = case.max_instructions or 10**9
    out = reference.execute(m.state, prog, budget, timing, 1 << 13, functional=functional, routing=routing)
    return m, out


@pytest.mark.parametrize("timing", ["serial", "overlap", "rtl"])
@pytest.mark.parametrize(("name", "params"), BENCHES, ids=[b[0] for b in BENCHES])
def test_testbench_timing_is_identical(name, params, timing):
    mod = testbenches.get(name)
    case = mod.build(dict(mod.DEFAULTS, **params), get_config("small"))
    mf, out_func = _bench_run(case, timing, True)
    mt, out_tonly = _bench_run(case, timing, False)
    assert out_func.fault is None and out_func.retired > 50
    assert_same_timing(out_func, out_tonly)
    assert_same_integer_state(mf.state, mt.state)
    tf, tt = mf.state.timing, mt.state.timing
    assert tf is not None and tt is not None and tf.tcount[0] == tt.tcount[0] == out_func.retired
    assert np.array_equal(tf.tbuf[:, _TRACE_TIMING], tt.tbuf[:, _TRACE_TIMING])
    assert changed(prepare_machine(case, "reference").state, mt.state) == set()


def test_moe_layer_needs_a_routing_policy():
    mod = testbenches.get("moe_layer")
    case = mod.build(dict(mod.DEFAULTS), get_config("small"))
    _m, out_func = _bench_run(case, "serial", True)
    _m, out_none = _bench_run(case, "serial", False)
    assert out_none.fault is not None and F.RULE_BY_CODE[out_none.fault[0]].id == "TO-DATA"
    m, out_routed = _bench_run(case, "serial", False, Routing("round-robin"))
    assert out_routed.fault is None and out_routed.retired == out_func.retired
    assert int(m.state.taint[1]) == out_func.by_opcode[BY_MNEMONIC["V_TOPK"].opcode]
