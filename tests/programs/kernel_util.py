"""Factories and generic structural checks for the generator unit tests (kernels.md §1, §6.4).

Each factory plans and emits one kernel with synthetic HBM tensors (no image, no simulator) and returns the
program text.  :func:`structural_suite` runs the checks shared by every kernel: the program assembles over
a parameter grid, registers come only from the caller's lists, begin/end comments, determinism, hooks-off
byte identity and live hooks.
"""

from __future__ import annotations

import re

from isa.assembler import assemble
from programs import mutation_hooks
from programs.asm import Asm
from programs.hbm_tensors import HbmTensor

GP = tuple(range(1, 13))
FP = tuple(range(1, 7))
ODD_GP = (15, 13, 11, 9, 7, 5, 3, 14, 12, 10, 8, 6)
ODD_FP = (7, 5, 3, 6, 4, 2)


def tensor(
    areg: int, rows: int, cols: int, *, prec: int = 0, alloc_rows: int | None = None, eb: int = 1, block: int = 8
) -> HbmTensor:
    n = max(rows, alloc_rows or 0) * cols
    return HbmTensor(areg=areg, scale_offset=n * eb, eb=eb, prec=prec, row_pitch_elems=cols, alloc_elems=n, block=block)


def registers_used(text: str) -> tuple[set[int], set[int], set[int]]:
    gps, fps, ars = set(), set(), set()
    for line in text.splitlines():
        if line.startswith(";"):
            continue
        gps |= {int(x) for x in re.findall(r"\bgp(\d+)\b", line)}
        fps |= {int(x) for x in re.findall(r"\bf(\d+)\b", line)}
        ars |= {int(x) for x in re.findall(r"\ba(\d+)\b", line)}
    return gps, fps, ars


def emit_text(emit, plan, gp=GP, fp=FP) -> str:
    a = Asm()
    emit(a, plan, gp=gp, fp=fp)
    return a.text()


def check_assembles(text: str) -> None:
    prog = assemble(text, "<test>")
    assert len(prog) > 0


def check_registers(make, **params) -> None:
    """With unusual register lists the program touches only those registers (plus gp0/f0)."""
    text = make(gp=ODD_GP, fp=ODD_FP, **params)
    gps, fps, _ = registers_used(text)
    assert gps <= set(ODD_GP) | {0}, f"gp registers outside the list: {gps - set(ODD_GP) - {0}}"
    assert fps <= set(ODD_FP) | {0}, f"fp registers outside the list: {fps - set(ODD_FP) - {0}}"


def check_begin_end(text: str, kernel: str) -> None:
    lines = [l for l in text.splitlines() if l.startswith(";")]
    assert any(l.startswith(f"; {kernel} begin") for l in lines), f"no '; {kernel} begin' comment"
    assert any(l == f"; {kernel} end" for l in lines), f"no '; {kernel} end' comment"


def check_deterministic_and_hooks(make, own_hooks: dict, **params) -> None:
    """Same inputs -> same text; an unrelated hook changes nothing; each own hook changes the text or
    raises a ValueError (it is live) for the parameters given in ``own_hooks[hook]``."""
    t1 = make(**params)
    assert make(**params) == t1
    with mutation_hooks.inject("kv_tile_offset_ignored", "causal_ignored"):
        assert make(**params) == t1
    for hook, hp in own_hooks.items():
        p = dict(params, **hp)
        base = make(**p)
        with mutation_hooks.inject(hook):
            try:
                mutated = make(**p)
            except ValueError:
                continue
        assert mutated != base, f"hook {hook} does not change the emitted text"


#: the instructions an operation log leaves out: scalar integer arithmetic and loop control
_POINTER_OPS = frozenset(
    ("S_ADDI_INT", "S_ADD_INT", "S_SUB_INT", "S_MUL_INT", "S_LUI_INT", "C_LOOP_START", "C_LOOP_END", "C_BREAK")
)


def operation_log(text: str, cfg, int_sram=None) -> list[tuple]:
    """Every instruction the program executes except pointer arithmetic and loop control, in order, as
    ``(mnemonic, operands)`` with each ``gpN`` operand replaced by the value gp[N] holds then (the scalar
    trace of tests/util/scalar_trace.py).  Two programs with the same log issue the same compute and memory
    operations on the same addresses in the same order, however they compute the addresses."""
    from isa.table import INSTRUCTIONS
    from tests.util import scalar_trace

    prog = assemble(text, "<log>")
    log: list[tuple] = []
    ops = scalar_trace._OPS
    saved = dict(ops)

    def recorder(orig):
        def rec(tr, d):
            mn, _, rest = prog.source[tr.pc].text.split(";")[0].strip().partition(" ")
            vals = tuple(
                tr.gpr[int(o[2:])] if re.fullmatch(r"gp\d+", o) else o for o in (x.strip() for x in rest.split(","))
            )
            log.append((mn, vals))
            return orig(tr, d) if orig is not None else None

        return rec

    try:
        for ins in INSTRUCTIONS:
            if ins.mnemonic not in _POINTER_OPS:
                ops[ins.mnemonic] = recorder(saved.get(ins.mnemonic))
        scalar_trace.trace(prog, cfg, int_sram=int_sram)
    finally:
        ops.clear()
        ops.update(saved)
    return log
