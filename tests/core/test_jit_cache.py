"""The JIT cache is dropped when any source compiled into the run loop changes (Numba checks only a
function's own file)."""

from __future__ import annotations

import shutil
from pathlib import Path

from plena_sim.core import jit_cache

PKG = Path(jit_cache.__file__).resolve().parent.parent


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    for rel in jit_cache.JIT_SOURCES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PKG / rel, root / rel)
    return root


def _entries(d: Path) -> set[str]:
    return {p.name for p in d.glob("*.nb[ic]")}


def test_cache_dropped_only_when_a_source_changes(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    root = _tree(tmp_path)
    core_cache = root / "core" / "__pycache__"
    core_cache.mkdir()
    for name in ("loop.run-90.py311.nbi", "loop.run-90.py311.1.nbc", "vector.topk-3.py311.nbi"):
        (core_cache / name).write_bytes(b"x")
    (core_cache / "unrelated.f-1.py311.nbi").write_bytes(b"x")

    assert jit_cache.invalidate_if_changed(root) is True  # no digest recorded yet: drop
    assert _entries(core_cache) == {"unrelated.f-1.py311.nbi"}

    (core_cache / "loop.run-90.py311.nbi").write_bytes(b"x")  # recompiled entry
    assert jit_cache.invalidate_if_changed(root) is False  # same sources: keep
    assert "loop.run-90.py311.nbi" in _entries(core_cache)

    vec = root / "core" / "vector.py"
    vec.write_text(vec.read_text() + "\n# edited\n")
    assert jit_cache.invalidate_if_changed(root) is True  # a callee changed: the caller's entry goes
    assert _entries(core_cache) == {"unrelated.f-1.py311.nbi"}


def test_digest_covers_every_compiled_module():
    compiled = {
        p.relative_to(PKG).as_posix()
        for p in PKG.rglob("*.py")
        if any(line.startswith("@njit") for line in p.read_text().splitlines())
    }
    assert compiled <= set(jit_cache.JIT_SOURCES), sorted(compiled - set(jit_cache.JIT_SOURCES))


def test_is_warm_follows_the_run_loop_index(tmp_path, monkeypatch):
    """The CLI's compile notice: warm exactly when the run loop's index file is in its cache directory."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    root = _tree(tmp_path)
    core_cache = root / "core" / "__pycache__"
    core_cache.mkdir()
    (core_cache / "vector.topk-3.py311.nbi").write_bytes(b"x")
    assert jit_cache.is_warm(root) is False
    (core_cache / "loop.run-73.py311.nbi").write_bytes(b"x")
    assert jit_cache.is_warm(root) is True
