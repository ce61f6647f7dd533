"""The oracle's teeth for the non-attention kernels (kernels.md §6.3): every mutation is caught.

For each row the hook is enabled and every listed case must FAIL (a check failure, a simulator fault, an
assembler/Asm ValueError or a plan ValueError).  Marked slow like the rest of the teeth (§6.1); the hook
placement test (every §6.3 hook is referenced by generator code) runs by default.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from programs import faults
from testbenches.harness import run_case

# hook -> [(testbench, overrides, variant)]   (kernels.md §6.3 "Exposed by")
TEETH = {
    "linear_col_step_element": [("linear", {}, "default"), ("linear_loop", {}, "default")],
    "ksplit_partial_dropped": [("linear", {"max_k_tiles": 1}, "default"),
                               ("linear_loop", {"max_k_tiles": 1}, "default"),
                               ("ffn", {"max_k_tiles": 2}, "default")],
    "weight_tile_row_ignored": [("linear", {"K": 128}, "default"), ("linear_loop", {"K": 128}, "default")],
    "preload_stride_vlen": [("linear", {"K": 128}, "default"), ("rms_norm", {"hidden": 128}, "default")],
    "silu_on_up": [("ffn", {}, "default"), ("ffn_intermediate", {}, "default")],
    "ffn_workspace_overlap": [("ffn", {}, "default")],
    "rms_scratch_aliases_x": [("rms_norm", {}, "default")],
    "ln_one_pass_variance": [("layer_norm", {"offset": 16.0}, "default")],
    "norm_slots_swapped": [("rms_norm", {}, "default"), ("layer_norm", {}, "default")],
    "rope_sign_flipped": [("rope", {"d": 16}, "default"), ("rope", {"d": 32}, "default"),
                          ("rope", {"d": 64}, "default"), ("rope", {"d": 128, "nh": 2}, "default")],
    "embedding_direct_prefetch": [("embedding", {"T": 7}, "default")],
    "add_dst_not_advancing": [("elementwise_add", {"rows": 4}, "default"),
                              ("elementwise_add", {"rows": 9, "cols": 192}, "default")],
    "store_block_address": [("h_store", {"rows": 4, "cols": 128}, "default")],
    "store_scale_wrong": [("h_store", {}, "default")],
    "softmax_tail_mask_missing": [("softmax", {"L": 100}, "default")],
    "gelu_alpha_one": [("gelu", {}, "default")],
    "topk_bases_swapped": [("moe_topk", {}, "default"), ("moe_topk", {"variant": "B", "policy": 1}, "default")],
}
SECTION_6_3 = set(TEETH)
ROWS = [(h, tb, ov, var) for h, cases in TEETH.items() for tb, ov, var in cases]


def test_every_6_3_hook_is_a_known_hook_and_placed_in_a_generator():
    assert SECTION_6_3 <= faults.HOOKS
    src = "\n".join(p.read_text() for p in (Path(__file__).resolve().parents[2] / "programs").glob("*.py"))
    for h in SECTION_6_3:
        assert f'"{h}"' in src, f"hook {h} is not referenced by any generator"


@pytest.mark.slow
@pytest.mark.parametrize("hook,tb,ov,var", ROWS, ids=[f"{h}-{tb}-{i}" for i, (h, tb, _, _) in enumerate(ROWS)])
def test_mutation_is_caught(hook, tb, ov, var):
    clean = run_case(tb, "clean", ov, var)
    assert clean.passed, f"the case must pass without the mutation: {clean.summary}"
    with faults.inject(hook):
        rep = run_case(tb, f"mutant:{hook}", ov, var)
    assert not rep.passed, f"mutation {hook} not detected by {tb} {ov}: {rep.summary}"
