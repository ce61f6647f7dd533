"""router_topk / topk generator structure (kernels.md §2.12)."""

from __future__ import annotations

import re

import pytest

from programs.common import rp  # noqa: E402
from programs.moe import emit_router_topk, emit_topk, plan_router_topk, plan_topk  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")


def make_topk(cfg=CFG, gp=ku.GP, fp=ku.FP, T=4, policy=0, router=False, fp_out=16, int_out=0, loops=True):
    V = cfg.VLEN
    pitch = rp(cfg, T)
    E = 32 if policy == 0 else 128
    Epad = -(-E // cfg.MLEN) * cfg.MLEN
    l0 = 100 * V
    st = (100 + (Epad // V) * pitch + 1) * V
    if router:
        plan = plan_router_topk(
            cfg,
            T=T,
            hidden=64,
            policy=policy,
            x_base=0,
            pitch=pitch,
            wr=ku.tensor(0, 64, Epad),
            logits_base=l0,
            fp_out=fp_out,
            int_out=int_out,
            stage_base=st,
            loops=loops,
        )
        return ku.emit_text(emit_router_topk, plan, gp, fp)
    plan = plan_topk(
        cfg, T=T, policy=policy, logits_base=l0, pitch=pitch, fp_out=fp_out, int_out=int_out, stage_base=st
    )
    return ku.emit_text(emit_topk, plan, gp, fp)


@pytest.mark.parametrize("policy", [0, 1])
@pytest.mark.parametrize("router", [False, True])
@pytest.mark.parametrize("T", [1, 5])
def test_topk_assembles(policy, router, T):
    text = make_topk(policy=policy, router=router, T=T)
    ku.check_assembles(text)
    ku.check_begin_end(text, "router_topk" if router else "topk")
    assert re.search(rf"^V_TOPK gp\d+, gp\d+, gp\d+, {policy}$", text, re.M)


def test_topk_structure():
    ku.check_registers(make_topk, policy=1, router=True)
    ku.check_deterministic_and_hooks(make_topk, {"topk_bases_swapped": {}}, policy=1)
    with pytest.raises(ValueError, match="fp_out=8"):
        make_topk(fp_out=8)
    with pytest.raises(ValueError, match="fp_out=1020"):
        make_topk(fp_out=1020)
    with pytest.raises(ValueError, match="int_out=1020"):
        make_topk(int_out=1020)
    with pytest.raises(ValueError, match="policy=2"):
        make_topk(policy=2)
    with pytest.raises(ValueError, match="stage_base=None"):
        plan_topk(CFG, T=4, policy=1, logits_base=0, pitch=4, fp_out=16, int_out=0)


@pytest.mark.parametrize("policy,T", [(0, 4), (1, 5), (1, 40)])
def test_router_loops_and_unrolled_do_the_same_operations(policy, T):
    looped = make_topk(T=T, policy=policy, router=True, loops=True)
    unrolled = make_topk(T=T, policy=policy, router=True, loops=False)
    assert ku.operation_log(looped, CFG) == ku.operation_log(unrolled, CFG)
