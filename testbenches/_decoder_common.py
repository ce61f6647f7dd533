"""Shared case construction of the model-layer testbenches ``decoder_layer`` and ``decoder_decode``.

Inputs (the values the machine uses, dequantized): ``x [tokens, hidden]``, ``gamma_attn``/``gamma_ffn
[hidden]``, weights as ``(in, out)`` (``y = x @ W``): ``wq [hidden, heads*d]``, ``wk``/``wv [hidden,
kv_heads*d]``, ``wo [heads*d, hidden]``, ``wg``/``wu [hidden, ffn]``, ``wd [ffn, hidden]``, and the RoPE tables
``cos``/``sin [tokens, d]`` (HF ``rotate_half`` convention, ``theta^(-2i/d)``); decode also ``k_cache``/``v_cache
[batch, kv, kv_heads, d]`` (the cache before the step). Tokens are ``b*seq + s``.

A mixture-of-experts layer (``experts``/``top_k`` > 0, a V_TOPK policy) has the routed-MoE FFN: the router ``wr
[hidden, experts]`` and the stacked experts, of which only the ``2*top_k`` *live* ones (input ``experts``: their
ids, always the first and the last expert among them) hold data: inputs ``wg``/``wu [live, hidden, ffn]``, ``wd
[live, ffn, hidden]``; the other experts' rows are zeros no page holds (the HBM is sparse), so a real model's
expert stack costs the host only its live experts. The router pairs the live experts: pair ``j`` has ``+c_j`` and
``-c_j`` (``c_j = ±2^u``, u in -1..1) at one xn2 row ``rho_j`` (distinct rows), every other column is zero. So
every logit is a power of two times one bf16 xn2 element -- the bf16 logits the machine stores are exact, whatever
xn2 holds -- and a token selects exactly one expert of every pair (the positive one; ties follow V_TOPK's rule on
both sides, a zero xn2 element makes a pair tie with the dead experts' zero logits and may select one of those: a
zero expert, judged as such).

Judging (each stage on the values its inputs held in the machine, so every stage gets its own tight
tolerance row of :mod:`.compare`; the golden follows the hardware's quantization points because its inputs
*are* the hardware's bf16 SRAM and MX HBM values): attention norm (rms), Q/K/V projections (linear), RoPE
(rope), the MX stores of Q/K/V to HBM (exact: the MX encoding of the machine's VRAM values), attention
(flash, from the HBM Q and cache), O projection (linear), residual (exact bf16 sum), FFN norm (rms), FFN (ffn),
residual (exact): the layer output is the first check. A MoE layer's FFN stage is judged like ``moe_layer``,
from the machine's xn2: ``router_logits`` exact (xn2 @ Wr), ``router_indices`` exact and ``router_weights``
(``topk``) -- the top-k of those exact logits, for the tokens of the last routing chunk (the SRAMs hold one
chunk) -- and ``ffn`` (the combined output) with the ``moe`` row from the selected experts' float64 SwiGLU.
``output_f64`` compares the output with a float64
evaluation of the whole layer from the same inputs with no intermediate rounding (relative RMS bound 5 %,
the ``layer_f64`` row): the numerical cost of the data path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from plena_sim.config import HardwareConfig, MxType
from plena_sim.machine import Machine
from plena_sim.numerics.formats import decode_tensor, encode_tensor
from programs.asm import Asm
from programs.common import round_up, rp
from programs.hbm_tensors import HbmTensor
from programs.model.chunking import resolve_chunk
from programs.model.decoder import (
    TENSOR_CLASS,
    LayerPlan,
    LayerShape,
    emit_decoder_layer,
    layer_hbm_needs,
    plan_decoder_layer,
)
from programs.rope import rope_rotation_tile

from ._flashattn_common import _logical_kv, attention_output, last_block_states, state_read
from .compare import Tolerance, abs_matmul, bf16_decode, bf16_encode, moe_bound, tolerance
from .harness import GEN_FP, GEN_GP, Case, CaseBuilder, Derived, FpWords, IntWords, Readback, VramCbm
from .moe_layer import expert_outputs
from .moe_topk import golden_topk
from .rope import rotate_half
from .shapes import hw, resolve_params

F64 = npt.NDArray[np.float64]

#: the layer dimensions every model-layer testbench takes (a model preset's keys)
DIMS = {
    "hidden": hw(2, "MLEN"),
    "heads": 4,
    "kv_heads": 2,
    "head_dim": hw(1, "MLEN", div=2),
    "ffn": hw(4, "MLEN"),
    "rope_theta": 10000.0,
    "rms_eps": 1e-5,
    "experts": 0,
    "top_k": 0,
}
_WEIGHTS = ("wq", "wk", "wv", "wo", "wg", "wu", "wd")
_EXPERT_WEIGHTS = ("wg", "wu", "wd")


def shape_of(p: Mapping[str, Any], cfg: HardwareConfig, decode: bool) -> LayerShape:
    keys = ("hidden", "heads", "kv_heads", "head_dim", "ffn", "experts", "top_k")
    dims = {k: p[k] for k in keys}
    B = p["batch"]
    if not decode:
        return LayerShape(B, p["seq"], p["seq"], **dims, decode=False, kv_capacity=p["seq"])
    L = p["kv"]
    extra = -(-rp(cfg, B) // B)  # the store writes rp(batch) rows from position L (sbhd: B rows per position)
    return LayerShape(B, 1, L + 1, **dims, decode=True, kv_capacity=L + extra)


def _silu(x: F64) -> F64:
    return x / (1.0 + np.exp(-x))


def rms(x: F64, gamma: F64, eps: float, inv_hidden: float) -> F64:
    return x / np.sqrt((x * x).sum(axis=1, keepdims=True) * inv_hidden + eps) * gamma


def rope(x: F64, cos: F64, sin: F64, d: int) -> tuple[F64, F64]:
    """RoPE of every head of ``x [T, nh*d]`` with ``cos``/``sin [T, d]``; returns (y, envelope A)."""
    nh = x.shape[1] // d
    c, s = np.tile(cos, (1, nh)), np.tile(sin, (1, nh))
    xr = rotate_half(x, d)
    return x * c + xr * s, np.abs(x) * np.abs(c) + np.abs(xr) * np.abs(s)


def bf16_sum(a: F64, b: F64) -> F64:
    """The device's V_ADD_VV: f32 sum of bf16 operands, rounded to bf16."""
    return bf16_decode(bf16_encode(a.astype(np.float32) + b.astype(np.float32))).astype(np.float64)


class HbmRows:
    """Rows ``[row0, row0+rows)`` of an MX (or plain) tensor in the machine's HBM, decoded to float32."""

    def __init__(self, base: int, scale_offset: int, row0: int, rows: int, cols: int, t: Any) -> None:
        self.base, self.scale_offset, self.row0, self.rows, self.cols, self.t = base, scale_offset, row0, rows, cols, t

    def read(self, machine: Machine) -> np.ndarray:
        t, n = self.t, self.rows * self.cols
        eb = t.elem_bytes
        elem = machine.hbm.read(self.base + self.row0 * self.cols * eb, n * eb)
        scale = None
        if isinstance(t, MxType):
            sb = t.scale_bytes
            s0 = self.base + self.scale_offset + (self.row0 * self.cols // t.block) * sb
            scale = machine.hbm.read(s0, (n // t.block) * sb)
        return decode_tensor(np.asarray(elem), None if scale is None else np.asarray(scale), t, (self.rows, self.cols))


def mx_roundtrip(values: np.ndarray, t: Any) -> F64:
    """What a store of ``values`` (float32 rows) into type ``t`` reads back as."""
    v = np.ascontiguousarray(values, dtype=np.float32)
    elem, scale, _counts = encode_tensor(v, t)
    return decode_tensor(elem, scale, t, v.shape).astype(np.float64)


class _Inputs:
    """The layer's inputs as the machine sees them (float64) and the HBM tensors holding them."""

    def __init__(self, cb: CaseBuilder, cfg: HardwareConfig, s: LayerShape, p: Mapping[str, Any]) -> None:
        self.cb, self.cfg, self.s = cb, cfg, s
        self.needs = layer_hbm_needs(cfg, s)
        self.tensors: dict[str, Any] = {}
        self.v: dict[str, F64] = {}
        self.live = np.zeros(0, dtype=np.int64)  # the live experts of a MoE layer
        H, T, d = s.hidden, s.tokens, s.head_dim
        self.put("x", cb.randn((T, H), float(p["scale"])), "act")
        for g in ("gamma_attn", "gamma_ffn"):
            gam = 1.0 + 0.25 * cb.randn(H)
            self.put(g, gam.reshape(-1, cfg.VLEN), "act", shape=(H,))
        fan = {"wq": H, "wk": H, "wv": H, "wo": s.q_width, "wg": H, "wu": H, "wd": s.ffn}
        for w in _WEIGHTS:
            if s.moe and w in _EXPERT_WEIGHTS:
                continue
            rows, cols = self.needs[w]
            vals = np.zeros((rows, cols))
            used = s.kv_heads * d if w in ("wk", "wv") else cols
            vals[:, :used] = cb.randn((rows, used), 1.0 / np.sqrt(fan[w]))
            self.put(w, vals, "weight")
        self.rope_tables(p)
        if "rot" in self.needs:
            self.put("rot", rope_rotation_tile(d, cfg.MLEN), "weight")
        if s.moe:
            self.moe()
        self.put("q", np.zeros(self.needs["q"]), "act", writable=True)
        self.caches()
        if "out" in self.needs:  # a chunked prefill's output rows
            self.put("out", np.zeros(self.needs["out"]), "act", writable=True)
            del cb.inputs["out"]
        for w in ("wk", "wv"):
            self.v[w] = self.v[w][:, : s.kv_heads * d]
            cb.inputs[w] = cb.inputs[w][:, : s.kv_heads * d]
        del cb.inputs["q"]
        assert list(self.tensors) == tensor_order(s, self.needs), "build_layout places the tensors in this order"

    def put(
        self, name: str, values: F64, cls: str, *, shape: tuple[int, ...] | None = None, writable: bool = False
    ) -> HbmTensor:
        rows, cols = self.needs[name]
        assert cls == TENSOR_CLASS[name], f"{name}: class {cls}, the layer's is {TENSOR_CLASS[name]}"
        t, deq = self.cb.tensor(name, values, cls, alloc_rows=rows, shape=shape, writable=writable, bind=False)
        assert t.row_pitch_elems == cols, f"{name}: {t.row_pitch_elems} columns placed, {cols} planned"
        self.tensors[name] = (t, self.cb.tensors[name].base)
        self.v[name] = deq.reshape(shape) if shape else deq
        return t

    def moe(self) -> None:
        """The router and the stacked experts (see the module docstring): random data in the live experts only."""
        cb, s = self.cb, self.s
        E, k, H, F = s.experts, s.top_k, s.hidden, s.ffn
        inner = 1 + cb.rng.choice(E - 2, 2 * k - 2, replace=False)  # with the first and the last expert
        self.live = np.sort(np.concatenate([[0, E - 1], inner]))
        pairs = cb.rng.permutation(self.live).reshape(k, 2)
        rows = cb.rng.choice(H, k, replace=False)
        c = cb.rng.choice([-1.0, 1.0], k) * 2.0 ** cb.rng.integers(-1, 2, k)
        wr = np.zeros(self.needs["wr"])
        wr[rows, pairs[:, 0]], wr[rows, pairs[:, 1]] = c, -c
        self.put("wr", wr, "weight")
        assert np.array_equal(self.v["wr"], wr), "the router weights must be MX-exact"
        self.v["wr"] = wr[:, :E]
        cb.inputs["wr"] = cb.inputs["wr"][:, :E]
        for name, (n, cols) in zip(_EXPERT_WEIGHTS, ((H, F), (H, F), (F, H)), strict=True):
            blocks = ((int(e) * n, cb.randn((n, cols), 1.0 / np.sqrt(n))) for e in self.live)
            t, vals = cb.sparse_tensor(name, E * n, cols, "weight", blocks)
            assert (t.row_pitch_elems, t.alloc_elems) == (self.needs[name][1], np.prod(self.needs[name]))
            self.tensors[name] = (t, cb.tensors[name].base)
            cb.inputs[name] = np.stack(vals)  # [live, n, cols]
            del vals
        cb.inputs["experts"] = self.live.astype(np.int64)

    def expert(self, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Expert ``e``'s (Wg, Wu, Wd) as the machine holds them (zeros for an expert that is not live)."""
        i = int(np.searchsorted(self.live, e))
        if i < self.live.size and self.live[i] == e:
            wg, wu, wd = (self.cb.inputs[w][i] for w in _EXPERT_WEIGHTS)
            return wg, wu, wd
        H, F = self.s.hidden, self.s.ffn
        return np.zeros((H, F)), np.zeros((H, F)), np.zeros((F, H))

    def rope_tables(self, p: Mapping[str, Any]) -> None:
        s, d = self.s, self.s.head_dim
        pos0 = (s.kv_len - 1) if s.decode else int(p.get("pos0", 0))
        pos = np.tile(pos0 + np.arange(s.seq), s.batch)[:, None]  # token b*seq + i at position pos0 + i
        inv = float(p["rope_theta"]) ** (-np.arange(0, d, 2) / d)
        ang = np.concatenate([pos * inv, pos * inv], axis=1)
        tables = {}
        for kind, fn in (("cos", np.cos), ("sin", np.sin)):
            base = fn(ang)
            for which, cols in (("q", s.q_width), ("k", s.kv_width(self.cfg))):
                self.put(f"{kind}_{which}", np.tile(base, (1, cols // d)), "act")
                tables[which] = self.v[f"{kind}_{which}"][: s.tokens]
                del self.cb.inputs[f"{kind}_{which}"]
            per_head = tables["q"][:, :d]
            for which, tab in tables.items():  # every head's copy quantizes alike (MX blocks never span a row)
                assert np.array_equal(tab, np.tile(per_head, (1, tab.shape[1] // d))), f"{kind}_{which} per head"
            self.v[kind] = per_head
            self.cb.inputs[kind] = per_head.astype(np.float32)

    def caches(self) -> None:
        """K/V caches of random finite data (a position the layer should write but does not stays junk); decode
        reads the prefix ``[0, kv-1)`` as the cache."""
        s, cfg = self.s, self.cfg
        rows, cols = self.needs["k_cache"]
        for name in ("k_cache", "v_cache"):
            full = self.cb.randn((rows, cols))
            t = self.put(name, full, "kv")
            self.cb.writable += cache_writable(cfg, s, t, self.cb.tensors[name].base)
            if s.decode:
                width = s.kv_heads * s.head_dim
                prefix = _logical_kv(self.v[name], "sbhd", s.batch, s.kv_capacity, s.kv_len - 1, width)
                self.cb.inputs[name] = prefix.reshape(s.batch, s.kv_len - 1, s.kv_heads, s.head_dim)
            else:
                del self.cb.inputs[name]


def tensor_order(s: LayerShape, needs: Mapping[str, Any]) -> list[str]:
    """The order the layer's tensors are placed in HBM in (build and build_layout alike)."""
    dense = [w for w in _WEIGHTS if not (s.moe and w in _EXPERT_WEIGHTS)]
    tables = [f"{kind}_{which}" for kind in ("cos", "sin") for which in ("q", "k")]
    rot = ["rot"] if "rot" in needs else []
    moe = ["wr", *_EXPERT_WEIGHTS] if s.moe else []
    out = ["out"] if "out" in needs else []
    return ["x", "gamma_attn", "gamma_ffn", *dense, *tables, *rot, *moe, "q", "k_cache", "v_cache", *out]


def cache_writable(cfg: HardwareConfig, s: LayerShape, t: HbmTensor, base: int) -> list[tuple[int, int]]:
    """The byte ranges of a K/V cache (byte base ``base``) the layer's stores write: each pass's rows and their
    MX scales."""
    cols, kv_type = t.row_pitch_elems, cfg.hbm_type("HBM_M_KV_TYPE")
    out = []
    for lo, hi in s.kv_store_rows(cfg):
        out.append((base + lo * cols * t.eb, base + hi * cols * t.eb))
        if isinstance(kv_type, MxType):  # and the rows' MX scales
            sb, s0 = kv_type.scale_bytes, base + t.scale_offset
            out.append((s0 + lo * cols // t.block * sb, s0 + hi * cols // t.block * sb))
    return out


def _read(plan: LayerPlan, buf: str, cols: int) -> VramCbm:
    """A stage output in VRAM: the last pass's tokens."""
    return VramCbm(plan.cbm(buf), plan.part.tokens, cols, plan.pitch)


class _Judge:
    """Adds every stage's check to the case builder (goldens derived from the machine after the run)."""

    def __init__(self, cb: CaseBuilder, plan: LayerPlan, ins: _Inputs) -> None:
        self.cb, self.plan, self.ins, self.s, self.cfg = cb, plan, ins, plan.shape, plan.cfg
        self.eps, self.invh = cb.fp_value("EPS"), cb.fp_value("INV_HIDDEN")
        self.qk = cb.fp_value("QK_SCALE")
        self.nb = self.s.hidden // self.cfg.VLEN
        self.part = plan.part  # the pass whose stage outputs VRAM holds at the end (the last chunk)
        self.rows = slice(self.part.row0, self.part.row0 + self.part.tokens)  # its token rows

    def derived(self, name: str, rd: Readback, coords: tuple[str, ...], tol: str, fn: Callable[..., Derived]) -> None:
        self.cb.check(name, rd, None, coords, tol, derive=fn, nb=self.nb)

    def vram(self, buf: str, cols: int) -> Callable[[Machine], F64]:
        rd = _read(self.plan, buf, cols)
        return lambda m: rd.read(m).astype(np.float64)

    def add_all(self) -> None:
        s, H, Nq, Nk = self.s, self.s.hidden, self.s.q_width, self.s.kv_width(self.cfg)
        x, v = self.ins.v["x"][self.rows], self.ins.v
        rc = ("row", "col")
        h1, d_out = self.vram("h1", H), self.vram("d", H)
        if s.chunk:  # every token's output, in HBM: against the layer in float64 (the last chunk's stages below)
            self.cb.check("output", self.hbm_rows("out", 0, s.tokens), reference_f64(self.ins), rc, "layer_f64")
        last = "ffn_residual" if s.chunk else "output"
        self.derived(last, _read(self.plan, "out", H), rc, "exact", lambda m: (bf16_sum(h1(m), d_out(m)), None, None))
        if s.chunk:
            self.store_check("out", "out", H, self.part.row0)
        xn1 = self.vram("xn1", H)
        gx = rms(x, v["gamma_attn"], self.eps, self.invh)
        self.cb.check("attn_norm", _read(self.plan, "xn1", H), gx, rc, "rms", nb=self.nb)
        for w, buf, cols in (("wq", "q", Nq), ("wk", "k", Nk), ("wv", "v", Nk)):
            self.linear(f"{buf}_proj", buf, cols, xn1, w)
        for buf, src, cols in (("qr", "q", Nq), ("kr", "k", Nk)):
            self.rope(buf, self.vram(src, cols), cols)
        self.stores()
        self.attention()
        o = self.vram("o", Nq)
        self.linear("o_proj", "attn", H, o, "wo")
        attn = self.vram("attn", H)
        self.derived(
            "attn_residual", _read(self.plan, "h1", H), rc, "exact", lambda m: (bf16_sum(x, attn(m)), None, None)
        )
        g2 = v["gamma_ffn"]
        self.derived(
            "ffn_norm",
            _read(self.plan, "xn2", H),
            rc,
            "rms",
            lambda m: (rms(h1(m), g2, self.eps, self.invh), None, None),
        )
        self.ffn()
        if not s.chunk:
            self.cb.check("output_f64", _read(self.plan, "out", H), reference_f64(self.ins), rc, "layer_f64")

    def linear(self, name: str, buf: str, cols: int, src: Callable[[Machine], F64], w: str) -> None:
        W = np.zeros((self.ins.v[w].shape[0], cols))
        W[:, : self.ins.v[w].shape[1]] = self.ins.v[w]
        stage = self.plan.stage("o_proj" if w == "wo" else "qkv_proj")
        n_chunks = len(stage.plans[w].chunks)

        def fn(m: Machine) -> Derived:
            xm = src(m)
            return xm @ W, abs_matmul(xm, W), tolerance("linear", n_chunks=n_chunks)

        self.derived(name, _read(self.plan, buf, cols), ("row", "col"), "linear", fn)

    def rope(self, buf: str, src: Callable[[Machine], F64], cols: int) -> None:
        cos, sin, d = self.ins.v["cos"][self.rows], self.ins.v["sin"][self.rows], self.s.head_dim

        def fn(m: Machine) -> Derived:
            y, A = rope(src(m), cos, sin, d)
            return y, A, None

        self.derived(f"{buf}_rope", _read(self.plan, buf, cols), ("row", "col"), "rope", fn)

    def hbm_rows(self, tensor: str, row0: int, rows: int) -> HbmRows:
        t, base = self.ins.tensors[tensor]
        cls = "HBM_V_KV_TYPE" if TENSOR_CLASS[tensor] == "kv" else "HBM_V_ACT_TYPE"
        return HbmRows(base, t.scale_offset, row0, rows, t.row_pitch_elems, self.cfg.hbm_type(cls))

    def stores(self) -> None:
        s, Nq, Nk, part = self.s, self.s.q_width, self.s.kv_width(self.cfg), self.part
        kv_row = part.b * s.kv_capacity + part.kv_row
        for tensor, buf, cols, row0 in (("q", "qr", Nq, part.row0), ("k_cache", "kr", Nk, kv_row)):
            self.store_check(tensor, buf, cols, row0)
        self.store_check("v_cache", "v", Nk, kv_row)

    def store_check(self, tensor: str, buf: str, cols: int, row0: int) -> None:
        """The HBM rows a store wrote from the pass's VRAM rows (``out_store`` for the output)."""
        rd = self.hbm_rows(tensor, row0, self.part.tokens)
        src = self.vram(buf, cols)
        t = rd.t
        self.derived(
            f"{buf}_store" if tensor == "out" else f"{tensor}_store",
            rd,
            ("row", "col"),
            "exact",
            lambda m: (mx_roundtrip(src(m), t), None, None),
        )

    def attention(self) -> None:
        s, cfg, fp, part = self.s, self.cfg, self.plan.attention, self.part
        Nk, width = s.kv_width(cfg), s.kv_heads * s.head_dim
        q_rd = self.hbm_rows("q", part.row0, part.tokens)
        kv0, kv_rows = part.b * s.kv_capacity, part.batch * s.kv_capacity  # the pass's sequences' cache rows
        caches = {n: self.hbm_rows(n, kv0, kv_rows) for n in ("k_cache", "v_cache")}
        B, S, hq, hkv, d = part.batch, part.q_len, s.heads, s.kv_heads, s.head_dim
        Tk = -(-part.kv_len // cfg.MLEN)
        (ob, orows, ocols, opitch), post = fp.output_read()

        def inputs(m: Machine) -> tuple[F64, list[np.ndarray]]:
            """The Q and the caches the machine holds (the pass's queries, keys up to its last position)."""
            Q = q_rd.read(m).astype(np.float64)[:, : hq * d].reshape(B, S, hq, d)
            kv = []
            for n in ("k_cache", "v_cache"):
                rows = caches[n].read(m)[:, :Nk]
                kv.append(_logical_kv(rows, s.kv_layout, B, s.kv_capacity, part.kv_len, width).reshape(B, -1, hkv, d))
            return Q, kv

        def golden(m: Machine) -> tuple[F64, F64, F64, F64, F64]:
            """O, A, smax and the last block's m, l (computed once per run)."""
            if memo.get("machine") is not m:
                Q, (K, V) = inputs(m)
                memo.update(
                    machine=m, golden=(*attention_output(Q, K, V, self.qk, True), *last_block_states(fp, Q, K, self.qk))
                )
            return memo["golden"]

        def fn(m: Machine) -> Derived:
            O, A, smax, _m, _l = golden(m)
            return O, A, tolerance("flash", smax_r=smax[..., None], Tk=Tk)

        def state(kind: int, tol: Tolerance) -> Callable[[Machine], Derived]:
            return lambda m: (golden(m)[3 + kind], None, tol)

        memo: dict[str, Any] = {}
        self.cb.check(
            "attention",
            VramCbm(ob, orows, ocols, opitch, post=post),
            None,
            ("batch", "row", "head", "col"),
            "flash",
            derive=fn,
            group_by=("batch", "head"),
        )
        # the running max m and softmax mass l of the last block, in FP SRAM after the whole layer (§5.2), unless a
        # later stage reuses the state's words (a MoE router's top-k weights)
        a0, an = fp.fp_state_base, fp.fp_state_size
        if any(lo < a0 + an and a0 < lo + n for st, (lo, n) in self.plan.fp_sram.items() if st != "attention"):
            return
        m_tol, l_tol = tolerance("flash_m"), tolerance("flash_l", Tk=Tk)
        self.cb.check("attention_m", state_read(fp, "m"), None, ("head", "row"), m_tol, derive=state(0, m_tol))
        self.cb.check("attention_l", state_read(fp, "l"), None, ("head", "row"), l_tol, derive=state(1, l_tol))

    def moe(self) -> None:
        """The MoE FFN stage from the machine's xn2: router logits, top-k, the combined expert outputs."""
        s, H, ins = self.s, self.s.hidden, self.ins
        plan = self.plan.stage("ffn").plans["moe"]
        E, k, Wr = s.experts, s.top_k, ins.v["wr"]
        xn2 = self.vram("xn2", H)

        def routing(m: Machine) -> tuple[F64, np.ndarray, F64]:
            logits = xn2(m) @ Wr
            return (logits, *golden_topk(logits, k))

        lg = plan.router
        logits_rd = VramCbm(lg.y_base, self.part.tokens, lg.N, lg.y_pitch, post=lambda a: a[:, :E])
        self.derived("router_logits", logits_rd, ("token", "expert"), "exact", lambda m: (routing(m)[0], None, None))
        last = plan.topk[-1]  # the routing chunk the SRAMs still hold
        sl, n = slice(last.row0, last.row0 + last.T), last.T

        def per_token(a: np.ndarray, n: int = n) -> np.ndarray:
            return a.reshape(n, k)

        rd_i, rd_w = IntWords(plan.int_out, n * k, post=per_token), FpWords(plan.fp_out, n * k, post=per_token)
        self.derived("router_indices", rd_i, ("token", "rank"), "exact", lambda m: (routing(m)[1][sl], None, None))
        self.derived("router_weights", rd_w, ("token", "rank"), "topk", lambda m: (routing(m)[2][sl], None, None))

        def combined(m: Machine) -> Derived:
            _lg, idx, w = routing(m)
            f, A = expert_outputs(xn2(m), idx, ins.expert)
            bound, rho = moe_bound(w, f, A)
            return np.einsum("tr,trc->tc", w, f), bound, tolerance("moe", rho=rho)

        self.derived("ffn", _read(self.plan, "d", H), ("row", "col"), "moe", combined)

    def ffn(self) -> None:
        if self.s.moe:
            self.moe()
            return
        H, v = self.s.hidden, self.ins.v
        xn2 = self.vram("xn2", H)

        def fn(m: Machine) -> Derived:
            xm = xn2(m)
            g, u = xm @ v["wg"], xm @ v["wu"]
            return (_silu(g) * u) @ v["wd"], abs_matmul(np.abs(g) * np.abs(u), v["wd"]), None

        self.derived("ffn", _read(self.plan, "d", H), ("row", "col"), "ffn", fn)


def reference_f64(ins: _Inputs) -> F64:
    """The layer in float64 from the machine's inputs, with no intermediate rounding (exact constants)."""
    s, v = ins.s, ins.v
    p = ins.cb.params
    B, S, hq, hkv, d = s.batch, s.seq, s.heads, s.kv_heads, s.head_dim
    eps, invh = float(p["rms_eps"]), 1.0 / s.hidden
    x = v["x"][: s.tokens]
    xn = rms(x, v["gamma_attn"], eps, invh)
    q, _ = rope(xn @ v["wq"], v["cos"], v["sin"], d)
    k, _ = rope(xn @ v["wk"], v["cos"], v["sin"], d)
    val = xn @ v["wv"]
    K, V = k.reshape(B, S, hkv, d), val.reshape(B, S, hkv, d)
    if s.decode:
        K = np.concatenate([ins.cb.inputs["k_cache"].astype(np.float64), K], axis=1)
        V = np.concatenate([ins.cb.inputs["v_cache"].astype(np.float64), V], axis=1)
    O, _A, _smax = attention_output(q.reshape(B, S, hq, d), K, V, 1.0 / np.sqrt(d), True)
    h1 = x + O.reshape(s.tokens, hq * d) @ v["wo"]
    xn2 = rms(h1, v["gamma_ffn"], eps, invh)
    if s.moe:
        idx, w = golden_topk(xn2 @ v["wr"], s.top_k)
        f, _A = expert_outputs(xn2, idx, ins.expert)
        return h1 + np.einsum("tr,trc->tc", w, f)
    return h1 + (_silu(xn2 @ v["wg"]) * (xn2 @ v["wu"])) @ v["wd"]


def _start(
    name: str, params: Mapping[str, Any], config: HardwareConfig, decode: bool
) -> tuple[LayerShape, CaseBuilder]:
    """The shape (its chunk resolved: a shape that cannot fit is refused here, before any input) and the case
    builder with the FP constants."""
    p = resolve_params(params, config)
    s = resolve_chunk(config, shape_of(p, config, decode), p.get("chunk"), keep=True)
    p["positions"] = f"{s.kv_len - 1}" if decode else f"{int(p.get('pos0', 0))}..{int(p.get('pos0', 0)) + s.seq - 1}"
    cb = CaseBuilder(name, p, config)
    cb.set_fp(EPS=float(p["rms_eps"]), INV_HIDDEN=1.0 / s.hidden, QK_SCALE=1.0 / np.sqrt(s.head_dim))
    return s, cb


def _program(cb: CaseBuilder, s: LayerShape, tensors: Mapping[str, Any], loops: bool) -> tuple[LayerPlan, Asm]:
    """The plan, the VRAM regions it declares and the program (param ``linear_path``: the linears' form)."""
    path = str(cb.params.get("linear_path", "auto"))
    plan = plan_decoder_layer(cb.cfg, s, tensors, loops=loops, region_prefix="layer", linear_path=path)
    for names, r0, n in _merged(plan):  # buffers live at different times may share rows: one region each span
        cb.region(names, r0, n, "output")
    asm = cb.asm()
    emit_decoder_layer(asm, plan, gp=GEN_GP, fp=GEN_FP)
    return plan, asm


def work_budget(cfg: HardwareConfig, s: LayerShape) -> int:
    """The run's work budget (plena_sim.limits.budget): a runaway guard, generous for the layer's size (8 x the
    units of its MACs on rows rounded up to MLEN, plus 10^9 for the instructions and DMA rows)."""
    from plena_sim.limits.budget import MACS_PER_UNIT

    return 10**9 + 8 * s.macs(lambda n: round_up(n, cfg.MLEN)) // MACS_PER_UNIT


def _notes(s: LayerShape, plan: LayerPlan) -> str:
    chunk = f" chunk={s.chunk} passes={len(plan.passes)}" if s.chunk else ""
    return f"tokens={s.tokens} kv_len={s.kv_len} P={plan.pitch}{chunk}"


def build_layer(name: str, params: Mapping[str, Any], config: HardwareConfig, *, decode: bool) -> Case:
    s, cb = _start(name, params, config, decode)
    ins = _Inputs(cb, config, s, cb.params)
    plan, asm = _program(cb, s, ins.tensors, bool(cb.params.get("loops", True)))
    _Judge(cb, plan, ins).add_all()
    return cb.case(asm, notes=_notes(s, plan), plan=plan, max_instructions=work_budget(config, s))


def build_layer_layout(name: str, params: Mapping[str, Any], config: HardwareConfig, *, decode: bool) -> Case:
    """:func:`build_layer`'s program and HBM layout without values, goldens or checks (a layout-only case: every
    tensor placed where the build places it, no byte written; issue 30's timing-only runs)."""
    s, cb = _start(name, params, config, decode)
    needs = layer_hbm_needs(config, s)
    tensors: dict[str, tuple[HbmTensor, int]] = {}
    for tname in tensor_order(s, needs):
        rows, cols = needs[tname]
        t, pl = cb.layout_tensor(tname, rows, cols, TENSOR_CLASS[tname], bind=False, writable=tname in ("q", "out"))
        if tname in ("k_cache", "v_cache"):
            cb.writable += cache_writable(config, s, t, pl.base)
        tensors[tname] = (t, pl.base)
    plan, asm = _program(cb, s, tensors, bool(cb.params.get("loops", True)))
    return cb.case(asm, layout_only=True, plan=plan, notes=_notes(s, plan), max_instructions=work_budget(config, s))


def _merged(plan: LayerPlan) -> list[tuple[str, int, int]]:
    """The layout's buffers as disjoint row spans ``(names, first row, rows)`` (buffers that are never live at
    the same time share rows; a span holds every buffer that overlaps it)."""
    spans = sorted((b.row0, b.end, k) for k, b in plan.vram.buffers.items())
    out: list[tuple[list[str], int, int]] = []
    for a, e, k in spans:
        if out and a < out[-1][2]:
            names, a0, e0 = out[-1]
            out[-1] = (names + [k], a0, max(e0, e))
        else:
            out.append(([k], a, e))
    return [("+".join(names), a, e - a) for names, a, e in out]
