"""Output files of every flag (issue 20 D1, D10, D16, D17, D23 save side, D24): a path that is not a regular file
after resolving symlinks is refused with exit 2 before the run and left exactly as it was; a symlink to a regular
file writes that file (the link stays); a missing directory is refused by every flag; files honour the umask;
two outputs of one command never share a path; an interrupted or failing write leaves the previous file."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import numpy as np
import pytest

from tests.util.cli import run
from tests.util.hostile import child, hostile_targets, leftovers, snapshot, spawn

PROGRAM = "S_ADDI_INT gp1, gp0, 64\nV_ADD_VV gp1, gp1, gp1\n"

#: what the refusal of each hostile target says
WHY = {
    "device": "character device",
    "fifo": "FIFO",
    "directory": "directory",
    "symlink-to-device": "character device",
    "symlink-to-fifo": "FIFO",
    "symlink-to-dir": "directory",
    "symlink-to-dev-full": "character device",
    "dangling-symlink": "dangling symlink",
    "symlink-loop": "symbolic links",
}


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.asm"
    p.write_text(PROGRAM)
    return p


@pytest.fixture
def results_db(tmp_path):
    from studies.sweep import store

    path = tmp_path / "sweep.sqlite"
    store.Store(path).close()
    return path


#: flag -> argv with "{T}" for the output file (P: the program, DB: a results database, SPEC: a sweep spec)
FILE_FLAGS = {
    "asm -o": ["asm", "{P}", "-o", "{T}"],
    "--dump-hbm": ["exec", "{P}", "--dump-hbm", "0:64={T}"],
    "--dump-vram": ["exec", "{P}", "--dump-vram", "0:1={T}"],
    "--dump-fp-sram": ["exec", "{P}", "--dump-fp-sram", "{T}"],
    "trace --perfetto": ["trace", "{P}", "--perfetto", "{T}"],
    "run --perfetto": ["run", "linear", "--variant", "small", "--perfetto", "{T}"],
    "--csv": ["sweep", "report", "{DB}", "--csv", "{T}"],
    "--parquet": ["sweep", "report", "{DB}", "--parquet", "{T}"],
    "--out": ["sweep", "{SPEC}", "--out", "{T}", "--threads", "--workers", "1"],
}


def _argv(flag: str, target: Path, prog: Path, db: Path, spec: Path) -> list[str]:
    subst = {"{P}": str(prog), "{T}": str(target), "{DB}": str(db), "{SPEC}": str(spec)}
    out = []
    for a in FILE_FLAGS[flag]:
        for k, v in subst.items():
            a = a.replace(k, v)
        out.append(a)
    return out


@pytest.fixture
def spec(tmp_path):
    from plena_cli.sweep_command import EXAMPLE

    p = tmp_path / "spec.toml"
    p.write_text(EXAMPLE)
    return p


@pytest.mark.parametrize("flag", FILE_FLAGS)
def test_d1_hostile_output_paths_are_refused_before_the_run_and_left_as_they_were(
    flag, tmp_path, capsys, prog, results_db, spec, ran
):
    targets = hostile_targets(tmp_path / "t")
    for kind, target in targets.items():
        before = snapshot(target)
        code, _out, err = run(capsys, *_argv(flag, target, prog, results_db, spec))
        assert code == 2, (flag, kind, err)
        line = err.strip()
        assert "\n" not in line and "Traceback" not in line, (flag, kind, err)
        assert WHY[kind] in line and flag.split()[-1] in line, (flag, kind, line)
        assert snapshot(target) == before, (flag, kind)
        assert ran == [], (flag, kind, "simulated before refusing")
    assert leftovers(tmp_path / "t") == []
    made = sorted(p.name for p in targets.values() if p.parent == tmp_path / "t")
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == made


@pytest.mark.parametrize("flag", [f for f in FILE_FLAGS if f != "--out"])
def test_d1_a_symlink_to_a_regular_file_writes_that_file_and_keeps_the_link(
    flag, tmp_path, capsys, prog, results_db, spec
):
    real = tmp_path / "real" / "target.out"
    real.parent.mkdir()
    real.write_bytes(b"old")
    link = tmp_path / "link.out"
    link.symlink_to(real)
    code, _out, err = run(capsys, *_argv(flag, link, prog, results_db, spec))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() != b"old" and real.stat().st_size > 3
    assert leftovers(tmp_path) == [] and leftovers(real.parent) == []


@pytest.mark.parametrize("flag", FILE_FLAGS)
def test_d17_a_missing_output_directory_is_refused_before_the_run(flag, tmp_path, capsys, prog, results_db, spec, ran):
    target = tmp_path / "missing" / "out.file"
    code, _out, err = run(capsys, *_argv(flag, target, prog, results_db, spec))
    assert code == 2 and "does not exist" in err and "\n" not in err.strip(), err
    assert not target.parent.exists() and ran == []


def test_d17_run_perfetto_into_a_missing_directory_never_builds_the_case(capsys, monkeypatch):
    from studies import testbench_run

    monkeypatch.setattr(testbench_run, "build_case", lambda *a, **k: pytest.fail("built before refusing"))
    code, _out, err = run(capsys, "run", "linear", "--variant", "small", "--perfetto", "/nonexistent/f.json")
    assert code == 2 and "--perfetto" in err and "does not exist" in err


@pytest.mark.parametrize("flag", ["--save", "--plots"])
def test_d17_directory_outputs_refuse_a_missing_parent_like_every_other_flag(flag, tmp_path, capsys, results_db):
    target = tmp_path / "missing" / "deep"
    argv = (
        ["run", "linear", "--variant", "small", "--save", target]
        if flag == "--save"
        else ["sweep", "report", results_db, "--plots", target]
    )
    code, _out, err = run(capsys, *argv)
    assert code == 2 and flag in err and "does not exist" in err, err
    assert not (tmp_path / "missing").exists()


# ------------------------------------------------------------------------------------------- D24


def test_d24_fp_values_with_an_empty_item_are_a_usage_error(capsys, prog, ran):
    for text in ("1,,2", "1,2,", ",1", ""):
        code, _out, err = run(capsys, "exec", prog, "--fp", text)
        assert code == 2 and "--fp" in err and "empty" in err, (text, err)
    assert ran == []
    code, _out, err = run(capsys, "exec", prog, "--fp", " 1, 2 ", "--dump-fp-sram", prog.parent / "f.npy")
    assert code == 0, err
    assert np.load(prog.parent / "f.npy")[:3].tolist() == [1.0, 2.0, 0.0]


def test_d24_two_outputs_of_one_command_never_share_a_path(tmp_path, capsys, prog, ran):
    x = tmp_path / "x.out"
    x.write_bytes(b"")
    alias = tmp_path / "alias.out"
    alias.symlink_to(x)
    same = [
        ["--dump-vram", f"0:1={x}", "--dump-vram", f"64:1={x}"],
        ["--dump-vram", f"0:1={x}", "--dump-fp-sram", str(x)],
        ["--dump-hbm", f"0:8={x}", "--dump-hbm", f"8:8={alias}"],
        ["--dump-hbm", f"0:8={x}", "--dump-vram", f"0:1={tmp_path}/./x.out"],
    ]
    for extra in same:
        code, _out, err = run(capsys, "exec", prog, *extra)
        assert code == 2 and "same file" in err, (extra, err)
        assert x.read_bytes() == b""
    assert ran == []


def test_d24_an_output_never_overwrites_an_input(tmp_path, capsys, prog, ran):
    code, _out, err = run(capsys, "asm", prog, "-o", prog)
    assert code == 2 and "input" in err, err
    assert prog.read_text() == PROGRAM
    img = tmp_path / "img.bin"
    img.write_bytes(bytes(64))
    for extra in (["--dump-hbm", f"0:64={prog}"], ["--hbm", str(img), "--dump-hbm", f"0:64={img}"]):
        code, _out, err = run(capsys, "exec", prog, *extra)
        assert code == 2 and "input" in err, (extra, err)
    assert prog.read_text() == PROGRAM and img.read_bytes() == bytes(64) and ran == []


# ------------------------------------------------------------------------------------------- D16


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_d16_output_files_honour_the_umask(tmp_path, prog, umask):
    d = tmp_path / "o"
    d.mkdir()
    script = f"""
        import sys
        from plena_cli.main import main
        d, p = {str(d)!r}, {str(prog)!r}
        codes = [
            main(["asm", p, "-o", d + "/p.mem"]),
            main(["exec", p, "--dump-hbm", "0:64=" + d + "/h.bin", "--dump-vram", "0:1=" + d + "/v.npy",
                  "--dump-fp-sram", d + "/f.npy"]),
            main(["trace", p, "--perfetto", d + "/t.json"]),
            main(["run", "linear", "--variant", "small", "--save", d + "/save", "--json"]),
        ]
        sys.exit(max(codes))
    """
    r = child(script, umask=umask)
    assert r.returncode == 0, r.stderr
    files = [p for p in d.rglob("*") if p.is_file()]
    assert sorted(p.name for p in files if p.parent == d) == sorted(["p.mem", "h.bin", "v.npy", "f.npy", "t.json"])
    saved = sorted(str(p.relative_to(d / "save")) for p in files if p.parent != d)
    (vram_rows,) = [name for name in saved if name.startswith("vram/rows-")]  # the NaN-poisoned output rows
    assert saved == sorted(
        ["program.asm", "program.mem", "arrays.npz", "result.json", "config.toml", "replay.sh", "fp_sram.bin"]
        + ["int_sram.bin", "hbm/manifest.json", "hbm/seg-0.bin", vram_rows]
    )
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask, p
    for folder in (d / "save", d / "save" / "hbm", d / "save" / "vram"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask, folder


# ------------------------------------------------------------------------------------------- D10 / D23


def test_d10_an_interrupted_hbm_dump_leaves_the_previous_file_and_no_temporary(tmp_path, capsys, prog, monkeypatch):
    from plena_sim.hbm.storage import Hbm

    out = tmp_path / "h.bin"
    out.write_bytes(b"previous")
    real = Hbm.iter_chunks

    def interrupted(self, *a, **kw):
        for k, chunk in enumerate(real(self, *a, **kw)):
            if k == 1:
                raise KeyboardInterrupt
            yield chunk

    monkeypatch.setattr(Hbm, "iter_chunks", interrupted)
    code, _out, err = run(capsys, "exec", prog, "--dump-hbm", f"0:{3 << 24}={out}")
    assert code == 130 and "interrupted" in err
    assert out.read_bytes() == b"previous" and leftovers(tmp_path) == []


def test_d23_an_interrupted_save_image_leaves_the_previous_image_and_no_temporary(tmp_path, monkeypatch):
    from plena_sim.config import default_config
    from plena_sim.hbm.storage import Hbm
    from plena_sim.memory.image import ImageBuilder

    b = ImageBuilder(config=default_config())
    b.add("x", np.ones((64, 64), dtype=np.float32), "HBM_V_ACT_TYPE", address=0)
    b.add("y", np.ones((64, 64), dtype=np.float32), "HBM_V_ACT_TYPE", address=3 << 24)
    raw = tmp_path / "img.bin"
    raw.write_bytes(b"previous")
    (tmp_path / "img.bin.json").write_text("{}")
    real = Hbm.iter_chunks

    def interrupted(self, *a, **kw):
        for k, chunk in enumerate(real(self, *a, **kw)):
            if k == 1:
                raise KeyboardInterrupt
            yield chunk

    monkeypatch.setattr(Hbm, "iter_chunks", interrupted)
    with pytest.raises(KeyboardInterrupt):
        b.save(raw)
    assert raw.read_bytes() == b"previous" and (tmp_path / "img.bin.json").read_text() == "{}"
    assert leftovers(tmp_path) == []


def test_d23_save_image_refuses_a_device_and_a_fifo(tmp_path):
    from plena_sim.config import default_config
    from plena_sim.errors import ImageError
    from plena_sim.memory.image import ImageBuilder

    b = ImageBuilder(config=default_config())
    b.add("x", np.ones((4, 64), dtype=np.float32), "HBM_V_ACT_TYPE", address=0)
    targets = hostile_targets(tmp_path / "t")
    for kind in ("device", "fifo", "symlink-to-dev-full"):
        before = snapshot(targets[kind])
        with pytest.raises(ImageError, match=WHY[kind]):
            b.save(targets[kind], tmp_path / "m.json")
        assert snapshot(targets[kind]) == before and not (tmp_path / "m.json").exists()
        with pytest.raises(ImageError, match=WHY[kind]):
            b.save(tmp_path / "ok.bin", targets[kind])
        assert snapshot(targets[kind]) == before and not (tmp_path / "ok.bin").exists()
    assert leftovers(tmp_path / "t") == [] and leftovers(tmp_path) == []


def test_d23_sram_dump_writers_are_atomic_under_a_full_disk(tmp_path):
    fp, ints = tmp_path / "fp.bin", tmp_path / "int.bin"
    fp.write_bytes(b"previous-fp")
    ints.write_bytes(b"previous-int")
    script = f"""
        import numpy as np
        from plena_sim.errors import ImageError
        from plena_sim.memory.sram_io import save_fp_sram_dump, save_int_sram_dump
        for fn, path in ((save_fp_sram_dump, {str(fp)!r}), (save_int_sram_dump, {str(ints)!r})):
            try:
                fn(path, np.ones(1 << 16, dtype=np.uint32))
            except ImageError as exc:
                print("refused:", exc)
    """
    r = child(script, fsize=4096)
    assert r.returncode == 0 and r.stdout.count("refused:") == 2 and "File too large" in r.stdout, r.stdout + r.stderr
    assert fp.read_bytes() == b"previous-fp" and ints.read_bytes() == b"previous-int"
    assert leftovers(tmp_path) == []


def test_d10_sigterm_during_a_large_dump_leaves_no_temporary(tmp_path, prog):
    """A real signal during a 512 MiB --dump-hbm (the child installs a SIGTERM handler that raises, as the CLI's
    own does): no partial dump and no temporary file, whatever instant the signal lands."""
    out = tmp_path / "h.bin"
    script = f"""
        import signal, sys
        def stop(signum, frame):
            raise SystemExit(143)
        signal.signal(signal.SIGTERM, stop)
        from plena_cli.main import main
        sys.exit(main(["exec", {str(prog)!r}, "--dump-hbm", "0:{1 << 29}={out}"]))
    """
    interrupted = 0
    for delay_polls in (0, 3, 10):
        out.unlink(missing_ok=True)
        proc = spawn(script)
        seen = 0
        while proc.poll() is None and seen <= delay_polls:
            if leftovers(tmp_path):
                seen += 1
            os.sched_yield()
        proc.send_signal(signal.SIGTERM)
        _o, err = proc.communicate(timeout=120)
        assert b"Traceback" not in err, err
        assert leftovers(tmp_path) == [], (delay_polls, err)
        if proc.returncode == 143:
            interrupted += 1
            assert not out.exists()
        else:
            assert proc.returncode == 0 and out.stat().st_size == 1 << 29
    assert interrupted >= 1
