"""The decoder-layer composition (programs/model): layout plan, stage placement, refusals, loop forms."""

from __future__ import annotations

import numpy as np
import pytest

import testbenches
from programs.model.decoder import STAGES, LayerShape, layer_hbm_needs
from programs.model.layout import BufferRequest, plan_vram
from testbenches.harness import prepare_machine, run_case
from testbenches.shapes import resolve_params
from testbenches.variants import get_config

CASES = [
    ("decoder_layer", "default", "transactional"),
    ("decoder_layer", "batch2_tail", "small"),
    ("decoder_layer", "kv_pad", "v80-128x64"),
    ("decoder_decode", "default", "transactional"),
    ("decoder_decode", "kv_pad", "v80-64x16"),
    ("decoder_layer", "moe_e32_k4", "transactional"),
    ("decoder_decode", "moe_e128_k8", "small"),
]


def _case(tb: str, cid: str, preset: str, **over):
    mod = testbenches.get(tb)
    cfg = get_config("default", hw=preset)
    params = dict(mod.DEFAULTS, **dict(next(c[1] for c in mod.REQUIRED_CASES if c[0] == cid)), **over)
    return mod.build(resolve_params(params, cfg), cfg)


def _regions(plan_obj) -> dict:
    regions = getattr(plan_obj, "vram_regions", None)
    return dict(regions) if regions else {}


@pytest.mark.parametrize("tb,cid,preset", CASES)
def test_no_two_live_buffers_share_a_row(tb, cid, preset):
    plan = _case(tb, cid, preset).plan
    assert plan.vram.conflicts() == []
    for a in plan.vram.buffers.values():  # the same check written out: live together -> disjoint rows
        for b in plan.vram.buffers.values():
            if a.name < b.name and a.first <= b.last and b.first <= a.last:
                assert a.end <= b.row0 or b.end <= a.row0, (a, b)


@pytest.mark.parametrize("tb,cid,preset", CASES)
def test_every_stage_touches_only_buffers_live_during_it(tb, cid, preset):
    plan = _case(tb, cid, preset).plan
    assert [s.name for s in plan.stages] == list(STAGES)
    for i, st in enumerate(plan.stages):
        live = [b for b in plan.vram.buffers.values() if b.first <= i <= b.last]
        for name, p in st.plans.items():
            for rname, (r0, n, _role) in _regions(p).items():
                inside = [b.name for b in live if b.row0 <= r0 and r0 + n <= b.end]
                assert inside, f"stage {st.name} plan {name} region {rname} rows [{r0}, {r0 + n}) in no live buffer"


def test_stage_outputs_kept_to_the_end_and_scratch_shared():
    plan = _case("decoder_layer", "default", "transactional").plan
    bufs = plan.vram.buffers
    last = len(STAGES) - 1
    for name in ("x", "xn1", "q", "k", "v", "qr", "kr", "o", "attn", "h1", "xn2", "d", "out"):
        assert bufs[name].last == last
    scratch = [b for k, b in bufs.items() if k.startswith("scratch:")]
    assert all(b.first == b.last for b in scratch)
    reused = [(sc.name, b.name) for sc in scratch for b in bufs.values() if b is not sc and sc.shares_rows(b)]
    assert reused, "a stage's scratch rows are reused once the stage is over"
    assert all(not bufs[a].live_with(bufs[b]) for a, b in reused)
    assert plan.data_path["qr"].startswith("HBM") and plan.data_path["o"].startswith("VRAM")


def test_plan_vram_first_fit_reuses_dead_rows_and_reports_conflicts():
    lay = plan_vram(
        [BufferRequest("a", 10, 0, 1), BufferRequest("b", 5, 1, 2), BufferRequest("c", 8, 2, 3)], V=64, start_row=4
    )
    assert (lay.row0("a"), lay.row0("b"), lay.row0("c")) == (4, 15, 4)  # c reuses a's rows (a is dead at 2)
    assert lay.base("b") == 15 * 64 and lay.rows_used == 20 and lay.conflicts() == []
    bad = plan_vram([BufferRequest("a", 10, 0, 3), BufferRequest("b", 5, 1, 2)], V=64)
    object.__setattr__(bad.buffers["b"], "row0", 3)
    assert bad.conflicts() == [("a", "b")]
    with pytest.raises(ValueError, match="rows=0"):
        BufferRequest("z", 0, 0, 0)
    with pytest.raises(ValueError, match="repeat"):
        plan_vram([BufferRequest("a", 1, 0, 0), BufferRequest("a", 1, 1, 1)], V=64)


@pytest.mark.parametrize(
    "tb,over,preset,fragment",
    [
        ("decoder_layer", {"hidden": 96}, "transactional", "hidden=96 must be a multiple of MLEN=64"),
        ("decoder_layer", {"heads": 6, "kv_heads": 4}, "transactional", "heads=6 must be a multiple of kv_heads=4"),
        ("decoder_layer", {"ffn": 100}, "transactional", "ffn=100 must be a multiple of MLEN=64"),
        ("decoder_decode", {"heads": 3, "head_dim": 48}, "transactional", "heads*head_dim=144 must be a multiple"),
        (
            "decoder_layer",
            {"experts": 16, "top_k": 2},
            "transactional",
            "experts/top_k=16/2 must be a V_TOPK policy: (experts, top_k) one of [(32, 4), (128, 8)]",
        ),
        ("decoder_decode", {"experts": 32, "top_k": 0}, "transactional", "experts/top_k=32/0 must be a V_TOPK"),
        ("decoder_decode", {"experts": 128, "top_k": 8, "ffn": 96}, "transactional", "ffn=96 must be a multiple"),
        (
            "decoder_layer",
            {"heads": 4, "kv_heads": 1, "head_dim": 48, "hidden": 192},
            "transactional",
            "head_dim=48 must divide VLEN=64",
        ),
    ],
)
def test_shapes_that_cannot_fit_are_refused_naming_the_parameter(tb, over, preset, fragment):
    rep = run_case(tb, "too_big", over, hw=preset)
    assert not rep.passed and rep.error and rep.error.startswith("plan: "), rep.summary
    assert fragment in rep.error, rep.error


def test_decode_shape_and_hbm_needs():
    cfg = get_config("default")
    s = LayerShape(2, 1, 70, 128, 4, 2, 32, 256, decode=True, kv_capacity=71)
    assert s.new_kv_row == 138 and s.kv_layout == "sbhd" and s.kv_rows_written(cfg) == 4
    needs = layer_hbm_needs(cfg, s)
    assert needs["k_cache"][1] == 64 and needs["k_cache"][0] >= 138 + 4
    assert needs["wk"] == (128, 64) and needs["wo"] == (128, 128) and needs["rot"] == (64, 64)


def test_moe_shape_hbm_needs_stage_and_sram_ranges():
    cfg = get_config("default")
    s = LayerShape(1, 1, 70, 128, 4, 2, 32, 64, decode=True, kv_capacity=71, experts=128, top_k=8)
    assert s.moe and s.policy == 1
    needs = layer_hbm_needs(cfg, s)
    assert (
        needs["wr"] == (128, 128) and needs["wg"] == needs["wu"] == (128 * 128, 64) and needs["wd"] == (128 * 64, 128)
    )
    dense = layer_hbm_needs(cfg, LayerShape(1, 1, 70, 128, 4, 2, 32, 64, decode=True, kv_capacity=71))
    assert "wr" not in dense and dense["wg"] == (128, 64) and dense["wd"] == (64, 128)
    plan = _case("decoder_decode", "moe_e128_k8", "transactional").plan
    ffn = plan.stage("ffn")
    assert dict(ffn.bind) == {0: "wr", 1: "wg", 2: "wu", 3: "wd"} and set(ffn.plans) == {"moe"}
    moe = ffn.plans["moe"]
    assert (moe.E, moe.k, moe.T, moe.chunk) == (128, 8, 1, 1)
    assert plan.fp_sram == {"attention": plan.fp_state, "ffn": (16, 8)} and plan.int_sram == {"ffn": (0, 9)}
    assert plan.fp_state[0] == 16  # the two FP ranges overlap: the stages run one after another
    assert plan.data_path["routing"].startswith("FP SRAM [16, +8) weights (reusing flash attention's state range)")
    logits = plan.vram.buffers["scratch:ffn"]  # the router logits stay to be judged
    assert logits.last == len(STAGES) - 1 and moe.router.y_base == logits.row0 * cfg.VLEN


def test_moe_stack_costs_the_host_only_the_live_experts():
    """128 experts, 16 live: the case's HBM segments hold 16 experts of each stacked tensor (a real model's
    expert stack never exists on the host)."""
    case = _case("decoder_decode", "moe_e128_k8", "transactional")
    live = case.inputs["experts"]
    assert live.size == 16 and live[0] == 0 and live[-1] == 127 and np.all(np.diff(live) > 0)
    for name in ("wg", "wu", "wd"):
        p = case.tensors[name]
        inside = sum(d.size for a, d in case.hbm_segments if p.base <= a < p.end)
        assert inside == 16 * (128 * 64) * 9 // 8  # MXFP8 elements + one scale byte per 8
        assert case.inputs[name].shape[0] == 16
    wr = case.inputs["wr"]
    assert wr.shape == (128, 128) and np.count_nonzero(wr) == 16
    assert set(np.flatnonzero(np.any(wr != 0, axis=0))) == set(live.tolist())
    pairs = np.any(wr != 0, axis=1)
    assert np.count_nonzero(pairs) == 8  # one xn2 row per pair, +c and -c
    for row in np.flatnonzero(pairs):
        vals = wr[row][wr[row] != 0]
        assert vals.size == 2 and vals[0] == -vals[1] and abs(vals[0]) in (0.5, 1.0, 2.0)


@pytest.mark.parametrize(
    "tb,cid",
    [
        ("decoder_layer", "default"),
        ("decoder_decode", "default"),
        ("decoder_decode", "moe_e128_k8"),
        ("decoder_layer", "moe_e32_k4"),
    ],
)
def test_looped_and_unrolled_programs_give_bit_identical_outputs(tb, cid):
    outs = []
    for loops in (True, False):
        case = _case(tb, cid, "transactional", loops=loops)
        rep = testbenches.harness.run(case)
        assert rep.passed, rep.summary
        m = prepare_machine(case)
        m.run(case.assembled())
        out = case.plan.vram.buffers["out"]
        outs.append((np.asarray(m.vram.bits[out.row0 : out.end]).copy(), rep.instructions, len(case.assembled())))
    (a, dyn_l, st_l), (b, dyn_u, st_u) = outs
    assert np.array_equal(a, b)
    assert st_l < st_u, "the looped form is the shorter program"
