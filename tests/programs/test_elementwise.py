"""add_rows (kernels.md §2.10) and scale_rows generator structure."""

from __future__ import annotations

import pytest

from programs.elementwise import emit_add_rows, emit_scale_rows, plan_add_rows, plan_scale_rows  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")
V = CFG.VLEN


def make_add(cfg=CFG, gp=ku.GP, fp=ku.FP, nrows=8, inplace=False):
    plan = plan_add_rows(
        cfg, nrows=nrows, a_base=0, b_base=(nrows + 1) * V, out_base=0 if inplace else (2 * nrows + 2) * V
    )
    return ku.emit_text(emit_add_rows, plan, gp, fp)


@pytest.mark.parametrize("nrows", [1, 9, 36])
def test_add_rows(nrows):
    text = make_add(nrows=nrows)
    ku.check_assembles(text)
    ku.check_begin_end(text, "add_rows")
    ku.check_registers(make_add, nrows=nrows)
    ku.check_deterministic_and_hooks(make_add, {"add_dst_not_advancing": {}}, nrows=nrows)
    ku.check_assembles(make_add(nrows=nrows, inplace=True))


def test_add_rows_errors():
    with pytest.raises(ValueError, match="nrows=0"):
        plan_add_rows(CFG, nrows=0, a_base=0, b_base=64, out_base=128)
    with pytest.raises(ValueError, match="b_base=65"):
        plan_add_rows(CFG, nrows=1, a_base=0, b_base=65, out_base=128)
    with pytest.raises(ValueError, match="overlaps"):
        plan_add_rows(CFG, nrows=4, a_base=0, b_base=2 * V, out_base=40 * V)


def test_scale_rows():
    plan = plan_scale_rows(CFG, nrows=8, src_base=0, dst_base=0, slot=8)
    text = ku.emit_text(emit_scale_rows, plan)
    ku.check_assembles(text)
    ku.check_begin_end(text, "scale_rows")
    with pytest.raises(ValueError, match="slot=4096"):
        plan_scale_rows(CFG, nrows=8, src_base=0, dst_base=0, slot=4096)
