"""Fuzz: random and mutated assembly text.

Contract: :func:`isa.assemble` returns a Program or raises :class:`isa.AssemblerError` -- nothing else --
and every diagnostic carries a line number inside the text (1-based, the line's own text attached), a
column >= 1 and a reason. Text that assembles round-trips: assembling the disassembly of its words gives
the same words. Unmutated canonical text always assembles to the words it came from.

Default CI size: 1500 seeded mutants + 400 hypothesis mutants + 300 hypothesis random texts + 100
random files (``PLENA_FUZZ_SCALE`` multiplies).
"""

from __future__ import annotations

import random

import pytest
from fuzzlib import BASE_SEED, count, hyp_settings
from hypothesis import given
from hypothesis import strategies as st

from isa import AssemblerError, assemble, assemble_file, disassemble_word
from isa.disasm import illegal_reason
from isa.table import INSTRUCTIONS, NOT_INSTRUCTIONS

pytestmark = pytest.mark.fuzz

_INSTRS = list(INSTRUCTIONS)
_WEIRD = [
    "\u2028",
    "\x00",
    "é",
    "１",
    "\t",
    "\x0b",
    "\x0c",
    "\ufeff",
    "😀",
    "\u0301",
    "\r",
    "\x85",
    "ß",
    "\u200b",
    "Ⅻ",
    "٣",
    "\\",
    '"',
    "#",
    ":",
    "$",
    "%",
]
_NUMBERS = [
    "9" * 5000,
    "0x" + "f" * 300,
    "-5",
    "+3",
    "1e5",
    "0x",
    "_",
    "0b101",
    "1.5",
    "262144",
    "4194304",
    "0x3FFFF",
    "0x_1",
    "00000000000000000000000000000000000000000001",
    "١٢",
    "inf",
    "18446744073709551616",
    "0X40000",
    "262_143",
]


def canonical_line(r: random.Random) -> tuple[str, int]:
    """A canonical assembly line and its word (random legal fields)."""
    while True:
        instr = r.choice(_INSTRS)
        word = instr.opcode | (r.randrange(1 << 26) << 6)
        word &= ~instr.unused_mask & 0xFFFFFFFF
        if illegal_reason(instr, word) is None:
            return disassemble_word(word), word


def _tokens(line: str) -> list[tuple[int, int]]:
    """(start, end) spans of the operand/mnemonic tokens of ``line``."""
    spans, i = [], 0
    while i < len(line):
        if line[i] in " ,\t":
            i += 1
            continue
        j = i
        while j < len(line) and line[j] not in " ,\t":
            j += 1
        spans.append((i, j))
        i = j
    return spans


def mutate(r: random.Random, lines: list[str]) -> None:
    """Apply one random damage to ``lines`` in place."""
    if not lines:
        lines.append("")
    k = r.randrange(len(lines))
    line = lines[k]
    spans = _tokens(line)
    what = r.randrange(14)
    if what == 0:  # truncate
        lines[k] = line[: r.randrange(len(line) + 1)]
    elif what == 1:  # insert a strange character
        p = r.randrange(len(line) + 1)
        lines[k] = line[:p] + r.choice(_WEIRD) + line[p:]
    elif what == 2 and spans:  # replace a token with a strange number
        a, b = r.choice(spans)
        lines[k] = line[:a] + r.choice(_NUMBERS) + line[b:]
    elif what == 3:  # drop commas
        lines[k] = line.replace(",", "", 1 if r.randrange(2) else -1)
    elif what == 4 and spans:  # wrong register kind / index
        a, b = r.choice(spans)
        tok = line[a:b]
        new = r.choice(
            [
                "f" + tok[2:] if tok.startswith("gp") else "gp" + tok.lstrip("fa"),
                "a" + tok.lstrip("gpfa"),
                "gp16",
                "f8",
                "a9",
                "gp01",
                "GP3",
                "x1",
                "gp",
                "f-1",
                "gp99999999999999999999999999999999999999999999999999999999",
            ]
        )
        lines[k] = line[:a] + new + line[b:]
    elif what == 5:  # duplicate / delete / swap lines
        j = r.randrange(len(lines))
        op = r.randrange(3)
        if op == 0:
            lines.insert(j, line)
        elif op == 1:
            del lines[k]
        else:
            lines[k], lines[j] = lines[j], lines[k]
    elif what == 6:  # stray commas / empty operands
        lines[k] = line + r.choice([",", ", ,", ",,0", " , "])
    elif what == 7:  # case
        lines[k] = line.lower() if r.randrange(2) else line.swapcase()
    elif what == 8:  # ascii garbage
        p = r.randrange(len(line) + 1)
        junk = "".join(chr(r.randrange(32, 127)) for _ in range(r.randrange(1, 6)))
        lines[k] = line[:p] + junk + line[p:]
    elif what == 9 and spans:  # mnemonic -> something else
        a, b = spans[0]
        name = r.choice(
            ["V_PS_V", "C_HADAMARD_TRANSFORM", "NOP", ".word", "label:", "S_ADDI", "M_MM_", r.choice(_INSTRS).mnemonic]
        )
        lines[k] = name + line[b:]
    elif what == 10 and len(lines) > 1 and k + 1 < len(lines):  # join two lines
        lines[k] = line + r.choice(["", " ", "; "]) + lines.pop(k + 1)
    elif what == 11:  # comments in odd places
        p = r.randrange(len(line) + 1)
        lines[k] = line[:p] + r.choice(["; c", "//c", "/* x */", "#x", ";", "//"]) + line[p:]
    elif what == 12 and spans:  # delete or repeat an operand
        a, b = r.choice(spans[1:] or spans)
        lines[k] = line[:a] + (line[a:b] + ", " + line[a:b] if r.randrange(2) else "") + line[b:]
    else:  # whitespace
        lines[k] = r.choice(["  ", "\t", ""]) + line.replace(" ", r.choice(["\t", "   ", "\u3000"]))


def check_text(text: str, label: str, expect_words: list[int] | None = None):
    try:
        prog = assemble(text, "fuzz.asm")
    except AssemblerError as exc:
        assert expect_words is None, f"{label}: canonical text failed to assemble: {exc}"
        n_lines = len(text.splitlines())
        assert exc.diagnostics
        for d in exc.diagnostics:
            assert 1 <= d.line <= n_lines, (label, d.line, n_lines, repr(text[:200]))
            assert d.line_text == text.splitlines()[d.line - 1], label
            assert d.column >= 1 and d.reason, (label, d)
            assert d.file == "fuzz.asm"
            assert f"fuzz.asm:{d.line}:" in str(d)
        assert exc.line_no == exc.diagnostics[0].line
        assert len(str(exc)) < 2000 * len(exc.diagnostics), f"{label}: oversized message"
        return None
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{label}: assemble raised {type(exc).__name__}: {exc}; text={text[:300]!r}") from exc
    words = list(prog.words)
    if expect_words is not None:
        assert words == expect_words, label
    again = assemble("\n".join(disassemble_word(w) for w in words), "again.asm")
    assert list(again.words) == words, f"{label}: round trip changed the words; text={text[:300]!r}"
    return prog


def gen_text(r: random.Random) -> tuple[str, list[int] | None]:
    pairs = [canonical_line(r) for _ in range(r.randrange(1, 15))]
    lines = [p[0] for p in pairs]
    n_mut = r.choice((0, 1, 1, 2, 3, 5))
    for _ in range(n_mut):
        mutate(r, lines)
    sep = r.choice(["\n", "\n", "\r\n", "\r"]) if n_mut else "\n"
    return sep.join(lines) + r.choice(["", "\n"]), ([p[1] for p in pairs] if n_mut == 0 else None)


def test_fuzz_asm_mutants_seeded():
    failures = 0
    for seed in range(BASE_SEED, BASE_SEED + count(1500)):
        r = random.Random(seed)
        text, words = gen_text(r)
        if check_text(text, f"seed {seed}", words) is None:
            failures += 1
    assert failures > count(1500) // 4  # most mutants must actually be broken


@hyp_settings(400)
@given(r=st.randoms(use_true_random=False))
def test_fuzz_asm_mutants_hypothesis(r):
    text, words = gen_text(r)
    check_text(text, "hypothesis", words)


_PIECES = st.sampled_from(
    list("gpfa0123456789xX_, \t;/\n") + _WEIRD + _NUMBERS[1:] + [i.mnemonic + " " for i in _INSTRS]
)


@hyp_settings(300)
@given(text=st.one_of(st.text(max_size=300), st.lists(_PIECES, max_size=60).map("".join)))
def test_fuzz_asm_random_text(text):
    check_text(text, "random text")


def test_fuzz_asm_files(tmp_path):
    """Random bytes as an assembly file: AssemblerError with the line of the first bad byte."""
    for seed in range(BASE_SEED, BASE_SEED + count(100)):
        r = random.Random(seed)
        good = "\n".join(canonical_line(r)[0] for _ in range(r.randrange(1, 6))).encode()
        junk = bytes(r.randrange(256) for _ in range(r.randrange(1, 40)))
        p = tmp_path / f"f{seed}.asm"
        p.write_bytes(good + b"\n" + junk if r.randrange(2) else junk)
        try:
            assemble_file(p)
        except AssemblerError as exc:
            d = exc.diagnostics[0]
            assert d.line >= 1 and str(p) in str(exc), (seed, str(exc))
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"seed {seed}: assemble_file raised {type(exc).__name__}: {exc}") from exc
    try:
        assemble_file(tmp_path / "missing.asm")
    except AssemblerError as exc:
        assert "cannot read" in str(exc)


def test_huge_numbers_are_range_errors():
    for tok in ("9" * 5000, "0x" + "f" * 5000, "gp" + "1" * 5000):
        with pytest.raises(AssemblerError) as ei:
            assemble(f"S_ADDI_INT gp1, gp2, {tok}" if not tok.startswith("gp") else f"S_ADDI_INT {tok}, gp0, 1")
        assert "out of range" in ei.value.reason and len(str(ei.value)) < 400
    assert NOT_INSTRUCTIONS  # the reserved names are part of the mutation vocabulary
