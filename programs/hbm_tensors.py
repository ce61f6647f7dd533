"""HBM helpers shared by every generator (kernels.md §2.1): address registers, activation preload/store,
vector-parameter loads, and the :class:`HbmTensor` description of a tensor in HBM.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import Asm, areg, gp, load_imm
from .common import Index, LoopBudget, ceil_div, round_up, row_pad

__all__ = [
    "HbmTensor",
    "row_view",
    "set_addr_regs",
    "preload_act",
    "store_act",
    "load_vector",
    "mx_block_bytes",
    "round_up",
    "ceil_div",
    "row_pad",
]


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


def row_view(t: HbmTensor, base: int, row0: int, scale_bytes: int) -> tuple[HbmTensor, int]:
    """The rows of ``t`` (byte base ``base``) from ``row0`` on as a tensor of their own: ``(view, its byte base)``.
    The MX scales stay where they are: the view's SCALE (bytes from its base to the scale of its first element) is
    the tensor's less the element bytes skipped plus the scale bytes of the blocks skipped (``scale_bytes`` per
    block of the tensor's MX type)."""
    skip = row0 * t.row_pitch_elems
    if row0 < 0 or skip > t.alloc_elems:
        raise ValueError(f"row_view: row0={row0} is outside the tensor ({t.alloc_elems // t.row_pitch_elems} rows)")
    if t.block and skip % t.block:
        raise ValueError(f"row_view: row0={row0} does not start on an MX block (block={t.block} elements)")
    scale = t.scale_offset - skip * t.eb + (skip // t.block) * scale_bytes if t.block else 0
    return replace(t, scale_offset=scale, alloc_elems=t.alloc_elems - skip), base + skip * t.eb


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
    with asm.generating("set_addr_regs") if isinstance(asm, Asm) else contextlib.nullcontext():
        for a, base in bases.items():
            load_imm(asm, g1, base & 0xFFFFFFFF)
            hi = base >> 32
            if hi:
                load_imm(asm, g2, hi)
            asm.C_SET_ADDR_REG(areg(a), gp(g2) if hi else gp(0), gp(g1))


def _check_act(
    name: str, cfg: HardwareConfig, t: HbmTensor, rows: int, cols: int, rows_p: int, group: int, row0: int = 0
) -> None:
    V = cfg.VLEN
    if cols % V:
        raise ValueError(f"{name}: cols={cols} must be a multiple of VLEN={V}")
    if rows_p % group:
        raise ValueError(f"{name}: rows_p={rows_p} must be a multiple of the transfer rows {group}")
    if rows > rows_p:
        raise ValueError(f"{name}: rows={rows} exceeds rows_p={rows_p}")
    if (cols * t.eb) % t.blk:
        raise ValueError(f"{name}: row bytes cols*eb={cols * t.eb} must be a multiple of the MX block bytes {t.blk}")
    if row0 < 0:
        raise ValueError(f"{name}: row0={row0} must be >= 0")
    if t.alloc_elems < (row0 + rows_p) * cols:
        raise ValueError(f"{name}: tensor alloc_elems={t.alloc_elems} < (row0+rows_p)*cols={(row0 + rows_p) * cols}")


def _transfer_act(
    asm: Asm,
    cfg: HardwareConfig,
    op: str,
    t: HbmTensor,
    cols: int,
    vram_base: int,
    rows_p: int,
    regs: Sequence[int],
    group: int,
    block_step: int,
    hbm_start: int = 0,
) -> None:
    """``op gv, go`` per ``group``-row transfer, column block ``c`` outer, row group ``q`` inner (hardware
    loops): VRAM ``vram_base + c*block_step + q*group*V``, HBM ``(q*group*cols + c*V)*eb`` (SCALE/STRIDE set).
    ``regs``: 4 gp registers; further ones hold the constant steps that are not one S_ADDI_INT."""
    V = cfg.VLEN
    if len(regs) < 4:
        raise ValueError(f"{op}: needs 4 gp registers")
    gv, go, gLc, gLq = regs[:4]
    spare = list(regs[4:])
    lb = LoopBudget(asm, cfg, op)
    nq = rows_p // group
    v_step, o_step = group * V, group * cols * t.eb
    # after the row groups (the last one steps only inside a loop): on to the next column block
    done = lb.stepped(nq, step_last=False)
    dv, do = block_step - done * v_step, V * t.eb - done * o_step
    looped = lb.looped(nq)
    for step in (v_step, o_step) if looped else ():
        if lb.needs_register(step):
            if not spare:
                raise ValueError(f"{op}: the row-group step {step} >= 2^18 needs another gp register")
            lb.hold(spare.pop(0), step)
    for step in (dv, do):
        if lb.needs_register(step) and spare:
            lb.hold(spare.pop(0), step)
    load_imm(asm, gv, vram_base)
    load_imm(asm, go, hbm_start)

    def transfer(step: bool) -> None:
        lb.asm.emit(op, gp(gv), gp(go), areg(t.areg), 1, t.prec)
        if step:
            lb.add(gv, v_step, None if looped else gLq)
            lb.add(go, o_step, None if looped else gLq)

    def block(_c: Index) -> None:
        lb.run(gLq, nq, "row groups", transfer, step_last=False)
        lb.add(gv, dv, gLq)
        lb.add(go, do, gLq)

    lb.repeat(gLc, cols // V, "column blocks", block)


def _set_scale_stride(asm: Asm, scale: int, stride: int, reg: int) -> None:
    load_imm(asm, reg, scale)
    asm.C_SET_SCALE_REG(gp(reg))
    load_imm(asm, reg, stride)
    asm.C_SET_STRIDE_REG(gp(reg))


def preload_act(
    asm: Asm, cfg: HardwareConfig, t: HbmTensor, rows: int, cols: int, vram_base: int, rows_p: int, regs: Sequence[int]
) -> None:
    """HBM ``[rows, cols]`` -> VRAM column-block-major at ``vram_base`` with row pitch ``rows_p``
    (``regs``: at least 4 gp registers, 5 when a row-group step is >= 2^18)."""
    _check_act("preload_act", cfg, t, rows, cols, rows_p, cfg.P_V)
    stride = cfg.VLEN * t.eb if mutation_hooks.active("preload_stride_vlen") else cols * t.eb
    _set_scale_stride(asm, t.scale_offset, stride, regs[0])
    _transfer_act(asm, cfg, "H_PREFETCH_V", t, cols, vram_base, rows_p, regs, cfg.P_V, rows_p * cfg.VLEN)


def store_act(
    asm: Asm,
    cfg: HardwareConfig,
    t: HbmTensor,
    rows: int,
    cols: int,
    vram_base: int,
    rows_p: int,
    regs: Sequence[int],
    row0: int = 0,
) -> None:
    """VRAM CBM ``[rows, cols]`` -> HBM tensor ``t`` from its row ``row0`` on (mirror of :func:`preload_act`,
    Ps-row groups; all ``rows_p`` rows are written)."""
    _check_act("store_act", cfg, t, rows, cols, rows_p, cfg.P_W, row0)
    V = cfg.VLEN
    scale = (rows * cols) // 2 if mutation_hooks.active("store_scale_wrong") else t.scale_offset
    _set_scale_stride(asm, scale, cols * t.eb, regs[0])
    block = V if mutation_hooks.active("store_block_address") else rows_p * V
    _transfer_act(asm, cfg, "H_STORE_V", t, cols, vram_base, rows_p, regs, cfg.P_W, block, row0 * cols * t.eb)


def load_vector(asm: Asm, cfg: HardwareConfig, t: HbmTensor, n: int, vram_base: int, regs: Sequence[int]) -> int:
    """Load a contiguous ``[n]`` vector into ``round_up(n/V, Pv)`` VRAM rows (one hardware loop over the
    ``Pv``-row transfers; ``regs``: 3 gp registers, a 4th when a step is >= 2^18); returns that row count."""
    V, Pv = cfg.VLEN, cfg.P_V
    if n % V:
        raise ValueError(f"load_vector: n={n} must be a multiple of VLEN={V}")
    nrows = round_up(n // V, Pv)
    if t.alloc_elems < nrows * V:
        raise ValueError(f"load_vector: tensor alloc_elems={t.alloc_elems} < {nrows * V} (Pv-row slack)")
    if len(regs) < 3:
        raise ValueError("load_vector: needs 3 gp registers")
    gv, go, gL = regs[:3]
    lb = LoopBudget(asm, cfg, "load_vector")
    count = nrows // Pv
    v_step, o_step = Pv * V, Pv * V * t.eb
    spare = list(regs[3:])
    for step in (v_step, o_step) if lb.looped(count) else ():
        if lb.needs_register(step):
            if not spare:
                raise ValueError(f"load_vector: the step {step} >= 2^18 needs another gp register")
            lb.hold(spare.pop(0), step)
    load_imm(asm, gv, t.scale_offset)
    asm.C_SET_SCALE_REG(gp(gv))
    load_imm(asm, gv, vram_base)
    load_imm(asm, go, 0)

    def transfer(step: bool) -> None:
        lb.asm.H_PREFETCH_V(gp(gv), gp(go), areg(t.areg), 0, t.prec)
        if step:
            lb.add(gv, v_step, None if lb.looped(count) else gL)
            lb.add(go, o_step, None if lb.looped(count) else gL)

    lb.run(gL, count, "transfers", transfer, step_last=False)
    return nrows
