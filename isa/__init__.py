"""The PLENA instruction set: one opcode table (``isa.table``) and every view derived from it.

Public API: :func:`assemble`, :func:`assemble_file`, :class:`AssemblerError`, :func:`disassemble`,
:func:`disassemble_word`, :class:`Program`, :func:`read_mem`, :func:`write_mem`, :func:`parse_mem`,
:func:`format_mem`, :class:`MemFormatError`, :func:`read_program` (a program file by its suffix).
"""

from .assembler import AsmDiagnostic, AssemblerError, assemble, assemble_file
from .disasm import disassemble, disassemble_word
from .memfile import MemFormatError, format_mem, parse_mem, read_mem, write_mem
from .program import Program, SourceLine, SourceMap
from .programfile import read_program

__all__ = [
    "AsmDiagnostic",
    "AssemblerError",
    "assemble",
    "assemble_file",
    "disassemble",
    "disassemble_word",
    "MemFormatError",
    "format_mem",
    "parse_mem",
    "read_mem",
    "read_program",
    "write_mem",
    "Program",
    "SourceLine",
    "SourceMap",
]
