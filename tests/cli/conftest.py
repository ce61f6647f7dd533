"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def ran(monkeypatch):
    """Records every simulation started (a command refused before its run must start none)."""
    from plena_sim.machine import Machine

    calls: list[str] = []
    real = Machine.run

    def spy(self, *a, **kw):
        calls.append("run")
        return real(self, *a, **kw)

    monkeypatch.setattr(Machine, "run", spy)
    return calls
