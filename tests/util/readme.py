"""The README's code blocks: :func:`blocks` (``lang`` = ``python`` / ``bash``), :func:`commands` (a bash block's
command lines with the exit code each one's trailing ``# exit N`` comment expects, else 0).

:func:`quick_start`: the quick start's two commands (``.ci/run`` must run both word for word; the test checks it).
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_EXIT = re.compile(r"#\s*exit (\d+)\b")


def blocks(lang: str) -> list[tuple[int, str]]:
    """(line number of the opening fence, the block's text) of every ```lang block, in order."""
    text = README.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(rf"```{lang}\n(.*?)```", text, re.S)]


def commands(block: str) -> list[tuple[str, int]]:
    """(command, expected exit code) of each non-blank line of a bash block."""
    out = []
    for line in block.splitlines():
        if not line.strip():
            continue
        comment = line.partition(" #")[2]
        want = _EXIT.search("#" + comment) if comment else None
        out.append((line, int(want.group(1)) if want else 0))
    return out


def quick_start() -> list[str]:
    """The quick start's commands (the first bash block of the README), without their comments."""
    _line, block = blocks("bash")[0]
    return [cmd.partition(" #")[0].strip() for cmd, _code in commands(block)]
