"""The compiled code's read of the stop flag of :mod:`plena_sim.limits.stop` (one job: :func:`stop_requested`).

The kernel writes the flag's first byte while a compiled loop runs (a signal arrives), so the loop must read it
from memory on every check: a plain load of a byte the loop never writes may be hoisted out of the loop by the
compiler, an atomic (monotonic) load may not. One such load costs about a nanosecond.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir  # type: ignore[import-untyped]
from numba import types
from numba.extending import intrinsic

__all__ = ["stop_requested"]


def _stop_requested(typingctx, flag):
    """``flag[0] != 0`` for a uint8 array ``flag`` (callable from ``@njit`` code only)."""
    sig = types.boolean(flag)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        byte = builder.load_atomic(ary.data, "monotonic", 1)
        return builder.icmp_unsigned("!=", byte, ir.Constant(byte.type, 0))

    return sig, codegen


#: the intrinsic, typed as what compiled code calls (``stop_requested(flag) -> bool``)
stop_requested = cast("Callable[[Any], bool]", intrinsic(_stop_requested))
