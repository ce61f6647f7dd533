"""How ``plena-sim`` stops early: Ctrl-C (SIGINT), SIGTERM, ``--timeout``, a closed output pipe.

One job: turn a stop request into an exception that unwinds the command -- so that every ``finally`` and context
manager runs: temporary files and directories are removed, nothing is left half-written -- and then into one line
and an exit code. Stdlib only: :func:`plena_cli.main.main` installs the handlers (:class:`Guard`) before it
imports anything heavy, so a Ctrl-C during the imports is handled too.

* SIGINT / SIGTERM raise :class:`Interrupted` (exit 130 / 143: 128 + the signal number); ``--timeout SECONDS``
  (wall clock, from the start of the command) arms ``ITIMER_REAL``, whose SIGALRM raises :class:`TimeLimit`
  (exit 124). Both are :class:`~plena_sim.errors.RunStopped`: a run in progress stops at the next instruction
  boundary (:mod:`plena_sim.limits.stop`: the Numba loop polls a flag the kernel sets when the signal arrives) and the
  exception carries the instructions it retired. After the first stop request further signals are ignored, so
  that the clean-up they would interrupt finishes.
* A stop raised where Python cannot propagate it -- the handler ran inside a ctypes callback (Numba's compiler
  calls back into Python while it compiles), a ``__del__`` or a weakref callback, whose exceptions Python prints
  as "Exception ignored" and drops -- is not lost: the guard's ``sys.unraisablehook`` recognises its own stop,
  prints nothing, and has it raised again a millisecond later (a one-shot ``ITIMER_REAL``), until it lands in
  code that unwinds. A command that still returns normally with a stop on record raises it at its end.
* A closed stdout (``plena-sim run NAME | head -1``) is not an error: exit 0, nothing more printed.
* Handlers are installed only by :func:`plena_cli.main.main` in the main thread of a ``plena-sim`` process; an
  in-process caller of :func:`plena_cli.boundary.run_cli` (a test, a thread) has none, and ``--timeout`` is a
  usage error there (a process-wide timer cannot bound one thread).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any, NoReturn

from plena_sim.errors import RunStopped

from .errors import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_TIMEOUT, UsageError

__all__ = [
    "Interrupted",
    "TimeLimit",
    "Guard",
    "add_timeout_arg",
    "stop_report",
    "silence_stdout",
    "exit_now",
    "STOP_CODES",
    "MAX_TIMEOUT",
]

#: the largest ``--timeout`` (seconds; about 115 days)
MAX_TIMEOUT = 10.0**7
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: the exit codes of a stop request
STOP_CODES = (EXIT_TIMEOUT, EXIT_INTERRUPTED, EXIT_TERMINATED)


class Interrupted(RunStopped, KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: exit 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def line(self) -> str:
        what = "interrupted" if self.signum == signal.SIGINT else "terminated"
        return f"{what} ({signal.Signals(self.signum).name}){_retired(self)}"


class TimeLimit(RunStopped):
    """The ``--timeout`` ran out: exit 124."""

    exit_code = EXIT_TIMEOUT

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds

    def line(self) -> str:
        return f"time limit exceeded: --timeout {self.seconds:g} s{_retired(self) or ', no run was in progress'}"


def _retired(stop: RunStopped) -> str:
    return "" if stop.retired is None else f", {stop.retired:,} instructions retired"


def stop_report(exc: BaseException) -> tuple[int, str]:
    """(exit code, one line) of a stop request (any KeyboardInterrupt counts as SIGINT)."""
    if isinstance(exc, (Interrupted, TimeLimit)):
        return exc.exit_code, exc.line()
    stop = Interrupted(signal.SIGINT)
    stop.retired = exc.retired if isinstance(exc, RunStopped) else None
    return stop.exit_code, stop.line()


def exit_now(code: int) -> NoReturn:
    """End a ``plena-sim`` process at once: flush stdout / stderr, run the ``atexit`` handlers (temporary
    directories' finalizers among them), then ``os._exit`` -- skipping the interpreter's teardown, which takes most
    of a second with Numba's LLVM loaded (its clean-up was done by the command or by the unwinding)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's; absent elsewhere: nothing to run
    if run_exit_handlers is not None:
        with contextlib.suppress(Exception):
            run_exit_handlers()
    os._exit(code)


def silence_stdout() -> None:
    """After a broken stdout pipe: point file descriptor 1 at /dev/null, so that the interpreter's last flush at
    exit does not fail (and print) again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--timeout: {text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT):
        raise UsageError(f"--timeout: {text!r} must be a number of seconds > 0 and <= {MAX_TIMEOUT:g}")
    return value


def add_timeout_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="wall-clock limit of the whole command (exit 124 when it runs out)",
    )


class Guard:
    """The stop handlers of one ``plena-sim`` command (a context manager; main thread only, else inert)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.stop: Interrupted | TimeLimit | None = None  # the first stop request raised
        self._previous: dict[int, Any] = {}
        self._flag: Any = None  # plena_sim.limits.stop.StopFlag while a command runs
        self._timeout = 0.0
        self._lost = False  # the stop was raised where Python drops exceptions: raise it again
        self._in_hook = False
        self._previous_hook: Any = None
        self.active = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> Guard:
        if self.active:
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.active:
            return
        self._disarm_timer()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        sys.unraisablehook = self._previous_hook

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stop is None:
            self.stop = TimeLimit(self._timeout) if signum == signal.SIGALRM else Interrupted(signum)
            raise self.stop
        if self._lost and self._in_hook:  # ran inside the hook itself: try again later
            self._raise_again_soon()
        elif self._lost:
            self._lost = False
            raise self.stop
        # else a stop is unwinding: let its clean-up finish

    def _unraisable(self, unraisable: Any) -> None:
        """``sys.unraisablehook``: our own stop dropped (raised inside a ctypes callback, ``__del__``, ...) is
        raised again soon, silently; anything else goes to the previous hook."""
        if self.stop is None or unraisable.exc_value is not self.stop:
            self._previous_hook(unraisable)
            return
        self._in_hook = True
        try:
            self._lost = True
            self._raise_again_soon()
        finally:
            self._in_hook = False

    def _raise_again_soon(self) -> None:
        """A one-shot SIGALRM in 1 ms (the ``--timeout`` no longer matters once a stop is on record)."""
        self._previous.setdefault(signal.SIGALRM, signal.signal(signal.SIGALRM, self._handle))
        signal.setitimer(signal.ITIMER_REAL, 0.001)

    @contextlib.contextmanager
    def command(self, timeout: float | None) -> Iterator[None]:
        """Around one command: runs poll the stop flag; ``timeout`` seconds (from :attr:`started`) arm the timer."""
        if timeout is not None and not self.active:
            raise UsageError("--timeout: only a plena-sim process (its main thread) can bound a command's time")
        from plena_sim.limits import stop

        self._flag = stop.StopFlag.create() if self.active else None
        try:
            with stop.watching(self._flag):
                if timeout is not None:
                    self._arm_timer(timeout)
                yield
            if self.stop is not None:  # requested, then dropped where no exception propagates, and never raised
                raise self.stop
        finally:
            self._disarm_timer()
            if self._flag is not None:
                self._flag.close()
                self._flag = None

    def _arm_timer(self, seconds: float) -> None:
        self._timeout = seconds
        self._previous.setdefault(signal.SIGALRM, signal.signal(signal.SIGALRM, self._handle))
        remaining = seconds - (time.monotonic() - self.started)
        if remaining <= 0:
            self._handle(signal.SIGALRM, None)
        signal.setitimer(signal.ITIMER_REAL, remaining)

    def _disarm_timer(self) -> None:
        if signal.SIGALRM in self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
