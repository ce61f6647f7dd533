"""Chunked prefill: how many tokens of a sequence one pass of the decoder layer takes (:attr:`LayerShape.chunk`).

A prefill layer whose stage outputs for every token do not fit VRAM at once runs in chunks of ``C`` tokens per
sequence, one pass each (:func:`~programs.model.decoder.layer_parts`): the chunk's x rows loaded from HBM, its
K/V appended to the cache, its queries attending to the cache so far (end-aligned causal), its output rows stored
to HBM ``out``. :func:`resolve_chunk` turns the ``chunk`` a caller asks for into the shape's:

* ``None``: derived -- 0 (one pass, the unchunked layer) when every token fits, else the largest multiple of
  :func:`chunk_quantum` below ``seq`` that fits;
* ``0``: never chunk (refused when the whole layer does not fit);
* ``C``: chunks of ``C`` tokens (a multiple of the quantum; ``C >= seq`` is one pass).

*Fits*: the pass's VRAM layout (:func:`~programs.model.decoder.layer_vram`) within ``VECTOR_SRAM_SIZE`` rows and
every HBM tensor (:func:`layer_hbm_bytes`) within ``HBM_SIZE``. A shape that cannot fit is refused before any
input is built, the message naming the largest value that fits (found by bisection over the fit predicate).

A chunk is a multiple of MLEN, so its queries start on a q tile of flash attention and each chunk's blocks are
the unchunked layer's blocks (same q rows, same kv tiles): every token's result is the unchunked layer's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import NoReturn

from plena_sim.config import HardwareConfig
from plena_sim.memory.image import tensor_layout

from ..common import fail, row_pad
from .decoder import KERNEL, TENSOR_CLASS, LayerShape, layer_hbm_needs, layer_vram

__all__ = ["HBM_TYPE_KEY", "chunk_quantum", "layer_hbm_bytes", "vram_fits", "hbm_fits", "resolve_chunk"]

#: the HBM type of each tensor class of :data:`~programs.model.decoder.TENSOR_CLASS`
HBM_TYPE_KEY = {"act": "HBM_V_ACT_TYPE", "weight": "HBM_M_WEIGHT_TYPE", "kv": "HBM_M_KV_TYPE"}
_ALIGN = 64  # tensors are placed at 64-byte aligned bases


def chunk_quantum(cfg: HardwareConfig) -> int:
    """Chunks are multiples of this: MLEN (flash attention's q tile) and the row padding quantum."""
    return math.lcm(cfg.MLEN, row_pad(cfg))


def layer_hbm_bytes(cfg: HardwareConfig, s: LayerShape) -> int:
    """Bytes every HBM tensor of the layer takes, packed at 64-byte aligned bases (elements and MX scales)."""
    total = 0
    for name, (rows, cols) in layer_hbm_needs(cfg, s).items():
        t = cfg.hbm_type(HBM_TYPE_KEY[TENSOR_CLASS[name]])
        total += -(-tensor_layout(rows, cols, t)["total"] // _ALIGN) * _ALIGN
    return total


def vram_fits(cfg: HardwareConfig, s: LayerShape, keep: bool) -> bool:
    return layer_vram(cfg, s, keep).rows_used <= cfg.VECTOR_SRAM_SIZE


def hbm_fits(cfg: HardwareConfig, s: LayerShape) -> bool:
    return layer_hbm_bytes(cfg, s) <= cfg.HBM_SIZE


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest ``n`` in ``[lo, hi]`` with ``ok(n)`` (``ok`` monotone: true up to some n), ``lo - 1`` if none."""
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid + 1
        else:
            hi = mid - 1
    return hi


def _at_seq(s: LayerShape, seq: int, chunk: int) -> LayerShape:
    """The prefill shape of ``seq`` tokens per sequence, chunked by ``chunk`` where that is shorter."""
    return replace(s, seq=seq, kv_len=seq, kv_capacity=seq, chunk=chunk if 0 < chunk < seq else 0)


def _refuse_seq(cfg: HardwareConfig, s: LayerShape, chunk: int | None, keep: bool, why: str) -> NoReturn:
    """Refuse ``s.seq`` naming the largest length that fits in one pass (``chunk`` 0), in chunks of ``chunk``, or
    (None) either way."""
    least = chunk_quantum(cfg) if chunk is None else chunk

    def ok(seq: int) -> bool:
        whole = _at_seq(s, seq, 0)
        if chunk == 0 or vram_fits(cfg, whole, keep):
            return vram_fits(cfg, whole, keep) and hbm_fits(cfg, whole)
        part = _at_seq(s, seq, least)
        return vram_fits(cfg, part, keep) and hbm_fits(cfg, part)

    most = _largest(1, s.seq - 1, ok)
    fail(KERNEL, "seq", s.seq, f"does not fit: {why}; seq <= {most} fits" if most else f"does not fit: {why}")


def resolve_chunk(cfg: HardwareConfig, s: LayerShape, chunk: int | None, keep: bool) -> LayerShape:
    """``s`` with its chunk resolved (module docstring); a decode step is never chunked (``chunk`` must be None
    or 0). Raises ``ValueError`` naming the parameter and the largest value that fits."""
    if s.decode:
        if chunk:
            fail(KERNEL, "chunk", chunk, "must be 0 for a decode step (one token per sequence)")
        return s
    q = chunk_quantum(cfg)
    whole = replace(s, chunk=0)
    if chunk is None:
        out = whole if vram_fits(cfg, whole, keep) else _derive(cfg, s, q, keep)
    elif chunk == 0 or chunk >= s.seq:
        out = whole
        if not vram_fits(cfg, whole, keep):
            _refuse_seq(cfg, s, 0, keep, _vram_why(cfg, whole, keep, "in one pass (chunk=0)"))
    else:
        out = _explicit(cfg, s, chunk, q, keep)
    if not hbm_fits(cfg, out):
        why = f"its tensors take {layer_hbm_bytes(cfg, out)} bytes > HBM_SIZE={cfg.HBM_SIZE}"
        _refuse_seq(cfg, s, None if chunk is None else out.chunk, keep, why)
    return out


def _vram_why(cfg: HardwareConfig, s: LayerShape, keep: bool, how: str) -> str:
    rows = layer_vram(cfg, s, keep).rows_used
    return f"{how} the layer needs {rows} VRAM rows > VECTOR_SRAM_SIZE={cfg.VECTOR_SRAM_SIZE}"


def _derive(cfg: HardwareConfig, s: LayerShape, q: int, keep: bool) -> LayerShape:
    """The largest chunk (a multiple of ``q`` below seq) that fits; refused naming the largest seq if none does."""
    k = _largest(1, (s.seq - 1) // q, lambda k: vram_fits(cfg, replace(s, chunk=k * q), keep))
    if k < 1:
        least = replace(s, chunk=q) if q < s.seq else replace(s, chunk=0)
        _refuse_seq(cfg, s, None, keep, _vram_why(cfg, least, keep, f"in chunks of {q} tokens (the least)"))
    return replace(s, chunk=k * q)


def _explicit(cfg: HardwareConfig, s: LayerShape, chunk: int, q: int, keep: bool) -> LayerShape:
    """Chunks of ``chunk`` tokens; refused naming the largest chunk that fits (or the largest seq if none does)."""
    if chunk < 0 or chunk % q:
        fail(KERNEL, "chunk", chunk, f"must be None (derive), 0 (one pass) or a positive multiple of {q}")
    out = replace(s, chunk=chunk)
    if vram_fits(cfg, out, keep):
        return out
    k = _largest(1, chunk // q - 1, lambda k: vram_fits(cfg, replace(s, chunk=k * q), keep))
    why = _vram_why(cfg, out, keep, f"in chunks of {chunk} tokens")
    if k < 1:
        _refuse_seq(cfg, s, chunk, keep, why)
    fail(KERNEL, "chunk", chunk, f"does not fit: {why}; chunk <= {k * q} fits")
