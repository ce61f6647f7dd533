"""bf16 on the host (memory.md §3.1): numpy arrays and scalars <-> bf16 bit patterns.

One job: the one host-side implementation of the bf16 rule, for everything outside the compiled core
(the Machine API, the reference interpreter, trace and fault rendering, the testbench harness and its
comparison). The ``@njit`` kernels of :mod:`plena_sim.numerics.formats` implement the same rule inside the
core; ``tests/numerics`` checks both against ``ml_dtypes`` on all 65536 patterns.

The rule: a value is first cast to float32 (RNE), then rounded to bf16 with round-to-nearest-even
(``(u + 0x7FFF + ((u >> 16) & 1)) >> 16`` on the float32 bits ``u``; overflow rounds to ±Inf,
subnormals like normals); every NaN becomes the quiet NaN ``sign | 0x7FC0`` (the sign is kept, the
payload is not). Widening is exact: ``u = bits << 16``.

* :func:`encode` ``(values) -> uint16 array`` and :func:`decode` ``(bits) -> float32 array`` (any
  shape; ``decode`` wraps non-uint16 integers to 16 bits);
* :func:`round_values` ``(values) -> float32 array``: ``decode(encode(values))``;
* :func:`encode_scalar` ``(value) -> int`` and :func:`decode_scalar` ``(bits) -> numpy.float32``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NAN_BITS", "encode", "decode", "round_values", "encode_scalar", "decode_scalar"]

#: the quiet NaN every NaN becomes (with the sign of the input added)
NAN_BITS = 0x7FC0


def encode(values) -> np.ndarray:
    """bf16 bit patterns (uint16, the shape of ``values``) of ``bf16(f32(values))``."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.asarray(values, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = ((u >> 16) & 0x8000) | NAN_BITS
    return np.where(np.isnan(x), nan, rounded).astype(np.uint16)


def decode(bits) -> np.ndarray:
    """float32 values (the shape of ``bits``) of bf16 bit patterns: exact, ``u = bits << 16``."""
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        b = b.astype(np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_values(values) -> np.ndarray:
    """float32 values of ``bf16(f32(values))``."""
    return decode(encode(values))


def encode_scalar(value) -> int:
    """The bf16 bit pattern of one value."""
    return int(encode(np.array([value]))[0])


def decode_scalar(bits) -> np.float32:
    """The float32 value of one bf16 bit pattern."""
    return decode(np.array([int(bits)], dtype=np.uint16))[0]
