"""Timing-only runs (issue 30) of the Numba core: the same statistics as the functional run, no datapath, and
data dependence never silent (TO-DATA, routing policies).

The matrix: every testbench's required cases, functional vs timing-only, on the reference machine under rtl by
default; ``-m slow`` runs the other two timing models there and all three on v80-128x64. Lock-step of the
timing-only mode against the reference interpreter: tests/core/test_timing_only_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import testbenches
from isa.assembler import AssemblerError, assemble
from isa.table import BY_MNEMONIC, TOPK_POLICIES
from plena_sim import reference
from plena_sim.faults import DataDependenceFault
from plena_sim.machine import Machine
from plena_sim.routing import Routing
from testbenches.harness import cases_of, prepare_machine
from testbenches.shapes import resolve_params
from testbenches.variants import fixes_machine, get_config

#: the statistics a timing-only run must reproduce exactly (data counters excluded: ``mx``)
TIMING_KEYS = ("cycles", "instructions", "by_opcode", "unit_busy_cycles", "matrix_macs", "hbm", "regions")
TIMINGS = ("serial", "overlap", "rtl")
#: the models of the default tier (the CI budget); ``-m slow`` runs every other model on both machines
FAST = {"default": ("rtl",)}


def _required():
    for tb in testbenches.names():
        for cid, _ov, _var in testbenches.get(tb).REQUIRED_CASES:
            yield tb, cid


def _case(tb: str, cid: str, hw: str | None):
    mod = testbenches.get(tb)
    _cid, params, variant = cases_of(mod)[cid]
    if hw is not None and fixes_machine(variant):
        variant = "default"
    cfg = get_config(variant, hw=hw)
    return mod.build(resolve_params(dict(mod.DEFAULTS, **params), cfg), cfg)


def _timing_stats(res) -> dict:
    out = {k: res.stats[k] for k in TIMING_KEYS}
    out["critical_path"] = res.stats.get("critical_path")
    out["stalls"] = res.stats.get("stalls")
    out["pc"] = (res.outcome.pc_count.tolist(), res.outcome.pc_cycles.tolist(), res.outcome.pc_extra.tolist())
    return out


def _true_routing(case, prog) -> Routing:
    """The experts every V_TOPK of the case's functional run selects, in order (recorded from a reference run):
    with them as its routing file, a timing-only run of a MoE program must reproduce the functional timing."""
    rows: list[tuple[int, ...]] = []
    handler = reference.BY_OPCODE[BY_MNEMONIC["V_TOPK"].opcode]

    def recording(r, f):
        handler(r, f)
        k = TOPK_POLICIES[f.rs3][1]
        rows.append(tuple(int(x) for x in r.st.int_sram[r.gp(f.rs2) : r.gp(f.rs2) + k]))

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(reference.BY_OPCODE, BY_MNEMONIC["V_TOPK"].opcode, recording)
        res = prepare_machine(case, backend="reference").run(prog, raise_on_fault=False)
    assert res.fault is None and rows, res.fault
    return Routing("file", table=tuple(rows), source="recorded")


def _compare(tb: str, cid: str, hw: str | None, timings: tuple[str, ...]) -> None:
    try:
        case = _case(tb, cid, hw)
    except (ValueError, AssertionError) as exc:  # a case that does not plan on this machine: nothing to compare
        pytest.skip(f"does not plan on {hw}: {exc}")
    try:
        prog = case.assembled()
    except AssemblerError as exc:  # a case whose expected fault the assembler already refuses: nothing runs
        assert case.expect and any(rule in str(exc) for rule in case.expect), exc
        return
    routing = _true_routing(case, prog) if "V_TOPK" in case.program else None
    for timing in timings:
        func = prepare_machine(case).run(prog, timing=timing, raise_on_fault=False)
        m = prepare_machine(case)
        vram0 = m.vram.bits.copy()
        timed = m.run(prog, timing=timing, functional=False, routing=routing, raise_on_fault=False)
        assert (func.fault is None) == (timed.fault is None), (timing, func.fault, timed.fault)
        if func.fault is not None:  # an expected-fault case: the same record
            assert func.fault.record == timed.fault.record
        assert _timing_stats(timed) == _timing_stats(func), (tb, cid, hw, timing)
        assert timed.stats["timing_only"] is True and func.stats["timing_only"] is False
        assert timed.stats["mx"] == {"nan_encoded": None, "saturated": None}
        assert np.array_equal(m.vram.bits, vram0), "a timing-only run must not touch VRAM"


@pytest.mark.parametrize("tb,cid", list(_required()), ids=[f"{t}[{c}]" for t, c in _required()])
def test_required_case_timing_only_equals_functional(tb, cid):
    _compare(tb, cid, None, FAST["default"])


@pytest.mark.slow
@pytest.mark.parametrize("tb,cid", list(_required()), ids=[f"{t}[{c}]" for t, c in _required()])
@pytest.mark.parametrize("hw", ("default", "v80-128x64"))
def test_required_case_timing_only_every_model(tb, cid, hw):
    rest = tuple(t for t in TIMINGS if t not in FAST.get(hw, ()))
    _compare(tb, cid, None if hw == "default" else hw, rest)


# ------------------------------------------------------------------ data dependence: TO-DATA and routing

#: a V_TOPK (policy 0: E=32, K=4) writes INT SRAM [64, 68); the program loads word 66 and uses it as an address
_TOPK_THEN_ADDRESS = """
    S_ADDI_INT gp1, gp0, 512
    S_ADDI_INT gp2, gp0, 64
    V_TOPK gp0, gp1, gp2, 0
    S_LD_INT gp3, gp2, 2
    S_ADDI_INT gp4, gp3, 1
    S_ST_INT gp4, gp0, 100
    S_LD_INT gp5, gp0, 100
    S_MUL_INT gp6, gp5, gp2
    V_ADD_VV gp6, gp1, gp1, 0
"""


def _topk_machine(routing: Routing | None = None) -> Machine:
    return Machine(functional=False, routing=routing)


def test_topk_result_used_as_address_faults_to_data():
    m = _topk_machine()
    prog = assemble(_TOPK_THEN_ADDRESS, "topk.asm")
    res = m.run(prog, raise_on_fault=False)
    f = res.fault
    assert isinstance(f, DataDependenceFault) and f.rule == "TO-DATA"
    assert f.pc == 8 and f.operands.get("gp6") == int(m.state.gp[6])  # V_ADD_VV's rd field holds gp6
    assert f.record[2] == 0 and f.record[6] == 6  # operand field rd, register 6
    assert res.instructions == 8  # everything before it ran: taint moved through ADDI, ST_INT, LD_INT, MUL
    assert int(m.state.taint[0]) == (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6)
    assert m.state.int_taint[64:68].tolist() == [1, 1, 1, 1] and m.state.int_taint[100] == 1


def test_tainted_value_only_moved_does_not_fault():
    m = _topk_machine()
    prog = assemble(_TOPK_THEN_ADDRESS.rsplit("V_ADD_VV", 1)[0] + "S_ADDI_INT gp6, gp0, 0\n", "topk.asm")
    res = m.run(prog, raise_on_fault=False)
    assert res.fault is None and int(m.state.taint[0]) == (1 << 3) | (1 << 4) | (1 << 5)


@pytest.mark.parametrize("routing", [Routing("round-robin"), Routing("uniform", seed=7)], ids=lambda r: r.policy)
def test_routing_policy_makes_topk_results_plain_integers(routing):
    m = _topk_machine(routing)
    prog = assemble(_TOPK_THEN_ADDRESS.replace("V_ADD_VV gp6", "V_ADD_VV gp0"), "topk.asm")
    res = m.run(prog, raise_on_fault=False)
    assert res.fault is None, res.fault
    chosen = routing.experts(0, 32, 4)
    assert m.state.int_sram[64:68].tolist() == chosen and len(set(chosen)) == 4
    assert int(m.state.gp[3]) == chosen[2] and int(m.state.gp[4]) == chosen[2] + 1
    assert int(m.state.taint[0]) == 0 and int(m.state.taint[1]) == 1
    assert res.stats["routing"] == routing.label and res.stats["timing_only"] is True


def test_uniform_routing_matches_the_python_definition_over_many_calls():
    loop = """
        S_ADDI_INT gp1, gp0, 512
        S_ADDI_INT gp2, gp0, 64
        C_LOOP_START gp7, 40
        V_TOPK gp0, gp1, gp2, 1
        S_ADDI_INT gp2, gp2, 8
        C_LOOP_END gp7
    """
    r = Routing("uniform", seed=3)
    m = Machine(functional=False, routing=r)
    assert m.run(assemble(loop, "loop.asm"), raise_on_fault=False).fault is None
    got = m.state.int_sram[64 : 64 + 320].reshape(40, 8).tolist()
    assert got == [r.experts(j, 128, 8) for j in range(40)]


def test_moe_layer_faults_without_routing_and_runs_with_uniform():
    mod = testbenches.get("moe_layer")
    cfg = get_config("default")
    case = mod.build(resolve_params(dict(mod.DEFAULTS), cfg), cfg)
    prog = case.assembled()
    res = prepare_machine(case).run(prog, functional=False, raise_on_fault=False)
    assert res.fault is not None and res.fault.rule == "TO-DATA", res.fault
    ok = prepare_machine(case).run(prog, functional=False, routing=Routing("uniform"), raise_on_fault=False)
    assert ok.fault is None and ok.instructions > res.instructions
    assert ok.stats["routing"] == "uniform (seed 0)"
