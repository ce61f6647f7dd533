"""Shared helpers for the execution-core tests: small configs, HBM type overrides, backends.

Imported by the test modules of tests/core (pytest puts this directory on sys.path); the ``backend``
fixture is in tests/core/conftest.py.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np

from plena_sim.config import FpType, MxType, PlainType, load_config
from plena_sim.machine import Machine

#: MXFP8: E4M3 elements, E8M0 scale, block 8 (the reference config's HBM types)
MXFP8 = MxType(FpType(True, 4, 3), FpType(False, 8, 0), 8)
#: Plain bf16 HBM type
PLAIN_BF16 = PlainType(FpType(True, 8, 7))

SMALL = {
    "MLEN": 16,
    "VLEN": 16,
    "BLEN": 4,
    "HLEN": 4,
    "BROADCAST_AMOUNT": 4,
    "VECTOR_SRAM_SIZE": 128,
    "MATRIX_SRAM_SIZE": 64,  # 128 VRAM rows, 4 MRAM tiles
    "HBM_SIZE": 1 << 16,
    "HBM_M_Prefetch_Amount": 16,
    "HBM_V_Prefetch_Amount": 4,
    "HBM_V_Writeback_Amount": 4,
    "MAX_LOOP_INSTRUCTIONS": 1000,
    "FP_SRAM_SIZE": 64,
    "INT_SRAM_SIZE": 64,
}


def small_cfg(**overrides):
    """A validated small config: M = V = 16, B = H = BA = 4 (DC_EN = 1 latencies)."""
    return load_config(overrides={**SMALL, **overrides})


def with_precision(cfg, **types):
    """A copy of ``cfg`` with some PRECISION types replaced (e.g. HBM_V_ACT_TYPE=PLAIN_BF16)."""
    prec = dict(cfg.precision)
    for k, v in types.items():
        assert k in prec, k
        prec[k] = v
    return dataclasses.replace(cfg, precision=MappingProxyType(prec))


def unvalidated(cfg, **values):
    """A copy of ``cfg`` with raw attribute values, bypassing validation (for CF-* fault tests)."""
    return dataclasses.replace(cfg, **values)


#: the execution backends (the ``backend`` fixture of tests/core/conftest.py runs a test on each)
BACKENDS = ["reference", "numba"]


def machine(backend: str, cfg=None, **overrides) -> Machine:
    return Machine(cfg if cfg is not None else small_cfg(**overrides), backend=backend)


def bf16_bytes(values) -> bytes:
    """Little-endian bf16 bytes of values that are exactly representable in bf16 (test data setup)."""
    a = np.asarray(values, dtype=np.float32)
    u = a.view(np.uint32)
    assert np.all((u & 0xFFFF) == 0), "test data must be bf16-exact"
    return (u >> 16).astype("<u2").tobytes()


def fp_bits(m: Machine, i: int) -> int:
    return int(m.state.fp[i])
