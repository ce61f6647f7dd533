"""The .mem format (isa.md §2): writer format, lenient reader, located load errors."""

import pytest

from isa import MemFormatError, assemble, format_mem, parse_mem, read_mem, write_mem


def test_format_is_upstream():
    assert format_mem([0x62, 0xFFFFFFFF, 0x00200062]) == "0x00000062\n0xFFFFFFFF\n0x00200062\n"


def test_reader_is_lenient():
    prog = parse_mem("0x00200062 62\n\n  0XdeadBEEF\tFFFFFFFF  0x0\n")
    assert prog.words.tolist() == [0x00200062, 0x62, 0xDEADBEEF, 0xFFFFFFFF, 0]
    assert [s.line for s in prog.source] == [1, 1, 3, 3, 3]
    assert prog.source[0].text.startswith("S_ADDI_INT gp1, gp0, 128")


def test_empty_file_is_empty_program():
    assert parse_mem("").words.tolist() == []
    assert parse_mem("\n \n").words.tolist() == []


@pytest.mark.parametrize(
    "text,index,token",
    [
        ("0x1 0x123456789\n", 1, "0x123456789"),
        ("0x1\n0xg\n", 1, "0xg"),
        ("0x\n", 0, "0x"),
        ("12 -1\n", 1, "-1"),
        ("0x1 ; comment\n", 1, ";"),
    ],
)
def test_bad_tokens_are_named(text, index, token):
    with pytest.raises(MemFormatError) as ei:
        parse_mem(text, "p.mem")
    assert f"token {index} {token!r}" in str(ei.value)
    assert str(ei.value).startswith("p.mem: line ")


def test_roundtrip_through_file(tmp_path):
    prog = assemble("S_ADDI_INT gp1, gp0, 128\nC_BREAK\nV_TOPK gp1, gp2, gp3, 1\n")
    path = tmp_path / "p.mem"
    write_mem(path, prog.words)
    assert path.read_text() == "0x00200062\n0x00000034\n0x0004C877\n"
    assert read_mem(path).words.tolist() == prog.words.tolist()
    assert [p.name for p in tmp_path.iterdir()] == ["p.mem"]  # no temp file left behind


def test_binary_or_missing_file(tmp_path):
    p = tmp_path / "bin.mem"
    p.write_bytes(b"0x1\n\xff\x00")
    with pytest.raises(MemFormatError) as ei:
        read_mem(p)
    assert "non-ASCII" in str(ei.value)
    with pytest.raises(MemFormatError):
        read_mem(tmp_path / "missing.mem")
