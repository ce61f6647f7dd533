"""HBM helpers shared by every generator (kernels.md §2.1): address registers, activation preload/store,
vector-parameter loads, and the :class:`HbmTensor` description of a tensor in HBM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import Asm, areg, gp, load_imm

__all__ = [
    "HbmTensor",
    "set_addr_regs",
    "preload_act",
    "store_act",
    "load_vector",
    "mx_block_bytes",
    "round_up",
    "ceil_div",
    "row_pad",
]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def row_pad(cfg: HardwareConfig) -> int:
    """RP = lcm(B, Pv, Ps): the row padding quantum of CBM activations (kernels.md §0)."""
    from math import lcm

    return lcm(cfg.BLEN, cfg.P_V, cfg.P_W)


@dataclass(frozen=True)
class HbmTensor:
    """A tensor in HBM as a generator sees it (kernels.md §1.1).

    ``areg``: the a-register holding its byte base; ``scale_offset``: bytes from the base to the MX scale
    region (the element region size, slack included; 0 for plain types); ``eb``: bytes per element;
    ``prec``: the H_* precision flag (0 act/weight, 1 KV); ``row_pitch_elems``: elements per row;
    ``alloc_elems``: elements allocated (>= rows*cols; the excess is zero slack); ``block``: MX block
    elements (0 for plain types).
    """

    areg: int
    scale_offset: int
    eb: int
    prec: int
    row_pitch_elems: int
    alloc_elems: int
    block: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.areg <= 7:
            raise ValueError(f"HbmTensor: areg={self.areg} must be in 0..7")
        if self.prec not in (0, 1):
            raise ValueError(f"HbmTensor: prec={self.prec} must be 0 or 1")

    @property
    def blk(self) -> int:
        """MX block bytes (block elements x eb); 1 for plain types (no alignment rule)."""
        return self.block * self.eb if self.block else 1


def mx_block_bytes(t: HbmTensor) -> int:
    return t.blk


def set_addr_regs(asm: Asm, bases: Mapping[int, int], regs: Sequence[int]) -> None:
    """``C_SET_ADDR_REG aN, hi, lo`` for every ``{aN: byte_base}`` (uses regs[0], regs[1])."""
    if len(regs) < 2:
        raise ValueError("set_addr_regs: needs 2 gp registers")
    g1, g2 = regs[0], regs[1]
    for a, base in bases.items():
        if not 0 <= a <= 7:
            raise ValueError(f"set_addr_regs: a{a} does not exist (a0..a7)")
        if not 0 <= base < (1 << 64):
            raise ValueError(f"set_addr_regs: base {base} is not a 64-bit byte address")
        load_imm(asm, g1, base & 0xFFFFFFFF)
        hi = base >> 32
        if hi:
            load_imm(asm, g2, hi)
        asm.C_SET_ADDR_REG(areg(a), gp(g2) if hi else gp(0), gp(g1))


def _check_act(name: str, cfg: HardwareConfig, t: HbmTensor, rows: int, cols: int, rows_p: int, group: int) -> None:
    V = cfg.VLEN
    if cols % V:
        raise ValueError(f"{name}: cols={cols} must be a multiple of VLEN={V}")
    if rows_p % group:
        raise ValueError(f"{name}: rows_p={rows_p} must be a multiple of the transfer rows {group}")
    if rows > rows_p:
        raise ValueError(f"{name}: rows={rows} exceeds rows_p={rows_p}")
    if (cols * t.eb) % t.blk:
        raise ValueError(f"{name}: row bytes cols*eb={cols * t.eb} must be a multiple of the MX block bytes {t.blk}")
    if t.alloc_elems < rows_p * cols:
        raise ValueError(f"{name}: tensor alloc_elems={t.alloc_elems} < rows_p*cols={rows_p * cols}")


def _transfer_act(
    asm: Asm,
    cfg: HardwareConfig,
    op: str,
    t: HbmTensor,
    rows: int,
    cols: int,
    vram_base: int,
    rows_p: int,
    regs: Sequence[int],
    group: int,
) -> None:
    V = cfg.VLEN
    if len(regs) < 2:
        raise ValueError(f"{op}: needs 2 gp registers")
    gv, go = regs[0], regs[1]
    load_imm(asm, gv, t.scale_offset)
    asm.C_SET_SCALE_REG(gp(gv))
    stride = V * t.eb if mutation_hooks.active("preload_stride_vlen") else cols * t.eb
    load_imm(asm, gv, stride)
    asm.C_SET_STRIDE_REG(gp(gv))
    for c in range(cols // V):
        for q in range(rows_p // group):
            load_imm(asm, gv, vram_base + (c * rows_p + q * group) * V)
            load_imm(asm, go, (q * group * cols + c * V) * t.eb)
            asm.emit(op, gp(gv), gp(go), areg(t.areg), 1, t.prec)


def preload_act(
    asm: Asm, cfg: HardwareConfig, t: HbmTensor, rows: int, cols: int, vram_base: int, rows_p: int, regs: Sequence[int]
) -> None:
    """HBM ``[rows, cols]`` -> VRAM column-block-major at ``vram_base`` with row pitch ``rows_p``."""
    _check_act("preload_act", cfg, t, rows, cols, rows_p, cfg.P_V)
    _transfer_act(asm, cfg, "H_PREFETCH_V", t, rows, cols, vram_base, rows_p, regs, cfg.P_V)


def store_act(
    asm: Asm, cfg: HardwareConfig, t: HbmTensor, rows: int, cols: int, vram_base: int, rows_p: int, regs: Sequence[int]
) -> None:
    """VRAM CBM ``[rows, cols]`` -> HBM tensor ``t`` (mirror of :func:`preload_act`, Ps-row groups)."""
    _check_act("store_act", cfg, t, rows, cols, rows_p, cfg.P_W)
    V = cfg.VLEN
    if len(regs) < 2:
        raise ValueError("store_act: needs 2 gp registers")
    gv, go = regs[0], regs[1]
    scale = (rows * cols) // 2 if mutation_hooks.active("store_scale_wrong") else t.scale_offset
    load_imm(asm, gv, scale)
    asm.C_SET_SCALE_REG(gp(gv))
    load_imm(asm, gv, cols * t.eb)
    asm.C_SET_STRIDE_REG(gp(gv))
    Ps = cfg.P_W
    for c in range(cols // V):
        for q in range(rows_p // Ps):
            block = c * V if mutation_hooks.active("store_block_address") else c * rows_p * V
            load_imm(asm, gv, vram_base + block + q * Ps * V)
            load_imm(asm, go, (q * Ps * cols + c * V) * t.eb)
            asm.H_STORE_V(gp(gv), gp(go), areg(t.areg), 1, t.prec)


def load_vector(asm: Asm, cfg: HardwareConfig, t: HbmTensor, n: int, vram_base: int, regs: Sequence[int]) -> int:
    """Load a contiguous ``[n]`` vector into ``round_up(n/V, Pv)`` VRAM rows; returns that row count."""
    V, Pv = cfg.VLEN, cfg.P_V
    if n % V:
        raise ValueError(f"load_vector: n={n} must be a multiple of VLEN={V}")
    nrows = round_up(n // V, Pv)
    if t.alloc_elems < nrows * V:
        raise ValueError(f"load_vector: tensor alloc_elems={t.alloc_elems} < {nrows * V} (Pv-row slack)")
    if len(regs) < 2:
        raise ValueError("load_vector: needs 2 gp registers")
    gv, go = regs[0], regs[1]
    load_imm(asm, gv, t.scale_offset)
    asm.C_SET_SCALE_REG(gp(gv))
    for k in range(nrows // Pv):
        load_imm(asm, gv, vram_base + k * Pv * V)
        load_imm(asm, go, k * Pv * V * t.eb)
        asm.H_PREFETCH_V(gp(gv), gp(go), areg(t.areg), 0, t.prec)
    return nrows
