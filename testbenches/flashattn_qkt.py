"""flashattn_qkt: the QKᵀ stage of flash attention on its own (``attention_scores``, kernels.md §2.11).

Output tile (b, h, i, t) (M×M) at ``s_out + (((b*hq + h)*Tq + i)*Tk + t)*M*M``; rows < br, columns < bc
are compared against ``Q·Kᵀ`` in float64 for every (b, h) (``qkt``: A = |Q|@|K|ᵀ).  The batched path
copies with FP[6] = 1/BMM_SCALE, the per-head path with FP[3] = 1.0.  Same Q staging and K addressing
as flash attention; no scaling, no masking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plena_sim.config import HardwareConfig

from ._flashattn_common import build_scores, resolve_sweep_values
from .harness import Case, CaseSpec
from .shapes import hw

NAME = "flashattn_qkt"
DESCRIPTION = "attention scores Q·Kᵀ per (b, h, q tile, kv tile) (batched M_BTMM/M_BTMV or per-head M_TMM/M_TMV)"
DEFAULTS = {
    "batch": 1,
    "hq": 4,
    "hkv": 1,
    "d": hw(1, "HLEN"),
    "q_len": hw(1, "MLEN"),
    "kv_len": hw(3, "MLEN"),
    "causal": False,
    "kv_layout": "bshd",
    "Wp": None,
    "kv_capacity": None,
    "path": "auto",
    "vram_base_row": 0,
    "scale": 1.0,
    "big_base": False,
    "seed": 0,
}
REQUIRED_CASES = [
    ("prefill_batched", {}, "default"),
    ("prefill_per_head", {"path": "per_head"}, "default"),
    ("decode_batched", {"q_len": 1}, "default"),
    ("decode_per_head", {"q_len": 1, "path": "per_head"}, "default"),
    (
        "gqa_sbhd_batched",
        {"batch": 2, "hq": 8, "hkv": 2, "q_len": hw(1, "MLEN", 36), "kv_len": hw(2, "MLEN", 2), "kv_layout": "sbhd"},
        "default",
    ),
    (
        "gqa_sbhd_per_head",
        {"batch": 2, "hq": 8, "hkv": 2, "q_len": hw(1, "MLEN", 6), "kv_layout": "sbhd", "path": "per_head"},
        "default",
    ),
    (
        "gqa_decode_sbhd",
        {"batch": 2, "hq": 8, "hkv": 2, "q_len": 1, "kv_len": hw(2, "MLEN", 2), "kv_layout": "sbhd"},
        "default",
    ),
    ("wp1024_kv320", {"kv_len": hw(5, "MLEN"), "Wp": hw(16, "MLEN")}, "default"),
    (
        "wp1024_kv320_decode_per_head",
        {"q_len": 1, "kv_len": hw(5, "MLEN"), "Wp": hw(16, "MLEN"), "path": "per_head"},
        "default",
    ),
    ("d64_per_head", {"d": hw(1, "MLEN")}, "default"),
    ("emu025", {}, "emu025"),
    ("small", {"hq": 2, "q_len": 40, "kv_len": 70}, "small"),
    # issue 21: a batch-2 bshd cache with kv_capacity > kv_len, per-head scores under BMM_SCALE != 1, hkv 4,
    # and the scores region past VRAM element 2^18 with bit 11 set
    ("capacity_b2", {"batch": 2, "kv_len": hw(2, "MLEN", 3), "kv_capacity": hw(3, "MLEN")}, "default"),
    ("emu025_per_head", {"path": "per_head", "q_len": hw(1, "MLEN", -3)}, "emu025"),
    ("hkv4_big_base", {"hq": 16, "hkv": 4, "kv_len": hw(1, "MLEN", 3), "big_base": True}, "default"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {
    "batch": [1, 2, 3],
    "hq": [1, 2, 4, 8],
    "hkv": [1, 2, 4],
    "d": [16, 32, 64],
    "q_len": [1, 40, 64, 100],
    "kv_len": [1, 64, 130, 192, 320],
    "kv_layout": ["bshd", "sbhd"],
    "Wp": ["hkv*d", "M", 1024],
    "path": ["auto", "batched", "per_head"],
    "cfg": ["default", "emu025", "small"],
}


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = dict(DEFAULTS, **params)
    resolve_sweep_values(p, config)
    return build_scores(NAME, p, config)
