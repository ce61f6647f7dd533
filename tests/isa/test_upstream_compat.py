"""Upstream compatibility forms: every operand spelling the upstream PLENA compiler emits assembles to the
word the upstream assembler gives it (except the encoding bugs of isa.md §9.1, which are not reproduced);
the malformed neighbours of those spellings stay located errors.

Expected words are hand-derived from the field layout of isa.md §3
(``op + rd<<6 + rs1<<10 + rs2<<14 + rs3<<18 + funct1<<22``, ``imm18<<14``, ``imm22<<10``), never computed
by our assembler.
"""

import pytest

from isa import AssemblerError, assemble, disassemble_word
from isa.table import INSTRUCTIONS

# (line as the upstream compiler writes it, expected word, canonical disassembly)
FORMS = [
    # -- literal 0 for gp0 in a first operand (new) -------------------------------------------------
    # flash-attention decode template: M_BTMV with a literal 0 in the gp_moff (rd) position
    ("M_BTMV 0, gp0, gp5", 0x0001400A, "M_BTMV gp0, gp0, gp5"),
    ("M_BTMV 0, gp5, gp0", 0x0000140A, "M_BTMV gp0, gp5, gp0"),  # operand order of other branches
    ("M_BMV 0, gp2, gp3", 0x0000C809, "M_BMV gp0, gp2, gp3"),  # same operand role as M_BTMV
    ("M_BTMV 00, gp0, gp5", 0x0001400A, "M_BTMV gp0, gp0, gp5"),  # any number token of value 0
    ("M_BTMV 0x0, gp0, gp5", 0x0001400A, "M_BTMV gp0, gp0, gp5"),
    ("M_BTMV 0_0, gp0, gp5", 0x0001400A, "M_BTMV gp0, gp0, gp5"),
    # the same first-operand rule for every other GP first operand (upstream encodes them all as gp0)
    ("S_ADDI_INT 0, gp0, 0", 0x00000022, "S_ADDI_INT gp0, gp0, 0"),
    ("S_ADDI_INT 0, gp3, 7", 0x0001CC22, "S_ADDI_INT gp0, gp3, 7"),
    ("S_LUI_INT 0, 5", 0x00001425, "S_LUI_INT gp0, 5"),
    ("V_ADD_VV 0, gp1, gp2", 0x0000840D, "V_ADD_VV gp0, gp1, gp2"),
    ("V_ADD_VV 0, gp1, gp2, 3", 0x000C840D, "V_ADD_VV gp0, gp1, gp2, 3"),
    ("V_TOPK 0, gp1, gp2, 1", 0x00048437, "V_TOPK gp0, gp1, gp2, 1"),
    ("H_PREFETCH_V 0, gp2, a1, 1, 0", 0x00044829, "H_PREFETCH_V gp0, gp2, a1, 1, 0"),
    ("H_STORE_V 0, gp2, a1, 0, 1, 0", 0x0040482A, "H_STORE_V gp0, gp2, a1, 0, 1"),
    ("M_MM_WO 0, gp2, 64", 0x00100806, "M_MM_WO gp0, gp2, 64"),
    ("M_MV_WO 0, 0, 0", 0x0000000B, "M_MV_WO gp0, 0"),
    ("M_MV_WO 0, 16", 0x0004000B, "M_MV_WO gp0, 16"),  # imm18 at bit 14 (§9.1 item 3)
    ("C_SET_V_MASK_REG 0", 0x0000002E, "C_SET_V_MASK_REG gp0"),
    ("C_LOOP_END 0", 0x00000030, "C_LOOP_END gp0"),
    # -- compatibility forms the templates emit that were already accepted ------------------------------
    ("M_BTMM 0, gp0, gp4", 0x00010004, "M_BTMM 0, gp0, gp4"),  # placeholder 0 (qkt.py prefill)
    ("M_MM 0, gp2, gp3", 0x0000C801, "M_MM 0, gp2, gp3"),
    ("M_TMV 0, gp2, gp3", 0x0000C808, "M_TMV 0, gp2, gp3"),
    ("M_MM gp0, gp2, gp3", 0x0000C801, "M_MM 0, gp2, gp3"),  # gp0 as the placeholder (tilelang)
    ("M_MV_WO gp3, gp0, 0", 0x000000CB, "M_MV_WO gp3, 0"),  # middle 0 of the *_WO forms
    ("M_MV_WO gp3, 0, 64", 0x001000CB, "M_MV_WO gp3, 64"),
    ("M_MV_WO gp3, 0", 0x000000CB, "M_MV_WO gp3, 0"),
    ("M_BMM_WO gp3, 0", 0x000000C5, "M_BMM_WO gp3, 0"),
    ("M_BMV_WO gp3, 0", 0x000000CC, "M_BMV_WO gp3, 0"),
    ("M_MM_WO gp3, gp0, 0", 0x000000C6, "M_MM_WO gp3, gp0, 0"),
    ("V_EXP_V gp3, gp3, 0", 0x00000CD3, "V_EXP_V gp3, gp3"),  # explicit zero rmask
    ("V_RECI_V gp3, gp3, 0", 0x00000CD4, "V_RECI_V gp3, gp3"),
    ("V_RED_MAX f2, gp3, 0", 0x00000C96, "V_RED_MAX f2, gp3"),
    ("V_RED_SUM f2, gp3", 0x00000C95, "V_RED_SUM f2, gp3"),  # rmask omitted
    ("V_RED_SUM f2, gp3, 0, 0", 0x00000C95, "V_RED_SUM f2, gp3"),  # rmask + trailing 0 (im2col)
    ("V_EXP_V gp1, gp2, 0, 0", 0x00000853, "V_EXP_V gp1, gp2"),  # rmask + trailing 0 (ATen)
    ("S_EXP_FP f1, f1, 0", 0x0000045B, "S_EXP_FP f1, f1"),  # trailing 0 (ATen)
    ("S_RECI_FP f1, f1, 0", 0x0000045C, "S_RECI_FP f1, f1"),
    ("S_SQRT_FP f2, f2", 0x0000089D, "S_SQRT_FP f2, f2"),
    ("H_PREFETCH_V gp3, gp2, a1, 0, 0, 0", 0x000048E9, "H_PREFETCH_V gp3, gp2, a1, 0, 0"),  # sixth 0
    ("H_PREFETCH_M gp0, gp2, a1, 0, 1", 0x00404828, "H_PREFETCH_M gp0, gp2, a1, 0, 1"),
    ("V_SUB_VF gp3, gp3, f0, 0, 1", 0x00400CD0, "V_SUB_VF gp3, gp3, f0, 0, 1"),  # rmask 0 before rorder
    ("V_MUL_VF gp1, gp2, f3, 0", 0x0000C852, "V_MUL_VF gp1, gp2, f3"),
    ("V_ADD_VV gp1, gp2, gp3", 0x0000C84D, "V_ADD_VV gp1, gp2, gp3"),
    ("C_SET_ADDR_REG a1, gp0, gp3", 0x0000C06B, "C_SET_ADDR_REG a1, gp0, gp3"),
    ("C_LOOP_END gp3, 0", 0x000000F0, "C_LOOP_END gp3"),
    ("C_BREAK 0, 0, 0", 0x00000034, "C_BREAK"),
    ("C_BREAK", 0x00000034, "C_BREAK"),
]


@pytest.mark.parametrize("line,word,canonical", FORMS, ids=[f[0] for f in FORMS])
def test_compat_form_assembles_to_upstream_word(line, word, canonical):
    assert assemble(line).words.tolist() == [word]
    assert disassemble_word(word) == canonical  # the canonical form is unchanged
    assert assemble(canonical).words.tolist() == [word]


def test_template_text_with_comments_and_trailing_spaces():
    # the shape of the upstream flash-attention decode template: comment lines, trailing blanks
    text = (
        "; QKT Per KV Head Multiplication \n"
        "S_ADDI_INT gp1, gp0, 64 \n"
        "H_PREFETCH_M gp0, gp2, a0, 0, 1 \n"
        "M_BTMV 0, gp0, gp1 \n"
        "S_ADDI_INT gp1, gp0, 128 \n"
        "M_BMV_WO gp1, 0 \n"
    )
    prog = assemble(text, "qkt.asm")
    assert prog.words.tolist() == [0x00100062, 0x00400828, 0x0000400A, 0x00200062, 0x0000004C]
    assert [s.line for s in prog.source] == [2, 3, 4, 5, 6]


def test_zero_literal_is_exactly_gp0_for_every_marked_operand():
    # table-driven: every operand the table marks accepts 0 with the word of gp0, and the marks are the
    # GP first operands (the only register position where upstream's assembler reads a bare number)
    marked = 0
    for instr in INSTRUCTIONS:
        for k, op in enumerate(instr.operands):
            assert op.zero_literal == (k == 0 and op.kind == "gp"), (instr.mnemonic, op)
        first = instr.operands[0] if instr.operands else None
        if first is None or not first.zero_literal or first.forbid:
            continue
        form = instr.forms()[0]
        ops = ["gp0" if o.kind == "gp" else "f0" if o.kind == "f" else "a0" if o.kind == "a" else "0" for o in form]
        canonical = f"{instr.mnemonic} {', '.join(ops)}"
        literal = f"{instr.mnemonic} {', '.join(['0'] + ops[1:])}"
        assert assemble(literal).words.tolist() == assemble(canonical).words.tolist(), literal
        marked += 1
    assert marked == 33  # 34 GP first operands, minus C_LOOP_START (gp0 forbidden)


# (line, column, token, words in the reason): neighbours of the compatibility forms that stay errors
REJECTED = [
    ("M_BTMV 1, gp0, gp5", 8, "1", ["expected GP register", "or 0 for gp0"]),  # only 0, never another index
    ("M_BTMV -0, gp0, gp5", 8, "-0", ["signed"]),
    ("M_BTMV 0x, gp0, gp5", 8, "0x", ["expected GP register"]),
    ("M_BTMV gp0, 0, gp5", 13, "0", ["operand 2", "expected GP register"]),  # upstream: TypeError
    ("M_BTMV gp0, gp1, 0", 18, "0", ["operand 3", "expected GP register"]),
    ("M_BTMV f0, gp0, gp5", 8, "f0", ["expected GP register"]),
    ("M_BTMV 0 gp0 gp5", 8, "0 gp0 gp5", ["missing commas"]),
    ("S_ADDI_INT gp1, 0, 5", 17, "0", ["operand 2", "expected GP register"]),
    ("V_ADD_VV gp1, 0, gp2", 15, "0", ["operand 2"]),
    ("H_PREFETCH_M gp1, gp2, 0, 1, 0", 24, "0", ["HBM address register"]),
    ("M_MM_WO gp1, 0, 0", 14, "0", ["operand 2", "expected GP register"]),
    ("V_RED_SUM 0, gp1", 11, "0", ["expected FP register"]),  # not an f/a spelling
    ("S_ST_FP 0, gp1, 3", 9, "0", ["expected FP register"]),
    ("C_SET_ADDR_REG 0, gp0, gp1", 16, "0", ["HBM address register"]),
    ("C_LOOP_START 0, 4", 14, "0", ["LP-GP0"]),  # checked like gp0
    ("M_BTMM 3, gp0, gp1", 8, "3", ["placeholder 0"]),
    ("S_ADD_FP f1, f2, f3, 0", 22, "0", ["takes 3 operands, got 4"]),  # upstream ignores it
    ("V_EXP_V gp1, gp2, 0, 5", 22, "5", ["placeholder 0"]),
    ("H_PREFETCH_V gp3, gp2, a1, 0, 0, 7", 34, "7", ["placeholder 0"]),
    ("C_BREAK 0, 0", 12, "0", ["takes 0 or 3 operands"]),
    ("S_ADDI_INT gp01, gp0, 1", 12, "gp01", ["leading zeros"]),
    ("V_SHIFT_V gp1, gp2, gp3", 1, "V_SHIFT_V", ["unknown mnemonic"]),  # typo on old branches
    ("H_PREFETCH_M a1, gp2, gp3, 1, 0", 14, "a1", ["expected GP register"]),  # WIP-branch operand order
]


@pytest.mark.parametrize("line,col,token,words", REJECTED, ids=[r[0] for r in REJECTED])
def test_malformed_neighbour_is_a_located_error(line, col, token, words):
    text = "S_ADDI_INT gp1, gp0, 1\n; upstream template\n" + line + " \n"
    with pytest.raises(AssemblerError) as ei:
        assemble(text, "u.asm")
    assert len(ei.value.diagnostics) == 1
    d = ei.value.diagnostics[0]
    assert (d.file, d.line, d.column, d.token) == ("u.asm", 3, col, token)
    for w in words:
        assert w in d.reason, d.reason
