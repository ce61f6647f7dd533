"""FP SRAM / INT SRAM preload and dump (memory.md §6)."""

import numpy as np
import pytest

from plena_sim.config import default_config
from plena_sim.memory.image import ImageError
from plena_sim.memory.sram_io import (
    fp_sram_from_values,
    int_sram_from_values,
    load_fp_sram_file,
    load_int_sram_file,
    save_fp_sram_dump,
    save_int_sram_dump,
)

CFG = default_config()


def test_fp_values_rounded_to_bf16():
    bits = fp_sram_from_values([1.0, 1.00390625, 1.01171875, -2.5, 1e39, float("nan"), -0.0, 3.0e-40], CFG.FP_SRAM_SIZE)
    assert bits.dtype == np.uint16 and bits.shape == (CFG.FP_SRAM_SIZE,) == (1024,)
    # 1e39 overflows f32 -> +Inf; 3e-40 is an f32 subnormal 0x00034400 -> bf16 0x0003
    assert bits[:8].tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80, 0x7FC0, 0x8000, 0x0003]
    assert not bits[8:].any()


def test_fp_sram_file_is_f16_converted_to_bf16(tmp_path):
    f16 = np.array([0x3C00, 0x7BFF, 0x0001, 0x3C01, 0x7E00, 0xFE00, 0xFC00, 0x3555], "<u2")
    path = tmp_path / "fp.bin"
    path.write_bytes(f16.tobytes())
    bits = load_fp_sram_file(path, 16)
    # 1.0; 65504 (0x477FE000) rounds up to 65536; 2^-24 exact; 1+2^-10 -> 1.0; NaNs canonical;
    # -Inf; 0.333251953125 = 0x3EAAA000 -> 0x3EAB (above the tie)
    assert bits.tolist() == [0x3F80, 0x4780, 0x3380, 0x3F80, 0x7FC0, 0xFFC0, 0xFF80, 0x3EAB] + [0] * 8


def test_fp_sram_file_errors(tmp_path):
    path = tmp_path / "fp.bin"
    path.write_bytes(bytes(2 * 9))
    with pytest.raises(ImageError, match="9 values do not fit in FP SRAM of 8 words") as ei:
        load_fp_sram_file(path, 8)
    assert str(path) in str(ei.value)
    path.write_bytes(bytes(5))
    with pytest.raises(ImageError, match="not a whole number of 2-byte words") as ei:
        load_fp_sram_file(path, 8)
    assert str(path) in str(ei.value)
    with pytest.raises(ImageError, match="cannot read FP SRAM preload file"):
        load_fp_sram_file(tmp_path / "missing.bin", 8)
    with pytest.raises(ImageError, match="do not fit"):
        fp_sram_from_values([1.0] * 5, 4)
    with pytest.raises(ImageError, match="not a list of real numbers"):
        fp_sram_from_values(["x"], 4)


def test_int_sram_values_and_file(tmp_path):
    words = int_sram_from_values([0, 1, -1, 0xFFFFFFFF, -(1 << 31)], CFG.INT_SRAM_SIZE)
    assert words.dtype == np.uint32 and words.shape == (1024,)
    assert words[:5].tolist() == [0, 1, 0xFFFFFFFF, 0xFFFFFFFF, 0x80000000]
    path = tmp_path / "int.bin"
    path.write_bytes(bytes([1, 0, 0, 0, 0x78, 0x56, 0x34, 0x12]))
    assert load_int_sram_file(path, 4).tolist() == [1, 0x12345678, 0, 0]
    with pytest.raises(ImageError, match="outside"):
        int_sram_from_values([1 << 32], 4)
    with pytest.raises(ImageError, match="expected integers"):
        int_sram_from_values([1.5], 4)
    path.write_bytes(bytes(6))
    with pytest.raises(ImageError, match="4-byte words") as ei:
        load_int_sram_file(path, 4)
    assert str(path) in str(ei.value)
    path.write_bytes(bytes(20))
    with pytest.raises(ImageError, match="5 values do not fit in INT SRAM of 4 words"):
        load_int_sram_file(path, 4)


def test_dumps_are_little_endian(tmp_path):
    save_fp_sram_dump(tmp_path / "fp.dump", np.array([0x3F80, 0x1234], np.uint16))
    assert (tmp_path / "fp.dump").read_bytes() == bytes([0x80, 0x3F, 0x34, 0x12])
    save_int_sram_dump(tmp_path / "int.dump", np.array([0x12345678], np.uint32))
    assert (tmp_path / "int.dump").read_bytes() == bytes([0x78, 0x56, 0x34, 0x12])
