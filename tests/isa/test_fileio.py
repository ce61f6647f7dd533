"""isa/fileio.py, the one output module (issue 20): atomic files that are refused over anything but a regular file,
checked again at the rename, and directory transactions (swap, the fallback without RENAME_EXCHANGE, the lock)."""

from __future__ import annotations

import os
import stat

import pytest

from isa import fileio
from isa.fileio import DirTransaction, OutputError, atomic_stream, atomic_write, check_output
from tests.util.hostile import hostile_targets, leftovers, snapshot


def test_atomic_write_replaces_a_regular_file_and_creates_a_new_one(tmp_path):
    old = tmp_path / "old.bin"
    old.write_bytes(b"previous")
    atomic_write(old, b"new")
    atomic_write(tmp_path / "new.txt", "text é")
    assert old.read_bytes() == b"new" and (tmp_path / "new.txt").read_text(encoding="utf-8") == "text é"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(old.stat().st_mode) == 0o666 & ~umask
    assert leftovers(tmp_path) == []


def test_every_hostile_target_is_refused_by_each_writer(tmp_path):
    targets = hostile_targets(tmp_path / "t")
    for kind, target in targets.items():
        before = snapshot(target)
        for write in (check_output, lambda p: atomic_write(p, b"x"), lambda p: atomic_stream(p).__enter__()):
            with pytest.raises(OutputError):
                write(target)
        assert snapshot(target) == before, kind
    assert leftovers(tmp_path / "t") == []
    for bad in ("", "a\x00b", str(tmp_path / "missing" / "x")):
        with pytest.raises(OutputError):
            check_output(bad)


def test_a_target_swapped_for_a_symlink_during_the_write_is_not_replaced(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")
    with pytest.raises(OutputError, match="became a symlink"), atomic_stream(target) as fh:
        fh.write(b"new")
        target.unlink()
        target.symlink_to("/dev/full")
    assert os.readlink(target) == "/dev/full" and leftovers(tmp_path) == []


def test_an_exception_in_the_writer_removes_the_temporary_and_keeps_the_file(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")
    with pytest.raises(KeyboardInterrupt), atomic_stream(target) as fh:
        fh.write(b"half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"previous" and leftovers(tmp_path) == []


OWNED = ("a.txt", "b.txt")


def _save(target, **files):
    with DirTransaction(target, OWNED) as tx:
        for name, text in files.items():
            tx.write(name, text)
        tx.commit()


@pytest.mark.parametrize("exchange", [True, False])
def test_a_transaction_replaces_the_whole_set(tmp_path, monkeypatch, exchange):
    if not exchange:  # a file system without RENAME_EXCHANGE: the two-rename fallback
        monkeypatch.setattr(fileio, "_exchange", lambda a, b: False)
    d = tmp_path / "d"
    _save(d, **{"a.txt": "1", "b.txt": "1"})
    _save(d, **{"a.txt": "2"})
    assert sorted(os.listdir(d)) == ["a.txt"] and (d / "a.txt").read_text() == "2"
    assert leftovers(tmp_path) == []


def test_an_uncommitted_transaction_leaves_the_target_and_nothing_else(tmp_path):
    d = tmp_path / "d"
    _save(d, **{"a.txt": "1"})
    with DirTransaction(d, OWNED) as tx:
        tx.write("a.txt", "2")
        with pytest.raises(ValueError, match="not a file of this transaction"):
            tx.write("c.txt", "x")
    assert (d / "a.txt").read_text() == "1" and leftovers(tmp_path) == []
    with DirTransaction(tmp_path / "new", OWNED) as tx:
        tx.write("a.txt", "x")
    assert not (tmp_path / "new").exists() and leftovers(tmp_path) == []


def test_a_second_writer_is_refused_until_the_first_closes(tmp_path):
    d = tmp_path / "d"
    with DirTransaction(d, OWNED) as first:
        with pytest.raises(OutputError, match="another plena-sim process is writing"), DirTransaction(d, OWNED):
            pass
        first.write("a.txt", "1")
        first.commit()
    assert leftovers(tmp_path) == []
    _save(d, **{"b.txt": "2"})
    assert sorted(os.listdir(d)) == ["b.txt"]


def test_a_directory_that_is_not_a_previous_set_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "d"
    d.mkdir()
    (d / "keep.me").write_text("x")
    with pytest.raises(OutputError, match="keep.me"):
        DirTransaction(d, OWNED)
    monkeypatch.chdir(d)
    (d / "keep.me").unlink()
    with pytest.raises(OutputError, match="current directory"):
        DirTransaction(d, OWNED)
    assert os.listdir(d) == [] and leftovers(tmp_path) == []
