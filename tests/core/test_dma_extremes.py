"""Huge DMA amounts: both backends fault (or finish) without building per-row host structures.

Regressions from the reliability fuzzing: the reference built a P-long offset list before any check
(MemoryError for HBM_V_Prefetch_Amount = 2^31), and the core's store capacity check counted a page once
per row sharing it (reserving 2^21 pages = 128 GiB for a 2^20-row store into a few MiB).
"""

import pytest

from plena_sim.config import load_config
from plena_sim.machine import Machine

SMALL = {
    "MLEN": 16,
    "VLEN": 16,
    "BLEN": 4,
    "HLEN": 4,
    "BROADCAST_AMOUNT": 4,
    "VECTOR_SRAM_SIZE": 256,
    "MATRIX_SRAM_SIZE": 64,
    "HBM_SIZE": 1 << 16,
    "HBM_M_Prefetch_Amount": 16,
}


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_huge_prefetch_amount_faults_at_the_first_row_outside_vram(backend):
    cfg = load_config(overrides={**SMALL, "HBM_V_Prefetch_Amount": 2**31})
    # a budget that admits the 2^31 + 1 work units of the instruction (the default 10^9 does not, see below)
    res = Machine(cfg, backend=backend).run("H_PREFETCH_V gp0, gp0, a0, 0, 0", 1 << 40, raise_on_fault=False)
    assert res.fault is not None and res.fault.rule == "BD-VROW"
    assert "row 256" in str(res.fault)


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_huge_prefetch_amount_is_over_the_default_work_budget(backend):
    cfg = load_config(overrides={**SMALL, "HBM_V_Prefetch_Amount": 2**31})
    res = Machine(cfg, backend=backend).run("H_PREFETCH_V gp0, gp0, a0, 0, 0", raise_on_fault=False)
    assert res.fault is not None and res.fault.rule == "BUDGET" and res.instructions == 0
    assert res.fault.record == (res.fault.record[0], 0, -1, 0, -1, 10**9, 0, 2**31)


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_huge_prefetch_amount_faults_at_the_first_row_outside_hbm(backend):
    cfg = load_config(overrides={**SMALL, "VECTOR_SRAM_SIZE": 1 << 20, "HBM_V_Prefetch_Amount": 1 << 20})
    res = Machine(cfg, backend=backend).run("H_PREFETCH_V gp0, gp0, a0, 0, 0", raise_on_fault=False)
    # MXFP8 rows of 16 bytes: element range of row 4096 is the first to pass 2^16
    assert res.fault is not None and res.fault.rule == "BD-HBM"
    assert res.fault.record[4] == 4096


def test_store_capacity_counts_each_page_once():
    cfg = load_config(overrides={"HBM_V_Writeback_Amount": 4096, "VECTOR_SRAM_SIZE": 8192})
    m = Machine(cfg)
    res = m.run("H_STORE_V gp0, gp0, a0, 0, 0", raise_on_fault=False)
    assert res.fault is None
    # 4096 rows x 64 B = 256 KiB of elements (SCALE = 0 puts the scales inside them) -> 4 pages written;
    # the pool never grew past need
    assert m.hbm.pages_used == 4 and m.hbm.high_water == 4096 * 64
    assert m.hbm.pages.shape[0] <= 16
