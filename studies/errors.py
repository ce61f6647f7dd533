"""The errors of the studies: a request the library refuses, and every input error of the floors below.

A :class:`StudyError` is the user's mistake, not a bug: its message names what is wrong (the key or flag and its
value) in one line; the command line prints it and exits 2, like the lower floors' typed input errors
(:func:`input_error_types`).
"""

from __future__ import annotations

__all__ = ["StudyError", "CaseError", "ModelError", "input_error_types"]


class StudyError(Exception):
    """A request a study refuses (an unknown testbench, a parameter of the wrong type, a shape that does not fit)."""


class CaseError(StudyError):
    """A testbench case that cannot be built as requested (:mod:`studies.testbench_run`)."""


class ModelError(StudyError):
    """A model run that cannot be made as requested (:mod:`studies.model`)."""


def input_error_types() -> tuple[type[Exception], ...]:
    """The exceptions that are the user's input error (one line, exit 2 on the command line), not a bug: a
    :class:`StudyError` and the typed input errors of ``isa`` and ``plena_sim``."""
    from isa import AssemblerError, MemFormatError
    from plena_sim.errors import ConfigError, ImageError

    return StudyError, AssemblerError, MemFormatError, ConfigError, ImageError
