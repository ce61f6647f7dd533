"""The Markdown opcode reference, generated from the opcode table (``docs/isa_reference.md``)."""

from __future__ import annotations

from .table import FIELDS, FORMATS, INSTRUCTIONS, NOT_INSTRUCTIONS, OPERAND_KINDS, UNITS, Instr

__all__ = ["opcode_markdown"]


def _operands(instr: Instr) -> str:
    shown = []
    for o in instr.operands:
        if o.compat:
            continue
        name = "0" if o.kind == "zero" else f"{o.kind} {o.name}" if o.kind in ("gp", "f", "a") else f"{o.name}:{o.kind}"
        shown.append(f"[{name}]" if o.optional else name)
    return ", ".join(shown) or "(none)"


def _forms(instr: Instr) -> str:
    return " / ".join(", ".join(o.name for o in f) or "(none)" for f in instr.forms())


def opcode_markdown() -> str:
    lines = [
        "# PLENA opcode reference",
        "",
        "Generated from `isa/table.py` by `plena-sim isa --markdown`; do not edit by hand "
        "(a test checks that this file is up to date).",
        "",
        "## Fields",
        "",
        "| Field | Bits | Width |",
        "|---|---|---|",
    ]
    for f in FIELDS.values():
        lines.append(f"| `{f.name}` | [{f.shift + f.width - 1}:{f.shift}] | {f.width} |")
    lines += ["", "## Formats", "", "| Format | Fields |", "|---|---|"]
    for name, fields in FORMATS.items():
        lines.append(f"| {name} | {', '.join(fields) or 'opcode only'} |")
    lines += ["", "## Operand kinds", "", "| Kind | Meaning |", "|---|---|"]
    for k, v in OPERAND_KINDS.items():
        lines.append(f"| `{k}` | {v} |")
    lines += [
        "",
        "## Instructions",
        "",
        "| Hex | Mnemonic | Unit | Operands | Accepted forms | Fmt | Fields | Unused mask | Latency | Meaning |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i in INSTRUCTIONS:
        used = ", ".join(f"{o.field}={o.name}" for o in i.operands if o.field) or "-"
        lat = i.latency + (" (0 if rd = 0)" if i.noop_if_rd0 else "")
        lines.append(
            f"| {i.opcode:02X} | `{i.mnemonic}` | {UNITS[i.unit]} | `{_operands(i)}` | {_forms(i)} | "
            f"{i.fmt} | {used} | `0x{i.unused_mask:08X}` | {lat} | {i.summary} |"
        )
    zero_lit = [f"`{i.mnemonic}` ({o.name})" for i in INSTRUCTIONS for o in i.operands if o.zero_literal]
    lines += [
        "",
        "## Upstream-compatibility spelling of gp0",
        "",
        "A number token of value 0 (`0`, `00`, `0x0`, `0_0`) is accepted in place of `gp0` for these operands "
        "and gives the same word (checked exactly like `gp0`, including a rule that forbids gp0); the "
        "disassembly prints `gp0`. No other register operand accepts a bare number.",
        "",
        ", ".join(zero_lit),
    ]
    lines += [
        "",
        "## Opcodes that are not instructions",
        "",
        "Executing one is an IllegalInstruction (IL-OPC); the assembler rejects the upstream names.",
        "",
    ]
    lines.append(", ".join(f"{op:#04x}" + (f" ({n})" if n else "") for op, n in sorted(NOT_INSTRUCTIONS.items())))
    return "\n".join(lines) + "\n"
