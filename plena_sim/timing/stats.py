"""The resource statistics of a run, in every timing model (one job): busy cycles per resource, stall cycles per
reason, the critical-path attribution, MAC utilization and (rtl) the unvalidated share, from the per-pc profile the
backends return (``Outcome.pc_count`` / ``pc_cycles`` / ``pc_extra``).

* Resources: :data:`plena_sim.timing.rtl.RESOURCES` (the statistics resource of an opcode:
  :func:`~plena_sim.timing.rtl.resource_of_opcode`; a zero-latency no-op's issue slot counts as ``control``).
* ``busy[r]``: Σ of the occupancy of r's instructions (serial / overlap: their latency; rtl: their II; H_*: the HBM
  model's latency).
* ``stalls[reason]``: Σ of the issue delays (:data:`~plena_sim.timing.rtl.STALL_REASONS`; all 0 under serial).
* ``critical_path[r]``: Σ of the cycles r's instructions added to the run's end (each instruction's end minus the
  latest end before it, the per-pc ``pc_cycles``): the parts sum exactly to ``cycles``.
* ``mac_utilization``: matrix MACs / (cycles x MLEN x BLEN): the array of BLEN x MLEN multipliers does one M_MM
  (B x M by M x B, B*B*M MACs) in BLEN cycles at best (the RTL needs BLEN + 4).
* ``unvalidated`` (rtl only): the retired count per opcode whose rtl cost the RTL did not measure, the cycles those
  instructions add to the critical path, and their share of ``cycles``.
"""

from __future__ import annotations

import numpy as np

from isa.encoding import MASK_OPCODE, MASK_RD, SHIFT_OPCODE, SHIFT_RD
from isa.table import INSTRUCTIONS

from .latency import NOOP_IF_RD0
from .rtl import R_CONTROL, RESOURCES, STALL_REASONS, resource_of_opcode, rtl_table
from .scoreboard import X_BUSY, X_HBM_READ, X_HBM_WRITE, X_STALL

__all__ = ["PROFILE_N", "pc_resources", "pc_profile", "run_profile", "profile_fields", "peak_macs_per_cycle"]

_NAME = {i.opcode: i.mnemonic for i in INSTRUCTIONS}
_NR = len(RESOURCES)
#: columns of :func:`pc_profile`: busy per resource, HBM bytes read, written, stalls per reason
P_READ, P_WRITE, P_STALL = _NR, _NR + 1, _NR + 2
PROFILE_N = P_STALL + len(STALL_REASONS)


def peak_macs_per_cycle(cfg) -> int:
    """MACs per cycle of the configured BLEN x MLEN array at full use."""
    return int(cfg.MLEN) * int(cfg.BLEN)


def _opcodes(words) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(words, dtype=np.int64)
    return (w >> SHIFT_OPCODE) & MASK_OPCODE, (w >> SHIFT_RD) & MASK_RD


def pc_resources(words) -> np.ndarray:
    """int64 per pc: the statistics resource of the word (control for a no-op or a non-instruction)."""
    op, rd = _opcodes(words)
    res = resource_of_opcode()[op]
    res[(res < 0) | (NOOP_IF_RD0[op] & (rd == 0))] = R_CONTROL
    return res


def pc_profile(words, pc_extra: np.ndarray) -> np.ndarray:
    """int64[n, PROFILE_N]: per pc its busy cycles in its resource's column, HBM bytes read / written, stalls."""
    n = len(pc_extra)
    prof = np.zeros((n, PROFILE_N), dtype=np.int64)
    prof[np.arange(n), pc_resources(words)] = pc_extra[:, X_BUSY]
    prof[:, P_READ] = pc_extra[:, X_HBM_READ]
    prof[:, P_WRITE] = pc_extra[:, X_HBM_WRITE]
    prof[:, P_STALL:] = pc_extra[:, X_STALL : X_STALL + len(STALL_REASONS)]
    return prof


def profile_fields(sums, cycles: int, macs: int, cfg) -> dict:
    """The ``busy`` / ``stalls`` / HBM bytes / ``mac_utilization`` fields of summed profile columns."""
    peak = peak_macs_per_cycle(cfg)
    return {
        "busy": {r: int(sums[k]) for k, r in enumerate(RESOURCES)},
        "stalls": {s: int(sums[P_STALL + k]) for k, s in enumerate(STALL_REASONS)},
        "hbm_read_bytes": int(sums[P_READ]),
        "hbm_write_bytes": int(sums[P_WRITE]),
        "mac_utilization": macs / (cycles * peak) if cycles else 0.0,
    }


def run_profile(outcome, words, cfg, mode: str, macs: int) -> dict:
    """The run's ``busy``, ``stalls``, ``critical_path``, ``mac_utilization`` (and under rtl ``unvalidated``)."""
    cycles = int(outcome.cycles)
    prof = pc_profile(words, outcome.pc_extra)
    fields = profile_fields(prof.sum(axis=0), cycles, macs, cfg)
    res = pc_resources(words)
    crit = np.bincount(res, weights=outcome.pc_cycles, minlength=_NR).astype(np.int64) if len(res) else np.zeros(_NR)
    out = {
        "busy": fields["busy"],
        "stalls": fields["stalls"],
        "critical_path": {r: int(crit[k]) for k, r in enumerate(RESOURCES)},
        "mac_utilization": fields["mac_utilization"],
    }
    if mode == "rtl":
        out["unvalidated"] = _unvalidated(outcome, words, cfg, cycles)
    return out


def _unvalidated(outcome, words, cfg, cycles: int) -> dict:
    """Retired counts of the opcodes with a declared (not measured) rtl cost, their critical-path cycles, share."""
    op, rd = _opcodes(words)
    declared = (rtl_table(cfg).measured[op] == 0) & ~(NOOP_IF_RD0[op] & (rd == 0)) & (outcome.pc_count > 0)
    counts: dict[str, int] = {}
    for o, n in zip(op[declared], outcome.pc_count[declared], strict=True):
        name = _NAME.get(int(o))
        if name is not None:
            counts[name] = counts.get(name, 0) + int(n)
    unval = int(outcome.pc_cycles[declared].sum())
    return {"opcodes": dict(sorted(counts.items())), "cycles": unval, "share": unval / cycles if cycles else 0.0}
