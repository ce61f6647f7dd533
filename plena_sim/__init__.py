"""plena-sim: a register-accurate, Numba-accelerated, cycle-level simulator of the PLENA accelerator.

The public API, imported on first use (PEP 562: ``import plena_sim`` alone loads neither Numba nor the
configuration, and the JIT cache location is chosen before Numba is imported)::

    from plena_sim import Machine, RunResult, SimFault, HardwareConfig, load_config, default_config
    from plena_sim import load_preset, preset_names

Everything else is imported from its module (``plena_sim.config``, ``plena_sim.memory.image``, ...). The packages:
``config`` (hardware configuration, presets), ``numerics`` (number formats), ``memory`` (machine state, HBM images,
SRAM files), ``hbm`` (sparse HBM, its timing model), ``timing`` (latencies, cycle models, statistics), ``trace``
(trace ring, saved traces, post-mortems), ``limits`` (work budget, stop requests), ``core`` (the Numba backend);
``machine`` (the Machine API), ``reference`` (the reference interpreter), ``faults`` and ``errors``.
"""

import os as _os
import sys as _sys
from collections.abc import Mapping as _Mapping
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

__version__ = "0.1.0"


def _private_dir(d: str) -> str | None:
    """None if ``d`` is (made) a directory of this user with mode 0700 -- not a symlink, nobody else can write
    or read it -- else why it is not used. Numba's cache index files are pickles: a directory another user can
    write is a way to run their code."""
    import stat as _stat

    try:
        _os.makedirs(_os.path.dirname(d), exist_ok=True)
        try:
            _os.mkdir(d, 0o700)
            _os.chmod(d, 0o700)  # mkdir's mode passes through the umask; a fresh directory of ours is made exact
        except FileExistsError:
            pass
        st = _os.lstat(d)
    except OSError as exc:
        return f"cannot be created ({exc.strerror or exc})"
    if _stat.S_ISLNK(st.st_mode) or not _stat.S_ISDIR(st.st_mode):
        return "is not a directory (a symlink or a file)"
    if st.st_uid != _os.getuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {_os.getuid()})"
    if _stat.S_IMODE(st.st_mode) != 0o700:
        return f"has mode {_stat.S_IMODE(st.st_mode):04o}, not 0700 (chmod 700 it to use it)"
    return None


def _numba_cache_dir(pkg_dir: str | None = None, environ: _Mapping[str, str] | None = None) -> str | None:
    """Where Numba should cache the compiled core, or None to keep Numba's choice.

    An existing ``NUMBA_CACHE_DIR`` is respected; when the package directory (its ``__pycache__``) is
    writable, Numba's in-tree cache next to the sources is used (editable installs, checkouts).  Otherwise
    (a non-editable install into a read-only site-packages) the cache goes to a private per-user directory --
    one this user owns with mode 0700, created so: ``$XDG_CACHE_HOME/plena-sim/numba`` (default
    ``~/.cache/plena-sim/numba``), else ``plena-sim-numba-<uid>`` in the temporary directory. A candidate that
    is not private (another user's, writable by others, a symlink) is refused; with none left the cache is a
    fresh private directory of this process (removed at exit: nothing persists, nothing foreign is loaded),
    with a RuntimeWarning naming the refused directories."""
    env = _os.environ if environ is None else environ
    if env.get("NUMBA_CACHE_DIR"):
        return None
    pkg = pkg_dir or _os.path.dirname(_os.path.abspath(__file__))
    pyc = _os.path.join(pkg, "__pycache__")
    if _os.access(pyc if _os.path.isdir(pyc) else pkg, _os.W_OK):
        return None
    import tempfile

    base = env.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    refused = []
    for d in (
        _os.path.join(base, "plena-sim", "numba"),
        _os.path.join(tempfile.gettempdir(), f"plena-sim-numba-{_os.getuid()}"),
    ):
        why = _private_dir(d)
        if why is None:
            return d
        refused.append(f"{d} {why}")
    return _process_cache_dir(refused)


def _process_cache_dir(refused: list[str]) -> str:
    """A fresh private cache directory for this process only (removed at exit), with a warning saying why."""
    import atexit
    import shutil
    import tempfile
    import warnings

    d = tempfile.mkdtemp(prefix="plena-sim-numba-")  # mode 0700, owned by this user
    atexit.register(shutil.rmtree, d, True)
    warnings.warn(
        "plena-sim: no private JIT cache directory, the simulator core is compiled for this process only: "
        + "; ".join(refused)
        + " (not private: another user could plant compiled code there)",
        RuntimeWarning,
        stacklevel=3,
    )
    return d


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


# ----------------------------------------------------------------------------------------- the public API

#: public name -> its defining module (imported on first access, after the JIT cache location is set)
_PUBLIC: dict[str, str] = {
    "Machine": "plena_sim.machine",
    "RunResult": "plena_sim.machine",
    "SimFault": "plena_sim.faults",
    "HardwareConfig": "plena_sim.config.hardware",
    "load_config": "plena_sim.config.hardware",
    "default_config": "plena_sim.config.hardware",
    "load_preset": "plena_sim.config.presets",
    "preset_names": "plena_sim.config.presets",
}

__all__ = [
    "Machine",
    "RunResult",
    "SimFault",
    "HardwareConfig",
    "load_config",
    "default_config",
    "load_preset",
    "preset_names",
]


def __getattr__(name: str) -> _Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


if _TYPE_CHECKING:  # the real types for mypy; never executed
    from .config.hardware import HardwareConfig, default_config, load_config
    from .config.presets import load_preset, preset_names
    from .faults import SimFault
    from .machine import Machine, RunResult
