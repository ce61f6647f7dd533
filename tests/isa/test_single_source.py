"""Opcode numbers and field shifts are written in exactly one module: isa/table.py."""

import re
from pathlib import Path

from isa.docs import opcode_markdown
from isa.table import INSTRUCTIONS

OPCODES = {i.mnemonic: i.opcode for i in INSTRUCTIONS}

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("isa", "plena_sim", "programs", "testbenches", "plena_cli", "tests/util")

# shifts/masks by a field position, e.g. "<< 14", ">> 6", "& 0x3F", "& 63"
FIELD_SHIFT = re.compile(r"(<<|>>)\s*(6|10|14|18|22)\b|&\s*(0x3[fF]|63)\b")
# a mnemonic bound to ITS opcode number: "M_MM": 0x01, OP_M_MM = 1, 'V_TOPK' : 55 (other numbers, e.g. a
# per-opcode loop count, are not opcode numbers)
OPCODE_BIND = re.compile(
    r"[\"']?\b(?:OP_)?(" + "|".join(i.mnemonic for i in INSTRUCTIONS) + r")\b[\"']?\s*[:=]\s*(0x[0-9a-fA-F]+|\d+)"
)


def _sources():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_opcode_numbers_and_field_shifts_only_in_table():
    offenders = []
    for p in _sources():
        if p == ROOT / "isa" / "table.py":
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            binds = [m for m in OPCODE_BIND.finditer(code) if int(m.group(2), 0) == OPCODES[m.group(1)]]
            if FIELD_SHIFT.search(code) or binds:
                offenders.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "opcode numbers / field shifts outside isa/table.py:\n" + "\n".join(offenders)


def test_table_itself_defines_them():
    text = (ROOT / "isa" / "table.py").read_text()
    assert 'Field("rs2", 14, 4)' in text and '"V_TOPK", 0x37' in text


def test_generated_markdown_reference_is_up_to_date():
    doc = ROOT / "docs" / "isa_reference.md"
    assert doc.read_text() == opcode_markdown(), "regenerate with: plena-sim isa --markdown > docs/isa_reference.md"


OPCODE_COMPARE = re.compile(r"[=!]=\s*_?OP_[A-Z_]+|\bin\s*\(\s*_?OP_")


def test_core_dispatches_on_families_not_opcodes():
    """The simulator compares opcode numbers by hand at most a few times (the table's family and operation
    codes drive dispatch, checks and resources); the limit of the architecture issue is 40."""
    hits = []
    for p in sorted((ROOT / "plena_sim").rglob("*.py")):
        for n, line in enumerate(p.read_text().splitlines(), 1):
            hits += [f"{p.relative_to(ROOT)}:{n}" for _ in OPCODE_COMPARE.finditer(line.split("#", 1)[0])]
    assert len(hits) <= 40, hits
    assert not [h for h in hits if h.startswith(("plena_sim/core/", "plena_sim/timing/scoreboard.py"))], hits
