"""The assembler's fast path (precompiled operand plans, isa.plans) gives exactly the full parser's result.

``line_word`` encodes common lines from their tokens and hands everything else to ``_assemble_line``; for
any line both must give the same word, or the same located error (column, token, reason). The spelled
texts (``TEMPLATES``) must print a word as the operands were written.
"""

from __future__ import annotations

import random

import pytest

from isa.assembler import _assemble_line, _LineError, line_word, strip_comment
from isa.encoding import encode
from isa.plans import PLANS, TEMPLATES, encode_operands, spell
from isa.table import BY_MNEMONIC, FIELDS, INSTRUCTIONS, REGISTER_COUNT

_TOKENS = [
    *(f"gp{n}" for n in range(18)),
    *(f"f{n}" for n in range(9)),
    *(f"a{n}" for n in range(9)),
    "GP3", "Gp2", "F1", "A7", "gp01", "gp", "0", "00", "007", "1", "15", "16", "262143", "262144", "4194303",
    "4194304", "0x10", "0X1_0", "1_000", "-1", "+2", "", " ", "x", "gp1 gp2", "\t5", "٣", "１", "9" * 45,
]  # fmt: skip


def full_parse(line: str):
    try:
        return "ok", _assemble_line(strip_comment(line))
    except _LineError as e:
        return "error", (e.column, e.token, e.reason)


def fast_parse(line: str):
    try:
        return "ok", line_word(line)
    except _LineError as e:
        return "error", (e.column, e.token, e.reason)


def random_line(r: random.Random) -> str:
    instr = r.choice(INSTRUCTIONS)
    mnemonic = instr.mnemonic if r.random() < 0.9 else r.choice([instr.mnemonic.lower(), "NOPE", "#x"])
    form = r.choice(instr.forms())
    ops = []
    for op in form:
        if r.random() < 0.25:
            ops.append(r.choice(_TOKENS))
        elif op.kind in REGISTER_COUNT:
            ops.append(f"{op.kind}{r.randrange(REGISTER_COUNT[op.kind])}")
        elif op.kind == "zero":
            ops.append(r.choice(["0", "gp0"]))
        else:
            hi = op.max_value if op.max_value is not None else FIELDS[op.field].max if op.field else 0
            ops.append(str(r.choice([0, hi, r.randrange(hi + 1)])))
    if r.random() < 0.05:
        ops = ops[:-1] if ops else ["gp1"]
    sep = r.choice([", ", ",", " ,  ", ",\t"])
    lead = r.choice(["", "", "  ", "\t"])
    tail = r.choice(["", "", " ; c", " // c", "   "])
    return lead + mnemonic + (r.choice([" ", "\t", "  "]) + sep.join(ops) if ops else "") + tail


def test_fast_path_equals_full_parser():
    r = random.Random(7)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(30000):
        line = random_line(r)
        want = full_parse(line)
        assert fast_parse(line) == want, repr(line)
        outcomes[want[0]] += 1
    assert min(outcomes.values()) > 5000


def test_blank_and_comment_lines():
    for line in ["", "   ", "; x", "// y", "\t; S_ADDI_INT gp1, gp0, 1"]:
        assert line_word(line) is None


@pytest.mark.parametrize("key", sorted(PLANS), ids=lambda k: f"{k[0]}/{k[1]}")
def test_every_plan_encodes_and_spells_as_the_table(key):
    """Each plan with its largest valid register and number operands: the table's encoder gives the same
    word, and every spelling (int or str for two-way operands) reads back as written."""
    mnemonic, count = key
    plan = PLANS[key]
    form = next(f for f in BY_MNEMONIC[mnemonic].forms() if len(f) == count)
    ops: list[object] = []
    fields: dict[str, int] = {}
    for op in form:
        if op.kind in REGISTER_COUNT:
            n = REGISTER_COUNT[op.kind] - 1
            ops.append(f"{op.kind}{n}")
        elif op.kind == "zero":
            ops.append("gp0")
            n = 0
        else:
            n = op.max_value if op.max_value is not None else FIELDS[op.field].max
            ops.append(n)
        if op.field is not None:
            fields[op.field] = n
    encoded = encode_operands(plan.encoder, ops)
    assert encoded is not None
    word, recipe = encoded
    assert word == encode(mnemonic, **fields)
    assert spell(word, recipe) == mnemonic + (" " + ", ".join(str(o) for o in ops) if ops else "")
    n_ways = sum(1 for c in plan.codes if c.int_bit)
    assert all(TEMPLATES[plan.recipe + k][0].startswith(mnemonic) for k in range(1 << n_ways))
