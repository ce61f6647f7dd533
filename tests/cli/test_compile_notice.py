"""The terminal says when the simulator core is being compiled (cold JIT cache), and nothing when it is cached."""

from __future__ import annotations

import io

from rich.console import Console

from plena_cli.render import compile_core
from plena_sim import core


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=120, force_terminal=False), buf


def test_cold_cache_is_announced(monkeypatch):
    calls = []
    monkeypatch.setattr(core, "is_warm", lambda: False)
    monkeypatch.setattr(core, "warm_up", lambda: calls.append(1) or 42.4)
    err, buf = _console()
    compile_core(err, quiet=True)
    assert calls == [1]
    assert buf.getvalue().splitlines() == [
        "plena-sim: compiling the simulator core (first run after install or a source change; cached after)",
        "plena-sim: compiled in 42 s",
    ]


def test_warm_cache_is_silent(monkeypatch):
    calls = []
    monkeypatch.setattr(core, "is_warm", lambda: True)
    monkeypatch.setattr(core, "warm_up", lambda: calls.append(1) or 0.1)
    err, buf = _console()
    compile_core(err, quiet=False)
    assert calls == [1] and buf.getvalue() == ""
