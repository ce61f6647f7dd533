"""Output targets that must never be replaced (device node, FIFO, directory, symlinks to them, dangling and
looping symlinks), created without root, and a snapshot to prove each is left exactly as it was.

The device node is a private character device (1, 3 = null) made with ``mknod`` where the test may (root);
otherwise ``/dev/null`` itself, which an unprivileged writer cannot replace anyway. No test ever names
``/dev/null`` or ``/dev/full`` as a root-writable target directly: a regression must not break the host.
"""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["ROOT", "device_node", "hostile_targets", "snapshot", "leftovers", "child", "spawn"]

#: the repository (a child interpreter imports its packages from here)
ROOT = Path(__file__).resolve().parents[2]


def device_node(d: Path) -> Path:
    """A character device node: a private one in ``d`` where mknod is allowed, else ``/dev/null``."""
    node = d / "null-device"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        return Path("/dev/null")
    return node


def hostile_targets(d: Path) -> dict[str, Path]:
    """name -> an existing path that is not a regular file after resolving symlinks (or cannot be resolved)."""
    d.mkdir(parents=True, exist_ok=True)
    dev = device_node(d)
    fifo = d / "fifo"
    os.mkfifo(fifo)
    folder = d / "folder"
    folder.mkdir()
    links = {
        "symlink-to-device": dev,
        "symlink-to-fifo": fifo,
        "symlink-to-dir": folder,
        "symlink-to-dev-full": Path("/dev/full"),  # replacing the link itself is the bug; the device is safe
        "dangling-symlink": d / "missing-target",
        "symlink-loop": d / "symlink-loop",
    }
    for name, target in links.items():
        os.symlink(target, d / name)
    return {"device": dev, "fifo": fifo, "directory": folder, **{n: d / n for n in links}}


def snapshot(p: Path) -> tuple[int, int, int, str | None]:
    """(mode, device number, size of a regular file, symlink target) of ``p`` itself (lstat)."""
    st = os.lstat(p)
    size = st.st_size if stat.S_ISREG(st.st_mode) else 0
    return st.st_mode, st.st_rdev, size, os.readlink(p) if stat.S_ISLNK(st.st_mode) else None


def leftovers(d: Path) -> list[str]:
    """Temporary files, directories or locks an output writer left in ``d`` (hidden ``.NAME.*`` entries)."""
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


def child(script: str, *, umask: int | None = None, fsize: int | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` (dedented) in a fresh interpreter on the repository's packages, with a umask and / or a file
    size limit (RLIMIT_FSIZE: a write past it fails with EFBIG, a real "disk full" without root)."""

    def limits() -> None:
        if umask is not None:
            os.umask(umask)
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        preexec_fn=limits,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
        timeout=600,
    )


def spawn(script: str) -> subprocess.Popen:
    """``script`` (dedented) started in a fresh interpreter on the repository's packages (stderr piped)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
