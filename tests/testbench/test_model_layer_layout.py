"""``build_layout`` of the model-layer testbenches (issue 30): the program and the HBM layout of ``build``, with no
input value, golden or check (a layout-only case for a timing-only run)."""

from __future__ import annotations

import pytest

import testbenches
from testbenches.shapes import resolve_params
from testbenches.variants import get_config

CASES = [
    ("decoder_layer", "default", "transactional"),
    ("decoder_layer", "moe_e32_k4", "small"),
    ("decoder_layer", "chunked", "v80-128x64"),
    ("decoder_layer", "batch2_tail", "v80-64x16"),
    ("decoder_decode", "default", "transactional"),
    ("decoder_decode", "moe_e128_k8", "small"),
]


def _params(mod, cid: str, cfg) -> dict:
    over = next(c[1] for c in mod.REQUIRED_CASES if c[0] == cid)
    return resolve_params(dict(mod.DEFAULTS, **over), cfg)


def _placement(p) -> tuple:
    return (p.base, p.end, p.row_pitch, p.scale_reg, p.rows, p.cols, p.hbm_type, p.elem_range, p.scale_range)


@pytest.mark.parametrize("tb,cid,preset", CASES, ids=[f"{t}[{c}]@{p}" for t, c, p in CASES])
def test_layout_is_the_build_without_values(tb, cid, preset):
    mod, cfg = testbenches.get(tb), get_config("default", hw=preset)
    full = mod.build(_params(mod, cid, cfg), cfg)
    lay = mod.build_layout(_params(mod, cid, cfg), cfg)
    assert lay.program == full.program and len(lay.assembled()) == len(full.assembled())
    assert list(lay.tensors) == list(full.tensors)
    assert {n: _placement(p) for n, p in lay.tensors.items()} == {n: _placement(p) for n, p in full.tensors.items()}
    assert lay.hbm_writable == full.hbm_writable and lay.regions == full.regions
    assert (lay.fp_consts == full.fp_consts).all() and lay.fp_consts[5] != 0  # QK_SCALE set as build sets it
    assert lay.layout_only and not full.layout_only
    assert lay.checks == [] and lay.inputs == {} and lay.hbm_segments == []  # no value, no byte, no check
    assert full.checks and full.hbm_segments
    if cid.startswith("moe"):  # the sparse expert stacks placed too
        assert {"wr", "wg", "wu", "wd"} <= set(lay.tensors)
