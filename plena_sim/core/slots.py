"""Slot enumerations of the core's int64 arrays (one job: name every index; nothing is hand-numbered).

Prefixes: ``RUN_`` run-loop statuses, ``STAT_`` run statistics, ``CFG_`` config vector, ``FMT_`` HBM type
rows, ``OPND_`` instruction-word operand fields of a fault record (:data:`plena_sim.faults.OPERAND_NAMES`).
"""

from __future__ import annotations

from ..faults import OPERAND_NAMES

#: run-loop statuses: the PC left the program; the fault record is filled; a C_LOOP_START needs a larger
#: loop stack; an H_STORE_V needs more spare HBM pool pages (the last two changed nothing); the word at the PC
#: is not an instruction or fails a static check (the host writes its fault record: a once-per-run path); the stop
#: flag (plena_sim.limits.stop) is set: the loop stopped at an instruction boundary (an H_* instruction cut short
#: between its rows changed only destination rows and re-executes from its start when the run resumes)
RUN_NAMES = ("done", "fault", "grow_loop", "need_pages", "static", "stop")
(RUN_DONE, RUN_FAULT, RUN_GROW_LOOP, RUN_NEED_PAGES, RUN_STATIC, RUN_STOP) = range(len(RUN_NAMES))
#: internal: the instruction executed (never returned by the loop)
RUN_OK = -1

#: run statistics (the cycles are the timing state's counter; the matrix MACs are derived from the per-pc counts by
#: the host, like the counts per opcode: the loop keeps per instruction only the retired count, the work budget
#: units used (plena_sim.limits.budget) and the profile)
STAT_NAMES = ("retired", "work", "macs", "mx_nan", "mx_saturated", "hbm_payload_read", "hbm_payload_written")
(STAT_RETIRED, STAT_WORK, STAT_MACS, STAT_MX_NAN, STAT_MX_SAT, STAT_HBM_RD, STAT_HBM_WR) = range(len(STAT_NAMES))
N_STATS = len(STAT_NAMES)
#: the keys of ``Outcome.counters`` (the statistics after retired)
COUNTER_NAMES = ("matrix_macs",) + STAT_NAMES[STAT_MX_NAN:]

#: the counts an H_* instruction adds to the statistics, held until it retires (the DMA ``cnt`` scratch)
PENDING_NAMES = ("mx_nan", "mx_saturated", "hbm_payload_read", "hbm_payload_written")
(PEND_MX_NAN, PEND_MX_SAT, PEND_HBM_RD, PEND_HBM_WR) = range(len(PENDING_NAMES))

#: ``FUNC``: 1 for a functional run, 0 for a timing-only one (the datapath skipped, issue 30)
CFG_NAMES = (
    "M",
    "V",
    "B",
    "H",
    "BA",
    "VROWS",
    "NTILES",
    "FPS",
    "INTS",
    "HBM_SIZE",
    "PM",
    "PV",
    "PW",
    "MAXLOOP",
    "FUNC",
)
(
    CFG_M,
    CFG_V,
    CFG_B,
    CFG_H,
    CFG_BA,
    CFG_VROWS,
    CFG_NTILES,
    CFG_FPS,
    CFG_INTS,
    CFG_HBM_SIZE,
    CFG_PM,
    CFG_PV,
    CFG_PW,
    CFG_MAXLOOP,
    CFG_FUNC,
) = range(len(CFG_NAMES))
N_CFG = len(CFG_NAMES)

#: one row per HBM type, in :data:`HBM_TYPES` order (prec 0 / 1 of H_PREFETCH_M, then of H_*_V)
HBM_TYPES = ("HBM_M_WEIGHT_TYPE", "HBM_M_KV_TYPE", "HBM_V_ACT_TYPE", "HBM_V_KV_TYPE")
FMT_NAMES = ("mx", "exponent", "mantissa", "elem_bytes", "block")
(FMT_MX, FMT_E, FMT_MT, FMT_EB, FMT_BLOCK) = range(len(FMT_NAMES))
N_FMT = len(FMT_NAMES)

OPND_NONE = -1
(OPND_RD, OPND_RS1, OPND_RS2, OPND_RS3, OPND_FUNCT1, OPND_IMM, OPND_DERIVED) = range(len(OPERAND_NAMES))
