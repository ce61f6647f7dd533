"""Exit codes of ``plena-sim`` and the command line's own user error.

Exit codes: 0 ok (also when stdout is a pipe closed early: ``plena-sim run NAME | head -1``); 1 a testbench, demo
or mutant mismatch; 2 usage or input error (one red line, plus located details where there are any; never a
traceback); 3 the simulated program faulted; 4 an internal error (a bug: ``--debug`` shows the traceback) or a
generator error (a kernel generator emitted an invalid instruction, loop count or address: its name and the bad
value); 124 the ``--timeout`` ran out; 130 interrupted (SIGINT, Ctrl-C); 143 terminated (SIGTERM) --
:mod:`.interrupts`.
"""

from __future__ import annotations

__all__ = [
    "EXIT_OK",
    "EXIT_MISMATCH",
    "EXIT_USAGE",
    "EXIT_FAULT",
    "EXIT_BUG",
    "EXIT_TIMEOUT",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "UsageError",
]

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_FAULT, EXIT_BUG = 0, 1, 2, 3, 4
#: the exit status of timeout(1); 128 + SIGINT; 128 + SIGTERM
EXIT_TIMEOUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 124, 130, 143


class UsageError(Exception):
    """A user mistake that is not one of the library's typed errors (bad flag value, bad path...)."""
