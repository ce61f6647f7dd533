"""Direct-emit testbench harness (kernels.md §4.1, §4.2): build a :class:`Case`, :func:`run` it, judge it.

Harness API
===========

Testbench modules
-----------------
Each ``testbenches/<name>.py`` exposes ``DESCRIPTION`` (one line), ``DEFAULTS`` (dict),
``REQUIRED_CASES`` (list of ``(case_id, overrides, variant)``), ``STRETCH_CASES`` (same shape; they run
only when the generator advertises support), optionally ``SLOW_CASES`` (same shape; larger cases run under
``-m slow``), ``RANGES`` (dict of parameter -> supported values, for the
sweep) and ``build(params, config) -> Case``.  ``testbenches.get(name)`` imports one lazily;
:func:`run_case` builds and runs one case by id, turning a plan ``ValueError`` raised by ``build`` into a
FAILED :class:`Report` (never a skip): ``error`` reads ``plan: ...`` (the parameters are unsupported), or
``generator: Asm: ... [generator <kernel>]`` when the generator emitted an invalid instruction, loop count or
address (:class:`~programs.asm.GeneratorError`: the generator's bug).

Building a case: :class:`CaseBuilder`
-------------------------------------
``cb = CaseBuilder("linear", params, config)`` gives:

* ``cb.rng`` -- ``numpy.random.default_rng(params.get("seed", 0))``; ``cb.randn(shape, scale)``;
* ``cb.tensor(name, values, cls, alloc_rows=None, alloc_elems=None) -> (HbmTensor, float64 values)``:
  places a 2-D host tensor in the HBM image with the project's :class:`~plena_sim.memory.image.ImageBuilder`
  (64-byte aligned base, slack rows up to ``alloc_rows``/``alloc_elems`` so SCALE = element bytes including
  slack; the slack of an input holds finite random N(0, 1) data from a stream of its own, ``cb.fill_slack``, so
  that a kernel reading one element too many visibly changes its result, while the inputs stay those of the
  seed) in the precision class ``cls`` (``"act"`` -> HBM_V_ACT_TYPE, prec 0; ``"weight"`` ->
  HBM_M_WEIGHT_TYPE, prec 0; ``"kv"`` -> HBM_M_KV_TYPE, prec 1; ``"kv_v"`` -> HBM_V_KV_TYPE, prec 1), binds
  the next free a-register and returns the generator's ``HbmTensor`` plus the exact dequantized values
  (MX round trip, float64, unpadded 2-D shape) -- the only values a golden may be computed from;
  ``shape=`` records the input under its logical shape in ``Case.inputs`` (e.g. ``(batch, q, hq, d)``);
* ``cb.output_tensor(name, rows, cols, cls, alloc_rows=None)``: a zero-filled HBM tensor the program may
  write (its byte ranges are declared writable for the HBM footprint check);
* ``cb.sparse_tensor(name, rows, cols, cls, blocks)``: a large tensor of which only some row blocks hold data
  (e.g. the experts a MoE step can select of a stacked expert tensor); the other rows read as zero and cost
  no host memory (the HBM is sparse: only the written byte ranges become pages and the case's segments);
* ``cb.alloc(n)``: reserve ``n`` VRAM rows (one zero guard row is left after each) without declaring
  them -- the plan's ``vram_regions`` declare them (``cb.add_regions``); ``cb.rows(n, name, role)``
  reserves and declares;
  ``cb.region(name, first_row, n_rows, role)`` declares a region explicitly (e.g. from a plan's
  ``vram_regions``; roles ``input``, ``output``, ``scratch``, ``inout``); ``cb.add_regions(plan.vram_regions)``;
* ``cb.fp`` -- the §1.6 constant slots (``cb.set_fp(EPS=1e-6, INV_HIDDEN=1/128, USER0=1.5, ...)``),
  ``cb.fp_words(addr, values)`` / ``cb.int_words(addr, values)`` -- further SRAM preloads,
  ``cb.vram_preload(row, values)`` -- host VRAM rows (bf16);
* ``cb.asm()`` -- a fresh :class:`~programs.asm.Asm` holding the ``set_addr_regs`` preamble (it uses
  gp1/gp2, whose contents are then undefined); pass it to the generator's ``emit_*``;
* ``cb.check(name, read, golden, coords, tol, A=None, group_by=None)``: one output check;
* ``cb.case(asm_or_text, **extra) -> Case``.

Readback specs (``read(machine) -> ndarray``, all SRAMs decoded as **bf16**):
``VramCbm(base_elem, rows, cols, pitch, post=None)`` (the plan's CBM mapping, ``[rows, cols]``),
``VramRows(base_elem, nrows, post=None)``, ``FpWords(addr, n)``, ``IntWords(addr, n)``,
``HbmBytes(addr, n)``; ``post`` reshapes/transposes to the named coordinates of the check.

Running: :func:`run`
--------------------
``run(case, *, backend="numba", workdir=None, timing=None, max_instructions=None, trace=False) -> Report``
(``timing``: ``None``/``"serial"`` or a timing mode the Machine accepts, e.g. ``"overlap"``):

1. assembles ``case.program`` (an ``AssemblerError`` is a failure unless the case expects it);
2. builds a :class:`~plena_sim.machine.Machine` with ``case.config`` (:func:`prepare_machine`); writes the
   HBM image segments, the FP SRAM constants (slots 0-15, every run) and extra words, the INT SRAM and
   VRAM preloads; poisons every ``output`` and ``scratch`` region with bf16 NaN (``inout``/``input``
   regions and guard rows are not poisoned), every other FP SRAM word (16..) with bf16 NaN, every other INT SRAM
   word with :data:`INT_SENTINEL` and every MRAM tile with NaN: a kernel that reads state it did not write or
   a tile it did not load fails;
3. runs the program (``raise_on_fault=False``); a simulator fault fails the case unless ``case.expect``
   names its rule;
4. reads back every check's data, compares it (:func:`testbenches.compare.compare`) and applies the
   generic checks: ``constants`` (FP slots 0-15 bitwise unchanged), ``vram_footprint`` (VRAM rows below
   the high-water mark -- largest declared row + 64 -- that lie outside every declared region still hold
   their initial value), ``hbm_footprint`` (HBM bytes outside the declared writable ranges unchanged);
5. writes ``program.asm``, ``program.mem``, ``golden.npy``, ``sim.npy`` (the first check; further checks as
   ``golden_<check>.npy``/``sim_<check>.npy``) and ``report.json`` into ``workdir`` if one is given (never
   anywhere else).

A :class:`Report` carries ``passed``, per-check :class:`~testbenches.compare.CheckResult` s, the primary
check's ``max_abs``/``max_rel``/``rms``/``rel_rms``/``worst``/``first``/``n_fail``/per-group failure
counts, ``cycles``, ``instructions``, ``stats``, ``wall_time``, ``fault`` (dict) and ``error`` (assembler or
plan error text), and ``summary`` -- one line like kernels.md §5.1's example::

    linear[K128]: output 37/2048 out of tolerance; worst (row=5, col=17) sim=0.41 golden=0.05 ...

Companion runs: a check may take its golden from a second case (``Case.companion``; the check names
``golden_from="<check name>"``), e.g. ``linear_loop`` requires its output to be bit-identical to the
``loops=False`` program.  Negative cases set ``Case.expect = ("LP-ZERO", "assembler")``: they pass iff
the run ends with one of the named faults (rule ids, or ``"assembler"``/``"plan"``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from isa.safetext import json_text
from plena_sim.config import HardwareConfig, MxType
from plena_sim.hbm.storage import NO_PAGE, PAGE_SIZE
from plena_sim.memory.image import ImageBuilder, Placement, tensor_layout
from plena_sim.numerics import bf16
from plena_sim.numerics.formats import decode_tensor, encode_tensor
from programs.asm import Asm, GeneratorError
from programs.hbm_tensors import HbmTensor, set_addr_regs

from .compare import CheckResult, Tolerance, compare, tolerance

if TYPE_CHECKING:
    from isa.program import Program
    from plena_sim.machine import Machine, RunResult
    from plena_sim.routing import Routing

__all__ = [
    "FP_SLOTS",
    "FP_STATE_BASE",
    "fp_constants",
    "VramCbm",
    "VramRows",
    "FpWords",
    "IntWords",
    "HbmBytes",
    "Check",
    "Case",
    "CaseSpec",
    "Readback",
    "Report",
    "CaseBuilder",
    "run",
    "run_case",
    "prepare_machine",
    "GEN_GP",
    "GEN_FP",
    "BF16_NAN",
    "INT_SENTINEL",
]

#: kernels.md §1.6 constant slots
FP_SLOTS = {
    "NEG_INF": 0,
    "EPS": 1,
    "INV_HIDDEN": 2,
    "ONE": 3,
    "GELU_ALPHA": 4,
    "QK_SCALE": 5,
    "INV_BMM_SCALE": 6,
    "ZERO": 7,
    **{f"USER{i}": 8 + i for i in range(8)},
}
FP_STATE_BASE = 16
BF16_NAN = bf16.NAN_BITS
#: the INT SRAM word every word outside the declared preloads holds before a run (a kernel reading one it never
#: wrote sees a huge index / count, which faults or visibly changes the result)
INT_SENTINEL = 0xDEADBEEF
#: the second seed word of a case's slack stream (:meth:`CaseBuilder.fill_slack`)
SLACK_STREAM = 0x51AC
#: the registers the testbenches hand to generators (kernels.md §1.4 limits: 12 gp, 6 fp)
GEN_GP = tuple(range(1, 13))
GEN_FP = tuple(range(1, 7))
_ROLES = ("input", "output", "scratch", "inout")

#: one named case of a testbench module: (case_id, parameter overrides, config variant)
CaseSpec = tuple[str, dict[str, Any], str]

_CLASSES = {
    "act": ("HBM_V_ACT_TYPE", 0),
    "weight": ("HBM_M_WEIGHT_TYPE", 0),
    "kv": ("HBM_M_KV_TYPE", 1),
    "kv_v": ("HBM_V_KV_TYPE", 1),
}


def fp_constants(
    cfg: HardwareConfig,
    *,
    eps: float = 1e-6,
    inv_hidden: float = 0.0,
    qk_scale: float = 0.0,
    user: Sequence[float] = (),
) -> np.ndarray:
    """float32 values of FP SRAM slots 0..15 (kernels.md §1.6), before bf16 rounding."""
    v = np.zeros(16, dtype=np.float64)
    v[0] = -np.inf
    v[1] = eps
    v[2] = inv_hidden
    v[3] = 1.0
    v[4] = 1.702
    v[5] = qk_scale
    v[6] = 1.0 / cfg.BMM_SCALE
    v[7] = 0.0
    for i, u in enumerate(user):
        v[8 + i] = u
    return v.astype(np.float32)


# =========================================================================== readback specs


def _vram_bf16(machine: Machine, row0: int, nrows: int) -> np.ndarray:
    bits = machine.vram.bits
    if row0 < 0 or row0 + nrows > bits.shape[0]:
        raise IndexError(f"VRAM rows [{row0}, {row0 + nrows}) out of range")
    return bf16.decode(np.asarray(bits[row0 : row0 + nrows]))


def _vram_addresses(row0: int, nrows: int, V: int) -> np.ndarray:
    """float64[nrows, V]: the element address (row * V + lane) of each element of VRAM rows ``row0 ..``."""
    return (np.arange(row0, row0 + nrows, dtype=np.float64)[:, None] * V) + np.arange(V, dtype=np.float64)


def locate_elements(read: object, machine: Machine, sim: np.ndarray) -> np.ndarray | None:
    """The VRAM element addresses (int64, the shape of ``sim``) of a VRAM readback's elements, None for other
    readbacks or when the addresses do not give back ``sim`` bit for bit (a ``post`` that is no pure selection)."""
    locate = getattr(read, "locate", None)
    if locate is None:
        return None
    addr = np.asarray(locate(machine))
    V, bits = machine.cfg.VLEN, machine.vram.bits
    if addr.shape != sim.shape or not np.array_equal(addr, np.round(addr)):
        return None
    flat = addr.astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= bits.shape[0] * V):
        return None
    values = bf16.decode(np.asarray(bits[flat // V, flat % V]))
    return flat if np.array_equal(values, sim, equal_nan=True) else None


class Readback(Protocol):
    """A readback spec: what a check reads from the machine after the run."""

    def read(self, machine: Machine) -> np.ndarray: ...


@dataclass(frozen=True)
class VramCbm:
    """A CBM matrix ``[rows, cols]`` at element address ``base`` with row pitch ``pitch`` (kernels.md §1.7)."""

    base: int
    rows: int
    cols: int
    pitch: int
    post: Callable[[np.ndarray], np.ndarray] | None = None

    def read(self, machine: Machine) -> np.ndarray:
        V = machine.cfg.VLEN
        if self.base % V or self.cols % V:
            raise ValueError(f"VramCbm: base {self.base} and cols {self.cols} must be multiples of V={V}")
        return self._arrange(_vram_bf16(machine, self.base // V, self._rows(V)), V)

    def locate(self, machine: Machine) -> np.ndarray:
        """The VRAM element address (row * VLEN + lane) of every element :meth:`read` returns (float64, exact)."""
        V = machine.cfg.VLEN
        return self._arrange(_vram_addresses(self.base // V, self._rows(V), V), V)

    def _rows(self, V: int) -> int:
        return self.cols // V * self.pitch

    def _arrange(self, rows: np.ndarray, V: int) -> np.ndarray:
        """``[rows, cols]`` (then ``post``) from the ``[nb * pitch, V]`` VRAM rows of the CBM layout."""
        nb = self.cols // V
        raw = rows.reshape(nb, self.pitch, V)
        out = raw[:, : self.rows, :].transpose(1, 0, 2).reshape(self.rows, self.cols)
        return self.post(out) if self.post else out


@dataclass(frozen=True)
class VramRows:
    base: int
    nrows: int
    post: Callable[[np.ndarray], np.ndarray] | None = None

    def read(self, machine: Machine) -> np.ndarray:
        V = machine.cfg.VLEN
        out = _vram_bf16(machine, self.base // V, self.nrows)
        return self.post(out) if self.post else out

    def locate(self, machine: Machine) -> np.ndarray:
        """The VRAM element address of every element :meth:`read` returns (float64, exact)."""
        V = machine.cfg.VLEN
        out = _vram_addresses(self.base // V, self.nrows, V)
        return self.post(out) if self.post else out


@dataclass(frozen=True)
class FpWords:
    addr: int
    n: int
    post: Callable[[np.ndarray], np.ndarray] | None = None

    def read(self, machine: Machine) -> np.ndarray:
        out = bf16.decode(np.asarray(machine.fp_sram.bits[self.addr : self.addr + self.n]))
        return self.post(out) if self.post else out


@dataclass(frozen=True)
class IntWords:
    addr: int
    n: int
    post: Callable[[np.ndarray], np.ndarray] | None = None

    def read(self, machine: Machine) -> np.ndarray:
        out = np.asarray(machine.int_sram[self.addr : self.addr + self.n], dtype=np.uint32).copy()
        return self.post(out) if self.post else out


@dataclass(frozen=True)
class HbmBytes:
    addr: int
    n: int
    post: Callable[[np.ndarray], np.ndarray] | None = None

    def read(self, machine: Machine) -> np.ndarray:
        out = np.asarray(machine.hbm.read(self.addr, self.n), dtype=np.uint8).copy()
        return self.post(out) if self.post else out


# =========================================================================== case / check / report


#: what a derived check's function returns: the golden, its envelope A (or None) and its tolerance (or None)
Derived = tuple[np.ndarray, np.ndarray | None, Tolerance | None]


@dataclass
class Check:
    name: str
    read: Readback
    golden: np.ndarray | None
    coords: tuple[str, ...]
    tol: Tolerance
    A: np.ndarray | None = None
    group_by: tuple[str, ...] | None = None
    golden_from: str | None = None  # take the golden from this check of case.companion (exact)
    #: the golden computed after the run from the machine (a composed program's stage judged on the values its
    #: inputs held): ``derive(machine) -> (golden, A or None, tolerance or None for the check's own)``
    derive: Callable[[Machine], Derived] | None = field(default=None, repr=False)


@dataclass
class Case:
    testbench: str
    case_id: str
    params: dict[str, Any]
    config: HardwareConfig
    program: str
    checks: list[Check]
    hbm_segments: list[tuple[int, np.ndarray]] = field(default_factory=list)
    tensors: dict[str, Placement] = field(default_factory=dict)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    fp_consts: np.ndarray | None = None  # slots 0..15 (float32)
    fp_preload: dict[int, np.ndarray] = field(default_factory=dict)
    int_preload: dict[int, np.ndarray] = field(default_factory=dict)
    vram_preload: list[tuple[int, np.ndarray]] = field(default_factory=list)
    regions: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    hbm_writable: list[tuple[int, int]] = field(default_factory=list)
    expect: tuple[str, ...] | None = None
    companion: Case | None = None
    max_instructions: int | None = None
    variant: str = ""
    notes: str = ""
    plan: object | None = field(default=None, repr=False, compare=False)  # the generator's plan, if kept
    #: the case building's clock (:class:`CaseBuilder`): ``build_s`` (the whole build) and ``generate_s`` (from
    #: the last input placed before ``cb.asm()`` to the last instruction emitted: planning and emission)
    build_times: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    #: (the text, its assembled program) when the builder had the words; used while ``program`` is that text
    compiled: tuple[str, Program] | None = field(default=None, repr=False, compare=False)
    #: a layout-only case (a testbench's ``build_layout``): the program and the HBM layout, no input values, no
    #: checks; it can only run timing-only (issue 30)
    layout_only: bool = False

    def assembled(self) -> Program:
        """``assemble(self.program, "<testbench>.asm")``, without re-parsing when the builder kept the words."""
        from isa.assembler import assemble

        if self.compiled is not None and self.compiled[0] is self.program:
            return self.compiled[1]
        return assemble(self.program, f"{self.testbench}.asm")

    @property
    def label(self) -> str:
        return f"{self.testbench}[{self.case_id}]"

    @property
    def golden(self) -> np.ndarray | None:
        return self.checks[0].golden if self.checks else None


@dataclass
class Report:
    testbench: str
    case_id: str
    variant: str = ""
    passed: bool = False
    checks: list[CheckResult] = field(default_factory=list)
    n_fail: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    rms: float = 0.0
    rel_rms: float = 0.0
    worst: dict[str, Any] | None = None
    first: dict[str, Any] | None = None
    worst_ratio: float = 0.0
    group_fail: dict[str, int] | None = None
    cycles: int = 0
    instructions: int = 0
    static_instructions: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    wall_time: float = 0.0
    fault: dict[str, Any] | None = None
    error: str | None = None
    expected: tuple[str, ...] | None = None
    summary: str = ""
    workdir: str | None = None
    trace: object = field(default=None, repr=False)  # plena_sim.trace.ring.Trace with run(trace=...)
    #: the workdir's files by name (bytes), with run(keep_artifacts=True): what a caller saves without a workdir
    artifacts: dict[str, bytes] = field(default_factory=dict, repr=False)
    #: in-process end to end (case building to verdict) and its split, see :data:`PHASES`
    e2e_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    #: a timing-only run (issue 30): nothing computed, nothing judged; ``passed`` then means it ran as expected
    timing_only: bool = False
    #: what the generator's plan states about the program (``case.plan.facts()``, e.g. a layer's linear path)
    plan_facts: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """``PASS`` / ``FAIL``, or ``not judged (timing-only)`` for a timing-only run that ran as expected."""
        if self.timing_only and self.passed and not self.expected:
            return TIMING_ONLY_VERDICT
        return "PASS" if self.passed else "FAIL"

    @property
    def label(self) -> str:
        return f"{self.testbench}[{self.case_id}]"

    def check(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        from .compare import _jsonable

        d = {k: v for k, v in self.__dict__.items() if k not in ("checks", "trace", "artifacts")}
        d["checks"] = [c.to_dict() for c in self.checks]
        return _jsonable(d)

    def __str__(self) -> str:
        return self.summary


# =========================================================================== builder


def _hbm_tensor(p: Placement, prec: int, areg: int) -> HbmTensor:
    """The generator's view of a placed tensor (a-register ``areg``)."""
    t = p.hbm_type
    mx = isinstance(t, MxType)
    return HbmTensor(
        areg=areg,
        scale_offset=p.scale_reg if mx else 0,
        eb=t.elem_bytes,
        prec=prec,
        row_pitch_elems=p.cols,
        alloc_elems=p.rows * p.cols,
        block=t.block if isinstance(t, MxType) else 0,
    )


class _TimedAsm(Asm):
    """The builder's :class:`Asm`: records the time of its latest instruction in the builder's clock (the end
    of program generation for :attr:`Case.build_times`)."""

    def __init__(self, clock: dict[str, float]) -> None:
        super().__init__()
        self._clock = clock

    def _add(self, mnemonic: str, encoders: tuple[Any, ...], operands: tuple[object, ...]) -> None:
        super()._add(mnemonic, encoders, operands)  # the one path of every instruction (emit and asm.MNEMONIC)
        self._clock["emitted"] = time.perf_counter()


class CaseBuilder:
    """Helper that assembles a :class:`Case` (see the module docstring)."""

    def __init__(
        self,
        testbench: str,
        params: Mapping[str, Any],
        config: HardwareConfig,
        *,
        case_id: str | None = None,
        variant: str = "",
    ) -> None:
        self.testbench = testbench
        self.params = dict(params)
        self.cfg = config
        self.case_id = case_id or ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        self.variant = variant
        self.rng = np.random.default_rng(int(self.params.get("seed", 0)))
        self._slack_rng = np.random.default_rng((int(self.params.get("seed", 0)), SLACK_STREAM))
        self.image = ImageBuilder(config=config, alignment=64)
        self.aregs: dict[int, int] = {}
        self.tensors: dict[str, Placement] = {}
        self.inputs: dict[str, np.ndarray] = {}
        self.regions: dict[str, tuple[int, int, str]] = {}
        self.next_row = 0
        self.fp = fp_constants(config)
        self.fp_extra: dict[int, np.ndarray] = {}
        self.int_extra: dict[int, np.ndarray] = {}
        self.vram_pre: list[tuple[int, np.ndarray]] = []
        self.checks: list[Check] = []
        self.writable: list[tuple[int, int]] = []
        self._hbm_end = 0  # one past the last byte of every tensor placed so far
        self._sparse: dict[str, list[tuple[int, int]]] = {}  # sparse tensor -> the byte ranges holding data
        self._clock = {"start": time.perf_counter()}

    # ---- data
    def randn(self, shape: int | tuple[int, ...], scale: float = 1.0) -> npt.NDArray[np.float64]:
        a = self.rng.standard_normal(shape)
        a *= scale  # in place: no second array of the size
        return a

    def randn_into(self, out: npt.NDArray[np.float64], scale: float = 1.0) -> None:
        """``out[...] = randn(out.shape, scale)`` without a temporary (the same values; ``out`` C-contiguous)."""
        self.rng.standard_normal(out=out)
        out *= scale

    def fill_slack(self, out: npt.NDArray[np.float64]) -> None:
        """``out[...]`` = finite random N(0, 1) values from the builder's own slack stream (seeded like
        :attr:`rng`, drawn apart from it, so a case's inputs do not depend on its slack): the bytes past a
        tensor's logical end, which a kernel reading one element too many then visibly sees (never zeros); ``out``
        may be a strided view."""
        if out.flags.c_contiguous:
            self._slack_rng.standard_normal(out=out)
        else:
            out[...] = self._slack_rng.standard_normal(out.shape)

    def tensor(
        self,
        name: str,
        values: npt.ArrayLike,
        cls: str = "act",
        *,
        alloc_rows: int | None = None,
        alloc_elems: int | None = None,
        writable: bool = False,
        shape: tuple[int, ...] | None = None,
        as_float64: bool = True,
        bind: bool = True,
    ) -> tuple[HbmTensor, np.ndarray]:
        """Place ``values`` (see the module docstring); returns the tensor and its dequantized values: a float64
        copy, or with ``as_float64=False`` the read-only float32 view of the values the device sees (exact).
        ``bind=False``: no a-register is set for it at the start (the program binds one itself, from
        ``self.tensors[name].base``; the tensor's ``areg`` is then a placeholder 0)."""
        if cls not in _CLASSES:
            raise ValueError(f"tensor {name}: class {cls!r} must be one of {', '.join(_CLASSES)}")
        arr = np.asarray(values, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        if arr.ndim != 2:
            raise ValueError(f"tensor {name}: 2-D values expected, got shape {arr.shape}")
        rows, cols = arr.shape
        n_rows = rows
        if alloc_rows is not None:
            n_rows = max(n_rows, int(alloc_rows))
        if alloc_elems is not None:
            n_rows = max(n_rows, -(-int(alloc_elems) // cols))
        full = arr
        if n_rows > rows:  # slack rows after the data: finite random (read-only inputs), zero (outputs)
            full = np.zeros((n_rows, cols), dtype=np.float64)
            full[:rows] = arr
            if not writable:
                self.fill_slack(full[rows:])
        key, prec = _CLASSES[cls]
        t = self.cfg.hbm_type(key)
        p = self.image.add(name, full, key, address=self._next_address())
        self._hbm_end = p.end
        del full, arr  # the caller's values may go before the float64 copy below is made
        a = 0
        if bind:
            if len(self.aregs) >= 8:
                raise ValueError("CaseBuilder: more than 8 HBM tensors need an a-register")
            a = len(self.aregs)
            self.aregs[a] = p.base
        self.tensors[name] = p
        block = t.block if isinstance(t, MxType) else 0
        ht = HbmTensor(
            areg=a,
            scale_offset=p.scale_reg if isinstance(t, MxType) else 0,
            eb=t.elem_bytes,
            prec=prec,
            row_pitch_elems=cols,
            alloc_elems=n_rows * cols,
            block=block,
        )
        seen = p.values[:rows, :cols]  # read-only float32, exact
        self.inputs[name] = seen if shape is None else seen.reshape(shape)
        deq = seen.astype(np.float64) if as_float64 else seen
        if writable:
            self.writable.append((p.base, p.end))
        self._clock["placed"] = time.perf_counter()
        return ht, deq

    def _next_address(self) -> int:
        """The next tensor's base: packed after every tensor so far, 64-byte aligned."""
        return -(-self._hbm_end // 64) * 64

    def sparse_tensor(
        self, name: str, rows: int, cols: int, cls: str, blocks: Iterable[tuple[int, npt.ArrayLike]]
    ) -> tuple[HbmTensor, list[np.ndarray]]:
        """A ``rows x cols`` tensor (precision class ``cls``) holding data only in the row blocks ``(first_row,
        values [n, cols])``; every other row reads as zero.  The blocks are encoded as :meth:`tensor` encodes a
        whole tensor (an MX block never spans a row, so a block's bytes are the whole tensor's bytes of those
        rows).  Not bound to an a-register (the program binds it from ``self.tensors[name].base``).  Returns the
        tensor and the dequantized values (read-only float32 ``[n, cols]``) of every block, in order."""
        p, lay, prec = self._reserve(name, rows, cols, cls)
        t, base, elem_end = p.hbm_type, p.base, p.elem_range[1]
        written: list[tuple[int, int]] = []
        values = []
        for r0, block in blocks:
            vals = np.asarray(block, dtype=np.float32)
            n = vals.shape[0]
            if not 0 <= r0 <= rows - n or vals.shape[1] != cols:
                raise ValueError(f"tensor {name}: block of shape {vals.shape} at row {r0} is outside [{rows}, {cols}]")
            mat = np.zeros((n, lay["cols_padded"]), dtype=np.float32)
            mat[:, :cols] = vals
            elem, scale, _counts = encode_tensor(mat, t)
            spans = [(base + r0 * lay["row_pitch"], elem)]
            if isinstance(t, MxType):
                spans.append((elem_end + r0 * (lay["cols_padded"] // t.block) * t.scale_bytes, scale))
            for addr, data in spans:
                self.image.hbm.write(addr, data)
                written.append((addr, addr + data.size))
            deq = decode_tensor(elem, scale, t, mat.shape)[:, :cols]
            deq.flags.writeable = False
            values.append(deq)
        self._hbm_end = p.end
        self.tensors[name] = p
        self._sparse[name] = written
        self._clock["placed"] = time.perf_counter()
        return _hbm_tensor(p, prec, 0), values

    def layout_tensor(
        self, name: str, rows: int, cols: int, cls: str = "act", *, bind: bool = True, writable: bool = False
    ) -> tuple[HbmTensor, Placement]:
        """Place a ``rows x cols`` tensor of class ``cls`` exactly where :meth:`tensor` would (same base, pitch,
        scale offset and a-register binding), but without values: no HBM byte is written and nothing is encoded
        (a layout-only case for a timing-only run; its ``inputs`` entry is absent)."""
        if cls not in _CLASSES:
            raise ValueError(f"tensor {name}: class {cls!r} must be one of {', '.join(_CLASSES)}")
        p, _lay, prec = self._reserve(name, rows, cols, cls)
        self._hbm_end = p.end
        self.tensors[name] = p
        self._sparse[name] = []  # no data segments
        a = 0
        if bind:
            if len(self.aregs) >= 8:
                raise ValueError("CaseBuilder: more than 8 HBM tensors need an a-register")
            a = len(self.aregs)
            self.aregs[a] = p.base
        if writable:
            self.writable.append((p.base, p.end))
        self._clock["placed"] = time.perf_counter()
        return _hbm_tensor(p, prec, a), p

    def _reserve(self, name: str, rows: int, cols: int, cls: str) -> tuple[Placement, dict[str, int], int]:
        """(placement, layout, precision) of a ``rows x cols`` tensor of class ``cls`` at the next address (no byte
        written; ValueError past HBM_SIZE)."""
        key, prec = _CLASSES[cls]
        t = self.cfg.hbm_type(key)
        lay = tensor_layout(rows, cols, t)
        base = self._next_address()
        if base + lay["total"] > self.image.hbm.size:
            raise ValueError(
                f"tensor {name}: bytes [{base:#x}, {base + lay['total']:#x}) exceed HBM_SIZE={self.image.hbm.size}"
            )
        elem_end = base + lay["elem_bytes"]
        p = Placement(
            name, base, (rows, cols), rows, cols, lay["cols_padded"], t, lay["scale_reg"], lay["row_pitch"],
            (base, elem_end), (elem_end, base + lay["total"]) if isinstance(t, MxType) else None,
        )  # fmt: skip
        return p, lay, prec

    def output_tensor(
        self, name: str, rows: int, cols: int, cls: str = "act", *, alloc_rows: int | None = None
    ) -> tuple[HbmTensor, Placement]:
        ht, _ = self.tensor(name, np.zeros((rows, cols)), cls, alloc_rows=alloc_rows, writable=True)
        return ht, self.tensors[name]

    # ---- SRAM preloads
    def set_fp(self, **slots: float) -> None:
        for k, v in slots.items():
            if k not in FP_SLOTS:
                raise KeyError(f"unknown FP slot {k!r}")
            self.fp[FP_SLOTS[k]] = np.float32(v)

    def fp_value(self, slot: str | int) -> float:
        """The bf16 value the device reads from a constant slot."""
        i = FP_SLOTS[slot] if isinstance(slot, str) else int(slot)
        return float(bf16.round_values(self.fp[i : i + 1])[0])

    def fp_words(self, addr: int, values: npt.ArrayLike) -> None:
        self.fp_extra[int(addr)] = np.atleast_1d(np.asarray(values, dtype=np.float32))

    def int_words(self, addr: int, values: npt.ArrayLike) -> None:
        self.int_extra[int(addr)] = np.atleast_1d(np.asarray(values, dtype=np.uint32))

    def vram_preload(self, row: int, values: npt.ArrayLike) -> None:
        vals = np.asarray(values, dtype=np.float32).reshape(-1, self.cfg.VLEN)
        self.vram_pre.append((int(row), vals))

    # ---- VRAM regions
    def rows(self, n: int, name: str, role: str = "scratch") -> int:
        """Allocate ``n`` rows after every region so far, leaving one guard row; returns the first row."""
        first = self.next_row
        if n > 0:
            self.region(name, first, n, role)
        return first

    def alloc(self, n: int) -> int:
        """Reserve ``n`` rows (plus one guard row) without declaring them; the plan declares them."""
        first = self.next_row
        self.next_row += int(n) + 1
        return first

    def skip_to(self, row: int) -> None:
        self.next_row = max(self.next_row, int(row))

    def region(self, name: str, first_row: int, n_rows: int, role: str) -> None:
        if role not in _ROLES:
            raise ValueError(f"region {name}: role {role!r} must be one of {_ROLES}")
        if name in self.regions and self.regions[name] != (first_row, n_rows, role):
            raise ValueError(f"region {name} declared twice differently")
        self.regions[name] = (int(first_row), int(n_rows), role)
        self.next_row = max(self.next_row, first_row + n_rows + 1)

    def add_regions(self, regions: Mapping[str, tuple[int, int, str]], prefix: str = "") -> None:
        for k, (r0, n, role) in regions.items():
            if n > 0:
                self.region(prefix + k, r0, n, role)

    # ---- program and checks
    def asm(self) -> Asm:
        self._clock.setdefault("generate", self._clock.get("placed", self._clock["start"]))
        a = _TimedAsm(self._clock)
        a.comment(f"testbench {self.testbench} case {self.case_id}")
        if self.aregs:
            set_addr_regs(a, self.aregs, [1, 2])
        return a

    def check(
        self,
        name: str,
        read: Readback,
        golden: npt.ArrayLike | None,
        coords: Sequence[str],
        tol: Tolerance | str,
        *,
        A: npt.ArrayLike | None = None,
        group_by: Sequence[str] | None = None,
        golden_from: str | None = None,
        derive: Callable[[Machine], Derived] | None = None,
        **tol_sizes: object,
    ) -> Check:
        if isinstance(tol, str):
            tol = tolerance(tol, **tol_sizes)
        g = None if golden is None else np.asarray(golden)
        if g is not None and g.dtype.kind == "f":
            g = g.astype(np.float64)
            if not np.all(np.isfinite(g)):
                raise AssertionError(f"{self.testbench}: golden of check {name} is not finite")
        c = Check(
            name,
            read,
            g,
            tuple(coords),
            tol,
            None if A is None else np.asarray(A, dtype=np.float64),
            tuple(group_by) if group_by else None,
            golden_from,
            derive,
        )
        self.checks.append(c)
        return c

    def case(self, program: Asm | str, **extra: Any) -> Case:
        text = program.text() if isinstance(program, Asm) else str(program)
        if isinstance(program, Asm):  # assembled from the words, no re-parse (valid while case.program is text)
            extra.setdefault("compiled", (text, program.program(f"{self.testbench}.asm")))
        segs = []
        for name, p in self.tensors.items():
            for lo, hi in self._sparse.get(name, [(p.base, p.end)]):
                segs.append((lo, np.asarray(self.image.hbm.read(lo, hi - lo), dtype=np.uint8).copy()))
        kw: dict[str, Any] = dict(
            testbench=self.testbench,
            case_id=self.case_id,
            params=self.params,
            config=self.cfg,
            program=text,
            checks=list(self.checks),
            hbm_segments=segs,
            tensors=dict(self.tensors),
            inputs=dict(self.inputs),
            fp_consts=self.fp.copy(),
            fp_preload=dict(self.fp_extra),
            int_preload=dict(self.int_extra),
            vram_preload=list(self.vram_pre),
            regions=dict(self.regions),
            hbm_writable=list(self.writable),
            variant=self.variant,
        )
        kw.update(extra)
        now = time.perf_counter()
        clock = self._clock
        gen = clock.get("emitted", now) - clock["generate"] if "generate" in clock else 0.0
        return Case(**kw, build_times={"build_s": now - clock["start"], "generate_s": gen})


# =========================================================================== running


def _regions_check(case: Case) -> None:
    """Declared regions must be pairwise disjoint (in-place kernels declare ``inout`` once)."""
    items = sorted((r0, n, name) for name, (r0, n, _role) in case.regions.items() if n > 0)
    for (a0, an, aname), (b0, bn, bname) in itertools.pairwise(items):
        if b0 < a0 + an:
            raise ValueError(
                f"{case.label}: VRAM regions {aname} [{a0}, {a0 + an}) and {bname} [{b0}, {b0 + bn}) overlap"
            )


def prepare_machine(case: Case, backend: str = "numba") -> Machine:
    """A :class:`~plena_sim.machine.Machine` of ``case.config`` holding the case's HBM image, FP SRAM
    constants and preloads, INT SRAM and VRAM preloads, with every ``output``/``scratch`` region, every other FP
    SRAM word and every MRAM tile poisoned with (bf16) NaN and every other INT SRAM word holding
    :data:`INT_SENTINEL`; not run yet (step 2 of :func:`run`)."""
    from plena_sim.machine import Machine

    m = Machine(case.config, backend=backend)
    for base, data in case.hbm_segments:
        m.hbm.write(base, data)
    fps = m.fp_sram.bits
    fps[16:] = BF16_NAN  # every state word the kernel did not write reads NaN
    consts = case.fp_consts if case.fp_consts is not None else fp_constants(case.config)
    fps[0:16] = bf16.encode(consts)
    for addr, vals in case.fp_preload.items():
        fps[addr : addr + vals.size] = bf16.encode(vals)
    m.int_sram[:] = INT_SENTINEL
    for addr, vals in case.int_preload.items():
        m.int_sram[addr : addr + vals.size] = vals
    m.state.mram[...] = np.nan  # an MRAM tile the kernel did not load reads NaN
    vb = m.vram.bits
    for row, vals in case.vram_preload:
        vb[row : row + vals.shape[0]] = bf16.encode(vals)
    for r0, n, role in case.regions.values():
        if role in ("output", "scratch") and n > 0:
            vb[r0 : r0 + n] = BF16_NAN
    return m


def _footprint(case: Case, before: np.ndarray, after: np.ndarray) -> CheckResult:
    hw = before.shape[0]
    declared = np.zeros(hw, dtype=bool)
    for r0, n, _role in case.regions.values():
        declared[r0 : min(hw, r0 + n)] = True
    changed = np.any(before != after, axis=1) & ~declared
    rows = np.flatnonzero(changed)
    res = CheckResult(
        name="vram_footprint", passed=not rows.size, n=int((~declared).sum()), n_fail=int(rows.size), exact=True
    )
    if rows.size:
        res.reason = (
            f"{rows.size} VRAM rows outside the declared regions changed (first row {int(rows[0])}"
            + (f", last {int(rows[-1])}" if rows.size > 1 else "")
            + ")"
        )
        res.first = {"at": f"(row={int(rows[0])})", "index": [int(rows[0])]}
    return res


@dataclass(frozen=True)
class _HbmSnapshot:
    """The HBM before a run, page by page (it is sparse): the page table, the written pages, the high water."""

    index: np.ndarray
    pages: np.ndarray
    high_water: int

    @classmethod
    def of(cls, m: Machine) -> _HbmSnapshot:
        hbm = m.hbm
        return cls(hbm.page_index.copy(), np.asarray(hbm.pages[: hbm.pages_used]).copy(), hbm.high_water)

    def changed(self, m: Machine, batch: int = 256) -> np.ndarray:
        """The addresses (ascending) of every byte the machine's HBM now holds differently."""
        hbm = m.hbm
        pages = np.flatnonzero(hbm.page_index != NO_PAGE)  # every page written before or since (the others read 0)
        out = []
        for i in range(0, pages.size, batch):
            chunk = pages[i : i + batch]
            after = hbm.pages[hbm.page_index[chunk] - 1]  # (an index entry is 1 + the page's pool row)
            ref = np.zeros_like(after)
            rows = self.index[chunk]
            had = rows != NO_PAGE
            ref[had] = self.pages[rows[had] - 1]
            p, off = np.nonzero(after != ref)
            out.append(chunk[p] * PAGE_SIZE + off)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _hbm_footprint(case: Case, before: _HbmSnapshot, m: Machine) -> CheckResult:
    n = max(before.high_water, int(m.hbm.high_water))
    bad = before.changed(m)
    for lo, hi in case.hbm_writable:
        bad = bad[(bad < lo) | (bad >= hi)]
    res = CheckResult(name="hbm_footprint", passed=not bad.size, n=n, n_fail=int(bad.size), exact=True)
    if bad.size:
        res.reason = f"{bad.size} HBM bytes outside the output tensors changed (first byte {int(bad[0])})"
        res.first = {"at": f"(byte={int(bad[0])})", "index": [int(bad[0])]}
    return res


def _constants(case: Case, m: Machine) -> CheckResult:
    consts = case.fp_consts if case.fp_consts is not None else fp_constants(case.config)
    want = bf16.encode(consts)
    got = np.asarray(m.fp_sram.bits[0:16])
    bad = np.flatnonzero(got != want)
    res = CheckResult(name="constants", passed=not bad.size, n=16, n_fail=int(bad.size), exact=True)
    if bad.size:
        k = int(bad[0])
        res.reason = (
            f"FP SRAM constant slot {k} changed: {float(bf16.decode(want[k : k + 1])[0])} -> "
            f"{float(bf16.decode(got[k : k + 1])[0])}"
        )
        res.first = {"at": f"(slot={k})", "index": [k]}
    return res


def _fail_report(
    case_or_label: Case | tuple[str, str, str], exc_kind: str, text: str, t0: float, expect: Sequence[str] | None = None
) -> Report:
    if isinstance(case_or_label, Case):
        tb, cid, var = case_or_label.testbench, case_or_label.case_id, case_or_label.variant
    else:
        tb, cid, var = case_or_label
    passed = exc_kind in expect if expect else False
    r = Report(
        tb,
        cid,
        var,
        passed=passed,
        error=f"{exc_kind}: {text}",
        wall_time=time.perf_counter() - t0,
        expected=tuple(expect) if expect else None,
    )
    r.summary = f"{r.label}: PASS (expected {exc_kind}: {text})" if passed else f"{r.label}: {exc_kind} error: {text}"
    return r


def _primary_fill(rep: Report, res: CheckResult) -> None:
    rep.n_fail, rep.max_abs, rep.max_rel = res.n_fail, res.max_abs, res.max_rel
    rep.rms, rep.rel_rms, rep.worst, rep.first = res.rms, res.rel_rms, res.worst, res.first
    rep.worst_ratio, rep.group_fail = res.worst_ratio, res.group_fail


#: the in-process split of a case's end to end (:attr:`Report.phases`): generating the program, assembling it,
#: building the inputs (case data, goldens, the machine's images), simulating, judging the outputs
PHASES = ("generate_s", "assemble_s", "inputs_s", "simulate_s", "judge_s")


def _simulate(
    case: Case,
    backend: str,
    timing: str | None,
    max_instructions: int | None,
    trace: bool | int = False,
    phases: dict[str, float] | None = None,
    routing: Routing | None = None,
    functional: bool = True,
) -> tuple[Machine, RunResult, Program, np.ndarray, _HbmSnapshot | None, int]:
    """Run the case's program; returns (machine, RunResult, program, vram_before, hbm_before, hw). Adds the
    seconds it spends assembling, preparing the machine and simulating to ``phases``. ``functional=False``: a
    timing-only run with ``routing`` (no footprint snapshots: nothing is judged)."""
    ph = phases if phases is not None else {}
    t0 = time.perf_counter()
    prog = case.assembled()
    t1 = time.perf_counter()
    m = prepare_machine(case, backend)
    rows_hi = (
        [r0 + n for (r0, n, _r) in case.regions.values()] + [row + v.shape[0] for row, v in case.vram_preload] + [0]
    )
    hw = min(max(rows_hi) + 64, m.vram.bits.shape[0]) if functional else 0
    before = np.asarray(m.vram.bits[:hw]).copy()
    hbm_before = _HbmSnapshot.of(m) if functional else None
    t2 = time.perf_counter()
    res = m.run(
        prog,
        max_instructions=max_instructions or case.max_instructions,
        trace=trace,
        raise_on_fault=False,
        name=f"{case.testbench}.asm",
        timing=timing,
        functional=functional,
        routing=routing,
    )
    t3 = time.perf_counter()
    for k, dt in (("assemble_s", t1 - t0), ("inputs_s", t2 - t1), ("simulate_s", t3 - t2)):
        ph[k] = ph.get(k, 0.0) + dt
    return m, res, prog, before, hbm_before, hw


def run(
    case: Case,
    *,
    backend: str = "numba",
    workdir: str | Path | None = None,
    timing: str | None = None,
    max_instructions: int | None = None,
    trace: bool | int = False,
    keep_artifacts: bool = False,
    functional: bool = True,
    routing: Routing | None = None,
) -> Report:
    """Assemble, simulate and judge ``case`` (see the module docstring). ``keep_artifacts``: the files a
    ``workdir`` would get are also kept in memory, in :attr:`Report.artifacts`. ``functional=False``: a
    timing-only run (with the MoE ``routing``): the statistics of the run, its fault if any, nothing judged (the
    only way to run a layout-only case)."""
    from isa.assembler import AssemblerError

    t0 = time.perf_counter()
    expect = case.expect
    phases = _build_phases(case)
    if case.layout_only and functional:
        return _fail_report(case, "plan", "a layout-only case has no inputs: it runs only timing-only", t0, expect)
    try:
        _regions_check(case)
        m, res, prog, before, hbm_before, hw = _simulate(
            case, backend, timing, max_instructions, trace, phases, routing, functional
        )
    except AssemblerError as exc:
        return _fail_report(case, "assembler", " | ".join(str(exc).splitlines()) or repr(exc), t0, expect)
    except ValueError as exc:
        return _fail_report(case, "plan", str(exc), t0, expect)
    rep = Report(
        case.testbench,
        case.case_id,
        case.variant,
        cycles=int(res.cycles),
        instructions=int(res.instructions),
        static_instructions=len(prog),
        stats=dict(res.stats),
        expected=expect,
        trace=getattr(res, "trace", None),
        phases=phases,
        timing_only=not functional,
        plan_facts=dict(case.plan.facts()) if hasattr(case.plan, "facts") else {},
    )
    sims: dict[str, np.ndarray] = {}
    derived: dict[str, np.ndarray] = {}
    companion_sims: dict[str, np.ndarray] | None = None
    if res.fault is not None:
        f = res.fault
        rep.fault = f.to_dict() if hasattr(f, "to_dict") else {"text": str(f)}
        rule = getattr(f, "rule", "?")
        rep.passed = rule in expect if expect else False
        rep.summary = (
            f"{case.label}: PASS (expected fault {rule})"
            if rep.passed
            else f"{case.label}: simulator fault {rule}: {f}"
        )
    elif expect:
        rep.passed = False
        rep.error = f"expected one of {expect}, but the run completed without a fault"
        rep.summary = f"{case.label}: {rep.error}"
    elif not functional:
        rep.passed = True
        rep.summary = f"{case.label}: {TIMING_ONLY_VERDICT}"
    else:
        companion_sims = _judge(case, rep, m, backend, sims, derived)
        after = np.asarray(m.vram.bits[:hw])
        rep.checks.append(_footprint(case, before, after))
        assert hbm_before is not None  # a functional run took the snapshot
        rep.checks.append(_hbm_footprint(case, hbm_before, m))
        if rep.checks:
            _primary_fill(rep, rep.checks[0])
        rep.passed = all(c.passed for c in rep.checks)
        rep.summary = _summary(case, rep)
    rep.wall_time = time.perf_counter() - t0
    rep.e2e_s = case.build_times.get("build_s", 0.0) + rep.wall_time
    # judging: everything after the simulation (so that the split sums to the end to end exactly)
    phases["judge_s"] = max(rep.e2e_s - sum(v for k, v in phases.items() if k != "judge_s"), 0.0)
    by_check = {c.name: c.golden_from for c in case.checks if c.golden_from is not None}
    goldens = {name: companion_sims[src] for name, src in by_check.items() if companion_sims and src in companion_sims}
    if workdir is not None or keep_artifacts:
        if workdir is not None:
            rep.workdir = str(workdir)
        files = _artifacts(case, rep, prog, sims, {**goldens, **derived}, _post_mortem(m, prog, res.fault))
        _write_artifacts(files, workdir)
        rep.artifacts = files if keep_artifacts else {}
    return rep


#: the verdict of a timing-only run that ran as expected
TIMING_ONLY_VERDICT = "not judged (timing-only)"


def _post_mortem(m: Machine, prog: Program, fault: object) -> dict[str, np.ndarray] | None:
    """The state.npz arrays of a faulting run (:mod:`plena_sim.trace.postmortem`), None if it did not fault."""
    from plena_sim.faults import SimFault
    from plena_sim.trace.postmortem import fault_state

    return fault_state(m.state, prog, fault) if isinstance(fault, SimFault) else None


def _build_phases(case: Case) -> dict[str, float]:
    """The phase split's starting point from the case building's clock (its non-emission part is inputs)."""
    gen = case.build_times.get("generate_s", 0.0)
    ph = dict.fromkeys(PHASES, 0.0)
    ph["generate_s"] = gen
    ph["inputs_s"] = max(case.build_times.get("build_s", 0.0) - gen, 0.0)
    return ph


def _judge(
    case: Case, rep: Report, m: Machine, backend: str, sims: dict[str, np.ndarray], derived: dict[str, np.ndarray]
) -> dict[str, np.ndarray] | None:
    """Read back and compare every check (appending to ``rep.checks``, the outputs to ``sims``, the goldens derived
    from the machine to ``derived``) and the constant slots; returns the companion's outputs if a check took its
    golden from them."""
    companion_sims: dict[str, np.ndarray] | None = None
    for chk in case.checks:
        golden, A, tol = chk.golden, chk.A, chk.tol
        try:
            if chk.golden_from is not None:
                if companion_sims is None:
                    companion_sims = _companion_outputs(case.companion, backend)
                golden = companion_sims[chk.golden_from]
            if chk.derive is not None:
                golden, A, tol_d = chk.derive(m)
                tol = tol_d or tol
                derived[chk.name] = golden
            sim = chk.read.read(m)
        except Exception as exc:  # a readback/companion/derivation problem is a failure of the case
            rep.checks.append(CheckResult(name=chk.name, passed=False, reason=f"readback error: {exc}"))
            continue
        sims[chk.name] = sim
        result = _compare_check(chk, sim, np.asarray(golden), A, tol)
        _add_locations(result, locate_elements(chk.read, m, sim), m.cfg.VLEN)
        rep.checks.append(result)
    rep.checks.append(_constants(case, m))
    return companion_sims


def _add_locations(result: CheckResult, addr: np.ndarray | None, V: int) -> None:
    """The VRAM row and lane of the first and worst failing elements (``vram_row`` / ``lane`` in their dicts)."""
    if addr is None:
        return
    for elem in (result.first, result.worst):
        if elem is not None and "index" in elem:
            elem["vram_row"], elem["lane"] = divmod(int(addr[tuple(elem["index"])]), V)


def _compare_check(
    chk: Check, sim: np.ndarray, golden: np.ndarray, A: np.ndarray | None, tol: Tolerance
) -> CheckResult:
    """:func:`compare` for one check; a golden taken from a companion run may be non-finite (its bits are judged),
    and a golden the comparison refuses is the check's failure, never an exception out of the run."""
    from_companion = chk.golden_from is not None
    try:
        return compare(
            sim,
            golden,
            coords=chk.coords,
            A=A,
            name=chk.name,
            group_by=chk.group_by,
            tolerance_name=tol.name,
            nonfinite_golden=from_companion and tol.exact,
            **tol.kwargs(),
        )
    except ValueError as exc:
        source = f"the companion's {chk.golden_from}" if from_companion else "the golden"
        return CheckResult(name=chk.name, passed=False, n=int(golden.size), reason=f"{source} refused: {exc}")


def _companion_outputs(comp: Case | None, backend: str) -> dict[str, np.ndarray]:
    if comp is None:
        raise ValueError("a check takes its golden from a companion case, but the case has none")
    m, res, _prog, _b, _h, _hw = _simulate(comp, backend, None, None)
    if res.fault is not None:
        raise ValueError(f"companion {comp.label} faulted: {res.fault}")
    return {c.name: c.read.read(m) for c in comp.checks}


def _summary(case: Case, rep: Report) -> str:
    if rep.passed:
        c0 = rep.checks[0]
        wr = "exact" if c0.exact else f"worst err/tol {c0.worst_ratio:.3g}"
        return f"{case.label}: PASS; {c0.name} {c0.n} elements {wr}"
    return f"{case.label}: " + "; ".join(c.summary() for c in rep.checks if not c.passed)


def _artifacts(
    case: Case,
    rep: Report,
    prog: Program,
    sims: Mapping[str, np.ndarray],
    goldens: Mapping[str, np.ndarray],
    post_mortem: Mapping[str, np.ndarray] | None,
) -> dict[str, bytes]:
    """A run's files by name: program.asm/.mem, golden*.npy and sim*.npy per check (``goldens``: those only known
    after the run, by check name), state.npz (the post-mortem of a faulting run), report.json."""
    from isa.fileio import npy_bytes, npz_bytes
    from isa.memfile import format_mem

    files = {"program.asm": case.program.encode(), "program.mem": format_mem(prog.words).encode()}
    for k, chk in enumerate(case.checks):
        suffix = "" if k == 0 else f"_{chk.name}"
        g = chk.golden if chk.golden is not None else goldens.get(chk.name)
        if g is not None:
            files[f"golden{suffix}.npy"] = npy_bytes(g)
        if chk.name in sims:
            files[f"sim{suffix}.npy"] = npy_bytes(sims[chk.name])
    if post_mortem is not None:
        files["state.npz"] = npz_bytes(post_mortem)
    files["report.json"] = (json_text(rep.to_dict(), indent=1) + "\n").encode()
    return files


def _write_artifacts(files: Mapping[str, bytes], workdir: str | Path | None) -> None:
    """Each file into ``workdir`` (created if missing), atomically (:mod:`isa.fileio`)."""
    if workdir is None:
        return
    from isa.fileio import atomic_write

    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        atomic_write(wd / name, data)


def cases_of(mod: ModuleType) -> dict[str, CaseSpec]:
    """Every named case of a testbench module: required, stretch, paper-scale (``PAPER_CASES``) and the larger
    ones run under ``-m slow`` (``SLOW_CASES``)."""
    table = list(mod.REQUIRED_CASES) + list(getattr(mod, "STRETCH_CASES", []))
    table += list(getattr(mod, "PAPER_CASES", [])) + list(getattr(mod, "SLOW_CASES", []))
    return {c[0]: c for c in table}


def run_case(
    testbench: str | ModuleType,
    case_id: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    variant: str | None = None,
    *,
    hw: str | None = None,
    backend: str = "numba",
    workdir: str | Path | None = None,
    timing: str | None = None,
    build_kwargs: Mapping[str, Any] | None = None,
    functional: bool = True,
    routing: Routing | None = None,
) -> Report:
    """Build and run one case of a testbench module (or its registry name) on hardware preset ``hw``.

    ``case_id`` names a required or stretch case (its overrides and variant are used; any other id is only
    the report's label); ``None`` runs the defaults. ``overrides`` are applied on top. Shapes given in units of
    the machine (:mod:`testbenches.shapes`) are resolved on the config. With ``hw`` set, a case variant that
    fixes its own machine (``small``, ``wide``) is replaced by ``hw``. A ``ValueError``/``AssertionError``
    raised while building (plan, Asm) is a failed report, never a skip."""
    from . import get as _get
    from .shapes import resolve_params
    from .variants import VARIANTS, fixes_machine, get_config

    mod = _get(testbench) if isinstance(testbench, str) else testbench
    name = getattr(mod, "NAME", mod.__name__.rsplit(".", 1)[-1])
    params = dict(mod.DEFAULTS)
    case_variant = "default"
    if case_id is not None and case_id != "default":
        cases = cases_of(mod)
        if case_id in cases:
            params.update(cases[case_id][1])
            case_variant = cases[case_id][2]
    if variant is None:
        variant = case_variant
        if hw is not None and variant in VARIANTS and fixes_machine(variant):
            variant = "default"
    params.update(overrides or {})
    cid = case_id or "custom"
    t0 = time.perf_counter()
    try:
        cfg = get_config(variant, hw=hw)
        params = resolve_params(params, cfg)
        case = build_for(mod, params, cfg, functional)
    except GeneratorError as exc:  # the generator emitted an invalid instruction: its bug, not the parameters'
        return _fail_report((name, cid, variant), "generator", str(exc), t0, params.get("expect"))
    except (ValueError, AssertionError, KeyError) as exc:
        expect = params.get("expect")
        return _fail_report((name, cid, variant), "plan", str(exc), t0, expect)
    case.build_times["build_s"] = time.perf_counter() - t0  # config and parameter resolution included
    case.case_id = cid
    case.variant = variant
    if case.companion is not None:
        case.companion.case_id = cid + ":companion"
    return run(case, backend=backend, workdir=workdir, timing=timing, functional=functional, routing=routing)


def build_for(mod: ModuleType, params: Mapping[str, Any], cfg: HardwareConfig, functional: bool = True) -> Case:
    """``mod.build(params, cfg)``; for a timing-only run the testbench's ``build_layout`` (the program and the HBM
    layout, no inputs) when it has one."""
    build = getattr(mod, "build_layout", None) if not functional else None
    return (build or mod.build)(params, cfg)
