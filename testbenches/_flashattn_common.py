"""Shared case construction of the flash-attention testbenches (kernels.md §3.1, §4.4, §4.5).

Inputs are named ``q`` ``[batch, q_len, hq, d]``, ``k`` and ``v`` ``[batch, kv_len, hkv, d]`` (the logical
views; HBM holds Q as ``[batch*q_len, hq*d]`` and K/V as caches of ``Wp``-element rows in the ``bshd`` or
``sbhd`` layout).  Every unused cache byte -- capacity positions ``[kv_len, S_cap)``, pad columns
``Wp > hkv*d`` -- holds finite random data (the kernel must mask it), and so does the plan's slack.  Goldens are
float64 on the dequantized (MX round-tripped) values with ``qk_scale`` = the bf16 value of FP slot 5.

The count probe (flash attention with ``hq >= 2``; parameter ``count_probe``, default on): the last q head's Q is
zero, so each of its rows has every score 0, m = 0 and the softmax mass l = its number of allowed keys.  Its l in
the last block is checked exactly (``l_count``, :func:`count_golden`), so one added or dropped key, or one wrong
mask lane, fails every affected row (while l <= 256, bf16's exact integers); the O, m and l checks of §5.2 cover
every head, the probe's included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from plena_sim.config import HardwareConfig
from programs import flash as fa
from programs.hbm_tensors import HbmTensor, ceil_div, round_up, row_pad

from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, FpWords, VramCbm, VramRows
from .shapes import big_base_row, resolve_params

COORDS_O = ("batch", "row", "head", "col")

F64 = npt.NDArray[np.float64]


def shape_params(p: Mapping[str, Any]) -> dict[str, Any]:
    """The plan's problem parameters from a testbench parameter dict."""
    wp = p.get("Wp")
    hkv, d = p["hkv"], p["d"]
    return dict(
        batch=p["batch"],
        hq=p["hq"],
        hkv=hkv,
        d=d,
        q_len=p["q_len"],
        kv_len=p["kv_len"],
        causal=bool(p["causal"]),
        kv_layout=p.get("kv_layout", "bshd"),
        kv_capacity=p.get("kv_capacity") or p["kv_len"],
        kv_row_elems=hkv * d if wp in (None, "hkv*d") else int(wp),
        path=p.get("path", "auto"),
        **({} if p.get("kv_chunk_tiles") is None else {"kv_chunk_tiles": p["kv_chunk_tiles"]}),
    )


def resolve_sweep_values(p: dict[str, Any], cfg: HardwareConfig) -> None:
    """The symbolic RANGES values in place: ``Wp="M"`` is MLEN, ``kv_capacity="kv_len+M"`` is kv_len + MLEN."""
    if p.get("Wp") == "M":
        p["Wp"] = cfg.MLEN
    if p.get("kv_capacity") == "kv_len+M":
        p["kv_capacity"] = resolve_params({"kv_len": p["kv_len"]}, cfg)["kv_len"] + cfg.MLEN


def _logical_kv(seen: np.ndarray, layout: str, batch: int, S_cap: int, L: int, width: int) -> np.ndarray:
    """The [batch, L, width] KV values of cache rows ``seen`` (bshd: row b*S_cap + s, a view; sbhd: s*batch + b)."""
    if layout == "bshd":
        return seen[: batch * S_cap].reshape(batch, S_cap, -1)[:, :L, :width]
    return seen[: S_cap * batch].reshape(S_cap, batch, -1)[:L, :, :width].transpose(1, 0, 2)


def make_inputs(
    cb: CaseBuilder, sp: Mapping[str, Any], req: Mapping[str, int], scale: float, probe: bool = False
) -> tuple[HbmTensor, HbmTensor, HbmTensor, F64, F64, F64]:
    """Place Q, K, V in the image; returns (q_t, k_t, v_t, Q, K, V) with Q/K/V the dequantized logical
    tensors: Q float64, K and V the read-only float32 values the device sees (exact; views where the layout
    allows, so a long KV cache is not held twice).  ``probe``: the last q head's Q is zero (the count probe,
    :func:`count_golden`; the other heads' values are the same as without it)."""
    B_, hq, hkv, d = sp["batch"], sp["hq"], sp["hkv"], sp["d"]
    S, L = sp["q_len"], sp["kv_len"]
    S_cap, Wp, layout = sp["kv_capacity"], sp["kv_row_elems"], sp["kv_layout"]
    q_host = cb.randn((B_, S, hq, d), scale)
    if probe:
        q_host[:, :, hq - 1] = 0.0  # the count probe (:func:`count_golden`): every score of the last head is 0
    q_host = q_host.reshape(B_ * S, hq * d)
    q_t, q_deq = cb.tensor("q", q_host, "act", alloc_elems=req["q"], shape=(B_, S, hq, d))
    Q = q_deq.reshape(B_, S, hq, d)
    n_rows = ceil_div(req["k"], Wp)
    cache_rows = B_ * S_cap
    out = []
    for name in ("k", "v"):
        full = np.zeros((n_rows, Wp))
        cb.randn_into(full[:cache_rows], scale)  # data, capacity junk and pad columns
        cb.fill_slack(full[cache_rows:])  # the plan's slack: finite random too (a key read past the cache shows)
        t, seen = cb.tensor(name, full, "kv", alloc_elems=n_rows * Wp, as_float64=False)
        del full
        X = _logical_kv(seen, layout, B_, S_cap, L, hkv * d).reshape(B_, L, hkv, d)
        cb.inputs[name] = X  # the logical [batch, kv_len, hkv, d] values the device saw (float32, exact)
        out.append((t, X))
    (k_t, K), (v_t, Vv) = out
    return q_t, k_t, v_t, Q, K, Vv


def count_golden(plan: fa.FlashPlan, allowed: npt.NDArray[np.bool_]) -> F64:
    """The softmax mass l of the count probe's rows in the plan's last block (its Q is zero: every score is 0,
    every allowed key has p = 1 exactly, m = 0): the number of allowed keys, as the kernel accumulates it.

    Within a split-KV chunk (:mod:`programs.flash_merge`) an f32 sum of each visited kv tile's ones is added to l
    and rounded to bf16 when l is stored (§3.7; masked keys give p ~ 6e-39, below an f32 ulp of l); states merge
    into their accumulator in the kernel's tree order, ``l = bf16(1 * l_acc + 1 * l_sub)`` (m = 0 everywhere, so
    both weights are exp(0) = 1 exactly; an empty accumulator's weight ~6e-39 meets l = 0).
    The model follows every rounding of the kernel, so the check is exact at any
    length; a single added or dropped key changes l wherever the chunk sum it lands in is below 256 or changes
    the rounding."""
    from plena_sim.numerics.bf16 import round_values
    from programs.flash.merge import Tree, chunk_tree

    blk = plan.last_block
    rows = allowed[blk.q0 : blk.q0 + blk.br]
    M = plan.config.MLEN

    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return round_values(a.astype(np.float32) + b.astype(np.float32))

    def mass(node: Tree) -> np.ndarray:
        acc = np.zeros(blk.br, dtype=np.float32)
        for ts in node.chunk:
            acc = add(acc, rows[:, ts.c0 : ts.c0 + M].sum(axis=1).astype(np.float32))
        for sub in node.subtrees:
            acc = add(acc, mass(sub))
        return acc

    if plan.merge_levels and len(blk.tiles) > plan.chunk_tiles:
        l_val = mass(chunk_tree(blk.tiles, plan.chunk_tiles, plan.merge_levels))
    else:
        l_val = mass(Tree(0, blk.tiles, ()))
    return l_val.astype(np.float64)


def allowed_mask(q_len: int, kv_len: int, causal: bool, rows: slice | None = None) -> np.ndarray:
    """Which keys each query row may see ``[q_len, kv_len]`` (causal: end-aligned), or only the rows ``rows``."""
    s = np.arange(q_len)[rows if rows is not None else slice(None)][:, None]
    c = np.arange(kv_len)[None, :]
    allowed = np.ones((s.shape[0], kv_len), dtype=bool)
    if causal:
        allowed &= c <= s + (kv_len - q_len)
    return allowed


#: elements of one query block's [rows, keys] temporaries in the goldens (a few of them live at once)
_BLOCK_ELEMS = 4 * 1024 * 1024


def _row_blocks(S: int, L: int) -> list[slice]:
    """The query rows in blocks whose [rows, L] temporaries hold about ``_BLOCK_ELEMS`` elements."""
    n = max(1, _BLOCK_ELEMS // max(L, 1))
    return [slice(r, min(r + n, S)) for r in range(0, S, n)]


def _scores(q: F64, Kh: F64, qk: float, out: F64) -> F64:
    """Scores of query rows ``q [r, d]`` against one head's keys ``Kh [L, d]`` into ``out [r, L]``."""
    np.matmul(q, Kh.T, out=out)
    out *= qk
    return out


def _attend(sc: F64, hidden: F64, Vh: F64) -> tuple[F64, F64, F64]:
    """(O, A = p@|V|, smax) of score rows ``sc [r, L]`` (``hidden``: 0 for a visible key, -inf for a masked one)."""
    p = np.abs(sc)
    p += hidden
    smax = np.maximum(p.max(axis=-1), 0.0)  # max |score| over the visible keys
    np.add(sc, hidden, out=p)
    p -= p.max(axis=-1, keepdims=True)
    np.exp(p, out=p)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ Vh, p @ np.abs(Vh), smax


def attention_output(
    Q: F64, K: F64, V: F64, qk: float, causal: bool, scores: F64 | None = None
) -> tuple[F64, F64, F64]:
    """float64 golden O [b,s,h,d], envelope A = p@|V| and smax_r [b,s,h], one (batch, head, block of query rows)
    at a time: the peak host memory is a few [rows, kv_len] temporaries of about 2^22 elements (no [s, c] matrix,
    no repeated K/V); every row is computed alone, so the blocks change no value. ``scores`` ([b,h,s,c]): filled
    with the scores too. Causal masks are end-aligned (the queries are the last s of the c positions)."""
    B_, S, hq, d = Q.shape
    L, hkv = K.shape[1], K.shape[2]
    ratio = hq // hkv
    O, A, smax = np.empty((B_, S, hq, d)), np.empty((B_, S, hq, d)), np.empty((B_, S, hq))
    blocks = [(r, np.where(allowed_mask(S, L, causal, r), 0.0, -np.inf)) for r in _row_blocks(S, L)]
    buf = np.empty((blocks[0][1].shape[0], L))
    for b in range(B_):
        for h in range(hq):
            Kh = K[b, :, h // ratio].astype(np.float64)
            Vh = V[b, :, h // ratio].astype(np.float64)
            for r, hidden in blocks:
                sc = buf[: hidden.shape[0]] if scores is None else scores[b, h, r]
                _scores(Q[b, r, h], Kh, qk, sc)
                O[b, r, h], A[b, r, h], smax[b, r, h] = _attend(sc, hidden, Vh)
    return O, A, smax


def attention_golden(
    Q: F64, K: F64, V: F64, qk: float, causal: bool
) -> tuple[F64, F64, F64, F64, npt.NDArray[np.bool_]]:
    """float64 golden O [b,s,h,d], envelope A = p@|V|, smax_r [b,s,h], scores [b,h,s,c], allowed [s,c]
    (:func:`attention_output` keeping every score)."""
    B_, S, hq, _d = Q.shape
    scores = np.empty((B_, hq, S, K.shape[1]))
    O, A, smax = attention_output(Q, K, V, qk, causal, scores)
    return O, A, smax, scores, allowed_mask(S, K.shape[1], causal)


def _states(sc: F64, al: npt.NDArray[np.bool_]) -> tuple[F64, F64]:
    """The running max m and softmax mass l of score rows ``sc [..., r, c]`` over the allowed keys ``al``."""
    m_g = np.where(al, sc, -np.inf).max(axis=-1)
    l_g = np.where(al, np.exp(sc - m_g[..., None]), 0.0).sum(axis=-1)
    return m_g, l_g


def state_goldens(plan: fa.FlashPlan, scores: F64, allowed: npt.NDArray[np.bool_]) -> tuple[F64, F64]:
    """The golden running max m and softmax mass l ``[head slot j, row r]`` of the plan's last processed
    (b, g, i, head batch) block (§5.2 flash_m / flash_l), from the golden scores ``[b, h, s, c]``."""
    blk = plan.last_block
    sc = scores[blk.b][list(blk.heads)][:, blk.q0 : blk.q0 + blk.br, :]  # [j, r, c]
    return _states(sc, allowed[blk.q0 : blk.q0 + blk.br][None])


def last_block_states(plan: fa.FlashPlan, Q: F64, K: F64, qk: float) -> tuple[F64, F64]:
    """:func:`state_goldens` computing only the last block's scores (``Q [b,s,h,d]``, ``K [b,c,hkv,d]``)."""
    blk = plan.last_block
    rows = slice(blk.q0, blk.q0 + blk.br)
    ratio = Q.shape[2] // K.shape[2]
    sc = np.empty((len(blk.heads), blk.br, K.shape[1]))
    for j, h in enumerate(blk.heads):
        _scores(Q[blk.b, rows, h], K[blk.b, :, h // ratio].astype(np.float64), qk, sc[j])
    return _states(sc, allowed_mask(Q.shape[1], K.shape[1], plan.causal, rows)[None])


def state_read(plan: fa.FlashPlan, kind: str, head: int | None = None) -> FpWords:
    """The FP SRAM state ``kind`` (``"m"``, ``"l"``) of the last block: ``[head slot j, row r]``, or with ``head`` (a
    global q head of the block) that head's ``[row r]``."""
    blk, F = plan.last_block, plan.fp_state_base
    slots = range(len(blk.heads)) if head is None else [list(blk.heads).index(head)]
    idx = np.array([[plan.state_words(j, r)[kind] - F for r in range(blk.br)] for j in slots])
    if head is not None:
        idx = idx[0]

    def post_state(x: np.ndarray) -> np.ndarray:
        return x[idx]

    return FpWords(F, plan.fp_state_size, post=post_state)


def _flash_setup(
    name: str, p: Mapping[str, Any], cfg: HardwareConfig
) -> tuple[CaseBuilder, dict[str, Any], dict[str, Any], dict[str, int]]:
    """(builder with the QK_SCALE constant, shape parameters, VRAM/FP/MRAM layout, HBM requirements) of a case."""
    p = resolve_params(p, cfg)
    V = cfg.VLEN
    sp = shape_params(p)
    cb = CaseBuilder(name, p, cfg)
    cb.set_fp(QK_SCALE=1.0 / math.sqrt(sp["d"]))
    base_row = big_base_row(cfg) if p.get("big_base") else int(p.get("vram_base_row", 0))
    o_blocks = ceil_div(sp["hq"] * sp["d"], V)
    rows_o_p = round_up(sp["batch"] * sp["q_len"], row_pad(cfg))
    layout = dict(
        o_base=base_row * V,
        scratch_base=(base_row + o_blocks * rows_o_p + 1) * V,
        fp_state_base=int(p.get("fp_state_base", 16)),
        mram_tile0=int(p.get("mram_tile0", 0)),
    )
    return cb, sp, layout, fa.hbm_requirements(cfg, **sp, **layout)


def build_flash_layout(name: str, p: Mapping[str, Any], config: HardwareConfig) -> Case:
    """The layout-only case of :func:`build_flash` (issue 30): the same program and HBM placements of Q, K and V,
    no values, no goldens (a timing-only run)."""
    cb, sp, layout, req = _flash_setup(name, p, config)
    cols = sp["hq"] * sp["d"]
    q_t, _ = cb.layout_tensor("q", max(sp["batch"] * sp["q_len"], ceil_div(req["q"], cols)), cols, "act")
    n_rows, Wp = ceil_div(req["k"], sp["kv_row_elems"]), sp["kv_row_elems"]
    k_t, _ = cb.layout_tensor("k", n_rows, Wp, "kv")
    v_t, _ = cb.layout_tensor("v", n_rows, Wp, "kv")
    plan = fa.plan_flash_attention(config, **sp, **layout, q=q_t, k=k_t, v=v_t)
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    fa.emit_flash_attention(asm, plan, gp=GEN_GP, fp=GEN_FP)
    return cb.case(asm, notes=f"{plan.describe()} (layout only)", plan=plan, layout_only=True)


def build_flash(name: str, p: Mapping[str, Any], config: HardwareConfig) -> Case:
    """Build one flash-attention case (prefill or decode) per kernels.md §4.4/§4.5."""
    cfg = config
    M = cfg.MLEN
    cb, sp, layout, req = _flash_setup(name, p, cfg)
    qk = cb.fp_value("QK_SCALE")
    probe = bool(p.get("count_probe", True)) and sp["hq"] >= 2
    q_t, k_t, v_t, Q, K, Vv = make_inputs(cb, sp, req, float(p.get("scale", 1.0)), probe)
    plan = fa.plan_flash_attention(cfg, **sp, **layout, q=q_t, k=k_t, v=v_t)
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    fa.emit_flash_attention(asm, plan, gp=GEN_GP, fp=GEN_FP)

    O, A, smax, scores, allowed = attention_golden(Q, K, Vv, qk, sp["causal"])
    Tk = ceil_div(sp["kv_len"], M)
    (ob, orows, ocols, opitch), post = plan.output_read()
    cb.check(
        "output",
        VramCbm(ob, orows, ocols, opitch, post=post),
        O,
        COORDS_O,
        "flash",
        A=A,
        group_by=("batch", "head"),
        smax_r=smax[..., None],
        Tk=Tk,
    )
    # FP state of the last processed (b, g, i, head batch) block (§5.2 flash_m / flash_l)
    m_g, l_g = state_goldens(plan, scores, allowed)
    cb.check("m", state_read(plan, "m"), m_g, ("head", "row"), "flash_m")
    cb.check("l", state_read(plan, "l"), l_g, ("head", "row"), "flash_l", Tk=Tk)
    if probe:  # the probe head is the last one: in the last block
        counts = count_golden(plan, allowed)
        cb.check("l_count", state_read(plan, "l", head=sp["hq"] - 1), counts, ("row",), "exact")
    return cb.case(asm, notes=f"{plan.describe()} dyn={plan.dynamic_instructions}", plan=plan)


def build_scores(name: str, p: Mapping[str, Any], config: HardwareConfig) -> Case:
    """Build one attention_scores (QKᵀ) case (§2.11, §4.4 flashattn_qkt)."""
    cfg = config
    p = resolve_params(p, cfg)
    M = cfg.MLEN
    sp = shape_params(p)
    sp["causal"] = False
    cb = CaseBuilder(name, p, cfg)
    B_, hq, S, L = sp["batch"], sp["hq"], sp["q_len"], sp["kv_len"]
    Tq, Tk = ceil_div(S, M), ceil_div(L, M)
    base_row = big_base_row(cfg) if p.get("big_base") else int(p.get("vram_base_row", 0))
    n_out = B_ * hq * Tq * Tk * M
    s_out = base_row * cfg.VLEN
    scratch_base = (base_row + n_out + 1) * cfg.VLEN
    layout = dict(s_out=s_out, scratch_base=scratch_base, mram_tile0=int(p.get("mram_tile0", 0)))
    req = fa.hbm_requirements(cfg, kernel="attention_scores", **sp, **layout)
    q_t, k_t, v_t, Q, K, _V = make_inputs(cb, sp, req, float(p.get("scale", 1.0)))
    plan = fa.plan_attention_scores(cfg, **sp, **layout, q=q_t, k=k_t)
    cb.add_regions(plan.vram_regions)
    asm = cb.asm()
    fa.emit_attention_scores(asm, plan, gp=GEN_GP, fp=GEN_FP)
    ratio = hq // sp["hkv"]
    Kr = np.repeat(K.astype(np.float64), ratio, axis=2)
    golden = np.einsum("bshk,bchk->bhsc", Q, Kr)
    A = np.einsum("bshk,bchk->bhsc", np.abs(Q), np.abs(Kr))

    V = cfg.VLEN

    def post(x: np.ndarray) -> np.ndarray:
        out = np.empty((B_, hq, S, L), dtype=x.dtype)
        for b in range(B_):
            for h in range(hq):
                for i in range(Tq):
                    br = min(M, S - i * M)
                    for tt in range(Tk):
                        bc = min(M, L - tt * M)
                        r0 = (plan.scores_tile_addr(b, h, i, tt) - s_out) // V  # the plan's tile map
                        out[b, h, i * M : i * M + br, tt * M : tt * M + bc] = x[r0 : r0 + br, :bc]
        return out

    cb.check(
        "scores",
        VramRows(s_out, n_out, post=post),
        golden,
        ("batch", "head", "row", "col"),
        "qkt",
        A=A,
        group_by=("batch", "head"),
    )
    return cb.case(asm, notes=f"{plan.describe()} dyn={plan.dynamic_instructions}", plan=plan)
