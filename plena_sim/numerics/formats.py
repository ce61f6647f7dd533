"""Number formats of the PLENA data path: bf16, generic minifloats, E8M0 scales and the MX block codec.

One job: bit-exact conversion between float32 values and the storage encodings of memory.md §3-§4.

Layout of this module
---------------------
* Numba kernels (``@njit(cache=True)``, nopython, numpy arrays and scalars only).  They are the
  contract the simulator's run loop is built on, so their names and signatures are fixed:

  - bf16 (§3.1): :func:`f32_to_bf16_bits`, :func:`round_bf16`, :func:`bf16_bits_to_f32`,
    :func:`f32_array_to_bf16_bits`, :func:`bf16_bits_array_to_f32`.
  - generic minifloat ``Fp{sign, E, Mt}`` (§3.2): :func:`minifloat_encode` (RNE with carry into the
    exponent, subnormals, two overflow/NaN modes) and :func:`minifloat_decode`.
  - E8M0 scale (§3.3): :func:`e8m0_decode`.
  - MX block codec (§4): :func:`mx_encode_row`, :func:`mx_decode_row`.
  - Plain HBM types (§3.4): :func:`plain_encode_row`, :func:`plain_decode_row`.

* Python wrappers taking a config precision type (:class:`~plena_sim.config.PlainType` /
  :class:`~plena_sim.config.MxType`): :func:`encode_tensor`, :func:`decode_tensor`, :func:`fp_params`.

Every element format parameter (E, Mt, block size, bytes per element) is passed in from the config's
PRECISION types; nothing here knows "E4M3".  The MX *scale* format is E8M0 by definition (memory.md §4;
the config loader rejects anything else), so the MX kernels implement E8M0 directly.

Exponents are always taken from float64 exponent fields, never from a floating-point log2, and
rounding is done on exactly scaled float64 values (every float32 and every minifloat with at most 52
mantissa bits is exact in float64, and scaling by a power of two is exact), so each encode performs a
single correct rounding of the exact real input.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..config.hardware import FpType, IntType, MxType, PlainType

__all__ = [
    "FLT_MAX",
    "FLAG_NORMAL",
    "FLAG_SATURATED",
    "FLAG_NAN",
    "f32_to_bf16_bits",
    "round_bf16",
    "bf16_bits_to_f32",
    "f32_array_to_bf16_bits",
    "bf16_bits_array_to_f32",
    "round_bf16_array",
    "minifloat_encode",
    "minifloat_decode",
    "minifloat_encode_array",
    "minifloat_decode_array",
    "minifloat_decode_table",
    "e8m0_decode",
    "mx_encode_row",
    "mx_decode_row",
    "plain_encode_row",
    "plain_decode_row",
    "fp_params",
    "encode_tensor",
    "decode_tensor",
    "encoded_sizes",
]

#: Largest finite float32; an MX encoder input of ±Inf is replaced by ±FLT_MAX (memory.md §4).
FLT_MAX = float(np.finfo(np.float32).max)

#: ``minifloat_encode`` flags.
FLAG_NORMAL = 0
FLAG_SATURATED = 1
FLAG_NAN = 2

# E8M0 (Fp{sign=false, E=8, Mt=0}) is the only MX scale type (memory.md §3.3/§4): bias 2^7-1,
# codes 1..254 are finite, 255 is +Inf, 0 decodes to 0.0.  Shared exponents are clamped so the
# encoder only produces 1..254 for a non-zero block.
_E8M0_BIAS = 127
_E8M0_CODE_INF = 255
_SHARED_MIN = 1 - _E8M0_BIAS  # -126 -> code 1
_SHARED_MAX = _E8M0_CODE_INF - 1 - _E8M0_BIAS  # 127 -> code 254

_F32_EXP_MASK = 0x7F800000
_F32_QUIET = 0x00400000
_F32_MAN_BITS = 23


# =========================================================================== bf16 (§3.1)


@njit(cache=True)
def f32_to_bf16_bits(x):
    """Round a float32 to bf16 (RNE) and return the 16-bit pattern (memory.md §3.1).

    NaN -> quiet NaN ``0x7FC0`` with the sign kept; overflow rounds to ±Inf; subnormals are rounded
    like normals."""
    u = np.int64(np.float32(x).view(np.uint32))
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF) != 0:
        return np.uint16(((u >> 16) & 0x8000) | 0x7FC0)
    return np.uint16((u + 0x7FFF + ((u >> 16) & 1)) >> 16)


@njit(cache=True)
def bf16_bits_to_f32(b):
    """Widen a bf16 bit pattern to float32 exactly (``u = bf16 << 16``)."""
    return np.uint32(np.uint32(b) << np.uint32(16)).view(np.float32)


@njit(cache=True)
def round_bf16(x):
    """The float32 value of ``bf16(x)``."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


@njit(cache=True)
def f32_array_to_bf16_bits(a):
    """Element-wise :func:`f32_to_bf16_bits` of a 1-D float32 array -> new uint16 array."""
    out = np.empty(a.shape[0], dtype=np.uint16)
    for i in range(a.shape[0]):
        out[i] = f32_to_bf16_bits(a[i])
    return out


@njit(cache=True)
def bf16_bits_array_to_f32(a):
    """Element-wise :func:`bf16_bits_to_f32` of a 1-D uint16 array -> new float32 array."""
    out = np.empty(a.shape[0], dtype=np.float32)
    for i in range(a.shape[0]):
        out[i] = bf16_bits_to_f32(a[i])
    return out


@njit(cache=True)
def round_bf16_array(a):
    """Element-wise :func:`round_bf16` of a 1-D float32 array -> new float32 array."""
    return bf16_bits_array_to_f32(f32_array_to_bf16_bits(a))


# =========================================================================== minifloat (§3.2)


@njit(cache=True)
def _pow2(k):
    """``2.0**k`` as float64 from its bits (no libm call); exact for -1022 <= k <= 1023, the only range used."""
    return np.int64((np.int64(k) + 1023) << 52).view(np.float64)


@njit(cache=True)
def _scale2(x, k):
    """``x * 2**k`` exactly (``math.ldexp``): a multiply by :func:`_pow2` where ``2**k`` is a normal float64,
    libm only for the extreme exponents of E = 11 formats."""
    if -1022 <= k <= 1023:
        return x * _pow2(k)
    return math.ldexp(x, k)


@njit(cache=True)
def _exponent(a):
    """``floor(log2 a)`` of a positive normal float64, from its exponent field (``frexp(a)[1] - 1``)."""
    return np.int64((np.float64(a).view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)) - 1023


@njit(cache=True)
def _round_half_even(v):
    """RNE of a non-negative float64 below 2^53 to an int64 (exact: v - floor(v) is exact)."""
    f = math.floor(v)
    d = v - f
    n = np.int64(f)
    if d > 0.5 or (d == 0.5 and (n & 1) == 1):
        n += 1
    return n


@njit(cache=True)
def minifloat_encode(y, E, Mt, saturate):
    """Encode the exact real ``y`` (float64) as minifloat ``Fp{sign=true, E, Mt}`` (memory.md §3.2).

    Returns ``(code, flag)`` as int64: the ``1+E+Mt``-bit code (sign bit at ``E+Mt``) and a flag
    (0 normal, 1 saturated, 2 NaN input).  ``saturate=True`` is MX element mode: overflow (including
    ±Inf) gives ±max_normal with flag 1, NaN gives code 0 with flag 2, no Inf/NaN code is produced.
    ``saturate=False`` is Plain (IEEE) mode: overflow gives ±Inf (flag 0), NaN gives the canonical NaN
    (exponent all ones, mantissa MSB set, sign kept; flag 2)."""
    E = np.int64(E)
    Mt = np.int64(Mt)
    sign_shift = E + Mt
    s = np.int64(np.float64(y).view(np.uint64) >> np.uint64(63))
    exp_all = (np.int64(1) << E) - 1
    if y != y:
        if saturate:
            return np.int64(0), np.int64(2)
        code = exp_all << Mt
        if Mt > 0:
            code |= np.int64(1) << (Mt - 1)
        return code | (s << sign_shift), np.int64(2)
    bias = (np.int64(1) << (E - 1)) - 1
    emax = exp_all - 1 - bias
    max_code = ((exp_all - 1) << Mt) | ((np.int64(1) << Mt) - 1)
    a = abs(y)
    overflow = False
    code = np.int64(0)
    if a == math.inf:
        overflow = True
    elif a >= _pow2(1 - bias):
        e = _exponent(a)  # floor(log2 a), exact
        if e > emax:  # (a mantissa carry below only raises e)
            overflow = True
        else:
            n = _round_half_even(_scale2(a, Mt - e))  # a / 2^e * 2^Mt (exact), in [2^Mt, 2^(Mt+1)]
            if n == (np.int64(1) << (Mt + 1)):  # mantissa carry into the exponent
                n = np.int64(1) << Mt
                e += 1
            if e > emax:
                overflow = True
            else:
                code = ((e + bias) << Mt) | (n - (np.int64(1) << Mt))
    else:
        code = _round_half_even(_scale2(a, bias - 1 + Mt))  # a / min_sub (exact); 2^Mt = min_normal
        if code > max_code:  # only for degenerate E=1 formats without normals
            overflow = True
    flag = np.int64(0)
    if overflow:
        if saturate:
            code = max_code
            flag = np.int64(1)
        else:
            code = exp_all << Mt
    return code | (s << sign_shift), flag


@njit(cache=True)
def minifloat_decode(code, E, Mt, sign):
    """Decode a minifloat code of ``Fp{sign, E, Mt}`` to its exact float64 value (memory.md §3.2)."""
    code = np.int64(code)
    E = np.int64(E)
    Mt = np.int64(Mt)
    s = (code >> (E + Mt)) & 1 if sign else np.int64(0)
    exp_all = (np.int64(1) << E) - 1
    e = (code >> Mt) & exp_all
    m = code & ((np.int64(1) << Mt) - 1)
    bias = (np.int64(1) << (E - 1)) - 1
    if e == exp_all:
        v = math.inf if m == 0 else math.nan
    elif e == 0:
        v = _scale2(np.float64(m), 1 - bias - Mt)
    else:
        v = _scale2(np.float64(m + (np.int64(1) << Mt)), e - bias - Mt)
    return -v if s == 1 else v


@njit(cache=True)
def minifloat_encode_array(x, E, Mt, saturate, codes, flags):
    """:func:`minifloat_encode` of every element of the 1-D array ``x`` into ``codes``/``flags``."""
    for i in range(x.shape[0]):
        c, f = minifloat_encode(np.float64(x[i]), E, Mt, saturate)
        codes[i] = c
        flags[i] = f


@njit(cache=True)
def minifloat_decode_array(codes, E, Mt, sign, out):
    """:func:`minifloat_decode` of every element of ``codes`` into the float64 array ``out``."""
    for i in range(codes.shape[0]):
        out[i] = minifloat_decode(codes[i], E, Mt, sign)


@njit(cache=True)
def minifloat_decode_table(E, Mt, sign):
    """float64 values of all ``2^(sign+E+Mt)`` codes (a lookup table for hot decode loops)."""
    w = np.int64(E) + np.int64(Mt) + (1 if sign else 0)
    out = np.empty(np.int64(1) << w, dtype=np.float64)
    for c in range(out.shape[0]):
        out[c] = minifloat_decode(c, E, Mt, sign)
    return out


# =========================================================================== E8M0 scale (§3.3)


@njit(cache=True)
def e8m0_decode(code):
    """E8M0 scale code -> float64: 0 -> 0.0, 1..254 -> 2^(code-127), 255 -> +Inf."""
    code = np.int64(code)
    if code == 0:
        return 0.0
    if code == _E8M0_CODE_INF:
        return math.inf
    return _pow2(code - _E8M0_BIAS)


# =========================================================================== byte helpers


@njit(cache=True)
def _put_le(buf, pos, code, nbytes):
    for k in range(nbytes):
        buf[pos + k] = np.uint8((code >> (8 * k)) & 0xFF)


@njit(cache=True)
def _get_le(buf, pos, nbytes):
    code = np.int64(0)
    for k in range(nbytes):
        code |= np.int64(buf[pos + k]) << (8 * k)
    return code


@njit(cache=True)
def _f32_signbit(v):
    return np.int64(np.float32(v).view(np.uint32) >> np.uint32(31))


# =========================================================================== MX block codec (§4)


@njit(cache=True)
def mx_encode_row(x, E, Mt, block, elem_out, scale_out, counts):
    """MX-encode the float32 row ``x`` (length a multiple of ``block``), memory.md §4.

    Element ``Fp{sign=true, E, Mt}`` codes go to ``elem_out`` (``(1+E+Mt)/8`` bytes each, little
    endian), one E8M0 code per block to ``scale_out``.  ``counts[0] += nan_count``,
    ``counts[1] += saturated`` (an ±Inf input counts twice: substitution and element saturation)."""
    n = x.shape[0]
    E = np.int64(E)
    Mt = np.int64(Mt)
    block = np.int64(block)
    eb = (1 + E + Mt) // 8
    if block < 1 or n % block != 0:
        raise ValueError("mx_encode_row: row length is not a multiple of the block size")
    if (1 + E + Mt) % 8 != 0 or elem_out.shape[0] < n * eb or scale_out.shape[0] < n // block:
        raise ValueError("mx_encode_row: output buffers too small or element width not 8/16 bits")
    emax = (np.int64(1) << (E - 1)) - 1  # (2^E - 2) - bias
    sign_shift = E + Mt
    nan_count = np.int64(0)
    saturated = np.int64(0)
    for b in range(n // block):
        lo = b * block
        amax = 0.0
        for j in range(lo, lo + block):
            v: float = np.float64(x[j])  # (the annotation is for mypy only: not evaluated, no bytecode)
            if v != v:
                continue
            a = abs(v)
            if a == math.inf:
                a = FLT_MAX
            if a > amax:
                amax = a
        if amax == 0.0:
            scale_out[b] = 0
            for j in range(lo, lo + block):
                v = x[j]
                if v != v:
                    nan_count += 1
                    code = np.int64(0)
                else:
                    code = _f32_signbit(v) << sign_shift
                _put_le(elem_out, j * eb, code, eb)
            continue
        shared = _exponent(amax) - emax
        if shared < _SHARED_MIN:
            shared = np.int64(_SHARED_MIN)
        elif shared > _SHARED_MAX:
            shared = np.int64(_SHARED_MAX)
        scale_out[b] = np.uint8(shared + _E8M0_BIAS)
        for j in range(lo, lo + block):
            v = np.float64(x[j])
            if v != v:
                nan_count += 1
                code = np.int64(0)
            else:
                if v == math.inf:
                    v = FLT_MAX
                    saturated += 1
                elif v == -math.inf:
                    v = -FLT_MAX
                    saturated += 1
                code, flag = minifloat_encode(v * _pow2(-shared), E, Mt, True)
                if flag == 1:
                    saturated += 1
            _put_le(elem_out, j * eb, code, eb)
    counts[0] += nan_count
    counts[1] += saturated


@njit(cache=True)
def mx_decode_row(elem_in, scale_in, E, Mt, block, out):
    """Decode ``out.shape[0]`` MX elements: ``out[j] = f32(elem(code[j]) * e8m0(scale[j div block]))``.

    Scale code 0 -> 0.0 and 255 -> +Inf (so a zero element under scale 255 gives NaN, as IEEE)."""
    n = out.shape[0]
    E = np.int64(E)
    Mt = np.int64(Mt)
    block = np.int64(block)
    eb = (1 + E + Mt) // 8
    if block < 1 or elem_in.shape[0] < n * eb or scale_in.shape[0] < (n + block - 1) // block:
        raise ValueError("mx_decode_row: input buffers too small")
    for lo in range(0, n, block):  # one scale per block (no division per element)
        scale = e8m0_decode(scale_in[lo // block])
        for j in range(lo, min(lo + block, n)):
            out[j] = np.float32(minifloat_decode(_get_le(elem_in, j * eb, eb), E, Mt, True) * scale)


# =========================================================================== Plain types (§3.4)


@njit(cache=True)
def plain_encode_row(x, E, Mt, nbytes, out):
    """Encode the float32 row ``x`` as Plain ``Fp{sign=true, E, Mt}`` of ``nbytes`` bytes per element
    (little endian) in IEEE mode: RNE, overflow -> ±Inf, NaN -> canonical NaN with the sign kept.

    E8M7 is exactly :func:`f32_to_bf16_bits`; E8M23 is the identity on every non-NaN float32."""
    n = x.shape[0]
    E = np.int64(E)
    Mt = np.int64(Mt)
    nbytes = np.int64(nbytes)
    if (1 + E + Mt) != 8 * nbytes or out.shape[0] < n * nbytes:
        raise ValueError("plain_encode_row: width mismatch or output buffer too small")
    if E == 8 and Mt == _F32_MAN_BITS:
        for i in range(n):
            u = np.int64(np.float32(x[i]).view(np.uint32))
            if (u & _F32_EXP_MASK) == _F32_EXP_MASK and (u & 0x007FFFFF) != 0:
                u = (u & 0x80000000) | _F32_EXP_MASK | _F32_QUIET
            _put_le(out, i * 4, u, 4)
    elif E == 8 and Mt == 7:
        for i in range(n):
            _put_le(out, i * 2, np.int64(f32_to_bf16_bits(x[i])), 2)
    else:
        for i in range(n):
            code, _flag = minifloat_encode(np.float64(x[i]), E, Mt, False)
            _put_le(out, i * nbytes, code, nbytes)


@njit(cache=True)
def plain_decode_row(b, E, Mt, nbytes, out):
    """Decode ``out.shape[0]`` Plain ``Fp{sign=true, E, Mt}`` elements (``nbytes`` each, LE) to f32.

    Finite values and infinities are decoded exactly (rounded to f32 only if the format exceeds f32).
    A NaN code gives an f32 NaN with its sign and its mantissa payload left-aligned (so E8M7 decode is
    ``bits << 16`` and E8M23 decode is a pure bit reinterpretation)."""
    n = out.shape[0]
    E = np.int64(E)
    Mt = np.int64(Mt)
    nbytes = np.int64(nbytes)
    if (1 + E + Mt) != 8 * nbytes or b.shape[0] < n * nbytes:
        raise ValueError("plain_decode_row: width mismatch or input buffer too small")
    exp_all = (np.int64(1) << E) - 1
    man_mask = (np.int64(1) << Mt) - 1
    for i in range(n):
        code = _get_le(b, i * nbytes, nbytes)
        if E == 8 and Mt == _F32_MAN_BITS:
            out[i] = np.uint32(code).view(np.float32)
            continue
        m = code & man_mask
        if ((code >> Mt) & exp_all) == exp_all and m != 0:
            if Mt <= _F32_MAN_BITS:
                payload = m << (_F32_MAN_BITS - Mt)
            else:
                payload = m >> (Mt - _F32_MAN_BITS)
                if payload == 0:
                    payload = np.int64(_F32_QUIET)
            bits = (((code >> (E + Mt)) & 1) << 31) | _F32_EXP_MASK | payload
            out[i] = np.uint32(bits).view(np.float32)
        else:
            out[i] = np.float32(minifloat_decode(code, E, Mt, True))


# =========================================================================== Python wrappers


def fp_params(t: PlainType | MxType) -> tuple[int, int, int]:
    """``(E, Mt, elem_bytes)`` of the element format of an HBM precision type.

    Raises ValueError for types the codec does not implement (Int data, unsigned or non-byte-sized
    elements, MX scales other than E8M0)."""
    f: FpType | IntType
    if isinstance(t, MxType):
        f = t.elem
        if not isinstance(f, FpType) or not f.sign or f.bits not in (8, 16):
            raise ValueError(f"MX element must be a signed Fp of 8 or 16 bits, got {t.describe()}")
        s = t.scale
        if not (isinstance(s, FpType) and not s.sign and s.exponent == 8 and s.mantissa == 0):
            raise ValueError(f"MX scale must be E8M0 Fp{{sign=false, E=8, M=0}}, got {t.describe()}")
        if t.block < 1:
            raise ValueError(f"MX block must be >= 1, got {t.describe()}")
    elif isinstance(t, PlainType):
        f = t.data
        if isinstance(f, IntType) or not isinstance(f, FpType):
            raise ValueError(f"Plain Int types have no float codec, got {t.describe()}")
        if not f.sign or f.bits not in (8, 16, 32):
            raise ValueError(f"Plain type must be a signed Fp of 8, 16 or 32 bits, got {t.describe()}")
    else:
        raise TypeError(f"expected a PlainType or MxType, got {type(t).__name__}")
    if f.exponent < 2:
        raise ValueError(f"element format needs at least 2 exponent bits, got {f.describe()}")
    return f.exponent, f.mantissa, f.bits // 8


def encoded_sizes(n: int, t: PlainType | MxType) -> tuple[int, int]:
    """``(element bytes, scale bytes)`` taken by ``n`` elements of type ``t``."""
    _e, _m, eb = fp_params(t)
    if isinstance(t, MxType):
        if n % t.block:
            raise ValueError(f"{n} elements is not a multiple of the MX block {t.block}")
        return n * eb, (n // t.block) * t.scale_bytes
    return n * eb, 0


def encode_tensor(values: np.ndarray, t: PlainType | MxType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encode ``values`` (any shape, cast to float32 RNE, flattened row-major) in HBM type ``t``.

    Returns ``(elem_bytes, scale_bytes, counts)``: uint8 element region, uint8 scale region (empty for
    Plain types) and int64 ``[nan_count, saturated]`` (MX only; zeros for Plain).  For MX the last
    dimension must be a multiple of the block, so blocks never span rows."""
    E, Mt, eb = fp_params(t)
    with np.errstate(over="ignore", invalid="ignore"):
        arr = np.asarray(values, dtype=np.float32)
    if isinstance(t, MxType) and arr.ndim >= 1 and arr.shape[-1] % t.block:
        raise ValueError(f"last dimension {arr.shape[-1]} is not a multiple of the MX block {t.block}")
    x = np.ascontiguousarray(arr).reshape(-1)
    counts = np.zeros(2, dtype=np.int64)
    n_elem, n_scale = encoded_sizes(x.size, t)
    elem = np.empty(n_elem, dtype=np.uint8)
    scale = np.empty(n_scale, dtype=np.uint8)
    if isinstance(t, MxType):
        mx_encode_row(x, E, Mt, t.block, elem, scale, counts)
    else:
        plain_encode_row(x, E, Mt, eb, elem)
    return elem, scale, counts


def decode_tensor(
    elem_bytes: np.ndarray,
    scale_bytes: np.ndarray | None,
    t: PlainType | MxType,
    shape: tuple[int, ...] | int | None = None,
) -> np.ndarray:
    """Decode an element region (and, for MX, its scale region) to float32.

    ``shape`` defaults to all elements in ``elem_bytes`` as a 1-D array."""
    E, Mt, eb = fp_params(t)
    elem = np.ascontiguousarray(np.asarray(elem_bytes, dtype=np.uint8)).reshape(-1)
    if shape is None:
        shape = (elem.size // eb,)
    n = int(np.prod(shape, dtype=np.int64))
    if elem.size < n * eb:
        raise ValueError(f"element region has {elem.size} bytes, {n * eb} needed for {n} elements")
    out = np.empty(n, dtype=np.float32)
    if isinstance(t, MxType):
        if scale_bytes is None:
            raise ValueError("an MX tensor needs its scale region")
        scale = np.ascontiguousarray(np.asarray(scale_bytes, dtype=np.uint8)).reshape(-1)
        need = -(-n // t.block)
        if scale.size < need:
            raise ValueError(f"scale region has {scale.size} bytes, {need} needed for {n} elements")
        mx_decode_row(elem, scale, E, Mt, t.block, out)
    else:
        plain_decode_row(elem, E, Mt, eb, out)
    return out.reshape(shape)
