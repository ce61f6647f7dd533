"""Hardware-loop machinery of the flash-attention emitters (:mod:`programs.flash`).

The emitters describe the kernel as nested *levels* -- consecutive blocks (q tiles), the kv tiles of a
block, the heads of a tile -- each iterating over a list of items.  :meth:`Loops.repeat` emits a level as a
hardware loop when it can and as one copy per item otherwise:

* every number the body needs is given as a function of the level indices (``ix["q"]``, ``ix["t"]`` ...)
  and emitted by :meth:`Loops.load`, which fits it as an affine function of the indices of the looped
  levels (exactly, modulo 2^32, over every index combination it depends on -- detected by recording which
  indices it reads) and derives it from the loop counters (``index = count - gp[counter]``) with
  ``S_MUL_INT``/``S_ADD_INT``/``S_SUB_INT``; a value that is not affine raises :class:`NotLoopable` and the
  level is emitted unrolled instead;
* a level whose item count varies with the enclosing level (the fully visible kv tiles of consecutive
  causal q tiles) is a *variable* loop: ``C_LOOP_START gpC, 1`` followed by ``S_ADD_INT gpC, gpC, gpD``
  with ``gp[gpD] = count - 1``, and ``gpD`` zeroed at the end of every iteration (isa.md §6.6: the body
  runs until the counter, decremented by each ``C_LOOP_END``, reaches 1);
* the lane mask of a heads loop is a geometric progression kept in its own register;
* a level is looped only if one iteration's dynamic count stays below MAX_LOOP_INSTRUCTIONS, measured by
  emitting the body into a counting sink first (:meth:`Tracker.measure`), and if the loop is worth its
  counter arithmetic (at most 2% more dynamic instructions, or at least 4 static instructions saved per
  dynamic one added); ``split=True`` loops the runs of items that fit and emits the others on their own;
* each decision is made once per context (the open levels and their items) and kept in a memo, which an
  emitter may share with a later emission of the same kernel (the plan's dry run, then the program).

Both forms run the same compute and memory instructions on the same addresses in the same order; only
scalar-integer and loop instructions differ.  :class:`Tracker` counts static and dynamic instructions
(variable loops included) and checks every loop iteration against MAX_LOOP_INSTRUCTIONS.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ..asm import LOOP_COUNT_MAX, gp, load_imm

__all__ = ["NullSink", "Tracker", "IterRegs", "Ix", "Loops", "NotLoopable"]

_U32 = 1 << 32
Ix = Mapping[str, int]


class NotLoopable(Exception):
    """A level cannot be one hardware loop (a value is no affine function of the loop indices, ...)."""


# =========================================================================== instruction counting


class _Sink(Protocol):
    """Where a :class:`Tracker` sends its instructions: an :class:`~programs.asm.Asm` or a :class:`NullSink`."""

    def emit(self, mnemonic: str, *ops: int | str) -> None: ...

    def comment(self, text: str) -> None: ...


class NullSink:
    """Counting-only sink (no text, no validation)."""

    def emit(self, mnemonic: str, *ops: int | str) -> None:
        pass

    def comment(self, text: str) -> None:
        pass


@dataclass
class _Frame:
    """The dynamic count of one iteration of an open loop (``n`` iterations): ``base`` plus, per
    iteration, what the variable loops inside it execute (``extra``)."""

    n: int
    base: int = 0
    extra: list[int] | None = None

    def per_iteration(self) -> list[int]:
        return [self.base + (self.extra[k] if self.extra else 0) for k in range(self.n)]


class Tracker:
    """Wraps an Asm-like sink: counts static/dynamic instructions, emits hardware loops and checks
    each loop iteration's dynamic count against MAX_LOOP_INSTRUCTIONS (isa.md §6.6 runaway guard)."""

    def __init__(self, sink: _Sink, loopmax: int, kernel: str):
        self.sink = sink
        self.loopmax = loopmax
        self.kernel = kernel
        self.frames = [_Frame(1)]
        self.static = 0
        self.max_iter = 0

    def emit(self, mnemonic: str, *ops: int | str) -> None:
        self.sink.emit(mnemonic, *ops)
        self.frames[-1].base += 1
        self.static += 1

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.isupper():
            return lambda *ops: self.emit(name, *ops)
        raise AttributeError(name)

    def comment(self, text: str) -> None:
        self.sink.comment(text)

    @property
    def dynamic(self) -> int:
        return self.frames[0].base

    @property
    def top_iterations(self) -> int:
        """Iterations of the innermost open loop (1 outside loops)."""
        return self.frames[-1].n

    def measure(self, emit: Callable[[], None], n: int = 1) -> tuple[list[int], int]:
        """``emit()`` as the body of an ``n``-iteration loop, run into a counting sink (nothing is emitted):
        its dynamic count per iteration (variable loops inside may differ per iteration) and its static
        count."""
        saved = (self.sink, self.frames, self.static, self.max_iter)
        self.sink, self.frames, self.static = NullSink(), [_Frame(n)], 0
        try:
            emit()
            return self.frames[0].per_iteration(), self.static
        finally:
            self.sink, self.frames, self.static, self.max_iter = saved

    def _close(self, frame: _Frame, what: str) -> list[int]:
        per = frame.per_iteration()
        worst = max(per)
        if worst >= self.loopmax:
            raise ValueError(
                f"{self.kernel}: loop {what} executes {worst} instructions per iteration, "
                f"reaching MAX_LOOP_INSTRUCTIONS={self.loopmax}"
            )
        self.max_iter = max(self.max_iter, worst)
        return per

    @contextlib.contextmanager
    def loop(self, reg: int, n: int, what: str) -> Iterator[None]:
        """A hardware loop of ``n`` iterations on counter ``gp<reg>``; ``n == 1`` is emitted inline."""
        if n < 1:
            raise ValueError(f"{self.kernel}: loop {what} has count {n}")
        if n > LOOP_COUNT_MAX:
            raise ValueError(f"{self.kernel}: loop {what} count {n} exceeds {LOOP_COUNT_MAX}")
        if n == 1:
            yield
            return
        self.emit("C_LOOP_START", gp(reg), n)
        self.frames.append(_Frame(n))
        yield
        self.emit("C_LOOP_END", gp(reg))
        per = self._close(self.frames.pop(), what)
        self.frames[-1].base += sum(per)

    @contextlib.contextmanager
    def variable_loop(self, reg: int, counts: Sequence[int], what: str) -> Iterator[None]:
        """``C_LOOP_START gp<reg>, 1`` ... ``C_LOOP_END gp<reg>`` whose body (emitted by the caller) sets the
        counter to ``counts[k]`` in iteration k of the enclosing loop; its iterations must all cost the same."""
        parent = self.frames[-1]
        if len(counts) != parent.n or min(counts) < 1 or max(counts) > LOOP_COUNT_MAX:
            raise ValueError(f"{self.kernel}: variable loop {what} counts {list(counts)} (enclosing n={parent.n})")
        self.emit("C_LOOP_START", gp(reg), 1)
        frame = _Frame(1)
        self.frames.append(frame)
        yield
        self.emit("C_LOOP_END", gp(reg))
        if frame.extra:
            raise ValueError(f"{self.kernel}: variable loop {what} contains a variable loop")
        (per,) = self._close(self.frames.pop(), what)
        parent.extra = parent.extra or [0] * parent.n
        for k, c in enumerate(counts):
            parent.extra[k] += c * per


# =========================================================================== levels and values


class IterRegs(NamedTuple):
    """Registers :class:`Loops` uses: ``tmp`` (scratch of the counter arithmetic), ``t0`` (scratch of a
    constant lane mask), ``mask`` (the running lane mask of a heads loop) and ``vcount`` (the count of a
    variable loop minus one, zeroed at the end of each of its iterations)."""

    tmp: int
    t0: int
    mask: int
    vcount: int


def _constant(items: Sequence[Any]) -> Callable[[Ix], Sequence[Any]]:
    """The items of a level that do not depend on the enclosing levels."""

    def of(ix: Ix) -> Sequence[Any]:
        return items

    return of


class _Ix(dict[str, int]):
    """An index assignment (level name -> index) that records which names a value function reads."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.used: set[str] = set()

    def __getitem__(self, key: str) -> int:
        self.used.add(key)
        return int(dict.__getitem__(self, key))


@dataclass
class _Level:
    name: str
    cnt: int | None  # counter register of a looped level; None: one unrolled iteration
    items: Callable[[Ix], Sequence[Any]]
    index: int = 0  # the iteration of an unrolled level
    mask: Callable[[Ix], int] | None = None
    mask_ratio: int = 1
    variable: bool = False  # a looped level whose count follows the enclosing loop
    count: int = 1  # the count of a fixed looped level (at the enclosing levels' first iteration)
    counts: list[int] = field(default_factory=list)  # a variable level: per iteration of the enclosing loop
    what: str = ""
    form: tuple[int, dict[int, int]] = (0, {})  # index = form[0] + sum(m * gp[r] for r, m in form[1])


class Loops:
    """The open levels of an emitter and the affine values over them (module docstring)."""

    def __init__(self, tr: Tracker, regs: IterRegs, enabled: bool = True, memo: dict[Any, Any] | None = None):
        """``memo``: the loop decisions (and block estimates) of an earlier emission of the same kernel."""
        self.tr, self.regs, self.enabled = tr, regs, enabled
        self.stack: list[_Level] = []
        self._decisions: dict[Any, Any] = {} if memo is None else memo

    # ---- items and index assignments
    def get(self, name: str, ix: Ix) -> Any:
        """The item of level ``name`` at index assignment ``ix``."""
        for lv in self.stack:
            if lv.name == name:
                return lv.items(ix)[ix[name]]
        raise KeyError(name)

    def looped(self, name: str) -> bool:
        """Whether level ``name`` is open as a hardware loop."""
        return any(lv.name == name and lv.cnt is not None for lv in self.stack)

    def first(self, name: str) -> Any:
        """The item of level ``name`` in the first iteration of every looped level (its representative)."""
        return self.get(name, self.first_ix())

    def first_ix(self) -> Ix:
        """The index assignment of the first iteration of every looped level."""
        return self._points(frozenset())[0]

    def _levels(self, depth: int | None) -> list[_Level]:
        return self.stack if depth is None else self.stack[:depth]

    def _points(self, needed: frozenset[str], depth: int | None = None) -> list[_Ix]:
        """Every index assignment of the levels ``stack[:depth]`` over the looped levels in ``needed``
        (and the looped levels a needed variable level depends on); the others at index 0 (looped) or
        their own index (unrolled)."""
        levels = self._levels(depth)
        need = set(needed)
        for pos in range(len(levels) - 1, -1, -1):
            if levels[pos].name in need and levels[pos].variable:
                need.update(lv.name for lv in levels[:pos] if lv.cnt is not None)
        pts = [_Ix()]
        for lv in levels:
            nxt = []
            for ix in pts:
                if lv.cnt is None:
                    nxt.append(_Ix(ix, **{lv.name: lv.index}))
                elif lv.name in need:
                    nxt.extend(_Ix(ix, **{lv.name: k}) for k in range(len(lv.items(ix))))
                else:
                    nxt.append(_Ix(ix, **{lv.name: 0}))
            pts = nxt
        return pts

    def _values(
        self, fn: Callable[[Ix], int], depth: int | None = None, also: frozenset[str] = frozenset()
    ) -> tuple[list[str], dict[tuple[int, ...], int]]:
        """(looped level names, {their indices: fn mod 2^32}) at every index combination of the looped
        levels ``fn`` reads (found by recording its reads) and those in ``also``."""
        looped = [lv.name for lv in self._levels(depth) if lv.cnt is not None]
        probe = self._points(frozenset(), depth)[0]
        fn(probe)
        needed = (frozenset(probe.used) | also) & frozenset(looped)
        while True:
            vals: dict[tuple[int, ...], int] = {}
            used: set[str] = set()
            for ix in self._points(needed, depth):
                vals[tuple(dict.__getitem__(ix, n) for n in looped)] = fn(ix) % _U32
                used |= ix.used
            grown = needed | (frozenset(used) & frozenset(looped))
            if grown == needed:
                return looped, vals
            needed = grown

    def _fit(self, fn: Callable[[Ix], int], depth: int | None = None) -> tuple[int, dict[str, int]]:
        """``fn`` as ``c0 + sum(coef[name] * ix[name])`` over the looped levels (mod 2^32), checked at every
        index combination it depends on; :class:`NotLoopable` if it is no affine function."""
        looped, vals = self._values(fn, depth)
        c0 = vals[tuple(0 for _ in looped)]
        coef = {}
        for a, name in enumerate(looped):
            coef[name] = 0
            for t, v in vals.items():
                nxt = t[:a] + (t[a] + 1,) + t[a + 1 :]
                if nxt in vals:
                    coef[name] = (vals[nxt] - v) % _U32
                    break
        for t, v in vals.items():
            if (c0 + sum(coef[n] * t[a] for a, n in enumerate(looped))) % _U32 != v:
                raise NotLoopable(f"a value is no affine function of the loop indices {looped}")
        return c0, coef

    def _affine_form(self, c0: int, coef: Mapping[str, int]) -> tuple[int, dict[int, int]]:
        """``c0 + sum(coef[name] * index)`` as ``const + sum(m[r] * gp[r])`` over the loop counters."""
        const, regs = c0, dict[int, int]()
        for lv in self.stack:
            d = coef.get(lv.name, 0)
            if lv.cnt is None or not d:
                continue
            k, r = lv.form
            const += d * k
            for reg, m in r.items():
                regs[reg] = (regs.get(reg, 0) + d * m) % _U32
        return const % _U32, {r: m for r, m in regs.items() if m}

    # ---- emission of values
    def load(self, dst: int, fn: Callable[[Ix], int]) -> None:
        """``gp[dst] = fn(indices)`` in every iteration of the open levels."""
        const, regs = self._affine_form(*self._fit(fn))
        tr, tmp = self.tr, self.regs.tmp
        if dst == tmp and regs:
            raise ValueError("Loops.load: the destination must differ from the scratch register")
        load_imm(tr, dst, const)
        for reg, m in sorted(regs.items()):
            neg = _U32 - m
            if m == 1:
                tr.S_ADD_INT(gp(dst), gp(dst), gp(reg))
            elif neg == 1:
                tr.S_SUB_INT(gp(dst), gp(dst), gp(reg))
            else:
                load_imm(tr, tmp, min(m, neg))
                tr.S_MUL_INT(gp(tmp), gp(tmp), gp(reg))
                (tr.S_ADD_INT if m <= neg else tr.S_SUB_INT)(gp(dst), gp(dst), gp(tmp))

    def set_mask(self) -> None:
        """``V_MASK =`` the lane mask of the innermost level that has one."""
        lv = next(lv for lv in reversed(self.stack) if lv.mask is not None)
        if lv.cnt is not None:
            self.tr.C_SET_V_MASK_REG(gp(self.regs.mask))
            return
        assert lv.mask is not None
        self.load(self.regs.t0, lv.mask)
        self.tr.C_SET_V_MASK_REG(gp(self.regs.t0))

    # ---- levels
    @contextlib.contextmanager
    def _open(self, lv: _Level) -> Iterator[None]:
        self.stack.append(lv)
        try:
            yield
        finally:
            self.stack.pop()

    def repeat(
        self,
        name: str,
        cnt: int,
        items: Sequence[Any] | Callable[[Ix], Sequence[Any]],
        body: Callable[[], None],
        what: str,
        *,
        loop_ok: bool = True,
        mask: Callable[[Ix], int] | None = None,
        split: bool = False,
    ) -> None:
        """``body`` once per item of level ``name`` (``items``: a list, or a function of the enclosing
        indices): one hardware loop on ``gp[cnt]`` where possible, else one copy per item.  ``split``
        (a list of items whose bodies grow linearly along the list): the items whose body fits one loop
        iteration are looped in runs, the others emitted on their own.  ``what`` names the level.  With
        ``enabled`` False every level is unrolled."""
        loop_ok = loop_ok and self.enabled
        if split and not callable(items) and loop_ok and len(items) > 1:
            self._repeat_split(name, cnt, list(items), body, what, mask)
            return
        items_fn = items if callable(items) else _constant(items)
        c0, coef = self._fit(lambda ix: len(items_fn(ix)))
        lv = _Level(name, cnt, items_fn, mask=mask, what=what)
        if loop_ok and (any(coef.values()) or c0 > 1) and self._decide(lv, body, c0, coef):
            self._emit_loop(lv, body)
            return
        if any(coef.values()):
            raise NotLoopable(f"{what}: the count follows an enclosing loop")
        for k in range(c0):
            with self._open(_Level(name, None, items_fn, index=k, mask=mask, what=what)):
                body()

    def _signature(self) -> tuple[Any, ...]:
        """The open levels (names, loop or iteration, representative item): the context of a decision."""
        first = self._points(frozenset())[0]
        sig = []
        for lv in self.stack:
            items = lv.items(first)
            shape = ("var" if lv.variable else len(items)) if lv.cnt is not None else -1 - lv.index
            sig.append((lv.name, lv.what, shape, items[dict.__getitem__(first, lv.name)]))
        return tuple(sig)

    def _repeat_split(
        self,
        name: str,
        cnt: int,
        items: list[Any],
        body: Callable[[], None],
        what: str,
        mask: Callable[[Ix], int] | None,
    ) -> None:
        """Runs of consecutive items whose body (its unrolled dynamic count extrapolated from the first
        two items, with a margin for the counter arithmetic) fits one loop iteration are looped."""
        key = ("split", name, what, self._signature(), tuple(items))
        if key not in self._decisions:
            dyn = []
            for k in range(2):
                with self._open(_Level(name, None, _constant(items), index=k, mask=mask, what=what)):
                    (d,), _static = self.tr.measure(body)
                dyn.append(d)
            self._decisions[key] = dyn
        dyn = self._decisions[key]
        fits = []
        for k in range(len(items)):
            est = dyn[0] + k * (dyn[1] - dyn[0])
            fits.append(est + est // 32 + 256 < self.tr.loopmax)
        start = 0
        while start < len(items):
            end = start + 1
            while end < len(items) and fits[end] and fits[start]:
                end += 1
            self.repeat(name, cnt, items[start:end], body, what, mask=mask)
            start = end

    def _decide(self, lv: _Level, body: Callable[[], None], c0: int, coef: Mapping[str, int]) -> bool:
        """Whether level ``lv`` becomes one hardware loop (prepared for it if so); decided once per
        context (:meth:`_signature`), so the real emission after a trial reuses the trial's decisions."""
        key = (lv.name, lv.what, self._signature())
        known = self._decisions.get(key)
        if known is False:
            return False
        try:
            self._prepare(lv, c0, coef)
            if known is None:
                self._check(lv, body)
        except NotLoopable:
            self._decisions[key] = False
            return False
        self._decisions[key] = True
        return True

    def _prepare(self, lv: _Level, c0: int, coef: Mapping[str, int]) -> None:
        """The counts, counter form and lane-mask ratio of the looped level ``lv`` (fixed count ``c0``, or
        the variable count ``c0 + coef*index`` of the innermost enclosing loop)."""
        assert lv.cnt is not None
        lv.variable = any(coef.values())
        lv.counts = [c0]
        if lv.variable:
            parent = next((x for x in reversed(self.stack) if x.cnt is not None), None)
            if parent is None or parent.variable or any(d for n, d in coef.items() if n != parent.name):
                raise NotLoopable(f"{lv.what}: the count follows more than the enclosing loop")
            lv.counts = [(c0 + coef[parent.name] * k) % _U32 for k in range(parent.count)]
            if min(lv.counts) < 1 or max(lv.counts) > LOOP_COUNT_MAX:
                raise NotLoopable(f"{lv.what}: variable counts {lv.counts}")
        const, regs = self._affine_form(c0, coef)
        regs[lv.cnt] = (regs.get(lv.cnt, 0) - 1) % _U32
        lv.form, lv.count = (const, regs), c0
        if lv.mask is not None:
            with self._open(lv):
                lv.mask_ratio = self._mask_ratio(lv)

    def _check(self, lv: _Level, body: Callable[[], None]) -> None:
        """NotLoopable unless one iteration of the looped level fits MAX_LOOP_INSTRUCTIONS (and, for a
        fixed count, the loop is worth its counter arithmetic)."""
        with self._open(lv):
            per, loop_static = self.tr.measure(lambda: self._iteration(lv, body), 1 if lv.variable else lv.count)
        if max(per) + 1 >= self.tr.loopmax:
            raise NotLoopable(f"{lv.what}: {max(per) + 1} instructions per iteration")
        if not lv.variable and not self._worth_a_loop(lv, body, per, loop_static):
            raise NotLoopable(f"{lv.what}: the counter arithmetic costs more than the loop saves")

    def _emit_loop(self, lv: _Level, body: Callable[[], None]) -> None:
        assert lv.cnt is not None
        if lv.variable:
            if len(lv.counts) != self.tr.top_iterations:
                raise ValueError(f"{lv.what}: variable loop outside its enclosing loop")
            self.load(self.regs.vcount, lambda ix: len(lv.items(ix)) - 1)
            with self.tr.variable_loop(lv.cnt, lv.counts, lv.what), self._open(lv):
                self._iteration(lv, body)
            return
        if lv.mask is not None:
            with self._open(_Level(lv.name, None, lv.items, index=0, mask=lv.mask, what=lv.what)):
                self.load(self.regs.mask, lv.mask)
        with self.tr.loop(lv.cnt, lv.count, lv.what), self._open(lv):
            self._iteration(lv, body)

    def _worth_a_loop(self, lv: _Level, body: Callable[[], None], per: Sequence[int], loop_static: int) -> bool:
        """A loop is worth its counter arithmetic when it adds at most 2% dynamic instructions to the
        unrolled form, or saves at least 4 static instructions per dynamic one it adds (over every
        execution of the enclosing levels).  The added instructions per iteration are those of the first
        iteration, looped (``per[0]``) against unrolled."""
        with self._open(_Level(lv.name, None, lv.items, index=0, mask=lv.mask, what=lv.what)):
            (dyn,), static = self.tr.measure(body)
        extra = len(per) * (per[0] - dyn) + 2  # + C_LOOP_START, C_LOOP_END
        if extra * 50 <= sum(per) - extra:
            return True
        executions = len(self._points(frozenset(x.name for x in self.stack if x.cnt is not None)))
        return lv.count * static - loop_static >= 4 * extra * executions

    def _mask_ratio(self, lv: _Level) -> int:
        """The ratio of the (open, looped) level's lane masks, a geometric progression over its index."""
        mask = lv.mask
        assert mask is not None
        looped, vals = self._values(mask, also=frozenset([lv.name]))
        a = looped.index(lv.name)
        ratio = None
        for t, m in vals.items():
            m0 = vals[t[:a] + (0,) + t[a + 1 :]]
            if ratio is None and t[a] == 1:
                ratio = m // m0 if m0 else 0
        ratio = ratio or 1
        for t, m in vals.items():
            if m != (vals[t[:a] + (0,) + t[a + 1 :]] * ratio ** t[a]) % _U32:
                raise NotLoopable("the lane masks are no geometric progression")
        return ratio

    def _iteration(self, lv: _Level, body: Callable[[], None]) -> None:
        """One iteration of a looped level: (the variable count,) the body, (the next lane mask)."""
        tr, regs = self.tr, self.regs
        assert lv.cnt is not None
        if lv.variable:
            tr.S_ADD_INT(gp(lv.cnt), gp(lv.cnt), gp(regs.vcount))
        body()
        if lv.mask is not None and lv.mask_ratio != 1:
            load_imm(tr, regs.tmp, lv.mask_ratio)
            tr.S_MUL_INT(gp(regs.mask), gp(regs.mask), gp(regs.tmp))
        if lv.variable:
            tr.S_ADDI_INT(gp(regs.vcount), gp(0), 0)
