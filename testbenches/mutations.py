"""The oracle's teeth (kernels.md §6): every codegen mutation and the cases that must expose it.

One table, used by the teeth tests and by ``plena-sim mutants``. A mutation is a fault hook of
:mod:`programs.mutation_hooks`; enabling it must make EACH listed case fail -- through a check failure
(``mismatch``), a simulator fault (``fault``), an assembler/Asm error (``assembler``) or a plan
``ValueError`` (``plan``). :func:`run_mutation` runs one (hook, case) pair and says how it was caught.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from programs import mutation_hooks

from . import get as _get
from .harness import Report, run_case
from .shapes import hw

__all__ = ["Exposure", "MUTATIONS", "DESCRIPTIONS", "exposures", "run_mutation", "how_caught", "ci_subset"]


@dataclass(frozen=True)
class Exposure:
    """One exposing case: a testbench, a required case id (or "custom" with overrides) and a variant."""

    testbench: str
    case_id: str
    overrides: Mapping[str, Any]
    variant: str

    @property
    def label(self) -> str:
        ov = (
            ""
            if not self.overrides or self.case_id != "custom"
            else " " + ",".join(f"{k}={v}" for k, v in self.overrides.items())
        )
        return f"{self.testbench}[{self.case_id}]{ov}" + (f"@{self.variant}" if self.variant != "default" else "")


def _fa(ids: str) -> list[tuple[str, str]]:
    """Flash-attention case ids -> (testbench, case id): P* prefill, D* decode."""
    return [("flashattn_prefill" if c.startswith("P") else "flashattn_decode", c) for c in ids.split()]


# kernels.md §6.2 (flash attention): hook -> (description, exposing case ids)
_FLASH: dict[str, tuple[str, str]] = {
    "kv_tile_offset_ignored": ("K/V source omits t*M*R (the seed's bug)", "P1 P2 P3 D1 D4"),
    "state_reset_per_tile": ("m and l reset inside the kv loop", "P1 P3 D1"),
    "normalize_per_tile": ("O *= 1/l applied every tile", "P1 D1"),
    "normalize_mask_stale": ("normalize keeps the last O update's V_MASK", "P1 P6 D1"),
    "pv_v_step_blen": ("M_MM V pointer +B (element-granular)", "P1"),
    "mv_v_step_row": ("decode M_MV V pointer +B*M", "D1 D2"),
    "tile_step_not_batch_aware": ("tile step t*M*Wp instead of t*M*R", "P3 D3"),
    "batch_base_missing": ("base_b = 0", "P3 D1"),
    "contiguous_kv_prefetch": ("rstride=0 although R != M", "P1 P8 D1"),
    "raw_large_immediate": ("load_imm values emitted as one S_ADDI_INT even when >= 2^18", "P8 D4 P10"),
    "truncated_immediate": ("load_imm values masked to 18 bits", "P8 D4"),
    "causal_ignored": ("no causal mask", "P1 P3"),
    "causal_offset_zero": ("allows c <= r instead of c <= r + kv_len - q_len", "P1 D1"),
    "tail_mask_missing": ("no -inf for columns >= bc", "P2 D7"),
    "tail_tile_dropped": ("Tk = kv_len // M", "P2 P3 D1 D4"),
    "causal_break_early": ("tile skipped when c0 >= q0 + off", "P1"),
    "bmm_scale_uncorrected": ("f_qk = FP[5] on the batched path", "P7 D5"),
    "qk_scale_missing": ("no score scaling", "P1 D1"),
    "decode_s_stride_tile": ("decode reads head j's S row at j*M*M", "D1 D3"),
    "per_head_p_offset": ("per-head P read at S + j*M*M", "P4 P6"),
    "qkt_sum_key_blocks": ("per-head M_TMM accumulation over every key block, one WO", "P4 P6"),
    "tmv_operands_swapped": ("M_TMV 0, gpQ, gpK", "D2 D6"),
    "q_group_offset_doubled": ("Q column 2*g*ratio*d", "P3 P5 D3"),
    "o_group_offset_missing": ("every group writes group 0's lanes", "P3 P5"),
    "q_lanes_not_zeroed": ("KEEP skipped", "P6 D6"),
    "mres_not_applied_l": ("l = l + sum(p)", "P1 D1"),
    "mres_not_applied_o": ("O = O + PV", "P1"),
    "q_tile_index_ignored": ("every q tile uses q0 = 0", "P1 P3"),
    "stale_scale": ("K/V prefetched with Q's SCALE", "P1"),
    "stale_stride": ("K/V prefetched with Q's STRIDE", "P1"),
    "o_not_zeroed": ("prologue zeroing skipped", "P1"),
    "fp_state_overlap": ("state base 3 and range check removed", "P1"),
    "hardcoded_tile_64": ("M or V literal 64", "P9"),
}

# kernels.md §6.3 (other kernels): hook -> (description, [(testbench, overrides)])
_OTHER: dict[str, tuple[str, list[tuple[str, dict]]]] = {
    "linear_col_step_element": ("M_MM weight pointer +B", [("linear", {}), ("linear_loop", {})]),
    "ksplit_partial_dropped": (
        "later K chunks not added",
        [("linear", {"max_k_tiles": 1}), ("linear_loop", {"max_k_tiles": 1}), ("ffn", {"max_k_tiles": 2})],
    ),
    "weight_tile_row_ignored": ("W offset without kt*M*N", [("linear", {"K": 128}), ("linear_loop", {"K": 128})]),
    "preload_stride_vlen": ("preload STRIDE = V*eb", [("linear", {"K": 128}), ("rms_norm", {"hidden": 128})]),
    "silu_on_up": ("silu(up)*gate", [("ffn", {}), ("ffn_intermediate", {})]),
    "ffn_workspace_overlap": ("workspace base 0", [("ffn", {})]),
    "rms_scratch_aliases_x": ("x^2 written over x", [("rms_norm", {})]),
    "ln_one_pass_variance": ("E[x^2]-E[x]^2", [("layer_norm", {"offset": 16.0})]),
    "norm_slots_swapped": ("EPS and INV_HIDDEN slots swapped", [("rms_norm", {}), ("layer_norm", {})]),
    "rope_sign_flipped": (
        "[x2, -x1]",
        [("rope", {"d": 16}), ("rope", {"d": 32}), ("rope", {"d": 64}), ("rope", {"d": 128, "nh": 2})],
    ),
    "embedding_direct_prefetch": ("prefetch straight into out (4-row spill)", [("embedding", {"T": 7})]),
    "add_dst_not_advancing": (
        "out pointer fixed",
        [("elementwise_add", {"rows": 4}), ("elementwise_add", {"rows": 9, "cols": 192})],
    ),
    "store_block_address": ("VRAM block c*V instead of c*rows_p*V", [("h_store", {"rows": 4, "cols": 128})]),
    "store_scale_wrong": ("SCALE = rows*cols/2", [("h_store", {})]),
    "softmax_tail_mask_missing": ("no tail mask", [("softmax", {"L": 100})]),
    "gelu_alpha_one": ("ONE slot used as alpha", [("gelu", {})]),
    "topk_bases_swapped": (
        "FP and INT bases exchanged",
        [("moe_topk", {}), ("moe_topk", {"variant": "B", "policy": 1})],
    ),
    # model layers (issue 15)
    "layer_residual_from_norm": (
        "attention residual adds the normed x",
        [("decoder_layer", {}), ("decoder_decode", {})],
    ),
    "layer_rope_on_v": ("RoPE on V, K cached unrotated", [("decoder_layer", {}), ("decoder_decode", {})]),
    "layer_k_not_cached": (
        "the layer's K is never stored to the KV cache",
        [("decoder_layer", {}), ("decoder_decode", {})],
    ),
    "expert_index_ignored": (
        "every expert FFN reads expert 0's weights (the index in INT SRAM ignored)",
        [
            ("moe_layer", {}),
            ("moe_layer", {"policy": 1, "T": 3, "inter": 64}),
            ("decoder_decode", {"batch": 1, "experts": 128, "top_k": 8, "ffn": hw(1, "MLEN")}),
            ("decoder_layer", {"experts": 32, "top_k": 4, "seq": 5, "ffn": hw(1, "MLEN")}),
        ],
    ),
    "expert_stride_row": (
        "expert offset index*inter*eb (one weight row) instead of index*hidden*inter*eb",
        [("moe_layer", {}), ("moe_layer", {"T": 5, "hidden": 128, "inter": 64, "max_k_tiles": 1})],
    ),
}

DESCRIPTIONS: dict[str, str] = {**{h: d for h, (d, _) in _FLASH.items()}, **{h: d for h, (d, _) in _OTHER.items()}}


def _required(tb: str, cid: str) -> Exposure:
    for case_id, ov, var in _get(tb).REQUIRED_CASES:
        if case_id == cid:
            return Exposure(tb, cid, dict(ov), var)
    raise KeyError(f"{tb} has no required case {cid}")


def exposures(hook: str) -> list[Exposure]:
    """The exposing cases of ``hook`` (kernels.md §6.2/§6.3), in table order."""
    if hook in _FLASH:
        return [_required(tb, cid) for tb, cid in _fa(_FLASH[hook][1])]
    return [Exposure(tb, "custom", dict(ov), "default") for tb, ov in _OTHER[hook][1]]


#: every mutation of kernels.md §6.2 and §6.3 (table order)
MUTATIONS: tuple[str, ...] = tuple(_FLASH) + tuple(_OTHER)

#: the cheapest exposing case per hook (index into exposures(hook)); the CI subset runs these. Chosen by
#: the dynamic instruction counts of the clean cases (D* decode cases and small shapes first).
_CHEAPEST: dict[str, int] = {
    "kv_tile_offset_ignored": 3,
    "state_reset_per_tile": 2,
    "normalize_per_tile": 1,
    "normalize_mask_stale": 2,
    "mv_v_step_row": 0,
    "tile_step_not_batch_aware": 1,
    "batch_base_missing": 1,
    "contiguous_kv_prefetch": 2,
    "raw_large_immediate": 0,
    "truncated_immediate": 0,
    "causal_offset_zero": 1,
    "tail_mask_missing": 1,
    "tail_tile_dropped": 2,
    "bmm_scale_uncorrected": 1,
    "qk_scale_missing": 1,
    "decode_s_stride_tile": 0,
    "tmv_operands_swapped": 1,
    "q_group_offset_doubled": 2,
    "q_lanes_not_zeroed": 1,
    "mres_not_applied_l": 1,
}


def ci_subset() -> list[tuple[str, Exposure]]:
    """One (hook, exposing case) per mutation at the smallest exposing size."""
    return [(h, exposures(h)[_CHEAPEST.get(h, 0)]) for h in MUTATIONS]


def how_caught(rep: Report) -> str:
    """ "" if the report passed (not caught), else mismatch / fault / assembler / plan."""
    if rep.passed:
        return ""
    if rep.fault:
        return "fault"
    if rep.error is not None:
        kind, _, text = rep.error.partition(": ")
        if kind == "assembler" or text.startswith("Asm:"):
            return "assembler"
        if kind == "plan":
            return "plan"
        return "mismatch"  # e.g. "expected a fault, but the run completed"
    return "mismatch"


def run_mutation(hook: str, exp: Exposure, *, backend: str = "numba") -> Report:
    """Run ``exp`` with ``hook`` enabled."""
    with mutation_hooks.inject(hook):
        return run_case(exp.testbench, f"{exp.case_id}:{hook}", exp.overrides, exp.variant, backend=backend)
