"""rope generator structure and the rotation-tile helper (kernels.md §2.8)."""

from __future__ import annotations

import numpy as np
import pytest

from programs.common import rp  # noqa: E402
from programs.rope import emit_rope, plan_rope, rope_rotation_tile  # noqa: E402
from testbenches.variants import get_config  # noqa: E402
from tests.programs import kernel_util as ku

CFG = get_config("default")


def make(cfg=CFG, gp=ku.GP, fp=ku.FP, seq=32, nh=4, d=64, inplace=False):
    V, M = cfg.VLEN, cfg.MLEN
    pitch = rp(cfg, seq)
    cols = nh * d
    n = (cols // V) * pitch + 1
    bases = [k * n * V for k in range(6)]
    x0, y0, c0, s0, xr0, t0 = bases
    if inplace:
        y0 = x0
    cos, sin = ku.tensor(0, pitch, cols), ku.tensor(1, pitch, cols)
    rot = ku.tensor(2, M, M) if d <= M else None
    plan = plan_rope(
        cfg,
        rows=seq,
        nh=nh,
        d=d,
        x_base=x0,
        pitch=pitch,
        y_base=y0,
        cos=cos,
        sin=sin,
        cos_base=c0,
        sin_base=s0,
        xr_base=xr0,
        t_base=t0,
        rot=rot,
    )
    return ku.emit_text(emit_rope, plan, gp, fp)


@pytest.mark.parametrize("d", [16, 32, 64, 128])
@pytest.mark.parametrize("seq", [1, 5, 32])
@pytest.mark.parametrize("inplace", [False, True])
def test_assembles(d, seq, inplace):
    text = make(d=d, seq=seq, inplace=inplace, nh=4 if d < 128 else 2)
    ku.check_assembles(text)
    ku.check_begin_end(text, "rope")


def test_structure():
    ku.check_registers(make)
    ku.check_registers(make, d=128, nh=2)
    for d in (16, 64, 128):
        ku.check_deterministic_and_hooks(make, {"rope_sign_flipped": {}}, d=d, nh=4 if d < 128 else 2)
    ku.check_assembles(make(get_config("small"), d=16, seq=5))


@pytest.mark.parametrize("d", [2, 16, 32, 64])
def test_rotation_tile(d):
    M = 64
    R = rope_rotation_tile(d, M)
    x = np.random.default_rng(0).standard_normal((3, M))
    xr = x @ R
    xh = x.reshape(3, -1, d)
    want = np.concatenate([-xh[..., d // 2 :], xh[..., : d // 2]], axis=-1).reshape(3, M)
    assert np.array_equal(xr, want)
    assert set(np.unique(R)) <= {-1.0, 0.0, 1.0}


@pytest.mark.parametrize(
    "over,needle",
    [
        (dict(d=15), "d=15"),
        (dict(d=48), "d=48"),
        (dict(d=192, nh=2), "d=192"),
        (dict(nh=1, d=16), "nh\\*d=16"),
    ],
)
def test_plan_errors_name_the_parameter(over, needle):
    with pytest.raises(ValueError, match=needle):
        make(**over)


def test_rotation_tile_required():
    with pytest.raises(ValueError, match="rot=None"):
        plan_rope(
            CFG,
            rows=4,
            nh=4,
            d=16,
            x_base=0,
            pitch=4,
            y_base=10 * 64,
            cos=ku.tensor(0, 4, 64),
            sin=ku.tensor(1, 4, 64),
            cos_base=20 * 64,
            sin_base=30 * 64,
            xr_base=40 * 64,
            t_base=50 * 64,
        )
