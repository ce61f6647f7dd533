"""Bounded input readers shared by every layer: a file is read only when it is a regular file of bounded size.

One job: no reader of the project hangs on a FIFO, reads a device until memory runs out or spends quadratic
time on a hostile document. Every input file (config TOML, ``.asm``, ``.mem``, HBM images and manifests, SRAM
preloads, sweep specs, model presets) goes through :func:`open_input` / :func:`read_input`:

* the path is opened without blocking (``O_NONBLOCK``: opening a FIFO that no one writes returns at once)
  and ``fstat`` ed; anything but a regular file (a directory, a FIFO, a device, a socket) is refused before a
  byte is read;
* its size is checked against the caller's limit (a documented cap, or one derived from the config: the FP /
  INT SRAM preloads against FP_SRAM_SIZE / INT_SRAM_SIZE, an HBM image against HBM_SIZE), and at most
  ``limit`` bytes are ever read (a file growing meanwhile is refused too).

TOML documents (:func:`parse_toml`) are also checked for nesting: a dotted key or table header of more than
``MAX_TOML_DEPTH`` parts, or brackets nested deeper, is refused from the raw text (before ``tomllib``, whose
work on such keys is quadratic), and the parsed document's depth is checked exactly.

Every refusal is an :class:`InputFileError` (a ``ValueError``) naming the file; callers re-raise it as their
own error type (ConfigError, AssemblerError, MemFormatError, ImageError, ...), so the command line exits 2.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tomllib
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from .safetext import printable

__all__ = [
    "MiB",
    "GiB",
    "MAX_CONFIG_BYTES",
    "MAX_TOML_DEPTH",
    "MAX_PROGRAM_BYTES",
    "MAX_PROGRAM_WORDS",
    "MAX_MANIFEST_BYTES",
    "MAX_ERRORS_SHOWN",
    "InputFileError",
    "open_input",
    "read_input",
    "read_at_most",
    "read_text_input",
    "parse_toml",
    "toml_depth_error",
]

MiB = 1 << 20
GiB = 1 << 30
#: config TOML (settings, hardware presets, sweep specs, model presets): size and nesting depth
MAX_CONFIG_BYTES = 16 * MiB
MAX_TOML_DEPTH = 64
#: ``.asm`` / ``.mem`` programs: file size and instructions (``--max-program`` raises the latter)
MAX_PROGRAM_BYTES = GiB
MAX_PROGRAM_WORDS = 1 << 26
#: an HBM image's JSON manifest
MAX_MANIFEST_BYTES = 64 * MiB
#: assembler diagnostics kept (and printed); the rest are counted
MAX_ERRORS_SHOWN = 100


class InputFileError(ValueError):
    """An input file that is not read: missing or unreadable, not a regular file, or too large."""

    def __init__(self, path: object, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{printable(path)}: {reason}")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _limit_text(limit: int, hint: str) -> str:
    return f"the limit of {_size(limit)}" + (f" ({hint})" if hint else "")


@contextlib.contextmanager
def open_input(path: str | os.PathLike, what: str, limit: int, hint: str = "") -> Iterator[tuple[IO[bytes], int]]:
    """``(binary file, size)`` of the regular file at ``path`` of at most ``limit`` bytes; InputFileError
    otherwise (``what`` names the file's role, ``hint`` how to raise the limit). Read at most ``size`` bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except ValueError:  # a NUL byte in the path
        raise InputFileError(path, f"cannot read {what}: the path contains a NUL byte") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(path, f"cannot read {what}: {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise InputFileError(path, f"cannot read {what}: {st.st_size} bytes exceed {_limit_text(limit, hint)}")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb", buffering=0) as fh:
        yield fh, st.st_size


def read_input(path: str | os.PathLike, what: str, limit: int, hint: str = "") -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit`` of them; see :func:`open_input`)."""
    with open_input(path, what, limit, hint) as (fh, _size_now):
        try:
            data = read_at_most(fh, limit + 1)
        except OSError as exc:
            raise InputFileError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputFileError(path, f"cannot read {what}: it grew past {_limit_text(limit, hint)} while it was read")
    return data


def read_at_most(fh: IO[bytes], most: int) -> bytes:
    """Up to ``most`` bytes of ``fh`` (in pieces: one read call may return less)."""
    parts = []
    left = most
    while left > 0:
        chunk = fh.read(min(left, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_text_input(path: str | os.PathLike, what: str, limit: int, hint: str = "") -> str:
    """:func:`read_input` decoded as UTF-8 (InputFileError naming the first undecodable byte)."""
    data = read_input(path, what, limit, hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFileError(
            path,
            f"cannot read {what}: not UTF-8 text (line {line}: byte 0x{data[exc.start]:02X} at offset {exc.start})",
        ) from None


# ------------------------------------------------------------------------------------------- TOML nesting

#: strings and comments, blanked before the raw-text nesting scan (their dots and brackets are text)
_TOML_OPAQUE = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*')
#: a bare or (blanked) quoted key part
_PART = r"[A-Za-z0-9_-]++"
_DEEP_KEY = re.compile(rf"(?<![A-Za-z0-9_-]){_PART}(?:[ \t]*+\.[ \t]*+{_PART}){{{MAX_TOML_DEPTH},}}")
_OPEN_CLOSE = np.zeros(256, dtype=np.int8)
_OPEN_CLOSE[[ord("["), ord("{")]] = 1
_OPEN_CLOSE[[ord("]"), ord("}")]] = -1


def toml_depth_error(text: str, limit: int = MAX_TOML_DEPTH) -> str | None:
    """Why ``text`` nests deeper than ``limit`` (a dotted key / header of more parts, or brackets nested
    deeper), judged from the raw text in linear time; None if it does not."""
    plain = _TOML_OPAQUE.sub(lambda m: "x" if m.group(0)[0] in "\"'" else "", text)
    m = _DEEP_KEY.search(plain)
    if m is not None:
        line = plain.count("\n", 0, m.start()) + 1
        return f"line {line}: a dotted key with more than {limit} parts"
    if "[" in plain or "{" in plain:
        raw = np.frombuffer(plain.encode("ascii", "replace"), dtype=np.uint8)
        depth = np.cumsum(_OPEN_CLOSE[raw], dtype=np.int64)
        deepest = int(depth.max()) if depth.size else 0
        if deepest > limit:
            at = int(np.argmax(depth > limit))
            line = plain.count("\n", 0, at) + 1
            return f"line {line}: arrays / tables nested more than {limit} levels deep"
    return None


def _document_depth(doc: dict[str, Any]) -> int:
    """Nesting depth of a parsed document (``a.b = 1`` is 2, ``x = [[1]]`` is 3), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def parse_toml(text: str, limit: int = MAX_TOML_DEPTH) -> dict[str, Any]:
    """``tomllib.loads(text)`` for a document nested at most ``limit`` deep. ValueError (a
    ``tomllib.TOMLDecodeError`` for bad syntax) otherwise; the depth is checked on the raw text first."""
    why = toml_depth_error(text, limit)
    if why is None:
        try:
            doc = tomllib.loads(text)
        except RecursionError:  # pragma: no cover - the raw-text scan bounds the brackets first
            why = "nested too deeply"
        else:
            if _document_depth(doc) <= limit:
                return doc
            why = f"keys, tables and arrays nested more than {limit} levels deep"
    raise ValueError(f"{why} (at most {limit} levels)")
