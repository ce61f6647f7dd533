"""plena-sim: a register-accurate, Numba-accelerated, cycle-level simulator of the PLENA accelerator."""

import os as _os
import sys as _sys
from collections.abc import Mapping as _Mapping
from typing import Any as _Any

__version__ = "0.1.0"


def _numba_cache_dir(pkg_dir: str | None = None, environ: _Mapping[str, str] | None = None) -> str | None:
    """Where Numba should cache the compiled core, or None to keep Numba's choice.

    An existing ``NUMBA_CACHE_DIR`` is respected; when the package directory (its ``__pycache__``) is
    writable, Numba's in-tree cache next to the sources is used (editable installs, checkouts).  Otherwise
    (a non-editable install into a read-only site-packages) the cache goes to a per-user directory:
    ``$XDG_CACHE_HOME/plena-sim/numba`` (default ``~/.cache/plena-sim/numba``), or a per-user temporary
    directory if that cannot be created."""
    env = _os.environ if environ is None else environ
    if env.get("NUMBA_CACHE_DIR"):
        return None
    pkg = pkg_dir or _os.path.dirname(_os.path.abspath(__file__))
    pyc = _os.path.join(pkg, "__pycache__")
    if _os.access(pyc if _os.path.isdir(pyc) else pkg, _os.W_OK):
        return None
    base = env.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    for d in (
        _os.path.join(base, "plena-sim", "numba"),
        _os.path.join(__import__("tempfile").gettempdir(), f"plena-sim-numba-{_os.getuid()}"),
    ):
        try:
            _os.makedirs(d, exist_ok=True)
        except OSError:
            continue
        if _os.access(d, _os.W_OK):
            return d
    return None


def _set_numba_cache_dir() -> None:
    """Choose the JIT cache location before Numba is imported (see :func:`_numba_cache_dir`)."""
    try:
        d = _numba_cache_dir()
    except Exception:  # noqa: BLE001 - never fail the import over a cache location
        return
    if d is None:
        return
    _os.environ["NUMBA_CACHE_DIR"] = d
    cfg: _Any = _sys.modules.get("numba.core.config")  # a module whose settings are plain attributes
    if cfg is not None:  # Numba imported first: its config read the environment already
        cfg.CACHE_DIR = d


_set_numba_cache_dir()
