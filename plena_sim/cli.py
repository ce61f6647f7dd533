"""The ``plena-sim`` command line (the top floor: it may import everything; nothing imports it).

Exit codes: 0 ok; 2 usage or input error (one red line, plus located details where there are any; never
a traceback); 3 the simulated program faulted; 1 an internal error (a bug: ``--debug`` shows the
traceback).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_FAULT = 0, 1, 2, 3


class UsageError(Exception):
    """A user mistake that is not one of the library's typed errors (bad flag value, bad path...)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + exits 2; keep the exit code, add our red line
        raise UsageError(f"{self.prog}: {message}")


def _consoles():
    return Console(highlight=False, soft_wrap=True), Console(stderr=True, highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------------------- helpers

def _config_from_args(args):
    from .config import load_config, parse_override
    overrides = dict(parse_override(s) for s in (args.set or []))
    return load_config(args.config, section=args.section, overrides=overrides)


def _add_config_args(p):
    p.add_argument("--config", "--settings", dest="config", metavar="FILE",
                   help="plena_settings.toml (default: $PLENA_SETTINGS_TOML, else the built-in reference file)")
    p.add_argument("--section", "--mode", dest="section", default="TRANSACTIONAL",
                   help="TOML section to read (default TRANSACTIONAL; e.g. ANALYTIC)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one CONFIG key (repeatable)")


def _read_program(path: str):
    from isa import assemble_file, read_mem
    p = Path(path)
    if not p.exists():
        raise UsageError(f"no such file: {path}")
    if p.suffix.lower() in (".mem", ".hex"):
        return read_mem(p)
    return assemble_file(p)


# ----------------------------------------------------------------------------------------- commands

def cmd_asm(args, out, err):
    from isa import assemble_file, format_mem, write_mem
    src = Path(args.input)
    if not src.is_file():
        raise UsageError(f"no such file: {args.input}")
    prog = assemble_file(src)
    if args.output in (None, "-"):
        out.file.write(format_mem(prog.words))
    else:
        dst = Path(args.output)
        if not dst.parent.exists() and str(dst.parent) not in ("", "."):
            raise UsageError(f"output directory does not exist: {dst.parent}")
        try:
            write_mem(dst, prog.words)
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        err.print(f"[green]assembled[/] {len(prog)} instructions -> {args.output}")
    return EXIT_OK


def cmd_disasm(args, out, err):
    from isa import disassemble_word, read_mem
    prog = read_mem(args.input)
    for k, w in enumerate(prog.words):
        text = disassemble_word(w)
        out.print(f"{k:6d}  0x{w:08X}  {text}" if args.addresses else text, markup=False)
    return EXIT_OK


def cmd_isa(args, out, err):
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
        t.add_row(f"{i.opcode:02X}", i.mnemonic, UNITS[i.unit], ops, i.fmt,
                  i.latency + (" (0 if rd=0)" if i.noop_if_rd0 else ""), i.summary)
    out.print(t)
    return EXIT_OK


def cmd_config(args, out, err):
    cfg = _config_from_args(args)
    if args.json:
        doc = {"section": cfg.section, "source": cfg.source, "config": cfg.values(),
               "derived": {"P_M": cfg.P_M, "P_V": cfg.P_V, "P_W": cfg.P_W, "mram_tiles": cfg.mram_tiles},
               "precision": {k: v.describe() for k, v in cfg.precision.items()},
               "latency": {k: {"dc_lib_en": en, "dc_lib_dis": dis, "effective": cfg.latency_cycles(k)}
                           for k, (en, dis) in cfg.latency.items()}}
        out.file.write(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK
    t = Table(title=f"effective config [{cfg.section}] from {cfg.source}")
    t.add_column("key")
    t.add_column("value", justify="right")
    for k, v in cfg.values().items():
        t.add_row(k, str(v))
    t.add_row("[dim]P_M / P_V / P_W (rows per DMA)[/]", f"{cfg.P_M} / {cfg.P_V} / {cfg.P_W}")
    t.add_row("[dim]MRAM tiles[/]", str(cfg.mram_tiles))
    for k, v in cfg.precision.items():
        t.add_row(f"PRECISION.{k}", v.describe())
    for k in cfg.latency:
        t.add_row(f"LATENCY.{k}", str(cfg.latency_cycles(k)))
    out.print(t)
    return EXIT_OK


# ----------------------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="plena-sim", description="PLENA accelerator simulator, assembler and testbenches")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks for internal errors")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    a = sub.add_parser("asm", help="assemble a .asm file into .mem machine code")
    a.add_argument("input", metavar="IN.asm")
    a.add_argument("-o", "--output", metavar="OUT.mem", help="output .mem (default: stdout)")
    a.set_defaults(func=cmd_asm)

    d = sub.add_parser("disasm", help="disassemble a .mem file into canonical assembly")
    d.add_argument("input", metavar="IN.mem")
    d.add_argument("--addresses", action="store_true", help="prefix each line with index and word")
    d.set_defaults(func=cmd_disasm)

    i = sub.add_parser("isa", help="print the opcode table")
    i.add_argument("--markdown", action="store_true", help="print the generated Markdown reference")
    i.set_defaults(func=cmd_isa)

    c = sub.add_parser("config", help="print the effective hardware configuration")
    _add_config_args(c)
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_config)
    return p


def _user_error_types():
    from isa import AssemblerError, MemFormatError
    from .config import ConfigError
    types = [UsageError, AssemblerError, MemFormatError, ConfigError]
    try:
        from .image import ImageError
        types.append(ImageError)
    except ImportError:
        pass
    return tuple(types)


def main(argv=None) -> int:
    out, err = _consoles()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        from isa import AssemblerError
        user_errors = _user_error_types()
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:  # --help
            return int(e.code or 0)
        if not getattr(args, "func", None):
            build_parser().print_help()
            return EXIT_USAGE
        return int(args.func(args, out, err))
    except KeyboardInterrupt:
        err.print("[red]interrupted[/]")
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: classify every failure
        if isinstance(exc, AssemblerError):
            err.print(f"[red]error:[/] {len(exc.diagnostics)} assembler error(s)", markup=True)
            for dgn in exc.diagnostics:
                err.print(f"  {dgn}", markup=False)
            return EXIT_USAGE
        if isinstance(exc, user_errors):
            err.print("[red]error:[/] ", end="")
            err.print(str(exc), markup=False)
            return EXIT_USAGE
        if type(exc).__name__ in ("SimFault",) or any(c.__name__ == "SimFault" for c in type(exc).__mro__):
            err.print("[red]fault:[/] ", end="")
            err.print(str(exc), markup=False)
            return EXIT_FAULT
        if debug:
            raise
        err.print(f"[red]internal error:[/] {type(exc).__name__}: ", end="")
        err.print(f"{exc} (run with --debug for the traceback; please report it)", markup=False)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
