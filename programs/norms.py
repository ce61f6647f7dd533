"""``rms_norm`` and ``layer_norm`` (kernels.md §2.6) over a CBM activation ``X[rows, hidden]``.

RMSNorm ``y = x / sqrt(mean(x²) + eps) · γ``; LayerNorm ``y = (x − μ) / sqrt(var + eps) · γ + β``, two-pass and
centred (the ``E[x²] − E[x]²`` form is forbidden).  EPS (slot 1) and INV_HIDDEN (slot 2) are loaded once;
γ and β are HBM vectors loaded with ``load_vector`` into declared regions of ``round_up(hidden/V, Pv)`` rows.
A private scratch row ``t`` (never aliasing X) holds the squares.  Y may equal X.  Rows are one hardware
loop; every pass over the ``hidden/V`` column blocks is a nested hardware loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from plena_sim.config import HardwareConfig

from . import mutation_hooks
from .asm import IMM18_LIMIT, LOOP_COUNT_MAX, Asm, load_imm, region
from .asm import fp as F
from .asm import gp as G
from .common import (
    SLOT,
    LoopBudget,
    check_addr,
    check_disjoint,
    fail,
    need_int,
    need_multiple,
    out_pointer,
    step_adder,
    take_regs,
    vector_rows,
)
from .footprint import KernelPlan
from .hbm_tensors import HbmTensor, load_vector

__all__ = ["NormPlan", "plan_rms_norm", "plan_layer_norm", "emit_rms_norm", "emit_layer_norm"]


@dataclass(frozen=True)
class NormPlan(KernelPlan):
    kernel: str
    rows: int
    hidden: int
    x_base: int
    pitch: int
    y_base: int
    t_base: int
    gamma: HbmTensor | None
    gamma_base: int | None
    beta: HbmTensor | None
    beta_base: int | None
    V: int
    nb: int


def _plan(
    kernel: str,
    cfg: HardwareConfig,
    rows: int,
    hidden: int,
    x_base: int,
    pitch: int,
    y_base: int,
    t_base: int,
    gamma: HbmTensor | None,
    gamma_base: int | None,
    beta: HbmTensor | None,
    beta_base: int | None,
) -> NormPlan:
    V = cfg.VLEN
    need_int(kernel, "rows", rows, 1, LOOP_COUNT_MAX)
    need_int(kernel, "hidden", hidden, 1)
    need_multiple(kernel, "hidden", hidden, V, "VLEN")
    need_int(kernel, "pitch", pitch, 1)
    if rows > pitch:
        fail(kernel, "pitch", pitch, f"must be >= rows={rows}")
    nb = hidden // V
    for name, v in (("x_base", x_base), ("y_base", y_base), ("t_base", t_base)):
        need_int(kernel, name, v, 0)
        need_multiple(kernel, name, v, V, "VLEN")
    n = nb * pitch
    regions = {"x": (x_base // V, n, "inout" if y_base == x_base else "input"), "t": (t_base // V, 1, "scratch")}
    if y_base != x_base:
        regions["y"] = (y_base // V, n, "output")
    slack = {}
    vr = vector_rows(cfg, hidden)
    for pname, t, base in (("gamma", gamma, gamma_base), ("beta", beta, beta_base)):
        if t is None:
            continue
        if base is None:
            fail(kernel, f"{pname}_base", None, f"is required with {pname}")
        need_int(kernel, f"{pname}_base", base, 0)
        need_multiple(kernel, f"{pname}_base", base, V, "VLEN")
        if t.alloc_elems < vr * V:
            fail(kernel, f"{pname}.alloc_elems", t.alloc_elems, f"must be >= {vr * V} (Pv-row slack)")
        regions[pname] = (base // V, vr, "scratch")
        slack[pname] = vr * V
    for name, (r0, k, _role) in regions.items():
        check_addr(kernel, f"{name} region end", (r0 + k) * V)
    check_disjoint(kernel, regions)
    # a block stride pitch*V past the S_ADDI_INT immediate lives in a register: gBc without beta, else a 10th
    gp_needed = 10 if (pitch * V >= IMM18_LIMIT and beta is not None) else 9
    return NormPlan(
        kernel,
        rows,
        hidden,
        x_base,
        pitch,
        y_base,
        t_base,
        gamma,
        gamma_base,
        beta,
        beta_base,
        V,
        nb,
        vram_regions=regions,
        hbm_slack=slack,
        cfg=cfg,
        gp_needed=gp_needed,
        fp_needed=6,
    )


def plan_rms_norm(
    config: HardwareConfig,
    *,
    rows: int,
    hidden: int,
    x_base: int,
    pitch: int,
    y_base: int,
    t_base: int,
    gamma: HbmTensor | None = None,
    gamma_base: int | None = None,
) -> NormPlan:
    return _plan("rms_norm", config, rows, hidden, x_base, pitch, y_base, t_base, gamma, gamma_base, None, None)


def plan_layer_norm(
    config: HardwareConfig,
    *,
    rows: int,
    hidden: int,
    x_base: int,
    pitch: int,
    y_base: int,
    t_base: int,
    gamma: HbmTensor | None = None,
    gamma_base: int | None = None,
    beta: HbmTensor | None = None,
    beta_base: int | None = None,
) -> NormPlan:
    return _plan("layer_norm", config, rows, hidden, x_base, pitch, y_base, t_base, gamma, gamma_base, beta, beta_base)


def _emit(asm: Asm, plan: NormPlan, gp: Sequence[int], fp: Sequence[int]) -> None:
    """The kernel frame and its region (named after the kernel) around :func:`_emit_body`."""
    regs, fregs = take_regs(plan.kernel, gp, fp, plan.gp_needed, plan.fp_needed)
    asm.begin(
        plan.kernel,
        rows=plan.rows,
        hidden=plan.hidden,
        x=plan.x_base,
        y=plan.y_base,
        t=plan.t_base,
        gamma=int(plan.gamma is not None),
        beta=int(plan.beta is not None),
    )
    with region(asm, plan.kernel):
        _emit_body(asm, plan, regs, fregs)
    asm.end(plan.kernel)


def _emit_body(asm: Asm, plan: NormPlan, regs: Sequence[int], fregs: Sequence[int]) -> None:
    gX, gY, gXc, gYc, gGc, gBc, gT, gL, gLc = regs[:9]
    fa, fmu, fq, fEps, fInvH, fk = fregs
    V, nb, cfg = plan.V, plan.nb, plan.cfg
    step = plan.pitch * V
    ln = plan.kernel == "layer_norm"
    lb = LoopBudget(asm, cfg, plan.kernel)
    if plan.gamma is not None:
        asm.comment(f"{plan.kernel}: load gamma")
        assert plan.gamma_base is not None  # _plan requires it with gamma
        with region(asm, "load_gamma"):
            load_vector(asm, cfg, plan.gamma, plan.hidden, plan.gamma_base, [gX, gY, gL, gLc, gT])
    if plan.beta is not None:
        asm.comment(f"{plan.kernel}: load beta")
        assert plan.beta_base is not None  # _plan requires it with beta
        with region(asm, "load_beta"):
            load_vector(asm, cfg, plan.beta, plan.hidden, plan.beta_base, [gX, gY, gL, gLc, gT])
    asm.comment(f"{plan.kernel}: constants EPS, INV_HIDDEN")
    swapped = mutation_hooks.active("norm_slots_swapped")
    asm.S_LD_FP(F(fEps), G(0), SLOT["INV_HIDDEN"] if swapped else SLOT["EPS"])
    asm.S_LD_FP(F(fInvH), G(0), SLOT["EPS"] if swapped else SLOT["INV_HIDDEN"])
    # block stride (pitch*V) past the immediate: gBc holds it when there is no beta pointer, else a 10th register
    adv = step_adder(asm, [gBc] if plan.beta is None else regs[9:], step)

    def blocks(name: str, body: Callable[[], None]) -> None:
        short = name == "sum of squares" and nb > 1 and mutation_hooks.active("rms_blocks_short")
        with region(asm, name.replace(" ", "_")), lb.loop(gLc, nb - 1 if short else nb, name):
            body()

    load_imm(asm, gX, plan.x_base)
    gY = out_pointer(asm, gX, gY, plan.x_base, plan.y_base)
    load_imm(asm, gT, plan.t_base)
    gamma_once = plan.gamma is not None and mutation_hooks.active("norm_gamma_pointer_not_reset")
    _param_pointers(asm, plan, gGc, gBc, gamma=gamma_once, beta=False)  # mutation: row r >= 1 reads past gamma
    asm.comment(f"{plan.kernel}: rows loop")
    with lb.loop(gL, plan.rows, "rows"):
        one_pass = ln and mutation_hooks.active("ln_one_pass_variance")
        if not ln:
            asm.comment("rms_norm: sum of squares")
            _reset_acc(asm, fa, "rms_acc_not_reset")
            asm.S_ADDI_INT(G(gXc), G(gX), 0)
            tgt = gXc if mutation_hooks.active("rms_scratch_aliases_x") else gT

            def sq() -> None:
                asm.V_MUL_VV(G(tgt), G(gXc), G(gXc), 0)
                asm.V_RED_SUM(F(fa), G(tgt), 0)
                adv(gXc)

            blocks("sum of squares", sq)
            _mean(asm, fa, fInvH, fEps, rms=True)
        elif one_pass:
            asm.comment("layer_norm: one-pass E[x^2]-E[x]^2 (mutation)")
            asm.S_ADD_FP(F(fa), F(0), F(0))
            asm.S_ADD_FP(F(fq), F(0), F(0))
            asm.S_ADDI_INT(G(gXc), G(gX), 0)

            def both() -> None:
                asm.V_RED_SUM(F(fa), G(gXc), 0)
                asm.V_MUL_VV(G(gT), G(gXc), G(gXc), 0)
                asm.V_RED_SUM(F(fq), G(gT), 0)
                adv(gXc)

            blocks("moments", both)
            asm.S_MUL_FP(F(fmu), F(fa), F(fInvH))
            asm.S_MUL_FP(F(fq), F(fq), F(fInvH))
            asm.S_MUL_FP(F(fa), F(fmu), F(fmu))
            asm.S_SUB_FP(F(fa), F(fq), F(fa))
            asm.S_ADD_FP(F(fq), F(0), F(0))
            _ln_centre(asm, gX, gY, gXc, gYc, fmu, fq, blocks, adv)
        else:
            # The mean is formed in compensated (double-bf16) arithmetic.  Each block sum S_c (an f32 value
            # inside V_RED_SUM) is split exactly enough into hi = bf16(S_c) and lo = bf16(S_c - hi) (the
            # second V_RED_SUM starts from -hi, so only the small remainder is rounded); the hi parts are
            # added with TwoSum (exact error term in any RN binary format), the lo parts and the TwoSum
            # errors go to a small second accumulator.  FP registers are bf16, so the mean is kept as
            # mu1 = bf16(mu) plus delta = mu - mu1, and X is centred as (x - mu1) - delta.  A plain bf16
            # sum of the block sums (the literal §2.6 pattern) is off by up to ulp(mu)/2 (0.06 at mu = 16)
            # plus 2^-9*|S_c| per block, which fails the ln tolerance on mean-offset rows (rel_rms) and on
            # rows whose mean is small next to their block sums.
            asm.comment("layer_norm: pass 1, compensated mean mu = mu1 + delta")
            fs, fhi, flo = fa, fmu, fEps
            _reset_acc(asm, fs, "ln_mean_acc_not_reset")
            asm.S_ADD_FP(F(flo), F(0), F(0))
            asm.S_ADDI_INT(G(gXc), G(gX), 0)

            def msum() -> None:
                asm.S_ADD_FP(F(fhi), F(0), F(0))
                asm.V_RED_SUM(F(fhi), G(gXc), 0)  # hi = bf16(S_c)
                asm.S_SUB_FP(F(fk), F(0), F(fhi))
                asm.V_RED_SUM(F(fk), G(gXc), 0)  # lo = bf16(S_c - hi)
                asm.S_ADD_FP(F(flo), F(flo), F(fk))
                asm.S_ADD_FP(F(fk), F(fs), F(fhi))  # s' = s + hi   (TwoSum)
                asm.S_SUB_FP(F(fq), F(fk), F(fs))  # bb = s' - s
                asm.S_SUB_FP(F(fhi), F(fhi), F(fq))  # hi - bb
                asm.S_SUB_FP(F(fq), F(fk), F(fq))  # s' - bb
                asm.S_SUB_FP(F(fq), F(fs), F(fq))  # s - (s' - bb)
                asm.S_ADD_FP(F(fq), F(fq), F(fhi))  # err
                asm.S_ADD_FP(F(flo), F(flo), F(fq))
                asm.S_ADD_FP(F(fs), F(fk), F(0))  # s = s'
                adv(gXc)

            blocks("mean", msum)
            asm.S_ADD_FP(F(fmu), F(fs), F(flo))
            asm.S_MUL_FP(F(fmu), F(fmu), F(fInvH))  # mu1 = bf16(mu)
            asm.S_MUL_FP(F(fq), F(fs), F(fInvH))
            asm.S_SUB_FP(F(fq), F(fq), F(fmu))
            asm.S_MUL_FP(F(fk), F(flo), F(fInvH))
            asm.S_ADD_FP(F(fq), F(fq), F(fk))  # delta = (s*invH - mu1) + lo*invH
            _ln_centre(asm, gX, gY, gXc, gYc, fmu, fq, blocks, adv)
            asm.comment("layer_norm: pass 3, variance of the centred values")
            asm.S_ADD_FP(F(fa), F(0), F(0))
            yc = gYc if gY != gX else gXc
            asm.S_ADDI_INT(G(yc), G(gY), 0)

            def var() -> None:
                asm.V_MUL_VV(G(gT), G(yc), G(yc), 0)
                asm.V_RED_SUM(F(fa), G(gT), 0)
                adv(yc)

            blocks("variance", var)
            asm.S_MUL_FP(F(fa), F(fa), F(fInvH))
        if ln:
            asm.S_LD_FP(F(fEps), G(0), SLOT["INV_HIDDEN"] if swapped else SLOT["EPS"])
        _inv_root(asm, fa, fEps)
        asm.comment(f"{plan.kernel}: scale")
        src = gY if ln else gX
        asm.S_ADDI_INT(G(gXc), G(src), 0)
        if gY != src:
            asm.S_ADDI_INT(G(gYc), G(gY), 0)
        yc = gYc if gY != src else gXc
        _param_pointers(asm, plan, gGc, gBc, gamma=plan.gamma is not None and not gamma_once, beta=True)

        def scale() -> None:
            asm.V_MUL_VF(G(yc), G(gXc), F(fa), 0)
            if plan.gamma is not None:
                asm.V_MUL_VV(G(yc), G(yc), G(gGc), 0)
                if not mutation_hooks.active("norm_gamma_not_advanced"):
                    asm.S_ADDI_INT(G(gGc), G(gGc), V)
            if plan.beta is not None:
                asm.V_ADD_VV(G(yc), G(yc), G(gBc), 0)
                asm.S_ADDI_INT(G(gBc), G(gBc), V)
            adv(gXc)
            if yc != gXc:
                adv(yc)

        blocks("scale", scale)
        asm.S_ADDI_INT(G(gX), G(gX), V)
        if gY != gX:
            asm.S_ADDI_INT(G(gY), G(gY), V)


def _reset_acc(asm: Asm, f: int, hook: str) -> None:
    """``f = 0`` at the start of a row's reduction (skipped under the mutation ``hook``)."""
    if not mutation_hooks.active(hook):
        asm.S_ADD_FP(F(f), F(0), F(0))


def _mean(asm: Asm, fa: int, fInvH: int, fEps: int, rms: bool) -> None:
    """``fa = fa/hidden`` (the ``rms_eps_before_mean`` mutation: ``(fa + eps)/hidden``, eps added to the sum)."""
    if rms and mutation_hooks.active("rms_eps_before_mean"):
        asm.S_ADD_FP(F(fa), F(fa), F(fEps))
    asm.S_MUL_FP(F(fa), F(fa), F(fInvH))


def _inv_root(asm: Asm, fa: int, fEps: int) -> None:
    """``fa = 1/sqrt(fa + eps)`` (the ``norm_eps_after_sqrt`` mutation: ``1/(sqrt(fa) + eps)``; under
    ``rms_eps_before_mean`` eps is already in the sum)."""
    if mutation_hooks.active("rms_eps_before_mean"):
        asm.S_SQRT_FP(F(fa), F(fa))
    elif mutation_hooks.active("norm_eps_after_sqrt"):
        asm.S_SQRT_FP(F(fa), F(fa))
        asm.S_ADD_FP(F(fa), F(fa), F(fEps))
    else:
        asm.S_ADD_FP(F(fa), F(fa), F(fEps))
        asm.S_SQRT_FP(F(fa), F(fa))
    asm.S_RECI_FP(F(fa), F(fa))


def _param_pointers(asm: Asm, plan: NormPlan, gGc: int, gBc: int, *, gamma: bool, beta: bool) -> None:
    """Point gGc at gamma (if ``gamma``) and gBc at beta (if ``beta`` and the plan has one)."""
    if gamma:
        assert plan.gamma_base is not None  # _plan requires it with gamma
        load_imm(asm, gGc, plan.gamma_base)
    if beta and plan.beta is not None:
        assert plan.beta_base is not None
        load_imm(asm, gBc, plan.beta_base)


def _ln_centre(
    asm: Asm,
    gX: int,
    gY: int,
    gXc: int,
    gYc: int,
    fmu: int,
    fq: int,
    blocks: Callable[[str, Callable[[], None]], None],
    adv: Callable[[int], None],
) -> None:
    """Y = (X - mu1) - delta, per column block (pass 2)."""
    asm.comment("layer_norm: pass 2, centre into Y")
    asm.S_ADDI_INT(G(gXc), G(gX), 0)
    if gY != gX:
        asm.S_ADDI_INT(G(gYc), G(gY), 0)
    yc = gYc if gY != gX else gXc

    def centre() -> None:
        asm.V_SUB_VF(G(yc), G(gXc), F(fmu), 0, 0)
        asm.V_SUB_VF(G(yc), G(yc), F(fq), 0, 0)
        adv(gXc)
        if yc != gXc:
            adv(yc)

    blocks("centre", centre)


def emit_rms_norm(asm: Asm, plan: NormPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    if plan.kernel != "rms_norm":
        raise ValueError(f"emit_rms_norm: plan is for {plan.kernel}")
    _emit(asm, plan, gp, fp)


def emit_layer_norm(asm: Asm, plan: NormPlan, *, gp: Sequence[int], fp: Sequence[int]) -> None:
    if plan.kernel != "layer_norm":
        raise ValueError(f"emit_layer_norm: plan is for {plan.kernel}")
    _emit(asm, plan, gp, fp)
