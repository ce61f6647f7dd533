"""Hard limits with clear messages: host memory checked at config time (dense arrays vs available RAM,
lazily-mapped VRAM / MRAM vs the largest allocation), absurd HBM sizes, instruction budget and
MAX_LOOP_INSTRUCTIONS messages, unwritable outputs; the CLI shows no traceback for user errors and
shows one with ``--debug`` for bugs.
"""

from __future__ import annotations

import errno

import pytest
from fuzzlib import SMALL, small_config

from plena_sim.config import ConfigError, HostLimits, check_host_limits, host_memory_limits, load_config
from plena_sim.config import hardware as C
from plena_sim.hbm.storage import Hbm, HbmTooLarge
from tests.util.hostile import child, leftovers

GiB = 1 << 30
SMALL_HOST = HostLimits(dense=64 << 20, allocation=1 * GiB, address_space=4 * GiB)


def _refused(key: str, overrides: dict, limits=SMALL_HOST) -> str:
    cfg = small_config()
    # build the config without the host check, then check it against the synthetic host
    import dataclasses

    big = dataclasses.replace(cfg, **overrides)
    with pytest.raises(ConfigError) as ei:
        check_host_limits(big, limits)
    assert ei.value.key == key, str(ei.value)
    assert str(ei.value).startswith(f"{key}: ")
    return str(ei.value)


def test_dense_arrays_must_fit_available_memory():
    msg = _refused("FP_SRAM_SIZE", {"FP_SRAM_SIZE": 1 << 26})  # 128 MiB of bf16
    assert "written wholesale" in msg and "available on this host" in msg
    _refused("INT_SRAM_SIZE", {"INT_SRAM_SIZE": 1 << 25})  # 128 MiB of u32
    msg = _refused("MLEN", {"MLEN": 4096, "VLEN": 4096, "HLEN": 1024})  # hm_accum 4 x 4096^2 f32 = 256 MiB
    assert "hm_accum" in msg
    msg = _refused("HBM_SIZE", {"HBM_SIZE": 1 << 50})  # 128 GiB page table
    assert "page table" in msg


def test_lazy_arrays_may_exceed_ram_but_not_the_largest_allocation():
    # 512 MiB of VRAM on a host with 64 MiB available: fine, VRAM is mapped lazily
    check_host_limits(__import__("dataclasses").replace(small_config(), VECTOR_SRAM_SIZE=1 << 24), SMALL_HOST)
    msg = _refused("VECTOR_SRAM_SIZE", {"VECTOR_SRAM_SIZE": 1 << 26})  # 2 GiB > 1 GiB allocation
    assert "mapped lazily" in msg and "largest allocation" in msg
    _refused("MATRIX_SRAM_SIZE", {"MATRIX_SRAM_SIZE": 32 << 20})  # 2M tiles x 1 KiB = 2 GiB
    host = HostLimits(dense=64 << 20, allocation=3 * GiB, address_space=4 * GiB)
    import dataclasses

    both = dataclasses.replace(small_config(), VECTOR_SRAM_SIZE=(3 * GiB) // 32 - 1, MATRIX_SRAM_SIZE=1 << 24)
    with pytest.raises(ConfigError, match="address space of this process"):
        check_host_limits(both, host)


def test_load_config_checks_the_real_host(monkeypatch):
    load_config()  # the reference config fits
    lim = host_memory_limits()
    assert lim.dense > 0 and lim.allocation > 0 and lim.address_space >= lim.allocation
    with pytest.raises(ConfigError) as ei:  # 2^42 rows x 64 x 2 B = 512 TiB
        load_config(overrides={"VECTOR_SRAM_SIZE": 1 << 42})
    assert ei.value.key == "VECTOR_SRAM_SIZE"
    monkeypatch.setattr(C, "host_memory_limits", lambda: SMALL_HOST)
    with pytest.raises(ConfigError) as ei:
        load_config(overrides={**SMALL, "FP_SRAM_SIZE": 1 << 26})
    assert ei.value.key == "FP_SRAM_SIZE"
    load_config(overrides={**SMALL, "VECTOR_SRAM_SIZE": 1 << 24})  # lazily mapped: accepted


def test_absurd_hbm_sizes_are_config_errors(monkeypatch):
    with pytest.raises(ConfigError) as ei:
        load_config(overrides={"HBM_SIZE": 1 << 60})
    assert ei.value.key == "HBM_SIZE"
    with pytest.raises(HbmTooLarge) as ei:
        Hbm(1 << 60)
    assert ei.value.key == "HBM_SIZE" and isinstance(ei.value, ConfigError)
    monkeypatch.setattr(C, "host_memory_limits", lambda: SMALL_HOST)
    with pytest.raises(HbmTooLarge, match="page table"):
        Hbm(1 << 45)  # 4 GiB table > 64 MiB available
    assert Hbm(1 << 34).size == 1 << 34  # 2 MiB table: fine


# ------------------------------------------------------------------------------------------- CLI


def _cli(argv, capsys):
    from plena_cli.main import main

    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _small_set():
    return [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "p.asm"
    p.write_text("S_ADDI_INT gp1, gp0, 5\n")
    return p


def test_cli_unwritable_outputs(tmp_path, prog, capsys, monkeypatch):
    code, _, err = _cli(["exec", prog, *_small_set(), "--dump-fp-sram", tmp_path], capsys)
    assert code == 2 and "is a directory" in err and "Traceback" not in err
    code, _, err = _cli(["exec", prog, *_small_set(), "--dump-hbm", f"0:16={tmp_path / 'no' / 'x.bin'}"], capsys)
    assert code == 2 and "does not exist" in err

    import plena_cli.paths as paths

    def disk_full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(paths, "atomic_write", disk_full)
    code, _, err = _cli(["exec", prog, *_small_set(), "--dump-fp-sram", tmp_path / "f.npy"], capsys)
    assert code == 2 and "cannot write" in err and "No space left" in err and "Traceback" not in err
    # a real full disk for the streamed dump (a file size limit: EFBIG on the first write past it)
    script = f"""
        import sys
        from plena_cli.main import main
        sys.exit(main(["exec", {str(prog)!r}, *{_small_set()!r}, "--dump-hbm", "0:65536={tmp_path / "x.bin"}"]))
    """
    r = child(script, fsize=4096)
    assert r.returncode == 2 and "--dump-hbm" in r.stderr and "File too large" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "x.bin").exists() and leftovers(tmp_path) == []


def test_cli_hbm_dump_streams_whole_hbm(tmp_path, prog, capsys):
    """A dump of the whole (sparse) HBM is streamed to the file, never held in memory at once."""
    size = 3 << 24  # 48 MiB, 3 chunks
    img = tmp_path / "img.bin"
    img.write_bytes(b"\x5a" * 100)
    out = tmp_path / "all.bin"
    code, _, err = _cli(
        [
            "exec",
            prog,
            *_small_set(),
            "--set",
            f"HBM_SIZE={size}",
            "--hbm-at",
            f"{size - 100}={img}",
            "--dump-hbm",
            f"0:{size}={out}",
        ],
        capsys,
    )
    assert code == 0, err
    assert out.stat().st_size == size
    with open(out, "rb") as fh:
        fh.seek(size - 101)
        assert fh.read() == b"\x00" + b"\x5a" * 100


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--max-instructions", "-1"], "--max-instructions"),
        (["--set", "VECTOR_SRAM_SIZE=4398046511104"], "VECTOR_SRAM_SIZE"),
        (["--set", "HBM_SIZE=1152921504606846976"], "HBM_SIZE"),
        (["--set", "MLEN=0"], "MLEN"),
        (["--set", "NOPE=1"], "NOPE"),
        (["--hbm", "/nonexistent/img.bin"], "img.bin"),
        (["--fp", "1,x"], "--fp"),
    ],
)
def test_cli_user_errors_have_no_traceback(extra, needle, prog, capsys):
    code, out, err = _cli(["exec", prog, *_small_set(), *extra], capsys)
    assert code == 2, err
    assert needle in err and "Traceback" not in out + err
    assert err.startswith("error:")


def test_cli_budget_fault_is_exit_3_with_message(tmp_path, capsys):
    p = tmp_path / "spin.asm"
    p.write_text("C_LOOP_START gp1, 4194303\nS_ADDI_INT gp2, gp2, 1\nC_LOOP_END gp1\n")
    code, _, err = _cli(["exec", p, *_small_set(), "--max-instructions", "500"], capsys)
    assert code == 3 and "max_instructions=500" in err and "BUDGET" in err
    p.write_text(
        "C_LOOP_START gp1, 4194303\nC_LOOP_START gp3, 4194303\nS_ADDI_INT gp2, gp2, 1\nC_LOOP_END gp3\nC_LOOP_END gp1\n"
    )
    code, _, err = _cli(["exec", p, *_small_set()], capsys)
    assert code == 3 and "LP-RUNAWAY" in err and f"MAX_LOOP_INSTRUCTIONS={SMALL['MAX_LOOP_INSTRUCTIONS']}" in err


def test_cli_bugs_show_a_traceback_only_with_debug(prog, capsys, monkeypatch):
    import plena_sim.machine as machine

    def boom(self, *a, **k):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(machine.Machine, "run", boom)
    code, out, err = _cli(["exec", prog, *_small_set()], capsys)
    assert code not in (0, 2, 3) and "internal error" in err and "simulated bug" in err
    assert "Traceback" not in out + err and "--debug" in err
    with pytest.raises(RuntimeError, match="simulated bug"):
        _cli(["--debug", "exec", prog, *_small_set()], capsys)


def test_cli_host_out_of_memory_is_a_clear_error(prog, capsys, monkeypatch):
    import plena_sim.machine as machine

    def oom(self, *a, **k):
        raise MemoryError("Unable to allocate 9 TiB")

    monkeypatch.setattr(machine.Machine, "run", oom)
    code, out, err = _cli(["exec", prog, *_small_set()], capsys)
    assert code == 2 and "out of host memory" in err and "Traceback" not in out + err


@pytest.mark.parametrize("key", ["HBM_M_Prefetch_Amount", "HBM_V_Prefetch_Amount", "HBM_V_Writeback_Amount"])
def test_dma_amounts_are_bounded(key):
    """P_M = ceil(value / MLEN) * MLEN and the row offsets of one transfer must stay in int64."""
    with pytest.raises(ConfigError) as ei:
        load_config(overrides={key: (1 << 63) - 1})
    assert ei.value.key == key and "2^32 rows" in str(ei.value)
    load_config(overrides={key: 1 << 32})


def test_config_integers_fit_int64():
    for key in ("MAX_LOOP_INSTRUCTIONS", "DC_EN", "HBM_WIDTH"):
        with pytest.raises(ConfigError, match="< 2\\^63") as ei:
            load_config(overrides={key: 1 << 63})
        assert ei.value.key == key
