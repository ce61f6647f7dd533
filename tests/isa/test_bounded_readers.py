"""Bounded program readers (issue 20, D5 D6 D11 D26): a program file is read only when it is a regular file of
at most 1 GiB and 2^26 instructions; the .mem reader is vectorised (no Python object per word); at most 100
assembler errors are kept, the rest counted; echoed tokens escape a NUL byte or a byte-order mark."""

from __future__ import annotations

import os
import re
import threading
import time

import numpy as np
import pytest

from isa import AssemblerError, MemFormatError, assemble, assemble_file, format_mem, parse_mem, read_mem
from isa.readers import MAX_ERRORS_SHOWN, MAX_PROGRAM_WORDS, InputFileError, read_input
from isa.safetext import printable

WORD = 0x00200062  # S_ADDI_INT gp1, gp0, 128


def _fifo(tmp_path, name="p.mem"):
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _returns_within(fn, seconds=10.0):
    """fn() run in a thread: its exception (or None), failing if it does not return in time (a hang)."""
    box: list = []

    def target():
        try:
            fn()
            box.append(None)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            box.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert box, f"{fn} did not return within {seconds} s (blocked on the input?)"
    return box[0]


# ------------------------------------------------------------------------------------------- D5: file types


@pytest.mark.parametrize("reader", [read_mem, assemble_file])
def test_fifo_is_refused_without_blocking(tmp_path, reader):
    path = _fifo(tmp_path)
    exc = _returns_within(lambda: reader(path))
    assert isinstance(exc, (MemFormatError, AssemblerError)), exc
    assert "FIFO (named pipe), not a regular file" in str(exc)


@pytest.mark.parametrize("reader", [read_mem, assemble_file])
def test_device_and_directory_are_refused_before_reading(tmp_path, reader):
    t0 = time.monotonic()
    with pytest.raises((MemFormatError, AssemblerError), match="a character device, not a regular file"):
        reader("/dev/zero")
    with pytest.raises((MemFormatError, AssemblerError), match="a directory, not a regular file"):
        reader(tmp_path)
    assert time.monotonic() - t0 < 5


def test_read_input_limits_and_kinds(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 100)
    assert read_input(p, "test file", 100) == b"x" * 100
    with pytest.raises(
        InputFileError, match=r"cannot read test file: 101 bytes exceed the limit of 100 bytes \(use -x\)"
    ):
        p.write_bytes(b"x" * 101)
        read_input(p, "test file", 100, "use -x")
    with pytest.raises(InputFileError, match="cannot read test file: No such file or directory"):
        read_input(tmp_path / "missing", "test file", 100)
    with pytest.raises(InputFileError, match="NUL"):
        read_input("a\x00b", "test file", 100)


def test_symlink_to_a_regular_file_is_read(tmp_path):
    (tmp_path / "real.mem").write_text(format_mem([WORD]))
    (tmp_path / "link.mem").symlink_to(tmp_path / "real.mem")
    assert read_mem(tmp_path / "link.mem").words.tolist() == [WORD]


# ------------------------------------------------------------------------------------------- D6: .mem size


def test_program_word_limit_is_checked_and_can_be_raised(tmp_path):
    p = tmp_path / "p.mem"
    p.write_text(format_mem([WORD] * 10))
    with pytest.raises(MemFormatError, match=r"more than 9 instructions .*--max-program"):
        read_mem(p, max_words=9)
    assert len(read_mem(p, max_words=10)) == 10
    with pytest.raises(AssemblerError, match=r"more than 9 instructions .*--max-program"):
        assemble("S_ADDI_INT gp1, gp0, 128\n" * 10, max_words=9)
    assert MAX_PROGRAM_WORDS == 1 << 26


def test_mem_file_size_limit_is_checked_before_reading(tmp_path, monkeypatch):
    import isa.memfile as mf

    p = tmp_path / "p.mem"
    p.write_text(format_mem([WORD] * 100))
    monkeypatch.setattr(mf, "MAX_PROGRAM_BYTES", 1000)
    with pytest.raises(MemFormatError, match="1100 bytes exceed the limit of 1000 bytes"):
        read_mem(p)


def _reference_parse(text: str) -> tuple[list[int], list[int]]:
    """The lenient .mem semantics (isa.md §2): whitespace-separated tokens of 1..8 hex digits, optional 0x."""
    words, lines = [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for tok in line.split():
            m = re.fullmatch(r"(?:0[xX])?([0-9a-fA-F]{1,8})", tok)
            assert m, tok
            words.append(int(m.group(1), 16))
            lines.append(lineno)
    return words, lines


@pytest.mark.parametrize(
    "text",
    [
        "0x00200062 62\n\n  0XdeadBEEF\tFFFFFFFF  0x0\n",
        "1\r\n2\r3\x0b4\x0c5\x1c6\x1d7\x1e8\x1f9 a\n",
        "\n\n\r\r\n0\n",
        "ffffffff",
        "   ",
        "0x1\r",
    ],
)
def test_vectorised_mem_parse_keeps_the_lenient_semantics(text):
    words, lines = _reference_parse(text)
    prog = parse_mem(text, "t.mem")
    assert prog.words.tolist() == words
    assert prog.source.lines.tolist() == lines
    for k, w in enumerate(words):
        assert prog.source.text(k).endswith(f"(word 0x{w:08X})")


def test_mem_errors_name_line_token_index_and_token():
    text = "0x1 0x2\n\n0x3 0xZZ 0x4\n"
    with pytest.raises(MemFormatError) as ei:
        parse_mem(text, "p.mem")
    assert str(ei.value) == (
        "p.mem: line 3: token 3 '0xZZ' is not a 32-bit hex word (1..8 hex digits, optional 0x prefix)"
    )
    with pytest.raises(MemFormatError, match=r"line 2: token 1 '0x' is"):
        parse_mem("1\n0x\n")
    with pytest.raises(MemFormatError, match=r"line 1: token 0 '123456789' is"):
        parse_mem("123456789")
    with pytest.raises(MemFormatError, match=r"line 1: token 1 '0x0x1' is"):
        parse_mem("1 0x0x1")
    with pytest.raises(MemFormatError, match=r"token 0 'é1' is"):
        parse_mem("é1")


def test_large_mem_file_is_fast_and_compact(tmp_path):
    """2M words: the old reader took ~14 s and ~560 MB here (one str per word); vectorised it is well under 5 s
    and the program holds no Python object per word (its texts are made on request)."""
    n = 2_000_000
    p = tmp_path / "big.mem"
    p.write_bytes(b"0x00200062\n" * n)
    t0 = time.perf_counter()
    prog = read_mem(p)
    elapsed = time.perf_counter() - t0
    assert len(prog) == n and int(prog.words[-1]) == WORD and prog.source.line(n - 1) == n
    assert elapsed < 5.0, elapsed
    assert type(prog.source._texts).__name__ == "MemTexts"
    assert prog.source.text(n - 1) == "S_ADDI_INT gp1, gp0, 128   (word 0x00200062)"


# ------------------------------------------------------------------------------------------- D11: errors


def test_assembler_keeps_100_errors_and_counts_the_rest():
    text = "".join(f"S_ADDI_INT gp1, gp0, {300000 + i}\n" for i in range(5000))
    with pytest.raises(AssemblerError) as ei:
        assemble(text, "bad.asm")
    exc = ei.value
    assert exc.count == 5000
    assert len(exc.diagnostics) == MAX_ERRORS_SHOWN == 100
    assert [d.line for d in exc.diagnostics] == list(range(1, 101))
    msg = str(exc)
    assert msg.startswith("5000 assembler errors:\n")
    assert msg.endswith("\n  ... and 4900 more errors (the first 100 are shown)")
    assert len(msg.splitlines()) == 102


def test_a_million_bad_lines_are_counted_quickly():
    text = "S_ADDI_INT gp1, gp0, 999999\n" * 1_000_000
    t0 = time.perf_counter()
    with pytest.raises(AssemblerError) as ei:
        assemble(text, "bad.asm")
    assert ei.value.count == 1_000_000 and len(ei.value.diagnostics) == 100
    assert time.perf_counter() - t0 < 30


# ------------------------------------------------------------------------------------------- D26: echoes


def test_bom_and_nul_are_escaped_in_assembler_messages():
    with pytest.raises(AssemblerError) as ei:
        assemble("\ufeffS_ADDI_INT gp1, gp0, 64\nS_ADDI_INT gp1, gp0, 6\x004\n", "x.asm")
    msg = str(ei.value)
    assert "\ufeff" not in msg and "\x00" not in msg
    assert "'\\ufeffS_ADDI_INT'" in msg and "'6\\x004'" in msg
    assert "byte-order mark" in msg


def test_printable_escapes_only_what_cannot_be_seen():
    assert printable("MLEN é ×") == "MLEN é ×"
    assert printable("a\x00b\ufeffc\x1b[31m") == "a\\x00b\\ufeffc\\x1b[31m"
    assert printable("x" * 100, 10) == "xxxxxxx..."


def test_mem_file_with_bom_or_nul_names_the_byte(tmp_path):
    p = tmp_path / "p.mem"
    p.write_bytes(b"\xef\xbb\xbf0x1\n")
    with pytest.raises(MemFormatError, match="non-ASCII byte 0xEF at offset 0"):
        read_mem(p)
    p.write_bytes(b"0x1\n0x\x002\n")
    with pytest.raises(MemFormatError) as ei:
        read_mem(p)
    assert "\x00" not in str(ei.value) and "'0x\\x002'" in str(ei.value)


def test_words_array_is_uint32_readonly():
    prog = parse_mem("1 2 3")
    assert prog.words.dtype == np.uint32 and not prog.words.flags.writeable
