"""flashattn_decode: flash attention with ``q_len == 1`` (kernels.md §3.8, §4.4, §4.5 cases D1-D7).

Decode forms: M_BTMV (batched, head slot j's score row at ``S + j*V``) or M_TMV with row blocks
(per-head), and element-granular M_MV for P@V.  Checks as ``flashattn_prefill`` (O, m, l).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig

from ._flashattn_common import build_flash, build_flash_layout, resolve_sweep_values
from .harness import Case, CaseSpec
from .shapes import hw

NAME = "flashattn_decode"
DESCRIPTION = "flash attention decode (q_len 1: M_BTMV/M_TMV scores, M_MV P@V, tail masks)"
DEFAULTS = {
    "batch": 2,
    "hq": 4,
    "hkv": 1,
    "d": hw(1, "HLEN"),
    "q_len": 1,
    "kv_len": hw(4, "MLEN", 44),
    "causal": True,
    "kv_layout": "bshd",
    "Wp": None,
    "kv_capacity": None,
    "path": "auto",
    "vram_base_row": 0,
    "scale": 1.0,
    "big_base": False,
    "kv_chunk_tiles": None,  # split-KV chunk length in kv tiles (None: from the datapath format, 0: off)
    "seed": 0,
}
#: issue 21 cases: batch-2 bshd/sbhd caches with kv_capacity > kv_len (D8 also padded, Wp = M), BMM_SCALE != 1
#: on the per-head path (D10 d = M, D13 d < V with ratio 3), hkv 4 and 8 with ratio 4 (D11, D12), input scales
#: 1e-4 and 2 (D14, D15), VRAM bases past 2^18 with bit 11 set (D16)
COVERAGE_CASES = [
    ("D8", {"kv_capacity": hw(5, "MLEN", 47), "Wp": hw(1, "MLEN")}, "default"),
    ("D9", {"hq": 8, "hkv": 2, "kv_layout": "sbhd", "kv_capacity": hw(5, "MLEN", 44)}, "default"),
    ("D10", {"d": hw(1, "MLEN")}, "emu025"),
    ("D11", {"hq": 16, "hkv": 4, "kv_len": hw(2, "MLEN", 5)}, "default"),
    ("D12", {"hq": 32, "hkv": 8, "kv_len": hw(1, "MLEN", 3), "kv_layout": "sbhd"}, "default"),
    ("D13", {"hq": 6, "hkv": 2, "d": hw(2, "HLEN"), "kv_len": hw(2, "MLEN", 5), "path": "per_head"}, "emu025"),
    ("D14", {"scale": 1e-4}, "default"),
    ("D15", {"scale": 2.0}, "default"),
    ("D16", {"big_base": True}, "default"),
]
REQUIRED_CASES = [
    ("D1", {}, "default"),
    ("D2", {"hq": 4, "hkv": 1, "d": hw(1, "MLEN")}, "default"),
    ("D3", {"batch": 2, "hq": 8, "hkv": 2, "kv_layout": "sbhd"}, "default"),
    ("D4", {"batch": 1, "kv_len": hw(64, "MLEN", 54), "Wp": hw(1, "MLEN")}, "default"),
    ("D5", {}, "emu025"),
    ("D6", {"hq": 2, "hkv": 2, "d": hw(1, "HLEN"), "path": "per_head"}, "default"),
    ("D7", {"causal": False}, "default"),
    # issue 21: the coverage holes held-out codegen bugs slipped through (kernels.md §4.5 lists D1-D7)
    *COVERAGE_CASES,
    # issue 29: split-KV (>= 2 chunks, merges): 97 tiles (7 chunks) batched; 72 tiles per head, 2 groups of
    # chunks (levels 2) with kv_chunk_tiles=4; a 2-tile cache split in chunks of 2 tiles x 1
    ("LC1", {"batch": 1, "kv_len": hw(96, "MLEN", 5)}, "default"),
    (
        "LC2",
        {"batch": 1, "hq": 4, "hkv": 2, "d": hw(2, "HLEN"), "kv_len": hw(72, "MLEN"), "path": "per_head"},
        "default",
    ),
    ("LC3", {"batch": 2, "hq": 4, "hkv": 2, "kv_len": hw(40, "MLEN", 9), "kv_chunk_tiles": 4}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
#: issue 29: long contexts, run under ``-m slow`` on the reference machine and v80-128x64
#: (tests/testbench/test_long_context.py)
SLOW_CASES = [
    ("L32k", {"batch": 1, "kv_len": 32768}, "default"),
    ("L128k", {"batch": 1, "kv_len": 131072}, "default"),
    (
        "L32k_per_head",
        {"batch": 1, "hq": 4, "hkv": 2, "d": hw(2, "HLEN"), "kv_len": 32768, "path": "per_head"},
        "default",
    ),
]
#: the paper-scale machine (preset ``analytic``): run under ``-m slow`` and by ``plena-sim bench``
PAPER_CASES = [
    ("paper", {"batch": 1, "q_len": 1, "kv_len": 8192, "hq": 16, "hkv": 4, "d": 128, "causal": True}, "analytic"),
]
RANGES = {
    "batch": [1, 2, 3, 4],
    "hq": [1, 2, 4, 6, 8, 12, 16],
    "hkv": [1, 2, 4, 8, 16],
    "d": [16, 32, 64],
    "q_len": [1],
    "kv_len": [1, 2, 63, 64, 65, 300, 1024, 4150, 4160],
    "causal": [True, False],
    "kv_layout": ["bshd", "sbhd"],
    "Wp": ["hkv*d", "M", 1024],
    "path": ["auto", "batched", "per_head"],
    "kv_capacity": [None, "kv_len+M"],  # None = kv_len
    "scale": [1e-4, 1e-2, 1.0, 2.0],  # flash_l is calibrated up to input scale 2 (§5.2)
    "cfg": ["default", "emu025", "small"],
}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = dict(DEFAULTS, **params)
    resolve_sweep_values(p, config)
    return build_flash(NAME, p, config)


def build_layout(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    """:func:`build`'s program and HBM layout without inputs (a timing-only run, issue 30)."""
    p = dict(DEFAULTS, **params)
    resolve_sweep_values(p, config)
    return build_flash_layout(NAME, p, config)
