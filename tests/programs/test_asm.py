"""programs.asm.Asm: encoding straight from operands behaves exactly as formatting + assembling each line.

The reference below is the former ``Asm.emit``: it formats the line (upper-case mnemonic, ``str`` of ints,
lower-cased strings, ``", "`` separators), applies the kernels.md §1.2 generator rules and runs the line
through the full assembler. Every emission -- valid or not, canonical or oddly spelled -- must give the same
line text and word, or the same ValueError message.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from isa import assemble
from isa.assembler import _assemble_line, _LineError, strip_comment
from isa.table import BY_MNEMONIC, FIELDS, INSTRUCTIONS, REGISTER_COUNT, Operand
from programs.asm import LUI_LIMIT, Asm, areg, fp, gp, load_imm

_INT_DEST = {i.mnemonic for i in INSTRUCTIONS if any(o.kind == "gp" and o.name in i.writes for o in i.operands)}
_FP_DEST = {i.mnemonic for i in INSTRUCTIONS if any(o.kind == "f" and o.name in i.writes for o in i.operands)}


def reference_line(mnemonic: str, operands: tuple[object, ...]) -> tuple[str, int]:
    """(line, word) of the former Asm.emit, or its ValueError (whose text the builder now follows with the
    generator being emitted: ``[generator ?]`` outside every ``begin``)."""
    try:
        return _reference_line(mnemonic, operands)
    except ValueError as exc:
        raise ValueError(f"{exc} [generator ?]") from None


def _reference_line(mnemonic: str, operands: tuple[object, ...]) -> tuple[str, int]:
    mnemonic = mnemonic.upper()
    if mnemonic not in BY_MNEMONIC:
        raise ValueError(f"Asm: unknown mnemonic {mnemonic!r}")
    ops = []
    for o in operands:
        if isinstance(o, bool):
            raise ValueError(f"Asm: {mnemonic}: boolean operand {o!r}")
        if isinstance(o, int):
            if o < 0:
                raise ValueError(f"Asm: {mnemonic}: negative immediate {o}")
            ops.append(str(o))
        elif isinstance(o, str):
            ops.append(o.lower())
        else:
            raise ValueError(f"Asm: {mnemonic}: operand {o!r} is neither a register nor an int")
    line = mnemonic + (" " + ", ".join(ops) if ops else "")
    if mnemonic in _INT_DEST and ops and ops[0] == "gp0":
        raise ValueError(f"Asm: {line}: an integer instruction must not write gp0")
    if mnemonic in _FP_DEST and ops and ops[0] == "f0":
        raise ValueError(f"Asm: {line}: an fp instruction must not write f0")
    if mnemonic == "S_LUI_INT" and len(ops) == 2 and ops[1].isdigit() and int(ops[1]) >= LUI_LIMIT:
        raise ValueError(f"Asm: {line}: S_LUI_INT immediate must be < 2^20 (upper bits are lost)")
    try:
        word = _assemble_line(strip_comment(line))
    except _LineError as exc:
        raise ValueError(f"Asm: {line}: {exc.reason}") from None
    assert word is not None
    return line, word


def outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except ValueError as exc:
        return "error", str(exc)


_REGS = [f"gp{n}" for n in range(18)] + [f"f{n}" for n in range(10)] + [f"a{n}" for n in range(10)]
_ODD_STRINGS = ["GP3", "F1", "A2", "gp01", "0", "00", "5", "0x10", "1_0", "x", "", " gp1", "gp1 ", "-1", "gp"]
_INTS = [0, 1, 2, 3, 7, 15, 16, 255, 262143, 262144, LUI_LIMIT - 1, LUI_LIMIT, 4194303, 4194304, 1 << 40]


def random_operand(r: random.Random) -> object:
    roll = r.random()
    if roll < 0.45:
        return r.choice(_REGS)
    if roll < 0.85:
        return r.choice(_INTS) if r.random() < 0.5 else r.randrange(0, 64)
    return r.choice([*_ODD_STRINGS, -1, -7, True, False, 1.0, None, np.int64(3), [1], {}])


def form_operand(op: Operand, r: random.Random) -> object:
    """A mostly valid operand for ``op`` (edge values included)."""
    if op.kind in REGISTER_COUNT:
        if op.zero_literal and r.random() < 0.15:
            return 0
        return f"{op.kind}{r.randrange(0, REGISTER_COUNT[op.kind] + 1)}"
    if op.kind == "zero":
        return r.choice([0, "gp0", 0, 1])
    hi = op.max_value if op.max_value is not None else (FIELDS[op.field].max if op.field else 0)
    return r.choice([0, 1, hi, hi + 1, r.randrange(0, hi + 1), LUI_LIMIT - 1, LUI_LIMIT])


def random_emission(r: random.Random) -> tuple[str, tuple[object, ...]]:
    instr = r.choice(INSTRUCTIONS)
    form = r.choice(instr.forms())
    mnemonic = instr.mnemonic if r.random() < 0.95 else r.choice([instr.mnemonic.lower(), "S_NOPE", "C_SET_ADDR"])
    if r.random() < 0.6:
        return mnemonic, tuple(form_operand(op, r) if r.random() < 0.97 else random_operand(r) for op in form)
    n = len(form) if r.random() < 0.9 else r.randrange(0, 7)
    return mnemonic, tuple(random_operand(r) for _ in range(n))


def test_emit_matches_the_former_formatting_and_validation():
    r = random.Random(1234)
    asm = Asm()
    expected_lines: list[str] = []
    expected_words: list[int] = []
    n_ok = n_err = 0
    for k in range(20000):
        mnemonic, ops = random_emission(r)
        want = outcome(reference_line, mnemonic, ops)
        if r.random() < 0.5 and mnemonic in BY_MNEMONIC:
            got = outcome(getattr(asm, mnemonic), *ops)
        else:
            got = outcome(asm.emit, mnemonic, *ops)
        if want[0] == "error":
            assert got == want, (mnemonic, ops)
            n_err += 1
            continue
        assert got == ("ok", None), (mnemonic, ops, got)
        n_ok += 1
        expected_lines.append(want[1][0])
        expected_words.append(want[1][1])
        if k % 97 == 0:
            text = f"note {k}\nsecond line" if k % 2 else f"  note {k}  "
            asm.comment(text)
            expected_lines.extend(f"; {p}".rstrip() for p in text.splitlines())
    assert n_ok > 3000 and n_err > 3000  # both outcomes exercised
    assert asm.lines() == expected_lines
    assert asm.text() == "\n".join(expected_lines) + "\n" == str(asm)
    assert asm.n_instructions == len(expected_words)
    prog = asm.program("fuzz.asm")
    assert prog.words.tolist() == expected_words
    assert_same_program(prog, assemble(asm.text(), "fuzz.asm"))


def test_varied_program_text_is_byte_identical_to_the_former_formatting():
    asm = Asm()
    steps = [
        ("comment", "kernel\nsecond line\n"),
        ("S_ADDI_INT", (gp(1), gp(0), 262143)),
        ("S_LUI_INT", (gp(2), LUI_LIMIT - 1)),
        ("S_ADD_INT", ("GP3", gp(1), gp(2))),  # upper-case register: lower-cased in the text
        ("s_sub_int", (gp(4), gp(3), gp(1))),  # lower-case mnemonic
        ("M_MM", (0, gp(2), gp(4))),
        ("M_MM", ("gp0", gp(2), gp(4))),
        ("V_ADD_VV", (gp(5), gp(6), gp(7))),
        ("V_ADD_VV", (gp(5), gp(6), gp(7), 0)),  # optional operand written as 0
        ("V_EXP_V", (0, gp(1), 1)),  # zero-literal destination
        ("H_PREFETCH_V", (gp(1), gp(2), areg(3), 1, 0)),
        ("S_LD_FP", (fp(1), gp(2), 7)),
        ("S_ADDI_INT", (gp(1), gp(0), "0x10")),  # a hex string immediate (full path)
        ("C_LOOP_START", (gp(9), 4194303)),
        ("C_LOOP_END", (gp(9),)),
        ("C_BREAK", ()),
        ("comment", ""),
    ]
    expected = []
    for mnemonic, ops in steps:
        if mnemonic == "comment":
            asm.comment(ops)
            expected.extend(f"; {p}".rstrip() for p in (str(ops).splitlines() or [""]))
            continue
        asm.emit(mnemonic, *ops)
        expected.append(reference_line(mnemonic, ops)[0])
    asm.begin("k", a=1, b="x")
    asm.end("k")
    expected += ["; k begin a=1 b=x", "; k end"]
    assert asm.lines() == expected
    assert asm.text() == "\n".join(expected) + "\n"
    assert_same_program(asm.program("v.asm"), assemble(asm.text(), "v.asm"))


def test_empty_asm():
    asm = Asm()
    assert asm.text() == "" and asm.lines() == [] and asm.n_instructions == 0
    prog = asm.program("e.asm")
    assert len(prog) == 0 and prog.words.dtype == np.uint32
    assert_same_program(prog, assemble("", "e.asm"))
    asm.comment("only a comment")
    assert asm.text() == "; only a comment\n"
    assert len(asm.program("e.asm")) == 0


def test_operand_with_a_line_break_is_refused():
    with pytest.raises(ValueError, match="an instruction must be one line"):
        Asm().S_ADDI_INT("gp1\n", gp(0), 5)


def test_program_is_a_snapshot():
    asm = Asm()
    asm.S_ADDI_INT(gp(1), gp(0), 5)
    prog = asm.program("s.asm")
    asm.S_ADDI_INT(gp(2), gp(0), 6)
    assert len(prog) == 1 and prog.source[0].text == "S_ADDI_INT gp1, gp0, 5"
    assert not prog.words.flags.writeable


def assert_same_program(prog, ref) -> None:
    """Equal words and every source entry (file, line, text), plus Program equality."""
    assert prog.name == ref.name
    assert prog.words.tolist() == ref.words.tolist()
    assert len(prog.source) == len(ref.source)
    assert prog.source.lines.tolist() == ref.source.lines.tolist()
    assert prog.source.texts() == ref.source.texts()
    for k in range(0, len(ref), max(1, len(ref) // 500)):  # one by one, as faults ask for them
        assert prog.source[k] == ref.source[k]
        assert prog.location(k) == ref.location(k)
    assert prog == ref


#: real generator outputs: (testbench, params)
_CASES = [
    ("linear", {}),
    ("linear_loop", {}),
    ("softmax", {}),
    ("rms_norm", {}),
    ("layer_norm", {}),
    ("rope", {}),
    ("moe_topk", {}),
    ("moe_layer", {}),
    ("embedding", {}),
    ("flashattn_decode", {}),
    ("ffn", {}),
    ("loop", {}),
]


@pytest.mark.parametrize(("testbench", "params"), _CASES, ids=[c[0] for c in _CASES])
def test_program_equals_assembled_text_for_generator_outputs(testbench, params, monkeypatch):
    from testbenches import get
    from testbenches.harness import CaseBuilder
    from testbenches.variants import get_config

    built: list[Asm] = []
    original = CaseBuilder.case

    def capture(self, program, **extra):
        if isinstance(program, Asm):
            built.append(program)
        return original(self, program, **extra)

    monkeypatch.setattr(CaseBuilder, "case", capture)
    mod = get(testbench)
    case = mod.build(dict(params), get_config("default"))
    assert built, f"{testbench}: no Asm passed to CaseBuilder.case"
    matching = [a for a in built if a.text() == case.program]  # a testbench may build more than one
    assert matching, f"{testbench}: the case's program is no captured Asm's text"
    asm = matching[-1]
    name = f"{testbench}.asm"
    assert_same_program(asm.program(name), assemble(case.program, name))


def test_remembered_instructions_do_not_accept_equal_values_of_other_types():
    asm = Asm()
    asm.S_ADDI_INT(gp(1), gp(0), 1)
    asm.V_ADD_VV(gp(1), gp(2), gp(3), 0)
    for ops, message in [
        ((gp(1), gp(0), True), "boolean operand True"),
        ((gp(1), gp(0), 1.0), r"operand 1\.0 is neither a register nor an int"),
        ((gp(1), gp(0), np.int64(1)), r"operand np.int64\(1\) is neither a register nor an int"),
    ]:
        with pytest.raises(ValueError, match=message):
            asm.S_ADDI_INT(*ops)
    with pytest.raises(ValueError, match=r"operand \[1\] is neither a register nor an int"):
        asm.S_ADDI_INT(gp(1), gp(0), [1])
    with pytest.raises(ValueError, match="boolean operand False"):
        asm.emit("V_ADD_VV", gp(1), gp(2), gp(3), False)
    asm.S_ADDI_INT(gp(1), gp(0), 1)
    assert asm.lines() == ["S_ADDI_INT gp1, gp0, 1", "V_ADD_VV gp1, gp2, gp3, 0", "S_ADDI_INT gp1, gp0, 1"]


def test_an_invalid_instruction_is_a_generator_error_naming_the_kernel_and_the_value():
    from programs.asm import GeneratorError

    asm = Asm()
    asm.begin("toy_kernel", n=3)
    with pytest.raises(GeneratorError) as info:
        asm.C_LOOP_START(gp(1), 0)  # a loop count outside 1..2^22-1
    err = info.value
    assert isinstance(err, ValueError) and err.generator == "toy_kernel" and err.value == "C_LOOP_START gp1, 0"
    assert str(err).startswith("Asm: C_LOOP_START gp1, 0: ") and str(err).endswith("[generator toy_kernel]")
    asm.begin("inner")
    with pytest.raises(GeneratorError, match=r"\[generator inner\]") as info:
        asm.S_ADDI_INT(gp(1), gp(0), 1 << 18)  # an immediate past imm18
    assert info.value.value == "S_ADDI_INT gp1, gp0, 262144"
    asm.end("inner")
    with pytest.raises(GeneratorError) as info:
        load_imm(asm, 2, 1 << 32)  # an address past 2^32
    assert (info.value.generator, info.value.value) == ("toy_kernel", 1 << 32)
    asm.end("toy_kernel")
    with pytest.raises(GeneratorError) as info:
        asm.S_ADDI_INT(gp(0), gp(1), 1)
    assert info.value.generator == "?" and "must not write gp0" in info.value.detail
