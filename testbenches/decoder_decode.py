"""decoder_decode: one decode step of a decoder layer (programs/model/decoder.py).

One new token per sequence (``batch`` of them) at position ``kv`` against a KV cache of ``kv`` positions
already in HBM (``sbhd``); the layer appends its K/V at position ``kv`` and attends over ``kv + 1`` keys.
Stages and checks as ``decoder_layer`` (a MoE layer with ``experts``/``top_k``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig

from ._decoder_common import DIMS, build_layer, build_layer_layout
from .harness import Case, CaseSpec
from .shapes import hw

NAME = "decoder_decode"
DESCRIPTION = "decoder layer decode step: one token per sequence, K/V appended to an HBM cache, attention over kv+1"
DEFAULTS: dict[str, Any] = {
    "batch": 2,
    "kv": hw(2, "MLEN", plus=5),
    **DIMS,
    "loops": True,
    "linear_path": "auto",
    "scale": 1.0,
    "seed": 0,
}
REQUIRED_CASES: list[CaseSpec] = [
    ("default", {}, "default"),
    ("batch1_tile_edge", {"batch": 1, "kv": hw(1, "MLEN", plus=-1)}, "default"),
    ("kv_pad", {"batch": 3, "heads": 2, "kv_heads": 1, "hidden": hw(1, "MLEN"), "ffn": hw(2, "MLEN")}, "default"),
    # a routed-MoE FFN (V_TOPK policy 1: E = 128 > VLEN on most machines, so the topk stages the logits)
    ("moe_e128_k8", {"batch": 1, "experts": 128, "top_k": 8, "ffn": hw(1, "MLEN")}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
SLOW_CASES: list[CaseSpec] = [
    ("long_kv", {"batch": 1, "kv": hw(32, "MLEN", plus=3)}, "default"),
    ("batch4", {"batch": 4, "kv": hw(4, "MLEN")}, "default"),
]
RANGES = {"batch": [1, 2, 3], "kv": [1, hw(1, "MLEN"), hw(3, "MLEN", plus=1)], "kv_heads": [1, 2]}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    return build_layer(NAME, dict(DEFAULTS, **params), config, decode=True)


def build_layout(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    """:func:`build`'s program and HBM layout, no input values, goldens or checks (a layout-only case)."""
    return build_layer_layout(NAME, dict(DEFAULTS, **params), config, decode=True)
