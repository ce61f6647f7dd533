"""loop: hardware-loop semantics L1-L9 (kernels.md §4.4), recorded with S_ST_INT; exact.

L1 counter trace of a loop of 5; L2 3x4 nested (outer, inner) pairs; L3 count-1 loop; L4 C_BREAK mid-body;
L5 break in an inner loop exits only the inner loop; L6 64-iteration vector loop ``x_i + 1.0``; negative
cases: L7 ``C_LOOP_START`` count 0 (assembler error or LoopFault), L8 a body longer than
MAX_LOOP_INSTRUCTIONS = 100 (LoopFault or budget fault), L9 ``C_LOOP_END`` without a start (LoopFault).
INT SRAM words [0, 64) start as a sentinel so that "never written" is visible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plena_sim.config import HardwareConfig
from programs.asm import fp as F
from programs.asm import gp as G
from programs.asm import load_imm
from programs.hbm_tensors import preload_act

from .harness import GEN_GP, Case, CaseBuilder, CaseSpec, IntWords, VramRows

NAME = "loop"
DESCRIPTION = "hardware loop semantics: counts, nesting, C_BREAK, count 0/1, runaway and unmatched ends"
DEFAULTS = {"program": "L1", "seed": 0}
REQUIRED_CASES = [(f"L{i}", {"program": f"L{i}"}, "default") for i in range(1, 10)] + [
    ("L6_small", {"program": "L6"}, "small"),
]
STRETCH_CASES: list[CaseSpec] = []
RANGES = {"program": [f"L{i}" for i in range(1, 10)]}

SENTINEL = 0xDEADBEEF
NWORDS = 64


def _int_check(cb: CaseBuilder, expected: dict[int, int]) -> None:
    g = np.full(NWORDS, SENTINEL, dtype=np.uint32)
    for k, v in expected.items():
        g[k] = v
    cb.check("int_trace", IntWords(0, NWORDS), g, ("word",), "exact")


def build(params: Mapping[str, Any], config: HardwareConfig) -> Case:
    p = dict(DEFAULTS, **params)
    prog = p["program"]
    if prog == "L8":
        config = config.with_overrides({"MAX_LOOP_INSTRUCTIONS": 100})
    cb = CaseBuilder(NAME, p, config)
    cb.int_words(0, np.full(NWORDS, SENTINEL, dtype=np.uint32))
    a = cb.asm()
    if prog == "L1":
        a.S_ADDI_INT(G(2), G(0), 0)
        a.C_LOOP_START(G(1), 5)
        a.S_ST_INT(G(1), G(2), 0)
        a.S_ADDI_INT(G(2), G(2), 1)
        a.C_LOOP_END(G(1))
        a.S_ST_INT(G(1), G(0), 10)
        _int_check(cb, {0: 5, 1: 4, 2: 3, 3: 2, 4: 1, 10: 0})
    elif prog == "L2":
        a.S_ADDI_INT(G(2), G(0), 0)
        a.C_LOOP_START(G(1), 3)
        a.C_LOOP_START(G(3), 4)
        a.S_ST_INT(G(1), G(2), 0)
        a.S_ST_INT(G(3), G(2), 1)
        a.S_ADDI_INT(G(2), G(2), 2)
        a.C_LOOP_END(G(3))
        a.C_LOOP_END(G(1))
        exp = {}
        k = 0
        for o in (3, 2, 1):
            for i in (4, 3, 2, 1):
                exp[k], exp[k + 1] = o, i
                k += 2
        _int_check(cb, exp)
    elif prog == "L3":
        a.C_LOOP_START(G(1), 1)
        a.S_ADDI_INT(G(4), G(4), 1)
        a.S_ST_INT(G(4), G(0), 0)
        a.C_LOOP_END(G(1))
        a.S_ST_INT(G(1), G(0), 1)
        _int_check(cb, {0: 1, 1: 0})
    elif prog == "L4":
        a.S_ADDI_INT(G(5), G(0), 11)  # marker B value
        a.S_ADDI_INT(G(7), G(0), 12)  # "after the loop" marker
        a.C_LOOP_START(G(1), 5)
        a.S_ADDI_INT(G(4), G(4), 1)
        a.S_ST_INT(G(4), G(0), 0)  # marker A: executions of the first half
        a.C_BREAK()
        a.S_ST_INT(G(5), G(0), 1)  # marker B: never
        a.C_LOOP_END(G(1))
        a.S_ST_INT(G(7), G(0), 2)
        a.S_ST_INT(G(1), G(0), 3)
        _int_check(cb, {0: 1, 2: 12, 3: 0})
    elif prog == "L5":
        a.C_LOOP_START(G(1), 3)
        a.C_LOOP_START(G(3), 4)
        a.S_ADDI_INT(G(4), G(4), 1)
        a.C_BREAK()
        a.S_ADDI_INT(G(8), G(8), 1)  # never
        a.C_LOOP_END(G(3))
        a.S_ADDI_INT(G(5), G(5), 1)
        a.C_LOOP_END(G(1))
        a.S_ST_INT(G(4), G(0), 0)
        a.S_ST_INT(G(5), G(0), 1)
        a.S_ST_INT(G(8), G(0), 2)
        a.S_ST_INT(G(3), G(0), 3)
        _int_check(cb, {0: 3, 1: 3, 2: 0, 3: 0})
    elif prog == "L6":
        V = config.VLEN
        n = 64
        tx, X = cb.tensor("x", cb.randn((n, V)), "act")
        rx = cb.rows(n, "x", "input")
        ro = cb.rows(n, "out", "output")
        preload_act(a, config, tx, n, V, rx * V, n, GEN_GP)
        a.S_LD_FP(F(1), G(0), 3)
        load_imm(a, 2, rx * V)
        load_imm(a, 3, ro * V)
        a.C_LOOP_START(G(1), n)
        a.V_ADD_VF(G(3), G(2), F(1), 0)
        a.S_ADDI_INT(G(2), G(2), V)
        a.S_ADDI_INT(G(3), G(3), V)
        a.C_LOOP_END(G(1))
        from .compare import bf16_decode, bf16_encode

        golden = bf16_decode(bf16_encode(X.astype(np.float32) + np.float32(1.0))).astype(np.float64)
        cb.check("output", VramRows(ro * V, n), golden, ("row", "lane"), "exact")
        _int_check(cb, {})
    elif prog == "L7":
        # C_LOOP_START with count 0 cannot be emitted through Asm (it refuses it); raw text on purpose
        return cb.case(
            a.text() + "C_LOOP_START gp1, 0\nS_ADDI_INT gp2, gp2, 1\nC_LOOP_END gp1\n", expect=("assembler", "LP-ZERO")
        )
    elif prog == "L8":
        a.C_LOOP_START(G(1), 2)
        for _ in range(150):
            a.S_ADDI_INT(G(2), G(2), 1)
        a.C_LOOP_END(G(1))
        return cb.case(a, expect=("LP-RUNAWAY", "BUDGET"))
    elif prog == "L9":
        a.S_ADDI_INT(G(2), G(0), 1)
        a.C_LOOP_END(G(1))
        return cb.case(a, expect=("LP-NOMATCH",))
    else:
        raise ValueError(f"loop: program={prog!r} must be one of L1..L9")
    return cb.case(a)
