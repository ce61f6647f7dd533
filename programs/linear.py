"""``linear`` (kernels.md §2.2) and ``batched_matmul`` (§2.3): ``Y = X @ W (+ bias)`` on the systolic array.

X ``[rows, K]`` and Y ``[rows, N]`` are CBM activations in VRAM; W ``[K, N]`` (weight class, row pitch N) and
the optional bias ``[N]`` live in HBM.  Per output column tile ``nt`` and K chunk (at most ``max_k_tiles``
MRAM tiles), the W tiles are prefetched, then for every output column block ``j`` (row-granular ABI:
``j*B*M``) and row block ``g`` the chunk's ``M_MM`` accumulate in f32 and one ``M_MM_WO`` rounds to bf16.
Later chunks go through the ``split`` scratch and are added to Y (one more bf16 rounding each); the bias is
added after the last chunk.  ``loops=True`` (the default) emits every repeated step as a hardware loop with
register-stepped pointers, so the program size hardly depends on the shape (:class:`_LoopedLinear`);
``loops=False`` unrolls everything with compile-time addresses (the reference form).  Both run the same
compute and memory operations on the same addresses in the same order and give bit-identical results.

``w_runtime_offset_max`` (bytes) adds a run-time byte offset to every W prefetch offset: the emitter's
``w_offset_reg`` holds it, or the INT SRAM word at ``w_offset_int`` does (read once per output column tile;
e.g. an expert index times the expert stride of stacked MoE weights, computed by the caller; the MX scale
address follows from the element offset).  The plan checks that W holds the rows read at any offset up to
that bound; the register or word is read, never written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from isa.table import INSTRUCTIONS
from plena_sim.config import HardwareConfig
from plena_sim.timing.latency import latency_table
from plena_sim.timing.rtl import PC_II, rtl_table

from . import mutation_hooks
from .asm import Asm, AsmSink, areg, load_imm, region
from .asm import gp as G
from .common import (
    Index,
    LoopBudget,
    check_addr,
    check_disjoint,
    fail,
    need_int,
    need_multiple,
    rp,
    take_regs,
    vector_rows,
)
from .footprint import KernelPlan
from .hbm_tensors import HbmTensor, load_vector, row_pad

__all__ = [
    "LinearPlan",
    "plan_linear",
    "emit_linear",
    "BmmPlan",
    "plan_batched_matmul",
    "emit_batched_matmul",
    "emit_linear_core",
    "WOffset",
    "choose_path",
]

KERNEL = "linear"
GP_NEEDED = 9  # the unrolled form (loops=False)
LOOPED_GP = 11  # the looped form; batched_matmul's batch loop takes a 12th


@dataclass(frozen=True)
class LinearPlan(KernelPlan):
    rows: int
    K: int
    N: int
    x_base: int
    x_pitch: int
    y_base: int
    y_pitch: int
    w: HbmTensor
    w_offset: int  # elements: the first W row of this matmul (batched_matmul)
    w_runtime_offset_max: int | None  # bytes: a run-time W offset (the emitter's w_offset_reg) up to this, or None
    bias: HbmTensor | None
    bias_base: int | None
    mram_tile0: int
    max_k_tiles: int
    split_base: int | None
    loops: bool
    M: int
    V: int
    B: int
    y_rows: int
    chunks: tuple[tuple[int, ...], ...]
    kernel: str = KERNEL
    mram_tiles: tuple[int, int] = field(kw_only=True)  # always some
    path: str = field(default="gemm", kw_only=True)  # "gemm" (M_MM per BLEN-row block) or "gemv" (M_MV per row)

    @property
    def gemv(self) -> bool:
        return self.path == "gemv"

    @property
    def out_rows(self) -> int:
        """The Y (and split scratch) rows the matmul writes: every padded row (GEMM) or the real rows (GEMV)."""
        return self.rows if self.gemv else self.y_rows

    @property
    def n_chunks(self) -> int:
        return len(self.chunks)

    @property
    def k_split(self) -> bool:
        return len(self.chunks) > 1


def _check_common(kernel: str, cfg: HardwareConfig) -> None:
    M, V = cfg.MLEN, cfg.VLEN
    if V != M:
        fail(kernel, "VLEN", V, f"must equal MLEN={M}")
    if cfg.P_M != M:
        fail(kernel, "HBM_M_Prefetch_Amount", cfg.P_M, f"(effective Pm) must equal MLEN={M}")


def plan_linear(
    config: HardwareConfig,
    *,
    rows: int,
    K: int,
    N: int,
    x_base: int,
    x_pitch: int,
    y_base: int,
    y_pitch: int,
    w: HbmTensor,
    bias: HbmTensor | None = None,
    bias_base: int | None = None,
    mram_tile0: int = 0,
    max_k_tiles: int | None = None,
    split_base: int | None = None,
    loops: bool = True,
    w_offset: int = 0,
    w_runtime_offset_max: int | None = None,
    kernel: str = KERNEL,
    x_role: str = "input",
    y_role: str = "output",
    path: str = "auto",
) -> LinearPlan:
    cfg = config
    _check_common(kernel, cfg)
    M, V, B = cfg.MLEN, cfg.VLEN, cfg.BLEN
    RP = row_pad(cfg)
    T = cfg.mram_tiles
    need_int(kernel, "rows", rows, 1)
    need_int(kernel, "K", K, 1)
    need_int(kernel, "N", N, 1)
    need_multiple(kernel, "K", K, M, "MLEN")
    need_multiple(kernel, "N", N, M, "MLEN")
    for name, v in (("x_pitch", x_pitch), ("y_pitch", y_pitch)):
        need_int(kernel, name, v, 1)
        need_multiple(kernel, name, v, RP, "RP (lcm(BLEN, Pv, Ps))")
        if rows > v:
            fail(kernel, name, v, f"must be >= rows={rows}")
    for name, v in (("x_base", x_base), ("y_base", y_base)):
        need_int(kernel, name, v, 0)
        need_multiple(kernel, name, v, V, "VLEN")
    need_int(kernel, "mram_tile0", mram_tile0, 0)
    if mram_tile0 >= T:
        fail(kernel, "mram_tile0", mram_tile0, f"must be < the MRAM tile count {T} (at most {T - 1})")
    if max_k_tiles is None:
        max_k_tiles = T - mram_tile0
    need_int(kernel, "max_k_tiles", max_k_tiles, 1)
    if mram_tile0 + max_k_tiles > T:
        fail(
            kernel,
            "max_k_tiles",
            max_k_tiles,
            f"with mram_tile0={mram_tile0} overflows the {T} MRAM tiles (at most {T - mram_tile0})",
        )
    if not isinstance(loops, bool):
        fail(kernel, "loops", loops, "must be a bool")
    kt_total = K // M
    chunks = tuple(tuple(range(s, min(s + max_k_tiles, kt_total))) for s in range(0, kt_total, max_k_tiles))
    y_rows = rp(cfg, rows)
    path = choose_path(kernel, cfg, rows, path, len(chunks[0]))
    # W tensor: weight class, row pitch N, MX alignment, every byte read inside the element region
    if w.row_pitch_elems != N:
        fail(kernel, "w.row_pitch_elems", w.row_pitch_elems, f"must equal N={N}")
    if (N * w.eb) % w.blk or (M * w.eb) % w.blk:
        fail(kernel, "N", N, f"row bytes N*eb={N * w.eb} must be a multiple of the MX block bytes {w.blk}")
    need_int(kernel, "w_offset", w_offset, 0)
    w_need = w_offset + K * N + _runtime_offset_elems(kernel, w, w_runtime_offset_max)
    if w.alloc_elems < w_need:
        fail(kernel, "w.alloc_elems", w.alloc_elems, f"must be >= {w_need} (the rows this matmul reads)")
    if (w_offset * w.eb) % w.blk:
        fail(kernel, "w_offset", w_offset, f"bytes must be a multiple of the MX block bytes {w.blk}")
    check_addr(kernel, "W byte offset", (w_need - 1) * w.eb)
    regions = {"x": (x_base // V, (K // V) * x_pitch, x_role), "y": (y_base // V, (N // V) * y_pitch, y_role)}
    slack = {"w": w_need}
    if bias is not None:
        if bias_base is None:
            fail(kernel, "bias_base", None, "is required with a bias")
        need_int(kernel, "bias_base", bias_base, 0)
        need_multiple(kernel, "bias_base", bias_base, V, "VLEN")
        nb_rows = vector_rows(cfg, N)
        if bias.alloc_elems < nb_rows * V:
            fail(kernel, "bias.alloc_elems", bias.alloc_elems, f"must be >= {nb_rows * V} (Pv-row slack)")
        regions["bias"] = (bias_base // V, nb_rows, "scratch")
        slack["bias"] = nb_rows * V
    if len(chunks) > 1:
        if split_base is None:
            fail(kernel, "split_base", None, f"is required: ceil(K/M)={kt_total} > max_k_tiles={max_k_tiles}")
        need_int(kernel, "split_base", split_base, 0)
        need_multiple(kernel, "split_base", split_base, V, "VLEN")
        regions["split"] = (split_base // V, y_rows, "scratch")
    for name, (r0, n, _role) in regions.items():
        check_addr(kernel, f"{name} region end", (r0 + n) * V)
    if x_role == "inout" and x_base == y_base:
        regions.pop("y")
    check_disjoint(kernel, regions)
    mram = (mram_tile0, min(max_k_tiles, kt_total))
    gp_needed = LOOPED_GP if loops else GP_NEEDED
    return LinearPlan(
        rows,
        K,
        N,
        x_base,
        x_pitch,
        y_base,
        y_pitch,
        w,
        w_offset,
        w_runtime_offset_max,
        bias,
        bias_base,
        mram_tile0,
        max_k_tiles,
        split_base if len(chunks) > 1 else None,
        loops,
        M,
        V,
        B,
        y_rows,
        chunks,
        kernel,
        vram_regions=regions,
        mram_tiles=mram,
        hbm_slack=slack,
        cfg=cfg,
        gp_needed=gp_needed,
        fp_needed=0,
        path=path,
    )


PATHS = ("auto", "gemm", "gemv")


def choose_path(kernel: str, cfg: HardwareConfig, rows: int, path: str, nk: int = 1) -> str:
    """The matmul form: ``path`` if forced, else (``"auto"``) GEMV iff ``rows < BLEN`` and its matrix-unit time
    per column block and K chunk of ``nk`` tiles is at most GEMM's under both the serial latency table and the
    rtl model (so GEMV never makes either slower): GEMM ``ceil(rows/B)`` x (``nk`` M_MM + M_MM_WO), GEMV
    ``rows`` x (``nk`` M_MV + M_MV_WO)."""
    if path not in PATHS:
        fail(kernel, "path", path, f"must be one of {PATHS}")
    if path != "auto":
        return path
    if rows >= cfg.BLEN:
        return "gemm"
    blocks = rp(cfg, rows) // cfg.BLEN
    for lat in _matrix_latencies(cfg):
        gemm = blocks * (nk * lat["M_MM"] + lat["M_MM_WO"])
        if rows * (nk * lat["M_MV"] + lat["M_MV_WO"]) > gemm:
            return "gemm"
    return "gemv"


_MATRIX_OPS = ("M_MM", "M_MM_WO", "M_MV", "M_MV_WO")


def _matrix_latencies(cfg: HardwareConfig) -> tuple[dict[str, int], dict[str, int]]:
    """The four matrix opcodes' cycles: serial latency (timing.md §2) and rtl initiation interval."""
    serial, rtl = latency_table(cfg), rtl_table(cfg).base
    op = {i.mnemonic: i.opcode for i in INSTRUCTIONS if i.mnemonic in _MATRIX_OPS}
    return {n: int(serial[o]) for n, o in op.items()}, {n: int(rtl[o, PC_II]) for n, o in op.items()}


def _runtime_offset_elems(kernel: str, w: HbmTensor, most: int | None) -> int:
    """W elements past the static rows that a run-time offset of at most ``most`` bytes may reach."""
    if most is None:
        return 0
    need_int(kernel, "w_runtime_offset_max", most, 0)
    if most % w.blk or most % w.eb:
        fail(kernel, "w_runtime_offset_max", most, f"must be a multiple of the MX block bytes {w.blk} and of eb={w.eb}")
    return most // w.eb


@dataclass(frozen=True)
class WOffset:
    """Where the run-time W byte offset is: in gp register ``reg``, or in the INT SRAM word at ``int_addr``."""

    reg: int | None = None
    int_addr: int | None = None

    @property
    def given(self) -> bool:
        return self.reg is not None or self.int_addr is not None


def _check_offset_reg(plan: LinearPlan, regs: Sequence[int], off: WOffset) -> None:
    """The run-time W offset: given (a register not one of the kernel's, or an INT SRAM word) iff the plan has
    one."""
    w_offset_reg = off.reg
    if off.reg is not None and off.int_addr is not None:
        fail(plan.kernel, "w_offset_int", off.int_addr, f"and w_offset_reg={off.reg} exclude each other")
    if off.given != (plan.w_runtime_offset_max is not None):
        fail(
            plan.kernel,
            "w_offset_reg" if off.int_addr is None else "w_offset_int",
            w_offset_reg if off.int_addr is None else off.int_addr,
            f"must be given iff the plan has a run-time W offset (w_runtime_offset_max={plan.w_runtime_offset_max})",
        )
    if off.int_addr is not None:
        need_int(plan.kernel, "w_offset_int", off.int_addr, 0, plan.cfg.INT_SRAM_SIZE - 1)
    if w_offset_reg is not None:
        if isinstance(w_offset_reg, bool) or not isinstance(w_offset_reg, int) or not 1 <= w_offset_reg <= 15:
            fail(plan.kernel, "w_offset_reg", w_offset_reg, "must be a register in 1..15")
        own = list(regs[: plan.gp_needed])
        if w_offset_reg in own:
            fail(plan.kernel, "w_offset_reg", w_offset_reg, f"must not be one of the kernel's registers {own}")


def _set_scale_stride(asm: AsmSink, t: HbmTensor, pitch_bytes: int | None, reg: int) -> None:
    load_imm(asm, reg, t.scale_offset)
    asm.C_SET_SCALE_REG(G(reg))
    if pitch_bytes is not None:
        load_imm(asm, reg, pitch_bytes)
        asm.C_SET_STRIDE_REG(G(reg))


def emit_linear_core(
    asm: Asm,
    plan: LinearPlan,
    regs: Sequence[int],
    lb: LoopBudget,
    batch: Batch | None = None,
    w_offset_reg: int | None = None,
    w_offset_int: int | None = None,
) -> None:
    """The body of ``linear`` for one plan (used by linear, batched_matmul, ffn, router_topk and moe_layer).

    ``batch`` (looped form only) repeats it over a batch loop with per-batch X/Y/W steps (batched_matmul).
    The run-time W byte offset added to every W prefetch offset (required iff the plan has
    ``w_runtime_offset_max``) is register ``w_offset_reg`` (read, never written, not one of ``regs``) or the INT
    SRAM word at ``w_offset_int`` (loaded once per output column tile, ``S_LD_INT r, r, 0`` with ``r`` holding
    the address)."""
    off = WOffset(w_offset_reg, w_offset_int)
    _check_offset_reg(plan, regs, off)
    if plan.loops:
        _LoopedLinear(lb, plan, regs, batch or Batch(), off).emit(asm)
        return
    assert batch is None, "the unrolled form emits one batch per call"
    _emit_unrolled(asm, plan, regs, lb, off)


@dataclass(frozen=True)
class Batch:
    """The batch loop of the looped core: ``count`` batches, X/Y element steps and the W byte step per batch."""

    count: int = 1
    x_step: int = 0
    y_step: int = 0
    w_step: int = 0


class _LoopedLinear:
    """The looped form: batch, output column tile ``nt`` and K chunk are :meth:`LoopBudget.repeat` loops (a
    hardware loop unless an iteration exceeds the budget), column block ``j`` likewise, row block ``g`` a
    hardware loop, the K tiles of a chunk (W prefetch and ``M_MM``) :meth:`LoopBudget.run` loops.  Pointers
    run (stepped by constants, rewound after a loop); the per-batch / per-``nt`` bases are computed from the
    loop counters (:meth:`LoopBudget.affine`).  The first chunk writes Y, later ones the split scratch, added
    to Y; the middle (full) chunks are one loop, a shorter last chunk is emitted on its own."""

    def __init__(self, lb: LoopBudget, plan: LinearPlan, regs: Sequence[int], batch: Batch, off: WOffset) -> None:
        self.lb, self.p, self.batch, self.off = lb, plan, batch, off
        (self.Lnt, self.Lci, self.Lj, self.Lg, self.Lk, self.gWo, self.gX, self.gW, self.gD, self.gT1, self.gT2) = regs[
            :LOOPED_GP
        ]
        self.Lbt = regs[LOOPED_GP] if batch.count > 1 else 0
        M, B, V = plan.M, plan.B, plan.V
        self.xk = plan.x_pitch * V  # X step per K tile
        self.tile0 = plan.mram_tile0 * M * M
        self.ng = plan.y_rows // B
        # the K-tile M_MM loop steps its pointers by M*M and xk; past the immediate it is unrolled (Lk as scratch)
        self.kk_loop = not (LoopBudget.needs_register(M * M) or LoopBudget.needs_register(self.xk))

    def emit(self, asm: Asm) -> None:
        p, lb = self.p, self.lb
        if p.bias is not None:
            assert p.bias_base is not None  # plan_linear requires it with a bias
            asm.comment(f"{p.kernel}: load bias -> VRAM row {p.bias_base // p.V}")
            with region(asm, "load_bias"):
                load_vector(asm, p.cfg, p.bias, p.N, p.bias_base, [self.gT1, self.gT2, self.Lk, self.Lg])
        lb.repeat(self.Lbt, self.batch.count, "batches", self._batch)

    def _batch(self, bt: Index) -> None:
        self.lb.asm.comment(f"{self.p.kernel}: W SCALE/STRIDE")
        _set_scale_stride(self.lb.asm, self.p.w, self.p.N * self.p.w.eb, self.gT1)
        self.lb.repeat(self.Lnt, self.p.N // self.p.M, "output column tiles", lambda nt: self._tile(bt, nt))

    def _y_nt(self, dst: int, bt: Index, nt: Index) -> None:
        p = self.p
        self.lb.affine(dst, p.y_base, [(bt, self.batch.y_step), (nt, p.y_pitch * p.V)], self.Lk)

    def _tile(self, bt: Index, nt: Index) -> None:
        p, lb = self.p, self.lb
        lb.asm.comment(f"{p.kernel}: output column tile nt (W row offset, X chunk base)")
        lb.affine(self.gWo, p.w_offset * p.w.eb, [(bt, self.batch.w_step), (nt, p.M * p.w.eb)], self.Lk)
        run = _runtime_offset(lb.asm, self.off, self.Lk)
        if run is not None:
            lb.asm.S_ADD_INT(G(self.gWo), G(self.gWo), G(run))
        lb.affine(self.gX, p.x_base, [(bt, self.batch.x_step)], self.Lk)
        sizes = [len(c) for c in p.chunks]
        mkt = sizes[0]
        last = sizes[-1] if len(sizes) > 1 and sizes[-1] != mkt else 0
        middle = len(sizes) - 1 - int(last > 0)
        self._chunk(bt, nt, mkt, first=True, more=len(sizes) > 1)
        lb.repeat(self.Lci, middle, "K chunks", lambda _ci: self._chunk(bt, nt, mkt, first=False, more=True))
        if last:
            self._chunk(bt, nt, last, first=False, more=False)
        if p.bias is not None:
            assert p.bias_base is not None
            lb.asm.comment(f"{p.kernel}: Y[nt] += bias row nt")
            self._y_nt(self.gT1, bt, nt)
            lb.affine(self.gT2, p.bias_base, [(nt, p.V)], self.Lk)
            with region(lb.asm, "bias"):
                self._add_rows(p.rows, bias=True)

    def _chunk(self, bt: Index, nt: Index, nk: int, *, first: bool, more: bool) -> None:
        """Prefetch the chunk's ``nk`` W tiles, multiply (into Y or the split scratch), add the split to Y."""
        p, lb = self.p, self.lb
        lb.asm.comment(f"{p.kernel}: K chunk of {nk} tiles: prefetch W")
        row_step = 0 if mutation_hooks.active("weight_tile_row_ignored") else p.M * p.N * p.w.eb
        load_imm(lb.asm, self.gW, self.tile0)

        def prefetch(step: bool) -> None:
            lb.asm.H_PREFETCH_M(G(self.gW), G(self.gWo), areg(p.w.areg), 1, 0)
            lb.add(self.gWo, row_step, self.Lg)
            if step:
                lb.add(self.gW, p.M * p.M, self.Lg)

        with region(lb.asm, "load_w"):
            lb.run(self.Lj, nk, "W tiles", prefetch, step_last=False)
        lb.asm.comment(f"{p.kernel}: matmul -> {'Y' if first else 'split'}")
        if first:
            self._y_nt(self.gD, bt, nt)
        else:
            assert p.split_base is not None  # plan_linear requires it for a K split
            load_imm(lb.asm, self.gD, p.split_base)
        load_imm(lb.asm, self.gW, self.tile0)
        with region(lb.asm, "compute"):
            lb.repeat(self.Lj, p.M // p.B, "column blocks j", lambda _j: self._column_block(nk))
        if not first and not mutation_hooks.active("ksplit_partial_dropped"):
            lb.asm.comment(f"{p.kernel}: Y[nt] += split")
            self._y_nt(self.gT1, bt, nt)
            load_imm(lb.asm, self.gT2, p.split_base or 0)
            with region(lb.asm, "accumulate"):
                self._add_rows(p.out_rows, bias=False)
        if more:
            lb.add(self.gX, nk * self.xk, self.Lj)

    def _column_block(self, nk: int) -> None:
        """Every row block g (GEMM: BLEN rows each) or row (GEMV) of column block j, then step to block j+1."""
        p, lb = self.p, self.lb
        n, row_step = (p.rows, p.V) if p.gemv else (self.ng, p.B * p.V)
        stepping = n > 1
        with lb.loop(self.Lg, n, "rows" if p.gemv else "row blocks g"):
            self._row_block(nk)
            if stepping:
                lb.add(self.gX, row_step, self.Lk)
                lb.add(self.gD, row_step, self.Lk)
        done = n * row_step if stepping else 0
        lb.add(self.gX, -done, self.Lg)
        lb.add(self.gD, p.B - done, self.Lg)
        lb.add(self.gW, _col_step(p), self.Lg)

    def _row_block(self, nk: int) -> None:
        """``M_MM`` (GEMV: ``M_MV``) over the chunk's K tiles (ascending), then the write-out."""
        p, lb = self.p, self.lb
        mm = p.M * p.M
        mul = lb.asm.M_MV if p.gemv else lb.asm.M_MM
        mul(0, G(self.gW), G(self.gX))
        if nk > 1:
            lb.offset(self.gT1, self.gW, mm)
            lb.offset(self.gT2, self.gX, self.xk)
            tmp = None if self.kk_loop else self.Lk

            def tile(step: bool) -> None:
                mul(0, G(self.gT1), G(self.gT2))
                if step:
                    lb.add(self.gT1, mm, tmp)
                    lb.add(self.gT2, self.xk, tmp)

            if self.kk_loop:
                lb.run(self.Lk, nk - 1, "K tiles", tile, step_last=False)
            else:
                for k in range(nk - 1):
                    tile(k < nk - 2)
        with region(lb.asm, "writeout"):
            _write_out(lb.asm, p, self.gD)

    def _add_rows(self, n: int, *, bias: bool) -> None:
        """``Y[r] += S[r]`` (split) or ``Y[r] += S`` (bias row) for ``r < n``: Y at gT1, S at gT2."""
        lb, V = self.lb, self.p.V

        def row(step: bool) -> None:
            lb.asm.V_ADD_VV(G(self.gT1), G(self.gT1), G(self.gT2), 0)
            if step:
                lb.add(self.gT1, V)
                if not bias:
                    lb.add(self.gT2, V)

        lb.run(self.Lg, n, "row add", row, step_last=False)


def _col_step(plan: LinearPlan) -> int:
    """The MRAM address step between column blocks: ``B*M`` for M_MM (row-granular ABI), ``B`` for M_MV."""
    if plan.gemv or mutation_hooks.active("linear_col_step_element"):
        return plan.B
    return plan.B * plan.M


def _write_out(asm: AsmSink, plan: LinearPlan, dst: int) -> None:
    """The accumulator to VRAM at ``gp[dst]``: BLEN rows (``M_MM_WO``) or one row (``M_MV_WO``)."""
    if plan.gemv:
        asm.M_MV_WO(G(dst), 0)
    else:
        asm.M_MM_WO(G(dst), G(0), 0)


def _runtime_offset(asm: AsmSink, off: WOffset, scratch: int) -> int | None:
    """The register holding the run-time W offset (``scratch`` loaded from the INT SRAM word), or None."""
    if off.int_addr is None:
        return off.reg
    load_imm(asm, scratch, off.int_addr)
    asm.S_LD_INT(G(scratch), G(scratch), 0)
    return scratch


def _emit_unrolled(asm: Asm, plan: LinearPlan, regs: Sequence[int], lb: LoopBudget, off: WOffset) -> None:
    """The unrolled form (``loops=False``): every address a compile-time constant (the reference form)."""
    gLj, gLg, gWj, gDj, gXg, gDg, gT1, gT2, gTmp = regs[:GP_NEEDED]
    M, V, N = plan.M, plan.V, plan.N
    w = plan.w
    eb = w.eb
    tile0 = plan.mram_tile0 * M * M
    col_step = _col_step(plan)
    if plan.bias is not None:
        assert plan.bias_base is not None  # plan_linear requires it with a bias
        asm.comment(f"{plan.kernel}: load bias -> VRAM row {plan.bias_base // V}")
        with region(asm, "load_bias"):
            load_vector(asm, plan.cfg, plan.bias, N, plan.bias_base, [gT1, gT2, gTmp, gLg])
    asm.comment(f"{plan.kernel}: W SCALE/STRIDE")
    _set_scale_stride(asm, w, N * eb, gT1)
    for nt in range(N // M):
        y_nt = plan.y_base + nt * plan.y_pitch * V
        w_offset_reg = _runtime_offset(asm, off, gTmp)
        for ci, chunk in enumerate(plan.chunks):
            asm.comment(f"{plan.kernel}: nt={nt} chunk={ci} prefetch W tiles {chunk[0]}..{chunk[-1]}")
            with region(asm, "load_w"):
                for kk, kt in enumerate(chunk):
                    row_term = 0 if mutation_hooks.active("weight_tile_row_ignored") else kt * M * N
                    load_imm(asm, gT1, tile0 + kk * M * M)
                    load_imm(asm, gT2, (plan.w_offset + row_term + nt * M) * eb)
                    if w_offset_reg is not None:
                        asm.S_ADD_INT(G(gT2), G(gT2), G(w_offset_reg))
                    asm.H_PREFETCH_M(G(gT1), G(gT2), areg(w.areg), 1, 0)
            if ci == 0:
                dst = y_nt
            else:
                assert plan.split_base is not None  # plan_linear requires it for a K split
                dst = plan.split_base
            x0 = plan.x_base + chunk[0] * plan.x_pitch * V
            asm.comment(f"{plan.kernel}: nt={nt} chunk={ci} matmul -> {'Y' if ci == 0 else 'split'}")
            with region(asm, "compute"):
                _unrolled_blocks(asm, plan, tile0, x0, dst, len(chunk), col_step, (gT1, gT2))
            if ci > 0 and not mutation_hooks.active("ksplit_partial_dropped"):
                asm.comment(f"{plan.kernel}: nt={nt} chunk={ci} Y += split")
                with region(asm, "accumulate"):
                    _add_rows(asm, plan, y_nt, dst, V, plan.out_rows, gT1, gT2)
        if plan.bias is not None:
            assert plan.bias_base is not None
            asm.comment(f"{plan.kernel}: nt={nt} Y += bias row {nt}")
            with region(asm, "bias"):
                _add_rows(asm, plan, y_nt, plan.bias_base + nt * V, 0, plan.rows, gT1, gT2)


def _unrolled_blocks(
    asm: Asm, plan: LinearPlan, tile0: int, x0: int, dst: int, nk: int, col_step: int, regs: tuple[int, int]
) -> None:
    """The unrolled matmul of one chunk (``nk`` W tiles from ``tile0``, X from ``x0``) into ``dst``: per column
    block j and row block g (GEMV: row) the ``M_MM`` (``M_MV``) over the tiles, then the write-out (the region
    ``writeout``)."""
    M, V, B = plan.M, plan.V, plan.B
    gT1, gT2 = regs
    xk = plan.x_pitch * V
    n, row_step = (plan.rows, V) if plan.gemv else (plan.y_rows // B, B * V)
    mul = asm.M_MV if plan.gemv else asm.M_MM
    for j in range(M // B):
        for g in range(n):
            for kk in range(nk):
                load_imm(asm, gT1, tile0 + kk * M * M + j * col_step)
                load_imm(asm, gT2, x0 + kk * xk + g * row_step)
                mul(0, G(gT1), G(gT2))
            load_imm(asm, gT1, dst + g * row_step + j * B)
            with region(asm, "writeout"):
                _write_out(asm, plan, gT1)


def _add_rows(asm: Asm, plan: LinearPlan, y0: int, s0: int, s_step: int, n: int, gY: int, gS: int) -> None:
    """``Y[r] += S[r*step]`` for r < n, unrolled."""
    V = plan.V
    for r in range(n):
        load_imm(asm, gY, y0 + r * V)
        load_imm(asm, gS, s0 + r * s_step)
        asm.V_ADD_VV(G(gY), G(gY), G(gS), 0)


def emit_linear(
    asm: Asm,
    plan: LinearPlan,
    *,
    gp: Sequence[int],
    fp: Sequence[int] = (),
    w_offset_reg: int | None = None,
    w_offset_int: int | None = None,
) -> None:
    regs, _ = take_regs(plan.kernel, gp, fp, plan.gp_needed, plan.fp_needed)
    lb = LoopBudget(asm, plan.cfg, plan.kernel)
    asm.begin(
        plan.kernel,
        rows=plan.rows,
        K=plan.K,
        N=plan.N,
        x=plan.x_base,
        y=plan.y_base,
        bias=int(plan.bias is not None),
        chunks=plan.n_chunks,
        loops=int(plan.loops),
    )
    with region(asm, "linear"):
        emit_linear_core(asm, plan, regs, lb, w_offset_reg=w_offset_reg, w_offset_int=w_offset_int)
    asm.end(plan.kernel)


# --------------------------------------------------------------------------- batched_matmul


@dataclass(frozen=True)
class BmmPlan(KernelPlan):
    nb: int
    Mr: int
    K: int
    N: int
    a_base: int
    y_base: int
    parts: tuple[LinearPlan, ...]
    loops: bool


def plan_batched_matmul(
    config: HardwareConfig,
    *,
    nb: int,
    Mr: int,
    K: int,
    N: int,
    a_base: int,
    y_base: int,
    w: HbmTensor,
    mram_tile0: int = 0,
    max_k_tiles: int | None = None,
    split_base: int | None = None,
    loops: bool = True,
) -> BmmPlan:
    k = "batched_matmul"
    need_int(k, "nb", nb, 1)
    need_int(k, "Mr", Mr, 1)
    V = config.VLEN
    mp = rp(config, Mr)
    pitch = nb * mp
    parts = []
    for bt in range(nb):
        parts.append(
            plan_linear(
                config,
                rows=Mr,
                K=K,
                N=N,
                x_base=a_base + bt * mp * V,
                x_pitch=pitch,
                y_base=y_base + bt * mp * V,
                y_pitch=pitch,
                w=w,
                mram_tile0=mram_tile0,
                max_k_tiles=max_k_tiles,
                split_base=split_base,
                loops=loops,
                w_offset=bt * K * N,
                kernel=k,
            )
        )
    regions = {"a": (a_base // V, (K // V) * pitch, "input"), "y": (y_base // V, (N // V) * pitch, "output")}
    if parts[0].split_base is not None:
        regions["split"] = parts[0].vram_regions["split"]
    check_disjoint(k, regions)
    return BmmPlan(
        nb,
        Mr,
        K,
        N,
        a_base,
        y_base,
        tuple(parts),
        loops,
        vram_regions=regions,
        mram_tiles=parts[0].mram_tiles,
        hbm_slack={"w": nb * K * N},
        cfg=config,
        gp_needed=parts[0].gp_needed + int(loops and nb > 1),
        fp_needed=0,
    )


def emit_batched_matmul(asm: Asm, plan: BmmPlan, *, gp: Sequence[int], fp: Sequence[int] = ()) -> None:
    regs, _ = take_regs("batched_matmul", gp, fp, plan.gp_needed, plan.fp_needed)
    asm.begin("batched_matmul", nb=plan.nb, Mr=plan.Mr, K=plan.K, N=plan.N, a=plan.a_base, y=plan.y_base)
    p0 = plan.parts[0]
    if plan.loops:
        p1 = plan.parts[-1] if plan.nb > 1 else p0
        steps = [(b - a) // max(1, plan.nb - 1) for a, b in ((p0.x_base, p1.x_base), (p0.y_base, p1.y_base))]
        batch = Batch(plan.nb, steps[0], steps[1], (p1.w_offset - p0.w_offset) // max(1, plan.nb - 1) * p0.w.eb)
        with region(asm, "bmm"):
            emit_linear_core(asm, p0, regs, LoopBudget(asm, p0.cfg, "batched_matmul"), batch)
    else:
        for bt, part in enumerate(plan.parts):
            asm.comment(f"batched_matmul: batch {bt}")
            with region(asm, "bmm"):
                emit_linear_core(asm, part, regs, LoopBudget(asm, part.cfg, "batched_matmul"))
    asm.end("batched_matmul")
