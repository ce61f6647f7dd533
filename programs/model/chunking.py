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
    """The pass fits VRAM (a pass too long for its flash attention's own placement does not; the shape itself
    is checked first, by :func:`resolve_chunk`)."""
    try:
        return layer_vram(cfg, s, keep).rows_used <= cfg.VECTOR_SRAM_SIZE
    except ValueError:
        return False


def hbm_fits(cfg: HardwareConfig, s: LayerShape) -> bool:
    """Every tensor fits HBM (and every flash attention's 32-bit byte offsets reach it)."""
    try:
        return layer_hbm_bytes(cfg, s) <= cfg.HBM_SIZE
    except ValueError:
        return False


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest ``n`` in ``[lo, hi]`` with ``ok(n)`` (``ok`` monotone: true up to some n), ``lo - 1`` if none."""
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid + 1
        else:
            hi = mid - 1
    return hi


def _at_seq(s: LayerShape, seq: int) -> LayerShape:
    """The prefill shape of ``seq`` tokens per sequence (its chunk to be resolved)."""
    return replace(s, seq=seq, kv_len=seq, kv_capacity=seq, chunk=0)


def _fit(cfg: HardwareConfig, s: LayerShape, chunk: int | None, keep: bool) -> LayerShape | None:
    """``s`` with its chunk resolved (module docstring), None if it does not fit."""
    whole = replace(s, chunk=0)
    if chunk is None:
        out = whole if vram_fits(cfg, whole, keep) else _largest_chunk(cfg, s, s.seq - 1, keep)
    elif chunk == 0 or chunk >= s.seq:
        out = whole if vram_fits(cfg, whole, keep) else None
    else:
        out = replace(s, chunk=chunk) if vram_fits(cfg, replace(s, chunk=chunk), keep) else None
    return out if out is not None and hbm_fits(cfg, out) else None


def _largest_chunk(cfg: HardwareConfig, s: LayerShape, most: int, keep: bool) -> LayerShape | None:
    """``s`` in the largest chunks (a multiple of the quantum, <= ``most``) that fit VRAM, None if none does."""
    q = chunk_quantum(cfg)
    k = _largest(1, most // q, lambda k: vram_fits(cfg, replace(s, chunk=k * q), keep))
    return replace(s, chunk=k * q) if k >= 1 else None


def resolve_chunk(cfg: HardwareConfig, s: LayerShape, chunk: int | None, keep: bool) -> LayerShape:
    """``s`` with its chunk resolved (module docstring); a decode step is never chunked (``chunk`` must be None
    or 0). Raises ``ValueError`` naming the parameter and the largest value that fits."""
    if s.decode:
        if chunk:
            fail(KERNEL, "chunk", chunk, "must be 0 for a decode step (one token per sequence)")
        if not hbm_fits(cfg, s):  # the cache of kv_len positions (the capacity past it alike)

            def at(n: int) -> LayerShape:
                return replace(s, kv_len=n, kv_capacity=n + s.kv_capacity - s.kv_len)

            most = _largest(1, s.kv_len - 1, lambda n: hbm_fits(cfg, at(n)))
            fail(KERNEL, "kv_len", s.kv_len, f"does not fit: {_hbm_why(cfg, s)}; kv_len <= {most} fits")
        return s
    q = chunk_quantum(cfg)
    if chunk is not None and (chunk < 0 or chunk % q):
        fail(KERNEL, "chunk", chunk, f"must be None (derive), 0 (one pass) or a positive multiple of {q}")
    layer_vram(cfg, _at_seq(s, min(s.seq, q)), keep)  # the shape's own errors (at the least length) first
    out = _fit(cfg, s, chunk, keep)
    if out is not None:
        return out
    why = _why(cfg, s, chunk, keep)
    if chunk and chunk < s.seq and not vram_fits(cfg, replace(s, chunk=chunk), keep):
        smaller = _largest_chunk(cfg, s, chunk - q, keep)
        if smaller is not None and hbm_fits(cfg, smaller):
            fail(KERNEL, "chunk", chunk, f"does not fit: {why}; chunk <= {smaller.chunk} fits")
    most = _largest(1, s.seq - 1, lambda n: _fit(cfg, _at_seq(s, n), chunk, keep) is not None)
    fail(KERNEL, "seq", s.seq, f"does not fit: {why}; seq <= {most} fits" if most else f"does not fit: {why}")


def _why(cfg: HardwareConfig, s: LayerShape, chunk: int | None, keep: bool) -> str:
    """What does not fit: the VRAM of the pass asked for (derived: of the least chunk), else the HBM."""
    q = chunk_quantum(cfg)
    if chunk is None:
        derived = _largest_chunk(cfg, s, s.seq - 1, keep)
        if vram_fits(cfg, replace(s, chunk=0), keep) or derived is not None:
            return _hbm_why(cfg, derived or replace(s, chunk=0))
        least = replace(s, chunk=q if q < s.seq else 0)
        return _vram_why(cfg, least, keep, f"in chunks of {q} tokens (the least)")
    asked = replace(s, chunk=chunk if 0 < chunk < s.seq else 0)
    if vram_fits(cfg, asked, keep):
        return _hbm_why(cfg, asked)
    return _vram_why(cfg, asked, keep, f"in chunks of {chunk} tokens" if asked.chunk else "in one pass (chunk=0)")


def _vram_why(cfg: HardwareConfig, s: LayerShape, keep: bool, how: str) -> str:
    try:
        rows = layer_vram(cfg, s, keep).rows_used
    except ValueError as exc:
        return f"{how} {exc}"
    return f"{how} the layer needs {rows} VRAM rows > VECTOR_SRAM_SIZE={cfg.VECTOR_SRAM_SIZE}"


def _hbm_why(cfg: HardwareConfig, s: LayerShape) -> str:
    try:
        n = layer_hbm_bytes(cfg, s)
    except ValueError as exc:
        return str(exc)
    return f"its HBM tensors take {n} bytes > HBM_SIZE={cfg.HBM_SIZE}"
