"""Shared planning helpers of the kernel generators (kernels.md §1): validation with named parameters,
region bookkeeping, register allocation and loop budgets.

Every check raises ``ValueError("<kernel>: <param>=<value> <rule>")`` so a message always names the
parameter, its value and the rule it breaks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import NoReturn

from plena_sim.config import HardwareConfig

from .asm import IMM18_LIMIT, Asm, load_imm
from .asm import gp as _g
from .hbm_tensors import ceil_div, round_up, row_pad

__all__ = [
    "Regions",
    "fail",
    "need_int",
    "need_multiple",
    "check_disjoint",
    "take_regs",
    "check_loop",
    "check_addr",
    "rp",
    "U32",
    "FP_CONST_SLOTS",
    "FP_STATE_BASE",
    "SLOT",
    "vector_rows",
    "check_fp_range",
    "Footprint",
    "step_adder",
]

U32 = 1 << 32
FP_STATE_BASE = 16
#: kernels.md §1.6
SLOT = {
    "NEG_INF": 0,
    "EPS": 1,
    "INV_HIDDEN": 2,
    "ONE": 3,
    "GELU_ALPHA": 4,
    "QK_SCALE": 5,
    "INV_BMM_SCALE": 6,
    "ZERO": 7,
}
FP_CONST_SLOTS = 16

Regions = dict  # name -> (first_row, n_rows, role)
#: one VRAM region: (first_row, n_rows, role)
Region = tuple[int, int, str]


def fail(kernel: str, param: str, value: object, rule: str) -> NoReturn:
    raise ValueError(f"{kernel}: {param}={value} {rule}")


def need_int(kernel: str, param: str, value: object, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(kernel, param, repr(value), "must be an integer")
    if value < lo:
        fail(kernel, param, value, f"must be >= {lo}")
    if hi is not None and value > hi:
        fail(kernel, param, value, f"must be <= {hi}")
    return value


def need_multiple(kernel: str, param: str, value: int, q: int, qname: str) -> None:
    if value % q:
        fail(kernel, param, value, f"must be a multiple of {qname}={q}")


def rp(cfg: HardwareConfig, n: int) -> int:
    return round_up(n, row_pad(cfg))


def vector_rows(cfg: HardwareConfig, n: int) -> int:
    """VRAM rows a ``load_vector`` of ``n`` elements writes: ``round_up(n/V, Pv)`` (kernels.md §1.7)."""
    return round_up(ceil_div(n, cfg.VLEN), cfg.P_V)


def step_adder(asm: Asm, spare: Sequence[int], step: int) -> Callable[[int], None]:
    """``add(r)`` emitting ``r += step``: one ``S_ADDI_INT`` while ``step < 2^18``, else ``S_ADD_INT`` from
    ``spare[0]``, which is loaded with ``step`` here (so it must stay untouched while ``add`` is used)."""
    if step < IMM18_LIMIT:
        return lambda r: asm.S_ADDI_INT(_g(r), _g(r), step)
    if not spare:
        raise ValueError(f"step_adder: step {step} >= 2^18 needs a spare register")
    load_imm(asm, spare[0], step)
    return lambda r: asm.S_ADD_INT(_g(r), _g(r), _g(spare[0]))


def check_addr(kernel: str, param: str, value: int) -> None:
    if not 0 <= value < U32:
        fail(kernel, param, value, "must be a 32-bit address (< 2^32)")


def check_disjoint(
    kernel: str, regions: Mapping[str, tuple[int, int, str]], allowed: Iterable[tuple[str, str]] = ()
) -> None:
    """All VRAM regions pairwise disjoint, except the documented aliases in ``allowed``."""
    ok = {frozenset(p) for p in allowed}
    items = [(k, r0, n) for k, (r0, n, _role) in regions.items() if n > 0]
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            a, a0, an = items[i]
            b, b0, bn = items[j]
            if a0 < b0 + bn and b0 < a0 + an and frozenset((a, b)) not in ok:
                raise ValueError(
                    f"{kernel}: VRAM region {a} rows [{a0}, {a0 + an}) overlaps region {b} rows [{b0}, {b0 + bn})"
                )


def check_fp_range(
    kernel: str, base: int, size: int, cfg: HardwareConfig, others: Mapping[str, tuple[int, int]] = {}
) -> None:
    """FP SRAM state/output range ``[base, base+size)``: >= 16, inside FP SRAM, disjoint from ``others``."""
    if base < FP_STATE_BASE:
        fail(kernel, "fp_state_base", base, f"must be >= {FP_STATE_BASE} (slots 0-15 are constants)")
    if base + size > cfg.FP_SRAM_SIZE:
        fail(kernel, "fp_state_base", base, f"+ size {size} exceeds FP_SRAM_SIZE={cfg.FP_SRAM_SIZE}")
    for name, (b, n) in others.items():
        if base < b + n and b < base + size:
            fail(kernel, "fp_state_base", base, f"range [{base}, {base + size}) overlaps {name} [{b}, {b + n})")


def take_regs(
    kernel: str, gp: Sequence[int], fp: Sequence[int], gp_needed: int, fp_needed: int
) -> tuple[list[int], list[int]]:
    """The first ``gp_needed``/``fp_needed`` registers of the caller's lists, validated."""
    gp, fp = list(gp), list(fp)
    for r in gp:
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 15:
            fail(kernel, "gp", gp, "must list registers in 1..15")
    for r in fp:
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 7:
            fail(kernel, "fp", fp, "must list registers in 1..7")
    if len(set(gp)) != len(gp) or len(set(fp)) != len(fp):
        fail(kernel, "gp/fp", (gp, fp), "must not repeat a register")
    if len(gp) < gp_needed:
        fail(kernel, "gp", gp, f"has {len(gp)} registers, the kernel needs {gp_needed}")
    if len(fp) < fp_needed:
        fail(kernel, "fp", fp, f"has {len(fp)} registers, the kernel needs {fp_needed}")
    return gp[:gp_needed], fp[:fp_needed]


def check_loop(kernel: str, loop: str, per_iteration: int, cfg: HardwareConfig) -> None:
    """A hardware loop iteration's dynamic instruction count must stay below MAX_LOOP_INSTRUCTIONS."""
    if per_iteration >= cfg.MAX_LOOP_INSTRUCTIONS:
        raise ValueError(
            f"{kernel}: loop {loop} executes {per_iteration} instructions per iteration, "
            f"reaching MAX_LOOP_INSTRUCTIONS={cfg.MAX_LOOP_INSTRUCTIONS}"
        )


@dataclass
class Footprint:
    """The full footprint of a plan (kernels.md §1.1)."""

    vram_regions: dict[str, Region] = field(default_factory=dict)
    fp_range: tuple[int, int] | None = None  # (base, size) of FP SRAM state/outputs
    int_range: tuple[int, int] | None = None
    mram_tiles: tuple[int, int] | None = None  # (first tile, count)
    hbm_slack: dict[str, int] = field(default_factory=dict)  # tensor -> alloc_elems it needs


@dataclass
class _LoopFrame:
    """One open hardware loop of a :class:`LoopBudget`."""

    start: int  # asm.n_instructions after its C_LOOP_START
    extra: int  # dynamic instructions of nested loops beyond their first iteration
    reg: int
    name: str


class LoopBudget:
    """Emit hardware loops while counting each iteration's dynamic instructions (kernels.md §1.8).

    ``with lb.loop(reg, count, "rows"):`` emits ``C_LOOP_START reg, count`` ... ``C_LOOP_END reg`` (a
    count of 1 emits the body once without a loop).  One iteration's dynamic count (body, C_LOOP_END and
    every nested loop fully) must stay below MAX_LOOP_INSTRUCTIONS, else ``ValueError``; a counter
    register already active in an enclosing loop is refused too.  ``lb.dynamic`` is the dynamic count of
    everything emitted through it at the outermost level (an instruction-count estimate of the kernel).
    """

    def __init__(self, asm: Asm, cfg: HardwareConfig, kernel: str):
        self.asm = asm
        self.cfg = cfg
        self.kernel = kernel
        self._stack: list[_LoopFrame] = []
        self._start = asm.n_instructions
        self._extra = 0
        self.max_iteration = 0

    @property
    def dynamic(self) -> int:
        return self.asm.n_instructions - self._start + self._extra

    def loop(self, reg: int, count: int, name: str) -> AbstractContextManager[None]:
        @contextlib.contextmanager
        def _cm() -> Iterator[None]:
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"{self.kernel}: loop {name} count={count} must be >= 1")
            if count == 1:
                yield
                return
            if any(f.reg == reg for f in self._stack):
                raise ValueError(f"{self.kernel}: loop {name} reuses counter gp{reg} of an enclosing loop")
            self.asm.C_LOOP_START(_g(reg), count)
            frame = _LoopFrame(self.asm.n_instructions, 0, reg, name)
            self._stack.append(frame)
            try:
                yield
            finally:
                self._stack.pop()
            self.asm.C_LOOP_END(_g(reg))
            body = self.asm.n_instructions - frame.start + frame.extra
            self.max_iteration = max(self.max_iteration, body)
            check_loop(self.kernel, name, body, self.cfg)
            if self._stack:
                self._stack[-1].extra += (count - 1) * body
            else:
                self._extra += (count - 1) * body

        return _cm()
