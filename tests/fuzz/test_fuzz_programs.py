"""Fuzz: random programs on the Numba core and the reference interpreter, on random machine state.

Every run must end in success or a typed :class:`~plena_sim.faults.SimFault` within its instruction
budget, never raise anything else (and never crash the process), and the two backends must agree
exactly: the same fault record (rule, pc, operand, values) or none, the same retired count, cycles,
per-opcode counts and counters, and bit-identical final state (registers, loop stack, every memory,
every accumulator, every HBM byte).

Default CI size: 4000 seeded programs + 1000 hypothesis programs + 600 raw-word programs on two small
configs, plus ~300 programs on 40 random configurations (odd sizes, DMA amounts beyond the memories,
random HBM types) -- ``PLENA_FUZZ_SCALE`` multiplies. A seeded failure names its seed:
``run_case(seed)`` / ``run_config_case(seed)`` replays it.
"""

from __future__ import annotations

import dataclasses
import random
from types import MappingProxyType

import numpy as np
import pytest
from fuzzlib import (
    BASE_SEED,
    copy_state,
    count,
    diff_digest,
    hyp_settings,
    outcome_key,
    randomize_state,
    small_config,
    state_digest,
)
from hypothesis import given
from hypothesis import strategies as st
from proggen import gen_program

from plena_sim import faults as F
from plena_sim.config import ConfigError, FpType, MxType, PlainType, load_config
from plena_sim.machine import Machine

pytestmark = pytest.mark.fuzz

_E8M0 = FpType(False, 8, 0)


def _configs():
    base = small_config()  # MXFP8 HBM types (block 8), DC_EN = 1
    plain = dataclasses.replace(
        small_config(
            DC_EN=0, BMM_SCALE=0.25, HBM_V_Prefetch_Amount=3, HBM_V_Writeback_Amount=2, MAX_LOOP_INSTRUCTIONS=25
        ),
        precision=MappingProxyType(
            {
                **base.precision,
                "HBM_M_WEIGHT_TYPE": PlainType(FpType(True, 8, 7)),
                "HBM_V_ACT_TYPE": PlainType(FpType(True, 8, 23)),
                "HBM_V_KV_TYPE": MxType(FpType(True, 5, 10), _E8M0, 16),
                "HBM_M_KV_TYPE": MxType(FpType(True, 5, 2), _E8M0, 4),
            }
        ),
    )
    return [base, plain]


CONFIGS = _configs()
_MACHINES: dict[tuple[int, str], Machine] = {}
BUDGETS = (0, 1, 7, 50, 200, 500, 500, 500)


def machine(cfg_index: int, backend: str) -> Machine:
    """One machine per (config, backend), reused across cases (state is reset by randomize_state)."""
    key = (cfg_index, backend)
    if key not in _MACHINES:
        _MACHINES[key] = Machine(CONFIGS[cfg_index], backend=backend)
    return _MACHINES[key]


def check_run(words, state_seed: int, budget: int, cfg_index: int, tame: bool, label: str) -> str:
    """Run ``words`` on both backends from the same random state; assert the contract; return the
    rule id of the fault (or 'ok')."""
    mn, mr = machine(cfg_index, "numba"), machine(cfg_index, "reference")
    randomize_state(mn, np.random.default_rng(state_seed), tame=tame)
    copy_state(mn, mr)
    results = {}
    for m in (mn, mr):
        try:
            results[m.backend] = m.run(words, max_instructions=budget, raise_on_fault=False)
        except Exception as exc:  # noqa: BLE001 - anything but a SimFault record is a bug
            raise AssertionError(
                f"{label}: backend {m.backend} raised {type(exc).__name__}: {exc}\nwords={[hex(w) for w in words]}"
            ) from exc
    a, b = results["numba"], results["reference"]
    for res in (a, b):
        assert 0 <= res.instructions <= budget, (label, res.instructions, budget)
        assert res.cycles >= 0, label
        if res.fault is not None:
            assert isinstance(res.fault, F.SimFault), label
            rule = F.RULE_BY_ID[res.fault.rule]
            assert type(res.fault) is rule.cls, (label, res.fault)
            assert 0 <= res.fault.pc < len(words), (label, res.fault.pc)
            assert str(res.fault)
        else:
            assert res.stats["fault"] is None
    ka, kb = outcome_key(a), outcome_key(b)
    assert ka == kb, (
        f"{label}: outcomes differ\n numba:     {ka[:3]} {ka[4]}\n reference: {kb[:3]} {kb[4]}\n"
        f"words={[hex(w) for w in words]}"
    )
    diff = diff_digest(state_digest(mn), state_digest(mr))
    assert not diff, f"{label}: final state differs in {diff}; words={[hex(w) for w in words]}"
    return a.fault.rule if a.fault is not None else "ok"


def run_case(seed: int) -> str:
    """The seeded case ``seed`` (replay a failure with ``run_case(seed)``)."""
    r = random.Random(seed)
    tame = r.random() < 0.5
    words = gen_program(r, r.randrange(1, 31), tame=tame)
    return check_run(words, seed, r.choice(BUDGETS), seed % len(CONFIGS), tame, f"seed {seed}")


def test_fuzz_programs_seeded():
    n = count(4000)
    seen = {}
    for seed in range(BASE_SEED, BASE_SEED + n):
        rule = run_case(seed)
        seen[rule] = seen.get(rule, 0) + 1
    # the campaign must reach every outcome class (a generator regression would silently weaken it)
    if n >= 4000:
        # TO-DATA: only a timing-only run can break it (these runs are functional)
        missing = {r.id for r in F.RULES} - set(seen) - {"CF-VM", "CF-BA", "TO-DATA"}
        assert not missing, f"campaign never produced {sorted(missing)}; outcomes: {seen}"
        assert seen.get("ok", 0) > n // 50


@hyp_settings(1000)
@given(
    r=st.randoms(use_true_random=False),
    n=st.integers(1, 30),
    state_seed=st.integers(0, 2**32 - 1),
    budget=st.sampled_from(BUDGETS),
    cfg_index=st.integers(0, len(CONFIGS) - 1),
    tame=st.booleans(),
)
def test_fuzz_programs_hypothesis(r, n, state_seed, budget, cfg_index, tame):
    words = gen_program(r, n, tame=tame)
    check_run(words, state_seed, budget, cfg_index, tame, "hypothesis")


@hyp_settings(600)
@given(
    words=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=30),
    state_seed=st.integers(0, 2**32 - 1),
    budget=st.sampled_from(BUDGETS),
    cfg_index=st.integers(0, len(CONFIGS) - 1),
)
def test_fuzz_raw_words(words, state_seed, budget, cfg_index):
    """Arbitrary 32-bit words (mostly illegal opcodes or fields)."""
    check_run(words, state_seed, budget, cfg_index, False, "raw words")


def test_fuzz_runaway_and_budget_limits():
    """The two hard limits end runaway programs with their typed faults, on both backends."""
    from isa import assemble

    spin = assemble(
        "C_LOOP_START gp1, 4194303\nC_LOOP_START gp2, 4194303\nS_ADDI_INT gp3, gp3, 1\nC_LOOP_END gp2\nC_LOOP_END gp1\n"
    )
    for backend in ("numba", "reference"):
        m = machine(0, backend)
        randomize_state(m, np.random.default_rng(1), tame=True)
        res = m.run(spin, max_instructions=10**6, raise_on_fault=False)
        assert isinstance(res.fault, F.LoopFault) and res.fault.rule == "LP-RUNAWAY"
        assert "MAX_LOOP_INSTRUCTIONS=60" in str(res.fault)
        flat = assemble("C_LOOP_START gp1, 4194303\nS_ADDI_INT gp3, gp3, 1\nC_LOOP_END gp1\n")
        res = m.run(flat, max_instructions=1000, raise_on_fault=False)
        assert isinstance(res.fault, F.InstructionBudgetExceeded) and res.instructions == 1000
        assert "max_instructions=1000" in str(res.fault)


# ------------------------------------------------------------------------------ random configurations


def random_config(r: random.Random):
    """A small random valid configuration: odd SRAM / HBM sizes (down to 0 VRAM rows, 0 MRAM tiles, a
    1-byte HBM), DMA amounts beyond the memories, MAX_LOOP_INSTRUCTIONS down to 1, any BMM_SCALE, random
    Plain / MX HBM types (block dividing MLEN). None if the draw is not a valid config."""
    M = r.choice([4, 8, 16, 32])
    H = r.choice([h for h in (1, 2, 4, 8, 16, 32) if h <= M])
    B = r.choice([b for b in (1, 2, 4, 8) if b <= M])
    amounts = [1, 2, 3, 4, 7, 16, 1000]
    ov = dict(
        MLEN=M,
        VLEN=M,
        BLEN=B,
        HLEN=H,
        BROADCAST_AMOUNT=M // H,
        VECTOR_SRAM_SIZE=r.choice([0, 1, 7, 64, 300]),
        MATRIX_SRAM_SIZE=r.choice([0, M - 1, M, 3 * M, 5 * M]),
        HBM_SIZE=r.choice([1, 100, 4096, 65536, 65537, 200000]),
        HBM_M_Prefetch_Amount=r.choice(amounts),
        HBM_V_Prefetch_Amount=r.choice(amounts),
        HBM_V_Writeback_Amount=r.choice(amounts),
        MAX_LOOP_INSTRUCTIONS=r.choice([1, 2, 5, 100]),
        FP_SRAM_SIZE=r.choice([1, 7, 64, 1024]),
        INT_SRAM_SIZE=r.choice([1, 7, 64, 1024]),
        DC_EN=r.choice([0, 1]),
        BMM_SCALE=r.choice([0.0, 0.25, 1.0, -3.5, 1e38]),
    )
    try:
        cfg = load_config(overrides=ov)
    except ConfigError:
        return None
    elems = [FpType(True, 4, 3), FpType(True, 5, 2), FpType(True, 5, 10), FpType(True, 8, 7)]
    types = {}
    for name in ("HBM_M_WEIGHT_TYPE", "HBM_M_KV_TYPE", "HBM_V_ACT_TYPE", "HBM_V_KV_TYPE"):
        k = r.randrange(5)
        if k == 0:
            types[name] = PlainType(r.choice(elems + [FpType(True, 8, 23)]))
        elif k == 1:
            types[name] = MxType(r.choice(elems), _E8M0, r.choice([b for b in (1, 2, 4, 8, 32) if M % b == 0]))
    if types:
        cfg = dataclasses.replace(cfg, precision=MappingProxyType({**cfg.precision, **types}))
    return cfg


def test_fuzz_programs_random_configs():
    """40 random configurations x 10 programs (``run_config_case(seed)`` replays one configuration)."""
    for cseed in range(BASE_SEED, BASE_SEED + count(40)):
        run_config_case(cseed)


def run_config_case(cseed: int, programs: int = 10) -> None:
    r = random.Random(cseed)
    cfg = random_config(r)
    if cfg is None:
        return
    CONFIGS.append(cfg)
    index = len(CONFIGS) - 1
    try:
        for k in range(programs):
            seed = cseed * 1000 + k
            pr = random.Random(seed)
            tame = pr.random() < 0.5
            words = gen_program(pr, pr.randrange(1, 25), V=cfg.VLEN, tame=tame)
            check_run(words, seed, pr.choice((0, 5, 100, 300)), index, tame, f"config seed {cseed}, program {k}")
    finally:
        CONFIGS.pop()
        _MACHINES.pop((index, "numba"), None)
        _MACHINES.pop((index, "reference"), None)
