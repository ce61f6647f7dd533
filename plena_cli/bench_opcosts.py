"""The per-opcode cost microbenchmark (``python -m plena_cli.bench --op-costs``; docs/performance.md).

One instruction repeated in a hardware loop on the default machine; the cost per retired instruction is
(time - empty-loop time) / count, median of ``repeat`` runs.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from isa.program import Program

#: opcode microbenchmarks (``python -m plena_cli.bench --op-costs``): one instruction repeated in a
#: hardware loop; the cost per instruction is (time - empty-loop time) / count.  gp1 = VRAM row 0,
#: gp2 = VRAM row 1 (element 64), gp3 = VRAM row 2, gp4 = MRAM tile 0; f1 = 1.5.
OP_COST_LINES = {
    "S_ADDI_INT": "S_ADDI_INT gp6, gp6, 1",
    "S_ADD_FP": "S_ADD_FP f2, f1, f1",
    "S_EXP_FP": "S_EXP_FP f2, f1",
    "V_ADD_VV": "V_ADD_VV gp3, gp1, gp2",
    "V_ADD_VV masked": "V_ADD_VV gp3, gp1, gp2, 1",
    "V_MUL_VF": "V_MUL_VF gp3, gp1, f1",
    "V_EXP_V": "V_EXP_V gp3, gp1",
    "V_RED_MAX": "V_RED_MAX f2, gp1",
    "V_RED_SUM": "V_RED_SUM f2, gp1",
    "M_MM": "M_MM 0, gp4, gp1",
    "M_TMM": "M_TMM 0, gp1, gp4",
    "M_MM_WO": "M_MM_WO gp3, gp0, 0",
    "M_BTMM": "M_BTMM 0, gp4, gp1",
    "M_BMM_WO": "M_BMM_WO gp7, 0",
}


#: loop counts of the expensive opcodes (the rest use ``n``)
OP_COST_N = {"M_MM": 2000, "M_TMM": 2000, "M_BTMM": 20, "M_BMM_WO": 200, "M_MM_WO": 2000}


def op_costs(n: int = 20000, unroll: int = 10, repeat: int = 3) -> dict[str, float]:
    """Seconds per retired instruction of each :data:`OP_COST_LINES` entry (median of ``repeat``)."""
    import numpy as np

    from isa.assembler import assemble
    from plena_sim import core
    from plena_sim.machine import Machine
    from testbenches.variants import get_config

    core.warm_up()
    cfg = get_config("default")

    def prog(line: str | None, n: int) -> Program:
        pre = [
            "S_ADDI_INT gp1, gp0, 0",
            "S_ADDI_INT gp2, gp0, 64",
            "S_ADDI_INT gp3, gp0, 128",
            "S_ADDI_INT gp4, gp0, 0",
            "S_ADDI_INT gp7, gp0, 1024",
            "S_LD_FP f1, gp0, 1",
            f"C_LOOP_START gp5, {n}",
        ]
        return assemble("\n".join(pre + ([line] * unroll if line else []) + ["C_LOOP_END gp5"]) + "\n", "op.asm")

    def timed(p: Program) -> tuple[float, int]:
        ts = []
        for _ in range(repeat):
            m = Machine(cfg)
            m.write_fp_sram(0, [0.0, 1.5])
            m.vram.write(0, np.linspace(-2, 2, 4 * cfg.VLEN).reshape(4, cfg.VLEN))
            t0 = time.perf_counter()
            r = m.run(p, raise_on_fault=True)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts), r.instructions

    out: dict[str, float] = {}
    for name, line in OP_COST_LINES.items():
        k = OP_COST_N.get(name, n)
        base, _ = timed(prog(None, k))
        t, _n = timed(prog(line, k))
        out[name] = max(t - base, 0.0) / (k * unroll)
    return out
