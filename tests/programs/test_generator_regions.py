"""The generators' code regions on every testbench's default case: the ``; @region`` / ``; @endregion`` markers are
comments only (the words assembled without them are the same), every phase a generator marks shows up as a region
with instructions, regions nested in the decoder and the MoE layer keep flattened, readable paths, and the
exclusive cycles / instructions of all entries sum exactly to the run's totals in every timing model."""

from __future__ import annotations

import numpy as np
import pytest

import testbenches
from isa import assemble
from isa.regions import parse_marker
from plena_sim.timing.regions import UNLABELLED
from testbenches.harness import prepare_machine
from testbenches.variants import get_config

MODELS = ("serial", "overlap", "rtl")

_FLASH = ("prologue", "stage_q", "reset", "kv_tile/load_kv", "kv_tile/qkt", "kv_tile/softmax", "kv_tile/pv")
FLASH_PHASES = tuple(f"flash/{p}" for p in _FLASH + ("kv_tile/rescale", "kv_tile/mask", "normalize"))
LINEAR_PHASES = ("load_w", "compute", "compute/writeout")
_FFN = ("gate", "up", "silu", "silu/rows", "gate_mul_up")
_FFN_LINEAR = tuple(f"{s}/{p}" for s in ("gate", "up") for p in LINEAR_PHASES)
#: per testbench: the region paths its default case must report with at least one instruction (hand-written
#: testbenches -- no generator -- mark none)
EXPECTED: dict[str, tuple[str, ...]] = {
    "flashattn_prefill": FLASH_PHASES,
    "flashattn_decode": FLASH_PHASES,
    "flashattn_qkt": ("attn_scores", "attn_scores/stage_q", "attn_scores/kv_tile", "attn_scores/kv_tile/qkt"),
    "linear": ("linear",) + tuple(f"linear/{p}" for p in LINEAR_PHASES),
    "linear_loop": ("linear",) + tuple(f"linear/{p}" for p in LINEAR_PHASES),
    "bmm": ("bmm",) + tuple(f"bmm/{p}" for p in LINEAR_PHASES),
    "ffn": tuple(f"ffn_swiglu/{p}" for p in _FFN + _FFN_LINEAR + ("down", "down/compute/writeout")),
    "ffn_intermediate": tuple(f"ffn_intermediate/{p}" for p in _FFN + _FFN_LINEAR),
    "gelu": ("gelu", "gelu/rows"),
    "silu": ("silu", "silu/rows"),
    "rms_norm": ("rms_norm", "rms_norm/load_gamma", "rms_norm/sum_of_squares", "rms_norm/scale"),
    "layer_norm": tuple(f"layer_norm/{p}" for p in ("load_gamma", "load_beta", "mean", "centre", "variance", "scale")),
    "rope": ("rope", "rope/load_tables", "rope/rotate", "rope/combine"),
    "embedding": ("embedding", "embedding/gather"),
    "softmax": tuple(f"softmax_rows/{p}" for p in ("max", "exp", "sum", "scale")),
    "elementwise_add": ("add_rows",),
    "h_store": ("scale_rows",),
    "s_map_v": (),
    "v_shift_v": (),
    "loop": (),
    "moe_topk": ("topk",),
    "decoder_layer": (
        "layer/attn_norm/rms_norm/sum_of_squares",
        "layer/qkv_proj/wq/linear/load_w",
        "layer/qkv_proj/wq/linear/compute/writeout",
        "layer/rope/q/rope/rotate",
        "layer/attention/flash/stage_q",
        "layer/attention/flash/kv_tile/qkt",
        "layer/attention/flash/kv_tile/softmax",
        "layer/attention/flash/kv_tile/pv",
        "layer/attention/flash/kv_tile/rescale",
        "layer/attention/flash/normalize",
        "layer/o_proj/linear/compute",
        "layer/attn_residual/add_rows",
        "layer/ffn/ffn_swiglu/gate/compute",
        "layer/ffn/ffn_swiglu/silu/rows",
        "layer/ffn/ffn_swiglu/down/load_w",
    ),
    "decoder_decode": (
        "layer/attention/flash/kv_tile/qkt",
        "layer/attention/flash/kv_tile/softmax",
        "layer/attention/flash/kv_tile/pv",
        "layer/ffn/ffn_swiglu/up/compute/writeout",
    ),
    "moe_layer": (
        "moe/router/load_w",
        "moe/router/compute",
        "moe/topk",
        "moe/expert_ffn/ffn_swiglu/gate/compute",
        "moe/expert_ffn/ffn_swiglu/down/compute/writeout",
        "moe/combine",
    ),
}


def test_every_testbench_has_its_expected_regions_listed():
    assert set(EXPECTED) == set(testbenches.names())


_CASES: dict[str, object] = {}


def _default_case(name):
    if name not in _CASES:
        mod = testbenches.get(name)
        _CASES[name] = mod.build(dict(mod.DEFAULTS), get_config("default"))
    return _CASES[name]


@pytest.mark.parametrize("name", testbenches.names())
def test_region_markers_do_not_change_the_words(name):
    case = _default_case(name)
    text = case.program
    stripped = "\n".join(line for line in text.splitlines() if parse_marker(line) is None)
    marked, plain = assemble(text, "marked.asm"), assemble(stripped, "plain.asm")
    assert plain.regions == ()
    assert marked.words.dtype == plain.words.dtype == np.uint32
    assert np.array_equal(marked.words, plain.words)
    assert np.array_equal(case.assembled().words, plain.words)  # the words the builder kept are those too
    assert bool(marked.regions) == bool(EXPECTED[name])


@pytest.mark.parametrize("timing", MODELS)
@pytest.mark.parametrize("name", testbenches.names())
def test_default_case_regions_sum_to_the_run(name, timing):
    case = _default_case(name)
    prog = case.assembled()
    res = prepare_machine(case).run(prog, timing=timing, raise_on_fault=False, max_instructions=case.max_instructions)
    assert res.fault is None, res.fault
    regions = res.stats["regions"]
    paths = [e["path"] for e in regions]
    assert paths[-1] == UNLABELLED and len(set(paths)) == len(paths)
    assert sum(e["cycles_exclusive"] for e in regions) == res.cycles
    assert sum(e["instructions"] for e in regions) == res.instructions
    assert sum(e["macs"] for e in regions) == res.stats["matrix_macs"]
    busy = {e["path"]: e["instructions"] for e in regions}
    for want in EXPECTED[name]:
        assert busy.get(want, 0) > 0, f"{name}: region {want!r} missing or empty (have {paths})"
    incl = {e["path"]: e["cycles_inclusive"] for e in regions}
    for e in regions:
        assert 0 <= e["cycles_exclusive"] <= e["cycles_inclusive"] <= res.cycles
        parent = e["path"].rsplit("/", 1)[0]
        if "/" in e["path"] and parent in incl:  # a nested region's cycles are inside its parent's
            assert e["cycles_inclusive"] <= incl[parent]


def test_decoder_nests_the_generator_regions_under_its_stages():
    """isa.regions flattens nesting: the decoder stage ``layer/attention`` holds flash's ``flash/...`` regions
    as ``layer/attention/flash/...``; every path is made of short names (no blanks)."""
    prog = _default_case("decoder_layer").assembled()
    paths = {r.path for r in prog.regions}
    flash = sorted(p for p in paths if "/flash" in p)
    assert flash and all(p.startswith("layer/attention/flash") for p in flash)
    assert "layer/attention/flash/kv_tile/softmax" in paths
    for r in prog.regions:
        if r.path.startswith("layer/attention/flash/"):
            outer = next(o for o in prog.regions if o.path == "layer/attention" and o.first <= r.first)
            assert r.end <= outer.end
    assert all(" " not in p and p.count("/") <= 6 for p in paths)
