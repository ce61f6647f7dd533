"""The data of the ``rtl`` timing model (one job): read the versioned package-data file
``plena_sim/timing/data/rtl_timing_v1.toml`` (every number with its source) and evaluate it for a configuration.

API
---
* :data:`PIPES`, :data:`RESOURCES`, :data:`HAZARDS`, :data:`STALL_REASONS`: the names the model and the statistics
  use (a pipeline / resource / hazard / stall reason is its index in the tuple; hazard class k = index + 1).
* :func:`rtl_data` ``() -> dict``: the parsed, checked file (cached).
* :func:`rtl_table` ``(cfg) -> RtlTable``: per opcode, the cost rows (ready, done, ii) without and per V_TOPK expert,
  the pipeline, whether the value is a measured one, the hazard producer class and consumer mask, and the hazard
  table ``hz`` (int64[len(HAZARDS) + 1, 3]: stall, recovery, 1 if WAW).
* :func:`rtl_pc_costs` ``(table, op, rd, rs3) -> int64[PC_N, n]``: the per-pc rows the run loop reads (both
  backends): ready, done, ii, pipeline (-1: a zero-latency no-op), producer class, consumer mask.
* :func:`resource_of_opcode` ``() -> int64[64]``: the statistics resource of every opcode (all timing models).
* :func:`opcode_cost_table` ``(cfg, mode) -> list[dict]``: the effective per-opcode table (``plena-sim timing``).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from isa.encoding import N_OPCODES
from isa.table import INSTRUCTIONS, TOPK_POLICIES

__all__ = [
    "RTL_FILE",
    "PIPES",
    "RESOURCES",
    "HAZARDS",
    "STALL_REASONS",
    "RtlTable",
    "rtl_data",
    "rtl_table",
    "rtl_pc_costs",
    "resource_of_opcode",
    "opcode_cost_table",
]

RTL_FILE = "rtl_timing_v1.toml"
PIPES = ("scalar_fp", "scalar", "vector", "matrix", "writeout", "hbm_matrix", "hbm_vector", "hbm_store", "control")
RESOURCES = (
    "scalar",
    "vector",
    "matrix_compute",
    "matrix_writeout",
    "hbm_matrix_dma",
    "hbm_vector_dma",
    "hbm_store",
    "control",
)
R_SCALAR, R_VECTOR, R_MATRIX, R_WRITEOUT, R_HBM_M, R_HBM_V, R_HBM_STORE, R_CONTROL = range(len(RESOURCES))
HAZARDS = ("hbm_vector", "reduction_scalar", "sfu_broadcast", "vector_port_write")
STALL_REASONS = ("unit_busy", "operand_not_ready", "write_after_read", *(f"hazard_{h}" for h in HAZARDS), "recovery")
S_UNIT, S_RAW, S_WAR = 0, 1, 2
S_HAZARD0 = 3  # + hazard class - 1
S_RECOVERY = S_HAZARD0 + len(HAZARDS)
COEFF_KEYS = ("fixed", "blen", "mlen", "vlen", "ba", "ba_mlen", "levels", "experts")
COST_ROWS = ("ready", "done", "ii")
#: rows of rtl_pc_costs
PC_READY, PC_DONE, PC_II, PC_PIPE, PC_PCLASS, PC_CMASK = range(6)
PC_N = 6
#: columns of the hazard table
HZ_STALL, HZ_RECOVERY, HZ_WAW = range(3)
#: hazard classes (1-based: 0 = no producer)
HZC_HBM_VECTOR, HZC_REDUCTION_SCALAR, HZC_SFU_BROADCAST, HZC_VECTOR_PORT_WRITE = 1, 2, 3, 4
#: table families of the vector-unit instructions that write VRAM rows / read them
_VECTOR_WRITERS = ("vbin", "vunary", "shift")
_VECTOR_READERS = ("vbin", "vunary", "shift", "reduce", "topk")
_BY_MNEMONIC = {i.mnemonic: i for i in INSTRUCTIONS}
_TOPK_E = [e for e, _k in TOPK_POLICIES]


@lru_cache(maxsize=1)
def rtl_data() -> dict:
    """The parsed data file, checked: every instruction has exactly one cost entry (or an HBM pipeline)."""
    text = resources.files("plena_sim.timing").joinpath("data", RTL_FILE).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    if data.get("schema") != "plena-sim-rtl-timing" or data.get("version") != 1:
        raise ValueError(f"{RTL_FILE}: not a version-1 plena-sim-rtl-timing file")
    seen: dict[str, int] = {}
    for entry in data["op"]:
        for name in entry["names"]:
            seen[name] = seen.get(name, 0) + 1
        if entry["pipe"] not in PIPES:
            raise ValueError(f"{RTL_FILE}: unknown pipeline {entry['pipe']!r}")
        for row in COST_ROWS:
            unknown = set(entry.get(row, {})) - set(COEFF_KEYS)
            if unknown:
                raise ValueError(f"{RTL_FILE}: {entry['names']}: unknown cost keys {sorted(unknown)}")
    for name in data["hbm"]:
        seen[name] = seen.get(name, 0) + 1
    missing = [i.mnemonic for i in INSTRUCTIONS if seen.get(i.mnemonic) != 1]
    if missing or len(seen) != len(INSTRUCTIONS):
        raise ValueError(
            f"{RTL_FILE}: opcodes without exactly one entry: {missing or sorted(set(seen) - set(_BY_MNEMONIC))}"
        )
    if [h["name"] for h in data["hazard"]] != list(HAZARDS):
        raise ValueError(f"{RTL_FILE}: the hazards must be {HAZARDS}")
    return data


def _levels(vlen: int) -> int:
    """ceil(log2(VLEN + 1)): the levels of a VLEN-wide reduction tree."""
    return math.ceil(math.log2(vlen + 1))


def cost_value(coeffs: dict, cfg, experts: int = 0) -> int:
    """``fixed + blen*BLEN + ... + experts*E`` (the file's cost form) at ``cfg``."""
    env = {
        "fixed": 1,
        "blen": cfg.BLEN,
        "mlen": cfg.MLEN,
        "vlen": cfg.VLEN,
        "ba": cfg.BROADCAST_AMOUNT,
        "ba_mlen": cfg.BROADCAST_AMOUNT * cfg.MLEN,
        "levels": _levels(cfg.VLEN),
        "experts": experts,
    }
    return int(sum(int(c) * env[k] for k, c in coeffs.items()))


@dataclass(frozen=True)
class RtlTable:
    """The model evaluated for one configuration (module docstring)."""

    base: np.ndarray  # int64[64, 3]: ready, done, ii without the experts term
    per_expert: np.ndarray  # int64[64, 3]: the experts coefficient (V_TOPK)
    pipe: np.ndarray  # int64[64]: pipeline index, -1 for a non-instruction
    measured: np.ndarray  # int64[64]: 1 if the value is measured (or H_*: the HBM model)
    pclass: np.ndarray  # int64[64]: hazard producer class (0: none)
    cmask: np.ndarray  # int64[64]: bit k set = consumer of hazard class k
    hz: np.ndarray  # int64[len(HAZARDS) + 1, 3]


def _hazard_classes(i) -> tuple[int, int]:
    """(producer class, consumer mask) of an instruction (docs/timing.md, the hazards)."""
    pclass = 0
    if i.family == "dma" and i.alu == "prefetch_v":
        pclass = HZC_HBM_VECTOR
    elif i.family == "reduce":
        pclass = HZC_REDUCTION_SCALAR
    elif i.family == "sfp" and i.alu in ("exp", "reci", "sqrt"):
        pclass = HZC_SFU_BROADCAST
    elif i.family in _VECTOR_WRITERS:
        pclass = HZC_VECTOR_PORT_WRITE
    cmask = 0
    if i.family in _VECTOR_READERS:
        cmask |= 1 << HZC_HBM_VECTOR
    if i.family == "sfp":
        cmask |= 1 << HZC_REDUCTION_SCALAR
    if i.family == "vbin" and i.operands[2].kind == "f":
        cmask |= 1 << HZC_SFU_BROADCAST
    if i.family in _VECTOR_WRITERS:
        cmask |= 1 << HZC_VECTOR_PORT_WRITE
    return pclass, cmask


@lru_cache(maxsize=32)
def _rtl_table_cached(key: tuple) -> RtlTable:
    from types import SimpleNamespace

    cfg = SimpleNamespace(**dict(key))
    data = rtl_data()
    base = np.zeros((N_OPCODES, 3), dtype=np.int64)
    per_e = np.zeros((N_OPCODES, 3), dtype=np.int64)
    pipe = np.full(N_OPCODES, -1, dtype=np.int64)
    measured = np.zeros(N_OPCODES, dtype=np.int64)
    for entry in data["op"]:
        rows = [entry["ready"], entry.get("done", entry["ready"]), entry["ii"]]
        for name in entry["names"]:
            o = _BY_MNEMONIC[name].opcode
            pipe[o] = PIPES.index(entry["pipe"])
            measured[o] = int(entry["status"] == "measured")
            for r, coeffs in enumerate(rows):
                plain = {k: v for k, v in coeffs.items() if k != "experts"}
                base[o, r] = cost_value(plain, cfg)
                per_e[o, r] = int(coeffs.get("experts", 0))
    for name, p in data["hbm"].items():
        o = _BY_MNEMONIC[name].opcode
        pipe[o] = PIPES.index(p)
        measured[o] = 1
    pclass = np.zeros(N_OPCODES, dtype=np.int64)
    cmask = np.zeros(N_OPCODES, dtype=np.int64)
    for i in INSTRUCTIONS:
        pclass[i.opcode], cmask[i.opcode] = _hazard_classes(i)
    hz = np.zeros((len(HAZARDS) + 1, 3), dtype=np.int64)
    for k, h in enumerate(data["hazard"]):
        hz[k + 1] = (int(h["stall"]), int(h["recovery"]), int(h["dependence"] == "waw"))
    return RtlTable(base, per_e, pipe, measured, pclass, cmask, hz)


def rtl_table(cfg) -> RtlTable:
    """The model at ``cfg`` (cached per topology)."""
    keys = ("BLEN", "MLEN", "VLEN", "BROADCAST_AMOUNT")
    return _rtl_table_cached(tuple((k, int(getattr(cfg, k))) for k in keys))


def rtl_pc_costs(table: RtlTable, op: np.ndarray, rd: np.ndarray, rs3: np.ndarray) -> np.ndarray:
    """int64[PC_N, n]: the per-pc rows (module docstring) of a decoded program; V_TOPK with the E of its policy,
    a zero-latency no-op (rd = f0 forms) costs nothing and has no pipeline, no hazard class."""
    from .latency import NOOP_IF_RD0

    op = np.asarray(op, dtype=np.int64)
    experts = np.asarray(_TOPK_E, dtype=np.int64)[np.asarray(rs3, dtype=np.int64) & 1]
    out = np.zeros((PC_N, op.size), dtype=np.int64)
    out[PC_READY : PC_II + 1] = (table.base[op] + table.per_expert[op] * experts[:, None]).T
    out[PC_PIPE] = table.pipe[op]
    out[PC_PCLASS] = table.pclass[op]
    out[PC_CMASK] = table.cmask[op]
    noop = NOOP_IF_RD0[op] & (np.asarray(rd, dtype=np.int64) == 0)
    out[:, noop] = 0
    out[PC_PIPE, noop] = -1
    return out


def resource_of_opcode() -> np.ndarray:
    """int64[64]: the statistics resource (:data:`RESOURCES` index) of every opcode; -1 for a non-instruction."""
    out = np.full(N_OPCODES, -1, dtype=np.int64)
    dma = {"prefetch_m": R_HBM_M, "prefetch_v": R_HBM_V, "store_v": R_HBM_STORE}
    for i in INSTRUCTIONS:
        if i.unit == "M":
            out[i.opcode] = R_WRITEOUT if i.family == "wo" else R_MATRIX
        elif i.unit == "H":
            out[i.opcode] = dma[i.alu]
        else:
            out[i.opcode] = {"S": R_SCALAR, "V": R_VECTOR, "C": R_CONTROL}[i.unit]
    return out


def opcode_cost_table(cfg, mode: str) -> list[dict[str, int | str]]:
    """The effective per-opcode table of a timing model at ``cfg``: mnemonic, unit (pipeline), ready, done, busy/II,
    status (``plena-sim timing``). V_TOPK: per policy E; H_*: ``"HBM"`` (the bank model decides at run time)."""
    from .latency import KIND, KIND_HBM, KIND_TIMES_E, latency_table

    res = resource_of_opcode()
    rows = []
    if mode == "rtl":
        t = rtl_table(cfg)
        hbm_ops = set(rtl_data()["hbm"])
        for i in INSTRUCTIONS:
            o = i.opcode
            row: dict[str, int | str] = {
                "mnemonic": i.mnemonic,
                "unit": PIPES[t.pipe[o]],
                "resource": RESOURCES[res[o]],
            }
            if i.mnemonic in hbm_ops:
                row.update(ready="HBM", done="HBM", ii="HBM", status="hbm_model")
            else:
                vals = [_with_experts(int(t.base[o, r]), int(t.per_expert[o, r])) for r in range(3)]
                row.update(ready=vals[0], done=vals[1], ii=vals[2], status="measured" if t.measured[o] else "declared")
            rows.append(row)
        return rows
    lat = latency_table(cfg)
    for i in INSTRUCTIONS:
        o = i.opcode
        v: int | str = int(lat[o])
        if KIND[o] == KIND_HBM:
            v = "HBM"
        elif KIND[o] == KIND_TIMES_E:
            v = _with_experts(0, int(lat[o]))
        legacy: dict[str, int | str] = {
            "mnemonic": i.mnemonic,
            "unit": i.unit,
            "resource": RESOURCES[res[o]],
            "ready": v,
            "done": v,
            "ii": v,
            "status": "legacy",
        }
        rows.append(legacy)
    return rows


def _with_experts(base: int, per_expert: int) -> int | str:
    """A cost with a V_TOPK experts term: the value per policy as ``"a / b"`` (E = 32 / 128), else the integer."""
    if per_expert == 0:
        return base
    return " / ".join(str(base + per_expert * e) for e in _TOPK_E)
