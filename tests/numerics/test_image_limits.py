"""The load side of HBM images and SRAM preloads under hostile input (issue 20, D5 D23): files are read only when
they are regular files of bounded size (an image against HBM_SIZE, a preload against its SRAM, a manifest at most
64 MiB); a deeply nested manifest is a clean error; overlapping placements are refused as ImageBuilder refuses
them; a huge sparse HBM costs memory only for what was written (the page table is mapped lazily)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from plena_sim.config import default_config
from plena_sim.hbm.storage import Hbm
from plena_sim.memory.image import ImageBuilder, ImageError, load_image, load_raw_image
from plena_sim.memory.sram_io import load_fp_sram_file, load_int_sram_file

ROOT = Path(__file__).resolve().parents[2]
BF16 = default_config().precision["VECTOR_SRAM_TYPE"]


def _saved(tmp_path, **kw):
    b = ImageBuilder(1 << 20, **kw)
    b.add("a", np.arange(64, dtype=np.float32).reshape(2, 32), BF16)
    b.add("b", np.ones((1, 32), dtype=np.float32), BF16)
    raw = tmp_path / "img.bin"
    return raw, b.save(raw)


def _no_hang(fn, seconds=10.0):
    box: list = []

    def target():
        try:
            fn()
            box.append(None)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            box.append(exc)

    threading.Thread(target=target, daemon=True).start()
    for _ in range(int(seconds * 20)):
        if box:
            return box[0]
        threading.Event().wait(0.05)
    raise AssertionError("the reader blocked on its input")


# ------------------------------------------------------------------------------------------- D23


def test_deeply_nested_manifest_is_a_clean_error(tmp_path):
    raw, mpath = _saved(tmp_path)
    mpath.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ImageError, match="nested too deeply"):
        load_image(raw, mpath)
    mpath.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(ImageError, match="nested too deeply"):
        load_image(raw, mpath)


def test_overlapping_placements_are_refused(tmp_path):
    raw, mpath = _saved(tmp_path)
    doc = json.loads(mpath.read_text())
    a, b = doc["tensors"]
    assert a["base"] == 0 and b["base"] == 128  # 2 x 32 bf16 rows, packed (64-byte alignment)
    b["base"], b["elem_range"] = 64, [64, 128]  # b now covers a's second row
    mpath.write_text(json.dumps(doc))
    with pytest.raises(ImageError, match=r"tensor 'b' at \[0x40, 0x80\) overlaps tensor 'a' at \[0x0, 0x80\)"):
        load_image(raw, mpath)


def test_huge_sparse_hbm_costs_memory_only_for_what_is_written(tmp_path):
    """hbm_size 2^45 for a small image: 4.3 GB before (a dense page table), a few MB now (it is mapped lazily)."""
    raw, mpath = _saved(tmp_path)
    doc = json.loads(mpath.read_text())
    doc["hbm_size"] = 1 << 45
    mpath.write_text(json.dumps(doc))
    code = (
        "import resource, sys\n"
        "from plena_sim.memory.image import load_image\n"
        f"base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"img = load_image({str(raw)!r}, {str(mpath)!r})\n"
        "assert img.hbm.size == 1 << 45 and img.placements['b'].values.sum() == 32\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    grown_kib = int(out.stdout.split()[-1])
    assert grown_kib < 256 * 1024, f"loading grew the peak RSS by {grown_kib >> 10} MiB"


def test_page_table_of_a_huge_hbm_is_lazy():
    h = Hbm(1 << 45)
    assert h.page_index.size == 1 << 29
    h.write((1 << 45) - 3, b"xyz")
    assert h.read((1 << 45) - 3, 3).tobytes() == b"xyz" and h.pages_used == 1
    assert h.read(0, 4).tolist() == [0, 0, 0, 0]


# ------------------------------------------------------------------------------------------- D5 file types


@pytest.mark.parametrize("which", ["raw", "manifest"])
def test_image_fifo_is_refused_without_blocking(tmp_path, which):
    raw, mpath = _saved(tmp_path)
    target = raw if which == "raw" else mpath
    target.unlink()
    os.mkfifo(target)
    exc = _no_hang(lambda: load_image(raw, mpath))
    assert isinstance(exc, ImageError) and "FIFO (named pipe), not a regular file" in str(exc)


def test_raw_image_device_and_size_limits(tmp_path):
    with pytest.raises(ImageError, match="character device, not a regular file"):
        load_raw_image("/dev/zero", Hbm(1 << 20))
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)  # a sparse 1 TiB file: refused by its size, never read
    with pytest.raises(ImageError, match="does not fit in HBM_SIZE"):
        load_raw_image(big, Hbm(1 << 20))


def test_manifest_size_limit(tmp_path):
    raw, mpath = _saved(tmp_path)
    with open(mpath, "r+b") as fh:
        fh.truncate(65 << 20)
    with pytest.raises(ImageError, match="cannot read manifest: 68157440 bytes exceed the limit of 64 MiB"):
        load_image(raw, mpath)


@pytest.mark.parametrize("loader,word", [(load_fp_sram_file, 2), (load_int_sram_file, 4)])
def test_sram_preloads_are_bounded_by_the_sram(tmp_path, loader, word):
    with pytest.raises(ImageError, match="character device, not a regular file"):
        loader("/dev/zero", 1024)
    fifo = tmp_path / "s.bin"
    os.mkfifo(fifo)
    exc = _no_hang(lambda: loader(fifo, 1024))
    assert isinstance(exc, ImageError) and "FIFO" in str(exc)
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)
    with pytest.raises(ImageError, match=rf"{(1 << 40) // word} values do not fit in (FP|INT) SRAM of 1024 words"):
        loader(big, 1024)
    ok = tmp_path / "ok.bin"
    ok.write_bytes(b"\x00" * (1024 * word))
    assert loader(ok, 1024).shape == (1024,)
