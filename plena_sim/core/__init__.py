"""The Numba execution core: one ``@njit`` run loop over the decoded program and the state arrays.

One job: execute PLENA instructions exactly as ``shared/spec/isa.md`` / ``memory.md`` define them, fast,
with the cycle accounting of ``timing.md`` and an optional trace ring, all inside the run loop.

Files mirror the units: :mod:`.loop` (fetch -> static fault -> dispatch -> account -> trace -> retire),
:mod:`.scalar`, :mod:`.vector`, :mod:`.matrix`, :mod:`.dma`, :mod:`.control`; :mod:`.static` derives the
dispatch codes and static checks from the opcode table; :mod:`.account` charges cycles and writes the
trace; :mod:`.common` holds the shared numerics; :mod:`.slots` names every array slot; :mod:`.host` is
the Python side (:func:`execute`, :func:`warm_up`); :mod:`.jit_cache` drops cached code whose sources
changed (Numba itself only checks a function's own file).

Design: the run loop takes the state as a few typed tuples of numpy arrays (one compiled
specialisation), never allocates per instruction and never calls back into Python; growing the loop
stack or the HBM page pool is requested by returning a status before the instruction changes
anything, and the host re-enters the loop. Faults are precise (isa.md §8 order IL -> CF -> LP -> AL
-> BD); the static ones are found once per pc before the run. Numerics: dot products in float64,
sequential ascending from +0.0 (no ``fastmath``: LLVM neither contracts nor reassociates); vector and
scalar FP in float32; exp in float64 of the clamped argument; bf16 RNE on every VRAM / FP write;
``error_model="numpy"`` gives IEEE division by zero. When both operands are NaN the result is the first
operand's NaN, quieted (the sign of a NaN is architectural state).
"""

from __future__ import annotations

from .jit_cache import invalidate_if_changed, is_warm

invalidate_if_changed()  # before any compiled function is loaded from the cache

from .host import COUNTER_NAMES, execute, jit_seconds, warm_up  # noqa: E402 - after the cache check

__all__ = ["execute", "warm_up", "jit_seconds", "is_warm", "COUNTER_NAMES"]
