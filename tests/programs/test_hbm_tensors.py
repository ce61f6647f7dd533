"""HBM helpers (kernels.md §2.1) as hardware loops: the transfers they issue are exactly the §2.1 patterns.

``preload_act`` / ``store_act`` / ``load_vector`` emit hardware loops with register-stepped addresses; the
scalar trace's operation log (every non-pointer instruction with its register values) must equal the
sequence the §2.1 pseudo-code lists, in order, for shapes that unroll, loop, and step past 2^18.
"""

from __future__ import annotations

import pytest

from programs import mutation_hooks
from programs.asm import Asm
from programs.hbm_tensors import load_vector, preload_act, store_act
from testbenches.variants import get_config
from tests.programs import kernel_util as ku

REGS = tuple(range(1, 13))


def _transfers(cfg, op, t, cols, base, rows_p, group, block_step=None):
    V = cfg.VLEN
    block_step = rows_p * V if block_step is None else block_step
    out = []
    for c in range(cols // V):
        for q in range(rows_p // group):
            out.append((op, (base + c * block_step + q * group * V, (q * group * cols + c * V) * t.eb, "a3", "1", "0")))
    return out


SHAPES = [
    # (preset, cols, rows_p, vram_base): one row group, an unrolled and a looped q run, pitch*V past 2^18
    ("transactional", 64, 4, 0),
    ("transactional", 192, 36, 640),
    ("transactional", 128, 200, 4100 * 64),
    ("small", 96, 64, 32),
    ("transactional", 64, 4100, 0),
]


@pytest.mark.parametrize("preset,cols,rows_p,base", SHAPES)
@pytest.mark.parametrize("store", [False, True])
def test_activation_transfers_follow_the_pattern(preset, cols, rows_p, base, store):
    cfg = get_config("default", hw=preset)
    t = ku.tensor(3, rows_p, cols, eb=2)
    a = Asm()
    (store_act if store else preload_act)(a, cfg, t, rows_p, cols, base, rows_p, REGS)
    op, group = ("H_STORE_V", cfg.P_W) if store else ("H_PREFETCH_V", cfg.P_V)
    head = [("C_SET_SCALE_REG", (t.scale_offset,)), ("C_SET_STRIDE_REG", (cols * t.eb,))]
    assert ku.operation_log(a.text(), cfg) == head + _transfers(cfg, op, t, cols, base, rows_p, group)


def test_store_block_address_mutation_is_live_in_the_loops():
    cfg = get_config("default")
    t = ku.tensor(3, 40, 128, eb=2)
    a = Asm()
    with mutation_hooks.inject("store_block_address"):
        store_act(a, cfg, t, 40, 128, 0, 40, REGS)
    log = ku.operation_log(a.text(), cfg)[2:]
    assert log == _transfers(cfg, "H_STORE_V", t, 128, 0, 40, cfg.P_W, block_step=cfg.VLEN)


@pytest.mark.parametrize("n", [64, 256, 4096, 64 * 200])
def test_load_vector_follows_the_pattern(n):
    cfg = get_config("default")
    V, Pv = cfg.VLEN, cfg.P_V
    t = ku.tensor(2, 1, n + 4 * Pv * V, eb=2)
    a = Asm()
    rows = load_vector(a, cfg, t, n, 128, REGS[:3])
    k = -(-n // V // Pv)
    assert rows == k * Pv
    want = [("C_SET_SCALE_REG", (t.scale_offset,))]
    want += [("H_PREFETCH_V", (128 + i * Pv * V, i * Pv * V * t.eb, "a2", "0", "0")) for i in range(k)]
    assert ku.operation_log(a.text(), cfg) == want


def test_static_size_does_not_grow_with_the_rows():
    cfg = get_config("default")
    sizes = []
    for rows_p in (128, 4096):
        a = Asm()
        preload_act(a, cfg, ku.tensor(3, rows_p, 1024, eb=2), rows_p, 1024, 0, rows_p, REGS)
        sizes.append(a.n_instructions)
    assert sizes[0] == sizes[1] < 40, sizes


def test_register_needs_are_named():
    cfg = get_config("default")
    t = ku.tensor(3, 4, 64, eb=2)
    with pytest.raises(ValueError, match="needs 4 gp registers"):
        preload_act(Asm(), cfg, t, 4, 64, 0, 4, REGS[:3])
    with pytest.raises(ValueError, match="needs 3 gp registers"):
        load_vector(Asm(), cfg, ku.tensor(2, 1, 256, eb=2), 64, 0, REGS[:2])
