"""Sparse HBM store (memory.md §2): zero reads, paging, bounds, growth, host-memory cost."""

import numpy as np
import pytest

from plena_sim.config import ConfigError, default_config
from plena_sim.hbm.storage import HBM_OK, HBM_OUT_OF_RANGE, NO_PAGE, PAGE_SIZE, Hbm, HbmBoundsError, hbm_read, hbm_write


def _status_kb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/self/status")


def test_never_written_bytes_read_zero_without_allocating():
    h = Hbm(1 << 30)
    assert h.read(12345, 100).tolist() == [0] * 100
    assert h.read((1 << 30) - 10, 10).tolist() == [0] * 10
    assert h.touched_bytes == 0 and h.pages_used == 0 and h.high_water == 0


def test_write_read_across_page_boundaries():
    h = Hbm(1 << 24)
    data = (np.arange(3 * PAGE_SIZE + 17) % 251).astype(np.uint8)
    addr = 2 * PAGE_SIZE - 5
    h.write(addr, data)
    assert h.pages_used == 5  # pages 1 .. 5 touched
    assert h.touched_bytes == 5 * PAGE_SIZE
    np.testing.assert_array_equal(h.read(addr, data.size), data)
    assert h.read(addr - 3, 3).tolist() == [0, 0, 0]
    assert h.high_water == addr + data.size
    h.write(addr + 1, b"\xff\xfe")
    assert h.read(addr, 4).tolist() == [0, 255, 254, 3]
    assert h.dump(addr, 4) == bytes([0, 255, 254, 3])


def test_pool_growth_keeps_data():
    h = Hbm(1 << 32, initial_pages=1)
    rng = np.random.default_rng(0)
    addrs = rng.choice(1 << 16, size=40, replace=False) * PAGE_SIZE + 7
    for i, a in enumerate(addrs):
        h.write(int(a), bytes([i + 1]) * 9)
    assert h.pages_used == 40
    for i, a in enumerate(addrs):
        assert h.read(int(a) - 1, 11).tolist() == [0] + [i + 1] * 9 + [0]


@pytest.mark.parametrize("addr, n", [(-1, 1), (1000, 25), (1024, 1), (0, 1025)])
def test_out_of_range_raises(addr, n):
    h = Hbm(1024)
    with pytest.raises(HbmBoundsError, match="HBM_SIZE=0x400") as ei:
        h.read(addr, n)
    assert isinstance(ei.value, IndexError)
    with pytest.raises(HbmBoundsError):
        h.write(addr, bytes(n))
    assert h.touched_bytes == 0 and h.high_water == 0  # faulting accesses change nothing


def test_boundary_access_is_allowed():
    h = Hbm(1000)  # not a multiple of the page size
    h.write(999, b"\x07")
    assert h.read(990, 10)[-1] == 7


def test_load_image_base_and_overflow_is_config_error():
    h = Hbm(3 * PAGE_SIZE)
    img = bytes(PAGE_SIZE) + b"\x01\x02" + bytes(10)
    h.load_image(img, base=PAGE_SIZE)
    assert h.pages_used == 1  # the all-zero first page of the image was not materialised
    assert h.high_water == PAGE_SIZE + len(img)
    assert h.read(2 * PAGE_SIZE, 3).tolist() == [1, 2, 0]
    with pytest.raises(ConfigError) as ei:
        h.load_image(bytes(PAGE_SIZE + 1), base=2 * PAGE_SIZE)
    assert ei.value.key == "HBM_SIZE" and isinstance(ei.value, HbmBoundsError)


def test_load_image_zero_bytes_overwrite_existing_data():
    h = Hbm(2 * PAGE_SIZE)
    h.write(10, b"\xaa" * 4)
    h.load_image(bytes(20))
    assert h.read(10, 4).tolist() == [0, 0, 0, 0]


def test_kernel_status_protocol():
    h = Hbm(4 * PAGE_SIZE, initial_pages=0)
    data = np.arange(10, dtype=np.uint8)
    # no spare pool rows: nothing written, the number of pages needed is returned
    assert hbm_write(h.page_index, h.pages, h.meta, PAGE_SIZE - 5, data) == 2
    assert h.pages_used == 0 and h.high_water == 0
    h.reserve(2)
    assert hbm_write(h.page_index, h.pages, h.meta, PAGE_SIZE - 5, data) == HBM_OK
    out = np.empty(12, np.uint8)
    assert hbm_read(h.page_index, h.pages, h.meta, PAGE_SIZE - 6, out) == HBM_OK
    assert out.tolist() == [0] + list(range(10)) + [0]
    assert hbm_read(h.page_index, h.pages, h.meta, 4 * PAGE_SIZE - 11, out) == HBM_OUT_OF_RANGE
    assert hbm_write(h.page_index, h.pages, h.meta, -1, data) == HBM_OUT_OF_RANGE


def _reset_peak_rss() -> None:
    """Reset this process's VmHWM to its current RSS (Linux: ``/proc/self/clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


def test_machine_sized_hbm_costs_only_touched_pages():
    cfg = default_config()
    assert cfg.HBM_SIZE == 16 * 1024**3
    warm = Hbm(1 << 20)  # compile/load the kernels before measuring
    warm.write(5, b"x")
    warm.read(0, 10)
    rng = np.random.default_rng(42)
    chunks = [rng.integers(0, 256, 16 * 1024, dtype=np.uint64).astype(np.uint8) for _ in range(64)]
    addrs = [int(a) for a in rng.integers(0, cfg.HBM_SIZE - 16 * 1024, 64)]
    _reset_peak_rss()  # the high-water mark from here: earlier tests of this process do not count
    rss0 = _status_kb("VmRSS")
    h = Hbm(cfg.HBM_SIZE)
    for a, c in zip(addrs, chunks, strict=True):  # 64 x 16 KiB = 1 MiB scattered over 16 GiB
        h.write(a, c)
    rss1 = _status_kb("VmRSS")
    assert (rss1 - rss0) * 1024 < 64 * 1024**2, f"RSS grew by {(rss1 - rss0) / 1024:.1f} MiB"
    assert _status_kb("VmHWM") * 1024 < cfg.HBM_SIZE // 16
    assert h.touched_bytes <= 128 * PAGE_SIZE
    for a, c in zip(addrs, chunks, strict=True):
        np.testing.assert_array_equal(h.read(a, c.size), c)
    assert int((h.page_index != NO_PAGE).sum()) == h.pages_used
