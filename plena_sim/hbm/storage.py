"""Sparse, byte-addressed HBM storage (memory.md §2).

One job: hold the bytes of a ``HBM_SIZE``-byte address space while costing host memory only for the
64 KiB pages that were actually written.

Design (chosen so that a Numba run loop can access HBM without Python callbacks)
-------------------------------------------------------------------------------
The whole state is three numpy arrays, owned by :class:`Hbm` and passed as-is to the kernels:

* ``page_index``: ``int64[ceil(HBM_SIZE / PAGE_SIZE)]`` -- for each 64 KiB page one more than the row of
  the pool holding it, or ``NO_PAGE`` (0) if the page was never written (16 GiB -> 262144 entries = 2 MiB).
  Never-written is 0 so that the table is created with ``np.zeros`` and mapped lazily: a huge sparse HBM
  (``2^45`` bytes: a 4 GiB table) costs host memory only for the table pages that were written.
* ``pages``: ``uint8[capacity, PAGE_SIZE]`` -- the page pool.  Rows ``0 .. meta[0]-1`` are in use; the
  remaining rows are spare capacity.  It is created with ``np.zeros``, so spare rows cost no host
  memory until written (the OS maps zero pages lazily) and every fresh row reads as zeros.
* ``meta``: ``int64[4]`` -- ``[pages_used, high_water, size, unwritten_read]``: rows in use, one past the
  highest byte ever written (the end of a saved raw image), ``HBM_SIZE``, and the first byte a DMA read
  (:func:`hbm_note_read`) past the high water, i.e. never written (-1: none).

Kernels (``@njit(cache=True)``), all returning an int64 status:

* :func:`hbm_read` ``(page_index, pages, meta, addr, out)`` fills ``out`` from ``[addr, addr+len)``;
  untouched pages read as zero and allocate nothing.
* :func:`hbm_write` ``(page_index, pages, meta, addr, data)`` stores ``data`` at ``addr``.  It first
  counts the untouched pages it needs; if the pool has too few spare rows it writes **nothing** and
  returns that count (> 0), so the caller can grow the pool (:meth:`Hbm.reserve`) and retry.  A run
  loop either exits to Python on such a status or is given enough spare rows beforehand.
* Status ``HBM_OK`` (0) is success, ``HBM_OUT_OF_RANGE`` (-1) means some byte is outside
  ``[0, meta[2])``; nothing is read or written then.  The Python wrapper turns -1 into
  :class:`HbmBoundsError`.

Growing the pool replaces the ``pages`` array (``Hbm.pages``), so code holding the arrays must re-read
``hbm.pages`` after calling :meth:`Hbm.reserve` / :meth:`Hbm.write`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import ConfigError

__all__ = [
    "NO_PAGE",
    "PAGE_SHIFT",
    "PAGE_SIZE",
    "hbm_missing_pages_after",
    "HBM_OK",
    "HBM_OUT_OF_RANGE",
    "HbmBoundsError",
    "HbmImageTooLarge",
    "HbmTooLarge",
    "MAX_HBM_SIZE",
    "Hbm",
    "hbm_read",
    "hbm_write",
    "hbm_missing_pages",
    "hbm_in_bounds",
]

PAGE_SHIFT = 16
PAGE_SIZE = 1 << PAGE_SHIFT
_PAGE_MASK = PAGE_SIZE - 1
HBM_OK = 0
HBM_OUT_OF_RANGE = -1
#: ``page_index`` entry of a page that was never written (else 1 + its pool row)
NO_PAGE = 0

_META_USED = 0
_META_HIGH = 1
_META_SIZE = 2
_META_UNWRITTEN = 3  # the first byte a run's DMA read that was never written (-1: none yet)


class HbmBoundsError(IndexError):
    """An HBM access touches bytes outside ``[0, HBM_SIZE)``."""

    def __init__(self, addr: int, n: int, size: int, what: str = "access"):
        self.addr, self.n, self.size = addr, n, size
        super().__init__(
            f"HBM {what} of {n} byte(s) at [{addr:#x}, {addr + n:#x}) is outside [0, HBM_SIZE={size:#x}) ({size} bytes)"
        )


class HbmImageTooLarge(HbmBoundsError, ConfigError):
    """An image preload does not fit into HBM (memory.md §2: a ConfigError; also an HbmBoundsError)."""

    def __init__(self, addr: int, n: int, size: int):
        HbmBoundsError.__init__(self, addr, n, size, what="image preload")
        self.key = "HBM_SIZE"


#: largest modelled HBM (the config refuses more, too)
MAX_HBM_SIZE = 1 << 50
_TABLE_PROBE_BYTES = 1 << 26


class HbmTooLarge(ConfigError):
    """An HBM size this host cannot model (its dense page table does not fit); a ConfigError on HBM_SIZE."""

    def __init__(self, message: str):
        super().__init__("HBM_SIZE", message)


# --------------------------------------------------------------------------- kernels


@njit(cache=True)
def hbm_in_bounds(meta, addr, n):
    """True if ``[addr, addr+n)`` lies inside ``[0, HBM_SIZE)``."""
    return addr >= 0 and n >= 0 and addr + n <= meta[_META_SIZE]


@njit(cache=True)
def hbm_missing_pages_after(page_index, addr, n, last):
    """Never-written pages overlapping ``[addr, addr+n)`` whose index is > ``last``; returns
    ``(missing, max(last, last page of the range))``. Walking ranges of non-decreasing start through it
    counts every page once (a strided store whose rows share a page asks for that page once)."""
    if n <= 0:
        return np.int64(0), last
    p0 = max(addr >> PAGE_SHIFT, last + 1)
    p1 = (addr + n - 1) >> PAGE_SHIFT
    missing = np.int64(0)
    for p in range(p0, p1 + 1):
        if page_index[p] == NO_PAGE:
            missing += 1
    return missing, max(last, p1)


@njit(cache=True)
def hbm_note_read(meta, addr, n):
    """Before a DMA reads ``[addr, addr+n)``: if no earlier read did, note in ``meta`` its first byte past the
    high water (never written: past every image and store), so that a run reading past the images it was given
    can say so. Gaps below the high water are not noticed: an image's all-zero pages are not stored either."""
    if meta[_META_UNWRITTEN] < 0 and n > 0 and addr + n > meta[_META_HIGH]:
        meta[_META_UNWRITTEN] = max(addr, meta[_META_HIGH])


@njit(cache=True)
def hbm_missing_pages(page_index, addr, n):
    """Number of never-written pages overlapping ``[addr, addr+n)`` (range assumed valid)."""
    if n <= 0:
        return np.int64(0)
    missing = np.int64(0)
    for p in range(addr >> PAGE_SHIFT, ((addr + n - 1) >> PAGE_SHIFT) + 1):
        if page_index[p] == NO_PAGE:
            missing += 1
    return missing


@njit(cache=True)
def _page_chunk(a, left):
    """(page, offset in it, bytes up to the page end or ``left``) of HBM byte ``a``."""
    off = a & _PAGE_MASK
    return a >> PAGE_SHIFT, off, min(PAGE_SIZE - off, left)


@njit(cache=True)
def hbm_read(page_index, pages, meta, addr, out):
    """Copy ``len(out)`` bytes starting at HBM byte ``addr`` into ``out``. Status 0 or -1."""
    n = out.shape[0]
    if not hbm_in_bounds(meta, addr, n):
        return np.int64(HBM_OUT_OF_RANGE)
    pos = 0
    while pos < n:
        p, off, chunk = _page_chunk(addr + pos, n - pos)
        row = page_index[p] - 1
        if row < 0:
            out[pos : pos + chunk] = 0
        else:
            out[pos : pos + chunk] = pages[row, off : off + chunk]
        pos += chunk
    return np.int64(HBM_OK)


@njit(cache=True)
def hbm_write(page_index, pages, meta, addr, data):
    """Store ``data`` (uint8) at HBM byte ``addr``.

    Status 0 on success, -1 if out of range, or ``k > 0`` = pages that must be added to the pool
    first (nothing written)."""
    n = data.shape[0]
    if not hbm_in_bounds(meta, addr, n):
        return np.int64(HBM_OUT_OF_RANGE)
    if n == 0:
        return np.int64(HBM_OK)
    missing = hbm_missing_pages(page_index, addr, n)
    if meta[_META_USED] + missing > pages.shape[0]:
        return missing
    pos = 0
    while pos < n:
        p, off, chunk = _page_chunk(addr + pos, n - pos)
        row = page_index[p] - 1
        if row < 0:
            row = meta[_META_USED]
            meta[_META_USED] += 1
            page_index[p] = row + 1
        pages[row, off : off + chunk] = data[pos : pos + chunk]
        pos += chunk
    if addr + n > meta[_META_HIGH]:
        meta[_META_HIGH] = addr + n
    return np.int64(HBM_OK)


# --------------------------------------------------------------------------- Python API


def _as_u8(data) -> np.ndarray:
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"HBM data must be bytes-like or a uint8 array, got dtype {data.dtype}")
        arr = np.ascontiguousarray(data).reshape(-1)
    else:
        arr = np.frombuffer(memoryview(data), dtype=np.uint8)
    if not arr.flags.writeable:
        arr = arr.copy()  # one kernel specialisation (writeable arrays) for all callers
    return arr


class Hbm:
    """A sparse ``size``-byte HBM.  See the module docstring for the array layout.

    Attributes ``page_index``, ``pages`` and ``meta`` are the kernel state (``pages`` is replaced when
    the pool grows)."""

    def __init__(self, size: int, *, initial_pages: int = 16):
        size = int(size)
        if size < 1:
            raise ValueError(f"HBM size must be >= 1 byte, got {size}")
        if size > MAX_HBM_SIZE:
            raise HbmTooLarge(f"{size} bytes exceeds the modelled maximum 2^50")
        self.size = size
        n_pages = -(-size // PAGE_SIZE)
        table = n_pages * 8
        if table > _TABLE_PROBE_BYTES:  # mapped lazily, but it must be mappable at all
            from ..config.hardware import host_memory_limits

            most = host_memory_limits().allocation
            if table > most:
                raise HbmTooLarge(
                    f"{size} bytes needs a page table of {table >> 20} MiB (8 bytes per 64 KiB page, mapped "
                    f"lazily), more than the largest allocation this host grants ({most >> 20} MiB)"
                )
        try:
            self.page_index = np.zeros(n_pages, dtype=np.int64)  # NO_PAGE everywhere, pages mapped on write
        except MemoryError:
            raise HbmTooLarge(f"{size} bytes: cannot allocate its page table of {table >> 20} MiB") from None
        self.pages = np.zeros((max(0, int(initial_pages)), PAGE_SIZE), dtype=np.uint8)
        self.meta = np.array([0, 0, size, -1], dtype=np.int64)

    # ---- introspection
    @property
    def pages_used(self) -> int:
        return int(self.meta[_META_USED])

    @property
    def touched_bytes(self) -> int:
        """Host bytes holding data: pages allocated * PAGE_SIZE."""
        return self.pages_used * PAGE_SIZE

    @property
    def high_water(self) -> int:
        """One past the highest byte ever written (0 if nothing was written)."""
        return int(self.meta[_META_HIGH])

    @property
    def unwritten_read(self) -> int | None:
        """The first byte past the high water a DMA read since :meth:`forget_reads` (None: none)."""
        first = int(self.meta[_META_UNWRITTEN])
        return None if first < 0 else first

    def forget_reads(self) -> None:
        """Start noting :attr:`unwritten_read` afresh (at the start of a run)."""
        self.meta[_META_UNWRITTEN] = -1

    def __repr__(self) -> str:
        return f"Hbm(size={self.size}, pages_used={self.pages_used}, high_water={self.high_water:#x})"

    # ---- pool management
    def reserve(self, spare_pages: int) -> None:
        """Make sure at least ``spare_pages`` unused pool rows exist (grows ``self.pages``)."""
        used = self.pages_used
        need = used + int(spare_pages)
        cap = self.pages.shape[0]
        if need <= cap:
            return
        new_cap = min(max(need, 2 * cap, 16), len(self.page_index))
        new_cap = max(new_cap, need)
        try:
            pool = np.zeros((new_cap, PAGE_SIZE), dtype=np.uint8)
            pool[:used] = self.pages[:used]
        except MemoryError:
            from ..config.hardware import host_memory_limits

            lim = host_memory_limits()
            raise HbmTooLarge(
                f"the HBM pages written so far ({used} pages of 64 KiB = {used >> 4} MiB) and {int(spare_pages)} "
                f"more cannot be held: growing the page pool to {new_cap >> 4} MiB failed, this host has "
                f"{lim.dense >> 20} MiB available ({lim.dense_source}); touch less HBM"
            ) from None
        self.pages = pool

    def _check(self, addr: int, n: int, what: str) -> None:
        if addr < 0 or n < 0 or addr + n > self.size:
            raise HbmBoundsError(addr, n, self.size, what)

    # ---- byte access
    def read(self, addr: int, n: int) -> np.ndarray:
        """``n`` bytes from ``addr`` as a new uint8 array (never-written bytes are 0)."""
        addr, n = int(addr), int(n)
        self._check(addr, n, "read")
        out = np.empty(n, dtype=np.uint8)
        status = hbm_read(self.page_index, self.pages, self.meta, addr, out)
        assert status == HBM_OK
        return out

    def write(self, addr: int, data) -> None:
        """Store ``data`` (bytes-like or uint8 array) at ``addr``."""
        addr = int(addr)
        arr = _as_u8(data)
        self._check(addr, arr.size, "write")
        while True:
            status = hbm_write(self.page_index, self.pages, self.meta, addr, arr)
            if status == HBM_OK:
                return
            assert status > 0, status
            self.reserve(int(status))

    def load_image(self, image, base: int = 0) -> None:
        """Host preload: copy ``image`` to ``[base, base+len)``; ConfigError if it does not fit.

        All-zero 64 KiB pages that were never written are skipped (they already read as zero), so a
        mostly-empty image costs only its non-zero pages; ``high_water`` still covers the whole image."""
        base = int(base)
        arr = _as_u8(image)
        n = arr.size
        if base < 0 or base + n > self.size:
            raise HbmImageTooLarge(base, n, self.size)
        pos = 0
        while pos < n:
            a = base + pos
            chunk = min(PAGE_SIZE - (a & _PAGE_MASK), n - pos)
            piece = arr[pos : pos + chunk]
            if self.page_index[a >> PAGE_SHIFT] != NO_PAGE or piece.any():
                self.write(a, piece)
            pos += chunk
        if base + n > self.meta[_META_HIGH]:
            self.meta[_META_HIGH] = base + n

    def dump(self, addr: int, n: int) -> bytes:
        """``n`` bytes from ``addr`` as ``bytes`` (an HBM dump of a requested range)."""
        return self.read(addr, n).tobytes()

    def iter_chunks(self, start: int, end: int, chunk: int = 1 << 24):
        """Yield ``(addr, uint8 array)`` covering ``[start, end)`` in pieces of at most ``chunk`` bytes."""
        self._check(start, max(0, end - start), "read")
        a = start
        while a < end:
            n = min(chunk, end - a)
            yield a, self.read(a, n)
            a += n
