"""The comparison metric of the direct-emit testbenches (kernels.md §5) and the one tolerance table.

``compare(sim, golden, *, coords, A=None, eps_a, eps_g, rho=None, abs_term=None, exact=False)`` judges a
simulated array against its float64 golden, element by element, and always returns a
:class:`CheckResult` (pass or fail) carrying the statistics the report needs:

1. shapes must be equal -- otherwise "shape mismatch"; nothing is truncated or reshaped;
2. every simulated element must be finite where the golden is (count and first coordinate reported);
3. ``|s - g| <= eps_a*A + eps_g*|g| + tau`` for **every** element, ``tau = 2^-24*max(A)``; without an
   envelope ``A`` (tolerance rows marked "–"), ``tau = 0`` and ``eps_a*A`` is replaced by ``abs_term``
   (or 0);  ``exact=True`` is bitwise equality of the bf16 (float input) or integer values;
4. relative RMS ``sqrt(mean((s-g)^2)) / sqrt(mean(g^2)) <= rho`` when ``rho`` is given (skipped when the
   golden is all zero).

``coords`` names the axes of the arrays (``("batch", "row", "head", "col")``); every element the report
mentions is named with them, e.g. ``(batch=1, row=77, head=5, col=3)``.  ``group_by`` (a subset of the
axis names) adds per-group failure counts, e.g. per (batch, head) for attention.

``TOLERANCES`` is the single tolerance table of kernels.md §5.2: one entry per row, each a function of
the sizes the row depends on (``n_chunks``, ``bias``, ``nb``, ``Tk``, ``smax_r``), returning a
:class:`Tolerance` whose :meth:`Tolerance.kwargs` feed :func:`compare`.  :func:`tolerance` looks a row
up by name.  The table is never loosened to make a case pass (§5.2).

Every SRAM dump is decoded as bf16, never fp16: :func:`bf16_decode` / :func:`bf16_encode` are the
host bf16 codec of :mod:`plena_sim.numerics.bf16` (``decode`` / ``encode``) under the names the testbenches use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, SupportsInt, TypedDict

import numpy as np
import numpy.typing as npt

from plena_sim.numerics.bf16 import decode as bf16_decode
from plena_sim.numerics.bf16 import encode as bf16_encode
from plena_sim.numerics.bf16 import round_values

__all__ = [
    "abs_matmul",
    "CheckResult",
    "Tolerance",
    "ToleranceKwargs",
    "EpsA",
    "TOLERANCES",
    "tolerance",
    "compare",
    "bf16_decode",
    "bf16_encode",
    "is_bf16_exact",
    "fmt_coords",
    "TAU_FACTOR",
    "BF16_U",
    "moe_bound",
]

TAU_FACTOR = 2.0**-24
#: the unit roundoff of a bf16 write (RNE, 8 significant bits): |bf16(y) - y| <= BF16_U*|y|
BF16_U = 2.0**-8


# =========================================================================== bf16 (host side)


def abs_matmul(x: npt.NDArray[np.float64], w: npt.ArrayLike, cols: int = 512) -> npt.NDArray[np.float64]:
    """The error envelope ``|x| @ |w|``, a block of ``cols`` columns of ``w`` at a time (no ``|w|`` copy of a
    large weight alive at once)."""
    w = np.asarray(w)
    ax = np.abs(x)
    out = np.empty((ax.shape[0], w.shape[1]))
    for c in range(0, w.shape[1], cols):
        out[:, c : c + cols] = ax @ np.abs(w[:, c : c + cols])
    return out


def is_bf16_exact(values: npt.ArrayLike) -> bool:
    """Every finite value is a bf16 value (``bf16(f32(v)) == v``)."""
    v = np.asarray(values, dtype=np.float64)
    back = round_values(v).astype(np.float64)
    fin = np.isfinite(v)
    return bool(np.array_equal(back[fin], v[fin]))


# =========================================================================== tolerance table (§5.2)

#: an eps_a factor: one value, or one per element of the output (broadcast against it)
EpsA = float | npt.NDArray[np.float64]


class ToleranceKwargs(TypedDict):
    """The keyword arguments of :func:`compare` one tolerance row fixes."""

    eps_a: EpsA
    eps_g: float
    rho: float | None
    abs_term: float | None
    exact: bool


@dataclass(frozen=True)
class Tolerance:
    """One row of kernels.md §5.2, evaluated for a case's sizes.

    ``uses_A``: the row has a reference envelope A (else "–": tau = 0 and ``abs_term`` replaces eps_a*A).
    ``eps_a`` may be an array (flash attention's score-aware factor), broadcast against the output."""

    name: str
    eps_a: EpsA = 0.0
    eps_g: float = 0.0
    rho: float | None = None
    abs_term: float | None = None
    uses_A: bool = True
    exact: bool = False

    def kwargs(self) -> ToleranceKwargs:
        return {
            "eps_a": self.eps_a,
            "eps_g": self.eps_g,
            "rho": self.rho,
            "abs_term": self.abs_term,
            "exact": self.exact,
        }

    def describe(self) -> str:
        if self.exact:
            return f"{self.name}: exact"
        ea = (
            f"{float(np.min(self.eps_a)):.4g}..{float(np.max(self.eps_a)):.4g} (per element)"
            if isinstance(self.eps_a, np.ndarray)
            else f"{self.eps_a:.4g}"
        )
        return f"{self.name}: eps_a={ea} eps_g={self.eps_g:.4g} rho={self.rho}" + (
            f" abs={self.abs_term:.4g}" if self.abs_term is not None else ""
        )


def _linear(n_chunks: int = 1, bias: bool = False, **_: object) -> Tolerance:
    return Tolerance("linear", 2**-12 + 2**-8 * (n_chunks - 1 + int(bool(bias))), 2**-6, 2**-7)


def _ffn_int(**_: object) -> Tolerance:
    return Tolerance("ffn_int", 2**-6, 2**-6, 2**-6)


def _ffn(**_: object) -> Tolerance:
    return Tolerance("ffn", 2**-7, 2**-6, 2**-6)


def _act(**_: object) -> Tolerance:
    return Tolerance("act", 2**-7, 2**-7, 2**-6)


def _rms(nb: int = 1, **_: object) -> Tolerance:
    return Tolerance("rms", 0.0, 2**-5 * (1 + nb / 32), 2**-6, uses_A=False)


def _ln(nb: int = 1, **_: object) -> Tolerance:
    f = 1 + nb / 32
    return Tolerance("ln", 2**-6 * f, 2**-6 * f, 2**-6)


def _softmax(nb: int = 1, **_: object) -> Tolerance:
    f = 1 + nb / 32
    return Tolerance("softmax", 2**-6 * f, 2**-5 * f, 2**-5)


def _rope(**_: object) -> Tolerance:
    return Tolerance("rope", 2**-7, 2**-7, 2**-7)


def _qkt(**_: object) -> Tolerance:
    return Tolerance("qkt", 2**-12, 2**-7, 2**-8)


def _flash(smax_r: npt.ArrayLike = 0.0, Tk: int = 1, **_: object) -> Tolerance:
    """O of flash attention: eps_a = 2^-6*max(1, smax_r/3) per element (smax_r broadcast to O's shape)."""
    eps = 2**-6 * np.maximum(1.0, np.asarray(smax_r, dtype=np.float64) / 3.0)
    eps_a: EpsA = float(eps) if eps.ndim == 0 else eps
    return Tolerance("flash", eps_a, 2**-6, 2**-6 + 1.5 * 2**-8 * math.sqrt(Tk))


def _flash_m(**_: object) -> Tolerance:
    return Tolerance("flash_m", 0.0, 2**-6, None, abs_term=2**-8, uses_A=False)


def _flash_l(Tk: int = 1, **_: object) -> Tolerance:
    return Tolerance("flash_l", 0.0, 2**-5 + 2**-7 * math.sqrt(Tk), None, uses_A=False)


def _ssum(**_: object) -> Tolerance:
    return Tolerance("ssum", 2**-16, 2**-7, None)


def _topk(**_: object) -> Tolerance:
    return Tolerance("topk", 0.0, 2**-7, None, abs_term=2**-10, uses_A=False)


def _layer_f64(**_: object) -> Tolerance:
    """A composed layer's output against a float64 evaluation with no intermediate rounding: the relative RMS
    alone (issue 15's numerical-quality bound, 5 %); every element's own bound is its stage check's."""
    return Tolerance("layer_f64", 0.0, 0.0, 0.05, abs_term=math.inf, uses_A=False)


def _exact(**_: object) -> Tolerance:
    return Tolerance("exact", 0.0, 0.0, None, uses_A=False, exact=True)


def _moe(rho: float = 2**-6, **_: object) -> Tolerance:
    """moe_layer output: A is the composed absolute bound of :func:`moe_bound` (so eps_a = 1, eps_g = 0), and
    ``rho`` the relative-RMS bound it derives."""
    return Tolerance("moe", 1.0, 0.0, rho)


#: kernels.md §5.2, every row.  name -> function(**sizes) -> Tolerance.
#:   linear   A=|X|@|W|(+|b|)           eps_a 2^-12+2^-8(n_chunks-1+[bias])  eps_g 2^-6   rho 2^-7
#:   ffn_int  A=|X@Wg|.|X@Wu|            2^-6                                  2^-6         2^-6
#:   ffn      A=(|X@Wg|.|X@Wu|)@|Wd|     2^-7                                  2^-6         2^-6
#:   act      A=|x|                      2^-7                                  2^-7         2^-6
#:   rms      –                          0                                     2^-5(1+nb/32) 2^-6
#:   ln       A=|γ|(|x-μ|+|μ|)/σ+|β|     2^-6(1+nb/32)                         2^-6(1+nb/32) 2^-6
#:   softmax  A=g(1+|x-rowmax|)          2^-6(1+nb/32)                         2^-5(1+nb/32) 2^-5
#:   rope     A=|x||cos|+|rot x||sin|    2^-7                                  2^-7         2^-7
#:   qkt      A=|Q|@|K|^T                2^-12                                 2^-7         2^-8
#:   flash    A=p@|V|                    2^-6 max(1, smax_r/3)                 2^-6         2^-6+1.5*2^-8*sqrt(Tk)
#:   flash_m  – (abs 2^-8)               –                                     2^-6         –
#:   flash_l  –                          0                                     2^-5+2^-7 sqrt(Tk)  –
#:   ssum     A=sum|x|                   2^-16                                 2^-7         –
#:   topk     – (abs 2^-10)              –                                     2^-7         –
#:   layer_f64 – (abs inf)               –                                     0            0.05
#:   exact    –                          0                                     0            –
#:   moe      A=moe_bound(w, f, A_ffn)   1 (A is already the bound)            0            moe_bound's rho
TOLERANCES: Mapping[str, Callable[..., Tolerance]] = {
    "linear": _linear,
    "ffn_int": _ffn_int,
    "ffn": _ffn,
    "act": _act,
    "rms": _rms,
    "ln": _ln,
    "softmax": _softmax,
    "rope": _rope,
    "qkt": _qkt,
    "flash": _flash,
    "flash_m": _flash_m,
    "flash_l": _flash_l,
    "ssum": _ssum,
    "topk": _topk,
    "layer_f64": _layer_f64,
    "exact": _exact,
    "moe": _moe,
}


def tolerance(name: str, **sizes: object) -> Tolerance:
    """The §5.2 row ``name`` evaluated for ``sizes`` (n_chunks, bias, nb, Tk, smax_r as the row needs)."""
    if name not in TOLERANCES:
        raise KeyError(f"unknown tolerance row {name!r} (known: {', '.join(TOLERANCES)})")
    return TOLERANCES[name](**sizes)


def moe_bound(
    w: npt.NDArray[np.float64], f: npt.NDArray[np.float64], A_ffn: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], float]:
    """The tolerance of a routed-MoE output ``out[t] = sum_r w[t,r]*f[t,r]``, composed from the stage rows.

    ``w`` ``[T, k]``: golden routing weights (rank order); ``f`` ``[T, k, n]``: golden expert outputs; ``A_ffn``
    ``[T, k, n]``: their ``ffn`` envelopes.  Returns ``(B, rho)``: the per-element bound ``B`` ``[T, n]`` (the
    ``moe`` row's A) and the relative-RMS bound.  The device computes ``p_r = bf16(w'_r*f'_r)`` (V_MUL_VF: the
    f32 product of two bf16 values is exact), ``s_0 = p_0``, ``s_r = bf16(f32(s_{r-1} + p_r))`` (V_ADD_VV), where
    ``|w' - w| <= e_w = topk.abs + topk.eps_g*w`` (the ``topk`` row, checked on the same weights) and
    ``|f' - f| <= e_f = ffn.eps_a*A_ffn + ffn.eps_g*|f| + tau`` (the ``ffn`` row of each expert's one-row FFN).
    Per rank, with ``S_r`` the golden partial sum and ``E`` the bound so far:
    ``E += e_w*|f| + w*e_f + e_w*e_f`` (inputs) ``+ u*(w + e_w)*(|f| + e_f)`` (the product's rounding), and for
    ``r >= 1`` ``E += u_add*(|S_r| + E)`` (the sum's rounding; ``u = 2^-8``, ``u_add = 2^-8 + 2^-23`` for the
    f32 add before the bf16 write).  ``rho``: the triangle inequality over the ranks with each expert output
    within ``ffn.rho`` in RMS, ``(sum_r ffn.rho*||w_r f_r|| + ||e_w (|f| + e_f)||_r + ||rounding||) / ||g||``."""
    ffn, topk = tolerance("ffn"), tolerance("topk")
    assert topk.abs_term is not None and ffn.rho is not None
    af = np.abs(f)
    tau = TAU_FACTOR * A_ffn.max(axis=2, keepdims=True)
    e_f = ffn.eps_a * A_ffn + ffn.eps_g * af + tau
    e_w = (topk.abs_term + topk.eps_g * w)[:, :, None]
    wk = w[:, :, None]
    u_add = BF16_U + 2.0**-23
    bound = np.zeros((f.shape[0], f.shape[2]))
    rounding = np.zeros_like(bound)
    partial = np.zeros_like(bound)
    rms_sum = 0.0
    for r in range(w.shape[1]):
        inputs = e_w[:, r] * (af[:, r] + e_f[:, r]) + wk[:, r] * e_f[:, r]
        mul = BF16_U * (wk[:, r] + e_w[:, r]) * (af[:, r] + e_f[:, r])
        partial = partial + wk[:, r] * f[:, r]
        bound = bound + inputs + mul
        rounding = rounding + mul
        if r:
            add = u_add * (np.abs(partial) + bound)
            bound = bound + add
            rounding = rounding + add
        rms_sum += ffn.rho * float(np.linalg.norm(wk[:, r] * f[:, r]))
        rms_sum += float(np.linalg.norm(e_w[:, r] * (af[:, r] + e_f[:, r])))
    g_norm = float(np.linalg.norm(partial))
    rho = (rms_sum + float(np.linalg.norm(rounding))) / g_norm if g_norm > 0 else math.inf
    return bound, rho


# =========================================================================== the comparison


def fmt_coords(coords: Sequence[str], idx: Sequence[SupportsInt]) -> str:
    return "(" + ", ".join(f"{n}={int(i)}" for n, i in zip(coords, idx, strict=True)) + ")"


@dataclass
class CheckResult:
    """The outcome of one check; ``to_dict`` is JSON-able, ``summary`` one line."""

    name: str
    passed: bool
    n: int = 0
    n_fail: int = 0
    reason: str = ""  # "" when passed; else what failed first
    shape_sim: tuple[int, ...] = ()
    shape_golden: tuple[int, ...] = ()
    n_nonfinite: int = 0
    first_nonfinite: str | None = None
    max_abs: float = 0.0
    max_abs_at: str | None = None
    max_rel: float = 0.0
    max_rel_at: str | None = None
    rms: float = 0.0
    rel_rms: float = 0.0
    rho: float | None = None
    worst: dict[str, Any] | None = None  # {at, index, sim, golden, err, tol, ratio}
    first: dict[str, Any] | None = None  # first failing element in C order (same keys)
    worst_ratio: float = 0.0  # max err/tol over finite elements (0 for exact passes)
    group_fail: dict[str, int] | None = None  # "batch=0,head=3" -> failing count
    #: when the relative-RMS bound fails: per axis, the worst slices (``{"at", "rel_rms", "over"}``, ``over`` =
    #: the slice's rel-RMS / rho), located even when no single element is out of its envelope
    rms_worst: dict[str, list[dict[str, Any]]] | None = None
    exact: bool = False
    tolerance: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["shape_sim"] = list(self.shape_sim)
        d["shape_golden"] = list(self.shape_golden)
        return _jsonable(d)

    def summary(self) -> str:
        if self.passed:
            if self.exact:
                return f"{self.name} exact ({self.n} elements)"
            return (
                f"{self.name} ok ({self.n} elements); worst err/tol {self.worst_ratio:.3g}; "
                f"max_abs {self.max_abs:.4g}; rel_rms {self.rel_rms:.3g}"
            )
        parts = [f"{self.name} {self.reason}" if self.reason else self.name]
        if self.n_fail and self.reason != "shape mismatch":
            parts = [f"{self.name} {self.n_fail}/{self.n} " + ("differ" if self.exact else "out of tolerance")]
            if self.n_nonfinite:
                parts.append(f"{self.n_nonfinite} non-finite, first {self.first_nonfinite}")
            if self.worst:
                w = self.worst
                parts.append(
                    f"worst {w['at']}{_where(w)} sim={w['sim']:.6g} golden={w['golden']:.6g} err={w['err']:.4g} "
                    f"tol={w['tol']:.4g}"
                )
            if self.first:
                parts.append(f"first {self.first['at']}{_where(self.first)}")
            if self.worst is None and self.reason:
                parts = [f"{self.name}: {self.reason}"]
        if self.rho is not None and not self.exact and self.rel_rms > self.rho:
            if not parts[-1].endswith(f"rel_rms {self.rel_rms:.3g} > {self.rho:.3g}"):
                parts.append(f"rel_rms {self.rel_rms:.3g} > {self.rho:.3g}")
            if not self.n_fail:  # only the aggregate sees it: where the error is
                parts.extend(_rms_worst_text(self.rms_worst))
                if self.worst:
                    w = self.worst
                    parts.append(f"every element within its envelope (largest err/tol {w['ratio']:.3g} at {w['at']})")
        return "; ".join(parts)


def _where(elem: Mapping[str, Any]) -> str:
    """`` at VRAM row R lane L`` when the harness located the element (VRAM readbacks), else ""."""
    return f" at VRAM row {elem['vram_row']} lane {elem['lane']}" if "vram_row" in elem else ""


def _rms_worst_text(worst: Mapping[str, list[dict[str, Any]]] | None) -> list[str]:
    """``worst row: row=77 rel_rms 0.09 (5.8x rho), ...`` per axis of :attr:`CheckResult.rms_worst`."""
    out = []
    for axis, items in (worst or {}).items():
        if items:
            listed = ", ".join(f"{it['at']} rel_rms {it['rel_rms']:.3g} ({it['over']:.3g}x rho)" for it in items)
            out.append(f"worst {axis}: {listed}")
    return out


#: slices named per axis when only the relative-RMS bound fails
RMS_WORST_N = 3


def rms_worst_slices(
    err: npt.NDArray[np.float64], coords: Sequence[str], g_rms: float, rho: float, n: int = RMS_WORST_N
) -> dict[str, list[dict[str, Any]]]:
    """Per axis of ``err`` (``s - g``, finite), the ``n`` indices whose slice has the largest rel-RMS
    ``sqrt(mean(err[slice]^2)) / g_rms``, each with how far it is over ``rho`` (1 = at the bound).  A slice over
    the bound holds the error the aggregate saw; only axes longer than 1 are listed."""
    sq = np.square(err)
    out: dict[str, list[dict[str, Any]]] = {}
    for ax, name in enumerate(coords):
        if err.shape[ax] < 2:
            continue
        other = tuple(i for i in range(err.ndim) if i != ax)
        slice_rel = np.sqrt(sq.mean(axis=other)) / g_rms
        top = np.argsort(-slice_rel, kind="stable")[:n]
        out[name] = [
            {
                "at": f"{name}={int(i)}",
                "index": int(i),
                "rel_rms": float(slice_rel[i]),
                "over": float(slice_rel[i] / rho),
            }
            for i in top
        ]
    return out


def _jsonable(x: Any) -> Any:
    """``x`` with numpy scalars and arrays, tuples and non-finite floats turned into JSON values."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else str(v)
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    return x


def _elem(
    coords: Sequence[str],
    shape: tuple[int, ...],
    flat: int,
    s: npt.NDArray[np.float64],
    g: npt.NDArray[np.float64],
    err: npt.NDArray[np.float64],
    tol: npt.NDArray[np.float64],
) -> dict[str, Any]:
    idx = np.unravel_index(int(flat), shape)
    return {
        "at": fmt_coords(coords, idx),
        "index": [int(i) for i in idx],
        "sim": float(s.flat[flat]),
        "golden": float(g.flat[flat]),
        "err": float(err.flat[flat]),
        "tol": float(tol.flat[flat]),
        "ratio": float(err.flat[flat] / tol.flat[flat])
        if tol.flat[flat] > 0
        else (0.0 if err.flat[flat] == 0 else math.inf),
    }


def _groups(
    coords: Sequence[str], group_by: Sequence[str] | None, shape: tuple[int, ...], fail_mask: npt.NDArray[np.bool_]
) -> dict[str, int] | None:
    if not group_by:
        return None
    axes = [coords.index(a) for a in group_by]
    other = tuple(i for i in range(len(shape)) if i not in axes)
    counts = fail_mask.sum(axis=other) if other else fail_mask.astype(np.int64)
    out = {}
    for idx in np.ndindex(*counts.shape):
        c = int(counts[idx])
        if c:
            out[",".join(f"{a}={i}" for a, i in zip(group_by, idx, strict=True))] = c
    return out


def compare(
    sim: npt.ArrayLike,
    golden: npt.ArrayLike,
    *,
    coords: Sequence[str],
    A: npt.ArrayLike | None = None,
    eps_a: EpsA = 0.0,
    eps_g: float = 0.0,
    rho: float | None = None,
    abs_term: float | None = None,
    exact: bool = False,
    name: str = "output",
    group_by: Sequence[str] | None = None,
    tolerance_name: str = "",
    nonfinite_golden: bool = False,
) -> CheckResult:
    """Judge ``sim`` against ``golden`` per kernels.md §5.1 (see the module docstring).  ``nonfinite_golden``
    (exact checks only): the golden is another run's output (a companion's), which may hold NaN/Inf; the check is
    then bitwise on the bf16 words, non-finite ones included, instead of refusing the golden."""
    s_raw = np.asarray(sim)
    g_raw = np.asarray(golden)
    coords = tuple(coords)
    res = CheckResult(
        name=name,
        passed=False,
        shape_sim=tuple(s_raw.shape),
        shape_golden=tuple(g_raw.shape),
        rho=None if exact else rho,
        exact=exact,
        tolerance=tolerance_name,
    )
    if s_raw.shape != g_raw.shape:
        res.reason = "shape mismatch"
        res.n = int(g_raw.size)
        res.n_fail = int(g_raw.size)
        res.reason = f"shape mismatch: sim {s_raw.shape} vs golden {g_raw.shape}"
        return res
    if len(coords) != g_raw.ndim:
        raise ValueError(f"compare({name}): {len(coords)} coordinate names {coords} for a {g_raw.ndim}-d array")
    res.n = int(g_raw.size)
    shape = g_raw.shape
    integer = g_raw.dtype.kind in "biu"

    if exact:
        if integer:
            if s_raw.dtype.kind not in "biu":
                res.reason = f"exact integer check got a {s_raw.dtype} array"
                res.n_fail = res.n
                return res
            s_key, g_key = s_raw.astype(np.int64), g_raw.astype(np.int64)
            s64, g64 = s_key.astype(np.float64), g_key.astype(np.float64)
        else:
            g64 = g_raw.astype(np.float64)
            if not nonfinite_golden and not np.all(np.isfinite(g64)):
                raise ValueError(f"compare({name}): the golden must be finite")
            if not is_bf16_exact(g64):
                raise ValueError(f"compare({name}): an exact golden must be bf16-representable")
            s64 = s_raw.astype(np.float64)
            s_key, g_key = bf16_encode(s_raw), bf16_encode(g64)
        diff = s_key != g_key
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(s64 - g64)
        err = np.where(np.isnan(err), np.inf, err)
        tol = np.zeros(shape)
        nonfin = ~np.isfinite(s64)
        res.n_nonfinite = int(nonfin.sum())
        if res.n_nonfinite:
            res.first_nonfinite = fmt_coords(coords, np.unravel_index(int(np.flatnonzero(nonfin)[0]), shape))
        res.n_fail = int(diff.sum())
        if res.n_fail:
            flat_first = int(np.flatnonzero(diff)[0])
            res.first = _elem(coords, shape, flat_first, s64, g64, err, tol)
            errd = np.where(diff, err, -1.0)
            res.worst = _elem(coords, shape, int(np.argmax(errd)), s64, g64, err, tol)
            res.worst_ratio = math.inf
            res.reason = "bitwise mismatch"
        fin = np.isfinite(err)
        res.max_abs = float(err[fin].max()) if fin.any() else math.inf
        if res.n:
            res.max_abs_at = fmt_coords(coords, np.unravel_index(int(np.argmax(err)), shape))
        res.group_fail = _groups(coords, group_by, shape, diff)
        res.passed = res.n_fail == 0
        return res

    g = g_raw.astype(np.float64)
    if not np.all(np.isfinite(g)):
        raise ValueError(f"compare({name}): the golden must be finite")
    s = s_raw.astype(np.float64)
    if A is not None:
        Aarr = np.broadcast_to(np.abs(np.asarray(A, dtype=np.float64)), shape)
        tau = TAU_FACTOR * float(Aarr.max()) if Aarr.size else 0.0
        env = np.asarray(eps_a, dtype=np.float64) * Aarr
    else:
        tau = 0.0
        env = np.full(shape, float(abs_term) if abs_term is not None else 0.0)
    tol = np.broadcast_to(env + float(eps_g) * np.abs(g) + tau, shape)
    nonfin = ~np.isfinite(s)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(s - g)
    err = np.where(nonfin, np.inf, err)
    fail = ~(err <= tol)
    res.n_fail = int(fail.sum())
    res.n_nonfinite = int(nonfin.sum())
    if res.n_nonfinite:
        res.first_nonfinite = fmt_coords(coords, np.unravel_index(int(np.flatnonzero(nonfin)[0]), shape))
    if res.n:
        res.max_abs = float(err.max())
        res.max_abs_at = fmt_coords(coords, np.unravel_index(int(np.argmax(err)), shape))
        relmask = np.abs(g) > tau
        if relmask.any():
            rel = np.where(relmask, err / np.where(relmask, np.abs(g), 1.0), -1.0)
            k = int(np.argmax(rel))
            res.max_rel = float(rel.flat[k])
            res.max_rel_at = fmt_coords(coords, np.unravel_index(k, shape))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))
        kw = int(np.argmax(ratio))
        res.worst_ratio = float(ratio.flat[kw])
        res.worst = _elem(coords, shape, kw, s, g, err, tol)
        if res.n_fail:
            res.first = _elem(coords, shape, int(np.flatnonzero(fail)[0]), s, g, err, tol)
        with np.errstate(invalid="ignore", over="ignore"):
            res.rms = float(np.sqrt(np.mean(np.square(s - g)))) if not res.n_nonfinite else math.inf
            gnorm = float(np.sqrt(np.mean(np.square(g))))
        res.rel_rms = (res.rms / gnorm) if gnorm > 0 else 0.0
    res.group_fail = _groups(coords, group_by, shape, fail)
    _verdict(res, s, g, coords, rho)
    return res


def _verdict(
    res: CheckResult, s: npt.NDArray[np.float64], g: npt.NDArray[np.float64], coords: Sequence[str], rho: float | None
) -> None:
    """``res.reason`` and ``res.passed`` from its element failures and the relative-RMS bound (whose failure is
    located: :attr:`CheckResult.rms_worst`)."""
    reasons = []
    if res.n_nonfinite:
        reasons.append(f"{res.n_nonfinite} non-finite")
    if res.n_fail:
        reasons.append(f"{res.n_fail}/{res.n} out of tolerance")
    rms_bad = rho is not None and res.n and float(np.abs(g).max()) > 0 and not (res.rel_rms <= rho)
    if rms_bad:
        reasons.append(f"rel_rms {res.rel_rms:.3g} > {rho:.3g}")
        if not res.n_nonfinite and rho:
            res.rms_worst = rms_worst_slices(s - g, coords, float(np.sqrt(np.mean(np.square(g)))), float(rho))
    res.reason = "; ".join(reasons)
    res.passed = not res.n_fail and not rms_bad
