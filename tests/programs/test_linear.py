"""linear / batched_matmul generator structure (kernels.md §2.2, §2.3, §1, §6.4)."""

from __future__ import annotations

import re

import pytest

from programs.asm import Asm
from programs.common import rp, vector_rows  # noqa: E402
from programs.linear import emit_batched_matmul, emit_linear, plan_batched_matmul, plan_linear  # noqa: E402
from testbenches import linear as tb_linear  # noqa: E402
from testbenches.shapes import resolve_params  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")


def make(
    cfg=CFG, gp=ku.GP, fp=ku.FP, rows=8, K=128, N=256, bias=False, max_k_tiles=None, loops=True, big_base=False, **_
):
    V, M = cfg.VLEN, cfg.MLEN
    pitch = rp(cfg, rows)
    base = 4100 * V if big_base else 0
    w = ku.tensor(0, K, N)
    b = ku.tensor(1, 1, N, alloc_rows=vector_rows(cfg, N) * V // N + 1) if bias else None
    x0 = base
    y0 = x0 + ((K // V) * pitch + 1) * V
    b0 = y0 + ((N // V) * pitch + 1) * V
    s0 = b0 + (vector_rows(cfg, N) + 1) * V
    split = s0 if (max_k_tiles is not None and max_k_tiles < K // M) else None
    plan = plan_linear(
        cfg,
        rows=rows,
        K=K,
        N=N,
        x_base=x0,
        x_pitch=pitch,
        y_base=y0,
        y_pitch=pitch,
        w=w,
        bias=b,
        bias_base=b0 if bias else None,
        max_k_tiles=max_k_tiles,
        split_base=split,
        loops=loops,
    )
    return ku.emit_text(emit_linear, plan, gp, fp)


def _grid():
    from tests.testbench.catalogue_util import range_points

    r = dict(tb_linear.RANGES)
    r["loops"] = [False, True]
    r["rows"] = [1, 5, 8]  # rows 64/130 are covered end to end; keep the unrolled text small
    return range_points(r, cap=12, seed=3)


@pytest.mark.parametrize("ov,var", _grid())
def test_assembles_over_ranges(ov, var):
    cfg = get_config(var)
    text = make(cfg, **resolve_params(ov, cfg))  # RANGES shapes are in machine units
    ku.check_assembles(text)
    ku.check_begin_end(text, "linear")


def test_registers_only_from_lists():
    ku.check_registers(make, bias=True, max_k_tiles=1, loops=True)
    ku.check_registers(make, bias=True, max_k_tiles=1, loops=False)


def test_determinism_and_hooks():
    hooks = {"linear_col_step_element": {}, "ksplit_partial_dropped": {"max_k_tiles": 1}, "weight_tile_row_ignored": {}}
    ku.check_deterministic_and_hooks(make, hooks, bias=True)
    ku.check_deterministic_and_hooks(make, hooks, loops=True)


LOOP_FORMS = [
    # (preset or config overrides, shape): chunks loop, first/middle/last chunk, K-tile loop, tall, budget-forced
    ("transactional", dict(rows=8, K=128, N=256, max_k_tiles=1, bias=True)),
    ("transactional", dict(rows=5, K=320, N=128, max_k_tiles=2, bias=True)),
    ("transactional", dict(rows=130, K=256, N=128, bias=True, big_base=True)),
    ("transactional", dict(rows=8, K=1152, N=128)),
    ("transactional", dict(rows=9, K=1152, N=192, max_k_tiles=17, bias=True)),
    ({"MAX_LOOP_INSTRUCTIONS": 60}, dict(rows=64, K=128, N=256, max_k_tiles=1, bias=True)),
    ("small", dict(rows=5, K=128, N=64, max_k_tiles=1, bias=True)),
    ("v80-128x64", dict(rows=70, K=384, N=256, max_k_tiles=2, bias=True)),
    ("analytic", dict(rows=1, K=6144, N=4096, max_k_tiles=2, bias=True)),
]


def _form_cfg(machine):
    if isinstance(machine, dict):
        return CFG.with_overrides(machine)
    return get_config("default", hw=machine)


@pytest.mark.parametrize("machine,shape", LOOP_FORMS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(LOOP_FORMS)])
def test_loops_and_unrolled_do_the_same_operations(machine, shape):
    """The looped form issues exactly the unrolled form's compute and memory operations, on the same
    addresses, in the same order (only pointer arithmetic and loop control differ), within the budget."""
    from tests.util import scalar_trace

    cfg = _form_cfg(machine)
    looped, unrolled = make(cfg, loops=True, **shape), make(cfg, loops=False, **shape)
    assert "C_LOOP_START" in looped and "C_LOOP_START" not in unrolled.split("W SCALE/STRIDE")[1]
    assert ku.operation_log(looped, cfg) == ku.operation_log(unrolled, cfg)
    assert scalar_trace.trace(looped, cfg).max_loop_iteration < cfg.MAX_LOOP_INSTRUCTIONS


@pytest.mark.parametrize("machine", ["transactional", "v80-128x64"])
def test_batched_matmul_loops_and_unrolled_do_the_same_operations(machine):
    cfg = get_config("default", hw=machine)
    M, B = cfg.MLEN, cfg.BLEN
    w = ku.tensor(0, 3 * 3 * M, 2 * M)
    texts = []
    for loops in (True, False):
        plan = plan_batched_matmul(
            cfg,
            nb=3,
            Mr=2 * B - 1,
            K=3 * M,
            N=2 * M,
            a_base=0,
            y_base=3000 * cfg.VLEN,
            w=w,
            loops=loops,
            max_k_tiles=2,
            split_base=6000 * cfg.VLEN,
        )
        texts.append(ku.emit_text(emit_batched_matmul, plan))
    assert "C_LOOP_START" in texts[0]
    assert ku.operation_log(texts[0], cfg) == ku.operation_log(texts[1], cfg)


def test_looped_program_size_does_not_grow_with_the_shape():
    # the same structure (first, middle and last K chunk of 3/3/1 tiles) at 3x the rows, 8x the columns:
    # only constants past 2^18 (S_LUI_INT + S_ADDI_INT) add instructions
    def size(text):
        return sum(1 for line in text.splitlines() if not line.startswith(";"))

    small = size(make(rows=40, K=448, N=128, max_k_tiles=3))
    large = size(make(rows=128, K=1024, N=1024, max_k_tiles=3))
    assert small < large <= small + 12, (small, large)


BAD = [
    (dict(K=100), "K=100"),
    (dict(N=96), "N=96"),
    (dict(rows=0), "rows=0"),
    (dict(x_pitch=6), "x_pitch=6"),
    (dict(rows=9, x_pitch=8), "x_pitch=8"),
    (dict(y_pitch=5), "y_pitch=5"),
    (dict(x_base=65), "x_base=65"),
    (dict(mram_tile0=64), "mram_tile0=64"),
    (dict(max_k_tiles=0), "max_k_tiles=0"),
    (dict(mram_tile0=60, max_k_tiles=8), "max_k_tiles=8"),
    (dict(max_k_tiles=1), "split_base=None"),
    (dict(y_base=0), "overlaps"),
    (dict(bias=True), "bias_base=None"),
    (dict(loops=1), "loops=1"),
]


@pytest.mark.parametrize("over,needle", BAD)
def test_plan_errors_name_the_parameter(over, needle):
    kw = dict(rows=8, K=128, N=256, x_base=0, x_pitch=8, y_base=20 * 64, y_pitch=8, w=ku.tensor(0, 128, 256))
    if over.pop("bias", False):
        kw["bias"] = ku.tensor(1, 4, 64)
    kw.update(over)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        plan_linear(CFG, **kw)


def test_config_constraints():
    small_pm = CFG.with_overrides({"HBM_M_Prefetch_Amount": 128})
    with pytest.raises(ValueError, match="HBM_M_Prefetch_Amount"):
        plan_linear(
            small_pm, rows=8, K=128, N=128, x_base=0, x_pitch=8, y_base=20 * 64, y_pitch=8, w=ku.tensor(0, 128, 128)
        )


def test_loop_budget_is_checked():
    # a budget an outer iteration exceeds unrolls that level (LOOP_FORMS checks the result); one below a
    # single row-block iteration cannot be met
    tiny = CFG.with_overrides({"MAX_LOOP_INSTRUCTIONS": 5})
    with pytest.raises(ValueError, match="MAX_LOOP_INSTRUCTIONS=5"):
        make(tiny, loops=True, rows=64)


def test_w_slack_and_offsets():
    with pytest.raises(ValueError, match="w.alloc_elems"):
        plan_linear(CFG, rows=8, K=128, N=128, x_base=0, x_pitch=8, y_base=20 * 64, y_pitch=8, w=ku.tensor(0, 64, 128))


def test_batched_matmul_structure():
    w = ku.tensor(0, 3 * 128, 64)
    plan = plan_batched_matmul(CFG, nb=3, Mr=7, K=128, N=64, a_base=0, y_base=100 * 64, w=w)
    assert len(plan.parts) == 3 and plan.parts[2].w_offset == 2 * 128 * 64
    assert plan.parts[1].x_base == 8 * 64 and plan.parts[1].x_pitch == 24
    text = ku.emit_text(emit_batched_matmul, plan)
    ku.check_assembles(text)
    ku.check_begin_end(text, "batched_matmul")
    with pytest.raises(ValueError, match="nb=0"):
        plan_batched_matmul(CFG, nb=0, Mr=7, K=128, N=64, a_base=0, y_base=100 * 64, w=w)
    with pytest.raises(ValueError, match="w.alloc_elems"):
        plan_batched_matmul(CFG, nb=4, Mr=7, K=128, N=64, a_base=0, y_base=100 * 64, w=w)


# --------------------------------------------------------------------------- run-time W offset (moe experts)

OFF_REG = 13  # outside ku.GP (1..12)


def make_offset(
    cfg=CFG, *, loops, offset_max, reg=OFF_REG, gp=ku.GP, rows=5, K=128, N=128, max_k_tiles=1, w_rows=None, word=None
):
    """A linear whose W prefetches add gp[reg] (or INT[word]); W holds ``w_rows`` rows (K + offset_max/N by
    default)."""
    V = cfg.VLEN
    pitch = rp(cfg, rows)
    w = ku.tensor(0, w_rows or K + offset_max // N, N)
    y0 = ((K // V) * pitch + 1) * V
    plan = plan_linear(
        cfg,
        rows=rows,
        K=K,
        N=N,
        x_base=0,
        x_pitch=pitch,
        y_base=y0,
        y_pitch=pitch,
        w=w,
        max_k_tiles=max_k_tiles,
        split_base=y0 + ((N // V) * pitch + 1) * V,
        loops=loops,
        w_runtime_offset_max=offset_max,
    )
    a = Asm()
    emit_linear(a, plan, gp=gp, w_offset_reg=None if word is not None else reg, w_offset_int=word)
    return a.text()


@pytest.mark.parametrize("loops", [True, False])
def test_runtime_w_offset_is_added_to_every_prefetch(loops):
    """gp[reg] = off moves every W prefetch by exactly off bytes (the MX scale address follows from it)."""
    from tests.util import scalar_trace

    most = 5 * 128 * 128
    text = make_offset(loops=loops, offset_max=most)
    base = [p for p in scalar_trace.trace(f"S_ADDI_INT gp{OFF_REG}, gp0, 0\n" + text, CFG).prefetch_m]
    moved = scalar_trace.trace(f"S_ADDI_INT gp{OFF_REG}, gp0, {most}\n" + text, CFG).prefetch_m
    assert len(base) == 2 * 2 and [(o + most, *rest) for o, *rest in base] == moved
    assert not re.search(rf"^\S+ gp{OFF_REG},", text, re.M), "the offset register is never written"


@pytest.mark.parametrize("shape", [dict(rows=5, K=128, N=128, max_k_tiles=1), dict(rows=9, K=192, N=256)])
def test_runtime_w_offset_loops_and_unrolled_do_the_same_operations(shape):
    pre = f"S_ADDI_INT gp{OFF_REG}, gp0, {3 * 192 * 256}\n"
    looped = pre + make_offset(loops=True, offset_max=3 * 192 * 256, **shape)
    unrolled = pre + make_offset(loops=False, offset_max=3 * 192 * 256, **shape)
    assert ku.operation_log(looped, CFG) == ku.operation_log(unrolled, CFG)


@pytest.mark.parametrize("loops", [True, False])
def test_runtime_w_offset_from_an_int_sram_word(loops):
    """w_offset_int: the word is loaded once per output column tile (``S_LD_INT r, r, 0``, r = its address) and
    moves every W prefetch of that tile by exactly its value; the word is never written."""
    from tests.util import scalar_trace

    most, word = 5 * 128 * 128, 700
    text = make_offset(loops=loops, offset_max=most, word=word)
    base = scalar_trace.trace(text, CFG, int_sram={}).prefetch_m
    moved = scalar_trace.trace(text, CFG, int_sram={word: most}).prefetch_m
    assert len(base) == 2 * 2 and [(o + most, *rest) for o, *rest in base] == moved
    loads = [v for mn, v in ku.operation_log(text, CFG, int_sram={word: most}) if mn == "S_LD_INT"]
    assert loads == [(word, word, "0")] * 2  # N/M = 2 column tiles
    assert "S_ST_INT" not in text and f"gp{OFF_REG}" not in text


@pytest.mark.parametrize("shape", [dict(rows=5, K=128, N=128, max_k_tiles=1), dict(rows=9, K=192, N=256)])
def test_runtime_w_offset_word_loops_and_unrolled_do_the_same_operations(shape):
    kw = dict(offset_max=3 * 192 * 256, word=9, **shape)
    ints = {9: 2 * 192 * 256}
    looped, unrolled = make_offset(loops=True, **kw), make_offset(loops=False, **kw)
    assert ku.operation_log(looped, CFG, int_sram=dict(ints)) == ku.operation_log(unrolled, CFG, int_sram=dict(ints))


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(offset_max=0, word=1024), r"w_offset_int=1024 must be <= 1023"),
        (dict(offset_max=None, word=5), r"w_offset_int=5 must be given iff .*w_runtime_offset_max=None"),
    ],
)
def test_runtime_w_offset_word_errors(kw, needle):
    with pytest.raises(ValueError, match=needle):
        make_offset(loops=True, w_rows=128 + 8, **kw)


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(offset_max=100), "w_runtime_offset_max=100 must be a multiple of the MX block bytes 8"),
        (dict(offset_max=128 * 128, w_rows=128), r"w.alloc_elems=16384 must be >= 32768"),
        (dict(offset_max=1 << 32, w_rows=128 + (1 << 25)), r"W byte offset=\d+ must be a 32-bit address"),
        (dict(offset_max=0, reg=3), r"w_offset_reg=3 must not be one of the kernel's registers"),
        (dict(offset_max=0, reg=0), r"w_offset_reg=0 must be a register in 1..15"),
        (dict(offset_max=0, reg=None), r"w_offset_reg=None must be given iff the plan has a run-time W offset"),
    ],
)
def test_runtime_w_offset_errors_name_the_parameter(kw, needle):
    kw.setdefault("w_rows", 128 + 8)
    with pytest.raises(ValueError, match=needle):
        make_offset(loops=True, **kw)


def test_offset_register_without_a_runtime_offset_is_refused():
    with pytest.raises(ValueError, match=r"w_offset_reg=13 must be given iff .*w_runtime_offset_max=None"):
        plan = plan_linear(
            CFG, rows=4, K=64, N=64, x_base=0, x_pitch=4, y_base=8 * 64, y_pitch=4, w=ku.tensor(0, 64, 64)
        )
        emit_linear(Asm(), plan, gp=ku.GP, w_offset_reg=OFF_REG)
