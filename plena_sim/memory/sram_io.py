"""FP SRAM / INT SRAM preload and dump (memory.md §6).

One job: turn host values or upstream preload files into the word arrays the simulator loads into
FP SRAM (bf16 bit patterns, ``uint16[FP_SRAM_SIZE]``) and INT SRAM (``uint32[INT_SRAM_SIZE]``), and
write the matching dumps.

* FP values from Python/numpy are cast to float32 (RNE) and then rounded to bf16 (RNE, memory.md §3.1),
  i.e. ``bf16(f32(v))`` -- the same path as every other value entering a bf16 store.
* Upstream FP SRAM preload file: IEEE **f16** little-endian values from word 0, each converted
  f16 -> f32 (exact) -> bf16 (RNE).
* INT SRAM preload file: u32 little-endian from word 0.  Python integers may be given in
  ``[-2^31, 2^32)``; negatives are stored as their two's-complement u32.
* Dumps: FP SRAM as bf16 LE, INT SRAM as u32 LE, all words. A bf16 LE word file (an FP SRAM dump, VRAM rows)
  loads back exactly (:func:`load_bf16_words_file`).

Words not given are 0.  More values than the SRAM holds, a file whose length is not a whole number of
words, or an unreadable file raise :class:`~plena_sim.memory.image.ImageError` naming the file; a preload file is
read only when it is a regular file no larger than its SRAM (:mod:`isa.readers`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from isa.readers import InputFileError, open_input, read_at_most

from ..numerics.formats import f32_array_to_bf16_bits
from .image import ImageError

__all__ = [
    "fp_sram_from_values",
    "int_sram_from_values",
    "load_fp_sram_file",
    "load_int_sram_file",
    "load_bf16_words_file",
    "save_fp_sram_dump",
    "save_int_sram_dump",
]

_F16_LE = np.dtype("<f2")
_U16_LE = np.dtype("<u2")
_U32_LE = np.dtype("<u4")


def _check_size(size: int, what: str) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ImageError(f"{what} size must be an integer >= 1, got {size!r}")
    return int(size)


def _words(n: int, size: int, what: str, source: str) -> None:
    if n > size:
        raise ImageError(f"{source}: {n} values do not fit in {what} of {size} words")


def _f32_to_sram(x: np.ndarray, size: int, source: str) -> np.ndarray:
    _words(x.size, size, "FP SRAM", source)
    out = np.zeros(size, dtype=np.uint16)
    out[: x.size] = f32_array_to_bf16_bits(np.ascontiguousarray(x, dtype=np.float32))
    return out


def fp_sram_from_values(values: Any, size: int) -> np.ndarray:
    """bf16 bit patterns (``uint16[size]``) of ``bf16(f32(v))`` for each value, zero-filled."""
    size = _check_size(size, "FP SRAM")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ImageError(f"FP SRAM values: not a list of real numbers: {exc}") from None
    if arr.ndim > 1:
        raise ImageError(f"FP SRAM values: expected a flat list, got shape {arr.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        x = arr.reshape(-1).astype(np.float32)
    return _f32_to_sram(x, size, "FP SRAM values")


def int_sram_from_values(values: Any, size: int) -> np.ndarray:
    """``uint32[size]`` INT SRAM words from integers in ``[-2^31, 2^32)``, zero-filled."""
    size = _check_size(size, "INT SRAM")
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:  # pragma: no cover - numpy accepts nearly anything
        raise ImageError(f"INT SRAM values: {exc}") from None
    if arr.ndim > 1:
        raise ImageError(f"INT SRAM values: expected a flat list, got shape {arr.shape}")
    flat = arr.reshape(-1)
    if (
        flat.size
        and flat.dtype.kind not in "biu"
        and not (flat.dtype == object and all(isinstance(v, (int, np.integer)) for v in flat))
    ):
        raise ImageError(f"INT SRAM values: expected integers, got dtype {flat.dtype}")
    _words(flat.size, size, "INT SRAM", "INT SRAM values")
    out = np.zeros(size, dtype=np.uint32)
    for i, v in enumerate(flat.tolist()):
        v = int(v)
        if not -(1 << 31) <= v < (1 << 32):
            raise ImageError(f"INT SRAM values[{i}] = {v} is outside [-2^31, 2^32)")
        out[i] = v & 0xFFFFFFFF
    return out


def _read_words(path: str | os.PathLike, word: int, what: str, size: int) -> bytes:
    """The bytes of a preload file of whole words, at most ``size`` of them (refused before reading if more)."""
    p = Path(path)
    try:
        with open_input(p, f"{what} preload file", 1 << 62) as (fh, n):
            if n % word:
                raise ImageError(
                    f"{p}: {what} preload file has {n} bytes, not a whole number of {word}-byte words (truncated?)"
                )
            _words(n // word, size, what, str(p))
            data = read_at_most(fh, n + 1)
    except InputFileError as exc:
        raise ImageError(str(exc)) from None
    except OSError as exc:
        raise ImageError(f"cannot read {what} preload file {str(p)!r}: {exc.strerror or exc}") from None
    if len(data) != n:
        raise ImageError(f"{p}: {what} preload file changed size while it was read")
    return data


def load_fp_sram_file(path: str | os.PathLike, size: int) -> np.ndarray:
    """Upstream FP SRAM preload: f16 LE values -> f32 -> bf16 (RNE); ``uint16[size]``."""
    size = _check_size(size, "FP SRAM")
    data = _read_words(path, 2, "FP SRAM", size)
    x = np.frombuffer(data, dtype=_F16_LE).astype(np.float32)
    return _f32_to_sram(x, size, str(path))


def load_bf16_words_file(path: str | os.PathLike, size: int, what: str = "FP SRAM") -> np.ndarray:
    """bf16 bit patterns as LE u16 words (the FP SRAM dump's format: exact, no rounding), at most ``size`` of
    them; ``uint16[words in the file]``."""
    data = _read_words(path, 2, what, _check_size(size, what))
    return np.frombuffer(data, dtype=_U16_LE).astype(np.uint16)


def load_int_sram_file(path: str | os.PathLike, size: int) -> np.ndarray:
    """INT SRAM preload: u32 LE words; ``uint32[size]``."""
    size = _check_size(size, "INT SRAM")
    data = _read_words(path, 4, "INT SRAM", size)
    words = np.frombuffer(data, dtype=_U32_LE)
    _words(words.size, size, "INT SRAM", str(path))
    out = np.zeros(size, dtype=np.uint32)
    out[: words.size] = words
    return out


def _write(path: str | os.PathLike, data: bytes, what: str) -> None:
    """One dump file, written atomically (:mod:`isa.fileio`: a device, FIFO or directory target is refused)."""
    from isa.fileio import OutputError, atomic_write

    try:
        atomic_write(path, data)
    except OutputError as exc:
        raise ImageError(f"cannot write {what} dump {str(path)!r}: {exc}") from None


def save_fp_sram_dump(path: str | os.PathLike, bits: np.ndarray) -> None:
    """Write FP SRAM bf16 bit patterns as little-endian u16 words."""
    _write(path, np.asarray(bits, dtype=np.uint16).astype(_U16_LE).tobytes(), "FP SRAM")


def save_int_sram_dump(path: str | os.PathLike, words: np.ndarray) -> None:
    """Write INT SRAM words as little-endian u32."""
    _write(path, np.asarray(words, dtype=np.uint32).astype(_U32_LE).tobytes(), "INT SRAM")
