"""``run --save DIR`` as a directory-level transaction (issue 20 D2, D3, D10, D12, D24): the set is written into a
sibling temporary directory and swapped in, so DIR always holds one complete set; a concurrent writer is refused;
every write error is exit 2 with one line; the save directory exists only once a run completes; a faulting run
saves its post-mortem ``state.npz``."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from programs import mutation_hooks
from tests.util.cli import run
from tests.util.hostile import child, hostile_targets, leftovers, snapshot, spawn

#: a save's set: the run's files and its replay set (plena_cli/replay.py; hbm/ and vram/ are directories)
SET = sorted(
    ["arrays.npz", "program.asm", "program.mem", "result.json"]
    + ["config.toml", "replay.sh", "fp_sram.bin", "int_sram.bin", "hbm", "vram"]
)
LINEAR = ["run", "linear", "--variant", "small"]


def contents(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` (a save's subdirectories too) by its path relative to ``d``."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if not p.is_dir()}


@pytest.fixture
def saved(tmp_path, capsys):
    """A directory holding a complete previous save (linear, rows=5)."""
    d = tmp_path / "save"
    code, _out, err = run(capsys, *LINEAR, "--set", "rows=5", "--save", d, "--json")
    assert code == 0, err
    assert sorted(os.listdir(d)) == SET
    return d


# ------------------------------------------------------------------------------------------- D2 / D3


def test_d2_d3_a_full_disk_part_way_keeps_the_previous_set_complete_and_exits_2(saved):
    before = contents(saved)
    script = f"""
        import sys
        from plena_cli.main import main
        sys.exit(main(["run", "linear", "--variant", "small", "--set", "rows=9", "--save", {str(saved)!r}]))
    """
    r = child(script, fsize=8192)  # program.asm and program.mem fit, arrays.npz does not
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "--save" in errors[0] and "File too large" in errors[0], r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert contents(saved) == before  # not one file of the failed run
    assert leftovers(saved.parent) == []


def test_d3_a_result_json_directory_is_refused_before_the_run(saved, capsys, ran):
    (saved / "result.json").unlink()
    (saved / "result.json").mkdir()
    code, _out, err = run(capsys, *LINEAR, "--save", saved)
    assert code == 2 and err.count("\n") == 1 and "result.json" in err and "not a regular file" in err, err
    assert ran == [] and (saved / "result.json").is_dir() and leftovers(saved.parent) == []


def test_d3_an_unwritable_location_is_exit_2_before_the_run(capsys, ran):
    code, _out, err = run(capsys, *LINEAR, "--save", "/sys/plena-sim-save-test")
    assert code == 2 and err.count("\n") == 1 and "--save" in err, err
    assert "internal error" not in err and ran == [] and not os.path.exists("/sys/plena-sim-save-test")


def test_save_refuses_a_directory_holding_files_it_did_not_write(tmp_path, capsys, ran):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    (d / "program.asm").write_text("; mine too")
    code, _out, err = run(capsys, *LINEAR, "--save", d)
    assert code == 2 and "notes.txt" in err and "which a previous save did not write" in err, err
    assert ran == [] and contents(d) == {"notes.txt": b"keep me", "program.asm": b"; mine too"}


def test_save_refuses_a_target_that_is_not_a_directory(tmp_path, capsys, ran):
    targets = hostile_targets(tmp_path / "t")
    plain = tmp_path / "t" / "plain.txt"
    plain.write_text("x")
    targets["regular-file"] = plain
    for kind, target in targets.items():
        if kind in ("directory", "symlink-to-dir"):
            continue  # an empty directory is a fine save target (test below)
        before = snapshot(target)
        code, _out, err = run(capsys, *LINEAR, "--save", target)
        assert code == 2 and "--save" in err and err.count("\n") == 1, (kind, err)
        assert snapshot(target) == before, kind
    assert ran == [] and leftovers(tmp_path / "t") == []


def test_save_through_a_symlink_to_a_directory_replaces_the_directory_and_keeps_the_link(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    for rows in (5, 9):
        code, _out, err = run(capsys, *LINEAR, "--set", f"rows={rows}", "--save", link, "--json")
        assert code == 0, err
        assert link.is_symlink() and os.readlink(link) == str(real)
        assert sorted(os.listdir(real)) == SET
        assert json.loads((real / "result.json").read_text())["params"]["rows"] == rows
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------- D24


def test_d24_save_empty_is_a_usage_error(capsys, ran):
    code, _out, err = run(capsys, *LINEAR, "--save", "")
    assert code == 2 and "--save" in err and "empty" in err, err
    assert ran == []


def test_d24_the_save_directory_is_not_created_when_the_run_is_refused(tmp_path, capsys):
    d = tmp_path / "save"
    for extra in (["--perfetto", "/nonexistent/x.json"], ["--set", "rows=abc"], ["--perfetto", str(d / "t.json")]):
        code, _out, err = run(capsys, *LINEAR, "--save", d, *extra)
        assert code == 2, (extra, err)
        assert not d.exists() and leftovers(tmp_path) == [], extra


# ------------------------------------------------------------------------------------------- the transaction


def test_a_reader_mid_save_sees_the_complete_previous_set(saved, capsys, monkeypatch):
    """At the instant the new arrays are serialised (mid-save), DIR still holds exactly the previous set."""
    before = contents(saved)
    seen: list[dict[str, bytes]] = []
    real = np.savez

    def spy(*a, **kw):
        seen.append(contents(saved))
        return real(*a, **kw)

    monkeypatch.setattr(np, "savez", spy)
    code, _out, err = run(capsys, *LINEAR, "--set", "rows=9", "--save", saved, "--json")
    assert code == 0, err
    assert seen == [before]
    after = contents(saved)
    assert sorted({name.split("/")[0] for name in after}) == SET and after["program.asm"] != before["program.asm"]
    assert json.loads(after["result.json"])["params"]["rows"] == 9


def _inode(path: Path) -> int:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return -1


def test_a_polling_reader_never_sees_a_mix_of_two_runs(saved, capsys):
    """A thread lists and reads DIR (through one directory fd, so one listing is one set) while saves of two
    different runs alternate: every listing is the complete set and every set it reads is one run's."""
    pairs: list[tuple[bytes, bytes]] = []
    stop = threading.Event()
    problems: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                fd = os.open(saved, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                problems.append("DIR missing")
                continue
            try:
                names = sorted(os.listdir(fd))
                if names != SET:
                    if os.stat(fd).st_ino != _inode(saved):  # the swapped-out set, being removed: not DIR now
                        continue
                    problems.append(f"listing {names}")
                    continue
                with (
                    open(os.open("result.json", os.O_RDONLY, dir_fd=fd), "rb") as a,
                    open(os.open("program.asm", os.O_RDONLY, dir_fd=fd), "rb") as b,
                ):
                    pairs.append((a.read(), b.read()))
            except FileNotFoundError:
                pass  # the swapped-out set was cleaned up after this listing: the reader moved on
            finally:
                os.close(fd)

    t = threading.Thread(target=reader)
    t.start()
    produced = {}
    try:
        for rows in (9, 5, 9, 5):
            code, _out, err = run(capsys, *LINEAR, "--set", f"rows={rows}", "--save", saved, "--json")
            assert code == 0, err
            produced[rows] = (saved / "program.asm").read_bytes()
    finally:
        stop.set()
        t.join()
    assert problems == []
    for doc, asm in pairs:
        rows = json.loads(doc)["params"]["rows"]
        assert asm == produced[rows], rows


def test_a_concurrent_writer_is_refused(saved, capsys, ran):
    before = contents(saved)
    with open(saved.parent / ".save.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, _out, err = run(capsys, *LINEAR, "--save", saved)
    assert code == 2 and "another plena-sim" in err and "--save" in err, err
    assert ran == [] and contents(saved) == before


def test_d10_an_interrupt_mid_save_keeps_the_previous_set_and_leaves_nothing(saved, capsys, monkeypatch):
    before = contents(saved)

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", interrupted)
    code, _out, err = run(capsys, *LINEAR, "--set", "rows=9", "--save", saved)
    assert code == 130 and "interrupted" in err
    assert contents(saved) == before and leftovers(saved.parent) == []


def test_d10_sigint_during_a_run_with_save_leaves_no_temporary_and_no_directory(tmp_path):
    """A real SIGINT while the run holds its save transaction (lock and temporary directory): exit 130, nothing
    left beside the never-created DIR."""
    d = tmp_path / "save"
    script = f"""
        import sys
        from plena_cli.main import main
        sys.exit(main(["run", "flashattn_prefill", "--save", {str(d)!r}]))
    """
    proc = spawn(script)
    deadline = time.monotonic() + 120
    while not leftovers(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    _o, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and b"Traceback" not in err, err
    assert leftovers(tmp_path) == [] and not d.exists()


# ------------------------------------------------------------------------------------------- D12


def test_d12_a_faulting_run_saves_its_post_mortem_state(tmp_path, capsys):
    from plena_sim.memory.state import CTRL_LOOP_DEPTH, CTRL_PC

    d = tmp_path / "save"
    with mutation_hooks.inject("pv_v_step_blen"):
        code, out, err = run(capsys, "run", "flashattn_prefill", "--variant", "small", "--save", d, "--json")
        case, m, fault = _replay_fault("flashattn_prefill", "small")
    assert code == 3, err
    assert sorted(os.listdir(d)) == sorted(SET + ["state.npz"])
    doc = json.loads((d / "result.json").read_text())
    assert doc["fault"]["rule"] == "AL-MM" and doc["fault"]["pc"] == fault.pc
    st = np.load(d / "state.npz")
    s = m.state
    assert st["pc"] == fault.pc == s.ctrl[CTRL_PC]
    assert st["record"].tolist() == list(fault.record)
    for name in ("gp", "fp", "areg", "ctrl"):
        assert np.array_equal(st[name], getattr(s, name)), name
    depth = int(s.ctrl[CTRL_LOOP_DEPTH])
    assert depth > 0 and st["loop_start"].tolist() == s.loop_start[:depth].tolist()
    assert st["loop_reg"].tolist() == s.loop_reg[:depth].tolist()
    assert st["loop_count"].tolist() == s.loop_count[:depth].tolist()
    for name, reg in fault.operands.items():  # the faulting instruction's operand registers as the fault saw them
        assert int(st["gp"][int(name[2:])]) == reg, name
    cfg = case.config
    M, V, B = cfg.MLEN, cfg.VLEN, cfg.BLEN
    mat, vec = (fault.operands[r.strip()] for r in fault.text.split(",")[1:3])  # M_MM 0, mat, vec
    assert st["mram_tiles"].tolist() == [mat // (M * M)]
    assert st["vram_rows"].tolist() == list(range(vec // V, vec // V + B))
    assert np.array_equal(st["mram"], s.mram[st["mram_tiles"]])
    assert np.array_equal(st["vram"], s.vram[st["vram_rows"]])


def _replay_fault(name: str, variant: str):
    """The case ``run NAME --variant VARIANT`` builds, its machine after the same run, and the fault."""
    import testbenches
    from testbenches.harness import prepare_machine
    from testbenches.shapes import resolve_params
    from testbenches.variants import get_config

    mod = testbenches.get(name)
    cfg = get_config(variant)
    case = mod.build(resolve_params(dict(mod.DEFAULTS), cfg), cfg)
    m = prepare_machine(case)
    res = m.run(case.assembled(), raise_on_fault=False, name=f"{name}.asm")
    assert res.fault is not None
    return case, m, res.fault
