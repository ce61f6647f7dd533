"""ffn_swiglu / ffn_intermediate generator structure (kernels.md §2.4)."""

from __future__ import annotations

import pytest

from programs.common import rp  # noqa: E402
from programs.ffn import (  # noqa: E402
    emit_ffn_intermediate,
    emit_ffn_swiglu,
    ffn_workspace_rows,
    plan_ffn_intermediate,
    plan_ffn_swiglu,
)
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")


def make(
    cfg=CFG,
    gp=ku.GP,
    fp=ku.FP,
    rows=8,
    hidden=128,
    inter=256,
    max_k_tiles=None,
    alias=False,
    loops=False,
    intermediate=False,
    ws_base=None,
):
    V = cfg.VLEN
    pitch = rp(cfg, rows)
    nx = (hidden // V) * pitch + 1
    x0 = 0
    y0 = x0 if alias else nx * V
    ws = ws_base if ws_base is not None else (y0 // V + nx) * V
    wg, wu, wd = ku.tensor(0, hidden, inter), ku.tensor(1, hidden, inter), ku.tensor(2, inter, hidden)
    if intermediate:
        plan = plan_ffn_intermediate(
            cfg,
            rows=rows,
            hidden=hidden,
            inter=inter,
            x_base=x0,
            pitch=pitch,
            ws_base=ws,
            wg=wg,
            wu=wu,
            max_k_tiles=max_k_tiles,
            loops=loops,
        )
        return ku.emit_text(emit_ffn_intermediate, plan, gp, fp)
    plan = plan_ffn_swiglu(
        cfg,
        rows=rows,
        hidden=hidden,
        inter=inter,
        x_base=x0,
        pitch=pitch,
        y_base=y0,
        ws_base=ws,
        wg=wg,
        wu=wu,
        wd=wd,
        max_k_tiles=max_k_tiles,
        loops=loops,
    )
    return ku.emit_text(emit_ffn_swiglu, plan, gp, fp)


GRID = [
    dict(rows=1, hidden=64, inter=128),
    dict(rows=8, hidden=128, inter=256, max_k_tiles=2),
    dict(rows=33, hidden=64, inter=128, loops=True),
    dict(rows=8, hidden=256, inter=512, loops=True),
    dict(rows=8, hidden=128, inter=256, alias=True, max_k_tiles=2, loops=True),
]


@pytest.mark.parametrize("p,inter_only", [(p, io) for p in GRID for io in (False, True) if not (io and p.get("alias"))])
def test_assembles(p, inter_only):
    text = make(intermediate=inter_only, **p)
    ku.check_assembles(text)
    ku.check_begin_end(text, "ffn_intermediate" if inter_only else "ffn_swiglu")


def test_small_config():
    ku.check_assembles(make(get_config("small"), rows=5, hidden=64, inter=128, max_k_tiles=2))


def test_registers_only_from_lists():
    ku.check_registers(make, max_k_tiles=2, loops=True)
    ku.check_registers(make, intermediate=True)


def test_determinism_and_hooks():
    ku.check_deterministic_and_hooks(make, {"silu_on_up": {}, "ksplit_partial_dropped": {"max_k_tiles": 2}}, loops=True)
    ku.check_deterministic_and_hooks(make, {"silu_on_up": {}}, intermediate=True)


def test_silu_is_applied_to_the_gate():
    text = make(loops=True)
    # the activation runs over G (ws_base), which the gate projection wrote first
    assert "step 3 silu on the gate projection" in text


def test_workspace_rows():
    assert ffn_workspace_rows(CFG, rows=8, hidden=128, inter=256, pitch=8) == 2 * 4 * 8 + 1
    assert ffn_workspace_rows(CFG, rows=8, hidden=128, inter=256, pitch=8, max_k_tiles=2) == 2 * 4 * 8 + 1 + 8
    assert (
        ffn_workspace_rows(CFG, rows=8, hidden=128, inter=256, pitch=8, max_k_tiles=2, intermediate_only=True)
        == 2 * 4 * 8 + 1
    )


@pytest.mark.parametrize(
    "over,needle",
    [
        (dict(hidden=100), "hidden=100"),
        (dict(inter=96), "inter=96"),
        (dict(rows=0), "rows=0"),
        (dict(ws_base=0), "overlaps"),
        (dict(ws_base=65), "ws_base=65"),
    ],
)
def test_plan_errors_name_the_parameter(over, needle):
    with pytest.raises(ValueError, match=needle):
        make(**over)


@pytest.mark.parametrize(
    "p,inter_only",
    [
        (dict(rows=9, hidden=192, inter=256, max_k_tiles=2), False),
        (dict(rows=8, hidden=128, inter=256, alias=True, max_k_tiles=1), False),
        (dict(rows=20, hidden=192, inter=128, max_k_tiles=2), True),
    ],
)
def test_loops_and_unrolled_do_the_same_operations(p, inter_only):
    looped = make(loops=True, intermediate=inter_only, **p)
    unrolled = make(loops=False, intermediate=inter_only, **p)
    assert ku.operation_log(looped, CFG) == ku.operation_log(unrolled, CFG)


@pytest.mark.parametrize("loops", [True, False])
def test_runtime_w_offset_moves_every_projection(loops):
    """With ``w_runtime_offset_max``, gp[w_offset_reg] moves the Wg, Wu and Wd prefetches alike (stacked experts)."""
    from programs.asm import Asm
    from tests.util import scalar_trace

    hidden, inter, experts = 64, 128, 3
    stride = hidden * inter
    wg, wu = ku.tensor(0, experts * hidden, inter), ku.tensor(1, experts * hidden, inter)
    wd = ku.tensor(2, experts * inter, hidden)
    plan = plan_ffn_swiglu(
        CFG,
        rows=1,
        hidden=hidden,
        inter=inter,
        x_base=0,
        pitch=4,
        y_base=8 * 64,
        ws_base=16 * 64,
        wg=wg,
        wu=wu,
        wd=wd,
        loops=loops,
        w_runtime_offset_max=(experts - 1) * stride,
    )
    assert plan.hbm_slack == {"wg": experts * stride, "wu": experts * stride, "wd": experts * stride}
    a = Asm()
    emit_ffn_swiglu(a, plan, gp=ku.GP, fp=ku.FP, w_offset_reg=14)
    text = a.text()
    at0 = scalar_trace.trace("S_ADDI_INT gp14, gp0, 0\n" + text, CFG).prefetch_m
    at2 = scalar_trace.trace(f"S_ADDI_INT gp14, gp0, {2 * stride}\n" + text, CFG).prefetch_m
    assert {p[3] for p in at0} == {0, 1, 2}
    assert [(o + 2 * stride, *rest) for o, *rest in at0] == at2
    with pytest.raises(ValueError, match="w_offset_reg=None must be given iff"):
        emit_ffn_swiglu(Asm(), plan, gp=ku.GP, fp=ku.FP)
    with pytest.raises(ValueError, match=r"w.alloc_elems=24576 must be >= 32768"):
        plan_ffn_swiglu(
            CFG,
            rows=1,
            hidden=hidden,
            inter=inter,
            x_base=0,
            pitch=4,
            y_base=8 * 64,
            ws_base=16 * 64,
            wg=wg,
            wu=wu,
            wd=wd,
            w_runtime_offset_max=experts * stride,
        )
