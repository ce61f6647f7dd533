"""Shared planning helpers of the kernel generators (kernels.md §1): validation with named parameters,
region bookkeeping, register allocation and loop budgets.

Every check raises ``ValueError("<kernel>: <param>=<value> <rule>")`` so a message always names the
parameter, its value and the rule it breaks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import NoReturn, Protocol

from plena_sim.config import HardwareConfig

from .asm import IMM18_LIMIT, AsmSink, GeneratorError, load_imm
from .asm import gp as _g

__all__ = [
    "Regions",
    "fail",
    "need_int",
    "need_multiple",
    "check_disjoint",
    "take_regs",
    "out_pointer",
    "check_loop",
    "check_addr",
    "rp",
    "U32",
    "FP_CONST_SLOTS",
    "FP_STATE_BASE",
    "SLOT",
    "vector_rows",
    "check_fp_range",
    "step_adder",
    "LoopBudget",
    "LoopVar",
    "UNROLL",
    "Index",
    "ceil_div",
    "round_up",
    "row_pad",
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
#: copies of a short loop body per hardware-loop iteration (:meth:`LoopBudget.run`)
UNROLL = 8

Regions = dict  # name -> (first_row, n_rows, role)
#: one VRAM region: (first_row, n_rows, role)
Region = tuple[int, int, str]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def row_pad(cfg: HardwareConfig) -> int:
    """RP = lcm(B, Pv, Ps): the row padding quantum of CBM activations (kernels.md §0)."""
    from math import lcm

    return lcm(cfg.BLEN, cfg.P_V, cfg.P_W)


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


def step_adder(asm: AsmSink, spare: Sequence[int], step: int) -> Callable[[int], None]:
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


def out_pointer(asm: AsmSink, g_in: int, g_out: int, in_base: int, out_base: int) -> int:
    """The register that points at the output: ``g_out`` loaded with ``out_base``, or, in place
    (``out_base == in_base``), ``g_in`` itself (which already points there)."""
    if out_base == in_base:
        return g_in
    load_imm(asm, g_out, out_base)
    return g_out


def check_loop(kernel: str, loop: str, per_iteration: int, cfg: HardwareConfig) -> None:
    """A hardware loop iteration's dynamic instruction count must stay below MAX_LOOP_INSTRUCTIONS."""
    if per_iteration >= cfg.MAX_LOOP_INSTRUCTIONS:
        raise ValueError(
            f"{kernel}: loop {loop} executes {per_iteration} instructions per iteration, "
            f"reaching MAX_LOOP_INSTRUCTIONS={cfg.MAX_LOOP_INSTRUCTIONS}"
        )


@dataclass
class _LoopFrame:
    """One open hardware loop of a :class:`LoopBudget`."""

    start: int  # the sink's dynamic count (:func:`_dynamic_of`) after its C_LOOP_START
    reg: int
    name: str


@dataclass(frozen=True)
class LoopVar:
    """The index of a hardware loop: during iteration ``i`` its counter ``gp[reg]`` holds ``count - i``."""

    reg: int
    count: int


#: a loop index: a compile-time int (an unrolled or single iteration) or a hardware loop's :class:`LoopVar`
Index = int | LoopVar


class CountedSink(AsmSink, Protocol):
    """What a :class:`LoopBudget` emits into: an :class:`~programs.asm.Asm` or the counting stand-in.
    ``dynamic_extra`` counts the dynamic instructions of its hardware loops beyond their first iteration (every
    :class:`LoopBudget` on the sink adds to it), so a loop's iteration count includes the loops of nested
    generators with budgets of their own."""

    dynamic_extra: int

    @property
    def n_instructions(self) -> int: ...


def _dynamic_of(sink: CountedSink) -> int:
    """The dynamic instruction count of everything emitted into ``sink`` so far."""
    return sink.n_instructions + sink.dynamic_extra


class _CountingSink:
    """An Asm stand-in that only counts instructions (measures a loop body before it is emitted)."""

    def __init__(self) -> None:
        self.n_instructions = 0
        self.dynamic_extra = 0

    def emit(self, mnemonic: str, *operands: int | str) -> None:
        self.n_instructions += 1

    def comment(self, text: str) -> None:
        pass

    def begin(self, kernel: str, **params: object) -> None:
        pass

    def end(self, kernel: str) -> None:
        pass

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.isupper():
            return lambda *ops: self.emit(name, *ops)
        raise AttributeError(name)


class LoopBudget:
    """Emit hardware loops while counting each iteration's dynamic instructions (kernels.md §1.8).

    ``with lb.loop(reg, count, "rows"):`` emits ``C_LOOP_START reg, count`` ... ``C_LOOP_END reg`` (a
    count of 1 emits the body once without a loop).  One iteration's dynamic count (body, C_LOOP_END and
    every nested loop fully, those of nested generators with their own budget on the same sink too) must stay
    below MAX_LOOP_INSTRUCTIONS, else ``ValueError``; a counter register already active in an enclosing loop of
    the same budget is refused too.  ``lb.dynamic`` is the dynamic count of everything emitted into the sink
    since the budget was made (an instruction-count estimate of the kernel).

    :meth:`repeat` is the adaptive form: it measures one iteration first (the body emits into a counting
    stand-in, :meth:`measure`) and emits a hardware loop if it fits the budget, else unrolls the iteration
    in Python.  Code that may be measured emits through ``lb.asm`` (the current sink), never through a
    captured Asm.  :meth:`add` and :meth:`affine` are the pointer arithmetic of such loops.
    """

    def __init__(self, asm: CountedSink, cfg: HardwareConfig, kernel: str):
        self.asm = asm
        self.cfg = cfg
        self.kernel = kernel
        self._stack: list[_LoopFrame] = []
        self._start = _dynamic_of(asm)
        self._held: dict[int, int] = {}  # constant (mod 2^32) -> the register holding it
        self.max_iteration = 0

    @property
    def dynamic(self) -> int:
        return _dynamic_of(self.asm) - self._start

    def loop(self, reg: int, count: int, name: str) -> AbstractContextManager[None]:
        @contextlib.contextmanager
        def _cm() -> Iterator[None]:
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise GeneratorError(self.kernel, f"loop {name} count={count} must be >= 1", count)
            if count == 1:
                yield
                return
            if any(f.reg == reg for f in self._stack):
                raise GeneratorError(self.kernel, f"loop {name} reuses counter gp{reg} of an enclosing loop", reg)
            self.asm.C_LOOP_START(_g(reg), count)
            frame = _LoopFrame(_dynamic_of(self.asm), reg, name)
            self._stack.append(frame)
            try:
                yield
            finally:
                self._stack.pop()
            self.asm.C_LOOP_END(_g(reg))
            body = _dynamic_of(self.asm) - frame.start
            self.max_iteration = max(self.max_iteration, body)
            check_loop(self.kernel, name, body, self.cfg)
            self.asm.dynamic_extra += (count - 1) * body

        return _cm()

    def measure(self, body: Callable[[], None]) -> int:
        """The dynamic instruction count of ``body()`` (emitted into a counting stand-in, then dropped; a nested
        generator the body calls must emit into ``lb.asm``)."""
        saved = (self.asm, self._stack, self._start, self.max_iteration, dict(self._held))
        self.asm, self._stack, self._start = _CountingSink(), [], 0
        try:
            body()
            return self.dynamic
        finally:
            self.asm, self._stack, self._start, self.max_iteration, self._held = saved

    def repeat(self, reg: int, count: int, name: str, body: Callable[[Index], None]) -> None:
        """``body(i)`` for ``i < count``: one hardware loop (``i`` a :class:`LoopVar`) if an iteration stays
        below MAX_LOOP_INSTRUCTIONS, else unrolled in Python (``i`` an int); a count of 1 is ``body(0)``, 0 nothing."""
        if count == 0:
            return
        if count == 1:
            body(0)
            return
        var = LoopVar(reg, count)
        if self.measure(lambda: body(var)) + 1 < self.cfg.MAX_LOOP_INSTRUCTIONS:
            with self.loop(reg, count, name):
                body(var)
        else:
            for i in range(count):
                body(i)

    def run(self, reg: int, count: int, name: str, body: Callable[[bool], None], *, step_last: bool = True) -> int:
        """``count`` copies of ``body(step)``: a hardware loop over groups of :data:`UNROLL` copies when there
        are at least two groups, the rest (or all) unrolled.  ``step`` tells a copy to advance its pointers;
        it is False for the very last copy when ``step_last`` is False and that copy is an unrolled one.
        Returns how many copies stepped (:meth:`stepped`)."""
        groups, plain = self._groups(count)
        if groups:
            with self.loop(reg, groups, name):
                for _ in range(UNROLL):
                    body(True)
        for k in range(plain):
            body(step_last or k < plain - 1)
        return self.stepped(count, step_last)

    @staticmethod
    def _groups(count: int) -> tuple[int, int]:
        """(hardware-loop iterations of UNROLL copies or 0, unrolled copies after them) of :meth:`run`."""
        groups, rest = divmod(count, UNROLL)
        return (groups, rest) if groups > 1 else (0, count)

    @classmethod
    def looped(cls, count: int) -> bool:
        """Whether :meth:`run` emits a hardware loop for ``count`` copies."""
        return cls._groups(count)[0] > 0

    @classmethod
    def stepped(cls, count: int, step_last: bool = True) -> int:
        """How many of :meth:`run`'s ``count`` copies advance their pointers."""
        return count if step_last or cls._groups(count)[1] == 0 else count - 1

    @staticmethod
    def needs_register(delta: int) -> bool:
        """Whether ``gp[r] += delta`` needs the constant in a register (it is not one S_ADDI_INT)."""
        return delta % U32 >= IMM18_LIMIT

    def hold(self, reg: int, value: int) -> None:
        """Load ``value`` into ``reg`` once; :meth:`add` then adds or subtracts it from there (the caller keeps
        ``reg`` untouched while it is held)."""
        load_imm(self.asm, reg, value % U32)
        self._held[value % U32] = reg

    def add(self, r: int, delta: int, tmp: int | None = None) -> None:
        """``gp[r] += delta`` (any sign, mod 2^32): nothing for 0, one ``S_ADDI_INT`` for ``0 < delta < 2^18``,
        one ``S_ADD_INT``/``S_SUB_INT`` from a held register, else the constant is materialised in ``tmp``."""
        up, down = delta % U32, -delta % U32
        if up == 0:
            return
        if up < IMM18_LIMIT:
            self.asm.S_ADDI_INT(_g(r), _g(r), up)
        elif up in self._held:
            self.asm.S_ADD_INT(_g(r), _g(r), _g(self._held[up]))
        elif down in self._held:
            self.asm.S_SUB_INT(_g(r), _g(r), _g(self._held[down]))
        elif tmp is None or tmp == r:
            raise ValueError(f"{self.kernel}: pointer step {delta} on gp{r} needs a distinct scratch register")
        elif down < IMM18_LIMIT:
            load_imm(self.asm, tmp, down)
            self.asm.S_SUB_INT(_g(r), _g(r), _g(tmp))
        else:
            load_imm(self.asm, tmp, up)
            self.asm.S_ADD_INT(_g(r), _g(r), _g(tmp))

    def offset(self, dst: int, src: int, delta: int) -> None:
        """``gp[dst] = gp[src] + delta`` (any sign, mod 2^32, ``dst != src``): one ``S_ADDI_INT`` or an add/sub
        from a held register, else ``delta`` is materialised in ``dst`` itself."""
        up, down = delta % U32, -delta % U32
        if dst == src:
            raise ValueError(f"{self.kernel}: offset needs distinct registers (gp{dst})")
        if up < IMM18_LIMIT:
            self.asm.S_ADDI_INT(_g(dst), _g(src), up)
        elif up in self._held:
            self.asm.S_ADD_INT(_g(dst), _g(src), _g(self._held[up]))
        elif down in self._held:
            self.asm.S_SUB_INT(_g(dst), _g(src), _g(self._held[down]))
        elif down < IMM18_LIMIT:
            load_imm(self.asm, dst, down)
            self.asm.S_SUB_INT(_g(dst), _g(src), _g(dst))
        else:
            load_imm(self.asm, dst, up)
            self.asm.S_ADD_INT(_g(dst), _g(dst), _g(src))

    def affine(self, dst: int, const: int, terms: Sequence[tuple[Index, int]], tmp: int) -> None:
        """``gp[dst] = const + sum(index * step)`` (mod 2^32); a hardware index is ``count - gp[counter]``, so
        each :class:`LoopVar` term costs ``load_imm(tmp, step)``, ``S_MUL_INT`` and ``S_SUB_INT``."""
        value = const
        for i, step in terms:
            value += i.count * step if isinstance(i, LoopVar) else i * step
        load_imm(self.asm, dst, value % U32)
        for i, step in terms:
            if isinstance(i, LoopVar) and step % U32:
                if tmp in (dst, i.reg):
                    raise ValueError(f"{self.kernel}: affine scratch gp{tmp} must differ from gp{dst} and the counter")
                load_imm(self.asm, tmp, step % U32)
                self.asm.S_MUL_INT(_g(tmp), _g(i.reg), _g(tmp))
                self.asm.S_SUB_INT(_g(dst), _g(dst), _g(tmp))
