"""router_topk / topk generator structure (kernels.md §2.12)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from programs.common import rp  # noqa: E402
from programs.moe import (  # noqa: E402
    POLICIES,
    emit_moe_layer,
    emit_router_topk,
    emit_topk,
    moe_workspace_rows,
    plan_moe_layer,
    plan_router_topk,
    plan_topk,
)
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


# --------------------------------------------------------------------------- moe_layer

STRIDE = 64 * 128  # one expert of the default layer: hidden*inter bytes (MXFP8)


def moe_plan(
    cfg=CFG,
    T=4,
    policy=0,
    hidden=64,
    inter=128,
    loops=True,
    max_k_tiles=None,
    experts=None,
    wd_eb=1,
    pitch=None,
    ws_base=None,
    fp_out=16,
    int_out=0,
    chunk=None,
):
    V, M = cfg.VLEN, cfg.MLEN
    E = POLICIES.get(policy, (32, 4))[0]  # an unknown policy must reach the plan
    pitch = rp(cfg, max(T, 1)) if pitch is None else pitch
    n = E if experts is None else experts
    o0 = ((hidden // V) * pitch + 1) * V
    ws = o0 + ((hidden // V) * pitch + 1) * V if ws_base is None else ws_base
    return plan_moe_layer(
        cfg,
        T=T,
        hidden=hidden,
        inter=inter,
        policy=policy,
        x_base=0,
        pitch=pitch,
        out_base=o0,
        ws_base=ws,
        wr=ku.tensor(0, hidden, -(-E // M) * M),
        wg=ku.tensor(1, n * hidden, inter),
        wu=ku.tensor(2, n * hidden, inter),
        wd=ku.tensor(3, n * inter, hidden, eb=wd_eb),
        fp_out=fp_out,
        int_out=int_out,
        max_k_tiles=max_k_tiles,
        loops=loops,
        chunk=chunk,
    )


def make_layer(cfg=CFG, gp=ku.GP, fp=ku.FP, **p):
    return ku.emit_text(emit_moe_layer, moe_plan(cfg, **p), gp, fp)


def expert_indices(T, policy, seed=1):
    """A plausible INT SRAM after V_TOPK: per token k distinct experts (scalar_trace reads it for S_LD_INT)."""
    E, k = POLICIES[policy]
    rng = np.random.default_rng(seed)
    idx = np.stack([rng.permutation(E)[:k] for _ in range(T)])
    return idx, {i: int(v) for i, v in enumerate(idx.ravel())}


def pass_order(T, k, chunk):
    """The (token, rank) order of the expert passes: chunk by chunk, rank-major within a chunk."""
    return [(t0 + t, r) for t0 in range(0, T, chunk) for r in range(k) for t in range(min(chunk, T - t0))]


@pytest.mark.parametrize("policy,T,loops", [(0, 1, True), (0, 4, False), (1, 3, True), (1, 2, False)])
def test_moe_layer_assembles_with_its_stage_regions(policy, T, loops):
    text = make_layer(policy=policy, T=T, loops=loops)
    ku.check_assembles(text)
    ku.check_begin_end(text, "moe_layer")
    marks, depth = [], 0  # the outermost regions (the stages; the generators' phase regions nest inside them)
    for line in text.splitlines():
        if line.startswith("; @region "):
            if depth == 0:
                marks.append(line[len("; @region ") :])
            depth += 1
        elif line == "; @endregion":
            depth -= 1
    k = POLICIES[policy][1]
    passes = 1 if loops else T  # per rank: one token loop, or every token unrolled
    assert marks == ["moe/router", "moe/topk"] + ["moe/expert_ffn", "moe/combine"] * (k * passes)
    assert depth == 0 and text.count("; @endregion") == text.count("; @region ")
    if loops and T > 1:
        assert text.count(f"C_LOOP_START gp12, {T}") == k  # one token loop per rank (the last register)


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("policy,T,chunk", [(0, 4, None), (1, 3, None), (0, 5, 2)])
def test_every_index_is_loaded_once_in_pass_order_and_becomes_the_offset_word(policy, T, chunk, loops):
    """The executed S_LD_INT of INT SRAM index slots: one per (token, rank), rank-major per chunk, each
    followed by the S_ST_INT of index*stride into the offset word, which every FFN projection then reads."""
    k = POLICIES[policy][1]
    plan = moe_plan(T=T, policy=policy, chunk=chunk, loops=loops)
    C = plan.chunk
    idx, _ = expert_indices(T, policy)
    ints = {}  # the chunk's indices at int_out + t*k + r (the last chunk stays; earlier ones do not matter here)
    log = ku.operation_log(ku.emit_text(emit_moe_layer, plan), CFG, int_sram=ints)
    loads = [vals[1] for mn, vals in log if mn == "S_LD_INT" and vals[1] < plan.offset_int]
    stores = [vals for mn, vals in log if mn == "S_ST_INT"]
    assert loads == [(t % C) * k + r for t, r in pass_order(T, k, C)]
    assert all(v[1] == plan.offset_int and v[2] == "0" for v in stores) and len(stores) == len(loads)
    offset_reads = [vals for mn, vals in log if mn == "S_LD_INT" and vals[1] == plan.offset_int]
    n_tiles = 2 * (128 // 64) + 64 // 64  # Wg, Wu: inter/M column tiles; Wd: hidden/M
    assert len(offset_reads) == len(loads) * n_tiles
    assert idx.shape == (T, k)


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("policy", [0, 1])
def test_expert_weights_are_addressed_from_the_index_in_int_sram(policy, loops):
    """Every Wg / Wu / Wd prefetch of (token t, rank r) sits exactly idx[t, r] expert strides past expert 0's
    (the register value, traced); the router's Wr prefetches do not move."""
    from tests.util import scalar_trace

    T = 3
    idx, ints = expert_indices(T, policy)
    k = idx.shape[1]
    text = make_layer(T=T, policy=policy, loops=loops)
    at0 = scalar_trace.trace(text, CFG, int_sram={}).prefetch_m
    moved = scalar_trace.trace(text, CFG, int_sram=dict(ints)).prefetch_m
    router = [p for p in at0 if p[3] == 0]
    assert router == [p for p in moved if p[3] == 0]
    ffn0, ffn = [p for p in at0 if p[3] != 0], [p for p in moved if p[3] != 0]
    per_expert = len(ffn0) // idx.size
    assert per_expert and len(ffn0) == len(ffn) == per_expert * idx.size
    order = pass_order(T, k, T)
    for i, (a, b) in enumerate(zip(ffn0, ffn, strict=True)):
        t, r = order[i // per_expert]
        assert b[0] - a[0] == idx[t, r] * STRIDE and a[1:] == b[1:], i
    assert {p[3] for p in ffn0} == {1, 2, 3}


def test_moe_layer_structure():
    ku.check_registers(make_layer, policy=1, T=2)
    ku.check_registers(make_layer, loops=False, max_k_tiles=1, hidden=128)
    own = {"expert_index_ignored": {}, "expert_stride_row": {}, "topk_bases_swapped": {}, "silu_on_up": {}}
    ku.check_deterministic_and_hooks(make_layer, own, T=2)


@pytest.mark.parametrize(
    "p",
    [
        dict(T=3, policy=0),
        dict(T=2, policy=1, hidden=128, max_k_tiles=1),
        dict(T=5, policy=0, inter=64, hidden=192, max_k_tiles=2),
        dict(T=5, policy=1, inter=64, chunk=2),
        dict(T=7, policy=0, chunk=3, int_out=9, fp_out=40),
    ],
)
def test_moe_layer_loops_and_unrolled_do_the_same_operations(p):
    _idx, ints = expert_indices(p["T"], p["policy"])
    looped, unrolled = make_layer(loops=True, **p), make_layer(loops=False, **p)
    assert ku.operation_log(looped, CFG, int_sram=dict(ints)) == ku.operation_log(unrolled, CFG, int_sram=dict(ints))


def test_static_size_does_not_grow_with_the_tokens_of_a_chunk():
    """The looped form: one token loop per rank; only a new chunk adds code (its V_TOPK and k passes)."""
    from isa.assembler import assemble

    size = {T: len(assemble(make_layer(T=T), "m")) for T in (2, 8, 64, 252, 260, 504)}
    assert size[2] <= size[8] == size[64] == size[252]  # (T=2: the router's row-block loop has 1 iteration)
    assert size[260] == size[504] < 2 * size[252]  # two chunks
    assert len(assemble(make_layer(T=8, loops=False), "m")) > 8 * size[8] // 2


@pytest.mark.parametrize("tight", [False, True])
def test_token_loop_budget_counts_the_nested_ffn_loops(tight):
    """One token pass (stage, offset, the FFN's own loops fully, combine) is measured: with the budget just above
    it the pass is a hardware loop; below one FFN, the tokens are unrolled; the scalar trace never runs away."""
    from tests.util import scalar_trace

    T, ints = 4, dict(expert_indices(4, 0)[1])
    per_iteration = scalar_trace.trace(make_layer(T=T), CFG, int_sram=ints).max_loop_iteration
    assert per_iteration > 600  # the FFN's G, U and Wd matmuls of one row (their own loops included)
    cfg = CFG.with_overrides({"MAX_LOOP_INSTRUCTIONS": 300 if tight else per_iteration + 1})
    text = make_layer(cfg=cfg, T=T)
    tr = scalar_trace.trace(text, cfg, int_sram=ints)
    assert tr.max_loop_iteration <= cfg.MAX_LOOP_INSTRUCTIONS
    passes = text.count("; @region moe/expert_ffn")
    assert passes == (4 * T if tight else 4)
    if not tight:
        assert tr.max_loop_iteration == per_iteration


def test_moe_workspace_rows():
    # logits 4 (+ 4 with E 128), V_TOPK staging 0 (2 rows for E 128 > V), router split 0 / rp(T), xs 4, ys 4,
    # FFN workspace G 8 + U 8 + t 1 (+ split 4)
    assert moe_workspace_rows(CFG, T=4, hidden=64, inter=128, policy=0, pitch=4) == 4 + 4 + 4 + 17
    assert moe_workspace_rows(CFG, T=4, hidden=64, inter=128, policy=1, pitch=4) == 8 + 2 + 4 + 4 + 17
    assert moe_workspace_rows(CFG, T=4, hidden=128, inter=128, policy=0, pitch=4, max_k_tiles=1) == (
        4 + 4 + 8 + 8 + 17 + 4
    )


@pytest.mark.parametrize(
    "over,chunks,int_range",
    [
        (dict(T=252), (252,), (0, 1009)),
        (dict(T=253), (252, 1), (0, 1009)),  # FP SRAM: (1024 - 16) // 4 = 252 tokens
        (dict(T=127, policy=1), (126, 1), (0, 1009)),  # (1024 - 16) // 8 = 126
        (dict(T=8, int_out=1000), (5, 3), (1000, 21)),  # INT SRAM: (1024 - 1000 - 1) // 4 = 5 (+ the offset word)
        (dict(T=7, chunk=3), (3, 3, 1), (0, 13)),
        (dict(T=2, chunk=9), (2,), (0, 9)),
    ],
)
def test_tokens_are_routed_in_chunks_that_fit_the_srams(over, chunks, int_range):
    plan = moe_plan(**over)
    assert tuple(tk.T for tk in plan.topk) == chunks and plan.chunk == chunks[0]
    assert [tk.row0 for tk in plan.topk] == [sum(chunks[:i]) for i in range(len(chunks))]
    assert plan.int_range == int_range and plan.offset_int == sum(int_range) - 1
    assert plan.fp_range == (plan.fp_out, plan.chunk * plan.k)


@pytest.mark.parametrize(
    "over,needle",
    [
        (dict(policy=2), r"moe_layer: policy=2 must be one of \[0, 1\]"),
        (dict(T=0), r"moe_layer: T=0 must be >= 1"),
        (dict(chunk=0), r"moe_layer: chunk=0 must be >= 1"),
        (dict(fp_out=1021), r"moe_layer: fp_out=1021 leaves no room for one token's k=4 .* <= FP_SRAM_SIZE-k=1020"),
        (dict(int_out=1020), r"moe_layer: int_out=1020 leaves no room .* <= INT_SRAM_SIZE-k-1=1019"),
        (dict(int_out=1016, policy=1), r"int_out=1016 .*k=8 .* <= INT_SRAM_SIZE-k-1=1015"),
        (dict(fp_out=8), r"fp_out=8 must be >= 16"),
        (dict(hidden=100), r"moe_layer: hidden=100 must be a multiple of MLEN=64"),
        (dict(inter=96), r"moe_layer: inter=96 must be a multiple of MLEN=64"),
        (dict(pitch=3), r"moe_layer: pitch=3 must be >= 4"),
        (dict(T=5, pitch=6), r"moe_layer: pitch=6 must be a multiple of RP"),
        (dict(experts=31), r"moe_layer: wg.alloc_elems=253952 must be >= E\*hidden\*inter=262144 \(32"),
        (dict(wd_eb=2), r"moe_layer: wd.eb=2 the expert strides .* must be equal"),
        (dict(ws_base=64), r"moe_layer: VRAM region x rows \[0, 4\) overlaps region logits"),
        (dict(ws_base=65), r"moe_layer: ws_base=65 must be a multiple of VLEN=64"),
    ],
)
def test_moe_layer_plan_errors_name_the_parameter_and_limit(over, needle):
    with pytest.raises(ValueError, match=needle):
        moe_plan(**over)


@pytest.mark.parametrize(
    "over,needle",
    [
        (dict(gp=tuple(range(1, 12))), r"moe_layer: gp=.* has 11 registers, the kernel needs 12"),
        (dict(fp=(1,)), r"moe_layer: fp=.* has 1 registers, the kernel needs 2"),
    ],
)
def test_moe_layer_register_errors(over, needle):
    with pytest.raises(ValueError, match=needle):
        make_layer(**over)


def test_unrolled_layer_needs_fewer_registers():
    # 9 for the unrolled linear (the expert offset goes through INT SRAM, no token loop counter)
    ku.check_assembles(make_layer(loops=False, gp=tuple(range(1, 10))))
