"""softmax_rows generator structure (kernels.md §2.7)."""

from __future__ import annotations

import pytest

from programs.common import rp  # noqa: E402
from programs.softmax import emit_softmax, plan_softmax  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")


def make_softmax(cfg=CFG, gp=ku.GP, fp=ku.FP, rows=8, L=128, scale_slot=None, inplace=False):
    V = cfg.VLEN
    pitch = rp(cfg, rows)
    nb = -(-L // V)
    x0 = 0
    y0 = x0 if inplace else (nb * pitch + 1) * V
    s0 = (2 * nb * pitch + 4) * V
    plan = plan_softmax(
        cfg,
        rows=rows,
        L=L,
        x_base=x0,
        pitch=pitch,
        y_base=y0,
        scratch_base=s0 if L % V else None,
        scale_slot=scale_slot,
    )
    return ku.emit_text(emit_softmax, plan, gp, fp)


@pytest.mark.parametrize("L", [1, 64, 100, 1024])
@pytest.mark.parametrize("scale_slot", [None, 8])
@pytest.mark.parametrize("inplace", [False, True])
def test_softmax_assembles(L, scale_slot, inplace):
    text = make_softmax(L=L, scale_slot=scale_slot, inplace=inplace)
    ku.check_assembles(text)
    ku.check_begin_end(text, "softmax_rows")


def test_softmax_structure():
    ku.check_registers(make_softmax, L=100, scale_slot=8)
    ku.check_deterministic_and_hooks(make_softmax, {"softmax_tail_mask_missing": {}}, L=100)
    assert "V_SHFT_V" not in make_softmax(L=128)  # no mask rows when L % V == 0
    with pytest.raises(ValueError, match="scratch_base=None"):
        plan_softmax(CFG, rows=8, L=100, x_base=0, pitch=8, y_base=64 * 64)
    with pytest.raises(ValueError, match="L=0"):
        plan_softmax(CFG, rows=8, L=0, x_base=0, pitch=8, y_base=64 * 64)
    with pytest.raises(ValueError, match="pitch=4"):
        plan_softmax(CFG, rows=8, L=64, x_base=0, pitch=4, y_base=64 * 64)
