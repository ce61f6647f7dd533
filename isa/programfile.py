"""A program file by its suffix: ``.mem`` / ``.hex`` machine code, anything else assembly text.

One job: the single place that maps a program file to its reader (:func:`~isa.memfile.read_mem`,
:func:`~isa.assembler.assemble_file`), both bounded (:mod:`isa.readers`: a regular file of at most 1 GiB and
``max_words`` instructions).
"""

from __future__ import annotations

import os
from pathlib import Path

from .assembler import assemble_file
from .memfile import read_mem
from .program import Program
from .readers import MAX_PROGRAM_WORDS

__all__ = ["MEM_SUFFIXES", "read_program"]

#: suffixes of machine-code files (case-insensitive)
MEM_SUFFIXES = (".mem", ".hex")


def read_program(path: str | os.PathLike, *, max_words: int = MAX_PROGRAM_WORDS) -> Program:
    """The :class:`Program` of a ``.mem``/``.hex`` machine-code file or an assembly file."""
    p = Path(path)
    if p.suffix.lower() in MEM_SUFFIXES:
        return read_mem(p, max_words=max_words)
    return assemble_file(p, max_words=max_words)
