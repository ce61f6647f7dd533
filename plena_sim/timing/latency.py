"""Serial-mode instruction latencies (timing.md §2), evaluated from the opcode table's latency keys.

One job: turn ``Instr.latency`` strings of :mod:`isa.table` (``"SYSTOLIC_PROCESSING_OVERHEAD+MLEN"``,
``"VECTOR_ADD_CYCLES"``, ``"VLEN"``, ``"1"``, ``"VECTOR_MAX_CYCLES*E"``, ``"HBM"``) into numbers for a
configuration, in one place, so the reference interpreter and the Numba core charge the same cycles.

* :func:`latency_table` ``(cfg) -> int64[64]``: the base latency per opcode (0 for non-instructions).
  Special entries: V_TOPK holds the per-expert factor ``K(VECTOR_MAX_CYCLES)`` (the latency is
  ``table[op] * E`` with E = 32 / 128 from the policy); H_* entries hold 0 (their latency comes from
  the HBM model).
* :data:`NOOP_IF_RD0` ``bool[64]``: opcodes that are zero-latency no-ops when ``f.rd == 0``
  (S_*_FP arithmetic, V_RED_SUM, V_RED_MAX).
* :func:`instruction_latency` ``(table, opcode, f_rd, f_rs3) -> int`` (Numba-compiled,
  callable from Python and from other ``@njit`` code): the latency charged by one retired non-DMA
  instruction.
* H_* latencies are not in this table: they come from the HBM timing model
  (:func:`plena_sim.hbm.timing.dma_blocks` and ``dma_latency``, called by the run loop with the start cycle), the
  single source of DMA cost; :func:`instruction_latency` returns 0 for them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from isa.table import FIELDS, INSTRUCTIONS, TOPK_POLICIES

__all__ = [
    "latency_table",
    "NOOP_IF_RD0",
    "KIND",
    "KIND_FIXED",
    "KIND_TIMES_E",
    "KIND_HBM",
    "instruction_latency",
    "evaluate_latency_expr",
    "topk_experts",
]

N_OPCODES = 1 << FIELDS["opcode"].width
_TOPK_E = np.array([e for e, _k in TOPK_POLICIES], dtype=np.int64)
KIND_FIXED = 0
KIND_TIMES_E = 1
KIND_HBM = 2

#: opcode -> KIND_* (how the base entry of latency_table is used)
KIND = np.zeros(N_OPCODES, dtype=np.int64)
#: opcode -> 1 if the instruction is a zero-latency no-op when its rd field is 0
NOOP_IF_RD0 = np.zeros(N_OPCODES, dtype=np.bool_)
for _i in INSTRUCTIONS:
    if _i.latency == "HBM":
        KIND[_i.opcode] = KIND_HBM
    elif _i.latency.endswith("*E"):
        KIND[_i.opcode] = KIND_TIMES_E
    NOOP_IF_RD0[_i.opcode] = _i.noop_if_rd0


def evaluate_latency_expr(expr: str, cfg) -> int:
    """Value of a latency expression of the table for ``cfg``: a ``+``-sum of terms, each an integer
    literal, ``MLEN``, ``VLEN`` or a LATENCY key (resolved with DC_EN). ``X*E`` evaluates to ``X``
    (the caller multiplies by E); ``HBM`` evaluates to 0 (the HBM model supplies it)."""
    expr = expr.strip()
    if expr == "HBM":
        return 0
    if expr.endswith("*E"):
        expr = expr[:-2]
    total = 0
    for term in expr.split("+"):
        term = term.strip()
        if term.isdigit():
            total += int(term)
        elif term in ("MLEN", "VLEN", "BLEN", "HLEN"):
            total += int(getattr(cfg, term))
        else:
            total += int(cfg.latency_cycles(term))
    return total


def latency_table(cfg) -> np.ndarray:
    """int64[64]: base latency per opcode for ``cfg`` (see the module docstring)."""
    out = np.zeros(N_OPCODES, dtype=np.int64)
    for i in INSTRUCTIONS:
        out[i.opcode] = evaluate_latency_expr(i.latency, cfg)
    return out


@njit(cache=True)
def topk_experts(policy):
    """E of V_TOPK for a valid policy (isa.table.TOPK_POLICIES)."""
    return _TOPK_E[policy]


@njit(cache=True)
def instruction_latency(table, opcode, f_rd, f_rs3):
    """Cycles charged by one retired instruction; 0 for H_* (the HBM model supplies those).

    ``table`` from :func:`latency_table`; ``f_rd`` / ``f_rs3`` the raw fields."""
    if NOOP_IF_RD0[opcode] and f_rd == 0:
        return np.int64(0)
    k = KIND[opcode]
    if k == KIND_TIMES_E:
        return table[opcode] * topk_experts(f_rs3)
    if k == KIND_HBM:
        return np.int64(0)
    return table[opcode]
