"""Flash attention generator unit tests without the simulator (kernels.md §3, §6.4).

* every §3.10 constraint raises a ValueError naming the parameter;
* determinism, and hooks-off text byte-identical to a hook-free build; every §6.2 hook is live;
* every program generated over samples of the testbenches' RANGES assembles, passes the lint of §6.4
  (immediates, registers, loop budgets, VRAM/MRAM operand alignment, VRAM writes inside the declared
  regions) and its scalar trace of H_PREFETCH_M registers equals the plan's kv_src list and an
  independent re-derivation of §3.4/§3.6 (P8, D4, sbhd batch 2, R != M included);
* for kv_len = 4*MLEN, the K and V prefetches of one head read four distinct tiles (register values).
"""

from __future__ import annotations

import dataclasses
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from isa.assembler import assemble  # noqa: E402
from plena_sim.config import MxType  # noqa: E402
from programs import flash as fa  # noqa: E402
from programs import mutation_hooks  # noqa: E402
from programs.asm import Asm  # noqa: E402
from programs.hbm_tensors import HbmTensor, ceil_div, round_up, row_pad  # noqa: E402
from testbenches import flashattn_decode, flashattn_prefill, flashattn_qkt, mutations  # noqa: E402
from testbenches._flashattn_common import resolve_sweep_values
from testbenches.shapes import big_base_row, resolve_params
from testbenches.variants import fixes_machine, get_config  # noqa: E402
from tests.util import scalar_trace

GP = tuple(range(1, 13))
FP = tuple(range(1, 7))

# kernels.md §6.2 (and issue 21's flash mutations): hook -> its flash cases (the one table in testbenches.mutations)
HOOK_CASES = {
    h: " ".join(e.case_id for e in mutations.exposures(h) if e.testbench.startswith("flashattn"))
    for h in mutations.MUTATIONS
    if mutations.exposures(h)[0].testbench.startswith("flashattn")
}


# ----------------------------------------------------------------------------- helpers


def _types(cfg):
    out = {}
    for cls, key in (("q", "HBM_V_ACT_TYPE"), ("kv", "HBM_M_KV_TYPE")):
        t = cfg.hbm_type(key)
        out[cls] = (t.elem_bytes, t.block if isinstance(t, MxType) else 0)
    return out


def tensors(cfg, sp, req):
    """HbmTensors as the harness would bind them (SCALE = element bytes incl. slack; a0=q, a1=k, a2=v)."""
    ty = _types(cfg)
    ebq, bq = ty["q"]
    ebk, bk = ty["kv"]
    q = HbmTensor(0, req["q"] * ebq, ebq, 0, sp["hq"] * sp["d"], req["q"], bq)
    k = HbmTensor(1, req["k"] * ebk, ebk, 1, sp["kv_row_elems"], req["k"], bk)
    v = HbmTensor(2, req["v"] * ebk, ebk, 1, sp["kv_row_elems"], req["v"], bk)
    return q, k, v


def shape(p: dict, cfg) -> dict:
    p = dict(p)
    resolve_sweep_values(p, cfg)  # Wp "M", kv_capacity "kv_len+M"
    wp = p.get("Wp")
    return dict(
        batch=p["batch"],
        hq=p["hq"],
        hkv=p["hkv"],
        d=p["d"],
        q_len=p["q_len"],
        kv_len=p["kv_len"],
        causal=bool(p.get("causal", False)),
        kv_layout=p.get("kv_layout", "bshd"),
        kv_capacity=p.get("kv_capacity") or p["kv_len"],
        kv_row_elems=p["hkv"] * p["d"] if wp in (None, "hkv*d") else int(wp),
        path=p.get("path", "auto"),
    )


def layout_for(cfg, sp, kernel="flash_attention", base_row=0):
    V, M = cfg.VLEN, cfg.MLEN
    if kernel == "flash_attention":
        n = ceil_div(sp["hq"] * sp["d"], V) * round_up(sp["batch"] * sp["q_len"], row_pad(cfg))
        return dict(o_base=base_row * V, scratch_base=(base_row + n + 1) * V, fp_state_base=16, mram_tile0=0)
    n = sp["batch"] * sp["hq"] * ceil_div(sp["q_len"], M) * ceil_div(sp["kv_len"], M) * M
    return dict(s_out=base_row * V, scratch_base=(base_row + n + 1) * V, mram_tile0=0)


def make_plan(cfg, sp, kernel="flash_attention", base_row=0, **extra):
    lay = layout_for(cfg, sp, kernel, base_row)
    req = fa.hbm_requirements(cfg, kernel=kernel, **sp, **lay)
    q, k, v = tensors(cfg, sp, req)
    if kernel == "flash_attention":
        return fa.plan_flash_attention(cfg, **sp, **lay, q=q, k=k, v=v, **extra)
    return fa.plan_attention_scores(cfg, **sp, **lay, q=q, k=k, **extra)


def program(plan) -> str:
    asm = Asm()
    emit = fa.emit_flash_attention if plan.kernel == "flash_attention" else fa.emit_attention_scores
    emit(asm, plan, gp=GP, fp=FP)
    return asm.text()


def case_params(case_id: str, hw: str | None = None):
    """(params, config, testbench module) of a required or stretch case (on preset ``hw``, if given)."""
    for mod in (flashattn_prefill, flashattn_decode, flashattn_qkt):
        for cid, ov, var in mod.REQUIRED_CASES + mod.STRETCH_CASES:
            if cid == case_id:
                if hw is not None and fixes_machine(var):
                    var = "default"
                cfg = get_config(var, hw=hw)
                return resolve_params(dict(mod.DEFAULTS, **ov), cfg), cfg, mod
    raise KeyError(case_id)


def case_plan(case_id: str, hw: str | None = None, **extra):
    p, cfg, mod = case_params(case_id, hw)
    sp = shape(p, cfg)
    kernel = "attention_scores" if mod is flashattn_qkt else "flash_attention"
    base_row = big_base_row(cfg) if p.get("big_base") else int(p.get("vram_base_row", 0))
    return make_plan(cfg, sp, kernel, base_row, **extra)


def case_program(case_id: str) -> str:
    return program(case_plan(case_id))


_BASE_TEXT: dict = {}


def base_program(case_id: str) -> str:
    """Hooks-off program of a case (cached; callers must not have a hook active)."""
    assert not mutation_hooks.enabled()
    if case_id not in _BASE_TEXT:
        _BASE_TEXT[case_id] = case_program(case_id)
    return _BASE_TEXT[case_id]


def independent_kv_list(cfg, sp, plan):
    """§3.4/§3.6 re-derived without the plan's schedule: (offset bytes, STRIDE, SCALE, areg) per prefetch."""
    M, H, BA = cfg.MLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
    b_, hq, hkv, d = sp["batch"], sp["hq"], sp["hkv"], sp["d"]
    S, L, Wp, S_cap = sp["q_len"], sp["kv_len"], sp["kv_row_elems"], sp["kv_capacity"]
    ratio = hq // hkv
    batched = sp["path"] != "per_head" and d == H and ratio <= BA and BA * H == M
    nh = ratio if batched else min(ratio, (cfg.FP_SRAM_SIZE - 16) // (3 * M))
    nc = max(1, d // M)
    eb = plan.eb_kv
    R = Wp if sp["kv_layout"] == "bshd" else b_ * Wp
    out = []
    for b in range(b_):
        base = b * S_cap * Wp if sp["kv_layout"] == "bshd" else b * Wp
        for g in range(hkv):
            for i in range(ceil_div(S, M)):
                q0, br = i * M, min(M, S - i * M)
                for _hb in range(1 if batched else ceil_div(ratio, nh)):
                    for t in range(ceil_div(L, M)):
                        if sp["causal"] and t * M > q0 + br - 1 + (L - S):
                            break
                        for c in range(nc):
                            off = (base + t * M * R + g * d + c * M) * eb
                            out.append((off, R * eb, plan.k.scale_offset, plan.k.areg))
                            out.append((off, R * eb, plan.v.scale_offset, plan.v.areg))
    return out


# ----------------------------------------------------------------------------- §3.10 constraints

DEF = dict(batch=1, hq=4, hkv=1, d=16, q_len=64, kv_len=128, causal=True)


def _plan_kw(cfg=None, **over):
    cfg = cfg or get_config("default")
    kw = dict(DEF, o_base=0, scratch_base=64 * 200)
    kw.update(over)
    return cfg, kw


@pytest.mark.parametrize(
    "over, cfg_change, needle",
    [
        (dict(hq=6, hkv=4), None, "hq=6"),
        (dict(d=48), None, "head_dim=48"),
        (dict(d=8), None, "head_dim=8"),
        (dict(d=96), None, "head_dim=96"),
        (dict(), dict(VLEN=128), "VLEN=128"),
        (dict(), dict(HBM_M_Prefetch_Amount=128), "HBM_M_Prefetch_Amount"),
        (dict(), dict(HBM_V_Prefetch_Amount=3), "HBM_V_Prefetch_Amount=3"),
        (dict(path="batched"), dict(BROADCAST_AMOUNT=2), "path="),
        (dict(d=32, path="batched"), None, "path="),
        (dict(hq=8, hkv=1, path="batched"), None, "path="),
        (dict(path="sideways"), None, "path="),
        (dict(kv_layout="hbsd"), None, "kv_layout="),
        (dict(q_len=200, kv_len=100, causal=True), None, "q_len=200"),
        (dict(kv_capacity=100, kv_len=128), None, "kv_capacity=100"),
        (dict(kv_row_elems=8), None, "kv_row_elems=8"),
        (dict(kv_row_elems=20), None, "kv_row_elems=20"),
        (dict(fp_state_base=8), None, "fp_state_base=8"),
        (dict(fp_state_base=1022), None, "fp_state_base=1022 leaves 2 FP SRAM words"),
        (dict(fp_state_base=1022), None, "the largest fp_state_base that fits is 1021"),
        (dict(fp_state_base=100, fp_reserved={"topk": (200, 8)}), None, "fp_state_base=100"),
        (dict(mram_tile0=63), None, "mram_tile0=63"),
        (dict(scratch_base=64 * 10), None, "scratch_base=640"),
        (dict(o_base=65), None, "o_base=65"),
        (dict(scratch_base=100), None, "scratch_base=100"),
        (dict(batch=0), None, "batch=0"),
        (dict(kv_len=4160, batch=4, kv_row_elems=1 << 20, q_len=64, scratch_base=64 * 2000), None, "kv_len=4160"),
        (dict(), dict(MAX_LOOP_INSTRUCTIONS=10), "MAX_LOOP_INSTRUCTIONS=10"),
    ],
)
def test_plan_constraints_raise_naming_the_parameter(over, cfg_change, needle):
    cfg = get_config("default")
    if cfg_change:
        cfg = dataclasses.replace(cfg, **cfg_change)
    cfg, kw = _plan_kw(cfg, **over)
    with pytest.raises(ValueError) as ei:
        fa.plan_flash_attention(cfg, **kw)
    assert needle in str(ei.value), str(ei.value)


@pytest.mark.parametrize(
    "F, path, nh, qrows",
    [
        (1000, "per_head", 1, 8),  # 24 words: 8 rows of one head (a multiple of BLEN=4)
        (900, "per_head", 1, 40),  # 124 words: batched would give 8 rows of 4 heads, 8x the M_BTMM work
        (16, "batched", 4, 64),  # the reference layout: all M rows of all ratio heads
    ],
)
def test_fp_state_groups_rows_and_heads_to_fit(F, path, nh, qrows):
    cfg, kw = _plan_kw(fp_state_base=F)
    plan = fa.plan_flash_attention(cfg, **kw)
    assert (plan.path, plan.nh, plan.qrows) == (path, nh, qrows)
    assert plan.fp_state_base + plan.fp_state_size <= cfg.FP_SRAM_SIZE
    assert plan.fp_state_size == 3 * nh * qrows
    assert plan.Tq == -(-kw["q_len"] // qrows)
    assert all(b.br <= qrows for b in plan.blocks)


def test_mx_head_dim_alignment_raises():
    cfg = get_config("default").with_overrides({"HLEN": 4, "BROADCAST_AMOUNT": 16})
    with pytest.raises(ValueError, match="head_dim=4"):
        fa.plan_flash_attention(cfg, **dict(DEF, d=4, kv_row_elems=8, o_base=0, scratch_base=64 * 200))


def test_kv_tensor_mismatch_raises():
    cfg = get_config("default")
    sp = shape(dict(DEF, path="auto"), cfg)
    lay = layout_for(cfg, sp)
    req = fa.hbm_requirements(cfg, **sp, **lay)
    q, k, v = tensors(cfg, sp, req)
    with pytest.raises(ValueError, match="v.scale_offset"):
        fa.plan_flash_attention(cfg, **sp, **lay, q=q, k=k, v=dataclasses.replace(v, scale_offset=v.scale_offset + 64))
    with pytest.raises(ValueError, match="v="):
        fa.plan_flash_attention(cfg, **sp, **lay, q=q, k=k, v=dataclasses.replace(v, prec=0))
    with pytest.raises(ValueError, match="k.alloc_elems"):
        small = dataclasses.replace(k, alloc_elems=16)
        fa.plan_flash_attention(cfg, **sp, **lay, q=q, k=small, v=dataclasses.replace(v, alloc_elems=16))
    with pytest.raises(ValueError, match="q.alloc_elems"):
        fa.plan_flash_attention(cfg, **sp, **lay, q=dataclasses.replace(q, alloc_elems=64), k=k, v=v)


def test_registers_and_unbound_plan():
    cfg = get_config("default")
    sp = shape(dict(DEF), cfg)
    plan = make_plan(cfg, sp)
    assert plan.gp_needed <= 12 and plan.fp_needed == 6
    with pytest.raises(ValueError, match="gp"):
        fa.emit_flash_attention(Asm(), plan, gp=(1, 2, 3), fp=FP)
    with pytest.raises(ValueError, match="fp"):
        fa.emit_flash_attention(Asm(), plan, gp=GP, fp=(1, 2, 3, 4, 5))
    with pytest.raises(ValueError, match="gp"):
        fa.emit_flash_attention(Asm(), plan, gp=(0, 1, 2, 3, 4, 5, 6, 7), fp=FP)
    unbound = fa.plan_flash_attention(cfg, **sp, **layout_for(cfg, sp))
    with pytest.raises(ValueError, match="q/k"):
        fa.emit_flash_attention(Asm(), unbound, gp=GP, fp=FP)


def test_head_dim_chunks_flag_and_path_selection():
    cfg = get_config("default")
    assert fa.SUPPORTS_HEAD_DIM_CHUNKS is True
    p = make_plan(cfg, shape(dict(DEF, hq=2, hkv=2, d=128, kv_row_elems=256, q_len=70, kv_len=130), cfg))
    assert p.nc == 2 and p.path == "per_head" and p.mram_tiles == (0, 4)
    assert make_plan(cfg, shape(dict(DEF), cfg)).path == "batched"
    assert make_plan(cfg, shape(dict(DEF, hq=6, hkv=2), cfg)).path == "batched"  # ratio 3 <= BA
    assert make_plan(cfg, shape(dict(DEF, hq=8, hkv=1), cfg)).path == "per_head"  # ratio 8 > BA
    assert make_plan(cfg, shape(dict(DEF, d=32), cfg)).path == "per_head"
    assert make_plan(cfg, shape(dict(DEF, path="per_head"), cfg)).path == "per_head"
    ph = make_plan(cfg, shape(dict(DEF, hq=16, hkv=1), cfg))
    assert ph.nh == 5 and [len(b.heads) for b in ph.blocks[:4]] == [5, 5, 5, 1]


def test_footprint_and_fp_state():
    cfg = get_config("default")
    p = make_plan(cfg, shape(dict(DEF, hq=8, hkv=2, batch=2, kv_layout="sbhd"), cfg))
    roles = {k: r for k, (_a, _n, r) in p.vram_regions.items()}
    assert roles["o"] == "output" and all(roles[k] == "scratch" for k in ("neg", "mask", "q", "s", "pv"))
    items = sorted((a, n) for a, n, _r in p.vram_regions.values())
    assert all(a0 + n0 <= a1 for (a0, n0), (a1, _n1) in pairwise(items))
    assert p.fp_range == (16, 3 * 64 * 4)
    assert p.state_words(1, 5) == {"m": 16 + 192 + 5, "m_res": 16 + 192 + 64 + 5, "l": 16 + 192 + 128 + 5}
    assert set(p.hbm_slack) == {"q", "k", "v"}
    fpt = p.footprint
    assert fpt.vram_regions == dict(p.vram_regions) and fpt.fp_range == p.fp_range and fpt.mram_tiles == (0, 2)


# ----------------------------------------------------------------------------- determinism and hooks


@pytest.mark.parametrize("case_id", ["P1", "P6", "P9", "D2", "D6", "prefill_per_head"])
def test_deterministic_and_hook_free_identical(case_id, monkeypatch):
    a = case_program(case_id)
    assert case_program(case_id) == a
    with mutation_hooks.inject():
        assert case_program(case_id) == a
    # a hook-free build: every hook query answers False without consulting the hook machinery
    monkeypatch.setattr(mutation_hooks, "active", lambda name: False)
    assert case_program(case_id) == a
    assert a.splitlines()[0].startswith("; flash_attention begin") or a.splitlines()[0].startswith(
        "; attention_scores begin"
    )
    assert a.rstrip().splitlines()[-1] in ("; flash_attention end", "; attention_scores end")


def test_every_flash_hook_is_registered_and_live():
    package = Path(fa.__file__).parent
    src = "".join(f.read_text() for f in sorted(package.glob("*.py"))) + (package.parent / "asm.py").read_text()
    for hook, cases in HOOK_CASES.items():
        assert hook in mutation_hooks.HOOKS
        assert f'"{hook}"' in src, f"hook {hook} is not placed in the generator"
        cid = min(cases.split(), key=lambda c: case_plan(c).static_instructions)  # cheapest listed case
        base = base_program(cid)
        with mutation_hooks.inject(hook):
            try:
                mutated = case_program(cid)
            except ValueError:
                continue  # raw_large_immediate: Asm rejects the text
        assert mutated != base, f"hook {hook} does not change the program of {cid}"


# ----------------------------------------------------------------------------- RANGES samples


def _valid(p, cfg):
    M, H, BA = cfg.MLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
    if p["hq"] % p["hkv"]:
        return False
    if p["d"] > M and not fa.SUPPORTS_HEAD_DIM_CHUNKS:
        return False
    if p["d"] > M and p["d"] % M:
        return False
    if cfg.VLEN % p["d"] and p["d"] <= M:
        return False
    if p.get("causal") and p["q_len"] > p["kv_len"]:
        return False
    wp = p.get("Wp")
    wp = cfg.MLEN if wp == "M" else wp
    if isinstance(wp, int) and wp < p["hkv"] * p["d"]:
        return False
    return not (p.get("path") == "batched" and not (p["d"] == H and p["hq"] // p["hkv"] <= BA and BA * H == M))


def range_samples(mod, n: int, seed: int, max_dyn: int, max_static: int):
    rng = np.random.default_rng(seed)
    R = mod.RANGES
    out = []
    tries = 0
    while len(out) < n and tries < 5000:
        tries += 1
        p = dict(mod.DEFAULTS)
        for k, vals in R.items():
            p[k] = vals[int(rng.integers(len(vals)))]
        variant = p.pop("cfg", "default")
        cfg = get_config(variant)
        p = resolve_params(p, cfg)
        p["hkv"] = min(p["hkv"], p["hq"])
        if not _valid(p, cfg):
            continue
        passes = p["batch"] * p["hq"] * ceil_div(p["q_len"], cfg.MLEN) * ceil_div(p["kv_len"], cfg.MLEN)
        if passes * max(1, p["d"] // 16) > max_static // 40:
            continue  # cheap pre-filter before planning
        sp = shape(p, cfg)
        kernel = "attention_scores" if mod is flashattn_qkt else "flash_attention"
        plan = make_plan(cfg, sp, kernel)
        if plan.dynamic_instructions > max_dyn or plan.static_instructions > max_static:
            continue
        out.append((variant, sp, kernel))
    return out


def _named_cases():
    out = []
    for cid in (
        "P1",
        "P2",
        "P3",
        "P4",
        "P5",
        "P6",
        "P7",
        "P8",
        "P9",
        "P10",
        "P11",
        "D1",
        "D2",
        "D3",
        "D4",
        "D5",
        "D6",
        "D7",
        "wp1024_kv320",
        "gqa_sbhd_per_head",
        "gqa_decode_sbhd",
    ):
        p, cfg, mod = case_params(cid)
        kernel = "attention_scores" if mod is flashattn_qkt else "flash_attention"
        out.append(pytest.param(cfg, shape(p, cfg), kernel, int(p.get("vram_base_row", 0)), id=cid))
    return out


def _sampled(n, seed, max_dyn, max_static):
    out = []
    for mod, tag in ((flashattn_prefill, "prefill"), (flashattn_decode, "decode"), (flashattn_qkt, "qkt")):
        for k, (variant, sp, kernel) in enumerate(range_samples(mod, n, seed, max_dyn, max_static)):
            out.append(pytest.param(get_config(variant), sp, kernel, 0, id=f"{tag}{k}-{variant}"))
    return out


_SWEEP = {}


def _sweep_sample(tag: str, k: int):
    """The k-th sample of the slow sweep (drawn lazily, so collection stays cheap)."""
    mod = {"prefill": flashattn_prefill, "decode": flashattn_decode, "qkt": flashattn_qkt}[tag]
    if tag not in _SWEEP:
        _SWEEP[tag] = range_samples(mod, SWEEP_N, 99, 3_000_000, 200_000)
    return _SWEEP[tag][k] if k < len(_SWEEP[tag]) else None


SWEEP_N = 30


def _check_program(cfg, sp, kernel, base_row):
    plan = make_plan(cfg, sp, kernel, base_row)
    text = program(plan)
    prog = assemble(text, "<fa>")  # immediates, registers, a0..a7, kinds
    tr = scalar_trace.trace(prog, cfg)
    assert not tr.lint, tr.lint[:5]
    assert tr.dynamic == plan.dynamic_instructions
    assert tr.max_loop_iteration == plan.max_loop_iteration < cfg.MAX_LOOP_INSTRUCTIONS
    # address test (§6.4): register values at every H_PREFETCH_M
    assert tr.prefetch_m == plan.expected_kv_prefetches()
    if kernel == "flash_attention":
        assert tr.prefetch_m == independent_kv_list(cfg, sp, plan)
    assert all(rs == 1 and prec == 1 for (*_x, rs, prec) in tr.prefetch_m_full)
    M = cfg.MLEN
    for _o, _s, _sc, _a, dst, _rs, _p in tr.prefetch_m_full:
        assert plan.mram_tile0 * M * M <= dst < (plan.mram_tile0 + plan.mram_tiles[1]) * M * M
    # every VRAM row written lies in a declared region (static footprint)
    declared = set()
    for r0, n, _role in plan.vram_regions.values():
        declared.update(range(r0, r0 + n))
    stray = sorted(tr.vram_rows_written - declared)
    assert not stray, f"rows written outside the declared regions: {stray[:8]}"
    # Q staging: every H_PREFETCH_V stays inside the Q tensor's allocation
    for _mn, _dst, off, stride, scale, a, rs, prec in tr.prefetch_v:
        assert a == plan.q.areg and rs == 1 and prec == 0 and scale == plan.q.scale_offset
        last = off // plan.eb_q + (cfg.P_V - 1) * (stride // plan.eb_q) + cfg.VLEN
        assert last <= plan.q.alloc_elems
    # K/V: every tile read stays inside the tensors' allocation
    for off, stride, _sc, _a in tr.prefetch_m:
        assert off // plan.eb_kv + (M - 1) * (stride // plan.eb_kv) + M <= plan.k.alloc_elems
    return plan, tr


@pytest.mark.parametrize("cfg, sp, kernel, base_row", _named_cases())
def test_required_case_programs_trace(cfg, sp, kernel, base_row):
    _check_program(cfg, sp, kernel, base_row)


@pytest.mark.parametrize("cfg, sp, kernel, base_row", _sampled(8, 1234, 150_000, 6_000))
def test_range_sample_programs(cfg, sp, kernel, base_row):
    _check_program(cfg, sp, kernel, base_row)


@pytest.mark.slow
@pytest.mark.parametrize("tag", ["prefill", "decode", "qkt"])
@pytest.mark.parametrize("k", range(SWEEP_N))
def test_range_sample_programs_sweep(tag, k):
    sample = _sweep_sample(tag, k)
    if sample is None:
        pytest.skip("fewer valid samples than SWEEP_N")
    variant, sp, kernel = sample
    _check_program(get_config(variant), sp, kernel, 0)


@pytest.mark.parametrize(
    "layout, batch, Wp, q_len",
    [
        ("bshd", 1, None, 64),
        ("bshd", 1, None, 1),
        ("sbhd", 2, None, 64),
        ("bshd", 2, 1024, 64),
        ("sbhd", 2, 64, 1),
        ("bshd", 1, 64, 100),
    ],
)
@pytest.mark.parametrize("path", ["batched", "per_head"])
def test_four_tiles_read_four_distinct_tiles(layout, batch, Wp, q_len, path):
    """kv_len = 4*MLEN: the K and V prefetches of one head read four distinct tiles, at t*M*R (register
    values from the scalar trace, not text)."""
    cfg = get_config("default")
    M = cfg.MLEN
    p = dict(
        batch=batch, hq=1, hkv=1, d=16, q_len=q_len, kv_len=4 * M, causal=False, kv_layout=layout, Wp=Wp, path=path
    )
    sp = shape(p, cfg)
    plan, tr = _check_program(cfg, sp, "flash_attention", 0)
    R = plan.R
    for b in range(batch):
        base = plan.kv_base_b(b) * plan.eb_kv
        for areg_ in (plan.k.areg, plan.v.areg):
            offs = [o for (o, _s, _sc, a) in tr.prefetch_m if a == areg_]
            per_block = len(offs) // (batch * plan.Tq)
            assert per_block == 4
            blk_offs = offs[b * plan.Tq * 4 : b * plan.Tq * 4 + 4]
            assert len(set(blk_offs)) == 4
            assert blk_offs == [base + t * M * R * plan.eb_kv for t in range(4)]
    assert {s for (_o, s, _sc, _a) in tr.prefetch_m} == {R * plan.eb_kv}


def test_large_offsets_use_lui_values():
    """P8 (R = 1024) and D4 (tile 64 at 2^18): the registers hold the full offsets (>= 2^18)."""
    for cid in ("P8", "D4"):
        p, cfg, _mod = case_params(cid)
        sp = shape(p, cfg)
        plan, tr = _check_program(cfg, sp, "flash_attention", 0)
        offs = [o for (o, *_r) in tr.prefetch_m]
        assert max(offs) >= 1 << 18
        assert "S_LUI_INT" in program(plan)


def test_dynamic_instruction_budget():
    """kernels.md §3.11: the required cases stay under ~300k dynamic instructions."""
    worst = {}
    for cid in ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "D1", "D2", "D3", "D4", "D5", "D6", "D7"):
        p, cfg, _mod = case_params(cid)
        plan = make_plan(cfg, shape(p, cfg), "flash_attention", int(p.get("vram_base_row", 0)))
        worst[cid] = plan.dynamic_instructions
    assert max(worst.values()) < 300_000, worst


# ----------------------------------------------------------------------------- hardware loops (issue 18)

_ALU = {
    "S_ADDI_INT": lambda g, f: g[f["rs1"]] + f["imm18"],
    "S_ADD_INT": lambda g, f: g[f["rs1"]] + g[f["rs2"]],
    "S_SUB_INT": lambda g, f: g[f["rs1"]] - g[f["rs2"]],
    "S_MUL_INT": lambda g, f: g[f["rs1"]] * g[f["rs2"]],
    "S_LUI_INT": lambda g, f: f["imm22"] << 12,
}


def _operation(ins, f, gpr) -> tuple[int, ...]:
    """An instruction as (opcode, operand values): gp operands by value, base + imm18 as one address."""
    vals = [gpr[f[o.field]] if o.kind == "gp" else f[o.field] for o in ins.operands if o.kind != "zero"]
    if ins.fmt == "WO18" or ins.mnemonic == "M_MM_WO":
        vals = [vals[0] + vals[-1], *vals[1:-1]]
    elif ins.fmt == "I18":
        vals = [vals[0], vals[1] + vals[2]]
    return (ins.opcode, *vals)


def op_sequence(text: str) -> tuple[list[tuple[int, ...]], int]:
    """(every executed instruction except the scalar-integer ALU and loop instructions, as
    :func:`_operation`; the dynamic instruction count): what the kernel computes and where, independent of
    register choice, pointer stepping and loops."""
    from isa.encoding import decode
    from isa.table import BY_OPCODE

    code = [(BY_OPCODE[decode(int(w))["opcode"]], decode(int(w))) for w in assemble(text, "<fa>").words]
    gpr = [0] * 16
    stack: list[list[int]] = []
    ops, pc, dyn = [], 0, 0
    while pc < len(code):
        ins, f = code[pc]
        mn, nxt, dyn = ins.mnemonic, pc + 1, dyn + 1
        if mn in _ALU:
            if f["rd"]:
                gpr[f["rd"]] = _ALU[mn](gpr, f) % (1 << 32)
        elif mn == "C_LOOP_START":
            gpr[f["rd"]] = f["imm22"]
            stack.append([pc, f["rd"]])
        elif mn == "C_LOOP_END":
            k = max(i for i, (_s, r) in enumerate(stack) if r == f["rd"])
            if gpr[f["rd"]] > 1:
                gpr[f["rd"]] -= 1
                nxt = stack[k][0] + 1
            else:
                gpr[f["rd"]] = 0
                del stack[k]
        else:
            ops.append(_operation(ins, f, gpr))
        pc = nxt
    return ops, dyn


LOOP_CASES = ["P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11"]
LOOP_CASES += ["D1", "D2", "D3", "D4", "D5", "D6", "D7", "prefill_per_head", "gqa_sbhd_per_head", "decode_per_head"]


@pytest.mark.parametrize(
    "case_id, hw",
    [(c, None) for c in LOOP_CASES] + [(c, "v80-256x64") for c in ("P1", "P6", "D3")] + [("P3", "v80-64x16")],
)
def test_loops_run_exactly_the_unrolled_operations(case_id, hw):
    """The looped program (blocks, kv tiles and heads as hardware loops where possible) executes the same
    compute and memory instructions on the same addresses in the same order as the fully unrolled one
    (``loops=False``); only scalar counter arithmetic and loop instructions are added (<= 8%)."""
    looped, unrolled = case_plan(case_id, hw), case_plan(case_id, hw, loops=False)
    ops_l, dyn_l = op_sequence(program(looped))
    ops_u, dyn_u = op_sequence(program(unrolled))
    assert ops_l == ops_u
    assert (dyn_l, dyn_u) == (looped.dynamic_instructions, unrolled.dynamic_instructions)
    assert looped.static_instructions <= unrolled.static_instructions
    assert dyn_l <= 1.08 * dyn_u, (dyn_l, dyn_u)


@pytest.mark.parametrize(
    "over, fp_state_base",
    [
        (dict(batch=3, hq=4, hkv=1, d=16, q_len=200, kv_len=200, causal=False), 16),  # a batch loop
        (dict(batch=1, hq=8, hkv=4, d=16, q_len=64, kv_len=320, causal=True), 16),  # a group loop
        (dict(batch=1, hq=4, hkv=1, d=16, q_len=256, kv_len=448, causal=True), 16),  # off % M != 0
        (dict(batch=1, hq=2, hkv=1, d=32, q_len=128, kv_len=256, causal=True), 900),  # q row groups of 40
        (dict(batch=2, hq=16, hkv=1, d=32, q_len=70, kv_len=130, causal=True), 16),  # head batches 5,5,5,1
    ],
)
def test_loops_run_the_unrolled_operations_on_other_shapes(over, fp_state_base):
    cfg = get_config("default")
    sp = shape(over, cfg)
    lay = dict(layout_for(cfg, sp), fp_state_base=fp_state_base)
    req = fa.hbm_requirements(cfg, **sp, **lay)
    q, k, v = tensors(cfg, sp, req)
    looped, unrolled = (fa.plan_flash_attention(cfg, **sp, **lay, q=q, k=k, v=v, loops=lp) for lp in (True, False))
    assert op_sequence(program(looped))[0] == op_sequence(program(unrolled))[0]
    assert looped.static_instructions < unrolled.static_instructions


def _workload(kind: str, **over):
    """Plans of the issue-18 workloads (default machine, loops on): prefill_1k and decode_32k shapes."""
    base = {
        "prefill": dict(batch=1, q_len=1024, kv_len=1024, hq=8, hkv=2, d=64, causal=True),
        "decode": dict(batch=1, q_len=1, kv_len=32768, hq=32, hkv=8, d=64, causal=True),
    }[kind]
    cfg = get_config("default")
    return make_plan(cfg, shape(dict(base, **over), cfg))


def test_static_size_of_the_issue_18_workloads():
    """prefill_1k fits 10,000 static instructions (174,010 unrolled); decode's static size does not grow with
    the kv length within one group of T^2 kv tiles (split-KV, issue 29: one chunk loop of T-tile chunks per
    level-1 group).  Beyond it, it grows by exactly one level-1 group per T^2 tiles and block: a group's
    dynamic count (here ~131k) exceeds MAX_LOOP_INSTRUCTIONS, so the loop over groups is unrolled."""
    prefill = _workload("prefill")
    assert prefill.static_instructions <= 10_000
    decode = _workload("decode", kv_len=1024)  # one chunk: the unsplit program
    assert decode.static_instructions <= 5_000 and decode.merge_levels == 0
    s4k, s8k = (_workload("decode", kv_len=kv).static_instructions for kv in (4096, 8192))
    assert s4k == s8k and s8k <= 6_000
    s32k, s64k, s128k = (_workload("decode", kv_len=kv).static_instructions for kv in (32768, 65536, 131072))
    assert s128k - s64k == 2 * (s64k - s32k)  # 8, 4 and 2 level-1 groups: linear in the groups
    assert s128k <= 50_000
    assert prefill.max_loop_iteration < prefill.config.MAX_LOOP_INSTRUCTIONS


def test_causal_q_tiles_share_a_block_loop_with_a_variable_kv_loop():
    """Causal q tiles 1.. of one group are one block loop whose kv-tile loop runs i+1 - 1 full tiles:
    ``C_LOOP_START gpT, 1`` with the counter set from a register; the scalar trace agrees with the plan."""
    cfg = get_config("default")
    M = cfg.MLEN
    sp = shape(dict(batch=1, hq=4, hkv=1, d=16, q_len=6 * M, kv_len=6 * M, causal=True), cfg)
    plan, tr = _check_program(cfg, sp, "flash_attention", 0)
    text = program(plan)
    cT, cQ = GP[8], GP[3]
    assert f"C_LOOP_START gp{cT}, 1" in text
    assert f"C_LOOP_START gp{cQ}, 5" in text  # q tiles 1..5 (tile 0 has no fully visible kv tile)
    assert text.count("; block ") == 2
    assert tr.prefetch_m == plan.expected_kv_prefetches()


def test_loops_respect_the_loop_budget():
    """With a small MAX_LOOP_INSTRUCTIONS the big levels are unrolled and the small ones stay loops; the
    program still runs the unrolled operations and no iteration reaches the budget."""
    cfg = get_config("default").with_overrides({"MAX_LOOP_INSTRUCTIONS": 3000})
    sp = shape(dict(batch=1, hq=4, hkv=1, d=16, q_len=128, kv_len=256, causal=True), cfg)
    looped, unrolled = make_plan(cfg, sp), make_plan(cfg, sp, loops=False)
    assert looped.max_loop_iteration < 3000
    assert op_sequence(program(looped))[0] == op_sequence(program(unrolled))[0]
    tr = scalar_trace.trace(assemble(program(looped), "<fa>"), cfg)
    assert tr.max_loop_iteration == looped.max_loop_iteration and tr.dynamic == looped.dynamic_instructions


# ----------------------------------------------------------------------------- the loop machinery itself


def _levels_program(fn, counts, loopmax=100_000):
    """A block level over len(counts) items, each with a kv level of counts[q] items; every iteration
    loads fn(q, t) into gp2 and records it with an H_PREFETCH_M (the scalar trace reads gp2 back), then
    runs 200 filler instructions (so that a loop is worth its counter arithmetic)."""
    from programs.flash.loops import IterRegs, Loops, Tracker

    asm = Asm()
    tr = Tracker(asm, loopmax, "test")
    L = Loops(tr, IterRegs(tmp=8, t0=1, mask=12, vcount=3))
    items = [list(range(c)) for c in counts]

    def tile():
        L.load(2, lambda ix: fn(ix["q"], L.get("t", ix)))
        tr.S_ADDI_INT("gp1", "gp0", 0)
        tr.H_PREFETCH_M("gp1", "gp2", "a1", 1, 1)
        for _ in range(200):
            tr.S_ADDI_INT("gp5", "gp0", 0)

    def block():
        L.repeat("t", 9, lambda ix: items[ix["q"]], tile, "tiles")

    L.repeat("q", 4, list(range(len(counts))), block, "blocks")
    return asm.text(), tr


def test_level_loops_load_affine_values_and_count_like_the_trace():
    cfg = get_config("default")
    text, tr = _levels_program(lambda q, t: 1000 * q + 10 * t + 7, [2, 3, 4, 5])
    got = [o for (o, *_r) in scalar_trace.trace(assemble(text, "<t>"), cfg).prefetch_m]
    assert got == [1000 * q + 10 * t + 7 for q, c in enumerate([2, 3, 4, 5]) for t in range(c)]
    assert "C_LOOP_START gp4, 4" in text and "C_LOOP_START gp9, 1" in text  # a variable kv loop
    trace = scalar_trace.trace(assemble(text, "<t>"), cfg)
    assert (trace.dynamic, trace.max_loop_iteration) == (tr.dynamic, tr.max_iter)


def test_level_loops_unroll_what_is_not_affine():
    cfg = get_config("default")
    text, _tr = _levels_program(lambda q, t: q * q * 64 + t, [3, 3, 3])
    got = [o for (o, *_r) in scalar_trace.trace(assemble(text, "<t>"), cfg).prefetch_m]
    assert got == [q * q * 64 + t for q in range(3) for t in range(3)]
    assert "C_LOOP_START gp4" not in text and text.count("C_LOOP_START gp9, 3") == 3
