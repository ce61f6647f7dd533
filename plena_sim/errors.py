"""The typed input errors of the simulator library (a bottom module: stdlib only at import time, so
that :mod:`plena_cli.main` can install its stop handlers before anything heavy is imported).

One job: name the two kinds of user input the library rejects, so that every module (and the
``plena-sim`` command line, which turns them into exit code 2) can raise and catch them without
importing the module that usually raises them. A key shown in a message is escaped (``isa.safetext``).

* :class:`ConfigError` -- a hardware configuration problem (a TOML key, an override, an HBM timing
  preset), naming the key;
* :class:`ImageError` -- a problem with an HBM image, a manifest, a preload file or a tensor to place.

Both are ``ValueError`` s. And one request from outside the program:

* :class:`RunStopped` -- a stop request (an interrupt signal, a time limit) raised by the caller's signal or
  timer handler (see :mod:`plena_sim.limits.stop`); a ``BaseException``, so ``except Exception`` never swallows it.
"""

from __future__ import annotations

__all__ = ["ConfigError", "ImageError", "RunStopped", "KEY_SHOWN"]

#: the most characters of a key a message shows (a key read from a file may be megabytes long)
KEY_SHOWN = 120


class ConfigError(ValueError):
    """A configuration problem, naming the key (``key``) and the offending value."""

    def __init__(self, key: str, message: str):
        from isa.safetext import printable  # here, not at the top: the stop handlers import this module first

        self.key = key
        super().__init__(f"{printable(key, KEY_SHOWN)}: {message}")


class ImageError(ValueError):
    """A problem with an HBM image, a manifest, a preload file or a tensor to place."""


class RunStopped(BaseException):
    """A request to stop, raised from a signal or timer handler (the ``plena-sim`` command line raises its
    subclasses for SIGINT, SIGTERM and ``--timeout``). When it escapes a run, the backend adds the instructions
    that run retired to :attr:`retired` (None: it was raised outside a run). The core stops only at an instruction
    boundary (an H_* instruction cut short re-executes from its start on ``Machine.run(..., resume=True)``)."""

    retired: int | None = None

    def add_retired(self, n: int) -> None:
        self.retired = (self.retired or 0) + int(n)
