"""linear / batched_matmul generator structure (kernels.md §2.2, §2.3, §1, §6.4)."""

from __future__ import annotations

import pytest

from programs.common import rp, vector_rows  # noqa: E402
from programs.linear import emit_batched_matmul, emit_linear, plan_batched_matmul, plan_linear  # noqa: E402
from testbenches import linear as tb_linear  # noqa: E402
from testbenches.shapes import resolve_params  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")


def make(
    cfg=CFG, gp=ku.GP, fp=ku.FP, rows=8, K=128, N=256, bias=False, max_k_tiles=None, loops=False, big_base=False, **_
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


def test_loops_and_unrolled_do_the_same_matmuls():
    import re

    a, b = make(loops=False, max_k_tiles=1, bias=True), make(loops=True, max_k_tiles=1, bias=True)

    def count(t, op):
        return len(re.findall(rf"^{op} ", t, re.M))

    assert count(a, "H_PREFETCH_M") == count(b, "H_PREFETCH_M")
    assert count(b, "C_LOOP_START") > 0 and count(a, "C_LOOP_START") == 0


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
    tiny = CFG.with_overrides({"MAX_LOOP_INSTRUCTIONS": 50})
    with pytest.raises(ValueError, match="MAX_LOOP_INSTRUCTIONS=50"):
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
