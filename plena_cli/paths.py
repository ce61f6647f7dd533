"""The files a command reads and writes: program input, and the command line's side of :mod:`isa.fileio` --
output paths checked before anything runs (a refusal or a failing write is a UsageError naming the flag), two
outputs of one command never the same file, never one of its inputs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from isa.fileio import (
    DirTransaction,
    OutputError,
    atomic_stream,
    atomic_write,
    check_output,
    check_output_dir,
    npy_bytes,
    npz_bytes,
)
from isa.safetext import json_text

from .errors import UsageError

if TYPE_CHECKING:
    import numpy.typing as npt

    from isa.program import Program
    from plena_sim.hbm.storage import Hbm
    from plena_sim.trace.ring import Trace

T = TypeVar("T")

__all__ = [
    "read_program",
    "usage_errors",
    "out_path",
    "out_dir",
    "save_transaction",
    "distinct_outputs",
    "write_out",
    "write_hbm_dump",
    "save_npy",
    "save_npz",
    "write_perfetto",
]


def read_program(path: str) -> Program:
    """The :class:`~isa.program.Program` of a ``.mem``/``.hex`` machine-code file or an assembly file."""
    from isa import assemble_file, read_mem

    p = Path(path)
    if not p.exists():
        raise UsageError(f"no such file: {path}")
    if p.suffix.lower() in (".mem", ".hex"):
        return read_mem(p)
    return assemble_file(p)


@contextlib.contextmanager
def usage_errors(what: str) -> Iterator[None]:
    """An :class:`~isa.fileio.OutputError` (or any OS error) in the block is the user's error: ``what: reason``
    (exit 2, one line)."""
    try:
        yield
    except OutputError as exc:
        raise UsageError(f"{what}: {exc}") from None
    except OSError as exc:
        where = f" {exc.filename!r}" if exc.filename else ""
        raise UsageError(f"{what}: cannot write{where}: {exc.strerror or exc}") from None


def _as_usage(what: str, fn: Callable[..., T], *args: object) -> T:
    try:
        return fn(*args)
    except OutputError as exc:
        raise UsageError(f"{what}: {exc}") from None


def out_path(path: str, what: str) -> Path:
    """An output file's real path, checked before anything runs (:func:`isa.fileio.check_output`)."""
    return _as_usage(what, check_output, path)


def out_dir(path: str, what: str) -> Path:
    """An output directory's real path, checked before anything runs (created when written; its parent must
    exist, the rule of every output)."""
    return _as_usage(what, check_output_dir, path)


@contextlib.contextmanager
def save_transaction(path: str, what: str, owned: Collection[str]) -> Iterator[DirTransaction]:
    """An open :class:`~isa.fileio.DirTransaction` on ``path`` (checked, locked, its temporary directory made;
    closed when the block ends: committed or not). Its refusals and write errors are UsageErrors."""
    with usage_errors(what), DirTransaction(path, owned) as tx:
        yield tx


def _identity(path: str | Path) -> tuple[object, ...]:
    """What makes two paths the same file: the inode of an existing file, else the resolved path."""
    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", st.st_dev, st.st_ino)


def distinct_outputs(outputs: Iterable[tuple[str, Path]], inputs: Iterable[str | Path | None] = ()) -> None:
    """Refuse (UsageError) two outputs of one command that are the same file, and an output that is one of the
    command's input files (``outputs``: (flag, path) pairs)."""
    read = {_identity(p) for p in inputs if p}
    seen: dict[tuple[object, ...], str] = {}
    for what, path in outputs:
        key = _identity(path)
        if key in read:
            raise UsageError(f"{what}: {str(path)!r} is an input of this command (an output never overwrites one)")
        if key in seen:
            raise UsageError(f"{what}: {str(path)!r} is the same file as the output of {seen[key]}")
        seen[key] = what


def write_out(path: Path, data: bytes | str, what: str) -> None:
    """Write one output file atomically; a refusal or an OS error (disk full, permissions) is a UsageError."""
    with usage_errors(what):
        atomic_write(path, data)


def write_hbm_dump(path: Path, hbm: Hbm, addr: int, n: int) -> None:
    """Stream HBM bytes [addr, addr+n) to ``path`` in 16 MiB pieces (a dump of a multi-GiB range never
    holds it in memory), atomically."""
    with usage_errors("--dump-hbm"), atomic_stream(path) as fh:
        for _a, chunk in hbm.iter_chunks(addr, addr + n, 1 << 24):
            fh.write(chunk.data)


def save_npy(path: Path, array: npt.ArrayLike, what: str = "output") -> None:
    """``numpy.save`` of one array, written atomically."""
    write_out(path, npy_bytes(array), what)


def save_npz(path: Path, arrays: Mapping[str, npt.ArrayLike], what: str = "output") -> None:
    """``numpy.savez`` of named arrays, written atomically."""
    write_out(path, npz_bytes(arrays), what)


def write_perfetto(path: Path, trace: Trace, what: str = "--perfetto", fault: dict[str, Any] | None = None) -> None:
    """The trace as Chrome/Perfetto trace JSON at a checked output path (``fault``: its marker, see
    :meth:`plena_sim.trace.ring.Trace.to_perfetto`)."""
    write_out(path, json_text(trace.to_perfetto(fault=fault)).encode(), what)
