"""Shared helpers of the fuzz campaigns (tests/fuzz): scale, small configs, machine reset, comparison.

Scale: every campaign runs ``count(n)`` cases, ``n`` being its default-CI size times the integer (or
float) env ``PLENA_FUZZ_SCALE`` (default 1). Hypothesis-driven campaigns are derandomized (same examples
every run, so CI cannot flake) unless ``PLENA_FUZZ_RANDOM=1``; the seeded (numpy / random) campaigns
take their base seed from ``PLENA_FUZZ_SEED`` (default 0) and name the failing seed in the message.

Imported by the test modules of tests/fuzz (pytest puts this directory on sys.path).
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, settings

from plena_sim.hbm.storage import NO_PAGE
from plena_sim.memory.state import CTRL_LOOP_DEPTH, CTRL_PC, CTRL_SCALE, CTRL_STRIDE, CTRL_V_MASK

SCALE = float(os.environ.get("PLENA_FUZZ_SCALE", "1") or 1)
RANDOM = os.environ.get("PLENA_FUZZ_RANDOM", "") == "1"
BASE_SEED = int(os.environ.get("PLENA_FUZZ_SEED", "0") or 0)


def count(n: int) -> int:
    """Cases of a campaign whose default-CI size is ``n``."""
    return max(1, int(round(n * SCALE)))


def hyp_settings(n: int, **kw) -> settings:
    """Hypothesis settings for a campaign of default size ``n`` (scaled, no deadline, quiet)."""
    return settings(
        max_examples=count(n),
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
        **kw,
    )


#: the small machine of the fuzz campaigns: M = V = 16, B = H = BA = 4, small SRAMs and HBM
SMALL = {
    "MLEN": 16,
    "VLEN": 16,
    "BLEN": 4,
    "HLEN": 4,
    "BROADCAST_AMOUNT": 4,
    "VECTOR_SRAM_SIZE": 256,
    "MATRIX_SRAM_SIZE": 64,  # 256 VRAM rows, 4 MRAM tiles
    "HBM_SIZE": 3 << 15,
    "HBM_M_Prefetch_Amount": 16,
    "HBM_V_Prefetch_Amount": 4,
    "HBM_V_Writeback_Amount": 4,
    "MAX_LOOP_INSTRUCTIONS": 60,
    "FP_SRAM_SIZE": 1024,
    "INT_SRAM_SIZE": 1024,
}


def small_config(**overrides):
    from plena_sim.config import load_config

    return load_config(overrides={**SMALL, **overrides})


# ----------------------------------------------------------------------------------- machine state


def reset_hbm(hbm) -> None:
    """Forget every HBM page (the pool keeps its capacity; all bytes read as 0 again)."""
    hbm.page_index[:] = NO_PAGE
    hbm.pages[:] = 0
    hbm.meta[0] = 0
    hbm.meta[1] = 0


def randomize_state(m, rng: np.random.Generator, tame: bool = False) -> None:
    """Fill every architectural array of machine ``m`` from ``rng`` (registers biased toward values
    that are legal addresses on the config, memories with arbitrary bit patterns incl. NaN / Inf).
    ``tame``: every gp register and INT SRAM word holds such an address, a-registers and SCALE are small."""
    st, cfg = m.state, m.cfg
    M, V = cfg.MLEN, cfg.VLEN
    pool_gp = np.array(
        [
            0,
            1,
            2,
            3,
            4,
            8,
            12,
            V,
            2 * V,
            3 * V,
            5 * V,
            17 * V,
            M * M,
            2 * M * M,
            cfg.VECTOR_SRAM_SIZE * V - V,
            cfg.VECTOR_SRAM_SIZE * V,
            64,
            128,
            256,
            1024,
            cfg.FP_SRAM_SIZE - 1,
            cfg.INT_SRAM_SIZE - 1,
            0x7FFFFFFF,
            0xFFFFFFFF,
            max(0, cfg.HBM_SIZE - 64),
        ],
        dtype=np.int64,
    )
    # addresses legal for nearly every role: VRAM rows, MRAM tiles, FP/INT SRAM words, MX HBM offsets
    good = np.array([0, 0, V, 2 * V, 3 * V, M * M, 2 * M * M], dtype=np.int64)
    u = rng.random(16)
    gp = np.where(
        u < 0.8,
        rng.choice(good, 16),
        np.where(u < 0.93, rng.choice(pool_gp, 16), rng.integers(0, 1 << 32, 16, dtype=np.int64)),
    )
    if tame:
        gp = rng.choice(good, 16)
    gp[0] = 0
    st.gp[:] = gp.astype(np.uint32)
    fp_pool = np.array(
        [0x0000, 0x3F80, 0xBF80, 0x4000, 0x3F00, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8000, 0x7F7F, 0xC2C8],
        dtype=np.uint16,
    )
    fp = np.where(rng.random(8) < 0.7, rng.choice(fp_pool, 8), rng.integers(0, 1 << 16, 8))
    fp[0] = 0
    st.fp[:] = fp.astype(np.uint16)
    a_pool = np.array(
        [0, 64, 256, 4096, max(0, cfg.HBM_SIZE - 256), cfg.HBM_SIZE, 1 << 32, (1 << 63) + 5, (1 << 64) - 1],
        dtype=np.uint64,
    )
    areg = rng.choice(a_pool, 8)
    areg[rng.random(8) < 0.6] = 0
    rand_a = rng.random(8) < 0.1
    areg[rand_a] = rng.integers(0, 1 << 63, int(rand_a.sum()), dtype=np.int64).astype(np.uint64)
    if tame:
        areg[:] = rng.choice(np.array([0, 0, 64, 4096], dtype=np.uint64), 8)
    st.areg[:] = areg
    st.ctrl[:] = 0
    st.ctrl[CTRL_SCALE] = int(rng.choice([0, 64, 256, 256, 1024, 4096, int(rng.integers(0, 1 << 32))]))
    st.ctrl[CTRL_STRIDE] = int(rng.choice([0, 1, 1, 1, 1, 2, 3, int(rng.integers(0, 1 << 32))]))
    st.ctrl[CTRL_V_MASK] = int(rng.choice([0, 1, 0xF, 0xFFFFFFFF, int(rng.integers(0, 1 << 32))]))
    st.ctrl[CTRL_PC] = 0
    st.ctrl[CTRL_LOOP_DEPTH] = 0
    st.loop_start[:] = 0
    st.loop_reg[:] = 0
    st.loop_count[:] = 0
    # memories: mostly finite values, some raw bit patterns (NaN payloads, infinities, subnormals)
    st.vram[:] = _bf16_noise(rng, st.vram.shape)
    st.fp_sram[:] = _bf16_noise(rng, st.fp_sram.shape)
    st.mram[:] = rng.standard_normal(st.mram.shape).astype(np.float32)
    if rng.random() < 0.3 and st.mram.size:
        flat = st.mram.reshape(-1)
        k = rng.integers(0, flat.size, 4)
        flat[k] = np.array([np.inf, -np.inf, np.nan, 3e38], dtype=np.float32)
    st.int_sram[:] = (
        rng.choice(good, st.int_sram.shape) if tame else rng.integers(0, 1 << 32, st.int_sram.shape, dtype=np.int64)
    ).astype(np.uint32)
    if tame:
        st.ctrl[CTRL_SCALE] = 256
        st.ctrl[CTRL_STRIDE] = 1
    for name in ("m_accum", "v_accum", "hm_accum", "hv_accum"):
        a = getattr(st, name)
        a[:] = rng.standard_normal(a.shape).astype(np.float32) if rng.random() < 0.5 else 0.0
    reset_hbm(st.hbm)
    for _ in range(int(rng.integers(0, 4))):
        n = int(rng.integers(1, min(2048, cfg.HBM_SIZE) + 1))
        addr = int(rng.integers(0, cfg.HBM_SIZE - n + 1))
        st.hbm.write(addr, rng.integers(0, 256, n, dtype=np.int64).astype(np.uint8))


def _bf16_noise(rng, shape) -> np.ndarray:
    vals = (rng.standard_normal(shape) * 4).astype(np.float32)
    bits = (vals.view(np.uint32) >> 16).astype(np.uint16)
    raw = rng.random(shape) < 0.05
    bits[raw] = rng.integers(0, 1 << 16, int(raw.sum())).astype(np.uint16)
    return bits


def copy_state(src, dst) -> None:
    """Make machine ``dst``'s architectural state bit-identical to ``src``'s (same config)."""
    s, d = src.state, dst.state
    for name in type(s).ARRAYS:
        getattr(d, name)[...] = getattr(s, name)
    for name in ("loop_start", "loop_reg", "loop_count"):
        setattr(d, name, getattr(s, name).copy())
    reset_hbm(d.hbm)
    d.hbm.reserve(s.hbm.pages_used)
    d.hbm.page_index[:] = s.hbm.page_index
    d.hbm.pages[: s.hbm.pages_used] = s.hbm.pages[: s.hbm.pages_used]
    d.hbm.meta[:] = s.hbm.meta


def state_digest(m) -> dict:
    """Every architectural array as raw bytes (NaNs compare by payload), the loop stack and all HBM
    bytes, for exact comparison between backends or runs."""
    st = m.state
    out = {name: np.ascontiguousarray(getattr(st, name)).tobytes() for name in st.ARRAYS}
    out["loop_stack"] = tuple(st.loop_stack)
    out["hbm"] = st.hbm.read(0, st.hbm.size).tobytes()
    out["hbm_high_water"] = st.hbm.high_water
    return out


def diff_digest(a: dict, b: dict) -> list[str]:
    return [k for k in a if a[k] != b[k]]


def outcome_key(res) -> tuple:
    """What must agree between backends about one run."""
    o = res.outcome
    return (o.retired, o.fault, o.cycles, tuple(int(x) for x in o.by_opcode), tuple(sorted(o.counters.items())))
