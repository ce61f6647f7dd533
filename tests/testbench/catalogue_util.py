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


#: issue 21's coverage cases: testbench -> case ids (all REQUIRED_CASES; tests/testbench/test_coverage_cases.py)
COVERAGE = {
    "flashattn_prefill": "P12 P13 P14 P15 P16 P17 P18 P19 P20",
    "flashattn_decode": "D8 D9 D10 D11 D12 D13 D14 D15 D16",
    "flashattn_qkt": "capacity_b2 emu025_per_head hkv4_big_base",
    "rms_norm": "scale_1e-4 scale_64 big_base",
    "layer_norm": "scale_1e-4 scale_64 big_base",
    "gelu": "scale_1e-4 scale_64 big_base",
    "silu": "scale_1e-4 scale_64 big_base",
    "softmax": "L100_scale_1e-4 L100_scale_64 big_base",
    "rope": "d8_nh8 big_base",
    "embedding": "big_base",
    "elementwise_add": "big_base",
    "h_store": "big_base",
    "bmm": "big_base",
    "ffn": "big_base",
    "ffn_intermediate": "big_base",
    "linear": "big_base",
    "linear_loop": "big_base",
    "moe_topk": "A_policy0_T7 A_policy1_T7 B_policy0_T5 B_policy1_T7_big_base",
    "moe_layer": "policy0_T7_i64 policy1_T5_big_base",
}
COVERAGE_CASES = [(tb, cid) for tb, ids in COVERAGE.items() for cid in ids.split()]


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
