"""The host-memory check counts everything a machine allocates (issue 20, D8 D21 D22): the HBM timing state of
[HBM_TIMING] channels x banks, the matrix unit's MLEN^2 float64 scratch, the DMA block scratch of the largest H_*
instruction; "available" is the least of MemAvailable, the cgroup's remaining memory and RLIMIT_AS; messages name
what limits it."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from plena_sim.config import (
    ConfigError,
    HostLimits,
    check_host_limits,
    default_config_text,
    host_memory_needs,
    load_config,
)
from plena_sim.config import hardware as C

GiB = 1 << 30
HOST = HostLimits(dense=2 * GiB, allocation=24 * GiB, address_space=1 << 47, dense_source="MemAvailable")


def _refusal(overrides: dict | None = None, limits: HostLimits = HOST, **hbm_timing) -> ConfigError:
    cfg = dataclasses.replace(load_config(), **(overrides or {}))  # not validated: checked on HOST alone
    if hbm_timing:
        cfg = dataclasses.replace(cfg, hbm_timing={**cfg.hbm_timing, **hbm_timing})
    with pytest.raises(ConfigError) as ei:
        check_host_limits(cfg, limits)
    return ei.value


def test_hbm_timing_state_is_counted(tmp_path):
    """D8: [HBM_TIMING] channels x banks of 2^28 is 6 GiB of bank state (22 s and 6.4 GB for a one-instruction
    run before); it is now counted, and a state no host holds is refused when the file is loaded."""
    exc = _refusal(channels=64, bank_groups=4096, banks_per_group=1024)
    assert exc.key == "HBM_TIMING.channels", str(exc)
    assert "HBM timing state of 64 channels x 4194304 banks" in str(exc) and "6.0 GiB" in str(exc)
    p = tmp_path / "c.toml"
    extra = (
        "\n[TRANSACTIONAL.HBM_TIMING]\nchannels = 4096\nbank_groups = 4096\nbanks_per_group = 4096\nch_xor_shift = 12\n"
    )
    p.write_text(default_config_text() + extra)
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as ei:
        load_config(p)  # 1.5 TiB of bank state: refused on the real host
    assert ei.value.key == "HBM_TIMING.channels" and "1.5 TiB" in str(ei.value)
    assert time.monotonic() - t0 < 5


def test_matrix_scratch_is_counted():
    """D21: the run allocates [W+72, W+8] and [W, W] float64 (W = max(MLEN, VLEN)): 2 GiB at MLEN 8192."""
    big = dataclasses.replace(load_config(), MLEN=4096, VLEN=8192, HLEN=2048, BLEN=4)
    dense, _lazy = host_memory_needs(big)
    n, what = dense["VLEN"]  # W = VLEN here; with MLEN >= VLEN it is counted against MLEN
    assert n == 4 * 8192 + 8 * (8192 + 72) * (8192 + 8) + 8 * 8192 * 8192 + 9 * 8192 + 16
    assert "float64 scratch of the matrix and vector units" in what
    exc = _refusal({"MLEN": 8192, "VLEN": 8192, "HLEN": 2048, "BLEN": 4})
    assert exc.key in ("MLEN", "VLEN") and "2.0 GiB" in str(exc)


def test_needs_match_the_arrays_the_core_allocates():
    """The counted bytes are the real ones: compared with the arrays of a machine of the same config."""
    from plena_sim.core import host
    from plena_sim.hbm.timing import max_dma_blocks, new_dma_scratch, new_timing_state, timing_params
    from plena_sim.machine import Machine

    cfg = load_config(overrides={"HBM_V_Prefetch_Amount": 1 << 20})
    dense, _lazy = host_memory_needs(cfg)
    m = Machine(cfg)

    def nbytes(x):
        return sum(nbytes(a) for a in x) if isinstance(x, tuple) else x.nbytes

    scratch = nbytes(host._scratch(cfg)) + nbytes(tuple(getattr(m.state, a) for a in ("hm_accum", "hv_accum")))
    scratch += nbytes(tuple(getattr(m.state, a) for a in ("m_accum", "v_accum")))
    assert abs(dense["MLEN"][0] - scratch) < 4096, (dense["MLEN"], scratch)  # + the small V_TOPK buffers
    params = timing_params(cfg)
    assert dense["HBM_TIMING_PRESET"][0] == nbytes(new_timing_state(params)) + 8 * (7 + params.channels)
    blocks = max_dma_blocks(cfg, params)
    assert blocks > 1 << 16  # larger than the preallocated scratch: the run makes a one-off one
    assert dense["HBM_V_Prefetch_Amount"][0] == nbytes(new_dma_scratch(params, blocks))


def test_dma_scratch_of_a_huge_prefetch_is_counted():
    exc = _refusal({"HBM_V_Prefetch_Amount": 1 << 32, "VECTOR_SRAM_SIZE": 1 << 26})
    assert exc.key == "HBM_V_Prefetch_Amount" and "DMA block scratch of one H_PREFETCH_V of 67108864 rows" in str(exc)
    # a transfer of more rows than VRAM holds faults before any work (BD-VROW): only the rows that fit count
    dense, _lazy = host_memory_needs(dataclasses.replace(load_config(), HBM_V_Prefetch_Amount=1 << 32))
    assert "of 4194304 rows" in dense["HBM_V_Prefetch_Amount"][1]


# ------------------------------------------------------------------------------------------- available


def test_available_is_the_least_of_meminfo_cgroup_and_rlimit(monkeypatch):
    monkeypatch.setattr(C, "_meminfo", lambda: {"MemTotal": 64 * GiB, "MemAvailable": 40 * GiB})
    monkeypatch.setattr(C, "_cgroup_available", lambda: (3 * GiB, "the cgroup memory limit (4.0 GiB, 1.0 GiB used)"))
    monkeypatch.setattr(C, "_rlimit_space", lambda: 1 << 47)
    lim = C.host_memory_limits()
    assert lim.dense == 3 * GiB and "cgroup memory limit" in lim.dense_source
    monkeypatch.setattr(C, "_rlimit_space", lambda: 2 * GiB)
    lim = C.host_memory_limits()
    assert lim.dense == 2 * GiB and lim.address_space == 2 * GiB and "RLIMIT_AS" in lim.dense_source
    monkeypatch.setattr(C, "_cgroup_available", lambda: None)
    monkeypatch.setattr(C, "_rlimit_space", lambda: 1 << 47)
    lim = C.host_memory_limits()
    assert lim.dense == 40 * GiB and lim.dense_source == "MemAvailable"


def test_cgroup_files_are_read(tmp_path, monkeypatch):
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text("4294967296\n")
    (v2 / "job" / "memory.current").write_text("1073741824\n")
    (v2 / "job" / "memory.stat").write_text("anon 100\ninactive_file 536870912\n")
    (v2 / "memory.max").write_text("max\n")
    avail = C._cgroup_v2_available(v2, "/job")
    assert avail == (4 * GiB - GiB + GiB // 2, "the cgroup memory limit (4.0 GiB, 512.0 MiB in use)")
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.limit_in_bytes").write_text(str(1 << 33))
    (v1 / "memory.usage_in_bytes").write_text(str(1 << 31))
    (v1 / "memory.stat").write_text("total_inactive_file 0\n")
    assert C._cgroup_v1_available(v1, "/not/mounted/here") == (
        6 * GiB,
        "the cgroup memory limit (8.0 GiB, 2.0 GiB in use)",
    )
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # unlimited
    assert C._cgroup_v1_available(v1, "/") is None


def test_refusal_names_what_limits_the_host():
    limits = dataclasses.replace(HOST, dense=GiB, dense_source="the cgroup memory limit (2.0 GiB, 1.0 GiB in use)")
    exc = _refusal({"FP_SRAM_SIZE": 1 << 30}, limits)
    assert exc.key == "FP_SRAM_SIZE"
    assert "1.0 GiB available on this host (the cgroup memory limit (2.0 GiB, 1.0 GiB in use))" in str(exc)


def test_out_of_memory_message_names_the_cause(monkeypatch):
    """D22: "out of host memory ()" had an empty reason and always blamed VECTOR_SRAM_SIZE/HBM_SIZE."""
    monkeypatch.setattr(
        C,
        "host_memory_limits",
        lambda: HostLimits(dense=GiB, allocation=2 * GiB, address_space=4 * GiB, dense_source="RLIMIT_AS (4.0 GiB)"),
    )
    msg = C.out_of_memory_message(MemoryError())
    assert "()" not in msg and "a memory allocation failed" in msg
    assert "1.0 GiB available (RLIMIT_AS (4.0 GiB))" in msg
    msg = C.out_of_memory_message(MemoryError("Unable to allocate 9.0 TiB for an array with shape (1, 2)"))
    assert "Unable to allocate 9.0 TiB" in msg and "VECTOR_SRAM_SIZE" not in msg


def test_hbm_pool_growth_failure_is_a_config_error(monkeypatch):
    from plena_sim.hbm.storage import Hbm

    h = Hbm(1 << 30)
    real = np.zeros

    def no_memory(shape, dtype=float):
        if isinstance(shape, tuple) and len(shape) == 2:
            raise MemoryError
        return real(shape, dtype)

    monkeypatch.setattr(np, "zeros", no_memory)
    with pytest.raises(ConfigError) as ei:
        h.reserve(1000)
    assert ei.value.key == "HBM_SIZE" and "HBM pages" in str(ei.value) and "available" in str(ei.value)


def test_a_program_too_large_for_the_host_is_refused_before_its_tables_are_built():
    """D6: a 5 x 10^7-word .mem took 44 s and 7 GB (the core's per-instruction tables, ~140 bytes each) before
    anything was refused; the tables are now counted against the memory available."""
    small = HostLimits(dense=GiB, allocation=2 * GiB, address_space=4 * GiB, dense_source="the cgroup memory limit")
    C.check_program_memory(GiB // C.PROGRAM_BYTES_PER_INSTRUCTION, small)  # exactly fits
    with pytest.raises(MemoryError) as ei:
        C.check_program_memory(50_000_000, small)
    assert str(ei.value) == (
        "a program of 50,000,000 instructions needs 7.5 GiB for the core's per-instruction tables, "
        "more than the 1.0 GiB available (the cgroup memory limit)"
    )


def test_machine_run_checks_the_program_size(monkeypatch):
    from plena_sim.machine import Machine

    probed = []

    def tiny_host():
        probed.append(True)
        return HostLimits(dense=GiB, allocation=2 * GiB, address_space=4 * GiB, dense_source="MemAvailable")

    m = Machine(load_config(), backend="reference")
    monkeypatch.setattr(C, "host_memory_limits", tiny_host)
    words = np.zeros(8_000_000, dtype=np.uint32)  # 1.2 GiB of tables: refused before any decode
    with pytest.raises(MemoryError, match="a program of 8,000,000 instructions needs 1.2 GiB"):
        m.run(words)
    assert probed == [True]
