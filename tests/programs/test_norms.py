"""rms_norm / layer_norm generator structure (kernels.md §2.6)."""

from __future__ import annotations

import pytest

from programs.common import rp, vector_rows  # noqa: E402
from programs.norms import emit_layer_norm, emit_rms_norm, plan_layer_norm, plan_rms_norm  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")


def make_norm(cfg=CFG, gp=ku.GP, fp=ku.FP, kind="rms_norm", rows=4, hidden=128, gamma=True, beta=True, inplace=False):
    V = cfg.VLEN
    pitch = rp(cfg, rows)
    n = (hidden // V) * pitch
    x0, y0 = 0, (n + 1) * V
    if inplace:
        y0 = x0
    t0 = (2 * n + 2) * V
    vr = vector_rows(cfg, hidden)
    g0, b0 = t0 + 2 * V, t0 + (3 + vr) * V
    g = ku.tensor(0, vr, V) if gamma else None
    kw = dict(
        rows=rows,
        hidden=hidden,
        x_base=x0,
        pitch=pitch,
        y_base=y0,
        t_base=t0,
        gamma=g,
        gamma_base=g0 if gamma else None,
    )
    if kind == "layer_norm":
        b = ku.tensor(1, vr, V) if beta else None
        plan = plan_layer_norm(cfg, beta=b, beta_base=b0 if beta else None, **kw)
        return ku.emit_text(emit_layer_norm, plan, gp, fp)
    plan = plan_rms_norm(cfg, **kw)
    return ku.emit_text(emit_rms_norm, plan, gp, fp)


@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("hidden", [64, 128, 1024, 4096])
@pytest.mark.parametrize("rows,inplace,gamma", [(1, False, True), (4, True, False), (9, False, False)])
def test_norm_assembles(kind, hidden, rows, inplace, gamma):
    text = make_norm(kind=kind, hidden=hidden, rows=rows, inplace=inplace, gamma=gamma, beta=gamma)
    ku.check_assembles(text)
    ku.check_begin_end(text, kind)


def test_norm_structure():
    for kind in ("rms_norm", "layer_norm"):
        ku.check_registers(make_norm, kind=kind)
        ku.check_registers(make_norm, kind=kind, inplace=True)
    ku.check_deterministic_and_hooks(make_norm, {"rms_scratch_aliases_x": {}, "norm_slots_swapped": {}})
    ku.check_deterministic_and_hooks(
        make_norm, {"ln_one_pass_variance": {}, "norm_slots_swapped": {}}, kind="layer_norm"
    )
    ku.check_assembles(make_norm(get_config("small"), kind="layer_norm", rows=9, hidden=64))


def test_layer_norm_never_uses_one_pass_variance():
    # two-pass and centred: the variance pass squares the centred Y rows (V_MUL_VV t, Y, Y) after the
    # centring pass (V_SUB_VF Y, X, mu), never X*X
    text = make_norm(kind="layer_norm", rows=1, hidden=64, gamma=False, beta=False)
    body = text[text.index("pass 2") :]
    assert "V_SUB_VF" in body and "V_MUL_VV" in body[body.index("pass 3") :]
    assert "V_MUL_VV" not in text[: text.index("pass 2")]


@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
def test_norm_errors(kind):
    with pytest.raises(ValueError, match="hidden=100"):
        make_norm(kind=kind, hidden=100)
    with pytest.raises(ValueError, match="rows=0"):
        make_norm(kind=kind, rows=0)
    pl = plan_layer_norm if kind == "layer_norm" else plan_rms_norm
    with pytest.raises(ValueError, match="overlaps"):
        pl(CFG, rows=4, hidden=128, x_base=0, pitch=4, y_base=100 * 64, t_base=64)
    with pytest.raises(ValueError, match="gamma_base=None"):
        pl(CFG, rows=4, hidden=128, x_base=0, pitch=4, y_base=100 * 64, t_base=200 * 64, gamma=ku.tensor(0, 4, 64))
    with pytest.raises(ValueError, match="gamma.alloc_elems"):
        pl(
            CFG,
            rows=4,
            hidden=128,
            x_base=0,
            pitch=4,
            y_base=100 * 64,
            t_base=200 * 64,
            gamma=ku.tensor(0, 2, 64),
            gamma_base=300 * 64,
        )
