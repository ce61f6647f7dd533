"""flashattn_prefill: flash attention with ``q_len > 1`` (kernels.md §3, §4.4, §4.5 cases P1-P11).

Checks: O ``[batch, q_len, hq, d]`` against the float64 golden of §3.1 (``flash``: A = p@|V|, score-aware
eps_a with smax_r), and the FP state m and l of the last processed (b, g, i, head batch) block
(``flash_m``, ``flash_l``).  Parameters: ``batch, hq, hkv, d, q_len, kv_len, causal, kv_layout``
(``bshd``/``sbhd``), ``Wp`` (None = ``hkv*d``, the unpadded cache), ``kv_capacity`` (None = kv_len),
``path`` (``auto``/``batched``/``per_head``), ``vram_base_row`` (first VRAM row of O; scratch follows),
``scale`` (input N(0,1) scale), ``seed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig
from programs import flash as _fa

from ._flashattn_common import build_flash, build_flash_layout, resolve_sweep_values
from .harness import Case
from .shapes import hw

NAME = "flashattn_prefill"
DESCRIPTION = "flash attention prefill (online softmax over kv tiles, causal/tail masks, GQA, bshd/sbhd)"
DEFAULTS = {
    "batch": 1,
    "hq": 4,
    "hkv": 1,
    "d": hw(1, "HLEN"),
    "q_len": hw(2, "MLEN"),
    "kv_len": hw(4, "MLEN"),
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
#: issue 21 cases: bshd/sbhd caches with kv_capacity > kv_len and batch 2 (P12 also padded, Wp = M),
#: BMM_SCALE != 1 on the per-head path (P14), hkv 4 and 8 with ratio 4 (P15, P16; P15 causal with offset 0),
#: per-head ratio 3 with q_len = M+1 (P17), q_len % BLEN != 0 on both paths (P12, P14, P16), input scales
#: 1e-4 and 2 (P18, P19; flash_l fails past 2, §5.2 calibrates it at 1), VRAM bases past 2^18 with bit 11 set (P20)
COVERAGE_CASES = [
    (
        "P12",
        {
            "batch": 2,
            "q_len": hw(1, "MLEN", 5),
            "kv_len": hw(2, "MLEN", 8),
            "kv_capacity": hw(3, "MLEN", 4),
            "Wp": hw(1, "MLEN"),
        },
        "default",
    ),
    (
        "P13",
        {
            "batch": 2,
            "hq": 8,
            "hkv": 2,
            "q_len": hw(1, "MLEN"),
            "kv_len": hw(2, "MLEN", 10),
            "kv_capacity": hw(3, "MLEN"),
            "kv_layout": "sbhd",
        },
        "default",
    ),
    ("P14", {"d": hw(1, "MLEN"), "q_len": hw(1, "MLEN", 5), "kv_len": hw(2, "MLEN")}, "emu025"),
    ("P15", {"hq": 16, "hkv": 4, "q_len": hw(1, "MLEN", 3), "kv_len": hw(1, "MLEN", 3)}, "default"),
    ("P16", {"hq": 32, "hkv": 8, "q_len": hw(1, "MLEN", -3), "kv_len": hw(1, "MLEN", 20), "causal": False}, "default"),
    (
        "P17",
        {
            "hq": 6,
            "hkv": 2,
            "d": hw(2, "HLEN"),
            "q_len": hw(1, "MLEN", 1),
            "kv_len": hw(2, "MLEN", 10),
            "path": "per_head",
        },
        "default",
    ),
    ("P18", {"q_len": hw(1, "MLEN"), "kv_len": hw(2, "MLEN", 8), "scale": 1e-4}, "default"),
    ("P19", {"q_len": hw(1, "MLEN"), "kv_len": hw(2, "MLEN", 8), "scale": 2.0}, "default"),
    ("P20", {"q_len": hw(1, "MLEN"), "kv_len": hw(2, "MLEN", 8), "big_base": True}, "default"),
]
REQUIRED_CASES = [
    ("P1", {}, "default"),
    ("P2", {"q_len": hw(1, "MLEN"), "kv_len": hw(3, "MLEN", 8), "causal": False, "Wp": hw(1, "MLEN")}, "default"),
    (
        "P3",
        {"batch": 2, "hq": 8, "hkv": 2, "q_len": hw(1, "MLEN", 36), "kv_len": hw(4, "MLEN", 44), "kv_layout": "sbhd"},
        "default",
    ),
    ("P4", {"hq": 4, "hkv": 1, "d": hw(1, "MLEN"), "q_len": hw(2, "MLEN"), "kv_len": hw(3, "MLEN")}, "default"),
    ("P5", {"hq": 6, "hkv": 2, "d": hw(1, "HLEN")}, "default"),
    (
        "P6",
        {"hq": 4, "hkv": 2, "d": hw(2, "HLEN"), "q_len": hw(1, "MLEN"), "kv_len": hw(2, "MLEN", 2), "path": "per_head"},
        "default",
    ),
    ("P7", {}, "emu025"),
    ("P8", {"q_len": hw(1, "MLEN"), "kv_len": hw(5, "MLEN"), "Wp": hw(16, "MLEN")}, "default"),
    ("P9", {"hq": 2, "hkv": 1, "q_len": 70, "kv_len": 100}, "small"),
    ("P10", {"vram_base_row": 4160}, "default"),  # O at element 266240, scratch past it: > 2^18
    # issue 21: the coverage holes held-out codegen bugs slipped through (kernels.md §4.5 lists P1-P11)
    *COVERAGE_CASES,
    # issue 29: split-KV (>= 2 chunks, merges): causal over 81 tiles (6 chunks), non-causal per-head over 64 tiles,
    # causal with the causal edge one tile past a chunk start (kv_chunk_tiles=3: levels 2)
    ("LC1", {"batch": 1, "q_len": 64, "kv_len": hw(80, "MLEN", 7)}, "default"),
    (
        "LC2",
        {
            "hq": 2,
            "hkv": 1,
            "d": hw(2, "HLEN"),
            "q_len": hw(1, "MLEN", -3),
            "kv_len": hw(64, "MLEN"),
            "causal": False,
            "path": "per_head",
        },
        "default",
    ),
    ("LC3", {"batch": 1, "q_len": hw(2, "MLEN"), "kv_len": hw(11, "MLEN", 5), "kv_chunk_tiles": 3}, "default"),
]
STRETCH_CASES = [
    (
        "P11",
        {
            "hq": 2,
            "hkv": 2,
            "d": hw(2, "MLEN"),
            "q_len": hw(1, "MLEN", 6),
            "kv_len": hw(2, "MLEN", 2),
            "Wp": hw(4, "MLEN"),
        },
        "default",
    ),
]
#: issue 29: long contexts, run under ``-m slow`` on the reference machine and v80-128x64
#: (tests/testbench/test_long_context.py)
SLOW_CASES = [
    ("L32k", {"batch": 1, "q_len": 64, "kv_len": 32768, "causal": True}, "default"),
    ("L32k_noncausal", {"batch": 1, "q_len": 64, "kv_len": 32768, "causal": False}, "default"),
    (
        "L32k_per_head",
        {"batch": 1, "hq": 4, "hkv": 2, "d": hw(2, "HLEN"), "q_len": 64, "kv_len": 32768, "path": "per_head"},
        "default",
    ),
    (
        "L32k_per_head_noncausal",
        {
            "batch": 1,
            "hq": 4,
            "hkv": 2,
            "d": hw(2, "HLEN"),
            "q_len": 64,
            "kv_len": 32768,
            "causal": False,
            "path": "per_head",
        },
        "default",
    ),
]
#: the paper-scale machine (preset ``analytic``): run under ``-m slow`` and by ``plena-sim bench``
PAPER_CASES = [
    ("paper", {"batch": 1, "q_len": 2048, "kv_len": 2048, "hq": 16, "hkv": 4, "d": 128, "causal": True}, "analytic"),
]
SUPPORTED = _fa.SUPPORTS_HEAD_DIM_CHUNKS
SKIP_REASON = None if SUPPORTED else "head_dim=128 > MLEN=64 requires head-dim chunking (not implemented)"
#: kernels.md §4.5 supported ranges (the sweep draws from these; Wp "hkv*d" = unpadded, "M" = MLEN)
RANGES = {
    "batch": [1, 2, 3, 4],
    "hq": [1, 2, 4, 6, 8, 12, 16],
    "hkv": [1, 2, 4, 8, 16],  # must divide hq
    "d": [16, 32, 64],  # cfg small: 16, 32 (64 only with head-dim chunks)
    "q_len": [2, 17, 64, 65, 100, 129, 256, 300],
    "kv_len": [2, 64, 100, 130, 200, 300, 320, 1024, 4160],  # >= q_len when causal
    "causal": [True, False],
    "kv_layout": ["bshd", "sbhd"],
    "Wp": ["hkv*d", "M", 1024],  # restricted to Wp >= hkv*d
    "path": ["auto", "batched", "per_head"],  # batched only where legal
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
