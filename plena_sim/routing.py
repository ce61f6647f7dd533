"""Routing policies of a timing-only run: which experts a V_TOPK selects when the logits are not computed.

One job: the policy as data (:class:`Routing`), its selections in plain Python (:meth:`Routing.experts`, what
the reference interpreter uses) and as the int64 array the Numba core reads (:meth:`Routing.to_array`, with
:func:`plena_sim.core.vector.routed_expert` computing the same selections).

A timing-only run skips the datapath, so V_TOPK has no logits to rank. Without a policy the INT SRAM words it
writes are *data-derived*: an instruction whose address, loop count or control value comes from them ends in the
typed fault TO-DATA. With a policy, the ``j``-th V_TOPK of the run (``j`` counted from 0 over the run, across
resumed calls) writes the K expert indices of the policy for ``j`` (E experts, K selections: the instruction's
V_TOPK policy) and those words are ordinary integers. The FP SRAM weights stay unwritten (data). Policies:

* ``uniform``: K distinct experts drawn uniformly at random per call, a partial Fisher-Yates shuffle of
  ``0..E-1`` driven by SplitMix64 (``seed``; deterministic, the same in both backends);
* ``round-robin``: ``(j*K + k) mod E`` for ``k = 0..K-1``: every expert in turn, perfectly balanced;
* a file: one row of K distinct expert indices per call (row ``j mod rows``), e.g. a routing trace of a real model
  (:func:`load_routing`: a text file with one row per line, ids separated by spaces or commas, ``#`` comments; or a
  JSON list of lists).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Routing", "POLICIES", "ROUTE_NONE", "ROUTE_UNIFORM", "ROUTE_ROUND_ROBIN", "ROUTE_TABLE", "load_routing"]

#: policy codes of :meth:`Routing.to_array` (slot 0)
ROUTE_NONE, ROUTE_UNIFORM, ROUTE_ROUND_ROBIN, ROUTE_TABLE = range(4)
POLICIES = ("uniform", "round-robin")
#: the array header: (policy code, seed, rows, columns), then the table row-major
ROUTE_HEADER = 4
_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def splitmix64(x: int) -> tuple[int, int]:
    """(next state, output) of SplitMix64 from state ``x`` (all mod 2^64)."""
    x = (x + _GOLDEN) & _M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return x, z ^ (z >> 31)


@dataclass(frozen=True)
class Routing:
    """A routing policy (``policy`` in :data:`POLICIES` or ``"file"``; ``table`` the file's rows)."""

    policy: str
    seed: int = 0
    table: tuple[tuple[int, ...], ...] = field(default=())
    source: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.seed < 1 << 63:
            raise ValueError(f"routing seed {self.seed} must be in [0, 2^63)")
        if self.policy not in (*POLICIES, "file"):
            raise ValueError(f"routing policy {self.policy!r} is not one of {', '.join(POLICIES)} or a file")
        if self.policy == "file":
            if not self.table or any(len(r) != len(self.table[0]) for r in self.table):
                raise ValueError(f"routing file {self.source}: needs rows of equal length (one per V_TOPK)")
            for i, row in enumerate(self.table):
                if len(set(row)) != len(row) or min(row) < 0:
                    raise ValueError(f"routing file {self.source}: row {i + 1} {list(row)} must be distinct ids >= 0")

    @property
    def label(self) -> str:
        """How outputs state the assumption: ``uniform (seed 0)``, ``round-robin``, ``file NAME (N rows)``."""
        if self.policy == "uniform":
            return f"uniform (seed {self.seed})"
        if self.policy == "file":
            return f"file {self.source} ({len(self.table)} rows)"
        return self.policy

    def check_policy(self, experts: int, select: int) -> None:
        """A file's rows must fit a V_TOPK policy the program uses (K ids, each < E): ValueError otherwise."""
        if self.policy != "file":
            return
        if len(self.table[0]) != select or max(max(r) for r in self.table) >= experts:
            raise ValueError(
                f"routing file {self.source}: rows of {len(self.table[0])} ids up to "
                f"{max(max(r) for r in self.table)} do not fit the program's V_TOPK (K={select} of E={experts})"
            )

    def experts(self, j: int, experts: int, select: int) -> list[int]:
        """The K expert indices the ``j``-th V_TOPK of a run selects (E = ``experts``, K = ``select``)."""
        if self.policy == "round-robin":
            return [(j * select + k) % experts for k in range(select)]
        if self.policy == "file":
            return [int(x) for x in self.table[j % len(self.table)][:select]]
        perm = list(range(experts))
        x = (self.seed * _GOLDEN + j) & _M64
        for k in range(select):
            x, r = splitmix64(x)
            i = k + r % (experts - k)
            perm[k], perm[i] = perm[i], perm[k]
        return perm[:select]

    def to_array(self) -> np.ndarray:
        """The int64 array the Numba core reads: header (code, seed, rows, columns), then the table."""
        code = {"uniform": ROUTE_UNIFORM, "round-robin": ROUTE_ROUND_ROBIN, "file": ROUTE_TABLE}[self.policy]
        rows, cols = len(self.table), len(self.table[0]) if self.table else 0
        out = np.zeros(ROUTE_HEADER + rows * cols, dtype=np.int64)
        out[:ROUTE_HEADER] = (code, self.seed, rows, cols)
        if rows:
            out[ROUTE_HEADER:] = np.asarray(self.table, dtype=np.int64).ravel()
        return out


def no_routing_array() -> np.ndarray:
    """The core's array when no policy is given (V_TOPK results are data-derived)."""
    out = np.zeros(ROUTE_HEADER, dtype=np.int64)
    out[0] = ROUTE_NONE
    return out


def load_routing(spec: str, seed: int = 0) -> Routing:
    """``uniform`` / ``round-robin`` (with ``seed``) or a file path (text rows or a JSON list of lists); a
    ValueError names what is wrong."""
    if spec in POLICIES:
        return Routing(spec, seed=seed)
    path = Path(spec)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"routing {spec!r} is neither a policy ({', '.join(POLICIES)}) nor a readable file: {exc}"
        ) from None
    try:
        if text.lstrip().startswith("["):
            rows = [tuple(int(x) for x in row) for row in json.loads(text)]
        else:
            lines = (ln.split("#", 1)[0].replace(",", " ").split() for ln in text.splitlines())
            rows = [tuple(int(x) for x in ln) for ln in lines if ln]
    except (ValueError, TypeError) as exc:
        raise ValueError(f"routing file {spec}: not rows of integer expert ids ({exc})") from None
    return Routing("file", seed=seed, table=tuple(rows), source=path.name)
