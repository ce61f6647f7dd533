"""``plena-sim demo``: run a built-in program and check its output against a host golden bit for bit."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .errors import EXIT_MISMATCH, EXIT_OK
from .options import add_backend_arg, examples
from .render import run_summary

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register", "cmd_demo", "DEMO_ASM"]

DEMO_ASM = """\
; plena-sim demo: scale a 4x64 activation by 1.5 through HBM (MXFP8), with a hardware loop
S_ADDI_INT gp1, gp0, 0          ; a0 = HBM byte 0 (the activation)
C_SET_ADDR_REG a0, gp0, gp1
S_ADDI_INT gp2, gp0, 256        ; SCALE = element bytes (4 rows x 64 x 1 byte)
C_SET_SCALE_REG gp2
S_LD_FP f1, gp0, 0              ; f1 = 1.5 (FP SRAM word 0)
H_PREFETCH_V gp0, gp0, a0, 0, 0 ; VRAM rows 0..3 <- HBM
S_ADDI_INT gp3, gp0, 0          ; row pointer
C_LOOP_START gp4, 4
V_MUL_VF gp3, gp3, f1           ; row *= 1.5
S_ADDI_INT gp3, gp3, 64
C_LOOP_END gp4
S_ADDI_INT gp5, gp0, 1024       ; store to HBM byte 1024
C_SET_ADDR_REG a1, gp0, gp5
H_STORE_V gp0, gp0, a1, 0, 0
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dm = sub.add_parser(
        "demo",
        help="run the built-in demo program and check it against a host golden",
        **examples("plena-sim demo", "plena-sim demo --backend reference"),
    )
    add_backend_arg(dm)
    dm.add_argument("--seed", type=int, default=0)
    dm.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace, out: Console, err: Console) -> int:
    import numpy as np

    from isa import assemble
    from plena_sim.config import default_config
    from plena_sim.machine import Machine
    from plena_sim.memory.image import ImageBuilder, read_tensor
    from plena_sim.numerics import bf16

    cfg = default_config()
    x = np.random.default_rng(args.seed).standard_normal((4, cfg.VLEN)).astype(np.float32)
    m = Machine(cfg, backend=args.backend)
    builder = ImageBuilder(config=cfg, hbm=m.hbm)
    src = builder.add("x", x, "HBM_V_ACT_TYPE", address=0)
    out_place = builder.add("y", np.zeros_like(x), "HBM_V_ACT_TYPE", address=1024)
    m.write_fp_sram(0, [1.5])
    res = m.run(assemble(DEMO_ASM, "demo.asm"))
    got = read_tensor(m.hbm, out_place)
    want_vram = bf16.round_values((src.values * np.float32(1.5)).astype(np.float32))
    want = ImageBuilder(config=cfg).add("y", want_vram, "HBM_V_ACT_TYPE", address=0).values
    ok = bool(np.array_equal(got.view(np.uint32), want.view(np.uint32)))
    run_summary(res, out, "plena-sim demo (scale 4x64 MXFP8 activation by 1.5)")
    out.print(f"output matches the host golden bit for bit: {'[green]PASS[/]' if ok else '[red]FAIL[/]'}")
    return EXIT_OK if ok else EXIT_MISMATCH
