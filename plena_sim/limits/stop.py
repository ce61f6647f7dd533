"""Stopping a run from outside: a flag in memory that the kernel sets when a signal arrives, polled by the core.

One job: let a signal (Ctrl-C, SIGTERM, a timer's SIGALRM) stop the Numba run loop within milliseconds, although
Python runs its signal handlers only between two bytecodes and the loop is one long native call.

How: :class:`StopFlag` is one page of an anonymous file (``memfd``), mapped into memory and made Python's signal
*wakeup fd* (``signal.set_wakeup_fd``). When any signal with a Python-level handler arrives, CPython's C-level
handler writes the signal number into that file -- at once, whatever the main thread is doing -- so the first
byte of the mapped page becomes non-zero. The core checks that byte every ``POLL_UNITS`` (8192) work budget units
(:mod:`plena_sim.limits.budget`: at most a few ms of the heaviest instructions) and between the rows of an H_*
instruction: it stops at the instruction boundary and returns to Python, where the pending
Python handler runs (and, for the command line's handlers, raises :class:`~plena_sim.errors.RunStopped`). An
H_* instruction stopped between its rows has changed only its destination rows and nothing that is counted;
it re-executes from its start when the run resumes, so a resumed run ends in exactly the state and statistics of
an uninterrupted one.

* :func:`watching` ``(flag)`` -- a context manager: runs started inside it (in this thread or context) poll
  ``flag``; :func:`current` is the flag in force (None: runs never stop early);
* :meth:`StopFlag.create` -- a flag installed as the wakeup fd (main thread only; None where the platform or the
  thread does not allow it); :meth:`StopFlag.close` restores the previous wakeup fd;
* :func:`after_stop` ``(flag)`` -- what a backend does when the loop stopped for the flag: give the pending
  handlers their turn (one of them normally raises), else re-arm the flag (a signal that asks for no stop).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar

import numpy as np

__all__ = ["StopFlag", "watching", "current", "after_stop", "poll_array"]

_PAGE = mmap.PAGESIZE
_CURRENT: ContextVar[StopFlag | None] = ContextVar("plena_sim_stop_flag", default=None)


class StopFlag:
    """One page the kernel writes signal numbers into (the wakeup fd): ``array[0] != 0`` = a signal arrived."""

    def __init__(self, fd: int, previous_wakeup_fd: int):
        self._fd = fd
        self._previous = previous_wakeup_fd
        self._map = mmap.mmap(fd, _PAGE)
        #: the polled bytes (uint8, one page, writable: the core's type for every flag)
        self.array = np.frombuffer(self._map, dtype=np.uint8)

    @classmethod
    def create(cls) -> StopFlag | None:
        """A flag installed as this process's wakeup fd, or None (not the main thread, or no mappable file)."""
        try:
            fd = _anonymous_file()
        except OSError:
            return None
        try:
            os.ftruncate(fd, _PAGE)
            os.set_blocking(fd, False)
            previous = signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
        except (OSError, ValueError):  # ValueError: not the main thread
            os.close(fd)
            return None
        return cls(fd, previous)

    def rearm(self) -> None:
        """Clear the flag: the next signal writes the first byte again."""
        os.lseek(self._fd, 0, os.SEEK_SET)
        self.array[:] = 0

    def close(self) -> None:
        """Give the wakeup fd back to whoever had it (call in the thread that created the flag)."""
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(self._previous)
        os.close(self._fd)


def _anonymous_file() -> int:
    """A file descriptor of a file without a name (memfd, else an unlinked temporary file)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("plena-sim-stop", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile() as fh:
        return os.dup(fh.fileno())


@contextlib.contextmanager
def watching(flag: StopFlag | None) -> Iterator[StopFlag | None]:
    """Runs started inside the block (this context) poll ``flag`` (None: they never stop early)."""
    token = _CURRENT.set(flag)
    try:
        yield flag
    finally:
        _CURRENT.reset(token)


def current() -> StopFlag | None:
    return _CURRENT.get()


def poll_array(flag: StopFlag | None) -> np.ndarray:
    """The bytes the core polls for ``flag``: its page, or a fresh zero page (a run that never stops early)."""
    return flag.array if flag is not None else np.zeros(_PAGE, dtype=np.uint8)


def after_stop(flag: StopFlag | None) -> None:
    """The loop stopped because ``flag`` was set: the pending Python signal handlers run on this call (they run
    before the first bytecode of a Python function); if none of them raised, the signal asked for no stop:
    re-arm the flag so that the run can resume."""
    if flag is not None:
        flag.rearm()
