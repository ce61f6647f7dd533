"""Poisoning (issue 21): every memory a kernel is not given as input holds what it must never read -- FP SRAM
words past the constants and the declared preloads are bf16 NaN, INT SRAM words past the preloads the sentinel,
MRAM tiles NaN, HBM slack rows finite random data (a kernel reading one element too many visibly changes the
result).  A kernel that reads what it did not write or load fails; one that omits initialising an FP SRAM state
slot (flash attention's m or l reset) fails."""

from __future__ import annotations

import re

import numpy as np

from plena_sim.numerics import bf16
from programs.asm import fp as F
from programs.asm import gp as G
from programs.asm import load_imm
from testbenches import get
from testbenches.harness import (
    BF16_NAN,
    INT_SENTINEL,
    CaseBuilder,
    FpWords,
    IntWords,
    VramRows,
    prepare_machine,
    run,
)
from testbenches.shapes import resolve_params
from testbenches.variants import get_config

CFG = get_config("default")
V = CFG.VLEN
STATE = 16  # the first FP SRAM state word (kernels.md §1.6)


def _sum_case(*, init_state: bool) -> object:
    """A running row sum kept in FP SRAM state word 16: ``[16] = 0; for r: [16] += sum(x[r])``; reads back [16]."""
    cb = CaseBuilder("selftest", {"seed": 3}, CFG, case_id="state-sum")
    x = cb.randn((4, V))
    for r in range(4):
        cb.vram_preload(r, x[r])
    cb.region("x", 0, 4, "input")
    a = cb.asm()
    if init_state:
        a.S_ST_FP(F(0), G(0), STATE)
    for r in range(4):
        a.S_LD_FP(F(1), G(0), STATE)
        load_imm(a, 1, r * V)
        a.V_RED_SUM(F(1), G(1), 0)
        a.S_ST_FP(F(1), G(0), STATE)
    golden = np.float64(0.0)
    xs = bf16.round_values(x.astype(np.float32)).astype(np.float64)
    for r in range(4):  # f32 row sums, rounded to bf16 at each store (the golden the kernel must meet)
        golden = float(bf16.round_values(np.float32(golden + xs[r].sum(dtype=np.float32)))[()])
    cb.check("state", FpWords(STATE, 1), np.array([golden]), ("word",), "softmax", A=np.array([np.abs(xs).sum()]))
    return cb.case(a)


def test_prepared_machine_poisons_every_memory_outside_the_inputs():
    cb = CaseBuilder("selftest", {"seed": 5}, CFG, case_id="poison-map")
    cb.tensor("x", cb.randn((3, V)), "act", alloc_rows=8)
    cb.fp_words(40, [1.5, 2.5])
    cb.int_words(7, [11, 12, 13])
    a = cb.asm()
    case = cb.case(a)
    m = prepare_machine(case)
    fps = np.asarray(m.fp_sram.bits)
    want_fp = np.full(fps.shape, BF16_NAN, dtype=fps.dtype)
    want_fp[:16] = bf16.encode(case.fp_consts)
    want_fp[40:42] = bf16.encode(np.array([1.5, 2.5], dtype=np.float32))
    assert np.array_equal(fps, want_fp)
    want_int = np.full(m.int_sram.shape, INT_SENTINEL, dtype=np.uint32)
    want_int[7:10] = [11, 12, 13]
    assert np.array_equal(m.int_sram, want_int)
    assert np.isnan(m.mram).all()


def test_hbm_slack_rows_hold_finite_random_data_and_the_inputs_do_not_depend_on_it():
    def placed(alloc_rows):
        cb = CaseBuilder("selftest", {"seed": 5}, CFG, case_id="slack")
        _t, vals = cb.tensor("x", cb.randn((3, V)), "act", alloc_rows=alloc_rows)
        return vals, cb.tensors["x"].values

    vals, seen = placed(8)
    vals_no_slack, _ = placed(None)
    assert np.array_equal(vals, vals_no_slack)  # the data is the same with and without slack
    slack = seen[3:8]
    assert np.isfinite(slack).all() and np.count_nonzero(slack) == slack.size
    assert np.abs(slack).max() > 0.5  # N(0, 1) data, not near-zero noise


def test_output_tensor_slack_stays_zero():
    cb = CaseBuilder("selftest", {"seed": 5}, CFG, case_id="out-slack")
    cb.output_tensor("out", 3, V, "act", alloc_rows=8)
    assert not np.asarray(cb.tensors["out"].values).any()


def test_a_kernel_that_initialises_its_fp_state_passes():
    rep = run(_sum_case(init_state=True))
    assert rep.passed, rep.summary


def test_a_kernel_that_omits_its_fp_state_init_fails():
    rep = run(_sum_case(init_state=False))
    chk = rep.check("state")
    assert not rep.passed and chk.n_nonfinite == 1 and chk.first_nonfinite == "(word=0)", rep.summary


def test_a_kernel_that_reads_an_unwritten_int_word_sees_the_sentinel():
    cb = CaseBuilder("selftest", {"seed": 1}, CFG, case_id="int-read")
    cb.region("out", 0, 1, "output")
    a = cb.asm()
    a.S_LD_INT(G(3), G(0), 100)  # never written: the sentinel, as an "index" it is far out of range
    a.S_ST_INT(G(3), G(0), 101)
    cb.check("copied", IntWords(101, 1), np.array([0], dtype=np.uint32), ("word",), "exact")
    rep = run(cb.case(a))
    assert not rep.passed and rep.check("copied").first["sim"] == INT_SENTINEL


def test_a_kernel_that_multiplies_by_an_unloaded_mram_tile_gets_nan():
    cb = CaseBuilder("selftest", {"seed": 1}, CFG, case_id="mram-read")
    x = cb.randn((4, V))
    for r in range(4):
        cb.vram_preload(r, x[r])
    cb.region("x", 0, 4, "input")
    ro = cb.rows(4, "out", "output")
    a = cb.asm()
    load_imm(a, 1, 0)
    a.M_MM(0, G(1), G(1))  # tile 0 was never prefetched
    load_imm(a, 2, ro * V)
    a.M_MM_WO(G(2), G(0), 0)
    cb.check("out", VramRows(ro * V, 4), np.zeros((4, V)), ("row", "lane"), "exact")
    rep = run(cb.case(a))
    assert not rep.passed and rep.check("out").n_nonfinite > 0, rep.summary


def _flash_without(pattern: str, n_expected: int):
    """flashattn_decode D1 (batch 2, 4 heads: 8 state resets of m and of l) with the reset lines matching
    ``pattern`` removed from its program."""
    mod = get("flashattn_decode")
    case = mod.build(resolve_params(dict(mod.DEFAULTS), CFG), CFG)
    lines = case.program.splitlines(keepends=True)
    kept = [ln for ln in lines if not re.match(pattern, ln)]
    assert len(lines) - len(kept) == n_expected
    case.program, case.compiled = "".join(kept), None
    return case


def test_flash_attention_without_its_l_reset_fails():
    # the l reset is the only S_ST_FP of f0 (the zero register) in the kernel: one per (block, head)
    rep = run(_flash_without(r"S_ST_FP f0, ", 8))
    assert not rep.passed
    assert rep.check("l").n_nonfinite == 4 and rep.check("output").n_nonfinite > 0, rep.summary


def test_flash_attention_without_its_m_reset_fails():
    mod = get("flashattn_decode")
    text = mod.build(resolve_params(dict(mod.DEFAULTS), CFG), CFG).program
    f_neg = re.search(r"S_LD_FP (f\d+), gp0, 0\n", text).group(1)  # f_neg = FP[0] = -inf (§3.6 prologue)
    rep = run(_flash_without(rf"S_ST_FP {f_neg}, ", 8))
    assert not rep.passed
    # the first block (batch 0) reads the NaN poison as its running max: all of its O is NaN; the last block
    # (batch 1) reads the first block's stale maxima instead, which its m check sees
    out = rep.check("output")
    assert out.n_nonfinite == 64 and out.first_nonfinite == "(batch=0, row=0, head=0, col=0)", rep.summary
    assert not rep.check("m").passed


def test_flash_slack_past_the_cache_is_random_not_zero():
    mod = get("flashattn_decode")
    case = mod.build(resolve_params(dict(mod.DEFAULTS), CFG), CFG)
    k = case.tensors["k"]
    cache_rows = 2 * 300  # batch 2, kv 300, bshd, kv_capacity = kv_len
    slack = np.asarray(k.values[cache_rows : k.rows])
    assert slack.size and np.isfinite(slack).all() and np.count_nonzero(slack) > slack.size // 2
