"""Emitting a flash plan: the public ``emit_*`` entry points (a plan bound to its tensors, the registers
taken) and :func:`emit_kernel`, which the plan's dry run shares."""

from __future__ import annotations

from collections.abc import Sequence

from ..asm import Asm
from ..common import take_regs
from .emit_flash import FlashEmitter
from .emit_scores import ScoresEmitter
from .loops import Tracker
from .plan import FP_NEEDED, GP_NEEDED, FlashPlan

__all__ = ["emit_flash_attention", "emit_attention_scores", "emit_kernel"]


def emit_kernel(tr: Tracker, plan: FlashPlan, gpr: Sequence[int], fpr: Sequence[int]) -> None:
    """Emit ``plan`` through ``tr`` with the registers ``gpr``/``fpr``, already taken and checked."""
    if plan.kernel == "flash_attention":
        FlashEmitter(tr, plan, gpr, fpr).run()
    else:
        ScoresEmitter(tr, plan, gpr, fpr).run()


def _check_bound(kernel: str, plan: FlashPlan) -> None:
    if plan.q is None or plan.k is None or plan.v is None:
        raise ValueError(f"{kernel}: the plan has no q/k tensors (planned for sizing only); plan again with q=, k=, v=")


def emit_flash_attention(asm: Asm, plan: FlashPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    """Emit the flash-attention program of ``plan`` into ``asm`` using the registers ``gp``/``fp``."""
    if plan.kernel != "flash_attention":
        raise ValueError(f"flash_attention: plan is for {plan.kernel}")
    _check_bound("flash_attention", plan)
    gpr, fpr = take_regs("flash_attention", gp, fp, plan.gp_needed, FP_NEEDED)
    tr = Tracker(asm, plan.config.MAX_LOOP_INSTRUCTIONS, "flash_attention")
    emit_kernel(tr, plan, gpr, fpr)


def emit_attention_scores(asm: Asm, plan: FlashPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    """Emit attention_scores (§2.11) of ``plan`` into ``asm``."""
    if plan.kernel != "attention_scores":
        raise ValueError(f"attention_scores: plan is for {plan.kernel}")
    _check_bound("attention_scores", plan)
    gpr, fpr = take_regs("attention_scores", gp, fp, GP_NEEDED, FP_NEEDED)
    tr = Tracker(asm, plan.config.MAX_LOOP_INSTRUCTIONS, "attention_scores")
    emit_kernel(tr, plan, gpr, fpr)
