"""The oracle's teeth (kernels.md §6, and issue 21's second wave): every codegen mutation and its exposing cases.

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

__all__ = [
    "Exposure",
    "MUTATIONS",
    "DESCRIPTIONS",
    "CLASSES",
    "exposures",
    "run_mutation",
    "how_caught",
    "ci_subset",
]


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
#: a chunked prefill (decoder_layer's required case "chunked"): three passes, every token judged from HBM
_CHUNKED = {"seq": hw(2, "MLEN", plus=5), "chunk": hw(1, "MLEN")}

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
        [("decoder_layer", {}), ("decoder_decode", {}), ("decoder_layer", _CHUNKED)],
    ),
    "layer_rope_on_v": (
        "RoPE on V, K cached unrotated",
        [("decoder_layer", {}), ("decoder_decode", {}), ("decoder_layer", _CHUNKED)],
    ),
    "layer_k_not_cached": (
        "the layer's K is never stored to the KV cache",
        [("decoder_layer", {}), ("decoder_decode", {}), ("decoder_layer", _CHUNKED)],
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

_BIG_BASES = (
    "D16 P20 flashattn_qkt:hkv4_big_base rms_norm:big_base layer_norm:big_base gelu:big_base silu:big_base "
    "softmax:big_base rope:big_base embedding:big_base elementwise_add:big_base h_store:big_base bmm:big_base "
    "ffn:big_base ffn_intermediate:big_base linear:big_base linear_loop:big_base "
    "moe_topk:B_policy1_T7_big_base moe_layer:policy1_T5_big_base"
)

#: the second wave (issue 21): hook -> (bug class, mutation, exposing required cases). A case is ``P*``/``D*``
#: (flash prefill / decode) or ``testbench:case id``; the first one listed is the cheapest (the CI subset's).
_WAVE2: dict[str, tuple[str, str, str]] = {
    # addressing
    "kv_capacity_ignored": (
        "addressing",
        "bshd batch base b*kv_len*Wp (kv_capacity ignored)",
        "D8 P12 flashattn_qkt:capacity_b2",
    ),
    "sbhd_base_uses_capacity": ("addressing", "sbhd batch base b*S_cap*Wp (the bshd formula)", "D9 P13"),
    "kv_head_offset_ratio": (
        "addressing",
        "K/V column g*ratio*d (the group's first q head, not kv head g)",
        "D11 D12 P15 P16",
    ),
    "q_batch_offset_missing": ("addressing", "Q staged from batch 0 for every batch", "D8 D9 P12 P13"),
    "norm_gamma_not_advanced": (
        "addressing",
        "gamma pointer fixed: every column block scaled by block 0",
        "rms_norm:default layer_norm:default",
    ),
    "softmax_block_step_row": (
        "addressing",
        "softmax column-block step V (one row) instead of pitch*V",
        "softmax:default softmax:L100_scale_64",
    ),
    # masking
    "causal_mask_plus_one": ("masking", "causal mask allows c <= r + off + 1 (one future key)", "P15 P1 P12"),
    "causal_mask_rows_shared": ("masking", "every MASK row built with row 0's n_r", "P15 P1"),
    "keep_width_hlen": ("masking", "KEEP(HLEN) instead of KEEP(d): Q lanes >= HLEN of the head zeroed", "D13 P17 P6"),
    "lane_mask_one_group_short": (
        "masking",
        "head lane mask one HLEN group short (last lanes never updated)",
        "D1 P1 P17",
    ),
    # state init
    "m_reset_skipped": (
        "state init",
        "m not reset per block (l is): a block starts from the last block's max",
        "D8 P12 P13",
    ),
    "l_reset_skipped": (
        "state init",
        "l not reset per block (m is): the stale l times m_res ~ 6e-39 on tile 0",
        "D1 P1",
    ),
    "neg_row_not_zeroed": ("state init", "NEG row = NaN scratch + (-inf): the zeroing shift skipped", "D1 P1"),
    "keep_row_not_zeroed": ("state init", "KEEP row built on NaN scratch: the zeroing shift skipped", "D13 P17"),
    "f_neg_not_loaded": ("state init", "f_neg never loaded from slot 0 (0.0: no masks, m reset to 0)", "D1 P1 P15"),
    "rms_acc_not_reset": (
        "state init",
        "rms_norm sum of squares carried over from the previous row",
        "rms_norm:scale_1e-4",
    ),
    "ln_mean_acc_not_reset": (
        "state init",
        "layer_norm mean accumulator carried over from the previous row",
        "layer_norm:default layer_norm:scale_1e-4",
    ),
    # precision / scale
    "per_head_bmm_scale_applied": (
        "precision/scale",
        "1/BMM_SCALE applied on the per-head path (M_TMM/M_TMV are unscaled)",
        "D10 D13 P14 flashattn_qkt:emu025_per_head",
    ),
    "bmm_scale_applied_twice": ("precision/scale", "f_qk = FP[5]*FP[6]*FP[6] on the batched path", "D5 P7"),
    "norm_eps_after_sqrt": (
        "precision/scale",
        "1/(sqrt(mean)+eps) instead of 1/sqrt(mean+eps)",
        "rms_norm:scale_1e-4 layer_norm:scale_1e-4",
    ),
    "softmax_no_max_subtraction": (
        "precision/scale",
        "softmax exp(x) without the row max subtracted",
        "softmax:L100_scale_64",
    ),
    "rms_eps_before_mean": (
        "precision/scale",
        "rms_norm eps added to the sum of squares: (sum + eps)/hidden",
        "rms_norm:scale_1e-4",
    ),
    # loop bounds
    "pv_row_blocks_floor": ("loop bounds", "P@V over floor(br/B) row blocks", "P14 P12 P16"),
    "scores_row_blocks_floor": ("loop bounds", "per-head scores over floor(br/B) row blocks", "P14 P17"),
    "normalize_rows_floor_blen": ("loop bounds", "normalize over floor(br/B)*B rows", "P12 P14 P16"),
    "topk_tokens_multiple_of_4": (
        "loop bounds",
        "V_TOPK token loop over T rounded down to a multiple of 4",
        "moe_topk:A_policy0_T7 moe_topk:A_policy1_T7 moe_topk:B_policy0_T5 moe_topk:B_policy1",
    ),
    "moe_tokens_floor_4": (
        "loop bounds",
        "MoE expert passes over T rounded down to a multiple of 4",
        "moe_layer:policy0_T7_i64 moe_layer:policy1_T5_big_base moe_layer:h128_ksplit_T5",
    ),
    "rms_blocks_short": (
        "loop bounds",
        "rms_norm sum of squares over hidden/V - 1 blocks",
        "rms_norm:default rms_norm:small",
    ),
    # register reuse
    "l_reg_aliases_mres": (
        "register reuse",
        "online softmax loads l into m_res's register (l = l_old^2 + sum p)",
        "D1 P1",
    ),
    "norm_gamma_pointer_not_reset": (
        "register reuse",
        "gamma pointer set once, not per row (row r reads past gamma)",
        "rms_norm:default layer_norm:default",
    ),
    "rope_xr_reg_is_x": (
        "register reuse",
        "RoPE reads XR through X's pointer (y = x*cos + x*sin)",
        "rope:default rope:d8_nh8",
    ),
    # immediates
    "imm_lui_sign_extended": (
        "immediates",
        "load_imm split hi = (v + 0x800) >> 12 (RISC-V sign-extension habit)",
        _BIG_BASES,
    ),
    "imm_low_11_bits": ("immediates", "load_imm low part v & 0x7FF (a signed 12-bit ADDI: bit 11 dropped)", _BIG_BASES),
    # layout
    "o_row_pitch_unpadded": ("layout", "O column-block pitch batch*q_len instead of rp(batch*q_len)", "P17 P16"),
    "q_stride_kv_row": ("layout", "Q staging STRIDE hkv*d*eb (a K/V row) instead of hq*d*eb", "P1 P13"),
    "pv_lane_dropped": (
        "layout",
        "P@V written at lane 0 for every head (O update reads the head's lanes)",
        "D1 P1 P17",
    ),
    "rope_rotation_single_head": (
        "layout",
        "rotation tile with one Rd block (heads >= 1 of a row unrotated)",
        "rope:d16 rope:d8_nh8",
    ),
    "embedding_out_row_major": (
        "layout",
        "embedding out written row-major (t*hidden/V + c) instead of CBM",
        "embedding:default",
    ),
    "topk_row_step_pitch": (
        "layout",
        "V_TOPK row pointer steps pitch*V (a column block) per token",
        "moe_topk:A_policy0_T7 moe_topk:A_policy0",
    ),
}

#: the bug class of every second-wave mutation
CLASSES: dict[str, str] = {h: c for h, (c, _, _) in _WAVE2.items()}

DESCRIPTIONS: dict[str, str] = {
    **{h: d for h, (d, _) in _FLASH.items()},
    **{h: d for h, (d, _) in _OTHER.items()},
    **{h: d for h, (_, d, _) in _WAVE2.items()},
}


def _required(tb: str, cid: str) -> Exposure:
    for case_id, ov, var in _get(tb).REQUIRED_CASES:
        if case_id == cid:
            return Exposure(tb, cid, dict(ov), var)
    raise KeyError(f"{tb} has no required case {cid}")


def _case(token: str) -> tuple[str, str]:
    """``P3`` / ``D1`` (flash) or ``testbench:case id`` -> (testbench, case id)."""
    tb, sep, cid = token.partition(":")
    return (tb, cid) if sep else _fa(token)[0]


def exposures(hook: str) -> list[Exposure]:
    """The exposing cases of ``hook`` (kernels.md §6.2/§6.3, the second wave), in table order."""
    if hook in _FLASH:
        return [_required(tb, cid) for tb, cid in _fa(_FLASH[hook][1])]
    if hook in _WAVE2:
        return [_required(*_case(tok)) for tok in _WAVE2[hook][2].split()]
    return [Exposure(tb, "custom", dict(ov), "default") for tb, ov in _OTHER[hook][1]]


#: every mutation of kernels.md §6.2 and §6.3, then the second wave (table order)
MUTATIONS: tuple[str, ...] = tuple(_FLASH) + tuple(_OTHER) + tuple(_WAVE2)

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
