"""activation (silu, gelu) generator structure (kernels.md §2.5)."""

from __future__ import annotations

import pytest

from programs.activation import emit_activation, plan_activation  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")
V = CFG.VLEN


def make_act(cfg=CFG, gp=ku.GP, fp=ku.FP, kind="silu", nrows=8, inplace=False):
    src, t = 0, 100 * V
    dst = src if inplace else 50 * V
    plan = plan_activation(cfg, kind=kind, src_base=src, dst_base=dst, nrows=nrows, t_base=t)
    return ku.emit_text(emit_activation, plan, gp, fp)


@pytest.mark.parametrize("kind", ["silu", "gelu"])
@pytest.mark.parametrize("nrows", [1, 4, 36])
@pytest.mark.parametrize("inplace", [False, True])
def test_activation_assembles(kind, nrows, inplace):
    text = make_act(kind=kind, nrows=nrows, inplace=inplace)
    ku.check_assembles(text)
    ku.check_begin_end(text, "activation")


def test_activation_structure():
    ku.check_registers(make_act, kind="gelu")
    ku.check_deterministic_and_hooks(make_act, {"gelu_alpha_one": {}}, kind="gelu")
    assert "S_LD_FP" in make_act(kind="gelu") and ", 4" in make_act(kind="gelu")
    with pytest.raises(ValueError, match="kind='gelu_tanh'"):
        make_act(kind="gelu_tanh")
    with pytest.raises(ValueError, match="nrows=0"):
        make_act(nrows=0)
    with pytest.raises(ValueError, match="overlaps"):
        plan_activation(CFG, kind="silu", src_base=0, dst_base=0, nrows=8, t_base=3 * V)
    with pytest.raises(ValueError, match="t_base=3"):
        plan_activation(CFG, kind="silu", src_base=0, dst_base=0, nrows=8, t_base=3)
