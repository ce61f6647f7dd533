"""Every output file of the project is written here (lowest package, so every layer can import it).

Rules (the README's "Outputs" section states them for users):

* **Targets.** An output path is resolved (symlinks followed). The real target must be a regular file or a
  missing name in an existing directory; anything else -- a device node, a FIFO, a socket, a directory, a dangling
  or looping symlink, a missing directory -- is refused (:class:`OutputError`) and left exactly as it was. A
  symlink to a regular file writes that file: the new file replaces the *target*, in the target's directory, and
  the link stays; nothing is ever renamed over a symlink.
* **Atomic.** A file is written to a temporary ``.NAME.XXXXXXXX.tmp`` beside its target, flushed to disk (fsync)
  and renamed over the target, so a reader sees the previous file or the complete new one. Any exception --
  a full disk, an interrupt, a signal raised as an exception -- removes the temporary file.
* **Mode.** A new file has mode ``0666 & ~umask`` (a directory ``0777 & ~umask``), as ``open()`` gives.
* :class:`DirTransaction` replaces a whole directory of files at once (``run --save DIR``): the files go into a
  sibling temporary directory that is swapped in for DIR in one rename, under a lock that refuses a concurrent
  writer.

:func:`check_output` validates a path before a command runs (it also creates and removes a probe file, so a
read-only or full file system is found then, not after the run); the writers check again when they write.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import io
import os
import secrets
import signal
import stat
import threading
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "OutputError",
    "output_target",
    "check_output",
    "check_output_dir",
    "make_output_dir",
    "atomic_stream",
    "atomic_path",
    "atomic_write",
    "npy_bytes",
    "npz_bytes",
    "DirTransaction",
]

_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
_NAME_KEEP = 200  # characters of the target's name kept in a temporary name (NAME_MAX is 255)


class OutputError(OSError):
    """An output path that is refused, or a write that failed; the message names the path and the reason (the
    caller adds the flag). An OSError, so that a caller catching write errors catches these too."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "output error"


# ----------------------------------------------------------------------------------------- targets


def _text(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if not text:
        raise OutputError("the output path is empty")
    if "\x00" in text:
        raise OutputError(f"output path {text!r} contains a NUL byte")
    return text


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symlink"),
    ):
        if test(mode):
            return name
    return "special file"


def _resolve(text: str, want_dir: bool) -> tuple[Path, os.stat_result | None]:
    """The real path of an output (symlinks resolved) and its stat, None if it does not exist yet (its directory
    exists). Refuses dangling / looping symlinks and missing directories."""
    p = Path(text)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if os.path.islink(p):
            raise OutputError(f"{text!r} is a dangling symlink (to {os.readlink(p)!r})") from None
        parent = Path(os.path.realpath(p.parent))
        if not parent.is_dir():
            raise OutputError(f"output directory {str(p.parent)!r} of {text!r} does not exist") from None
        return parent / p.name, None
    except OSError as exc:  # ELOOP (symlink loop), ENOTDIR (a file used as a directory), EACCES
        raise OutputError(f"{text!r}: {exc.strerror or exc}") from None
    real = Path(os.path.realpath(p))
    if not (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)):
        via = f" (a symlink to {str(real)!r})" if os.path.islink(p) else ""
        wanted = "a directory" if want_dir else "a regular file"
        raise OutputError(f"{text!r}{via} is a {_kind(st.st_mode)}, not {wanted}")
    return real, st


def output_target(path: str | os.PathLike[str]) -> Path:
    """The real path an output file is written to: symlinks resolved, a regular file or a missing name in an
    existing directory (else :class:`OutputError`)."""
    return _resolve(_text(path), want_dir=False)[0]


def check_output(path: str | os.PathLike[str]) -> Path:
    """:func:`output_target`, and a probe file created and removed beside it (a read-only, full or foreign file
    system is refused now rather than after a run)."""
    text = _text(path)
    target = output_target(text)
    with _signals_deferred():
        os.unlink(_create_temp(target, text))
    return target


def check_output_dir(path: str | os.PathLike[str]) -> Path:
    """The real path of an output directory: an existing directory, or a missing name in an existing directory
    (created by :func:`make_output_dir`)."""
    return _resolve(_text(path), want_dir=True)[0]


def make_output_dir(path: str | os.PathLike[str]) -> Path:
    """:func:`check_output_dir`, creating the directory (mode ``0777 & ~umask``, its parent must exist)."""
    text = _text(path)
    real = check_output_dir(text)
    try:
        real.mkdir(mode=0o777, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {text!r}: {exc.strerror or exc}") from None
    return real


def _recheck(target: Path, text: str) -> None:
    """Just before the rename: the target is still a regular file or missing (not swapped for a link or a
    device meanwhile)."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{text!r} became a {_kind(st.st_mode)} while it was written; left as it is")


# ----------------------------------------------------------------------------------------- files


def _temp_name(target: Path) -> Path:
    return target.parent / f".{target.name[:_NAME_KEEP]}.{secrets.token_hex(4)}.tmp"


def _create_temp(target: Path, text: str) -> Path:
    """A new, empty temporary file beside ``target`` (mode 0666 & ~umask)."""
    try:
        for _ in range(64):
            tmp = _temp_name(target)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(tmp, _FILE_FLAGS, 0o666))
                return tmp
        raise FileExistsError(errno.EEXIST, "no free temporary name")
    except OSError as exc:
        raise OutputError(f"cannot write {text!r}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back while a temporary file or directory, or a lock, is taken, committed or
    released as a whole: a signal that comes meanwhile is recorded and raised again when the block ends, so its
    exception lands where the caller's cleanup covers it, never between a resource and its cleanup. (Python
    runs signal handlers only in the main thread: another thread is never interrupted, nothing to hold.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        held.append(signum)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is not None:  # None: a handler installed outside Python, left alone
            previous[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in held:
            signal.raise_signal(signum)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(d: Path) -> None:
    """Make a rename in ``d`` durable (best effort: some file systems cannot fsync a directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _commit(tmp: Path, target: Path, text: str) -> None:
    _recheck(target, text)
    os.replace(tmp, target)
    _fsync_dir(target.parent)


@contextlib.contextmanager
def _staged(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary file beside the output ``path``: flushed to disk and renamed over the target when the block
    ends, removed if it raises (whatever it raises, wherever an interrupt lands). OS errors become
    :class:`OutputError`."""
    text = _text(path)
    target = output_target(text)
    tmp: Path | None = None
    try:
        with _signals_deferred():
            tmp = _create_temp(target, text)
        yield tmp
        _fsync_file(tmp)
        with _signals_deferred():
            _commit(tmp, target, text)
            tmp = None
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(f"cannot write {text!r}: {exc.strerror or exc}") from None
        raise


@contextlib.contextmanager
def atomic_stream(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file to write an output into (streamed: nothing needs to fit in memory), atomically: on success
    it replaces the target, on any exception it is removed. OS errors become :class:`OutputError`."""
    with _staged(path) as tmp, open(os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "wb") as fh:
        yield fh


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary file's path, for a writer that only takes a file name (it may truncate or replace the empty
    file); renamed over the target when the block ends, removed if it raises."""
    with _staged(path) as tmp:
        yield tmp


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to the output ``path`` atomically (see the module docstring)."""
    with atomic_stream(path) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else bytes(data))


def npy_bytes(array: object) -> bytes:
    """The ``.npy`` file of one array (for :func:`atomic_write`)."""
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.asarray(array))
    return buf.getvalue()


def npz_bytes(arrays: Mapping[str, object]) -> bytes:
    """The ``.npz`` file of named arrays (for :func:`atomic_write`)."""
    import numpy as np

    buf = io.BytesIO()
    # numpy's stub lets a **mapping also fill savez's ``allow_pickle: bool`` keyword, so any array mapping is
    # rejected; the names here are array names (and older numpy has no allow_pickle to pass explicitly)
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


# ----------------------------------------------------------------------------------------- directories


class _Lock:
    """An exclusive ``flock`` on a lock file (refused, not awaited, when held); the file is removed on release."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
            except OSError as exc:
                raise OutputError(f"cannot write beside {text!r}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputError(f"another plena-sim process is writing {text!r} (it holds {str(path)!r})") from None
            if self._current(fd):
                self.fd = fd
                return
            os.close(fd)  # the previous holder removed this lock file after we opened it: lock the new one

    def _current(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self.fd)


def _cwd() -> Path:
    try:
        return Path(os.path.realpath(os.getcwd()))
    except OSError:  # the current directory was removed
        return Path("/nonexistent-cwd")


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the OS or the file
    system has no such rename."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        return False
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


class DirTransaction:
    """A directory written as a whole: :meth:`write` puts files into a sibling temporary directory and
    :meth:`commit` swaps it in for the target, so a reader of the target sees either the complete previous set
    or the complete new one. Only a directory whose entries are all regular files named in ``owned`` (what a
    previous transaction wrote) is replaced; another one is refused and left as it is. A lock file beside the
    target refuses a concurrent writer. Use as a context manager: leaving it without :meth:`commit` (an error,
    an interrupt) removes the temporary directory and leaves the target as it was.

    Where the OS cannot exchange two directories in one rename, the previous directory is renamed away and the
    new one into place: for that instant the target is missing (never mixed).

    An ``owned`` name ending in ``/`` is a subdirectory of the set holding regular files only (``write("d/x")``
    puts ``x`` into it; a previous set's ``d/`` may hold any regular files, e.g. what a script of the set wrote
    there, and is removed with the set)."""

    def __init__(self, path: str | os.PathLike[str], owned: Collection[str]) -> None:
        """Check the target (no file is touched yet: :meth:`__enter__` takes the lock and the temporary
        directory)."""
        self.text = _text(path)
        self.owned = frozenset(owned)
        self.target = self._checked_target()
        self._lock: _Lock | None = None
        self.tmp: Path | None = None

    def __enter__(self) -> DirTransaction:
        try:
            with _signals_deferred():
                self._lock = _Lock(self.target.parent / f".{self.target.name[:_NAME_KEEP]}.lock", self.text)
                self.tmp = self._make_temp_dir()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _checked_target(self) -> Path:
        real, st = _resolve(self.text, want_dir=True)
        if st is None:
            return real
        if os.path.ismount(real) or _cwd().is_relative_to(real):
            raise OutputError(f"{self.text!r} is a mount point or holds the current directory; it cannot be replaced")
        try:
            entries = os.listdir(real)
        except OSError as exc:
            raise OutputError(f"{self.text!r}: {exc.strerror or exc}") from None
        foreign = sorted(n for n in entries if not self._owned_entry(real, n))
        if foreign:
            shown = ", ".join(n if n not in self.owned else f"{n} (not a regular file)" for n in foreign[:5])
            more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            raise OutputError(
                f"{self.text!r} holds {shown}{more}, which a previous save did not write; it is left as it is"
            )
        if not os.access(real, os.W_OK | os.X_OK):
            raise OutputError(f"{self.text!r} is not writable")
        return real

    def _owned_entry(self, real: Path, name: str) -> bool:
        """Whether ``name`` in the target is one of the set: an owned regular file, or an owned subdirectory that
        holds regular files only."""
        mode = os.lstat(real / name).st_mode
        if name in self.owned:
            return stat.S_ISREG(mode)
        if name + "/" not in self.owned or not stat.S_ISDIR(mode):
            return False
        return all(stat.S_ISREG(os.lstat(real / name / n).st_mode) for n in os.listdir(real / name))

    def _make_temp_dir(self) -> Path:
        try:
            for _ in range(64):
                tmp = _temp_name(self.target)
                with contextlib.suppress(FileExistsError):
                    tmp.mkdir(mode=0o777)
                    return tmp
            raise FileExistsError(errno.EEXIST, "no free temporary name")
        except OSError as exc:
            raise OutputError(f"cannot write beside {self.text!r}: {exc.strerror or exc}") from None

    def write(self, name: str, data: bytes | str) -> None:
        """One file of the set (``name`` one of ``owned``), flushed to disk."""
        folder, _sep, base = name.rpartition("/")
        owned = name in self.owned if not folder else f"{folder}/" in self.owned and "/" not in folder
        if not owned or not base or self.tmp is None:
            raise ValueError(f"{name!r} is not a file of this transaction, or it is not open")
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        try:
            if folder and not (self.tmp / folder).is_dir():
                (self.tmp / folder).mkdir(mode=0o777)
            fd = os.open(self.tmp / name, _FILE_FLAGS, 0o666)
            with os.fdopen(fd, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise OutputError(f"cannot write {str(Path(self.text) / name)!r}: {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Swap the written set in for the target (the previous set is removed after the swap)."""
        if self.tmp is None:
            raise ValueError("the transaction is not open")
        try:
            _fsync_dir(self.tmp)
            with _signals_deferred():
                self._swap(self.tmp)
                _fsync_dir(self.target.parent)
        except OSError as exc:
            if isinstance(exc, OutputError):
                raise
            raise OutputError(f"cannot replace {self.text!r}: {exc.strerror or exc}") from None
        finally:
            self.close()

    def _swap(self, tmp: Path) -> None:
        st = None
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(self.target)
        if st is None:
            os.rename(tmp, self.target)  # fails (ENOTEMPTY) if a non-empty DIR appeared meanwhile
            return
        if not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{self.text!r} became a {_kind(st.st_mode)} during the run; left as it is")
        if _exchange(tmp, self.target):
            return  # tmp now holds the previous set: close() removes it
        old = _temp_name(self.target)
        os.rename(self.target, old)
        try:
            os.rename(tmp, self.target)
        except OSError:
            os.rename(old, self.target)
            raise
        os.rename(old, tmp)  # the previous set, where close() removes it

    def close(self) -> None:
        """Remove the temporary directory (the new set before a commit, the previous one after) and unlock;
        the target is left as it is. Safe to call on a transaction partly opened, or twice."""
        with _signals_deferred():
            if self.tmp is not None:
                self._remove_temp(self.tmp)
                self.tmp = None
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def _remove_temp(self, tmp: Path) -> None:
        """Remove the files of the set from the temporary directory, then the directory (left if someone put
        something else there)."""
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(tmp):
                if name + "/" in self.owned and stat.S_ISDIR(os.lstat(tmp / name).st_mode):
                    self._remove_files(tmp / name, None)
        self._remove_files(tmp, self.owned)

    @staticmethod
    def _remove_files(folder: Path, names: Collection[str] | None) -> None:
        """Unlink the regular files of ``folder`` (all, or those of ``names``), then the folder if empty."""
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(folder):
                if (names is None or name in names) and stat.S_ISREG(os.lstat(folder / name).st_mode):
                    with contextlib.suppress(OSError):
                        os.unlink(folder / name)
        with contextlib.suppress(OSError):
            os.rmdir(folder)
