"""The files a command reads and writes: program input, output paths checked before anything runs, and
writes that are atomic (or streamed through a temporary file) and turn an OS error into a usage error."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from isa.fileio import atomic_write

from .errors import UsageError

if TYPE_CHECKING:
    import numpy.typing as npt

    from isa.program import Program
    from plena_sim.hbm import Hbm
    from plena_sim.trace import Trace

__all__ = ["read_program", "out_path", "write_out", "write_hbm_dump", "save_npy", "save_npz", "write_perfetto"]


def read_program(path: str) -> Program:
    """The :class:`~isa.program.Program` of a ``.mem``/``.hex`` machine-code file or an assembly file."""
    from isa import assemble_file, read_mem

    p = Path(path)
    if not p.exists():
        raise UsageError(f"no such file: {path}")
    if p.suffix.lower() in (".mem", ".hex"):
        return read_mem(p)
    return assemble_file(p)


def out_path(path: str, what: str) -> Path:
    """An output file path, checked before anything runs: its directory exists and is writable and the
    path is not itself a directory (a failing write later still becomes a UsageError, see write_out)."""
    if "\x00" in path:
        raise UsageError(f"{what}: output path {path!r} contains a NUL byte")
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{what}: output directory {str(parent)!r} does not exist")
    if p.is_dir():
        raise UsageError(f"{what}: output path {path!r} is a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: output directory {str(parent)!r} is not writable")
    return p


def write_out(path: Path, data: bytes | str, what: str) -> None:
    """Write one output file atomically; an OS error (disk full, permissions) is a UsageError."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise UsageError(f"{what}: cannot write {str(path)!r}: {exc.strerror or exc}") from None


def write_hbm_dump(path: Path, hbm: Hbm, addr: int, n: int) -> None:
    """Stream HBM bytes [addr, addr+n) to ``path`` in 16 MiB pieces (a dump of a multi-GiB range never
    holds it in memory), through a temporary file renamed over the target (atomic like atomic_write)."""
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
        with os.fdopen(fd, "wb") as fh:
            for _a, chunk in hbm.iter_chunks(addr, addr + n, 1 << 24):
                fh.write(chunk.data)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise UsageError(f"--dump-hbm: cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def save_npy(path: Path, array: npt.ArrayLike, what: str = "output") -> None:
    """``numpy.save`` of one array, written atomically."""
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array)
    write_out(path, buf.getvalue(), what)


def save_npz(path: Path, arrays: Mapping[str, npt.ArrayLike], what: str = "output") -> None:
    """``numpy.savez`` of named arrays, written atomically."""
    import numpy as np

    buf = io.BytesIO()
    # numpy's stub lets a **mapping also fill savez's ``allow_pickle: bool`` keyword, so any array mapping is
    # rejected; the names here are array names (and older numpy has no allow_pickle to pass explicitly)
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    write_out(path, buf.getvalue(), what)


def write_perfetto(path: Path, trace: Trace, what: str = "--perfetto") -> None:
    """The trace as Chrome/Perfetto trace JSON at a checked output path."""
    write_out(path, json.dumps(trace.to_perfetto()).encode(), what)
