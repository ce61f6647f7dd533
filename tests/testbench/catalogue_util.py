"""Shared helpers of the catalogue tests: the testbenches owned here and a deterministic RANGES sampler."""

from __future__ import annotations

import itertools
import random

#: kernels.md §4.4 testbenches other than flash attention
OTHER_TESTBENCHES = (
    "linear",
    "linear_loop",
    "bmm",
    "ffn",
    "ffn_intermediate",
    "gelu",
    "silu",
    "rms_norm",
    "layer_norm",
    "rope",
    "embedding",
    "softmax",
    "elementwise_add",
    "h_store",
    "s_map_v",
    "v_shift_v",
    "loop",
    "moe_topk",
    "decoder_layer",
    "decoder_decode",
    "moe_layer",
)


def range_points(ranges: dict, cap: int, seed: int = 0) -> list[tuple[dict, str]]:
    """Up to ``cap`` points of the RANGES grid (all of it if small), as (overrides, variant)."""
    keys = sorted(ranges)
    values = [list(ranges[k]) for k in keys]
    grid = list(itertools.product(*values))
    if len(grid) > cap:
        grid = random.Random(seed).sample(grid, cap)
    out = []
    for combo in grid:
        ov = dict(zip(keys, combo, strict=True))
        variant = ov.pop("cfg", "default")
        out.append((ov, variant))
    return out
