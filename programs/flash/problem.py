"""A validated attention problem (kernels.md §3.2, §3.3, §3.9, §3.10): shapes, machine shape, head-dim chunks,
whether the batched path is legal, the K/V cache geometry, and the HBM tensors with their element sizes.

Every check raises ``ValueError("<kernel>: <param>=<value> <rule>")`` on the first rule it finds broken;
:mod:`programs.flash.planner` runs the steps in a fixed order, and that order (and the order of the checks
inside each step) fixes which error a bad parameter set reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from plena_sim.config import HardwareConfig, MxType

from ..common import fail, need_int
from ..hbm_tensors import HbmTensor, ceil_div
from .plan import AttentionShape

__all__ = [
    "SUPPORTS_HEAD_DIM_CHUNKS",
    "Problem",
    "hbm_type_info",
    "validate_problem",
    "elem_bytes",
    "check_tensors",
    "check_slots",
]


#: §3.9 stretch goal: head dims d > MLEN (d % MLEN == 0) through head-dim chunks, per-head path only
SUPPORTS_HEAD_DIM_CHUNKS = True


def hbm_type_info(cfg: HardwareConfig, key: str) -> tuple[int, int, bool]:
    """``(bytes per element, MX block bytes or 1, is MX)`` of the config's HBM type ``key``
    (``HBM_M_KV_TYPE`` for K/V, ``HBM_V_ACT_TYPE`` for Q)."""
    t = cfg.hbm_type(key)
    eb = t.elem_bytes
    blk = t.block * eb if isinstance(t, MxType) else 1
    return eb, blk, isinstance(t, MxType)


@dataclass(frozen=True)
class Problem(AttentionShape):
    """A validated attention problem (§3.2): the shape, K/V cache geometry, and what follows from them."""

    kernel: str
    cfg: HardwareConfig
    S_cap: int  # kv_capacity
    Wp: int  # kv_row_elems
    ratio: int  # hq // hkv
    nc: int  # head-dim chunks
    legal: bool  # the batched path is legal here (§3.3)

    @property
    def flash(self) -> bool:
        return self.kernel == "flash_attention"

    @property
    def decode(self) -> bool:
        return self.q_len == 1

    @property
    def R(self) -> int:
        """K/V row pitch in elements (bshd: Wp; sbhd: batch*Wp)."""
        return self.Wp if self.kv_layout == "bshd" else self.batch * self.Wp

    @property
    def off(self) -> int:
        return self.kv_len - self.q_len

    @property
    def Tk(self) -> int:
        return ceil_div(self.kv_len, self.cfg.MLEN)


def _check_shapes(
    K: str, batch: int, hq: int, hkv: int, d: int, q_len: int, kv_len: int, causal: bool, kv_layout: str, path: str
) -> None:
    for name, val in (("batch", batch), ("hq", hq), ("hkv", hkv), ("d", d), ("q_len", q_len), ("kv_len", kv_len)):
        need_int(K, name, val, 1)
    if not isinstance(causal, bool):
        fail(K, "causal", repr(causal), "must be a bool")
    if kv_layout not in ("bshd", "sbhd"):
        fail(K, "kv_layout", repr(kv_layout), "must be 'bshd' or 'sbhd'")
    if path not in ("auto", "batched", "per_head"):
        fail(K, "path", repr(path), "must be 'auto', 'batched' or 'per_head'")
    if hq % hkv:
        fail(K, "hq", hq, f"must be a multiple of hkv={hkv}")


def _check_machine(K: str, cfg: HardwareConfig) -> None:
    """The machine shape flash attention needs (§3.10)."""
    M, V, Pv, Pm = cfg.MLEN, cfg.VLEN, cfg.P_V, cfg.P_M
    if V != M:
        fail(K, "VLEN", V, f"must equal MLEN={M}")
    if Pm != M:
        fail(K, "HBM_M_Prefetch_Amount", Pm, f"(effective P_M) must equal MLEN={M}")
    if M % Pv:
        fail(K, "HBM_V_Prefetch_Amount", Pv, f"must divide MLEN={M}")


def _head_dim_chunks(K: str, cfg: HardwareConfig, d: int) -> int:
    """The number of head-dim chunks ``nc`` (§3.9): 1 for ``d <= M``, else ``d // M``."""
    M, V, H = cfg.MLEN, cfg.VLEN, cfg.HLEN
    if d % H:
        fail(K, "head_dim", d, f"must be a multiple of HLEN={H}")
    if d <= M:
        if V % d:
            fail(K, "head_dim", d, f"must divide VLEN={V} or be a multiple of it")
        return 1
    if d % M:
        fail(K, "head_dim", d, f"must divide VLEN={V} or be a multiple of it")
    if not SUPPORTS_HEAD_DIM_CHUNKS:
        raise ValueError(f"head_dim={d} > MLEN={M} requires head-dim chunking (not implemented)")
    return d // M


def _batched_legal(K: str, cfg: HardwareConfig, d: int, ratio: int, path: str) -> bool:
    """Whether the batched path is legal (§3.3); asking for it where it is not is an error."""
    M, H, BA = cfg.MLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT
    legal = d == H and ratio <= BA and BA * H == M
    if path == "batched" and not legal:
        why = []
        if d != H:
            why.append(f"head_dim={d} != HLEN={H}")
        if ratio > BA:
            why.append(f"ratio=hq/hkv={ratio} > BROADCAST_AMOUNT={BA}")
        if BA * H != M:
            why.append(f"BROADCAST_AMOUNT*HLEN={BA * H} != MLEN={M}")
        fail(K, "path", "'batched'", "is illegal here: " + ", ".join(why))
    return legal


def _kv_cache_shape(
    K: str, q_len: int, kv_len: int, causal: bool, hkv: int, d: int, kv_capacity: int | None, kv_row_elems: int | None
) -> tuple[int, int]:
    """``(S_cap, Wp)``: positions per batch and elements per row of the K/V cache (defaults: kv_len, hkv*d)."""
    if causal and q_len > kv_len:
        fail(K, "q_len", q_len, f"must be <= kv_len={kv_len} when causal")
    S_cap = kv_len if kv_capacity is None else kv_capacity
    need_int(K, "kv_capacity", S_cap, 1)
    if S_cap < kv_len:
        fail(K, "kv_capacity", S_cap, f"must be >= kv_len={kv_len}")
    Wp = hkv * d if kv_row_elems is None else kv_row_elems
    need_int(K, "kv_row_elems", Wp, 1)
    if Wp < hkv * d:
        fail(K, "kv_row_elems", Wp, f"(Wp) must be >= hkv*d={hkv * d}")
    return S_cap, Wp


def validate_problem(
    kernel: str,
    cfg: HardwareConfig,
    shape: AttentionShape,
    *,
    kv_capacity: int | None,
    kv_row_elems: int | None,
    path: str,
) -> Problem:
    """Validate the shapes against the rules of §3.2, §3.3, §3.9 and §3.10 that need no tensor or layout."""
    batch, hq, hkv, d, q_len, kv_len = shape.batch, shape.hq, shape.hkv, shape.d, shape.q_len, shape.kv_len
    causal, kv_layout = shape.causal, shape.kv_layout
    _check_shapes(kernel, batch, hq, hkv, d, q_len, kv_len, causal, kv_layout, path)
    ratio = hq // hkv
    _check_machine(kernel, cfg)
    nc = _head_dim_chunks(kernel, cfg, d)
    legal = _batched_legal(kernel, cfg, d, ratio, path)
    S_cap, Wp = _kv_cache_shape(kernel, q_len, kv_len, causal, hkv, d, kv_capacity, kv_row_elems)
    return Problem(**shape.shape_fields(), kernel=kernel, cfg=cfg, S_cap=S_cap, Wp=Wp, ratio=ratio, nc=nc, legal=legal)


def _check_mx_alignment(pb: Problem, eb_q: int, blk_q: int, mx_q: bool, eb_kv: int, blk_kv: int, mx_kv: bool) -> None:
    """MX-typed rows and heads must start on whole MX blocks (§3.4)."""
    K, d, Wp = pb.kernel, pb.d, pb.Wp
    if mx_kv:
        if (Wp * eb_kv) % blk_kv:
            fail(K, "kv_row_elems", Wp, f"(Wp*eb_kv={Wp * eb_kv}) must be a multiple of the MX block bytes {blk_kv}")
        if (d * eb_kv) % blk_kv:
            fail(K, "head_dim", d, f"(d*eb_kv={d * eb_kv}) must be a multiple of the MX block bytes {blk_kv}")
    if mx_q:
        if (d * eb_q) % blk_q:
            fail(K, "head_dim", d, f"(d*eb_act={d * eb_q}) must be a multiple of the MX block bytes {blk_q}")
        if (pb.hq * d * eb_q) % blk_q:
            fail(K, "hq", pb.hq, f"(hq*d*eb_act={pb.hq * d * eb_q}) must be a multiple of the MX block bytes {blk_q}")


def elem_bytes(pb: Problem, q: HbmTensor | None, k: HbmTensor | None, v: HbmTensor | None) -> tuple[int, int]:
    """``(eb_q, eb_kv)``: bytes per element of Q and of K/V -- the tensors' own when given, else those of the
    config's HBM types -- once the MX alignment rules hold."""
    eb_kv, blk_kv, mx_kv = hbm_type_info(pb.cfg, "HBM_M_KV_TYPE")
    eb_q, blk_q, mx_q = hbm_type_info(pb.cfg, "HBM_V_ACT_TYPE")
    for t_, name in ((q, "q"), (k, "k"), (v, "v")):
        if t_ is not None and not isinstance(t_, HbmTensor):
            fail(pb.kernel, name, repr(t_), "must be an HbmTensor")
    if q is not None:
        eb_q, blk_q = q.eb, q.blk
        mx_q = q.block > 0
    if k is not None:
        eb_kv, blk_kv = k.eb, k.blk
        mx_kv = k.block > 0
    _check_mx_alignment(pb, eb_q, blk_q, mx_q, eb_kv, blk_kv, mx_kv)
    return eb_q, eb_kv


def check_tensors(pb: Problem, q: HbmTensor | None, k: HbmTensor | None, v: HbmTensor | None) -> None:
    """K and V come together with one layout and one SCALE; the row pitches are Wp (K/V) and hq*d (Q)."""
    K, Wp = pb.kernel, pb.Wp
    if k is not None or v is not None:
        if k is None or v is None:
            fail(K, "v" if v is None else "k", None, "k and v must be given together")
        if k.scale_offset != v.scale_offset:
            fail(K, "v.scale_offset", v.scale_offset, f"must equal k.scale_offset={k.scale_offset} (shared SCALE)")
        k_layout = (k.eb, k.prec, k.row_pitch_elems, k.alloc_elems, k.block)
        v_layout = (v.eb, v.prec, v.row_pitch_elems, v.alloc_elems, v.block)
        if k_layout != v_layout:
            fail(K, "v", v, f"must have the same layout as k={k}")
        if k.row_pitch_elems != Wp:
            fail(K, "k.row_pitch_elems", k.row_pitch_elems, f"must equal kv_row_elems (Wp)={Wp}")
    if q is not None and q.row_pitch_elems != pb.hq * pb.d:
        fail(K, "q.row_pitch_elems", q.row_pitch_elems, f"must equal hq*d={pb.hq * pb.d}")


def check_slots(K: str, qk_slot: int, neg_slot: int) -> None:
    for name, slot in (("qk_slot", qk_slot), ("neg_slot", neg_slot)):
        need_int(K, name, slot, 0)
        if slot >= 16:
            fail(K, name, slot, "must be a constant slot < 16")
