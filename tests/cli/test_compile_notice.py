"""The terminal says when the simulator core is being compiled (cold JIT cache), and nothing when it is cached."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from plena_cli.render import compile_core
from plena_sim import core

COLD = [
    "plena-sim: compiling the simulator core (first run after install or a source change; cached after)",
    "plena-sim: compiled in 42 s",
]


@pytest.mark.parametrize(("warm", "quiet", "lines"), [(False, True, COLD), (True, False, [])])
def test_compile_notice(monkeypatch, warm, quiet, lines):
    calls = []
    monkeypatch.setattr(core, "is_warm", lambda: warm)
    monkeypatch.setattr(core, "warm_up", lambda: calls.append(1) or 42.4)
    buf = io.StringIO()
    compile_core(Console(file=buf, width=120, force_terminal=False), quiet=quiet)
    assert calls == [1]  # the core is loaded (or compiled) exactly once either way
    assert buf.getvalue().splitlines() == lines
