"""The JIT cache location chosen by plena_sim/__init__.py (before Numba is imported)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import plena_sim

ROOT = Path(__file__).resolve().parents[2]


def test_existing_numba_cache_dir_is_respected(tmp_path):
    assert plena_sim._numba_cache_dir(str(tmp_path), {"NUMBA_CACHE_DIR": "/somewhere"}) is None


def test_writable_package_keeps_in_tree_cache(tmp_path):
    assert plena_sim._numba_cache_dir(str(tmp_path), {}) is None


def test_read_only_package_uses_user_cache(tmp_path, monkeypatch):
    pkg = tmp_path / "site-packages" / "plena_sim"
    pkg.mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p).startswith(str(pkg)) else real(p, m))
    d = plena_sim._numba_cache_dir(str(pkg), {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert d == str(tmp_path / "xdg" / "plena-sim" / "numba") and Path(d).is_dir()


def test_set_before_numba_import_in_a_fresh_process(tmp_path):
    """A non-editable install (package copied into a fake, non-writable site-packages): importing
    plena_sim sets NUMBA_CACHE_DIR, and numba's config sees it."""
    code = (
        "import os, plena_sim; os.access = os.access\n"
        "import numba.core.config as c; print(os.environ.get('NUMBA_CACHE_DIR'), c.CACHE_DIR)"
    )
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), NUMBA_CACHE_DIR="")
    env.pop("NUMBA_CACHE_DIR")
    # simulate non-writability through the function's hook: run with a sitecustomize that denies access
    sc = tmp_path / "sc"
    sc.mkdir()
    (sc / "sitecustomize.py").write_text(
        "import os\n_real = os.access\n"
        "os.access = lambda p, m, **k: False if 'plena_sim' in str(p) else _real(p, m, **k)\n"
    )
    env["PYTHONPATH"] = os.pathsep.join([str(sc), str(ROOT)])
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr
    want = str(tmp_path / "xdg" / "plena-sim" / "numba")
    assert out.stdout.split() == [want, want]


# ------------------------------------------------------------------------------------------- D9 (issue 20)


def _read_only_pkg(tmp_path, monkeypatch):
    pkg = tmp_path / "site-packages" / "plena_sim"
    pkg.mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p).startswith(str(pkg)) else real(p, m))
    return pkg


def test_fallback_cache_dir_is_created_private(tmp_path, monkeypatch):
    pkg = _read_only_pkg(tmp_path, monkeypatch)
    d = plena_sim._numba_cache_dir(str(pkg), {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    st = os.lstat(d)
    assert d == str(tmp_path / "xdg" / "plena-sim" / "numba")
    assert st.st_uid == os.getuid() and (st.st_mode & 0o777) == 0o700


@pytest.mark.parametrize("problem", ["other user", "group writable", "symlink"])
def test_unsafe_cache_dirs_are_refused(tmp_path, monkeypatch, problem):
    """D9: a fallback cache directory owned by another user (Numba's index files are pickles: a cache-poisoning
    path), writable by others, or a symlink is never used; with no private directory left the JIT cache is a
    fresh private directory of this process (nothing persists, nothing foreign is loaded), with a warning."""
    pkg = _read_only_pkg(tmp_path, monkeypatch)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    xdg = tmp_path / "xdg" / "plena-sim" / "numba"
    shared = tmp_path / "tmp" / f"plena-sim-numba-{os.getuid()}"
    for d in (xdg, shared):
        if problem == "symlink":
            d.parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "elsewhere").mkdir(exist_ok=True)
            d.symlink_to(tmp_path / "elsewhere")
        else:
            d.mkdir(parents=True, mode=0o700)
            os.chmod(d, 0o770 if problem == "group writable" else 0o700)
    if problem == "other user":
        real_uid = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real_uid + 4242)
    with pytest.warns(RuntimeWarning, match="not private") as rec:
        d = plena_sim._numba_cache_dir(str(pkg), {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert d is not None and d not in (str(xdg), str(shared))
    assert str(xdg) in str(rec[0].message)
    st = os.lstat(d)
    assert (st.st_mode & 0o777) == 0o700 and Path(d).is_dir() and not any(Path(d).iterdir())
