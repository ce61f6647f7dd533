"""Test-only fault hooks (kernels.md §1.10, §6): named codegen mutations the testbenches must catch.

Generators ask ``mutation_hooks.active("kv_tile_offset_ignored")``; it is False unless a test enables the hook
with ``with mutation_hooks.inject("kv_tile_offset_ignored"): ...``. The enabled set lives in a
:class:`contextvars.ContextVar` (per thread / task, restored on exit), so nothing global is mutated and
with no hook enabled every generator emits exactly the text a hook-free build would.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["HOOKS", "SENS_HOOKS", "active", "inject", "enabled"]

#: every mutation of kernels.md §6.2 (flash attention) and §6.3 (other kernels), the model layers' (issue 15)
#: and the second wave (issue 21)
HOOKS: frozenset[str] = frozenset(
    {
        # 6.2 flash attention
        "kv_tile_offset_ignored",
        "state_reset_per_tile",
        "normalize_per_tile",
        "normalize_mask_stale",
        "pv_v_step_blen",
        "mv_v_step_row",
        "tile_step_not_batch_aware",
        "batch_base_missing",
        "contiguous_kv_prefetch",
        "raw_large_immediate",
        "truncated_immediate",
        "causal_ignored",
        "causal_offset_zero",
        "tail_mask_missing",
        "tail_tile_dropped",
        "causal_break_early",
        "bmm_scale_uncorrected",
        "qk_scale_missing",
        "decode_s_stride_tile",
        "per_head_p_offset",
        "qkt_sum_key_blocks",
        "tmv_operands_swapped",
        "q_group_offset_doubled",
        "o_group_offset_missing",
        "q_lanes_not_zeroed",
        "mres_not_applied_l",
        "mres_not_applied_o",
        "q_tile_index_ignored",
        "stale_scale",
        "stale_stride",
        "o_not_zeroed",
        "fp_state_overlap",
        "hardcoded_tile_64",
        # 6.3 other kernels
        "linear_col_step_element",
        "ksplit_partial_dropped",
        "weight_tile_row_ignored",
        "preload_stride_vlen",
        "silu_on_up",
        "ffn_workspace_overlap",
        "rms_scratch_aliases_x",
        "ln_one_pass_variance",
        "norm_slots_swapped",
        "rope_sign_flipped",
        "embedding_direct_prefetch",
        "add_dst_not_advancing",
        "store_block_address",
        "store_scale_wrong",
        "softmax_tail_mask_missing",
        "gelu_alpha_one",
        "topk_bases_swapped",
        # model layers (issue 15)
        "layer_residual_from_norm",
        "layer_rope_on_v",
        "layer_k_not_cached",
        "expert_index_ignored",
        "expert_stride_row",
        # second wave (issue 21; testbenches/mutations.py gives each one's bug class)
        "kv_capacity_ignored",
        "sbhd_base_uses_capacity",
        "kv_head_offset_ratio",
        "q_batch_offset_missing",
        "norm_gamma_not_advanced",
        "softmax_block_step_row",
        "causal_mask_plus_one",
        "causal_mask_rows_shared",
        "keep_width_hlen",
        "lane_mask_one_group_short",
        "m_reset_skipped",
        "l_reset_skipped",
        "neg_row_not_zeroed",
        "keep_row_not_zeroed",
        "f_neg_not_loaded",
        "rms_acc_not_reset",
        "ln_mean_acc_not_reset",
        "per_head_bmm_scale_applied",
        "bmm_scale_applied_twice",
        "norm_eps_after_sqrt",
        "softmax_no_max_subtraction",
        "rms_eps_before_mean",
        "pv_row_blocks_floor",
        "scores_row_blocks_floor",
        "normalize_rows_floor_blen",
        "topk_tokens_multiple_of_4",
        "moe_tokens_floor_4",
        "rms_blocks_short",
        "l_reg_aliases_mres",
        "norm_gamma_pointer_not_reset",
        "rope_xr_reg_is_x",
        "imm_lui_sign_extended",
        "imm_low_11_bits",
        "o_row_pitch_unpadded",
        "q_stride_kv_row",
        "pv_lane_dropped",
        "rope_rotation_single_head",
        "embedding_out_row_major",
        "topk_row_step_pitch",
    }
)

#: the sensitivity mutations (issue 21): single-key errors of flash attention's mask rows, each of which the count
#: probe must catch on every case of ``testbenches.sensitivity`` (kept apart from the §6 table of HOOKS)
SENS_HOOKS: frozenset[str] = frozenset(
    {
        "sens_key_added",  # every masked row allows one key more (min(n_r + 1, M))
        "sens_key_dropped",  # every masked row allows one key less (n_r - 1)
        "sens_mask_lane",  # one lane of one mask row wrong: row 0's last allowed key masked (or its next one allowed)
    }
)
_KNOWN = HOOKS | SENS_HOOKS

_ENABLED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("plena_fault_hooks", default=frozenset())


def active(name: str) -> bool:
    """True iff hook ``name`` is enabled in the current context. Unknown names are a bug (KeyError)."""
    if name not in _KNOWN:
        raise KeyError(f"unknown fault hook {name!r}")
    return name in _ENABLED.get()


def enabled() -> frozenset[str]:
    return _ENABLED.get()


@contextlib.contextmanager
def inject(*names: str) -> Iterator[None]:
    """Enable the named hooks for the duration of the ``with`` block (test use only)."""
    unknown = [n for n in names if n not in _KNOWN]
    if unknown:
        raise KeyError(f"unknown fault hook(s): {', '.join(unknown)}")
    token = _ENABLED.set(_ENABLED.get() | frozenset(names))
    try:
        yield
    finally:
        _ENABLED.reset(token)
