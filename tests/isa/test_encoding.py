"""Encoding vectors (both ways), round trips over every opcode, and the field layout of isa.md §3."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa import assemble, disassemble_word
from isa.encoding import decode, decode_program, encode
from isa.table import BY_MNEMONIC, FIELDS, INSTRUCTIONS, NOT_INSTRUCTIONS, REGISTER_COUNT


def test_every_vector_assembles_to_its_word(encoding_vectors):
    assert len(encoding_vectors) >= 80
    for v in encoding_vectors:
        prog = assemble(v["asm"])
        assert len(prog) == 1, v
        assert prog.words[0] == int(v["word"], 16), (v["asm"], hex(prog.words[0]), v["word"])


def test_every_vector_disassembles_to_canonical_text_that_reassembles(encoding_vectors):
    for v in encoding_vectors:
        word = int(v["word"], 16)
        text = disassemble_word(word)
        assert assemble(text).words.tolist() == [word], (v["asm"], text)
        assert not text.startswith(".word"), text
        # canonical form: upper-case mnemonic, lower-case registers, decimal, ", " separators, no comment
        assert ";" not in text and "0x" not in text
        assert re.fullmatch(r"[A-Z_]+( [a-z0-9]+(, [a-z0-9]+)*)?", text), text


# The canonical text of selected vectors, written out by hand from isa.md §2 (optional zero operands and
# compat operands dropped, hex printed decimal).
CANONICAL = {
    "0x0000950E": "V_ADD_VF gp4, gp5, f2",
    "0x00400490": "V_SUB_VF gp2, gp1, f0, 0, 1",
    "0x000550D0": "V_SUB_VF gp3, gp4, f5, 1",
    "0x00000493": "V_EXP_V gp2, gp1",
    "0x00040493": "V_EXP_V gp2, gp1, 1",
    "0x000408D5": "V_RED_SUM f3, gp2, 1",
    "0x0000045B": "S_EXP_FP f1, f1",
    "0x00200062": "S_ADDI_INT gp1, gp0, 128",
    "0xFFFFFFEF": "C_LOOP_START gp15, 4194303",
    "0x00000130": "C_LOOP_END gp4",
    "0x00000034": "C_BREAK",
    "0x0004004B": "M_MV_WO gp1, 16",
    "0x000008E9": "H_PREFETCH_V gp3, gp2, a0, 0, 0",
    "0x00007C01": "M_MM 0, gp15, gp1",
    "0x00000046": "M_MM_WO gp1, gp0, 0",
}


@pytest.mark.parametrize("word,text", sorted(CANONICAL.items()))
def test_canonical_text_written_out(word, text):
    assert disassemble_word(int(word, 16)) == text


def test_upstream_encoding_bugs_not_reproduced():
    # isa.md §9.1: mask at rs3 (bit 18), not rs2; WO immediates at bit 14, not bit 10
    assert assemble("V_EXP_V gp2, gp1, 1").words.tolist() == [0x00040493]
    assert assemble("V_RECI_V gp3, gp4, 1").words.tolist() == [0x000410D4]
    assert assemble("V_RED_MAX f1, gp2, 1").words.tolist() == [0x00040856]
    assert assemble("V_RED_SUM f3, gp2, 1").words.tolist() == [0x000408D5]
    assert assemble("M_MV_WO gp1, 16").words.tolist() == [0x0004004B]
    assert assemble("M_BMM_WO gp1, 64").words.tolist() == [0x00100045]
    assert assemble("M_BMV_WO gp2, 128").words.tolist() == [0x0020008C]


def test_field_layout_matches_spec():
    expected = {
        "opcode": (0, 6),
        "rd": (6, 4),
        "rs1": (10, 4),
        "rs2": (14, 4),
        "rs3": (18, 4),
        "funct1": (22, 4),
        "imm18": (14, 18),
        "imm22": (10, 22),
    }
    assert {k: (f.shift, f.width) for k, f in FIELDS.items()} == expected


def test_opcode_numbers_match_spec_table():
    # isa.md §4, written out
    spec = dict(
        M_MM=0x01,
        M_TMM=0x02,
        M_BMM=0x03,
        M_BTMM=0x04,
        M_BMM_WO=0x05,
        M_MM_WO=0x06,
        M_MV=0x07,
        M_TMV=0x08,
        M_BMV=0x09,
        M_BTMV=0x0A,
        M_MV_WO=0x0B,
        M_BMV_WO=0x0C,
        V_ADD_VV=0x0D,
        V_ADD_VF=0x0E,
        V_SUB_VV=0x0F,
        V_SUB_VF=0x10,
        V_MUL_VV=0x11,
        V_MUL_VF=0x12,
        V_EXP_V=0x13,
        V_RECI_V=0x14,
        V_RED_SUM=0x15,
        V_RED_MAX=0x16,
        S_ADD_FP=0x17,
        S_SUB_FP=0x18,
        S_MAX_FP=0x19,
        S_MUL_FP=0x1A,
        S_EXP_FP=0x1B,
        S_RECI_FP=0x1C,
        S_SQRT_FP=0x1D,
        S_LD_FP=0x1E,
        S_ST_FP=0x1F,
        S_MAP_V_FP=0x20,
        S_ADD_INT=0x21,
        S_ADDI_INT=0x22,
        S_SUB_INT=0x23,
        S_MUL_INT=0x24,
        S_LUI_INT=0x25,
        S_LD_INT=0x26,
        S_ST_INT=0x27,
        H_PREFETCH_M=0x28,
        H_PREFETCH_V=0x29,
        H_STORE_V=0x2A,
        C_SET_ADDR_REG=0x2B,
        C_SET_SCALE_REG=0x2C,
        C_SET_STRIDE_REG=0x2D,
        C_SET_V_MASK_REG=0x2E,
        C_LOOP_START=0x2F,
        C_LOOP_END=0x30,
        V_SHFT_V=0x32,
        C_BREAK=0x34,
        V_MAX_VF=0x35,
        V_MIN_VF=0x36,
        V_TOPK=0x37,
    )
    assert {i.mnemonic: i.opcode for i in INSTRUCTIONS} == spec
    assert sorted(NOT_INSTRUCTIONS) == [0x00, 0x31, 0x33] + list(range(0x38, 0x40))


# ------------------------------------------------------------------ a corpus covering every opcode

CORPUS = """
M_MM 0, gp2, gp4
M_TMM 0, gp3, gp5
M_BMM 0, gp6, gp7
M_BTMM 0, gp1, gp9
M_BMM_WO gp1, 262143
M_MM_WO gp1, gp3, 5
M_MV 0, gp2, gp3
M_TMV 0, gp4, gp5
M_BMV gp1, gp2, gp3
M_BTMV gp4, gp5, gp6
M_MV_WO gp7, 12
M_BMV_WO gp2, 128
V_ADD_VV gp1, gp2, gp3, 15
V_ADD_VF gp4, gp5, f7
V_SUB_VV gp6, gp7, gp8, 1
V_SUB_VF gp3, gp4, f5, 2, 9
V_MUL_VV gp9, gp10, gp11
V_MUL_VF gp12, gp13, f7, 1
V_EXP_V gp2, gp1, 3
V_RECI_V gp3, gp4
V_RED_SUM f3, gp2, 1
V_RED_MAX f1, gp2
S_ADD_FP f1, f0, f0
S_SUB_FP f2, f3, f4
S_MAX_FP f5, f6, f7
S_MUL_FP f7, f1, f2
S_EXP_FP f1, f2
S_RECI_FP f3, f4
S_SQRT_FP f5, f6
S_LD_FP f1, gp0, 1
S_ST_FP f2, gp3, 1023
S_MAP_V_FP gp1, gp2, 7
S_ADD_INT gp1, gp2, gp3
S_ADDI_INT gp15, gp14, 262143
S_SUB_INT gp4, gp5, gp6
S_MUL_INT gp7, gp8, gp9
S_LUI_INT gp1, 4194303
S_LD_INT gp3, gp4, 10
S_ST_INT gp1, gp2, 3
H_PREFETCH_M gp2, gp3, a1, 1, 0
H_PREFETCH_V gp3, gp2, a0, 15, 15
H_STORE_V gp5, gp6, a7, 0, 3
C_SET_ADDR_REG a7, gp14, gp15
C_SET_SCALE_REG gp1
C_SET_STRIDE_REG gp4
C_SET_V_MASK_REG gp5
C_LOOP_START gp4, 8
C_LOOP_END gp4
V_SHFT_V gp1, gp2, gp3
C_BREAK
V_MAX_VF gp1, gp2, f3
V_MIN_VF gp4, gp5, f6, 1
V_TOPK gp1, gp2, gp3, 1
"""


def test_corpus_covers_every_opcode_and_roundtrips_exactly():
    prog = assemble(CORPUS, "corpus.asm")
    seen = {decode(w)["opcode"] for w in prog.words}
    assert seen == {i.opcode for i in INSTRUCTIONS}
    text = "\n".join(disassemble_word(w) for w in prog.words)
    assert text == "\n".join(line for line in CORPUS.strip().splitlines())  # corpus is written canonically
    again = assemble(text)
    assert again.words.tolist() == prog.words.tolist()


def test_unused_bits_are_shown_and_ignored():
    # S_EXP_FP ignores rs2; M_MM ignores its placeholder rd (isa.md §2)
    word = assemble("S_EXP_FP f1, f2").words[0] | (5 << 14)
    assert disassemble_word(word) == "S_EXP_FP f1, f2 ; unused=0x00014000"
    word = assemble("M_MM 0, gp2, gp4").words[0] | (3 << 6)
    assert disassemble_word(word) == "M_MM 0, gp2, gp4 ; unused=0x000000C0"
    assert disassemble_word(0x34 | (1 << 31)) == "C_BREAK ; unused=0x80000000"


def test_non_instruction_words_disassemble_as_word():
    assert disassemble_word(0x00000000) == ".word 0x00000000 ; opcode 0x00 is not an instruction"
    assert disassemble_word(0x00000031) == ".word 0x00000031 ; opcode 0x31 is not an instruction (upstream V_PS_V)"
    # fields no assembly text can express: f8 in an fp position, M_BMM rd != 0, V_TOPK policy 2
    assert disassemble_word(0x00000217).startswith(".word 0x00000217 ; S_ADD_FP")
    assert disassemble_word(0x000000C3).startswith(".word 0x000000C3 ; M_BMM")
    assert disassemble_word(0x00080037).startswith(".word 0x00080037 ; V_TOPK")


def test_decode_program_matches_scalar_decode():
    prog = assemble(CORPUS)
    arrays = decode_program(prog.words)
    for k, w in enumerate(prog.words):
        d = decode(w)
        for name in FIELDS:
            assert arrays[name][k] == d[name]


def test_encode_rejects_out_of_range_fields():
    with pytest.raises(ValueError):
        encode("S_ADDI_INT", rd=16)
    with pytest.raises(ValueError):
        encode("S_ADDI_INT", imm18=1 << 18)


# ------------------------------------------------------------------ hypothesis round trip


def _operand_strategy(op):
    if op.kind in REGISTER_COUNT:
        lo = 0
        if op.forbid:
            lo = 1
        return st.integers(lo, REGISTER_COUNT[op.kind] - 1).map(lambda n, k=op.kind: f"{k}{n}")
    if op.kind == "zero":
        return st.sampled_from(["0", "gp0", "0x0", "00"])
    hi = op.max_value if op.max_value is not None else FIELDS[op.field].max
    lo = 1 if op.forbid else 0
    return st.integers(lo, hi).flatmap(lambda v: st.sampled_from([str(v), hex(v), f"0X{v:X}"]))


@st.composite
def random_instruction(draw):
    instr = draw(st.sampled_from(INSTRUCTIONS))
    form = draw(st.sampled_from(instr.forms()))
    ops = [draw(_operand_strategy(o)) for o in form]
    mnem = draw(st.sampled_from([instr.mnemonic, instr.mnemonic.lower(), instr.mnemonic.title()]))
    return mnem + (" " + ", ".join(ops) if ops else "")


@settings(max_examples=1500, deadline=None)
@given(random_instruction())
def test_hypothesis_assemble_disassemble_assemble_is_identity(line):
    word = assemble(line).words[0]
    text = disassemble_word(word)
    assert assemble(text).words[0] == word
    assert disassemble_word(assemble(text).words[0]) == text
    assert BY_MNEMONIC[text.split()[0]].opcode == decode(word)["opcode"]


@settings(max_examples=1500, deadline=None)
@given(st.integers(0, 0xFFFFFFFF))
def test_hypothesis_any_word_disassembles_and_canonical_text_reassembles(word):
    text = disassemble_word(word)
    if text.startswith(".word"):
        assert text.startswith(f".word 0x{word:08X}")
        return
    code = text.split(" ; unused=")[0]
    again = assemble(code).words[0]
    instr = BY_MNEMONIC[code.split()[0]]
    assert again == word & ~instr.unused_mask & 0xFFFFFFFF
