"""Keep Numba's on-disk cache of the core consistent with its sources.

One job: Numba keys a cached function by its own source file only, so after an edit of ``vector.py`` the cached
run loop (which calls into it) would still hold the old vector code. :func:`invalidate_if_changed` hashes every
source file the compiled core is built from; when the digest differs from the one recorded beside the cache,
it removes the cache entries of those modules (they are recompiled on first use) and records the new digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_PKG = Path(__file__).resolve().parent.parent
#: the modules whose @njit functions are compiled into (or called by) the run loop
JIT_SOURCES: tuple[str, ...] = (
    "core/account.py",
    "core/common.py",
    "core/control.py",
    "core/dma.py",
    "core/loop.py",
    "core/matrix.py",
    "core/scalar.py",
    "core/static.py",
    "core/taint.py",
    "core/vector.py",
    "hbm/layout.py",  # no @njit, but its slot constants are compiled into the kernels
    "hbm/storage.py",
    "hbm/timing.py",
    "numerics/formats.py",
    "timing/latency.py",
    "timing/scoreboard.py",
)
_STAMP = "plena-sim-jit-sources.sha256"


def sources_digest(root: Path = _PKG, sources: Iterable[str] = JIT_SOURCES) -> str:
    """sha256 over the names and contents of the compiled sources."""
    h = hashlib.sha256()
    for rel in sources:
        h.update(rel.encode())
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def _probe() -> None:
    """A stand-in function for Numba's cache locators (they read only its line number)."""


def cache_dirs(root: Path = _PKG, sources: Iterable[str] = JIT_SOURCES) -> dict[Path, list[str]]:
    """Cache directory -> module stems cached in it (Numba's in-tree ``__pycache__`` or ``NUMBA_CACHE_DIR``)."""
    from numba.core.caching import CacheImpl

    out: dict[Path, list[str]] = {}
    for rel in sources:
        src = root / rel
        path: Path | None = None
        locators: list[Any] = list(CacheImpl._locator_classes)  # Numba's own choice order
        for loc in locators:
            try:
                found = loc.from_function(_probe, str(src))
            except Exception:  # noqa: BLE001 - a locator that does not apply here
                found = None
            if found is not None:
                path = Path(found.get_cache_path())
                break
        if path is not None:
            out.setdefault(path, []).append(src.stem)
    return out


def invalidate_if_changed(root: Path = _PKG) -> bool:
    """Drop the core's cache entries when its sources changed since they were written; True if it did."""
    try:
        digest = sources_digest(root)
        dirs = cache_dirs(root)
    except (OSError, AttributeError, ImportError):  # unreadable sources, or a Numba without these locators
        return False
    changed = False
    for d, stems in dirs.items():
        stamp = d / _STAMP
        try:
            if stamp.read_text(encoding="ascii").strip() == digest:
                continue
        except OSError:
            pass
        changed = True
        for entry in d.glob("*.nb[ic]"):
            if entry.name.split(".", 1)[0] in stems:
                _unlink(entry)
        _write(stamp, digest)
    return changed


def is_warm(root: Path = _PKG) -> bool:
    """True when the run loop's compiled code is in the cache (the next warm-up loads rather than compiles).
    Unknown (a Numba without these locators) counts as warm: no notice rather than a wrong one."""
    try:
        dirs = cache_dirs(root, ("core/loop.py",))
    except (OSError, AttributeError, ImportError):
        return True
    return any(any(d.glob("loop.run-*.nbi")) for d in dirs)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text + "\n", encoding="ascii")
        os.replace(tmp, path)
    except OSError:
        pass
