"""Every AssemblerError kind, with its line:column, token and expectation (isa.md §2)."""

import pytest

from isa import AssemblerError, assemble, assemble_file

# (line, expected column, offending token, words that must appear in the reason)
CASES = [
    ("S_ADD_FP gp1, f2, f3", 10, "gp1", ["expected FP register"]),
    ("S_ADDI_INT gp1, gp0, -1", 22, "-1", ["signed"]),
    ("S_ADDI_INT gp1, gp0, 262144", 22, "262144", ["out of range", "0..262143"]),
    ("V_ADD_VV gp1, gp2, gp16", 20, "gp16", ["out of range", "gp0..gp15"]),
    ("H_PREFETCH_M gp1, gp2, a8, 0, 0", 24, "a8", ["out of range", "a0..a7"]),
    ("S_LD_FP f8, gp0, 1", 9, "f8", ["out of range", "f0..f7"]),
    ("V_ADD_VV gp1, gp2, gp3, 16", 25, "16", ["0..15"]),
    ("M_BTMM 16, gp0, gp3", 8, "16", ["placeholder 0"]),
    ("M_BTMM gp1, gp0, gp3", 8, "gp1", ["placeholder 0"]),
    ("V_TOPK gp1, gp2, gp3, 2", 23, "2", ["policy", "0..1"]),
    ("C_LOOP_START gp1, 0", 19, "0", ["LP-ZERO"]),
    ("C_LOOP_START gp0, 4", 14, "gp0", ["LP-GP0"]),
    ("V_PS_V gp1, gp2, gp3", 1, "V_PS_V", ["0x31", "not an instruction"]),
    ("C_HADAMARD_TRANSFORM", 1, "C_HADAMARD_TRANSFORM", ["0x33", "not an instruction"]),
    ("S_ADDI_INT gp1 gp0 7", 12, "gp1 gp0 7", ["missing commas"]),
    ("S_ADDI_INT gp1, gp0, 7,", 24, "", ["empty operand"]),
    ("# note", 1, "#", ["unknown mnemonic"]),
    ("loop:", 1, "loop:", ["unknown mnemonic"]),
    ("H_STORE_V gp1, gp2, a0, 1", 25, "1", ["takes 5 or 6 operands, got 4"]),
    ("S_ADDI_INT gp01, gp0, 1", 12, "gp01", ["leading zeros"]),
    ("S_ADDI_INT gp1, gp0, 0x_", 22, "0x_", ["malformed number"]),
    ("M_MM 1, gp1, gp2", 6, "1", ["placeholder 0"]),
    ("S_LUI_INT gp1, 4194304", 16, "4194304", ["0..4194303"]),
    ("V_EXP_V gp1, gp2, 1, 5", 22, "5", ["placeholder 0"]),
    ("C_BREAK 0, 0", 12, "0", ["takes 0 or 3 operands"]),
    ("M_MV_WO gp1, gp2, 16", 14, "gp2", ["placeholder 0"]),
    ("S_ADDI_INT gp1, f0, 1", 17, "f0", ["expected GP register"]),
    ("V_ADD_VF gp1, gp2, gp3", 20, "gp3", ["expected FP register"]),
    ("C_SET_ADDR_REG gp1, gp0, gp1", 16, "gp1", ["HBM address register"]),
    ("S_ADDI_INT gp1, gp0, abc", 22, "abc", ["malformed number"]),
]


@pytest.mark.parametrize("line,col,token,words", CASES, ids=[c[0] for c in CASES])
def test_each_error_is_located(line, col, token, words):
    text = "S_ADDI_INT gp1, gp0, 1\n\n" + line + "   ; trailing comment\n"
    with pytest.raises(AssemblerError) as ei:
        assemble(text, "t.asm")
    err = ei.value
    assert len(err.diagnostics) == 1
    d = err.diagnostics[0]
    assert (d.file, d.line, d.column, d.token) == ("t.asm", 3, col, token)
    assert err.line_no == 3 and err.line_text.startswith(line)
    for w in words:
        assert w in d.reason, d.reason
    assert f"t.asm:3:{col}:" in str(err)


def test_all_errors_of_a_file_are_reported_in_order():
    text = "\n".join(c[0] for c in CASES)
    with pytest.raises(AssemblerError) as ei:
        assemble(text, "many.asm")
    assert [d.line for d in ei.value.diagnostics] == list(range(1, len(CASES) + 1))
    assert [d.column for d in ei.value.diagnostics] == [c[1] for c in CASES]


def test_syntax_accepted():
    text = """
    ; full-line comment
    // another
    s_addi_int GP1 , gp0 ,   0x1_0   // hex with separator and odd spacing
    S_ADDI_INT\tgp2,\tgp0,\t1_000 ; decimal with separator
    M_MM gp0, gp1, gp2
    m_bmm_wo gp1, GP0, 64
    H_PREFETCH_V gp3, gp2, a0, 0, 0, 0
    """
    prog = assemble(text, "ok.asm")
    assert [s.line for s in prog.source] == [4, 5, 6, 7, 8]
    assert prog.source[0].text.strip().startswith("s_addi_int")
    assert prog.words[0] == (0x22 | (1 << 6) | (16 << 14))
    assert prog.words[1] == (0x22 | (2 << 6) | (1000 << 14))
    assert prog.words[2] == 0x00008401
    assert prog.words[3] == 0x00100045
    assert prog.words[4] == 0x000008E9


def test_comment_order_slash_before_semicolon():
    # '//' is removed first, then ';' (isa.md §2)
    assert assemble("S_ADDI_INT gp1, gp0, 7 ; x // y").words.tolist() == [0x0001C062]
    assert assemble("S_ADDI_INT gp1, gp0, 7 // x ; y").words.tolist() == [0x0001C062]


def test_empty_text_is_empty_program():
    assert assemble("").words.tolist() == []
    assert assemble("\n  ; only comments\n").words.tolist() == []


def test_unreadable_file_is_an_assembler_error(tmp_path):
    with pytest.raises(AssemblerError) as ei:
        assemble_file(tmp_path / "missing.asm")
    assert "cannot read" in ei.value.reason
    bad = tmp_path / "latin1.asm"
    bad.write_bytes(b"S_ADDI_INT gp1, gp0, 1 ; \xff\n")
    with pytest.raises(AssemblerError):
        assemble_file(bad)
