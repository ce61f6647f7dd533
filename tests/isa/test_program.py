"""isa.program.Program: compact words and source map, with the public API of a tuple-of-objects program."""

from __future__ import annotations

import numpy as np
import pytest

from isa import Program, SourceLine, assemble, disassemble_word, parse_mem
from isa.encoding import encode
from isa.program import SourceMap, TextTable

TEXT = "; head\nS_ADDI_INT gp1, gp0, 5\n\n  M_MM 0, gp2, gp4 ; tail\r\ns_add_int gp3, gp1, gp1\x85C_BREAK\n"


def test_assembled_program_api():
    prog = assemble(TEXT, "t.asm")
    assert len(prog) == 4 and prog.name == "t.asm"
    assert prog.words.dtype == np.uint32
    expected = [
        encode("S_ADDI_INT", rd=1, rs1=0, imm18=5),
        encode("M_MM", rs1=2, rs2=4),
        encode("S_ADD_INT", rd=3, rs1=1, rs2=1),
        encode("C_BREAK"),
    ]
    assert prog.words.tolist() == expected
    assert prog.words[0] == expected[0] and int(prog.words[1]) == expected[1]
    assert [s.line for s in prog.source] == [2, 4, 5, 6]
    assert prog.source[1] == SourceLine("t.asm", 4, "  M_MM 0, gp2, gp4 ; tail")
    assert prog.source[-1] == SourceLine("t.asm", 6, "C_BREAK")
    assert prog.source[1:3] == (prog.source[1], prog.source[2])
    assert prog.source[2].where() == "t.asm:5"
    assert prog.source.file == "t.asm" and prog.source.line(2) == 5 and prog.source.text(2) == "s_add_int gp3, gp1, gp1"
    assert prog.location(1) == "t.asm:4: M_MM 0, gp2, gp4 ; tail"
    assert prog.location(4) == "t.asm: pc 4 (past the end)"
    with pytest.raises(IndexError):
        prog.source[4]


def test_arrays_are_read_only_and_array_is_a_copy():
    prog = assemble(TEXT, "t.asm")
    with pytest.raises(ValueError):
        prog.words[0] = 1
    with pytest.raises(ValueError):
        prog.source.lines[0] = 1
    copy = prog.array()
    copy[0] = 1
    assert copy.flags.writeable and prog.words[0] == 0x00014062
    with pytest.raises(AttributeError):
        prog.words = np.zeros(4, np.uint32)  # type: ignore[misc]


def test_constructor_accepts_words_and_source_lines():
    src = (SourceLine("a.asm", 3, "X"), SourceLine("a.asm", 9, "Y ; z"))
    prog = Program((7, 0xFFFFFFFF), src, "a.asm")
    assert prog.words.tolist() == [7, 0xFFFFFFFF] and tuple(prog.source) == src and prog.source == src
    words = np.array([7, 8], dtype=np.uint32)
    prog2 = Program(words, src, "a.asm")
    words[0] = 99  # the program holds its own copy
    assert prog2.words.tolist() == [7, 8]
    with pytest.raises(ValueError, match="differ in length"):
        Program((1,), src, "a.asm")
    with pytest.raises(ValueError, match="32-bit"):
        Program((1, -1), src, "a.asm")
    with pytest.raises(ValueError, match="32-bit"):
        Program((1, 1 << 32), src, "a.asm")
    with pytest.raises(ValueError, match="one file"):
        Program((1, 2), (src[0], SourceLine("b.asm", 1, "Z")), "a.asm")
    with pytest.raises(ValueError, match="trusted"):
        Program.trusted(np.zeros(2, np.uint32), SourceMap.from_lines("x", [1, 2], ["a", "b"]), "x")


def test_from_words_disassembles_on_request():
    words = [0x00014062, 0x3F, 0xFFFFFFFF]
    prog = Program.from_words(np.array(words, dtype=np.int64), "w")
    assert prog.words.tolist() == words
    assert list(prog.source) == [SourceLine("w", k + 1, disassemble_word(w)) for k, w in enumerate(words)]
    assert prog.source[1].text == disassemble_word(0x3F)
    assert len(Program.from_words([])) == 0
    with pytest.raises(ValueError, match="32-bit"):
        Program.from_words([-1])


def test_equality_and_hash():
    a, b = assemble(TEXT, "t.asm"), assemble(TEXT, "t.asm")
    assert a == b and hash(a) == hash(b)
    assert a != assemble(TEXT, "u.asm")
    assert a != assemble(TEXT.replace("gp0, 5", "gp0, 6"), "t.asm")
    assert a != assemble(TEXT.replace("; tail", "; other"), "t.asm")  # same words, other text
    assert a != assemble("\n" + TEXT, "t.asm")  # same words and texts, other lines
    same_words = Program.from_words(a.words, "t.asm")
    assert same_words != a and same_words == Program.from_words(a.words.tolist(), "t.asm")


def test_text_table_keeps_texts_with_newlines():
    texts = ["a", "", "b\nc", "d"]
    table = TextTable(texts)
    assert [table[k] for k in range(4)] == texts and table.all() == texts and table[-2] == "b\nc"
    assert TextTable([]).all() == [] and TextTable([""]).all() == [""]


def test_mem_program_source_map():
    prog = parse_mem("0x00014062 0x3F\n\n0xFFFFFFFF\n", "p.mem")
    assert prog.source.lines.tolist() == [1, 1, 3]
    assert prog.source[1].text == f"{disassemble_word(0x3F)}   (word 0x0000003F)"
