"""Matrix unit on random tiles: the Numba core against the reference interpreter, word for word.

The core computes whole tiles with the outputs vectorised (docs/performance.md, "Matrix unit: vectorised
tiles"); every output must still be its own sequential float64 sum, so every accumulator word, VRAM word and the
outcome must be bit-identical to :mod:`plena_sim.reference`. Programs are legal sequences of all eight products
and the four write-outs (an illegal operand at the end of some, so the faults of the operand checks are compared
too) over configurations with small and large tiles: B, K, N not multiples of the SIMD width, BLEN = MLEN,
several blocks of rows (N = 128), the v80-128x64 tile shape, a 512-wide scratch (compact staging, blocked
transposes), BMM_SCALE 0.3 and 0.25. The operand data are clean (no NaN / Inf: the vectorised path only),
sparse (6 NaN / Inf / huge values in VRAM, 6 Inf / huge / -0 in MRAM: the NaN redo beside clean outputs) or
make_state's (dense specials and random bit patterns).
"""

from __future__ import annotations

import numpy as np
import pytest
from simhelpers import PLAIN_BF16, with_precision
from test_lockstep import _set_reg, clone_state, diff_outcomes, diff_states, make_state

from isa.disasm import disassemble_word
from isa.encoding import encode
from plena_sim import core, reference
from plena_sim.config import load_config

_SMALL = {
    "HBM_SIZE": 1 << 14,
    "HBM_V_Prefetch_Amount": 4,
    "HBM_V_Writeback_Amount": 4,
    "FP_SRAM_SIZE": 32,
    "INT_SRAM_SIZE": 32,
    "MAX_LOOP_INSTRUCTIONS": 1000,
}
#: plain bf16 HBM types (no MX block constraint on MLEN)
_PLAIN = with_precision(
    load_config(overrides={**_SMALL, "HBM_M_Prefetch_Amount": 16}),
    **{t: PLAIN_BF16 for t in ("HBM_M_WEIGHT_TYPE", "HBM_M_KV_TYPE", "HBM_V_ACT_TYPE", "HBM_V_KV_TYPE")},
)


def _cfg(M, B, H, rows, tiles, **more):
    keys = {"MLEN": M, "VLEN": M, "BLEN": B, "HLEN": H, "BROADCAST_AMOUNT": M // H, "HBM_M_Prefetch_Amount": M}
    return _PLAIN.with_overrides({**keys, "VECTOR_SRAM_SIZE": rows, "MATRIX_SRAM_SIZE": tiles * M, **more})


CONFIGS = {
    "m16_b4": _cfg(16, 4, 4, 80, 3),
    "m12_b3_scale": _cfg(12, 3, 3, 60, 2, BMM_SCALE=0.3),  # K, N, H not multiples of 4
    "m32_b8_scale": _cfg(32, 8, 8, 150, 2, BMM_SCALE=0.25),
    "m8_b8": _cfg(8, 8, 2, 48, 2),  # BLEN = MLEN
    "m24_b6": _cfg(24, 6, 6, 110, 2),
    "m128_b64": _cfg(128, 64, 16, 1100, 2, BMM_SCALE=0.3),  # the v80-128x64 tile; BMM sums in 4 row blocks
    "m512_b32": _cfg(512, 32, 128, 2100, 2),  # compact staging (scratch width >= 512), blocked transposes
}
#: configurations with wide tiles run fewer programs (the reference is slower there)
SEEDS = {name: range(16 if cfg.MLEN < 128 else 6 if cfg.MLEN < 512 else 2) for name, cfg in CONFIGS.items()}
DATA = ("clean", "sparse", "dense")

_PRODUCTS = ("M_MM", "M_TMM", "M_MV", "M_TMV", "M_BMM", "M_BTMM", "M_BMV", "M_BTMV")


def _product(cfg, rng, mn, out):
    """Words setting gp1 (matrix), gp2 (vector), gp3 (M_BMV / M_BTMV matrix offset) legally, then ``mn``."""
    M, B, H, rows, nt = cfg.MLEN, cfg.BLEN, cfg.HLEN, cfg.VECTOR_SRAM_SIZE, cfg.mram_tiles
    base = int(rng.integers(0, nt)) * M * M
    if mn in ("M_MM", "M_TMM", "M_TMV"):
        m = base + M * B * int(rng.integers(0, M // B))
    elif mn == "M_MV":
        m = base + B * int(rng.integers(0, M // B))
    else:
        m = base + H * int(rng.integers(0, M // H))
    nv = {"M_MM": B, "M_TMM": B, "M_BMM": M, "M_BTMM": M}.get(mn, 1)
    v = M * int(rng.integers(0, rows - nv + 1))
    moff = int(rng.integers(0, m + 1)) if mn in ("M_BMV", "M_BTMV") else 0
    for reg, value in ((1, m - moff), (2, v), (3, moff)):
        _set_reg(None, out, reg, value)
    if mn == "M_TMM":
        out.append(encode(mn, rs1=2, rs2=1))
    else:
        out.append(encode(mn, rd=3 if mn in ("M_BMV", "M_BTMV") else 0, rs1=1, rs2=2))


def _writeout(cfg, rng, mn, out):
    """Words writing the accumulator of ``mn`` out to a legal place (gp5 + imm; M_MM_WO pitch gp4 or 1)."""
    M, B, BA, rows = cfg.MLEN, cfg.BLEN, cfg.BROADCAST_AMOUNT, cfg.VECTOR_SRAM_SIZE
    if mn in ("M_MM", "M_TMM"):
        s = int(rng.integers(1, 4))
        addr = M * int(rng.integers(0, rows - (B - 1) * s)) + B * int(rng.integers(0, M // B))
        wo, stride = "M_MM_WO", 4 if s > 1 else 0
        _set_reg(None, out, 4, s)
    elif mn in ("M_MV", "M_TMV"):
        addr = M * int(rng.integers(0, rows)) + B * int(rng.integers(0, M // B))
        wo, stride = "M_MV_WO", 0
    else:
        n = BA * M if mn in ("M_BMM", "M_BTMM") else BA
        addr = M * int(rng.integers(0, rows - n + 1))
        wo, stride = "M_BMM_WO" if n > BA else "M_BMV_WO", 0
    imm = int(rng.integers(0, min(addr, 200) + 1))
    _set_reg(None, out, 5, addr - imm)
    out.append(encode(wo, rd=5, rs1=stride, imm18=imm))


def _illegal(cfg, rng, out):
    """A product with one bad operand (misaligned, or beyond MRAM / VRAM): the operand checks' fault."""
    mn = str(rng.choice(_PRODUCTS))
    _product(cfg, rng, mn, out)
    reg, bad = int(rng.integers(1, 3)), int(rng.choice([1, cfg.BLEN, cfg.MLEN, cfg.mram_tiles * cfg.MLEN**2]))
    out.insert(len(out) - 1, encode("S_ADDI_INT", rd=reg, rs1=reg, imm18=bad))


def _program(cfg, rng):
    """6 - 14 products, each accumulator written out now and then, sometimes an illegal product last."""
    out: list[int] = []
    for _ in range(int(rng.integers(6, 15))):
        mn = str(rng.choice(_PRODUCTS))
        _product(cfg, rng, mn, out)
        if rng.random() < 0.4:
            _writeout(cfg, rng, mn, out)
    if rng.random() < 0.3:
        _illegal(cfg, rng, out)
    return out


def _clean_bf16(rng, shape):
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape))).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def _plant(rng, flat, values):
    """Overwrite 6 random elements of ``flat`` with ``values``. NaNs go to VRAM only: a NaN in W would meet a NaN of
    X in the output at their crossing, where the reference's NaN choice is not reliable (:func:`_strict_nan`)."""
    idx = rng.integers(0, flat.size, size=6)
    flat[idx] = rng.choice(values, size=idx.size)


def _set_data(s, rng, kind):
    """VRAM / MRAM / accumulators: clean (finite, no NaN), sparse (clean + 6 specials in each of VRAM (NaN, Inf,
    huge) and MRAM (Inf, huge, -0)), dense (make_state's: 5.5 % specials and random bit patterns)."""
    if kind == "dense":
        return
    s.vram[...] = _clean_bf16(rng, s.vram.shape)
    s.mram[...] = (rng.standard_normal(s.mram.shape) * np.exp2(rng.integers(-6, 7, s.mram.shape))).astype(np.float32)
    for name in ("m_accum", "v_accum", "hm_accum", "hv_accum"):
        a = getattr(s, name)
        a[...] = rng.standard_normal(a.shape).astype(np.float32)
    if kind == "sparse":
        _plant(rng, s.vram.reshape(-1), np.array([0x7FC0, 0xFFC1, 0x7F80, 0xFF80, 0x7F7F, 0x7FA5], np.uint16))
        _plant(rng, s.mram.reshape(-1), np.array([np.inf, -np.inf, 3.0e38, -0.0], np.float32))


def _strict_nan(kind):
    """NaN payloads are compared bit for bit except on dense specials, where sums often add two NaNs: the
    reference's ``_dot_rows`` (``p + X*W`` in numpy) then returns the second NaN in numpy's unaligned / tail SIMD
    lanes (``np.full(6, -nan) + np.full(6, nan)`` gives +nan in lanes 4 and 5), against the first-NaN rule the core
    keeps; which lanes depends on the temporaries' alignment. Non-strict still demands NaN at the same places and
    every other word identical (the sign / payload of a NaN never reaches a number)."""
    return kind != "dense"


def _run(cfg, words, seed, kind):
    s_ref = make_state(cfg, seed)
    _set_data(s_ref, np.random.default_rng(seed + 1000), kind)
    s_jit = clone_state(s_ref)
    timing = "overlap" if seed % 2 else "serial"
    # a work budget that every straight-line program here fits (a 512-wide M_BMM alone is thousands of units)
    o_ref = reference.execute(s_ref, words, 10**9, timing=timing)
    o_jit = core.execute(s_jit, words, 10**9, timing=timing)
    diffs = diff_outcomes(o_ref, o_jit) + diff_states(s_ref, s_jit, strict_nan=_strict_nan(kind))
    listing = "\n".join(f"  {pc:3d}: {disassemble_word(w)}" for pc, w in enumerate(words))
    assert not diffs, f"seed {seed}, data {kind}:\n" + "\n".join(diffs) + "\nprogram:\n" + listing
    return o_ref, words, s_ref


@pytest.mark.parametrize("kind", DATA)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_random_tiles_bit_identical(name, kind):
    cfg = CONFIGS[name]
    macs = faults = nans = 0
    for seed in SEEDS[name]:
        rng = np.random.default_rng(seed)
        o, words, s = _run(cfg, _program(cfg, rng), seed, kind)
        faults += o.fault is not None
        assert o.fault is not None or o.retired == len(words)
        macs += o.counters["matrix_macs"]
        nans += sum(int(np.isnan(getattr(s, a)).sum()) for a in ("m_accum", "v_accum", "hm_accum", "hv_accum"))
    assert macs > 0 and faults < len(SEEDS[name])  # the programs really multiplied (and mostly ran to the end)
    if kind == "clean":
        assert nans == 0  # the vectorised path only
    elif cfg.MLEN < 512:  # (6 specials in a 2100 x 512 VRAM seldom reach a product of two programs)
        assert nans > 0  # the NaN redo ran


def test_clean_tiles_have_no_nan_and_change_every_accumulator():
    """The clean data really take the vectorised path: finite results, and every product changes its outputs."""
    cfg = CONFIGS["m32_b8_scale"]
    for mn in _PRODUCTS:
        out: list[int] = []
        _product(cfg, np.random.default_rng(5), mn, out)
        s = make_state(cfg, 5)
        _set_data(s, np.random.default_rng(6), "clean")
        before = {n: getattr(s, n).copy() for n in ("m_accum", "v_accum", "hm_accum", "hv_accum")}
        _run(cfg, out, 5, "clean")
        core.execute(s, out, 100)
        name = {"M_MM": "m_accum", "M_TMM": "m_accum", "M_MV": "v_accum", "M_TMV": "v_accum"}.get(mn, "hm_accum")
        name = "hv_accum" if mn in ("M_BMV", "M_BTMV") else name
        acc = getattr(s, name)
        assert np.isfinite(acc).all() and (acc != before[name]).all(), mn
