"""Lock-step differential test: the Numba core (plena_sim.core) against the reference interpreter.

Both backends run the same program on bit-identical copies of a random machine state; afterwards every
architectural array (registers, control registers, loop stack, VRAM, MRAM, FP/INT SRAM, accumulators,
all HBM bytes) must be bit-identical (compared as raw bit patterns, so NaNs compare by payload and
sign), and so must the Outcome (retired count, fault record, serial cycles, per-opcode counts,
counters).

* ``test_lockstep_random_programs``: hypothesis-generated programs of every opcode with mostly legal
  operands (operand registers are often set up right before use from pools of aligned, in-range
  addresses), nested loops with distinct counters and C_BREAK, occasional illegal words and loop
  faults, over several configurations (incl. Plain / 16-bit MX HBM types, DC_EN=0, BMM_SCALE=0.25,
  VLEN != MLEN and BA*H != MLEN for the CF faults, an HBM page pool that must grow).
  ``PLENA_LOCKSTEP_EXAMPLES`` sets the example count (default 2000).
* ``test_lockstep_random_words``: random 32-bit words as programs.
* ``test_lockstep_corpus``: the same generator driven by ``random.Random(seed)`` for fixed seeds, so a
  failure is reproducible without hypothesis (the message names the seed: ``run_seed(seed)``).
* A few hand-written programs for the resume paths (loop-stack growth, HBM pool growth, a-register
  sums beyond 2^63, budget / runaway faults).
"""

from __future__ import annotations

import dataclasses
import os
import random
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa.disasm import disassemble_word
from isa.encoding import encode
from isa.table import BY_MNEMONIC, FIELDS, INSTRUCTIONS, NOT_INSTRUCTIONS
from plena_sim import core, reference
from plena_sim.config import FpType, MxType, PlainType, load_config
from plena_sim.faults import RULE_BY_CODE
from plena_sim.hbm.storage import Hbm
from plena_sim.memory.state import CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK, MachineState
from plena_sim.numerics import bf16
from plena_sim.routing import Routing

EXAMPLES = int(os.environ.get("PLENA_LOCKSTEP_EXAMPLES", "2000"))
WORD_EXAMPLES = max(100, EXAMPLES // 4)
CORPUS_SEEDS = int(os.environ.get("PLENA_LOCKSTEP_CORPUS", "1000"))
BUDGET = 3000
#: compare NaNs bit for bit (see diff_states). Both backends implement the documented first-operand NaN rule,
#: so this is on by default; PLENA_LOCKSTEP_STRICT_NAN=0 relaxes it to diagnose a NaN-only difference.
STRICT_NAN = os.environ.get("PLENA_LOCKSTEP_STRICT_NAN", "1") not in ("", "0")

# ===================================================================================== configurations

E4M3 = FpType(True, 4, 3)
E5M2 = FpType(True, 5, 2)
F16 = FpType(True, 5, 10)
E8M0 = FpType(False, 8, 0)


def _with_types(cfg, **types):
    prec = dict(cfg.precision)
    prec.update(types)
    return dataclasses.replace(cfg, precision=MappingProxyType(prec))


_BASE = {
    "MLEN": 16,
    "VLEN": 16,
    "BLEN": 4,
    "HLEN": 4,
    "BROADCAST_AMOUNT": 4,
    "VECTOR_SRAM_SIZE": 80,
    "MATRIX_SRAM_SIZE": 64,  # 80 VRAM rows, 4 MRAM tiles
    "HBM_SIZE": 1 << 17,
    "HBM_M_Prefetch_Amount": 16,
    "HBM_V_Prefetch_Amount": 4,
    "HBM_V_Writeback_Amount": 4,
    "MAX_LOOP_INSTRUCTIONS": 300,
    "FP_SRAM_SIZE": 48,
    "INT_SRAM_SIZE": 48,
}


def _make_configs():
    c0 = load_config(overrides=_BASE)  # all four HBM types MXFP8
    c1 = _with_types(
        load_config(
            overrides={
                **_BASE,
                "DC_EN": 0,
                "BMM_SCALE": 0.25,
                "HBM_SIZE": 3 << 13,
                "HBM_M_Prefetch_Amount": 20,
                "HBM_V_Prefetch_Amount": 2,
                "HBM_V_Writeback_Amount": 3,
                "MAX_LOOP_INSTRUCTIONS": 40,
                "VECTOR_SRAM_SIZE": 72,
                "MATRIX_SRAM_SIZE": 48,
            }
        ),
        HBM_M_WEIGHT_TYPE=MxType(E5M2, E8M0, 4),
        HBM_M_KV_TYPE=PlainType(FpType(True, 8, 23)),
        HBM_V_ACT_TYPE=PlainType(FpType(True, 8, 7)),
        HBM_V_KV_TYPE=MxType(F16, E8M0, 16),
    )
    c2 = _with_types(
        load_config(
            overrides={
                **_BASE,
                "MLEN": 32,
                "VLEN": 32,
                "BLEN": 8,
                "HLEN": 8,
                "VECTOR_SRAM_SIZE": 140,
                "MATRIX_SRAM_SIZE": 96,
                "FP_SRAM_SIZE": 40,
                "INT_SRAM_SIZE": 40,
                "HBM_SIZE": 1 << 14,
                "HBM_M_Prefetch_Amount": 32,
                "HBM_V_Prefetch_Amount": 3,
                "HBM_V_Writeback_Amount": 2,
                "MAX_LOOP_INSTRUCTIONS": 100,
                "BMM_SCALE": 0.3,
            }
        ),
        HBM_M_WEIGHT_TYPE=MxType(E4M3, E8M0, 32),
        HBM_V_ACT_TYPE=PlainType(E4M3),
        HBM_V_KV_TYPE=PlainType(F16),
    )
    # configs that load (memory.md §8.1) but make matrix instructions fault at run time (CF-VM, CF-BA)
    c3 = load_config(overrides={**_BASE, "VLEN": 32})
    c4 = load_config(overrides={**_BASE, "BROADCAST_AMOUNT": 2})
    # lengths that are not powers of two: MLEN = VLEN = 24, BLEN 4, HLEN 8, BA 3, Pv 3, Ps 2
    c5 = load_config(
        overrides={
            **_BASE,
            "MLEN": 24,
            "VLEN": 24,
            "HLEN": 8,
            "BROADCAST_AMOUNT": 3,
            "VECTOR_SRAM_SIZE": 90,
            "MATRIX_SRAM_SIZE": 72,
            "HBM_M_Prefetch_Amount": 24,
            "HBM_V_Prefetch_Amount": 3,
            "HBM_V_Writeback_Amount": 2,
        }
    )
    return [c0, c1, c2, c3, c4, c5]


CONFIGS = _make_configs()
#: config index per draw (weights: c0 4, c1 3, c2 3, c3 1, c4 1, c5 2)
CONFIG_PICK = (0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4, 5, 5)

# ===================================================================================== choosers


class RandChooser:
    """Choices from ``random.Random(seed)`` (program items, the fixed corpus)."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def int(self, lo, hi):
        return self.r.randint(lo, hi)

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def chance(self, pct):
        return self.r.randrange(100) < pct


# ===================================================================================== value pools


class _Geom(NamedTuple):
    """The machine sizes the value pools draw from."""

    M: int
    V: int
    B: int
    H: int
    BA: int
    MM: int  # elements of one MRAM tile
    rows: int  # VRAM rows
    nt: int  # MRAM tiles (at least 1)
    fp: int  # FP SRAM words
    hbm: int  # HBM bytes


def _geom(cfg):
    M = cfg.MLEN
    return _Geom(
        M,
        cfg.VLEN,
        cfg.BLEN,
        cfg.HLEN,
        cfg.BROADCAST_AMOUNT,
        M * M,
        cfg.VECTOR_SRAM_SIZE,
        max(1, cfg.mram_tiles),
        cfg.FP_SRAM_SIZE,
        cfg.HBM_SIZE,
    )


def _pool_vrow(g, ch, clean):
    return g.V * ch.pick((0, 1, 2, ch.int(0, g.rows - 1), ch.int(0, g.rows // 2), g.rows - 1))


def _pool_vrows(g, ch, clean):  # base of B or M consecutive rows
    return g.V * ch.pick((0, ch.int(0, max(0, g.rows - g.M - 1)), ch.int(0, max(0, g.rows - g.B - 1)), g.B))


def _pool_bwo(g, ch, clean):  # base of BA*M rows (M_BMM_WO)
    if clean:
        return g.V * ch.pick((0, g.M, ch.int(0, max(0, g.rows - g.BA * g.M))))
    return g.V * ch.pick((0, g.M, ch.int(0, max(0, g.rows - g.BA * g.M)), ch.int(0, g.rows)))


def _pool_mm(g, ch, clean):
    return ch.int(0, g.nt - 1) * g.MM + ch.int(0, g.M // g.B - 1) * g.B * g.M


def _pool_mv(g, ch, clean):
    return ch.int(0, g.nt - 1) * g.MM + ch.int(0, g.M // g.B - 1) * g.B


def _pool_head(g, ch, clean):
    return ch.int(0, g.nt - 1) * g.MM + ch.int(0, max(1, g.M // g.H) - 1) * g.H


def _pool_moff(g, ch, clean):
    if clean:
        return ch.pick((0, 0, g.MM, g.MM * ch.int(0, g.nt - 1)))
    return ch.pick((0, 0, g.H, 2 * g.H, g.MM, ch.int(0, 3) * g.H))


def _pool_tile(g, ch, clean):
    return ch.int(0, g.nt - 1) * g.MM


def _pool_stride_reg(g, ch, clean):
    return ch.pick((1, 0, 2, 3))


def _pool_small(g, ch, clean):
    if clean:
        return ch.pick((0, 1, 2, ch.int(0, 16), ch.int(0, 24)))
    return ch.pick((0, 1, 2, ch.int(0, 24), ch.int(0, g.fp)))


def _pool_hoff(g, ch, clean):
    if clean:
        return ch.pick((0, 32 * ch.int(0, 32), 64 * ch.int(0, 32)))
    return ch.pick((0, 16 * ch.int(0, 32), 8 * ch.int(0, 64), 64 * ch.int(0, 64), ch.int(0, 4096)))


def _pool_hbase(g, ch, clean):
    if clean:
        return ch.pick((0, 256 * ch.int(0, g.hbm // 1024)))
    return ch.pick((0, 256 * ch.int(0, 64), g.hbm - 512, ch.int(0, g.hbm)))


def _pool_scale(g, ch, clean):
    if clean:
        return ch.pick((512, 1024 * ch.int(0, g.hbm // 4096), 2048, 0))
    return ch.pick((0, 512, 1024 * ch.int(0, 16), 2048, ch.int(0, g.hbm)))


def _pool_stride(g, ch, clean):
    if clean:
        return ch.pick((0, 32, 64, 32 * ch.int(0, 8), g.M * 4))
    return ch.pick((0, 16, 32, 8, 64 * ch.int(0, 8), g.M * 4, ch.int(0, 300)))


def _pool_shift(g, ch, clean):
    return ch.int(0, g.V + 2)


def _pool_mask(g, ch, clean):
    return ch.pick((0, 0xFFFFFFFF, ch.int(0, 0xFFFFFFFF), ch.int(0, 15)))


def _pool_int(g, ch, clean):  # any other role
    return ch.pick((0, 1, ch.int(0, 64), ch.int(0, 0xFFFFFFFF)))


#: role -> its value pool ``(geometry, chooser, clean) -> value``; other roles use _pool_int
_POOLS = {
    "vrow": _pool_vrow,
    "vrows": _pool_vrows,
    "bwo": _pool_bwo,
    "mm": _pool_mm,
    "mv": _pool_mv,
    "tmv": _pool_mm,  # same shape as "mm": tile + B*M row block
    "head": _pool_head,
    "moff": _pool_moff,
    "tile": _pool_tile,
    "stride_reg": _pool_stride_reg,
    "small": _pool_small,
    "hoff": _pool_hoff,
    "hbase": _pool_hbase,
    "scale": _pool_scale,
    "stride": _pool_stride,
    "shift": _pool_shift,
    "mask": _pool_mask,
}


def _pool(cfg, role, ch, clean=False):
    """A value for a register playing ``role`` (mostly legal for that role)."""
    g = _geom(cfg)
    if ch.chance(1 if clean else 6):  # something arbitrary
        return ch.pick(
            (
                ch.int(0, 1 << 12),
                ch.int(0, 0xFFFFFFFF),
                ch.int(0, 1 << 18),
                g.V * g.rows,
                g.V * g.rows - g.V,
                g.MM * g.nt,
                3,
            )
        )
    return _POOLS.get(role, _pool_int)(g, ch, clean)


#: role of each (mnemonic, operand name); unlisted gp operands use "int"
def _role(mn, name):
    if mn in ("M_MM", "M_TMM"):
        return "mm" if name == "gp_mat" else "vrows"
    if mn == "M_MV":
        return "mv" if name == "gp_mat" else "vrow"
    if mn == "M_TMV":
        return "tmv" if name == "gp_mat" else "vrow"
    if mn in ("M_BMM", "M_BTMM"):
        return "head" if name == "gp_mat" else "vrows"
    if mn in ("M_BMV", "M_BTMV"):
        return {"gp_moff": "moff", "gp_mat": "head"}.get(name, "vrow")
    if mn in ("M_MM_WO", "M_MV_WO", "M_BMM_WO", "M_BMV_WO"):
        return "stride_reg" if name == "gp_stride" else ("bwo" if mn == "M_BMM_WO" else "vrows")
    if mn == "V_SHFT_V" and name == "gp_shift":
        return "shift"
    if mn.startswith("V_"):
        if mn == "V_TOPK":
            return "vrow" if name == "gp_logits" else "small"
        return "vrow"
    if mn in ("S_LD_FP", "S_ST_FP", "S_LD_INT", "S_ST_INT"):
        return "small" if name == "gp_base" else "int"
    if mn == "S_MAP_V_FP":
        return "vrow" if name == "gp_vdst" else "small"
    if mn == "H_PREFETCH_M":
        return "tile" if name == "gp_mdst" else "hoff"
    if mn in ("H_PREFETCH_V", "H_STORE_V"):
        return "hoff" if name == "gp_hoff" else "vrows"
    if mn == "C_SET_ADDR_REG":
        return "int" if name == "gp_hi" else "hbase"
    if mn == "C_SET_SCALE_REG":
        return "scale"
    if mn == "C_SET_STRIDE_REG":
        return "stride"
    if mn == "C_SET_V_MASK_REG":
        return "mask"
    return "int"


# ===================================================================================== program generator

_STRUCTURAL = {"C_LOOP_START", "C_LOOP_END", "C_BREAK"}
_PLAIN_MNEMONICS = tuple(i.mnemonic for i in INSTRUCTIONS if i.mnemonic not in _STRUCTURAL)
#: extra weight on the heavy / tricky units
_WEIGHTED = (
    _PLAIN_MNEMONICS
    + tuple(m for m in _PLAIN_MNEMONICS if m[0] in "MH")
    + ("V_TOPK", "C_SET_SCALE_REG", "C_SET_STRIDE_REG", "C_SET_ADDR_REG", "C_SET_V_MASK_REG")
)
_COUNTERS = (13, 14, 15)


def _raw_word(ins, fields):
    w = ins.opcode
    for name, v in fields.items():
        w |= v << FIELDS[name].shift
    return w


def _set_reg(ch, out, reg, value):
    """Append instructions setting gp[reg] = value (value < 2^32)."""
    if value < (1 << 18):
        out.append(encode("S_ADDI_INT", rd=reg, rs1=0, imm18=value))
    else:
        out.append(encode("S_LUI_INT", rd=reg, imm22=(value >> 12) & 0x3FFFFF))
        if value & 0xFFF:
            out.append(encode("S_ADDI_INT", rd=reg, rs1=reg, imm18=value & 0xFFF))


def _gen_reg(ch, clean):
    if clean:
        return ch.pick((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0))
    return ch.pick((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 0, 13))


def _gen_addr_setup(ch, cfg, clean, a_pick, setup):
    """Point the address register somewhere sensible (via gp12, possibly reused below)."""
    _set_reg(ch, setup, 12, _pool(cfg, "hbase", ch, clean))
    setup.append(encode("C_SET_ADDR_REG", rd=a_pick, rs1=0, rs2=12))
    if ch.chance(40):
        _set_reg(ch, setup, 12, _pool(cfg, "scale", ch, clean))
        setup.append(encode("C_SET_SCALE_REG", rd=12))
    if ch.chance(30):
        _set_reg(ch, setup, 12, _pool(cfg, "stride", ch, clean))
        setup.append(encode("C_SET_STRIDE_REG", rd=12))


def _gen_flag(ch, clean, name):
    if name == "rmask":
        return ch.int(1, 15) if ch.chance(40) else 0
    if name == "rorder":
        return ch.pick((0, 1, ch.int(0, 15)))
    if name == "rstride":
        return ch.pick((0, 1, 1, ch.int(0, 15)))
    if name == "prec":
        return ch.pick((0, 1, 0, ch.int(0, 15)))
    # policy
    return ch.int(2, 15) if ch.chance(1 if clean else 10) else ch.pick((0, 1))


def _gen_imm18(ch, cfg, clean, mn):
    if mn == "S_ADDI_INT":
        return _pool(cfg, ch.pick(("small", "int", "vrow")), ch, clean) & 0x3FFFF
    if mn in ("M_BMM_WO", "M_BMV_WO") and clean:
        return ch.pick((0, 0, cfg.MLEN * ch.int(0, 4)))
    if mn.startswith("M_"):
        return ch.pick(
            (0, 0, cfg.BLEN * ch.int(0, 8), cfg.MLEN * ch.int(0, 4))
            if clean
            else (0, 0, cfg.BLEN * ch.int(0, 8), cfg.MLEN * ch.int(0, 4), ch.int(0, 0x3FFFF))
        )
    if clean:
        return ch.pick((0, ch.int(0, 8), ch.int(0, 16)))
    return ch.pick((0, ch.int(0, 8), ch.int(0, cfg.FP_SRAM_SIZE + 4), ch.int(0, 0x3FFFF)))


def _gen_operand(ch, cfg, clean, mn, op, a_pick, used, setup):
    """The field value of operand ``op`` of ``mn`` (gp operands may append register setup to ``setup``)."""
    k = op.kind
    if k == "gp":
        reg = _gen_reg(ch, clean)
        if clean and reg in used:  # distinct registers for distinct roles
            reg = next(r for r in range(1, 13) if r not in used)
        used.add(reg)
        if 1 <= reg <= 12 and ch.chance(97 if clean else 50):
            _set_reg(ch, setup, reg, _pool(cfg, _role(mn, op.name), ch, clean) & 0xFFFFFFFF)
        return reg
    if k in ("f", "a"):
        v = ch.int(8, 15) if ch.chance(0 if clean else 4) else ch.pick((1, 2, 0, 3, 4, 5, 6, 7))
        if k == "a" and mn.startswith("H_") and v < 8:
            v = a_pick
        return v
    if k == "flag":
        return _gen_flag(ch, clean, op.name)
    if k == "imm18":
        return _gen_imm18(ch, cfg, clean, mn)
    if k == "imm22":
        return ch.pick((0, 1, ch.int(0, 16), ch.int(0, 0x3FFFFF)))
    # "zero" with a field: M_BMM / M_BTMM rd
    return ch.int(1, 15) if ch.chance(1 if clean else 10) else 0


def _gen_instr(ch, ctx, out):
    cfg, clean = ctx["cfg"], ctx["clean"]
    mn = ch.pick(_WEIGHTED)
    ins = BY_MNEMONIC[mn]
    fields = {}
    setup = []
    a_pick = ch.int(0, 7)
    if mn.startswith("H_") and ch.chance(85 if clean else 15):
        _gen_addr_setup(ch, cfg, clean, a_pick, setup)
    used = set()
    for op in ins.operands:
        if op.field is not None:
            fields[op.field] = _gen_operand(ch, cfg, clean, mn, op, a_pick, used, setup)
    w = _raw_word(ins, fields)
    if ch.chance(5):
        w |= ch.int(0, 0xFFFFFFFF) & ins.unused_mask
    out.extend(setup)
    out.append(w)


def _gen_chaos(ch, out):
    kind = ch.int(0, 5)
    if kind == 0:
        out.append(ch.pick(tuple(NOT_INSTRUCTIONS)) | (ch.int(0, (1 << 26) - 1) << 6))
    elif kind == 1:
        out.append(encode("C_LOOP_END", rd=ch.int(0, 15)))
    elif kind == 2:
        out.append(BY_MNEMONIC["C_BREAK"].opcode)
    elif kind == 3:
        out.append(_raw_word(BY_MNEMONIC["C_LOOP_START"], {"rd": ch.pick((0, 5)), "imm22": ch.pick((0, 2))}))
    elif kind == 4:
        out.append(ch.int(0, 0xFFFFFFFF))
    else:  # a loop on a counter that the body may clobber / a jump target past a stale record
        out.append(encode("C_LOOP_START", rd=ch.pick(_COUNTERS), imm22=ch.int(1, 3)))


def _gen_item(ch, ctx, out, depth, free):
    """One program item: an instruction (with its operand set-up), a loop, or a fault-provoking word."""
    r = ch.int(0, 999)
    if r < 110 and depth < 2 and free:
        reg = free[0]
        out.append(encode("C_LOOP_START", rd=reg, imm22=ch.pick((2, 1, 3, ch.int(1, 6)))))
        body_start = len(out)
        for _ in range(ch.int(1, 6)):
            _gen_item(ch, ctx, out, depth + 1, free[1:])
        if ch.chance(15):
            out.insert(ch.int(body_start, len(out)), BY_MNEMONIC["C_BREAK"].opcode)
        out.append(encode("C_LOOP_END", rd=reg))
    elif r < (112 if ctx["clean"] else 150):
        _gen_chaos(ch, out)
    else:
        _gen_instr(ch, ctx, out)


def gen_program(ci, clean, item_seeds):
    """Program words: one item per seed (so hypothesis shrinks a program by deleting items)."""
    ctx = {"cfg": CONFIGS[ci], "clean": clean}
    out: list[int] = []
    for seed in item_seeds:
        _gen_item(RandChooser(seed), ctx, out, 0, list(_COUNTERS))
    return out


def gen_case(ch):
    """(config index, program words, state seed, initial HBM pool pages) from a chooser."""
    ci = ch.pick(CONFIG_PICK)
    clean = ch.chance(70)
    items = [ch.int(0, (1 << 32) - 1) for _ in range(ch.int(1, 24 if clean else 10))]
    seed = ch.int(0, (1 << 32) - 1)
    pool_pages = ch.pick((16, 0, 1))
    return ci, gen_program(ci, clean, items), seed, pool_pages


# ===================================================================================== random state

_SPECIAL_BF16 = np.array(
    [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0001, 0x8003, 0x7F7F, 0xFF7F, 0x3F80, 0x4300, 0xC2F0],
    dtype=np.uint16,
)
_SPECIAL_F32 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.4e38, 3.4028235e38, 1e-39], dtype=np.float32)


def _rand_bf16(rng, shape):
    n = int(np.prod(shape))
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-4, 5, n))).astype(np.float32)
    bits = bf16.encode(x)
    sel = rng.random(n)
    bits = np.where(sel < 0.04, _SPECIAL_BF16[rng.integers(0, len(_SPECIAL_BF16), n)], bits)
    bits = np.where(sel > 0.985, rng.integers(0, 1 << 16, n), bits)
    return bits.astype(np.uint16).reshape(shape)


def _rand_f32(rng, shape, zero_p=0.0):
    n = int(np.prod(shape))
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-6, 6, n))).astype(np.float32)
    sel = rng.random(n)
    x = np.where(sel < 0.02, _SPECIAL_F32[rng.integers(0, len(_SPECIAL_F32), n)], x)
    x = np.where(sel > 1 - zero_p, np.float32(0), x).astype(np.float32)
    return x.reshape(shape)


class _NpChooser(RandChooser):
    def __init__(self, rng):
        self.rng = rng

    def int(self, lo, hi):
        return int(self.rng.integers(lo, hi, endpoint=True))

    def pick(self, seq):
        return seq[int(self.rng.integers(0, len(seq)))]

    def chance(self, pct):
        return int(self.rng.integers(0, 100)) < pct


def make_state(cfg, seed, pool_pages=16):
    rng = np.random.default_rng(seed)
    ch = _NpChooser(rng)
    s = MachineState(cfg, hbm=Hbm(cfg.HBM_SIZE, initial_pages=pool_pages))
    roles = ("vrow", "vrows", "mm", "mv", "head", "tile", "small", "hoff", "int", "scale")
    for i in range(1, 16):
        s.gp[i] = _pool(cfg, ch.pick(roles), ch) & 0xFFFFFFFF
    s.fp[1:] = _rand_bf16(rng, 7)
    for i in range(8):
        s.areg[i] = ch.pick(
            (
                0,
                0,
                256 * ch.int(0, 32),
                0,
                256 * ch.int(0, cfg.HBM_SIZE // 512),
                ch.int(0, cfg.HBM_SIZE),
                cfg.HBM_SIZE - ch.int(0, 600),
                (1 << 64) - 1,
                (1 << 63) + ch.int(0, 9),
                (1 << 32) * ch.int(1, 5),
            )
        )
    s.ctrl[CTRL_SCALE] = _pool(cfg, "scale", ch, clean=ch.chance(70))
    s.ctrl[CTRL_STRIDE] = ch.pick((1, _pool(cfg, "stride", ch)))
    s.ctrl[CTRL_V_MASK] = _pool(cfg, "mask", ch)
    s.vram[...] = _rand_bf16(rng, s.vram.shape)
    s.mram[...] = _rand_f32(rng, s.mram.shape)
    s.fp_sram[...] = _rand_bf16(rng, s.fp_sram.shape)
    s.int_sram[...] = np.where(
        rng.random(s.int_sram.size) < 0.8,
        rng.integers(0, 64, s.int_sram.size),
        rng.integers(0, 1 << 32, s.int_sram.size),
    ).astype(np.uint32)
    for name in ("m_accum", "v_accum", "hm_accum", "hv_accum"):
        arr = getattr(s, name)
        arr[...] = _rand_f32(rng, arr.shape, zero_p=0.5) if ch.chance(60) else 0
    size = cfg.HBM_SIZE
    for _ in range(ch.int(1, 6)):
        n = ch.pick((512, 2048, 4096))
        a = ch.int(0, max(0, size - n))
        if ch.chance(50):
            data = rng.integers(0, 256, n)
        else:  # moderate MX scales / element codes
            data = rng.integers(0x70, 0x87, n) | (rng.integers(0, 2, n) << 7) * (rng.random(n) < 0.3)
        s.hbm.write(a, data.astype(np.uint8))
    return s


def clone_state(s):
    c = MachineState(s.cfg, hbm=Hbm(s.cfg.HBM_SIZE, initial_pages=s.hbm.pages.shape[0]))
    for name in MachineState.ARRAYS + ("loop_start", "loop_reg", "loop_count"):
        setattr(c, name, getattr(s, name).copy())
    c.hbm.page_index = s.hbm.page_index.copy()
    c.hbm.pages = s.hbm.pages.copy()
    c.hbm.meta = s.hbm.meta.copy()
    return c


# ===================================================================================== comparison

_STATE_ARRAYS = MachineState.ARRAYS + ("loop_start", "loop_reg", "loop_count")


#: bf16 arrays (NaN = exponent all ones, mantissa != 0)
_BF16_ARRAYS = {"fp", "vram", "fp_sram"}


def _nan_mask(name, a):
    if a.dtype == np.float32:
        return np.isnan(a)
    if name in _BF16_ARRAYS:
        return ((a & 0x7F80) == 0x7F80) & ((a & 0x7F) != 0)
    return np.zeros(a.shape, dtype=bool)


def _bits(a):
    return a.view(np.uint32) if a.dtype == np.float32 else a


def diff_states(ref_s, jit_s, strict_nan=STRICT_NAN):
    """List of human-readable differences (empty if identical).

    Arrays are compared as bit patterns. Unless ``strict_nan``, two NaNs compare equal whatever their
    sign and payload: the spec does not say which NaN an operation on two NaN operands returns, and
    the reference's numpy loops return either operand depending on numpy internals (the core uses
    the first operand). A NaN's sign can only ever reach another NaN (no instruction turns a NaN's
    sign into a number), so this tolerance cannot hide a difference in any non-NaN value. In HBM the
    same tolerance admits bytes differing only in the sign bit of a Plain-type NaN's top byte.
    """
    out = []
    for name in _STATE_ARRAYS:
        a, b = getattr(ref_s, name), getattr(jit_s, name)
        if a.shape != b.shape:
            out.append(f"{name}: shape {a.shape} vs {b.shape}")
            continue
        neq = _bits(a) != _bits(b)
        if not strict_nan:
            neq &= ~(_nan_mask(name, a) & _nan_mask(name, b))
        bad = np.argwhere(neq)
        if bad.size:
            idx = tuple(int(i) for i in bad[0])
            out.append(f"{name}: {len(bad)} differing, first at {idx}: ref {_bits(a)[idx]:#x} jit {_bits(b)[idx]:#x}")
    size = ref_s.cfg.HBM_SIZE
    ha, hb = ref_s.hbm.read(0, size), jit_s.hbm.read(0, size)
    neq = ha != hb
    if not strict_nan:
        neq &= ~(((ha ^ hb) == 0x80) & ((ha & 0x7F) >= 0x78))
    bad = np.flatnonzero(neq)
    if bad.size:
        out.append(f"hbm: {bad.size} differing bytes, first at {bad[0]}: ref {ha[bad[0]]:#x} jit {hb[bad[0]]:#x}")
    return out


def diff_outcomes(a, b):
    out = []
    for k in ("retired", "fault", "cycles", "counters"):
        if getattr(a, k) != getattr(b, k):
            out.append(f"outcome.{k}: ref {getattr(a, k)} jit {getattr(b, k)}")
    if not np.array_equal(a.by_opcode, b.by_opcode):
        out.append(f"outcome.by_opcode differs at {np.flatnonzero(a.by_opcode != b.by_opcode)}")
    for k in ("pc_count", "pc_cycles", "pc_extra"):  # the per-pc profile, identical and summing to the totals
        pa, pb = getattr(a, k), getattr(b, k)
        if not np.array_equal(pa, pb):
            out.append(f"outcome.{k} differs at pcs {np.flatnonzero(pa != pb)[:8]}")
    for o, who in ((a, "ref"), (b, "jit")):
        if int(o.pc_count.sum()) != o.retired or int(o.pc_cycles.sum()) != o.cycles:
            out.append(f"{who}: profile sums {o.pc_count.sum()} / {o.pc_cycles.sum()} != {o.retired} / {o.cycles}")
    return out


def _listing(words, limit=200):
    lines = [f"  {pc:4d}: {w:#010x}  {disassemble_word(w)}" for pc, w in enumerate(words[:limit])]
    if len(words) > limit:
        lines.append(f"  ... ({len(words) - limit} more)")
    return "\n".join(lines)


#: the timing models the lock-step runs cycle through (by state seed)
TIMINGS = ("serial", "overlap", "rtl")


def run_lockstep(cfg, words, seed, pool_pages=16, budget=BUDGET, *, what="", functional=True, routing=None):
    """Run both backends; assert identical outcome and state. Returns the (reference) outcome. ``functional=False``:
    both run timing-only (issue 30) with ``routing``; their taint bookkeeping must agree too."""
    s_ref = make_state(cfg, seed, pool_pages)
    s_jit = clone_state(s_ref)
    timing = TIMINGS[seed % 3]  # every accounting (timing.md §3 / §4, docs/timing.md rtl) in lock step
    mode = dict(functional=functional, routing=routing)
    o_ref = reference.execute(s_ref, words, budget, timing=timing, **mode)
    o_jit = core.execute(s_jit, words, budget, timing=timing, **mode)
    diffs = diff_outcomes(o_ref, o_jit) + diff_states(s_ref, s_jit)
    for k in ("taint", "int_taint"):
        if not np.array_equal(getattr(s_ref, k), getattr(s_jit, k)):
            diffs.append(f"{k}: ref {getattr(s_ref, k)[:8]} jit {getattr(s_jit, k)[:8]}")
    if not np.array_equal(s_ref.timing.ts, s_jit.timing.ts):
        diffs.append(f"timing state ({timing}): ref {list(s_ref.timing.ts)} jit {list(s_jit.timing.ts)}")
    for k in ("ready", "rdone", "wcls"):  # the scoreboard (overlap / rtl) and the rtl hazard classes
        if not np.array_equal(getattr(s_ref.timing, k), getattr(s_jit.timing, k)):
            diffs.append(f"timing.{k} ({timing}) differs")
    if s_ref.timing.hbm_counts() != s_jit.timing.hbm_counts():
        diffs.append(f"hbm counters: ref {s_ref.timing.hbm_counts()} jit {s_jit.timing.hbm_counts()}")
    if diffs:
        rule = RULE_BY_CODE[o_ref.fault[0]].id if o_ref.fault else None
        raise AssertionError(
            f"lock-step mismatch {what} (config #{CONFIGS.index(cfg) if cfg in CONFIGS else '?'}, "
            f"state seed {seed}, pool {pool_pages}, reference fault {rule} {o_ref.fault}, "
            f"retired {o_ref.retired}):\n" + "\n".join(diffs) + "\nprogram:\n" + _listing(list(words))
        )
    return o_ref


def run_seed(seed):
    ci, words, sseed, pool = gen_case(RandChooser(seed))
    return run_lockstep(CONFIGS[ci], words, sseed, pool, what=f"corpus seed {seed}")


# ===================================================================================== tests

_SETTINGS = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)


_U32S = st.integers(0, (1 << 32) - 1)


@st.composite
def _cases(draw):
    ci = draw(st.sampled_from(CONFIG_PICK))
    clean = draw(st.integers(0, 9)) < 7
    items = draw(st.lists(_U32S, min_size=1, max_size=24 if clean else 10))
    return ci, gen_program(ci, clean, items), draw(_U32S), draw(st.sampled_from((16, 0, 1)))


@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(_cases())
def test_lockstep_random_programs(case):
    ci, words, seed, pool = case
    run_lockstep(CONFIGS[ci], words, seed, pool)


@settings(max_examples=WORD_EXAMPLES, **_SETTINGS)
@given(
    st.sampled_from(range(len(CONFIGS))),
    st.lists(st.integers(0, 0xFFFFFFFF), min_size=1, max_size=24),
    st.integers(0, (1 << 32) - 1),
)
def test_lockstep_random_words(ci, words, seed):
    o = run_lockstep(CONFIGS[ci], words, seed, budget=500)
    assert o.fault is None or RULE_BY_CODE.get(o.fault[0]) is not None


def test_lockstep_corpus():
    rules = {}
    for seed in range(CORPUS_SEEDS):
        o = run_seed(seed)
        key = RULE_BY_CODE[o.fault[0]].id if o.fault else "ok"
        rules[key] = rules.get(key, 0) + 1
    # the corpus must exercise both clean runs and faults
    assert rules.get("ok", 0) > CORPUS_SEEDS // 10, rules
    assert len(rules) > 8, rules


#: the routing of the timing-only lock-step by state seed: none (V_TOPK results data-derived), or a policy
ROUTINGS = (
    None,
    Routing("uniform", seed=5),
    Routing("round-robin"),
    Routing("file", table=((3, 1, 0, 2, 7, 6, 5, 4),)),
)


@settings(max_examples=max(100, EXAMPLES // 4), **_SETTINGS)
@given(_cases())
def test_lockstep_timing_only_random_programs(case):
    """Timing-only runs (issue 30) in lock step: same checks, faults (TO-DATA included), integer state, taint and
    every timing statistic on both backends."""
    ci, words, seed, pool = case
    run_lockstep(CONFIGS[ci], words, seed, pool, functional=False, routing=ROUTINGS[seed % len(ROUTINGS)])


def test_lockstep_timing_only_corpus():
    rules: dict[str, int] = {}
    for seed in range(max(50, CORPUS_SEEDS // 4)):
        ci, words, sseed, pool = gen_case(RandChooser(seed))
        routing = ROUTINGS[seed % len(ROUTINGS)]
        o = run_lockstep(
            CONFIGS[ci], words, sseed, pool, what=f"timing-only seed {seed}", functional=False, routing=routing
        )
        key = RULE_BY_CODE[o.fault[0]].id if o.fault else "ok"
        rules[key] = rules.get(key, 0) + 1
    assert rules.get("ok", 0) > 10 and len(rules) > 6, rules


def test_corpus_covers_every_opcode():
    """The generator reaches every instruction (a guard against a silently narrowed generator)."""
    seen = set()
    for seed in range(CORPUS_SEEDS):
        _ci, words, _s, _p = gen_case(RandChooser(seed))
        seen.update(w & 0x3F for w in words)
    missing = {i.mnemonic for i in INSTRUCTIONS if i.opcode not in seen}
    assert not missing, missing


# ------------------------------------------------------------------ resume paths and exact arithmetic


def _asm_words(*lines):
    from isa.assembler import assemble

    return list(assemble("\n".join(lines)).words)


def test_loop_stack_growth_resumes():
    # each pass of the outer loop leaves one gp2 record behind (its C_LOOP_END is never reached):
    # 300 stale records exceed the initial capacity of 256, so the core must grow and resume
    words = _asm_words("C_LOOP_START gp1, 300", "C_LOOP_START gp2, 5", "S_ADDI_INT gp3, gp3, 1", "C_LOOP_END gp1")
    cfg = dataclasses.replace(CONFIGS[0], MAX_LOOP_INSTRUCTIONS=100_000)
    o = run_lockstep(cfg, words, 1)
    assert o.fault is None
    s = make_state(cfg, 1)
    core.execute(s, words)
    assert s.loop_start.shape[0] >= 300 and int(s.ctrl[4]) == 300


@pytest.mark.parametrize("pool_pages", [0, 1])
def test_hbm_pool_growth_resumes(pool_pages):
    cfg = CONFIGS[0]  # 128 KiB HBM = 2 pages
    words = _asm_words(
        "S_LUI_INT gp1, 15",
        "S_ADDI_INT gp1, gp1, 4088",  # 65528: straddles pages
        "S_ADDI_INT gp2, gp0, 0",
        "C_SET_ADDR_REG a1, gp0, gp2",
        "S_ADDI_INT gp3, gp0, 64",
        "C_SET_SCALE_REG gp3",
        "S_ADDI_INT gp4, gp0, 0",
        "C_SET_STRIDE_REG gp4",
        "H_STORE_V gp4, gp1, a1, 1, 0",
        "H_PREFETCH_V gp4, gp1, a1, 0, 0",
    )
    o = run_lockstep(cfg, words, 7, pool_pages=pool_pages)
    assert o.fault is None


def test_huge_a_register_faults_exactly():
    cfg = CONFIGS[0]
    # a1 = 0xFFFFFFFF_FFFFFFF0: base + offset exceeds 2^64; BD-HBM with the value saturated
    words = _asm_words(
        "S_LUI_INT gp1, 1048575",
        "S_ADDI_INT gp1, gp1, 4095",
        "S_ADDI_INT gp2, gp1, 0",
        "S_SUB_INT gp2, gp2, gp0",
        "S_LUI_INT gp3, 1048575",
        "S_ADDI_INT gp3, gp3, 4080",
        "C_SET_ADDR_REG a1, gp2, gp3",
        "S_ADDI_INT gp4, gp0, 0",
        "S_ADDI_INT gp5, gp0, 64",
        "H_PREFETCH_V gp4, gp5, a1, 0, 0",
    )
    o = run_lockstep(cfg, words, 3)
    assert RULE_BY_CODE[o.fault[0]].id == "BD-HBM"
    assert o.fault[3] == (1 << 63) - 1


@pytest.mark.parametrize("budget", [0, 1, 7])
def test_budget_fault_matches(budget):
    words = _asm_words("C_LOOP_START gp1, 5", "S_ADDI_INT gp2, gp2, 1", "C_LOOP_END gp1")
    o = run_lockstep(CONFIGS[0], words, 5, budget=budget)
    assert RULE_BY_CODE[o.fault[0]].id == "BUDGET" and o.retired == budget


def test_runaway_fault_matches():
    # MAX_LOOP_INSTRUCTIONS = 40 in config 1: an outer iteration of 3 x 15 inner instructions runs away
    body = ["S_ADDI_INT gp2, gp2, 1"] * 13
    words = _asm_words("C_LOOP_START gp1, 2", "C_LOOP_START gp3, 3", *body, "C_LOOP_END gp3", "C_LOOP_END gp1")
    o = run_lockstep(CONFIGS[1], words, 5)
    assert RULE_BY_CODE[o.fault[0]].id == "LP-RUNAWAY"
