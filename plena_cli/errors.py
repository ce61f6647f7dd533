"""Exit codes of ``plena-sim`` and the command line's own user error.

Exit codes: 0 ok; 1 a testbench, demo or mutant mismatch; 2 usage or input error (one red line, plus
located details where there are any; never a traceback); 3 the simulated program faulted; 4 an
internal error (a bug: ``--debug`` shows the traceback); 130 interrupted.
"""

from __future__ import annotations

__all__ = ["EXIT_OK", "EXIT_MISMATCH", "EXIT_USAGE", "EXIT_FAULT", "EXIT_BUG", "EXIT_INTERRUPTED", "UsageError"]

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_FAULT, EXIT_BUG = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A user mistake that is not one of the library's typed errors (bad flag value, bad path...)."""
