"""Direct-emit testbenches (kernels.md §4): one module per testbench, imported lazily by name.

``names()`` lists every registered testbench; ``get(name)`` imports its module.  To add a testbench,
add its module name to :data:`TESTBENCHES` (engineers owning other kernels add theirs here).  The
harness API is documented in :mod:`testbenches.harness`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["TESTBENCHES", "names", "get"]

#: testbench name -> module (relative to this package)
TESTBENCHES: dict[str, str] = {
    # flash attention (kernels.md §3, §4.5)
    "flashattn_prefill": "flashattn_prefill",
    "flashattn_decode": "flashattn_decode",
    "flashattn_qkt": "flashattn_qkt",
    # other kernels (kernels.md §4.4)
    "linear": "linear",
    "linear_loop": "linear_loop",
    "bmm": "bmm",
    "ffn": "ffn",
    "ffn_intermediate": "ffn_intermediate",
    "gelu": "gelu",
    "silu": "silu",
    "rms_norm": "rms_norm",
    "layer_norm": "layer_norm",
    "rope": "rope",
    "embedding": "embedding",
    "softmax": "softmax",
    "elementwise_add": "elementwise_add",
    "h_store": "h_store",
    "s_map_v": "s_map_v",
    "v_shift_v": "v_shift_v",
    "loop": "loop",
    "moe_topk": "moe_topk",
    # model layers (issue 15)
    "decoder_layer": "decoder_layer",
    "decoder_decode": "decoder_decode",
    "moe_layer": "moe_layer",
}


def names() -> tuple[str, ...]:
    return tuple(TESTBENCHES)


def get(name: str) -> ModuleType:
    """Import and return the testbench module ``name`` (KeyError if it is not registered)."""
    if name not in TESTBENCHES:
        raise KeyError(f"unknown testbench {name!r} (known: {', '.join(TESTBENCHES)})")
    return importlib.import_module(f"{__name__}.{TESTBENCHES[name]}")
