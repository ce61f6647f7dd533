"""decoder_layer: one pre-norm transformer decoder layer, prefill (programs/model/decoder.py).

RMSNorm -> Q, K, V projections -> RoPE on Q and K -> causal GQA flash attention (Q, K, V through HBM: K/V written
to the layer's KV cache) -> O projection -> + x -> RMSNorm -> SwiGLU FFN (with ``experts``/``top_k``: the
routed-MoE FFN) -> + h1, for ``batch`` sequences of ``seq`` tokens at positions ``pos0 ..``. Every stage is judged
on its own inputs with its own tolerance row; ``output_f64`` bounds the whole layer against float64 (see
``_decoder_common``).

``chunk``: tokens of a sequence per pass (chunked prefill, :mod:`programs.model.chunking`): ``None`` derives it
(the whole sequence when it fits VRAM, else the largest multiple of MLEN that fits), ``0`` never chunks, a
multiple of MLEN chunks by it. A chunked layer stores every chunk's output rows to HBM ``out``: the first check
(``output``) judges every token of it against the float64 layer (the ``layer_f64`` row, no ``output_f64``), the
stage checks judge the last chunk (what VRAM holds at the end), with ``ffn_residual`` (exact) and ``out_store``
(exact: the MX store of its rows). ``build_layout`` gives the same program and HBM layout without values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig

from ._decoder_common import DIMS, build_layer, build_layer_layout
from .harness import Case, CaseSpec
from .shapes import hw

NAME = "decoder_layer"
DESCRIPTION = "decoder layer prefill: norm, QKV, RoPE, causal GQA flash attention, O proj, SwiGLU FFN, residuals"
DEFAULTS: dict[str, Any] = {
    "batch": 1,
    "seq": hw(1, "MLEN"),
    "pos0": 0,
    "chunk": None,
    **DIMS,
    "loops": True,
    "scale": 1.0,
    "seed": 0,
}
REQUIRED_CASES: list[CaseSpec] = [
    ("default", {}, "default"),
    ("batch2_tail", {"batch": 2, "seq": hw(1, "MLEN", div=2, plus=3)}, "default"),
    ("kv_pad", {"heads": 2, "kv_heads": 1, "hidden": hw(1, "MLEN"), "ffn": hw(2, "MLEN")}, "default"),
    # a routed-MoE FFN (V_TOPK policy 0): every (token, rank) is a one-row expert FFN, so few tokens
    ("moe_e32_k4", {"experts": 32, "top_k": 4, "seq": 5, "ffn": hw(1, "MLEN")}, "default"),
    # chunked prefill: chunks of MLEN tokens (the last one 5), every token's output judged from HBM
    ("chunked", {"seq": hw(2, "MLEN", plus=5), "chunk": hw(1, "MLEN")}, "default"),
]
#: larger cases (tests/testbench/test_model_layers.py runs them under -m slow)
STRETCH_CASES: list[CaseSpec] = []
SLOW_CASES: list[CaseSpec] = [
    ("long", {"seq": hw(4, "MLEN", plus=9), "pos0": 100}, "default"),
    (
        "wide",
        {"hidden": hw(4, "MLEN"), "heads": 8, "kv_heads": 2, "ffn": hw(8, "MLEN"), "seq": hw(2, "MLEN")},
        "default",
    ),
    ("d_mlen", {"heads": 2, "kv_heads": 1, "head_dim": hw(1, "MLEN")}, "default"),
    # 130 tokens of k=8: the routing runs in two chunks (FP SRAM holds 126 tokens' weights)
    ("moe_two_chunks", {"experts": 128, "top_k": 8, "batch": 2, "seq": 65, "ffn": hw(1, "MLEN")}, "default"),
]
RANGES = {
    "batch": [1, 2],
    "seq": [1, 17, hw(1, "MLEN"), hw(2, "MLEN", plus=5)],
    "heads": [2, 4],
    "kv_heads": [1, 2],
}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    return build_layer(NAME, dict(DEFAULTS, **params), config, decode=False)


def build_layout(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    """:func:`build`'s program and HBM layout, no input values, goldens or checks (a layout-only case)."""
    return build_layer_layout(NAME, dict(DEFAULTS, **params), config, decode=False)
