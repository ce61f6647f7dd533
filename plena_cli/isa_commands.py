"""``plena-sim asm``, ``disasm`` and ``isa``: the assembler, the disassembler and the opcode table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from .errors import EXIT_OK, UsageError
from .options import add_max_program_arg, examples
from .paths import distinct_outputs, out_path, write_out
from .render import add_plain_row

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register", "cmd_asm", "cmd_disasm", "cmd_isa"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = sub.add_parser(
        "asm",
        help="assemble a .asm file into .mem machine code",
        **examples(
            "plena-sim asm kernel.asm -o kernel.mem", "plena-sim asm kernel.asm | head   # the .mem text on stdout"
        ),
    )
    a.add_argument("input", metavar="IN.asm")
    a.add_argument("-o", "--output", metavar="OUT.mem", help="output .mem (default: stdout)")
    add_max_program_arg(a)
    a.set_defaults(func=cmd_asm)

    d = sub.add_parser(
        "disasm",
        help="disassemble a .mem file into canonical assembly",
        **examples("plena-sim disasm kernel.mem", "plena-sim disasm kernel.mem --addresses"),
    )
    d.add_argument("input", metavar="IN.mem")
    d.add_argument("--addresses", action="store_true", help="prefix each line with index and word")
    add_max_program_arg(d)
    d.set_defaults(func=cmd_disasm)

    i = sub.add_parser(
        "isa", help="print the opcode table", **examples("plena-sim isa", "plena-sim isa --markdown > isa_reference.md")
    )
    i.add_argument("--markdown", action="store_true", help="print the generated Markdown reference")
    i.set_defaults(func=cmd_isa)


def cmd_asm(args: argparse.Namespace, out: Console, err: Console) -> int:
    from isa import assemble_file, format_mem

    src = Path(args.input)
    if not src.exists():  # anything else that exists (a FIFO, a device) is refused by the reader
        raise UsageError(f"no such file: {args.input}")
    to_stdout = args.output in (None, "-")
    dst = None if to_stdout else out_path(args.output, "-o")
    if dst is not None:
        distinct_outputs([("-o", dst)], [src])
    prog = assemble_file(src, max_words=args.max_program)
    if dst is None:
        out.file.write(format_mem(prog.words))
        return EXIT_OK
    write_out(dst, format_mem(prog.words), "-o")
    err.print("[green]assembled[/] ", end="")
    err.print(f"{len(prog)} instructions -> {args.output}", markup=False)
    return EXIT_OK


def cmd_disasm(args: argparse.Namespace, out: Console, err: Console) -> int:
    from isa import disassemble_word, read_mem

    prog = read_mem(args.input, max_words=args.max_program)
    for k, w in enumerate(prog.words):
        text = disassemble_word(w)
        out.print(f"{k:6d}  0x{w:08X}  {text}" if args.addresses else text, markup=False)
    return EXIT_OK


def cmd_isa(args: argparse.Namespace, out: Console, err: Console) -> int:
    from isa.docs import opcode_markdown
    from isa.table import INSTRUCTIONS, UNITS

    if args.markdown:
        out.file.write(opcode_markdown())
        return EXIT_OK
    t = Table(title="PLENA opcode table (isa/table.py)")
    for col in ("hex", "mnemonic", "unit", "operands", "fmt", "latency", "meaning"):
        t.add_column(col)
    for i in INSTRUCTIONS:
        ops = ", ".join(("[" + o.name + "]") if o.optional else o.name for o in i.operands if not o.compat)
        add_plain_row(
            t,
            f"{i.opcode:02X}",
            i.mnemonic,
            UNITS[i.unit],
            ops,
            i.fmt,
            i.latency + (" (0 if rd=0)" if i.noop_if_rd0 else ""),
            i.summary,
        )
    out.print(t)
    return EXIT_OK
