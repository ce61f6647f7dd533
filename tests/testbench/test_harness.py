"""The harness's generic checks have teeth (kernels.md §4.2): poison, footprint, constants, HBM footprint,
faults and plan errors are failures, artifacts go only to the given workdir."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from programs.asm import fp as F
from programs.asm import gp as G
from programs.asm import load_imm
from programs.hbm_tensors import preload_act
from testbenches.harness import GEN_GP, CaseBuilder, VramCbm, VramRows, fp_constants, prepare_machine, run, run_case
from testbenches.variants import VARIANTS, get_config

CFG = get_config("default")
V = CFG.VLEN


def _copy_case(*, write_out=True, stray_row=None, fp_write_slot=None, hbm_write=False, fault=False, hbm_far=None):
    """x (HBM) -> VRAM rows -> copy to out rows (x*1.0); optional deliberate mistakes."""
    cb = CaseBuilder("selftest", {"seed": 1}, CFG, case_id="copy")
    tx, X = cb.tensor("x", cb.randn((4, V)), "act")
    rx = cb.rows(4, "x", "input")
    ro = cb.rows(4, "out", "output")
    a = cb.asm()
    preload_act(a, CFG, tx, 4, V, rx * V, 4, GEN_GP)
    a.S_LD_FP(F(1), G(0), 3)
    for r in range(4 if write_out else 3):
        load_imm(a, 1, (rx + r) * V)
        load_imm(a, 2, (ro + r) * V)
        a.V_MUL_VF(G(2), G(1), F(1), 0)
    if stray_row is not None:
        load_imm(a, 2, stray_row * V)
        a.V_MUL_VF(G(2), G(1), F(1), 0)
    if fp_write_slot is not None:
        a.S_ST_FP(F(1), G(0), fp_write_slot)
    if hbm_write:
        load_imm(a, 1, 512)
        a.C_SET_SCALE_REG(G(1))
        load_imm(a, 1, ro * V)
        a.H_STORE_V(G(1), G(0), "a0", 0, 0)
    if hbm_far is not None:  # a store into pages no tensor touches
        load_imm(a, 1, 512)
        a.C_SET_SCALE_REG(G(1))
        load_imm(a, 1, ro * V)
        load_imm(a, 3, hbm_far)
        a.H_STORE_V(G(1), G(3), "a0", 0, 0)
    if fault:
        load_imm(a, 1, 3)
        a.V_MUL_VF(G(1), G(1), F(1), 0)  # AL-VROW
    cb.check("output", VramRows(ro * V, 4), X, ("row", "lane"), "exact")
    return cb.case(a)


def test_clean_case_passes_and_artifacts(tmp_path):
    rep = run(_copy_case(), workdir=tmp_path / "wd")
    assert rep.passed, rep.summary
    files = sorted(p.name for p in (tmp_path / "wd").iterdir())
    assert files == ["golden.npy", "program.asm", "program.mem", "report.json", "sim.npy"]
    doc = json.loads((tmp_path / "wd" / "report.json").read_text())
    assert doc["passed"] and doc["instructions"] == rep.instructions and doc["cycles"] == rep.cycles
    assert np.array_equal(np.load(tmp_path / "wd" / "golden.npy"), np.load(tmp_path / "wd" / "sim.npy"))


def test_no_artifacts_without_workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(_copy_case())
    assert list(tmp_path.iterdir()) == []


def test_unwritten_output_is_nan_poisoned():
    rep = run(_copy_case(write_out=False))
    assert not rep.passed
    out = rep.check("output")
    assert out.n_nonfinite == V and out.first_nonfinite == "(row=3, lane=0)"


def test_stray_write_fails_footprint():
    rep = run(_copy_case(stray_row=40))
    assert not rep.passed and not rep.check("vram_footprint").passed
    assert "row 40" in rep.check("vram_footprint").reason


def test_constant_slot_overwrite_fails():
    rep = run(_copy_case(fp_write_slot=5))
    assert not rep.passed and not rep.check("constants").passed
    assert "slot 5" in rep.summary


def test_hbm_write_outside_outputs_fails():
    rep = run(_copy_case(hbm_write=True))
    assert not rep.passed and not rep.check("hbm_footprint").passed


def test_hbm_write_into_untouched_pages_fails_naming_the_first_byte():
    far = 1 << 24
    base = _copy_case().tensors["x"].base
    rep = run(_copy_case(hbm_far=far))
    fp = rep.check("hbm_footprint")
    assert not rep.passed and not fp.passed and fp.n_fail > 0
    first = base + 512 + far // 8  # the first scale byte (SCALE = 512, one scale per 8 elements) precedes them
    assert fp.first["index"] == [first] and f"first byte {first})" in fp.reason
    assert fp.n_fail > 8 * V // 2  # and the elements at base + far


def test_sparse_tensor_holds_exactly_the_dense_bytes_of_its_blocks():
    """Row blocks of a sparse tensor encode to the bytes a dense tensor holds there (zero rows elsewhere); the
    case's HBM segments are just those bytes, and a machine holds only their pages."""
    rng = np.random.default_rng(3)
    rows, cols = 64, 128
    blocks = [(8, rng.standard_normal((8, cols))), (40, rng.standard_normal((16, cols)))]
    dense = np.zeros((rows, cols))
    for r0, b in blocks:
        dense[r0 : r0 + b.shape[0]] = b
    cd, cs = CaseBuilder("d", {}, CFG), CaseBuilder("s", {}, CFG)
    for cb in (cd, cs):
        cb.tensor("x", rng.standard_normal((4, V)), "act")
    td, deq = cd.tensor("w", dense, "weight", bind=False)
    ts, vals = cs.sparse_tensor("w", rows, cols, "weight", blocks)
    assert ts == td and cs.tensors["w"].base == cd.tensors["w"].base
    pd, ps = cd.tensors["w"], cs.tensors["w"]
    assert (ps.elem_range, ps.scale_range, ps.end) == (pd.elem_range, pd.scale_range, pd.end)
    assert np.array_equal(cs.image.hbm.read(ps.base, ps.end - ps.base), cd.image.hbm.read(pd.base, pd.end - pd.base))
    for (r0, b), v in zip(blocks, vals, strict=True):
        assert np.array_equal(v, deq[r0 : r0 + b.shape[0]])
    t = CFG.hbm_type("HBM_M_WEIGHT_TYPE")
    spans = []
    for r0, b in blocks:
        spans.append((ps.base + r0 * cols, b.size))
        spans.append((ps.scale_range[0] + r0 * cols // t.block, b.size // t.block))
    case = cs.case("")
    assert [(a, d.size) for a, d in case.hbm_segments[1:]] == spans


def test_a_huge_sparse_tensor_costs_only_its_blocks():
    cb = CaseBuilder("s", {}, CFG)
    rows, cols = 1 << 16, 4096  # 256 MiB of elements
    t, vals = cb.sparse_tensor("w", rows, cols, "weight", [(rows - 8, np.ones((8, cols)))])
    assert t.alloc_elems == rows * cols and cb.tensors["w"].end > rows * cols
    case = cb.case("")
    assert sum(d.size for _a, d in case.hbm_segments) == 8 * cols + 8 * cols // 8
    m = prepare_machine(case)
    elem0, data = case.hbm_segments[0]
    assert elem0 == cb.tensors["w"].base + (rows - 8) * cols and np.array_equal(m.hbm.read(elem0, data.size), data)
    assert m.hbm.pages_used <= 2 and np.array_equal(vals[0], np.ones((8, cols)))


def test_simulator_fault_is_a_failure():
    rep = run(_copy_case(fault=True))
    assert not rep.passed and rep.fault and rep.fault["rule"] == "AL-VROW"
    assert "AL-VROW" in rep.summary


def test_assembler_error_is_a_failure():
    case = _copy_case()
    case.program += "S_ADDI_INT gp1, gp0, 262144\n"
    rep = run(case)
    assert not rep.passed and rep.error.startswith("assembler")


def test_plan_error_is_a_failure():
    rep = run_case("linear", "bad", {"K": 100}, "default")
    assert not rep.passed and "plan" in rep.error and "K=100" in rep.error


def test_expected_fault_passes_only_if_raised():
    case = _copy_case(fault=True)
    case.expect = ("AL-VROW",)
    assert run(case).passed
    case = _copy_case()
    case.expect = ("AL-VROW",)
    assert not run(case).passed


def test_fp_constants_map():
    c = fp_constants(get_config("emu025"), eps=1e-5, inv_hidden=0.25, qk_scale=0.5, user=[1.5])
    assert np.isneginf(c[0]) and c[1] == np.float32(1e-5) and c[2] == 0.25 and c[3] == 1.0
    assert c[4] == np.float32(1.702) and c[5] == 0.5 and c[6] == 4.0 and c[7] == 0.0 and c[8] == 1.5


def test_variants():
    d, e, s, w = (get_config(v) for v in ("default", "emu025", "small", "wide"))
    assert (d.MLEN, d.VLEN, d.BLEN, d.HLEN, d.BROADCAST_AMOUNT, d.P_M, d.P_V, d.P_W) == (64, 64, 4, 16, 4, 64, 4, 4)
    assert e.BMM_SCALE == 0.25 and d.BMM_SCALE == 1.0
    assert (s.MLEN, s.VLEN, s.BLEN, s.HLEN, s.BROADCAST_AMOUNT, s.P_M, s.P_V, s.P_W) == (32, 32, 4, 16, 2, 32, 4, 4)
    assert (w.MLEN, w.BLEN, w.BROADCAST_AMOUNT, w.P_M, w.P_V, w.FP_SRAM_SIZE) == (128, 8, 8, 128, 8, 4096)
    assert get_config("default", {"MAX_LOOP_INSTRUCTIONS": 100}).MAX_LOOP_INSTRUCTIONS == 100
    with pytest.raises(ValueError):
        get_config("nope")
    assert set(VARIANTS) == {"default", "emu025", "small", "analytic", "wide"}
    assert get_config("analytic").MLEN == 2048 and get_config("small", hw="small").MLEN == 32
    assert get_config("emu025", hw="v80-128x64").BMM_SCALE == 0.25
    with pytest.raises(ValueError, match="cannot run on --hw v80-64x16"):
        get_config("small", hw="v80-64x16")


def test_cbm_readback_mapping():
    class FakeVram:
        bits = None

    class FakeMachine:
        cfg = CFG
        vram = FakeVram()

    from testbenches.compare import bf16_encode

    rows, pitch, cols = 3, 4, 2 * V
    data = np.zeros((2 * pitch + 8, V), dtype=np.float32)
    for c in range(2):
        for r in range(rows):
            data[8 + c * pitch + r] = np.arange(V) + 1000 * r + 100 * c
    FakeMachine.vram.bits = bf16_encode(data)
    got = VramCbm(8 * V, rows, cols, pitch).read(FakeMachine())
    want = np.stack([np.concatenate([np.arange(V) + 1000 * r, np.arange(V) + 1000 * r + 100]) for r in range(rows)])
    from testbenches.compare import bf16_decode

    assert np.array_equal(got, bf16_decode(bf16_encode(want)))


def _linear_loop_case():
    from testbenches import get
    from testbenches.shapes import resolve_params

    mod = get("linear_loop")
    return mod.build(resolve_params(dict(mod.DEFAULTS), CFG), CFG)


def test_a_non_finite_companion_output_is_a_reported_mismatch_never_a_crash():
    case = _linear_loop_case()
    comp = case.companion
    comp.program, comp.compiled = "S_ADDI_INT gp1, gp0, 0\n", None  # writes nothing: its output is the NaN poison
    rep = run(case)
    assert not rep.passed and rep.error is None
    assert rep.check("output").passed  # the loop program itself is right
    bit = rep.check("bit_identical")
    assert not bit.passed and bit.n_fail == bit.n > 0 and bit.reason == "bitwise mismatch"
    assert bit.first["at"] == "(row=0, col=0)" and math.isnan(bit.first["golden"])
    assert "bit_identical" in rep.summary and "differ" in rep.summary


def test_a_companion_output_equal_in_its_non_finite_words_is_bit_identical():
    case = _linear_loop_case()
    case.program, case.compiled = "S_ADDI_INT gp1, gp0, 0\n", None  # both programs write nothing: NaN == NaN bits
    case.companion.program, case.companion.compiled = "S_ADDI_INT gp1, gp0, 0\n", None
    rep = run(case)
    assert not rep.passed and not rep.check("output").passed and rep.check("output").n_nonfinite > 0
    assert rep.check("bit_identical").passed


def test_a_golden_the_comparison_refuses_is_a_failed_check_not_an_exception():
    case = _copy_case()
    case.checks[0].golden = np.full(case.checks[0].golden.shape, np.nan)  # a broken testbench golden
    rep = run(case)
    out = rep.check("output")
    assert not rep.passed and not out.passed and "the golden refused" in out.reason and "finite" in out.reason
