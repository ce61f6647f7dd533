"""A pre-norm transformer decoder layer as one program, composed from the kernel generators.

``x -> RMSNorm -> Q, K, V projections -> RoPE on Q and K -> flash attention (GQA, causal) -> O projection
-> + x -> RMSNorm -> SwiGLU FFN -> + h1``; a mixture-of-experts layer (``experts > 0``) has the routed-MoE
layer (:mod:`programs.moe`: router, V_TOPK, the selected experts' SwiGLU, weighted combine) as its FFN stage,
``ffn`` then being one expert's width.  The same composition is the *prefill* layer (``seq`` tokens per
sequence, positions ``pos0 ..``) and the *decode step* (one token per sequence at position ``kv_len - 1``
against a KV cache already in HBM, its K/V appended at that position).

Data path (which stage output goes where, :attr:`LayerPlan.data_path`): every stage output stays in VRAM
where the next stage reads it, except Q, K and V, which go through HBM (MX-quantized: flash attention
prefetches its operands from HBM, and K/V belong in the KV cache). Prefill writes K/V rows ``b*cap + s``
(``bshd``); the decode step writes its rows at position ``kv_len - 1`` of an ``sbhd`` cache, where the batch's
rows are consecutive.

Resources: VRAM rows from :func:`~programs.model.layout.plan_vram` (every stage output and every stage's
scratch is a buffer with a lifetime; ``keep_outputs`` keeps every stage output to the end so a testbench can
judge each stage); MRAM tiles and gp/fp registers are stage-local (stages run one after another); FP SRAM
holds the constant slots, and from slot 16 flash attention's state (attention stage) and the MoE routing
weights (ffn stage): the two ranges overlap, which is fine because the stages run one after another
(:attr:`LayerPlan.fp_sram`, :attr:`LayerPlan.int_sram` record each stage's range); a-registers are bound per
stage (a stage starts by pointing ``a0..`` at its tensors). Each stage is a region ``<prefix>/<stage>``.

Chunked prefill (``chunk`` > 0, :mod:`programs.model.chunking` resolves it): the layer is one *pass* per chunk of
``chunk`` tokens of each sequence (:func:`layer_parts`, :attr:`LayerPlan.passes`), every pass the same stages on the
same VRAM layout (sized for one chunk) plus ``out_store``: the chunk's x rows loaded, its Q stored at its token
rows and its K/V appended to the cache at its positions, its queries attending (flash attention with ``q_len`` =
the chunk, ``kv_len`` = its end: end-aligned causal) to the cache so far, its output rows stored to HBM ``out``.
A pass sees the token-row tensors and its sequence's cache as views (:func:`~programs.hbm_tensors.row_view`). A
chunk starts on a q tile, so each chunk's attention blocks are the unchunked layer's and every other stage is
token-wise: every token's result is the unchunked layer's, bit for bit. The region of a stage is marked once per
chunk (the region statistics sum them); ``stages``/``bases`` of the plan are the last pass's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from plena_sim.config import HardwareConfig, MxType

from .. import flash as fa
from .. import mutation_hooks
from ..asm import Asm, region
from ..common import FP_STATE_BASE, fail, need_int, need_multiple, round_up, rp, vector_rows
from ..elementwise import emit_add_rows, plan_add_rows
from ..ffn import emit_ffn_swiglu, ffn_workspace_rows, plan_ffn_swiglu
from ..hbm_tensors import HbmTensor, preload_act, row_view, set_addr_regs, store_act
from ..linear import emit_linear, plan_linear
from ..moe import POLICIES, emit_moe_layer, moe_workspace_rows, plan_moe_layer
from ..norms import emit_rms_norm, plan_rms_norm
from ..rope import emit_rope, plan_rope
from .layout import BufferRequest, VramLayout, plan_vram

__all__ = [
    "LayerShape",
    "LayerPlan",
    "Part",
    "Pass",
    "Stage",
    "STAGES",
    "CHUNK_STAGES",
    "TENSORS",
    "TENSOR_CLASS",
    "KERNEL",
    "layer_parts",
    "layer_hbm_needs",
    "layer_vram",
    "plan_decoder_layer",
    "emit_decoder_layer",
]

KERNEL = "decoder_layer"
#: the matmul forms of a linear (programs.linear: LinearPlan.path)
LINEAR_PATHS = ("gemm", "gemv")

#: the stages in program order
STAGES = (
    "load_x",
    "attn_norm",
    "qkv_proj",
    "rope",
    "qkv_store",
    "attention",
    "o_proj",
    "attn_residual",
    "ffn_norm",
    "ffn",
    "ffn_residual",
)
#: the stages of one chunk of a chunked prefill: the layer's, then the chunk's output rows stored to HBM ``out``
CHUNK_STAGES = STAGES + ("out_store",)
_AT = {name: i for i, name in enumerate(CHUNK_STAGES)}

#: the HBM tensors of a layer (inputs, then the ones the program writes: q, and the K/V cache); ``wr`` (the
#: router) only in a mixture-of-experts layer, whose ``wg``/``wu``/``wd`` stack every expert's weights; ``out``
#: (the layer output) only in a chunked prefill
TENSORS = (
    "wr",
    "x",
    "gamma_attn",
    "wq",
    "wk",
    "wv",
    "cos_q",
    "sin_q",
    "cos_k",
    "sin_k",
    "rot",
    "wo",
    "gamma_ffn",
    "wg",
    "wu",
    "wd",
    "q",
    "k_cache",
    "v_cache",
    "out",
)
#: each tensor's precision class: ``act`` (HBM_V_ACT_TYPE), ``weight`` (HBM_M_WEIGHT_TYPE) or ``kv`` (the K/V types)
TENSOR_CLASS = {
    **dict.fromkeys(("x", "gamma_attn", "gamma_ffn", "cos_q", "sin_q", "cos_k", "sin_k", "q", "out"), "act"),
    **dict.fromkeys(("wr", "wq", "wk", "wv", "wo", "wg", "wu", "wd", "rot"), "weight"),
    **dict.fromkeys(("k_cache", "v_cache"), "kv"),
}


@dataclass(frozen=True)
class LayerShape:
    """One layer's problem: ``batch`` sequences of ``seq`` new tokens attending to ``kv_len`` positions.

    Prefill: ``seq`` tokens at positions ``pos0 .. pos0+seq-1`` (``kv_len = pos0 + seq``; the layer writes and
    reads only its own K/V, so ``pos0`` must be 0 unless decode); decode: ``seq == 1`` at position
    ``kv_len - 1``. ``kv_capacity``: positions the cache holds per sequence."""

    batch: int
    seq: int
    kv_len: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    decode: bool
    kv_capacity: int
    experts: int = 0  # 0: a dense FFN; else a routed-MoE FFN stage (a V_TOPK policy with top_k)
    top_k: int = 0
    chunk: int = 0  # prefill: tokens of a sequence per pass (chunked prefill, < seq); 0: every token in one pass

    @property
    def moe(self) -> bool:
        return self.experts > 0 or self.top_k > 0

    @property
    def policy(self) -> int:
        """The V_TOPK policy of ``(experts, top_k)`` (a MoE layer)."""
        return {pair: pol for pol, pair in POLICIES.items()}[(self.experts, self.top_k)]

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    def macs(self, rows_of: Callable[[int], int] = int) -> int:
        """The layer's matrix MACs: the projections, the attention scores and values (every key, no causal
        saving) and the FFN (a MoE layer: the router and ``top_k`` experts per token); ``rows_of(n)``: the rows
        the machine computes for ``n`` (e.g. rounded up to its tile; default: exactly ``n``)."""
        t, kv = rows_of(self.tokens), rows_of(self.kv_len)
        proj = self.hidden * (self.q_width + 2 * self.kv_heads * self.head_dim) + self.q_width * self.hidden
        ffn = 3 * self.hidden * self.ffn * (self.top_k if self.moe else 1) + (self.hidden * self.experts)
        attention = 2 * rows_of(self.seq) * kv * self.heads * self.head_dim * self.batch
        return t * (proj + ffn) + attention

    def kv_width(self, cfg: HardwareConfig) -> int:
        """Elements per K/V row: ``kv_heads*head_dim`` padded to a multiple of MLEN (zero weight columns)."""
        return round_up(self.kv_heads * self.head_dim, cfg.MLEN)

    @property
    def kv_layout(self) -> str:
        return "sbhd" if self.decode else "bshd"

    @property
    def new_kv_row(self) -> int:
        """The first K/V cache row the layer writes (decode: position kv_len-1 of every sequence, sbhd)."""
        return (self.kv_len - 1) * self.batch if self.decode else 0

    def kv_rows_written(self, cfg: HardwareConfig) -> int:
        """Cache rows one store writes (every padded VRAM row, ``rp(tokens)``)."""
        return rp(cfg, self.tokens)

    def kv_store_rows(self, cfg: HardwareConfig) -> list[tuple[int, int]]:
        """The K/V cache rows ``[lo, hi)`` the layer's stores write, one range per pass."""
        return [
            (p.b * self.kv_capacity + p.kv_row, p.b * self.kv_capacity + p.kv_row + p.pitch)
            for p in layer_parts(cfg, self)
        ]


@dataclass(frozen=True)
class Part:
    """The tokens one pass of the layer computes: ``batch`` sequences of ``q_len`` tokens attending to ``kv_len``
    positions, ``pitch`` VRAM rows per column block. The whole layer is one part; a chunked prefill has one per
    chunk (``batch`` 1: sequence ``b``, positions ``pos0 ..``), whose token rows (x, the RoPE tables, q, out) start
    at ``row0`` and whose K/V cache is the sequence's rows from ``b*kv_capacity`` on; its stores write the cache
    from row ``kv_row`` of those (its position)."""

    batch: int
    q_len: int
    kv_len: int
    kv_row: int
    pitch: int
    b: int = 0
    pos0: int = 0
    row0: int = 0

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len


def layer_parts(cfg: HardwareConfig, s: LayerShape) -> tuple[Part, ...]:
    """The passes of the layer in program order: one, or (chunked) every chunk of every sequence, sequence by
    sequence, all with the pitch of a whole chunk (the last chunk of a sequence may be shorter)."""
    if not s.chunk:
        return (Part(s.batch, s.seq, s.kv_len, s.new_kv_row, rp(cfg, s.tokens)),)
    P = rp(cfg, s.chunk)
    parts = []
    for b in range(s.batch):
        for c0 in range(0, s.seq, s.chunk):
            n = min(s.chunk, s.seq - c0)
            parts.append(Part(1, n, c0 + n, c0, P, b, c0, b * s.seq + c0))
    return tuple(parts)


@dataclass(frozen=True)
class Stage:
    """One stage: its plans, the a-register bindings it starts with, and its emitter."""

    name: str
    bind: Mapping[int, str]  # a-register -> tensor name
    emit: Callable[[Asm, Sequence[int], Sequence[int]], None] = field(repr=False)
    plans: Mapping[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Pass:
    """One pass of the layer: its part, its stages, and the byte base of every tensor as its stages bind it (a
    chunk's views of the token rows and of its sequence's K/V cache)."""

    part: Part
    stages: tuple[Stage, ...]
    bases: Mapping[str, int]


@dataclass(frozen=True)
class LayerPlan:
    kernel: str
    shape: LayerShape
    pitch: int
    vram: VramLayout
    stages: tuple[Stage, ...]
    bases: Mapping[str, int]  # tensor name -> HBM byte base
    tensors: Mapping[str, HbmTensor]
    region_prefix: str
    fp_state: tuple[int, int]  # flash attention's FP SRAM state (base, size)
    mram_tiles: Mapping[str, tuple[int, int]]
    data_path: Mapping[str, str]
    cfg: HardwareConfig = field(repr=False, compare=False)
    #: stage -> (base, size) of the FP / INT SRAM words it uses beyond the constant slots; FP ranges of
    #: different stages may overlap (flash attention's state and the MoE routing weights both start at 16):
    #: the stages run one after another, each writing its range before reading it
    fp_sram: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    int_sram: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: every pass in program order (one, or one per chunk); ``stages`` and ``bases`` are the last pass's
    passes: tuple[Pass, ...] = ()

    def facts(self) -> dict[str, str]:
        """What a report states about the program: ``linear_path``, the matmul form of the layer's linears
        (``gemm``, ``gemv``, or ``mixed``)."""
        paths = {p.path for st in self.stages for p in st.plans.values() if getattr(p, "path", None) in LINEAR_PATHS}
        return {"linear_path": paths.pop() if len(paths) == 1 else "mixed" if paths else "gemm"}

    @property
    def part(self) -> Part:
        """The last pass's part: the tokens whose stage outputs the VRAM holds at the end."""
        return self.passes[-1].part

    def cbm(self, name: str) -> int:
        """Element base of the VRAM buffer ``name``."""
        return self.vram.base(name)

    @property
    def attention(self) -> fa.FlashPlan:
        return self.stage("attention").plans["flash"]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)


# =========================================================================== checks


def _check_shape(cfg: HardwareConfig, s: LayerShape) -> None:
    M, V = cfg.MLEN, cfg.VLEN
    for name in ("batch", "seq", "kv_len", "hidden", "heads", "kv_heads", "head_dim", "ffn"):
        need_int(KERNEL, name, getattr(s, name), 1)
    if V != M:
        fail(KERNEL, "VLEN", V, f"must equal MLEN={M} (flash attention and RoPE need it)")
    need_multiple(KERNEL, "hidden", s.hidden, M, "MLEN")
    need_multiple(KERNEL, "ffn", s.ffn, M, "MLEN")
    need_multiple(KERNEL, "heads*head_dim", s.q_width, M, "MLEN")
    if s.heads % s.kv_heads:
        fail(KERNEL, "heads", s.heads, f"must be a multiple of kv_heads={s.kv_heads}")
    if s.decode and s.seq != 1:
        fail(KERNEL, "seq", s.seq, "must be 1 for a decode step")
    if not s.decode and s.kv_len != s.seq:
        fail(KERNEL, "kv_len", s.kv_len, f"must equal seq={s.seq} for prefill (the layer attends to its own tokens)")
    if s.kv_capacity < s.kv_len:
        fail(KERNEL, "kv_capacity", s.kv_capacity, f"must be >= kv_len={s.kv_len}")
    if cfg.hbm_type("HBM_V_KV_TYPE") != cfg.hbm_type("HBM_M_KV_TYPE"):
        fail(KERNEL, "HBM_V_KV_TYPE", cfg.hbm_type("HBM_V_KV_TYPE"), "must equal HBM_M_KV_TYPE (K/V stored, then read)")
    for name in ("experts", "top_k", "chunk"):
        need_int(KERNEL, name, getattr(s, name), 0)
    if s.chunk:
        if s.decode:
            fail(KERNEL, "chunk", s.chunk, "must be 0 for a decode step (one token per sequence)")
        need_multiple(KERNEL, "chunk", s.chunk, M, "MLEN")
        if s.chunk >= s.seq:
            fail(KERNEL, "chunk", s.chunk, f"must be < seq={s.seq} (0: the whole sequence in one pass)")
    pairs = sorted(POLICIES.values())
    if s.moe and (s.experts, s.top_k) not in pairs:
        fail(
            KERNEL,
            "experts/top_k",
            f"{s.experts}/{s.top_k}",
            f"must be a V_TOPK policy: (experts, top_k) one of {pairs} (or both 0: a dense FFN)",
        )


def _flash_params(cfg: HardwareConfig, s: LayerShape, part: Part) -> dict[str, Any]:
    """Flash attention of a part: end-aligned causal (its queries are the last ``q_len`` of ``kv_len`` positions)."""
    return dict(
        batch=part.batch,
        hq=s.heads,
        hkv=s.kv_heads,
        d=s.head_dim,
        q_len=part.q_len,
        kv_len=part.kv_len,
        causal=True,
        kv_layout=s.kv_layout,
        kv_capacity=s.kv_capacity,
        kv_row_elems=s.kv_width(cfg),
    )


def _trial_vram(cfg: HardwareConfig, s: LayerShape, part: Part) -> dict[str, int]:
    """A VRAM placement of flash attention to size it with (O at row 0, its scratch after O)."""
    o_rows = (s.q_width // cfg.VLEN) * part.pitch
    return {"o_base": 0, "o_rows_p": part.pitch, "scratch_base": (o_rows + 1) * cfg.VLEN}


def _flash_hbm(cfg: HardwareConfig, s: LayerShape) -> tuple[int, int]:
    """``(q rows, K/V cache rows)`` every pass's flash attention reads (its view's rows from where the view starts)."""
    Nq, Nk = s.q_width, s.kv_width(cfg)
    q_rows = kv_rows = 0
    for part in layer_parts(cfg, s):
        req = fa.hbm_requirements(cfg, **_flash_params(cfg, s, part), **_trial_vram(cfg, s, part))
        q_rows = max(q_rows, part.row0 + -(-req["q"] // Nq))
        kv_rows = max(kv_rows, part.b * s.kv_capacity + -(-req["k"] // Nk))
    return q_rows, kv_rows


def layer_hbm_needs(cfg: HardwareConfig, s: LayerShape) -> dict[str, tuple[int, int]]:
    """``(rows, cols)`` every HBM tensor of the layer must allocate (inputs with their padding rows, q and the
    K/V cache with every row the stores write and the flash prefetches read; a chunked prefill's passes read
    and write whole chunks of rows, and store the output ``out``)."""
    _check_shape(cfg, s)
    H, Nq, Nk = s.hidden, s.q_width, s.kv_width(cfg)
    P = max(part.row0 + part.pitch for part in layer_parts(cfg, s))  # unchunked: rp(tokens)
    q_rows, kv_read = _flash_hbm(cfg, s)
    kv_rows = max(kv_read, *(hi for _lo, hi in s.kv_store_rows(cfg)), s.batch * s.kv_capacity)
    vr = vector_rows(cfg, H)
    M = cfg.MLEN
    return {
        "x": (P, H),
        "gamma_attn": (vr, cfg.VLEN),
        "gamma_ffn": (vr, cfg.VLEN),
        "wq": (H, Nq),
        "wk": (H, Nk),
        "wv": (H, Nk),
        "cos_q": (P, Nq),
        "sin_q": (P, Nq),
        "cos_k": (P, Nk),
        "sin_k": (P, Nk),
        **({"rot": (M, M)} if s.head_dim <= M else {}),  # the rotation tile (RoPE's matmul path)
        "wo": (Nq, H),
        **_ffn_needs(cfg, s),
        "q": (max(P, q_rows), Nq),
        "k_cache": (kv_rows, Nk),
        "v_cache": (kv_rows, Nk),
        **({"out": (P, H)} if s.chunk else {}),
    }


def _ffn_needs(cfg: HardwareConfig, s: LayerShape) -> dict[str, tuple[int, int]]:
    """The FFN's weights: ``wg``/``wu [hidden, ffn]``, ``wd [ffn, hidden]``; a MoE layer stacks its experts
    (``[experts*hidden, ffn]``, ``[experts*ffn, hidden]``) and adds the router ``wr [hidden, experts]`` (padded
    to a multiple of MLEN)."""
    H, F, E = s.hidden, s.ffn, max(1, s.experts)
    needs = {"wg": (E * H, F), "wu": (E * H, F), "wd": (E * F, H)}
    if s.moe:
        needs["wr"] = (H, round_up(s.experts, cfg.MLEN))
    return needs


# =========================================================================== planning


def _stages(s: LayerShape) -> tuple[str, ...]:
    """The stages of one pass."""
    return CHUNK_STAGES if s.chunk else STAGES


def _buffers(cfg: HardwareConfig, s: LayerShape, P: int, keep: bool) -> list[BufferRequest]:
    """The stage-output buffers with their lifetimes (producer, last reader; the end when ``keep``)."""
    end = len(_stages(s)) - 1
    V = cfg.VLEN
    H, Nq, Nk = s.hidden, s.q_width, s.kv_width(cfg)

    def cbm(cols: int) -> int:
        return (cols // V) * P

    spec = [  # name, cols, producer, last reader
        ("x", H, "load_x", "attn_residual"),
        ("xn1", H, "attn_norm", "qkv_proj"),
        ("q", Nq, "qkv_proj", "rope"),
        ("k", Nk, "qkv_proj", "rope"),
        ("v", Nk, "qkv_proj", "qkv_store"),
        ("qr", Nq, "rope", "qkv_store"),
        ("kr", Nk, "rope", "qkv_store"),
        ("o", Nq, "attention", "o_proj"),
        ("attn", H, "o_proj", "attn_residual"),
        ("h1", H, "attn_residual", "ffn_residual"),
        ("xn2", H, "ffn_norm", "ffn"),
        ("d", H, "ffn", "ffn_residual"),
        ("out", H, "ffn_residual", _stages(s)[-1]),
    ]
    return [BufferRequest(n, cbm(c), _AT[a], end if keep else _AT[b]) for n, c, a, b in spec]


def _flash_scratch(cfg: HardwareConfig, s: LayerShape, parts: Sequence[Part]) -> int:
    """Flash attention's scratch rows: the most any pass needs (passes alike in queries and keys size alike)."""
    sizes = {(p.batch, p.q_len, p.kv_len, p.pitch): p for p in parts}.values()
    return max(fa.scratch_rows(cfg, **_flash_params(cfg, s, p), **_trial_vram(cfg, s, p)) for p in sizes)


def _scratch(cfg: HardwareConfig, s: LayerShape, parts: Sequence[Part]) -> dict[str, int]:
    """Rows of each stage's scratch (live during the stage alone), for the largest pass."""
    V, M, T = cfg.VLEN, cfg.MLEN, cfg.mram_tiles
    H, Nq = s.hidden, s.q_width
    P, tokens = parts[0].pitch, max(p.tokens for p in parts)
    split = P if max(H, Nq) // M > T else 0
    norm = 1 + vector_rows(cfg, H)  # t row, gamma rows
    rope_rows = 3 * (Nq // V) * P + 1  # cos, sin, xr, t (the widest: Q)
    flash = _flash_scratch(cfg, s, parts)
    if s.moe:
        ffn = moe_workspace_rows(cfg, T=tokens, hidden=H, inter=s.ffn, policy=s.policy, pitch=P)
    else:
        ffn = ffn_workspace_rows(cfg, rows=tokens, hidden=H, inter=s.ffn, pitch=P)
    return {
        "attn_norm": norm,
        "qkv_proj": max(split, 1),
        "rope": rope_rows,
        "attention": flash,
        "o_proj": max(split, 1),
        "ffn_norm": norm,
        "ffn": ffn,
    }


def layer_vram(cfg: HardwareConfig, s: LayerShape, keep: bool) -> VramLayout:
    """Every buffer of a pass placed (every pass shares the layout); a MoE layer's ffn scratch starts with the
    router logits, so with ``keep`` (a testbench judging every stage) it lives to the end like the stage
    outputs. :attr:`VramLayout.rows_used` is what the layer needs of VECTOR_SRAM_SIZE."""
    _check_shape(cfg, s)
    parts = layer_parts(cfg, s)
    end = len(_stages(s)) - 1
    reqs = _buffers(cfg, s, parts[0].pitch, keep)
    for st, n in _scratch(cfg, s, parts).items():
        last = end if keep and s.moe and st == "ffn" else _AT[st]
        reqs.append(BufferRequest(f"scratch:{st}", n, _AT[st], last))
    return plan_vram(reqs, cfg.VLEN)


class _Builder:
    """Plans every stage against the layout (one method per stage; each returns its :class:`Stage`)."""

    def __init__(
        self,
        cfg: HardwareConfig,
        s: LayerShape,
        lay: VramLayout,
        tensors: Mapping[str, tuple[HbmTensor, int]],
        loops: bool,
        part: Part,
        flash_path: str = "auto",
        linear_path: str = "auto",
    ) -> None:
        self.cfg, self.s, self.P, self.lay, self.loops = cfg, s, part.pitch, lay, loops
        self.part, self.n, self.flash_path = part, part.tokens, flash_path
        self.linear_path = linear_path
        self.t = {k: v[0] for k, v in tensors.items()}
        self.bases = {k: v[1] for k, v in tensors.items()}

    def ten(self, name: str, areg: int) -> HbmTensor:
        return replace(self.t[name], areg=areg)

    def at(self, name: str, rows: int = 0) -> int:
        return self.lay.base(name) + rows * self.cfg.VLEN

    def load_x(self) -> Stage:
        cfg, s, P = self.cfg, self.s, self.P
        tx = self.ten("x", 0)

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            preload_act(asm, cfg, tx, self.n, s.hidden, self.at("x"), P, gp)

        return Stage("load_x", {0: "x"}, emit)

    def norm(self, name: str, src: str, dst: str, gamma: str) -> Stage:
        cfg, s = self.cfg, self.s
        sc = f"scratch:{name}"
        plan = plan_rms_norm(
            cfg,
            rows=self.n,
            hidden=s.hidden,
            x_base=self.at(src),
            pitch=self.P,
            y_base=self.at(dst),
            t_base=self.at(sc),
            gamma=self.ten(gamma, 0),
            gamma_base=self.at(sc, 1),
        )

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            emit_rms_norm(asm, plan, gp=gp, fp=fp)

        return Stage(name, {0: gamma}, emit, {"norm": plan})

    def linear(self, src: str, dst: str, w: str, K: int, N: int, scratch: str) -> Any:
        split = self.at(f"scratch:{scratch}") if self.lay.buffers[f"scratch:{scratch}"].rows > 1 else None
        return plan_linear(
            self.cfg,
            rows=self.n,
            K=K,
            N=N,
            x_base=self.at(src),
            x_pitch=self.P,
            y_base=self.at(dst),
            y_pitch=self.P,
            w=self.ten(w, 0),
            split_base=split,
            loops=self.loops,
            kernel=f"{KERNEL}.{w}",
            path=self.linear_path,
        )

    def qkv(self) -> Stage:
        s, H, Nk = self.s, self.s.hidden, self.s.kv_width(self.cfg)
        plans = {
            "wq": self.linear("xn1", "q", "wq", H, s.q_width, "qkv_proj"),
            "wk": self.linear("xn1", "k", "wk", H, Nk, "qkv_proj"),
            "wv": self.linear("xn1", "v", "wv", H, Nk, "qkv_proj"),
        }

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            for w, plan in plans.items():
                with region(asm, w):
                    set_addr_regs(asm, {0: self.bases[w]}, gp)
                    emit_linear(asm, plan, gp=gp, fp=fp)

        return Stage("qkv_proj", {}, emit, plans)

    def rope_one(self, src: str, dst: str, cols: int, cos: str, sin: str) -> Any:
        """RoPE over ``cols`` columns (the padding heads of K are zero and stay zero)."""
        cfg, s, P, V = self.cfg, self.s, self.P, self.cfg.VLEN
        n = cols // V * P
        sc = "scratch:rope"
        return plan_rope(
            cfg,
            rows=self.n,
            nh=cols // s.head_dim,
            d=s.head_dim,
            x_base=self.at(src),
            pitch=P,
            y_base=self.at(dst),
            cos=self.ten(cos, 0),
            sin=self.ten(sin, 1),
            cos_base=self.at(sc),
            sin_base=self.at(sc, n),
            xr_base=self.at(sc, 2 * n),
            t_base=self.at(sc, 3 * n),
            rot=self.ten("rot", 2) if s.head_dim <= cfg.MLEN else None,
        )

    def rope(self) -> Stage:
        Nq, Nk = self.s.q_width, self.s.kv_width(self.cfg)
        k_src = "v" if mutation_hooks.active("layer_rope_on_v") else "k"  # (the store then caches K as V)
        plans = {
            "q": (self.rope_one("q", "qr", Nq, "cos_q", "sin_q"), ("cos_q", "sin_q")),
            "k": (self.rope_one(k_src, "kr", Nk, "cos_k", "sin_k"), ("cos_k", "sin_k")),
        }

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            for which, (plan, (cos, sin)) in plans.items():
                bind = {0: self.bases[cos], 1: self.bases[sin]}
                if plan.rot is not None:
                    bind[2] = self.bases["rot"]
                with region(asm, which):
                    set_addr_regs(asm, bind, gp)
                    emit_rope(asm, plan, gp=gp, fp=fp)

        return Stage("rope", {}, emit, {k: p for k, (p, _t) in plans.items()})

    def store(self) -> Stage:
        cfg, s, P = self.cfg, self.s, self.P
        Nk = s.kv_width(cfg)
        row = self.part.kv_row
        k_buf, v_buf = ("k", "kr") if mutation_hooks.active("layer_rope_on_v") else ("kr", "v")
        items = [("q", "qr", "q", s.q_width, 0), ("k_cache", k_buf, "k", Nk, row), ("v_cache", v_buf, "v", Nk, row)]
        if mutation_hooks.active("layer_k_not_cached"):
            items = [it for it in items if it[0] != "k_cache"]

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            for tname, buf, label, cols, row0 in items:
                with region(asm, label):
                    set_addr_regs(asm, {0: self.bases[tname]}, gp)
                    store_act(asm, cfg, self.ten(tname, 0), self.n, cols, self.at(buf), P, gp, row0=row0)

        return Stage("qkv_store", {}, emit)

    def attention(self) -> Stage:
        cfg, s = self.cfg, self.s
        plan = fa.plan_flash_attention(
            cfg,
            **_flash_params(cfg, s, self.part),
            path=self.flash_path,
            q=self.ten("q", 0),
            k=self.ten("k_cache", 1),
            v=self.ten("v_cache", 2),
            o_base=self.at("o"),
            o_rows_p=self.P,
            scratch_base=self.at("scratch:attention"),
            loops=self.loops,
            dry_run=False,  # the layer needs no instruction counts: the emission decides the loops (same program)
        )

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            fa.emit_flash_attention(asm, plan, gp=gp, fp=fp)

        return Stage("attention", {0: "q", 1: "k_cache", 2: "v_cache"}, emit, {"flash": plan})

    def o_proj(self) -> Stage:
        plan = self.linear("o", "attn", "wo", self.s.q_width, self.s.hidden, "o_proj")

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            emit_linear(asm, plan, gp=gp, fp=fp)

        return Stage("o_proj", {0: "wo"}, emit, {"wo": plan})

    def residual(self, name: str, a: str, b: str, out: str) -> Stage:
        nrows = self.lay.buffers[out].rows
        plan = plan_add_rows(self.cfg, nrows=nrows, a_base=self.at(a), b_base=self.at(b), out_base=self.at(out))

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            emit_add_rows(asm, plan, gp=gp, fp=fp)

        return Stage(name, {}, emit, {"add": plan})

    def ffn(self) -> Stage:
        return self.moe() if self.s.moe else self.dense_ffn()

    def moe(self) -> Stage:
        """The routed-MoE FFN: router ``wr``, the stacked experts ``wg``/``wu``/``wd``; routing weights in FP SRAM
        from slot 16 (flash attention's state range, free again), indices and the expert offset in INT SRAM
        from 0."""
        s = self.s
        plan = plan_moe_layer(
            self.cfg,
            T=self.n,
            hidden=s.hidden,
            inter=s.ffn,
            policy=s.policy,
            x_base=self.at("xn2"),
            pitch=self.P,
            out_base=self.at("d"),
            ws_base=self.at("scratch:ffn"),
            wr=self.ten("wr", 0),
            wg=self.ten("wg", 1),
            wu=self.ten("wu", 2),
            wd=self.ten("wd", 3),
            fp_out=FP_STATE_BASE,
            int_out=0,
            loops=self.loops,
        )

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            emit_moe_layer(asm, plan, gp=gp, fp=fp)

        return Stage("ffn", {0: "wr", 1: "wg", 2: "wu", 3: "wd"}, emit, {"moe": plan})

    def dense_ffn(self) -> Stage:
        plan = plan_ffn_swiglu(
            self.cfg,
            rows=self.n,
            hidden=self.s.hidden,
            inter=self.s.ffn,
            x_base=self.at("xn2"),
            pitch=self.P,
            y_base=self.at("d"),
            ws_base=self.at("scratch:ffn"),
            wg=self.ten("wg", 0),
            wu=self.ten("wu", 1),
            wd=self.ten("wd", 2),
            loops=self.loops,
            path=self.linear_path,
        )

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            emit_ffn_swiglu(asm, plan, gp=gp, fp=fp)

        return Stage("ffn", {0: "wg", 1: "wu", 2: "wd"}, emit, {"ffn": plan})

    def out_store(self) -> Stage:
        """A chunk's output rows to HBM ``out`` (MX act type), for the next layer to load like ``x``."""
        cfg, s, P = self.cfg, self.s, self.P

        def emit(asm: Asm, gp: Sequence[int], fp: Sequence[int]) -> None:
            store_act(asm, cfg, self.ten("out", 0), self.n, s.hidden, self.at("out"), P, gp)

        return Stage("out_store", {0: "out"}, emit)

    def stages(self) -> tuple[Stage, ...]:
        res_src = "xn1" if mutation_hooks.active("layer_residual_from_norm") else "x"
        chunk = (self.out_store(),) if self.s.chunk else ()
        return (
            self.load_x(),
            self.norm("attn_norm", "x", "xn1", "gamma_attn"),
            self.qkv(),
            self.rope(),
            self.store(),
            self.attention(),
            self.o_proj(),
            self.residual("attn_residual", res_src, "attn", "h1"),
            self.norm("ffn_norm", "h1", "xn2", "gamma_ffn"),
            self.ffn(),
            self.residual("ffn_residual", "h1", "d", "out"),
            *chunk,
        )


def plan_decoder_layer(
    config: HardwareConfig,
    shape: LayerShape,
    tensors: Mapping[str, tuple[HbmTensor, int]],
    *,
    keep_outputs: bool = True,
    loops: bool = True,
    region_prefix: str = "layer",
    linear_path: str = "auto",
) -> LayerPlan:
    """Plan the layer. ``tensors``: every name of :data:`TENSORS` -> (its HbmTensor, its HBM byte base), sized
    as :func:`layer_hbm_needs` says (the a-register of each tensor is chosen here, per stage). ``linear_path``:
    the dense linears' matmul form (``"auto"``: GEMV where :func:`~programs.linear.choose_path` finds it no
    slower, e.g. a decode step's few rows; ``"gemm"`` / ``"gemv"`` force it)."""
    needs = layer_hbm_needs(config, shape)
    missing = [n for n in needs if n not in tensors]
    if missing:
        fail(KERNEL, "tensors", missing, "are missing")
    for name, (rows, cols) in needs.items():
        t = tensors[name][0]
        if t.row_pitch_elems != cols or t.alloc_elems < rows * cols:
            fail(KERNEL, f"{name}.alloc_elems", t.alloc_elems, f"must be >= {rows}x{cols} with row pitch {cols}")
    lay = layer_vram(config, shape, keep_outputs)
    passes = _passes(config, shape, lay, tensors, loops, linear_path)
    last = passes[-1]
    stages = last.stages
    flash = stages[_AT["attention"]].plans["flash"]
    fp_sram = {"attention": (flash.fp_state_base, flash.fp_state_size)}
    int_sram: dict[str, tuple[int, int]] = {}
    data_path = dict(_DATA_PATH, **(_CHUNK_PATH if shape.chunk else {}))
    if shape.moe:
        moe = stages[_AT["ffn"]].plans["moe"]
        fp_sram["ffn"], int_sram["ffn"] = moe.fp_range, moe.int_range
        data_path["routing"] = (
            f"FP SRAM [{moe.fp_range[0]}, +{moe.fp_range[1]}) weights (reusing flash attention's state range), "
            f"INT SRAM [{moe.int_range[0]}, +{moe.int_range[1]}) indices and the expert offset; "
            f"{len(moe.topk)} chunk(s) of {moe.chunk} tokens"
        )
    return LayerPlan(
        KERNEL,
        shape,
        last.part.pitch,
        lay,
        stages,
        last.bases,
        {k: v[0] for k, v in tensors.items()},
        region_prefix,
        (flash.fp_state_base, flash.fp_state_size),
        {st.name: _mram(st) for st in stages if _mram(st)[1]},
        data_path,
        config,
        fp_sram,
        int_sram,
        passes,
    )


def _passes(
    cfg: HardwareConfig,
    s: LayerShape,
    lay: VramLayout,
    tensors: Mapping[str, tuple[HbmTensor, int]],
    loops: bool,
    linear_path: str = "auto",
) -> tuple[Pass, ...]:
    """Every pass planned against the one layout; the chunks' flash attention all take the path the first chunk's
    takes (the choice weighs the q rows of a pass: one path for every token)."""
    out: list[Pass] = []
    path = "auto"
    for part in layer_parts(cfg, s):
        b = _Builder(cfg, s, lay, _part_tensors(cfg, s, tensors, part), loops, part, path, linear_path)
        stages = b.stages()
        path = stages[_AT["attention"]].plans["flash"].path
        out.append(Pass(part, stages, b.bases))
    return tuple(out)


#: the tensors a chunk reads or writes at its token rows, and the K/V caches it views from its sequence's row
_TOKEN_ROWS = ("x", "cos_q", "sin_q", "cos_k", "sin_k", "q", "out")
_CACHES = ("k_cache", "v_cache")


def _part_tensors(
    cfg: HardwareConfig, s: LayerShape, tensors: Mapping[str, tuple[HbmTensor, int]], part: Part
) -> Mapping[str, tuple[HbmTensor, int]]:
    """The tensors as a pass sees them: a chunk's token rows and its sequence's K/V cache as views of their own
    (:func:`~programs.hbm_tensors.row_view`); the whole layer sees the tensors themselves."""
    if not s.chunk:
        return tensors
    out = dict(tensors)
    for names, row, key in (
        (_TOKEN_ROWS, part.row0, "HBM_V_ACT_TYPE"),
        (_CACHES, part.b * s.kv_capacity, "HBM_M_KV_TYPE"),
    ):
        t = cfg.hbm_type(key)
        sb = t.scale_bytes if isinstance(t, MxType) else 0
        for name in names:
            out[name] = row_view(*tensors[name], row, sb)
    return out


_DATA_PATH = {
    "xn1": "VRAM (read by the Q/K/V projections)",
    "q, k, v": "VRAM (read by RoPE / the store)",
    "qr": "HBM q (MX act type): flash attention prefetches Q from HBM",
    "kr, v": "HBM K/V cache (MX KV type): the layer's own K/V, read back by flash attention",
    "o": "VRAM (read by the O projection)",
    "attn, h1, xn2, d, out": "VRAM",
}
_CHUNK_PATH = {
    "x": "HBM x: each chunk's rows loaded in turn (its K/V appended to the cache, its queries attending to the "
    "cache so far)",
    "out": "HBM out (MX act type): each chunk's output rows stored, to be loaded like x by the next layer",
}


def _mram(st: Stage) -> tuple[int, int]:
    """(first tile, tiles) the stage uses (the widest of its plans); stage-local: stages run in turn."""
    tiles = [p.mram_tiles for p in st.plans.values() if getattr(p, "mram_tiles", None)]
    if not tiles:
        return (0, 0)
    return (min(t[0] for t in tiles), max(t[0] + t[1] for t in tiles) - min(t[0] for t in tiles))


def emit_decoder_layer(asm: Asm, plan: LayerPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    """The layer's program: every pass's stages, each in its region (``<prefix>/<stage>``: a chunked prefill marks
    each stage once per chunk, and the region statistics sum them), starting with its a-register bindings."""
    s = plan.shape
    moe = {"experts": s.experts, "top_k": s.top_k} if s.moe else {}
    chunk = {"chunk": s.chunk, "passes": len(plan.passes)} if s.chunk else {}
    asm.begin(KERNEL, tokens=s.tokens, hidden=s.hidden, heads=s.heads, kv_heads=s.kv_heads, ffn=s.ffn, **moe, **chunk)
    with region(asm, plan.region_prefix):
        for ps in plan.passes:
            for st in ps.stages:
                with region(asm, st.name):
                    if st.bind:
                        set_addr_regs(asm, {a: ps.bases[n] for a, n in st.bind.items()}, gp)
                    st.emit(asm, gp, fp)
    asm.end(KERNEL)
