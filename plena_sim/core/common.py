"""Shared numerics of the core units: fault records, bf16 canonicalisation, NaN propagation, dot products.

One job: the small ``@njit`` helpers every unit file uses. Numerics (isa.md §5-§7): dot products in float64,
sequential ascending from +0.0 with no FMA contraction; the first-NaN-operand rule made explicit.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from isa.table import EXP_CLAMP

from ..faults import INT64_MAX
from ..numerics.formats import bf16_bits_to_f32, f32_to_bf16_bits
from .slots import RUN_FAULT


@njit("int64(int64[::1], int64, int64, int64, int64, int64, int64, int64, int64)", cache=True)
def fault(frec, rule, pc, operand, value, index, limit, x6, x7):
    """Fill the fault record (faults.py slots); returns RUN_FAULT. One explicit signature: the
    arguments are cast to int64 at every call site, so there is a single compiled version."""
    frec[0] = rule
    frec[1] = pc
    frec[2] = operand
    frec[3] = value
    frec[4] = index
    frec[5] = limit
    frec[6] = x6
    frec[7] = x7
    return RUN_FAULT


@njit(cache=True, inline="always")
def canon(bits):
    """bf16(f32(bits)): identity except that NaNs become the canonical quiet NaN (sign kept)."""
    return f32_to_bf16_bits(bf16_bits_to_f32(bits))


@njit(cache=True, inline="always")
def lane_on(vmask, j, H):
    h = j // H
    return h < 32 and ((vmask >> h) & 1) == 1


@njit(cache=True, inline="always")
def exp_clamped(a):
    """f32(exp(clamp(a, -88, 88))) with exp in float64; NaN stays NaN (its own bits)."""
    if a != a:
        return a
    x = np.float64(a)
    if x < -EXP_CLAMP:
        x = np.float64(-EXP_CLAMP)
    elif x > EXP_CLAMP:
        x = np.float64(EXP_CLAMP)
    return np.float32(math.exp(x))


# ---- NaN propagation. IEEE 754 leaves open which NaN a binary operation returns when both operands
# are NaN; x86 returns the first operand, but LLVM may commute fadd/fmul operands, so the core makes
# the rule explicit: a NaN result is the first NaN operand, quieted (an invalid operation on non-NaN
# operands keeps the hardware default NaN). This is also what numpy's element-wise loops in the
# reference produce for ``in1 op in2``. Only the NaN path is slow.


@njit(cache=True, inline="always")
def q32(x):
    return np.uint32(np.float32(x).view(np.uint32) | np.uint32(0x00400000)).view(np.float32)


@njit(cache=True, inline="always")
def q64(x):
    return np.uint64(np.float64(x).view(np.uint64) | np.uint64(0x0008000000000000)).view(np.float64)


@njit(cache=True, inline="always")
def nan32(a, b, r):
    """float32 result ``r`` of ``a op b`` with the first-NaN-operand rule (``a``'s NaN, else ``b``'s, quieted)."""
    if r != r:
        x = a if a != a else b
        if x != x:
            return q32(x)
    return r


@njit(cache=True, inline="always")
def nan64(a, b, r):
    """float64 twin of :func:`nan32` (the dot products and row sums accumulate in float64)."""
    if r != r:
        x = a if a != a else b
        if x != x:
            return q64(x)
    return r


@njit(cache=True, inline="always")
def acc32(acc, ps):
    """``f32(acc + ps)`` (accumulator first)."""
    return nan32(acc, ps, np.float32(acc + ps))


@njit(cache=True)
def dot(x, xo, w, n):
    """``sum_k x[xo+k] * w[k]`` for k < n: float64, sequential ascending from +0.0, no FMA."""
    p = 0.0
    for k in range(n):
        p = p + x[xo + k] * w[k]
    if p != p:  # some NaN: redo with the explicit propagation rule (x before w, p before product)
        p = 0.0
        for k in range(n):
            a = x[xo + k]
            b = w[k]
            t = nan64(a, b, a * b)
            p = nan64(p, t, p + t)
    return p


@njit(cache=True)
def sat_add(u, k):
    """min(u + k, INT64_MAX) for a uint64 ``u`` and an int64 ``k >= 0`` (fault-record values)."""
    if u > np.uint64(INT64_MAX):
        return np.int64(INT64_MAX)
    s = np.int64(u)
    if s > INT64_MAX - k:
        return np.int64(INT64_MAX)
    return s + k


# ==================================================================================== vector unit
