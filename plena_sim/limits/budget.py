"""The work budget of a run (``max_instructions``): what one instruction costs against it.

One job: :func:`work_table` ``(cfg) -> int64[N_OPCODES]``, the units one retired instruction of each opcode uses.
Every instruction counts 1; each HBM row an H_* instruction moves (P_M / P_V / P_W, a configuration constant) and
each whole :data:`MACS_PER_UNIT` matrix MACs of an instruction (``macs // 4096``, the table's ``macs``
expression at this machine) count 1 more. A budget therefore bounds the host time of a run, not only its
instruction count: one H_PREFETCH_V of 4 M rows is 4 M + 1 units, one M_MM of 16 K MACs is 5. A program
without H_* and matrix instructions uses exactly one unit per instruction (the budget is its instruction count).

Both backends check before each instruction (isa.md §8 order: first the budget, then the runaway guard, then
decode) that the units used so far plus the instruction's own do not exceed the budget, else BUDGET
(:mod:`plena_sim.faults`: VALUE = instructions retired, LIMIT = the budget, X6 = the units used beyond one per
instruction, X7 = the instruction's units beyond one).
"""

from __future__ import annotations

import numpy as np

from isa.encoding import N_OPCODES, OPCODES
from isa.table import mac_table

__all__ = ["MACS_PER_UNIT", "work_table", "MAX_BUDGET"]

#: matrix MACs of one instruction that count as one budget unit
MACS_PER_UNIT = 4096
#: the largest budget (the counters are int64)
MAX_BUDGET = (1 << 63) - 1


def work_table(cfg) -> np.ndarray:
    """Budget units of one retired instruction per opcode (1 for the opcodes that are not instructions)."""
    macs = np.array(mac_table(cfg.MLEN, cfg.BLEN, cfg.HLEN, cfg.BROADCAST_AMOUNT), dtype=np.int64)
    work = np.ones(N_OPCODES, dtype=np.int64) + macs // MACS_PER_UNIT
    work[OPCODES["H_PREFETCH_M"]] += cfg.P_M
    work[OPCODES["H_PREFETCH_V"]] += cfg.P_V
    work[OPCODES["H_STORE_V"]] += cfg.P_W
    return work
